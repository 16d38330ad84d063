"""The region the node agent writes (shim.RegionSpec, regions.place) is what the real library
uses, with the agent's limits, when it is mounted at the library's fixed path (/var/run/gpuslice):
a tenant's env (a ConfigMap the kubelet applies after Allocate) can neither raise nor remove the
cap, nor point the library at a region of its own; every uid of the container shares it; the
container's first process claims it for its pid namespace, another live namespace is refused,
and a restarted container (new namespace) takes it over once the old processes are gone.
The agent's node-wide board (mounted at /var/run/gpuslice-board) is the only board such a
container uses: its work-conserving mode and time-slice correction see the other tenants, and a
tenant's own GPUSLICE_BOARD_DIR never counts.
"Containers" are `unshare -m` (+ `-p`) processes with the region directory bind-mounted at the
fixed path, as the kubelet mounts it (needs root and unshare(1), as CI and this machine have)."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from harness import (
    CUDA_ERROR_OUT_OF_MEMORY,
    CUDA_SUCCESS,
    Harness,
    MiB,
    Result,
    Spawned,
    dir_for_every_uid,
    read_line,
)

from gpuslice.container import regions
from gpuslice.shim import AGENT_BOARD, AGENT_REGION, Region, RegionSpec

GPU0 = "GPU-face0000-0000-0000-0000-000000000000"  # the fake driver's device 0
NOBODY = 65534
CUDA_ERROR_OPERATING_SYSTEM = 304
SPEC = RegionSpec(device_uuids=(GPU0,), limits=(64 * MiB,), sm_limit=30, compute_mode="hard",
                  priority=1)
# the tenant's own env, applied by the kubelet after the agent's: every way to gain it has
TENANT = {"CUDA_DEVICE_MEMORY_LIMIT_0": "1Ti", "CUDA_DEVICE_MEMORY_LIMIT": "1Ti",
          "CUDA_DEVICE_SM_LIMIT": "0", "CUDA_TASK_PRIORITY": "0",
          "GPUSLICE_COMPUTE_MODE": "work-conserving", "GPUSLICE_BOARD_DIR": "/tmp/own-board",
          "LIBCUDA_LOG_LEVEL": "2"}
# mount what the kubelet mounts (the board: when $GS_BOARD is set), then run the command (as
# $GS_USER when set)
_MOUNT = ('mount -t tmpfs none /run && mkdir -p {dir} && mount --bind "$0" {dir} && '
          'if [ -n "$GS_BOARD" ]; then mkdir -p {board} && mount --bind "$GS_BOARD" {board}; fi && '
          'if [ -n "$GS_USER" ]; then exec setpriv --reuid "$GS_USER" --regid "$GS_USER" '
          '--clear-groups "$@"; else exec "$@"; fi').format(dir=os.path.dirname(AGENT_REGION),
                                                            board=AGENT_BOARD)



def _cannot_emulate_a_container() -> bool:
    """No root, unshare(1) or setpriv(1), or no right to mount (an unprivileged CI container)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("setpriv") is None:
        return True
    probe = ["unshare", "--mount", "--pid", "--fork", "--mount-proc", "mount", "-t", "tmpfs",
             "none", "/run"]
    return subprocess.run(probe, capture_output=True, timeout=30).returncode != 0


pytestmark = pytest.mark.skipif(_cannot_emulate_a_container(),
                                reason="needs root, unshare(1), setpriv(1) and mount rights")


@pytest.fixture
def node(gs: Harness) -> Iterator[Path]:
    """A host directory every uid can reach: the agent's region directory for one container, the
    fake driver's state (writable by all, as the GPU is) and a copy of the probe."""
    with dir_for_every_uid(gs, "gpuslice-agent-", 0o755) as path:
        regions.place(regions.prepare(path / "regions", "uid-p", "main") / "region", SPEC)
        regions.prepare_board(path)
        yield path


def _region_dir(node: Path) -> Path:
    return node / "regions" / "uid-p" / "main"


def _argv(node: Path, cmds: tuple[object, ...], pid_ns: bool) -> list[str]:
    ns = ["--pid", "--fork", "--kill-child", "--mount-proc"] if pid_ns else []
    return ["unshare", "--mount", *ns, "sh", "-c", _MOUNT, str(_region_dir(node)),
            str(node / "probe"), *map(str, cmds)]


def _env(gs: Harness, node: Path, user: int | None, extra: dict[str, str] | None,
         board: bool = True) -> dict[str, str]:
    env = gs.env(region=Path("/tmp/elsewhere.region"), extra=extra)  # the env's path is ignored
    env["FAKE_CUDA_STATE"] = str(node / "fake.state")
    env["GS_USER"] = "" if user is None else str(user)
    env["GS_BOARD"] = str(node / "board") if board else ""
    return env


def _in_container(gs: Harness, node: Path, *cmds: object, user: int | None = None,
                  pid_ns: bool = False, extra: dict[str, str] | None = None,
                  board: bool = True) -> Result:
    argv = _argv(node, cmds, pid_ns)
    proc = subprocess.run(argv, env=_env(gs, node, user, extra, board), capture_output=True,
                          text=True, timeout=30, cwd=node)
    return Result(argv, proc.returncode, proc.stdout, proc.stderr)


def _spawn_in_container(gs: Harness, node: Path, *cmds: object, pid_ns: bool = False,
                        extra: dict[str, str] | None = None, user: int | None = None) -> Spawned:
    return Spawned(subprocess.Popen(_argv(node, cmds, pid_ns), env=_env(gs, node, user, extra),
                                    text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    cwd=node))


def test_the_agents_limits_cap_the_container_whatever_its_env_says(gs: Harness, node: Path) -> None:
    res = _in_container(gs, node, "init", "ctx", "alloc", 48 * MiB, "alloc", 32 * MiB, "info",
                        extra=TENANT)
    assert res.one("init").rc == CUDA_SUCCESS, res.describe()
    fits, over = (a.rc for a in res.of("alloc"))
    assert (fits, over) == (CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY), (
        f"the region's 64 MiB cap holds against CUDA_DEVICE_MEMORY_LIMIT_0=1Ti:\n{res.describe()}")
    assert res.one("info").int("total") == 64 * MiB, res.describe()
    assert not Path("/tmp/elsewhere.region").exists(), "the env's region path was not used"
    log = "\n".join(res.log_lines())
    assert "CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/elsewhere.region is ignored" in log, log
    # compute: the region's 30 %, hard mode and low priority, not the env's none/work-conserving/0,
    # with the agent's board (hard mode's time-slice correction reads the other tenants there)
    assert f"compute: limit 30% of GPU time, hard mode, priority 1, board {AGENT_BOARD}" in log, log
    assert "GPUSLICE_BOARD_DIR=/tmp/own-board is ignored" in log, "a private board never counts"


def _live_slots(board: Path) -> list[tuple[int, int, int]]:
    """(limit_pct, mode, heartbeat_ns) of each claimed slot of a board file (compute/board.h)."""
    data = board.read_bytes()
    slots = [struct.unpack_from("<QQQIII", data, 64 + 64 * i) for i in range(64)]
    return [(pct, mode, beat) for owner, _, beat, _, pct, mode in slots if owner]


def test_a_work_conserving_container_beats_on_the_agents_board_not_its_own(
        gs: Harness, node: Path) -> None:
    regions.place(_region_dir(node) / "region", replace(SPEC, compute_mode="work-conserving"))
    shutil.rmtree("/tmp/own-board", ignore_errors=True)
    tenant = _spawn_in_container(gs, node, "init", "ctx", "launch", 100, 20, "hold",
                                 user=NOBODY, extra=TENANT)
    try:
        assert read_line(tenant, "launch").rc == CUDA_SUCCESS, tenant.stderr
        board = node / "board" / f"{GPU0}.board"
        assert [(pct, mode) for pct, mode, beat in _live_slots(board) if beat] == [(30, 1)], (
            "the tenant's process (uid 65534) claimed a slot on the host's board and beats on it")
        assert (board.stat().st_uid, board.stat().st_mode & 0o7777) == (NOBODY, 0o666), (
            "any uid of any container creates it in the 1777 directory, and any can open it")
    finally:
        tenant.kill()
        tenant.wait()
    assert not Path("/tmp/own-board").exists(), "the tenant's GPUSLICE_BOARD_DIR was not used"
    wc = f"compute: limit 30% of GPU time, work-conserving mode, priority 1, board {AGENT_BOARD}"
    for _ in range(50):  # stderr is drained by a thread
        if wc in tenant.stderr:
            break
        time.sleep(0.1)
    assert wc in tenant.stderr, tenant.stderr


def test_without_the_agents_board_a_tenants_board_dir_still_never_counts(
        gs: Harness, node: Path) -> None:
    regions.place(_region_dir(node) / "region", replace(SPEC, compute_mode="work-conserving"))
    shutil.rmtree("/tmp/own-board", ignore_errors=True)
    res = _in_container(gs, node, "init", "ctx", "launch", 100, 5, extra=TENANT, board=False)
    assert res.one("launch").rc == CUDA_SUCCESS, res.describe()
    log = "\n".join(res.log_lines())
    assert "work-conserving mode, priority 1, board (none)" in log, log
    assert f"the node agent mounts its board at {AGENT_BOARD}" in log, "the warning says why"
    assert not Path("/tmp/own-board").exists(), "an older agent's container: hard mode, no board"


def test_an_env_that_unsets_every_limit_still_gets_the_agents_cap(gs: Harness, node: Path) -> None:
    empty = {"CUDA_DEVICE_MEMORY_LIMIT_0": "", "CUDA_DEVICE_SM_LIMIT": ""}
    res = _in_container(gs, node, "init", "ctx", "alloc", 80 * MiB, extra=empty)
    assert res.one("init").rc == CUDA_SUCCESS, res.describe()
    assert res.one("alloc").rc == CUDA_ERROR_OUT_OF_MEMORY, (
        f"empty values are no limits in env, but the region caps:\n{res.describe()}")


def test_every_uid_of_the_container_shares_the_agents_region(gs: Harness, node: Path) -> None:
    root = _spawn_in_container(gs, node, "init", "ctx", "alloc", 48 * MiB, "hold")
    try:
        assert read_line(root, "alloc").rc == CUDA_SUCCESS, root.stderr
        res = _in_container(gs, node, "init", "ctx", "alloc", 32 * MiB, "alloc", 16 * MiB,
                            user=NOBODY)
        assert res.one("init").rc == CUDA_SUCCESS, f"uid 65534 opens the region:\n{res.describe()}"
        over, fits = (a.rc for a in res.of("alloc"))
        assert over == CUDA_ERROR_OUT_OF_MEMORY, (
            f"48 MiB of root + 32 MiB of uid 65534 pass the one 64 MiB cap:\n{res.describe()}")
        assert fits == CUDA_SUCCESS, res.describe()
    finally:
        root.kill()
        root.wait()


def test_the_first_process_claims_the_region_for_its_pid_namespace(gs: Harness, node: Path) -> None:
    path = _region_dir(node) / "region"
    assert Region.read(path).pid_ns == 0, "the agent cannot know the container's namespace"
    first = _spawn_in_container(gs, node, "init", "ctx", "alloc", 48 * MiB, "hold", pid_ns=True)
    try:
        assert read_line(first, "alloc").rc == CUDA_SUCCESS, first.stderr
        claimed = Region.read(path, check_alive=False).pid_ns
        assert claimed not in (0, os.stat("/proc/self/ns/pid").st_ino)
        other = _in_container(gs, node, "init", "ctx", "alloc", 2 * MiB, pid_ns=True)
        assert other.one("init").rc == CUDA_ERROR_OPERATING_SYSTEM, (
            f"a second live namespace would reclaim the first one's slots:\n{other.describe()}")
        assert any("live processes of another pid namespace" in ln
                   for ln in other.log_lines("E")), other.describe()
    finally:
        first.kill()
        first.wait()
    # the container restarts: a new pid namespace, its old processes gone. The driver freed their
    # memory; the fake driver cannot tell pid 1 of two namespaces apart, so start it afresh
    (node / "fake.state").write_bytes(b"")
    again = _in_container(gs, node, "init", "ctx", "alloc", 48 * MiB, "alloc", 32 * MiB,
                          pid_ns=True)
    assert again.one("init").rc == CUDA_SUCCESS, again.describe()
    assert [a.rc for a in again.of("alloc")] == [CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY], (
        f"the dead instance's 48 MiB are no longer counted, the cap still is:\n{again.describe()}")
    assert Region.read(path, check_alive=False).pid_ns not in (0, claimed)

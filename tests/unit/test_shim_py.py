"""gpuslice.shim: the Python mirror of the region layout, library lookup and `gpuslice run/top`.

Region bytes are built here from the documented layout (docs/shim.md); the C library writing the
same layout is cross-checked in tests/native/unit/test_native_unit.py.
"""

from __future__ import annotations

import json
import os
import stat
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuslice import shim
from gpuslice.errors import GpusliceError, ShimError

MiB = 1 << 20


def region_bytes(*, limits: dict[int, int], slots: list[tuple[int, int, int, dict[int, int]]],
                 magic: int = shim.MAGIC, version: int = shim.VERSION,
                 uuids: dict[int, str] | None = None) -> bytes:
    """A region image: slots are (pid, state, start_time, {device: used})."""
    buf = bytearray(shim.REGION_SIZE)
    struct.pack_into("<QIIIIIIIiiIQQiIQ", buf, 0, magic, version, shim.HEADER_SIZE,
                     shim.DEVICE_SIZE, shim.SLOT_SIZE, shim.MAX_DEVICES, shim.MAX_SLOTS,
                     max(limits, default=-1) + 1, 0, 0, len(slots), 0, 0, 1, 0, shim.REGION_SIZE)
    for dev, limit in limits.items():  # an entry per limit, as GPUSLICE_DEVICE_UUIDS makes them
        uuid = (uuids or {}).get(dev, "").encode()
        struct.pack_into("<Q", buf, 80 + 8 * dev, limit)  # index_limit[dev]
        struct.pack_into("<64sQQII", buf, shim.DEVICES_OFFSET + dev * shim.DEVICE_SIZE, uuid,
                         limit, 0, shim.DEVICE_READY, dev)
    for i, (pid, state, start, used) in enumerate(slots):
        vals = [used.get(d, 0) for d in range(shim.MAX_DEVICES)]
        struct.pack_into(f"<iIQ{shim.MAX_DEVICES}Q", buf, shim.SLOTS_OFFSET + i * shim.SLOT_SIZE,
                         pid, state, start, *vals)
    return bytes(buf)


def own_start_time() -> int:
    text = Path(f"/proc/{os.getpid()}/stat").read_text()
    return int(text[text.rindex(")") + 2:].split()[19])


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_layout_constants_match_the_c_header() -> None:
    header = (Path(__file__).resolve().parents[2] / "native/include/gpuslice/region.h").read_text()
    assert "_Static_assert(GS_REGION_SIZE == 405504" in header, "C layout changed: update shim.py"
    assert shim.REGION_SIZE == 405504, "Python mirror must have the same total size as the C layout"
    assert shim.SLOTS_OFFSET == 4096 + 16 * 512, "slots start after the header and device blocks"


def test_totals_count_only_live_processes(tmp_path: Path) -> None:
    me = os.getpid()
    data = region_bytes(limits={0: 4096 * MiB}, uuids={0: "GPU-abc"}, slots=[
        (me, shim.SLOT_LIVE, own_start_time(), {0: 300 * MiB}),
        (dead_pid(), shim.SLOT_LIVE, 1, {0: 1000 * MiB}),
        (me, shim.SLOT_LIVE, 1, {0: 50 * MiB}),  # our pid but another start time: pid reuse
    ])
    path = tmp_path / "r"
    path.write_bytes(data)
    region = shim.Region.read(path)
    dev = region.devices[0]
    assert (dev.limit, dev.uuid) == (4096 * MiB, "GPU-abc"), "limit and UUID come from device 0"
    assert dev.used == 300 * MiB, "dead pids and reused pids must not count toward the cap"
    assert [p.alive for p in region.processes] == [True, False, False], "liveness per slot"
    assert [d.index for d in region.limited_devices()] == [0], "top shows the device seen by CUDA"


def test_the_node_agent_view_counts_every_live_slot_without_checking_pids(tmp_path: Path) -> None:
    data = region_bytes(limits={0: 1 << 30}, slots=[(dead_pid(), shim.SLOT_LIVE, 5, {0: MiB})])
    region = shim.Region.parse(data, path=tmp_path / "r", check_alive=False)
    assert region.processes[0].alive is None, "another pid namespace: liveness unknown"
    assert region.devices[0].used == MiB, "until the library reclaims a slot, it counts"


@pytest.mark.parametrize(("case", "data", "message"), [
    ("too short", b"\0" * 10, "too short"),
    ("wrong magic", region_bytes(limits={}, slots=[], magic=1), "not a gpuslice region"),
    ("other version", region_bytes(limits={}, slots=[], version=9), "layout version 9"),
    ("truncated", region_bytes(limits={}, slots=[])[:5000], "truncated"),
])
def test_unusable_files_raise_shim_error_naming_the_problem(tmp_path: Path, case: str,
                                                           data: bytes, message: str) -> None:
    path = tmp_path / "r"
    path.write_bytes(data)
    with pytest.raises(ShimError, match=message):
        shim.Region.read(path)


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _symlink_to_a_region(path: Path) -> None:
    real = path.with_name("real")
    real.write_bytes(region_bytes(limits={0: MiB}, slots=[]))
    path.symlink_to(real)


def _oversized(path: Path) -> None:
    path.write_bytes(region_bytes(limits={0: MiB}, slots=[]) + b"\0" * (1 << 20))


def _device(path: Path) -> None:
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero: endless reads


@pytest.mark.parametrize(("make", "message"), [
    pytest.param(_fifo, "not a regular file", id="a FIFO (would block a plain read)"),
    pytest.param(_symlink_to_a_region, "symbolic link", id="a symlink, even to a region"),
    pytest.param(_oversized, "more than a region", id="an oversized file"),
    pytest.param(_device, "not a regular file", id="a device (endless)"),
])
def test_files_a_container_controls_are_refused_without_blocking_or_reading_them(
        tmp_path: Path, make: Any, message: str) -> None:
    # The node agent reads regions that containers can replace: nothing may hang or exhaust it.
    path = tmp_path / "region"
    try:
        make(path)
    except PermissionError:
        pytest.skip("creating a device node needs root")
    with pytest.raises(ShimError, match=message):
        shim.Region.read(path)


def test_only_the_header_declared_size_is_read(tmp_path: Path) -> None:
    data = bytearray(region_bytes(limits={0: MiB}, slots=[]))
    struct.pack_into("<Q", data, 72, 8192)  # header claims a smaller region: never read past it
    path = tmp_path / "r"
    path.write_bytes(bytes(data))
    with pytest.raises(ShimError, match="8192 bytes, expected"):
        shim.Region.read(path)


def test_devices_are_keyed_by_gpu_uuid_for_the_node_agent(tmp_path: Path) -> None:
    data = region_bytes(limits={0: 2 * MiB, 1: 4 * MiB}, uuids={0: "GPU-b", 1: "GPU-a"}, slots=[
        (os.getpid(), shim.SLOT_LIVE, own_start_time(), {1: MiB})])
    region = shim.Region.parse(data, path=tmp_path / "r")
    by_uuid = region.by_uuid()
    assert (by_uuid["GPU-a"].limit, by_uuid["GPU-a"].used) == (4 * MiB, MiB), "entry 1 is GPU-a"
    assert by_uuid["GPU-b"].used == 0 and region.index_limits[:2] == (2 * MiB, 4 * MiB)
    assert region.to_json()["devices"][1]["device_index"] == 1, "the index its limit came from"


def test_a_missing_region_says_how_to_get_one(tmp_path: Path) -> None:
    with pytest.raises(ShimError, match="gpuslice run"):
        shim.Region.read(tmp_path / "nope")


@settings(max_examples=30, deadline=None)
@given(st.lists(st.dictionaries(st.integers(0, 15), st.integers(0, 1 << 40), max_size=4),
                max_size=8))
def test_device_totals_are_the_sum_of_live_slots(used: list[dict[int, int]]) -> None:
    me, start = os.getpid(), own_start_time()
    data = region_bytes(limits={0: 1}, slots=[(me, shim.SLOT_LIVE, start, u) for u in used])
    region = shim.Region.parse(data, path=Path("mem"))
    for d in range(shim.MAX_DEVICES):
        assert region.devices[d].used == sum(u.get(d, 0) for u in used), "derived, never stored"


def test_run_env_preloads_the_library_first_and_sets_the_limits() -> None:
    env = shim.shim_env(library=Path("/lib/libgpuslice.so"), region=Path("/tmp/r"),
                        gpu_memory=4 << 30, gpu_compute=30, compute_mode="hard",
                        base={"LD_PRELOAD": "/other.so", "PATH": "/bin"})
    assert env["LD_PRELOAD"] == "/lib/libgpuslice.so:/other.so", "ours first, others kept"
    assert env["CUDA_DEVICE_MEMORY_LIMIT"] == str(4 << 30), "plain bytes: unambiguous for C"
    assert env["CUDA_DEVICE_SM_LIMIT"] == "30" and env["GPUSLICE_COMPUTE_MODE"] == "hard"
    assert env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] == "/tmp/r" and env["PATH"] == "/bin"


def test_run_returns_the_command_exit_status_and_passes_the_env(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shim, "driver_problem", lambda: None)  # as on a GPU machine
    out = tmp_path / "env"
    rc = shim.run_command(command=["sh", "-c", f'echo "$CUDA_DEVICE_MEMORY_LIMIT" > {out}; exit 3'],
                          gpu_memory="1GiB", gpu_compute=None, compute_mode=None, region=None)
    assert rc == 3, "the command's own exit status is returned"
    assert out.read_text().strip() == str(1 << 30), "the limit reaches the command in bytes"


def test_run_reports_death_by_signal_as_128_plus_signal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shim, "driver_problem", lambda: None)
    rc = shim.run_command(command=["sh", "-c", "kill -9 $$"], gpu_memory=None, gpu_compute=None,
                          compute_mode=None, region=None)
    assert rc == 128 + 9, "shell convention for a killed child"


def test_run_rejects_bad_sizes_and_unknown_commands_before_starting_anything() -> None:
    with pytest.raises(GpusliceError, match=r"--gpu-memory='4GB'.*4GiB"):
        shim.run_command(command=["true"], gpu_memory="4GB", gpu_compute=None, compute_mode=None,
                         region=None)
    with pytest.raises(GpusliceError, match="command not found: no-such-cmd-xyz"):
        shim.run_command(command=["no-such-cmd-xyz"], gpu_memory="1G", gpu_compute=None,
                         compute_mode=None, region=None)


def test_library_path_explains_how_to_build_when_missing(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shim, "__file__", str(tmp_path / "a" / "b" / "shim.py"))
    monkeypatch.delenv("GPUSLICE_LIBRARY", raising=False)
    with pytest.raises(ShimError, match=r"make -C native"):
        shim.library_path()
    lib = tmp_path / "lib.so"
    lib.write_bytes(b"")
    monkeypatch.setenv("GPUSLICE_LIBRARY", str(lib))
    assert shim.library_path() == lib, "GPUSLICE_LIBRARY wins"


def test_top_once_json_prints_one_snapshot(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "r"
    path.write_bytes(region_bytes(limits={0: 2 << 30}, uuids={0: "GPU-x"}, slots=[
        (os.getpid(), shim.SLOT_LIVE, own_start_time(), {0: 5 * MiB})]))
    shim.top_command(region=str(path), once=True, as_json=True)
    snap = json.loads(capsys.readouterr().out)
    assert snap["devices"][0]["used"] == 5 * MiB and snap["devices"][0]["limit"] == 2 << 30
    assert snap["processes"][0]["pid"] == os.getpid(), "per-process rows"
    shim.top_command(region=str(path), once=True, as_json=False)
    assert "GPU-x" in capsys.readouterr().out, "the rich table names the device"

"""The region (and the compute board) cannot be taken over or used as a weapon: a file another
user planted (huge limit), a symlink to a file the library could overwrite, a FIFO, a foreign or
missing file are refused, and CUDA is refused with them (cuInit fails with one log line: never
unlimited, never a private cap per process). A region truncated while processes use it does not
kill them with SIGBUS: they carry on and refuse further allocations (fail closed)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from harness import CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS, Harness, MiB, read_line

from gpuslice.shim import REGION_SIZE, Region

CUDA_ERROR_OPERATING_SYSTEM = 304
STRANGER = 12345  # a uid that is neither root nor the directory's owner


def _missing_directory(gs: Harness) -> Path:
    return gs.tmp / "no-such-dir" / "gpuslice.region"


def _foreign_file(gs: Harness) -> Path:
    path = gs.tmp / "foreign.region"
    path.write_bytes(b"not a gpuslice region".ljust(REGION_SIZE, b"\0"))
    path.chmod(0o666)
    return path


def _planted_by_another_user(gs: Harness) -> Path:
    """A complete region with a 1 TiB cap, made by the library itself, then handed to a stranger:
    what another user in a shared /tmp could leave for us."""
    path = gs.tmp / "planted.region"
    made = gs.probe("init", limit="1Ti", region=path)
    assert made.one("init").rc == CUDA_SUCCESS, made.describe()
    os.chown(path, STRANGER, STRANGER)
    return path


def _fifo(gs: Harness) -> Path:
    path = gs.tmp / "fifo.region"
    os.mkfifo(path, 0o666)
    return path


SETUPS: list[tuple[str, Callable[[Harness], Path], str]] = [
    ("missing directory", _missing_directory, "cannot create"),
    ("foreign file", _foreign_file, "not a gpuslice region"),
    ("planted by another user with a 1 TiB cap", _planted_by_another_user, "owned by uid 12345"),
    ("a FIFO (would block a plain open)", _fifo, "not a regular file"),
]


@pytest.mark.parametrize(("setup", "reason"), [pytest.param(s, r, id=i) for i, s, r in SETUPS])
def test_an_unusable_region_refuses_cuda_with_one_line_saying_why(
        gs: Harness, setup: Callable[[Harness], Path], reason: str) -> None:
    region = setup(gs)
    res = gs.probe("init", "ctx", "alloc", 128 * MiB, limit="64Mi", region=region, timeout=10)
    assert res.one("init").rc == CUDA_ERROR_OPERATING_SYSTEM, (
        f"cuInit fails closed: no private cap, no foreign cap:\n{res.describe()}")
    assert res.one("alloc").rc != CUDA_SUCCESS, f"nothing can be allocated:\n{res.describe()}"
    errors = res.log_lines("E")
    assert len(errors) == 1 and reason in errors[0] and "refused" in errors[0], (
        f"one error line names the problem and the fix:\n{res.describe()}")


def test_a_symlink_planted_at_the_path_is_never_followed(gs: Harness) -> None:
    victim = gs.tmp / "victim"  # an empty file the library could otherwise size and write
    victim.write_bytes(b"")
    victim.chmod(0o666)
    region = gs.tmp / "link.region"
    region.symlink_to(victim)
    res = gs.probe("init", limit="64Mi", region=region)
    assert res.one("init").rc == CUDA_ERROR_OPERATING_SYSTEM, res.describe()
    assert victim.read_bytes() == b"", "the symlink's target is untouched"
    assert any("symbolic link" in ln for ln in res.log_lines("E")), res.describe()


def test_a_region_with_another_mode_is_refused(gs: Harness) -> None:
    assert gs.probe("init", limit="64Mi").one("init").rc == CUDA_SUCCESS
    gs.region.chmod(0o644)  # other uids of the container could no longer share it
    res = gs.probe("init", limit="64Mi")
    assert res.one("init").rc == CUDA_ERROR_OPERATING_SYSTEM, res.describe()
    assert any("mode 0644" in ln for ln in res.log_lines("E")), res.describe()


def test_a_region_created_by_the_library_is_complete_and_shared_by_any_uid(gs: Harness) -> None:
    res = gs.probe("init", limit="64Mi")
    assert res.one("init").rc == CUDA_SUCCESS, res.describe()
    st = gs.region.stat()
    assert (st.st_mode & 0o7777, st.st_size) == (0o666, REGION_SIZE), "0666 whatever the umask"
    assert Region.read(gs.region).index_limits[0] == 64 * MiB
    assert sorted(p.name for p in gs.tmp.iterdir() if p.name.endswith(".tmp")) == [], (
        "no temporary file is left behind")


def test_a_region_truncated_while_in_use_does_not_kill_its_processes(gs: Harness) -> None:
    go = gs.tmp / "truncated"
    proc = gs.spawn("init", "ctx", "alloc", 8 * MiB, "waitfile", go, "alloc", 2 * MiB, "info",
                    limit="64Mi")
    try:
        assert read_line(proc, "alloc").rc == CUDA_SUCCESS
        os.truncate(gs.region, 0)  # any process of the container can do this to the file
        go.write_text("")
        assert read_line(proc, "waitfile").rc == 0
        after = read_line(proc, "alloc")
        assert proc.wait() == 0, f"no SIGBUS: exit {proc.popen.returncode}\n{proc.stderr}"
    finally:
        proc.kill()
    assert after.rc == CUDA_ERROR_OUT_OF_MEMORY, f"fail closed after the truncation: {after.text}"
    assert "truncated" in proc.stderr, f"one line says what happened:\n{proc.stderr}"
    assert proc.popen.returncode != -signal.SIGBUS


BOARD_ENV = {"CUDA_DEVICE_SM_LIMIT": "50", "GPUSLICE_COMPUTE_MODE": "work-conserving"}


def _board_dir(gs: Harness) -> Path:
    board_dir = gs.tmp / "boards"
    board_dir.mkdir()
    return board_dir


def test_a_symlink_planted_as_the_compute_board_is_never_followed(gs: Harness) -> None:
    board_dir = _board_dir(gs)
    victim = gs.tmp / "victim"
    victim.write_bytes(b"")
    (board_dir / "GPU-face0000-0000-0000-0000-000000000000.board").symlink_to(victim)
    res = gs.probe("init", "ctx", "launch", 10, 5, limit="64Mi",
                   extra={**BOARD_ENV, "GPUSLICE_BOARD_DIR": str(board_dir)})
    assert res.one("launch").rc == CUDA_SUCCESS, f"kernels still run (hard mode):\n{res.describe()}"
    assert victim.read_bytes() == b"", "the symlink's target is untouched"
    assert any("symbolic link" in ln for ln in res.log_lines("W")), res.describe()


def test_a_compute_board_truncated_by_another_tenant_does_not_kill_us(gs: Harness) -> None:
    board_dir = _board_dir(gs)
    go = gs.tmp / "truncated"
    extra = {**BOARD_ENV, "GPUSLICE_BOARD_DIR": str(board_dir)}
    proc = gs.spawn("init", "ctx", "launch", 10, 5, "waitfile", go, "launch", 10, 5, limit="64Mi",
                    extra=extra)
    try:
        assert read_line(proc, "launch").rc == CUDA_SUCCESS
        boards = list(board_dir.iterdir())
        assert len(boards) == 1, f"one board per GPU: {boards}"
        os.truncate(boards[0], 0)  # another tenant of the node: the board is node-wide
        go.write_text("")
        second = read_line(proc, "launch")
        assert proc.wait() == 0, f"no SIGBUS: exit {proc.popen.returncode}\n{proc.stderr}"
    finally:
        proc.kill()
    assert second.rc == CUDA_SUCCESS, f"kernels keep running: {second.text}"

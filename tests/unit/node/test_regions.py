"""Regions: written by the agent with the assignment's limits, kept across a container restart,
replaced when anything else is there, swapped whole between two pods, removed at the end."""

from __future__ import annotations

import os
import struct

import pytest

from gpuslice.container import regions
from gpuslice.shim import SLOTS_OFFSET, Region, RegionSpec

GPU_A = "GPU-0a000000-0000-0000-0000-000000000000"
GPU_B = "GPU-0b000000-0000-0000-0000-000000000000"
SPEC = RegionSpec(device_uuids=(GPU_A, GPU_B), limits=(4 << 30, 2 << 30), sm_limit=30,
                  compute_mode="hard", priority=1)


def _place(tmp_path, spec=SPEC, uid="uid-a"):
    path = regions.prepare(tmp_path / "regions", uid, "main") / "region"
    return path, regions.place(path, spec)


def test_the_agent_writes_the_region_with_the_assignments_limits_under_root_only_directories(
        tmp_path):
    path, how = _place(tmp_path)
    assert how == "created"
    for d in (path.parent, path.parent.parent, path.parent.parent.parent):
        assert (d.stat().st_mode & 0o7777) == 0o755, "nobody in the container replaces the file"
    st = path.stat()
    assert (st.st_mode & 0o7777, st.st_uid) == (0o666, os.geteuid()), "every uid of it shares it"
    r = Region.read(path)
    assert [(d.uuid, d.limit, d.device_index) for d in r.devices if d.uuid] == [
        (GPU_A, 4 << 30, 0), (GPU_B, 2 << 30, 1)]
    assert (r.sm_limit, r.compute_mode, r.priority, r.uuid_list, r.pid_ns) == (30, 0, 1, True, 0)
    assert [p.name for p in path.parent.iterdir()] == ["region"], "no temporary file is left"


def test_a_restarted_container_keeps_its_region_and_its_usage(tmp_path):
    path, _ = _place(tmp_path)
    with open(path, "r+b") as f:  # a process's slot: pid 7, live, 1 GiB used on GPU_A
        f.seek(SLOTS_OFFSET)
        f.write(struct.pack("<iIQQ", 7, 1, 0, 1 << 30))
        f.seek(44)  # slot_hwm
        f.write(struct.pack("<I", 1))
    inode = path.stat().st_ino
    assert regions.place(path, SPEC) == "kept"
    assert path.stat().st_ino == inode
    assert Region.read(path, check_alive=False).by_uuid()[GPU_A].used == 1 << 30


@pytest.mark.parametrize("tamper", ["limit", "priority", "junk", "mode", "fifo"])
def test_anything_but_the_assignments_region_is_replaced_never_written_through(tmp_path, tamper):
    path, _ = _place(tmp_path)
    if tamper == "limit":
        path.write_bytes(RegionSpec((GPU_A, GPU_B), (1 << 40, 2 << 30), 30, "hard", 1).encode())
        path.chmod(0o666)
    elif tamper == "priority":
        path.write_bytes(RegionSpec((GPU_A, GPU_B), (4 << 30, 2 << 30), 30, "hard", 0).encode())
        path.chmod(0o666)
    elif tamper == "junk":
        path.write_bytes(b"\0" * 5000)
    elif tamper == "mode":
        path.chmod(0o644)
    else:
        path.unlink()
        os.mkfifo(path)
    old = os.stat(path, follow_symlinks=False).st_ino
    assert regions.place(path, SPEC) == "replaced"
    assert path.stat().st_ino != old, "renamed into place, never truncated or written through"
    assert SPEC.matches(Region.read(path))


def test_prepare_refuses_a_file_where_a_directory_belongs(tmp_path):
    (tmp_path / "regions" / "uid-a").mkdir(parents=True)
    (tmp_path / "regions" / "uid-a" / "main").symlink_to("/etc")
    with pytest.raises(OSError, match="not a directory"):
        regions.prepare(tmp_path / "regions", "uid-a", "main")


def test_the_board_directory_is_1777_whatever_the_umask_or_an_older_mode(tmp_path):
    old = os.umask(0o077)
    try:
        d = regions.prepare_board(tmp_path)
    finally:
        os.umask(old)
    assert d == tmp_path / "board" and (d.stat().st_mode & 0o7777) == 0o1777
    d.chmod(0o700)  # a restart puts it right
    assert (regions.prepare_board(tmp_path).stat().st_mode & 0o7777) == 0o1777


def test_the_board_directory_is_never_a_symlink(tmp_path):
    (tmp_path / "board").symlink_to("/etc")
    with pytest.raises(OSError, match="not a directory"):
        regions.prepare_board(tmp_path)


@pytest.mark.parametrize("have", [("a", "b"), ("a",), ("b",), ()], ids=str)
def test_swap_exchanges_whatever_directories_exist(tmp_path, have):
    for uid in have:
        regions.place(regions.prepare(tmp_path, uid, f"from-{uid}") / "region",
                      RegionSpec((GPU_A if uid == "a" else GPU_B,), (1 << 30,)))
    regions.swap(tmp_path, "a", "b")
    now = {p.name: sorted(c.name for c in p.iterdir()) for p in tmp_path.iterdir()}
    want = {{"a": "b", "b": "a"}[uid]: [f"from-{uid}"] for uid in have}
    assert now == want, "nothing stranded under a temporary name"
    for uid in have:  # each region went with its directory
        region = Region.read(tmp_path / {"a": "b", "b": "a"}[uid] / f"from-{uid}" / "region")
        assert list(region.by_uuid()) == [GPU_A if uid == "a" else GPU_B]


def test_remove_never_follows_a_tenants_symlink(tmp_path):
    d = regions.prepare(tmp_path, "uid-a", "main")
    regions.place(d / "other-region", SPEC)  # removed with its directory
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("x")
    (d / "region").symlink_to(victim)
    regions.remove(tmp_path, "uid-a")
    assert not (tmp_path / "uid-a").exists() and (victim / "keep").exists()
    with pytest.raises(ValueError):
        regions.remove(tmp_path, "..")


def test_two_directories_swap_in_one_step_where_the_kernel_can(tmp_path, monkeypatch):
    """renameat2(RENAME_EXCHANGE): never a moment where one pod has no region directory."""
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    if not regions._exchange(tmp_path / "x", tmp_path / "y"):
        pytest.skip("this kernel or filesystem cannot exchange two names in one step")
    for uid in ("a", "b"):
        regions.place(regions.prepare(tmp_path, uid, "main") / "region",
                      RegionSpec((GPU_A if uid == "a" else GPU_B,), (1 << 30,)))

    def no_three_step_rename(*args: object) -> None:
        raise AssertionError("swapped through a temporary name")
    monkeypatch.setattr(regions.os, "rename", no_three_step_rename)
    regions.swap(tmp_path, "a", "b")
    assert list(Region.read(tmp_path / "a" / "main" / "region").by_uuid()) == [GPU_B]
    assert list(Region.read(tmp_path / "b" / "main" / "region").by_uuid()) == [GPU_A]

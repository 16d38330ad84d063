"""Region directories: made for every uid of a container, swapped whole between two pods."""

from __future__ import annotations

import pytest

from gpuslice.node import regions


def test_a_container_directory_is_sticky_and_world_writable_under_root_only_parents(tmp_path):
    d = regions.prepare(tmp_path / "regions", "uid-a", "main")
    assert (d.stat().st_mode & 0o7777) == 0o1777, "every uid creates, none deletes another's"
    assert (d.parent.stat().st_mode & 0o7777) == 0o755


def test_prepare_refuses_a_file_where_a_directory_belongs(tmp_path):
    (tmp_path / "regions" / "uid-a").mkdir(parents=True)
    (tmp_path / "regions" / "uid-a" / "main").symlink_to("/etc")
    with pytest.raises(OSError, match="not a directory"):
        regions.prepare(tmp_path / "regions", "uid-a", "main")


@pytest.mark.parametrize("have", [("a", "b"), ("a",), ("b",), ()], ids=str)
def test_swap_exchanges_whatever_directories_exist(tmp_path, have):
    for uid in have:
        regions.prepare(tmp_path, uid, f"from-{uid}")
    regions.swap(tmp_path, "a", "b")
    now = {p.name: sorted(c.name for c in p.iterdir()) for p in tmp_path.iterdir()}
    want = {{"a": "b", "b": "a"}[uid]: [f"from-{uid}"] for uid in have}
    assert now == want, "nothing stranded under a temporary name"


def test_remove_never_follows_a_tenants_symlink(tmp_path):
    d = regions.prepare(tmp_path, "uid-a", "main")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("x")
    (d / "region").symlink_to(victim)
    regions.remove(tmp_path, "uid-a")
    assert not (tmp_path / "uid-a").exists() and (victim / "keep").exists()
    with pytest.raises(ValueError):
        regions.remove(tmp_path, "..")

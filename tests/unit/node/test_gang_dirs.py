"""Gang directories on the host, `<stateDir>/gangs/<namespace>/<gang>`: made 1777 below the
agent's 0755 directories before Allocate is answered, never through a symlink, and removed once
no live pod of the node names the gang and the grace has passed (only with a fresh pod list)."""

from __future__ import annotations

import os
import stat
import time

import pytest

from gpuslice.container import regions
from gpuslice.node.settings import WatchdogConfig
from gpuslice.node.watchdog import Watchdog

NOW = 1_800_000_000.0
GRACE = 300.0


def _mode(p) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


def test_the_gang_directory_is_1777_below_directories_only_the_agent_writes(tmp_path):
    root = tmp_path / "gangs"
    old = os.umask(0o077)
    try:
        d = regions.prepare_gang(root, "team", "train-42")
    finally:
        os.umask(old)
    assert d == root / "team" / "train-42"
    assert _mode(d) == 0o1777, "every uid of every container of the gang creates the gang file"
    assert _mode(root) == _mode(root / "team") == 0o755, \
        "a tenant cannot replace its gang's directory or plant another"
    assert regions.prepare_gang(root, "team", "train-42") == d, "kept as it is"
    assert regions.prepare_gang(root, "team", "other").parent == d.parent


def test_an_older_mode_is_set_right_and_the_mtime_renewed(tmp_path):
    d = tmp_path / "gangs" / "team" / "job"
    d.mkdir(parents=True, mode=0o700)
    os.chmod(d, 0o700)
    now = time.time()
    os.utime(d, (now - 10 * GRACE, now - 10 * GRACE))
    regions.prepare_gang(tmp_path / "gangs", "team", "job")
    assert _mode(d) == 0o1777
    assert os.lstat(d).st_mtime >= now - 1, "the sweep's grace counts from the last Allocate"


@pytest.mark.parametrize("level", ["namespace", "gang"])
def test_a_symlink_in_the_way_is_refused_never_followed(tmp_path, level):
    root, elsewhere = tmp_path / "gangs", tmp_path / "etc"
    elsewhere.mkdir(mode=0o755)
    os.chmod(elsewhere, 0o755)
    (root / "team").mkdir(parents=True)
    link = root / "team" if level == "namespace" else root / "team" / "job"
    if level == "namespace":
        os.rmdir(link)
    link.symlink_to(elsewhere)
    with pytest.raises(OSError, match="exists and is not a directory; remove it"):
        regions.prepare_gang(root, "team", "job")
    assert _mode(elsewhere) == 0o755 and not list(elsewhere.iterdir()), \
        "nothing made or changed where the link points"


def test_a_file_in_the_way_is_refused(tmp_path):
    (tmp_path / "gangs" / "team").mkdir(parents=True)
    (tmp_path / "gangs" / "team" / "job").write_text("x")
    with pytest.raises(OSError, match=r"gangs/team/job: exists and is not a directory"):
        regions.prepare_gang(tmp_path / "gangs", "team", "job")


@pytest.mark.parametrize(("namespace", "gang"), [
    ("team", ".."), ("..", "job"), ("team", "a/b"), ("", "job"), ("team", ""),
    ("team", "Job")])
def test_names_that_are_no_dns_labels_never_make_a_path(tmp_path, namespace, gang):
    with pytest.raises(ValueError, match="not a DNS label"):
        regions.prepare_gang(tmp_path / "gangs", namespace, gang)
    assert not (tmp_path / "gangs").exists()


def _aged(root, namespace, gang, age):
    d = regions.prepare_gang(root, namespace, gang)
    (d / "gang").write_bytes(b"\0" * 64)  # what the library makes there
    os.utime(d, (NOW - age, NOW - age))
    return d


def test_a_gang_no_live_pod_names_is_removed_after_the_grace(tmp_path):
    root = tmp_path / "gangs"
    live = _aged(root, "team", "live", 10 * GRACE)
    young = _aged(root, "team", "young", GRACE / 2)
    old = _aged(root, "team", "old", 2 * GRACE)
    lone = _aged(root, "lab", "old", 2 * GRACE)
    removed = regions.remove_gangs(root, {("team", "live"), ("other", "young")}, GRACE, NOW)
    assert sorted(removed) == ["lab/old", "team/old"]
    assert live.is_dir() and young.is_dir(), "a live gang's, or one still in its grace"
    assert not old.exists() and not lone.exists()
    assert not (root / "lab").exists(), "a namespace directory left empty goes too"
    assert (root / "team").is_dir()


def test_the_sweep_never_follows_a_symlink(tmp_path):
    root, outside = tmp_path / "gangs", tmp_path / "precious"
    outside.mkdir()
    (outside / "keep").write_text("x")
    gang = _aged(root, "team", "job", 2 * GRACE)
    (gang / "escape").symlink_to(outside)  # a tenant can write inside its gang's directory
    (root / "team" / "planted").symlink_to(outside)  # cannot happen (0755), and harmless
    removed = regions.remove_gangs(root, set(), GRACE, NOW)
    assert removed == ["team/job"]
    assert (outside / "keep").read_text() == "x"
    assert (root / "team" / "planted").is_symlink(), "not a directory: left alone"


def test_the_watchdog_sweeps_gangs_only_with_a_fresh_pod_list(tmp_path):
    root = tmp_path / "gangs"
    d = _aged(root, "team", "job", 2 * GRACE)
    fresh = [False]
    dog = Watchdog(None, tmp_path / "regions", WatchdogConfig(),  # type: ignore[arg-type]
                   gpus=tuple, assignments=dict, pods_fresh=lambda: fresh[0], gangs_root=root)
    assert dog.sweep_gangs(set(), now=NOW) == [] and d.is_dir(), \
        "the API server away: every pod may still be there"
    fresh[0] = True
    assert dog.sweep_gangs({("team", "job")}, now=NOW) == [] and d.is_dir()
    assert dog.sweep_gangs(set(), now=NOW) == ["team/job"] and not d.exists()
    assert Watchdog(None, tmp_path / "regions", WatchdogConfig(),  # type: ignore[arg-type]
                    gpus=tuple, assignments=dict, pods_fresh=lambda: True
                    ).sweep_gangs(set(), now=NOW) == [], "no gangs root: nothing to do"

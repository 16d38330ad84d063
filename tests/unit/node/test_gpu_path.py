"""node/path.py: which path a node's GPUs take, and when a relabelled node may switch."""

from __future__ import annotations

import pytest

from gpuslice import model
from gpuslice.node import path
from gpuslice.node.path import DEVICE_PLUGIN, DRA, LABEL, GpuPath, decide, wanted

BOTH = (DEVICE_PLUGIN, DRA)


@pytest.mark.parametrize(("labels", "available", "want", "problem"), [
    ({}, BOTH, DEVICE_PLUGIN, None),
    ({LABEL: "dra"}, BOTH, DRA, None),
    ({LABEL: "device-plugin"}, BOTH, DEVICE_PLUGIN, None),
    ({LABEL: "DRA"}, BOTH, None, "use dra or device-plugin"),
    ({LABEL: "dra"}, (DEVICE_PLUGIN,), None, "set dra.enabled=true in the chart"),
    ({LABEL: "device-plugin"}, (DRA,), None, "nodeAgent.config.resources"),
], ids=["no label: the default", "dra", "device-plugin", "a typo", "dra, DRA off",
        "device-plugin, no resources"])
def test_the_label_names_the_path_or_says_what_is_wrong(labels, available, want, problem):
    got, why = wanted(labels, DEVICE_PLUGIN, available)
    assert got == want
    assert (problem is None) == (why is None)
    if problem:
        assert problem in why and LABEL in why


def test_a_switch_waits_for_every_pod_holding_the_old_path_and_names_them():
    step = decide(DEVICE_PLUGIN, DRA, [f"ns/p{i}" for i in range(7)])
    assert (step.path, step.draining) == (DEVICE_PLUGIN, True)
    assert "waits for 7 pod(s)" in step.problem and "ns/p0" in step.problem
    assert "2 more" in step.problem
    unknown = decide(DEVICE_PLUGIN, DRA, None)
    assert (unknown.path, unknown.draining) == (DEVICE_PLUGIN, True), "never switch blind"
    done = decide(DEVICE_PLUGIN, DRA, [])
    assert (done.path, done.draining, done.problem) == (DRA, False, None)
    assert decide(DRA, DRA, None) == path.Step(DRA, False, None)
    assert decide(DRA, None, ["x/y"]) == path.Step(DRA, False, None), "no wish, no change"


def gpus() -> list[model.GPU]:
    return [model.GPU(uuid=f"GPU-{i}", model="H100", memory_mib=81920, index=i)
            for i in range(2)]


def test_only_the_current_path_advertises_and_not_while_it_drains(tmp_path):
    p = GpuPath(tmp_path / "gpu-path", default=DEVICE_PLUGIN, available=BOTH)
    assert p.labels is None and not p.switching(), "no switch before the Node is read"
    p.on_node({"metadata": {"labels": {}}})
    assert p.settle([]) is False and p.current == DEVICE_PLUGIN
    assert all(g.healthy for g in p.advertised(DEVICE_PLUGIN, gpus()))
    assert not any(g.healthy for g in p.advertised(DRA, gpus()))
    p.on_node({"metadata": {"labels": {LABEL: DRA}}})
    assert p.switching()
    assert p.settle(["default/train"]) is True
    assert (p.current, p.draining) == (DEVICE_PLUGIN, True)
    for side in BOTH:  # draining: nothing new anywhere
        assert not any(g.healthy for g in p.advertised(side, gpus()))
    assert "default/train" in p.problem
    assert p.settle([]) is True
    assert (p.current, p.draining, p.problem) == (DRA, False, None)
    assert all(g.healthy for g in p.advertised(DRA, gpus()))
    assert not any(g.healthy for g in p.advertised(DEVICE_PLUGIN, gpus()))


def test_the_path_survives_a_restart_in_its_journal(tmp_path):
    p = GpuPath(tmp_path / "gpu-path", default=DEVICE_PLUGIN, available=BOTH)
    p.on_node({"metadata": {"labels": {LABEL: DRA}}})
    p.settle([])
    again = GpuPath(tmp_path / "gpu-path", default=DEVICE_PLUGIN, available=BOTH)
    assert again.current == DRA, "restarted while the API server is away: same path"
    narrower = GpuPath(tmp_path / "gpu-path", default=DEVICE_PLUGIN,
                       available=(DEVICE_PLUGIN,))
    assert narrower.current == DEVICE_PLUGIN, "a journal naming a path now off is ignored"


def test_a_reverted_label_stops_the_drain_at_once(tmp_path):
    p = GpuPath(tmp_path / "gpu-path", default=DEVICE_PLUGIN, available=BOTH)
    p.on_node({"metadata": {"labels": {LABEL: DRA}}})
    p.settle(["default/train"])
    p.on_node({"metadata": {"labels": {LABEL: DEVICE_PLUGIN}}})
    assert p.settle([]) is True
    assert (p.current, p.draining, p.problem) == (DEVICE_PLUGIN, False, None)

"""The driver's own filters (kubeapi/scheduler_filters.py): kube-scheduler's reasons, in its
order, and the shortcut the driver takes for plain nodes loses none of them."""

from __future__ import annotations

import pytest

from kubeapi import scheduler_filters as filters

POD = {"spec": {"containers": [{"name": "c", "resources": {"requests": {
    "cpu": "2", "nvidia.com/gpu": "1", "nvidia.com/gpumem": "4096"}}}]}}
ALLOCATABLE = {"cpu": 8.0, "nvidia.com/gpu": 4.0, "pods": 110.0}
NODES = {
    "plain": {"metadata": {"name": "plain"}, "spec": {}},
    "cordoned": {"metadata": {"name": "cordoned"}, "spec": {"unschedulable": True}},
    "tainted": {"metadata": {"name": "tainted"}, "spec": {"taints": [
        {"key": "gpu", "value": "busy", "effect": "NoSchedule"}]}},
    "labelled": {"metadata": {"name": "labelled", "labels": {"zone": "a"}}, "spec": {}},
}


@pytest.mark.parametrize(("node", "selector", "used", "expected"), [
    ("plain", None, {}, []),
    ("plain", None, {"cpu": 7.0}, ["Insufficient cpu"]),
    ("plain", None, {"pods": 110.0}, ["Too many pods"]),
    ("cordoned", None, {}, [filters.UNSCHEDULABLE]),
    ("tainted", None, {"cpu": 7.0}, ["node(s) had untolerated taint {gpu: busy}",
                                      "Insufficient cpu"]),
    ("labelled", {"zone": "b"}, {}, [filters.SELECTOR]),
    ("labelled", {"zone": "a"}, {}, []),
], ids=["fits", "short of cpu", "full of pods", "cordoned", "tainted then short",
        "other zone", "its zone"])
def test_reasons_come_in_kube_schedulers_order(node, selector, used, expected):
    pod = {"spec": {**POD["spec"], **({"nodeSelector": selector} if selector else {})}}
    requests = filters.fit_requests(filters.pod_requests(pod), ignored={"nvidia.com/gpumem"})
    assert "nvidia.com/gpumem" not in requests, "a resource the extender owns is not counted"
    assert filters.node_reasons(pod, NODES[node], requests, ALLOCATABLE, used) == expected


def test_placement_has_nothing_to_say_about_a_plain_node_for_a_pod_without_a_selector():
    plain = [name for name, node in NODES.items() if filters.is_plain(node)]
    assert plain == ["plain", "labelled"]
    assert all(filters.placement_reasons(POD, NODES[n]) == [] for n in plain), \
        "the driver skips placement_reasons for these: it must lose nothing"

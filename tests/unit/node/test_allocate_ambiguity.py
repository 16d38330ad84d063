"""Allocate answers only what it can prove (issue 20, items 2 and 3): pods that skipped gpuslice
(strangers) and late admissions make a call ambiguous, and an ambiguous call is refused."""

from __future__ import annotations

from typing import Any

import pytest

from gpuslice import model
from gpuslice.node.allocate import (
    AllocateError,
    AmbiguousAllocate,
    Layout,
    answer,
    assigned_pods,
    in_flight,
    preferred,
    strangers,
)
from kubelet.pods import NODE, container, gpu, pod

NOW = 1_800_000_000.0
LAYOUT = Layout(library_host="/l/libgpuslice.so", preload_host="/l/ld.so.preload",
                regions_host="/r", board_host="/b")
GPUS = {gpu(i): model.GPU(uuid=gpu(i), model="T4", memory_mib=16384, index=i, split_count=4)
        for i in range(2)}


def bare(name: str, limits: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": "default", "name": name, "uid": f"uid-{name}"},
            "spec": {"nodeName": NODE, "containers": [
                {"name": "main", "resources": {"limits": limits}}], **spec}}


def _answer(pods: list[dict[str, Any]], ids: list[str]) -> Any:
    return answer(in_flight(pods, NODE, NOW, 30), assigned_pods(pods, NODE), GPUS,
                  "nvidia.com/gpu", ids, LAYOUT, strangers=strangers(pods, NODE))


def test_a_gpu_pod_without_gpuslices_placement_is_a_stranger_until_admitted():
    thief = bare("thief", {"nvidia.com/gpu": "1"}, schedulerName="other")
    (s,) = strangers([thief], NODE)
    assert (s.name, s.asks) == ("thief", (("nvidia.com/gpu", 1),))
    for status in ({"phase": "Running"}, {"phase": "Failed"},
                   {"phase": "Pending", "containerStatuses": [{"name": "main"}]}):
        assert strangers([{**thief, "status": status}], NODE) == [], status
    assert strangers([bare("cpu", {"cpu": "1"})], NODE) == [], "asks for no device resource"
    elsewhere = bare("far", {"nvidia.com/gpu": "1"}, schedulerName="other")
    elsewhere["spec"]["nodeName"] = "node-b"
    assert strangers([elsewhere], NODE) == []


def test_an_unreadable_quantity_may_be_any():
    (s,) = strangers([bare("odd", {"nvidia.com/gpu": "1.5"})], NODE)
    assert s.could_ask("nvidia.com/gpu", 1) and s.could_ask("nvidia.com/gpu", 7)


def test_gpuslices_own_pods_are_no_strangers_but_a_forged_assignment_is_one():
    owner = pod("owner", [container("main")], {"main": [gpu(0)]}, at=NOW - 1)
    done = pod("done", [container("main")], {"main": [gpu(0)]}, at=NOW - 1, allocated="main")
    forged = pod("forged", [container("main")], {"main": [gpu(0)]}, at=NOW - 1)
    forged["metadata"]["labels"] = {}  # not admitted by the webhook: its assignment is no one's
    bound_elsewise = pod("bound-elsewise", [container("main")], {"main": [gpu(0)]}, at=NOW - 1)
    del bound_elsewise["metadata"]["annotations"]  # admitted by the webhook, then bound by a
    # Binding another scheduler (or anyone with pods/binding) created: no assignment
    assert [s.name for s in strangers([owner, done, forged, bound_elsewise], NODE)] == [
        "forged", "bound-elsewise"]


def test_a_call_a_stranger_could_make_is_refused_and_names_every_pod_concerned():
    owner = pod("owner", [container("main", mem=12000, cores=60)], {"main": [gpu(0)]},
                at=NOW - 1)
    thief = bare("thief", {"nvidia.com/gpu": "1"}, schedulerName="other")
    with pytest.raises(AmbiguousAllocate) as exc:
        _answer([owner, thief], [f"{gpu(0)}::0"])
    assert {p[1] for p in exc.value.pods} == {"owner", "thief"}
    assert "default/thief asks for it without a gpuslice placement" in str(exc.value)
    got = _answer([owner, bare("two", {"nvidia.com/gpu": "2"})], [f"{gpu(0)}::0"])
    assert got.pod_key == "default/owner", "a 2-device pod cannot make a 1-device call"


def test_a_stranger_alone_is_refused_by_name():
    with pytest.raises(AllocateError, match="default/thief, refused"):
        _answer([bare("thief", {"nvidia.com/gpu": "1"})], [f"{gpu(0)}::0"])


def test_a_late_pod_and_a_newer_confusable_one_are_both_refused():
    late = pod("late", [container("main", mem=4000)], {"main": [gpu(0)]}, at=NOW - 300)
    newer = pod("newer", [container("main", mem=12000)], {"main": [gpu(0)]}, at=NOW - 1)
    with pytest.raises(AmbiguousAllocate, match="default/newer bound beside default/late"):
        _answer([late, newer], [f"{gpu(0)}::0"])
    # the control: the window alone (the rule before) answers the late pod with newer's slice
    old_rule = in_flight([newer], NODE, NOW, 30)
    got = answer(old_rule, {}, GPUS, "nvidia.com/gpu", [f"{gpu(0)}::0"], LAYOUT)
    assert got.region.limits == (12000 << 20,), "what the late pod got before: 12000 MiB"


def test_interchangeable_claimants_are_no_ambiguity():
    late = pod("late", [container("main", mem=4000)], {"main": [gpu(0)]}, at=NOW - 300)
    twin = pod("twin", [container("main", mem=4000)], {"main": [gpu(1)]}, at=NOW - 1)
    got = _answer([late, twin], [f"{gpu(0)}::0"])
    assert (got.pod_key, got.in_progress) == ("default/late", False)


def test_preferred_allocation_steers_to_the_claimant_even_where_allocate_would_refuse_now():
    """Seen on the real kubelet: a stranger refused first, then the owner's preference in the
    kubelet's order (the stranger's Failed status not seen yet) put its devices on another GPU,
    and its Allocate, unambiguous by then, refused them."""
    owner = pod("owner", [container("main")], {"main": [gpu(1)]}, at=NOW - 1)
    thief = bare("thief", {"nvidia.com/gpu": "1"})
    available = [f"{gpu(0)}::0", f"{gpu(1)}::0"]
    flights = in_flight([owner, thief], NODE, NOW, 30)
    assert strangers([owner, thief], NODE), "Allocate would refuse now"
    assert preferred(flights, "nvidia.com/gpu", available, [], 1) == [f"{gpu(1)}::0"]


def test_a_pod_deleted_before_the_kubelet_met_it_keeps_its_own_slice_and_rivals():
    """After a partition the kubelet may meet a pod already being deleted and its replacement
    together; the deleted one is still gpuslice's: answered from its own assignment where it is
    the only claimant, and a claimant that makes other shapes ambiguous."""
    gone = pod("gone", [container("main", mem=4000)], {"main": [gpu(0)]}, at=NOW - 300)
    gone["metadata"]["deletionTimestamp"] = "2026-11-27T00:00:00Z"
    assert strangers([gone], NODE) == []
    assert _answer([gone], [f"{gpu(0)}::0"]).pod_key == "default/gone"
    twin = pod("twin", [container("main", mem=4000)], {"main": [gpu(1)]}, at=NOW - 1)
    assert _answer([gone, twin], [f"{gpu(0)}::0"]).pod_key == "default/gone"
    other = pod("other", [container("main", mem=12000)], {"main": [gpu(1)]}, at=NOW - 1)
    with pytest.raises(AmbiguousAllocate):
        _answer([gone, other], [f"{gpu(0)}::0"])

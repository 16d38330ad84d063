"""preempt: kube-scheduler's candidates are kept only where evicting the victims frees enough
GPU for the pod; nothing is reserved."""

from __future__ import annotations

import json

from gpuslice.allocator import parse_policy
from gpuslice.scheduler import wire
from gpuslice.scheduler.filter import Evaluator
from gpuslice.scheduler.preempt import preempt_reply
from gpuslice.scheduler.state import ExtenderState

from .objects import Clock, assigned, node, pod


def scene() -> Evaluator:
    """Two one-GPU nodes of 16 GiB, each full: 'a' with one 16 GiB pod, 'b' with two 8 GiB."""
    s = ExtenderState(timeout_s=30, clock=Clock())
    for n in ("a", "b"):
        s.on_node("ADDED", node(n, gpus=1, mem=16384))
    s.on_pod("ADDED", assigned(pod("big", mem=16384), "a", ["GPU-a-0"], allocated="main"))
    for name in ("half-1", "half-2"):
        s.on_pod("ADDED", assigned(pod(name, mem=8192), "b", ["GPU-b-0"], allocated="main"))
    return Evaluator(s, parse_policy("binpack"))


def args(body: dict) -> wire.PreemptionArgs:
    """Through JSON, as the scheduler sends it (capitalised Go field names)."""
    return wire.decode(json.dumps(body).encode(), wire.PreemptionArgs)


def test_a_node_is_kept_only_where_the_victims_free_enough_gpu_memory():
    ev = scene()
    got = preempt_reply(ev, args({"Pod": pod("p", mem=12288), "NodeNameToMetaVictims": {
        "a": {"Pods": [{"UID": "uid-big"}], "NumPDBViolations": 0},
        "b": {"Pods": [{"UID": "uid-half-1"}], "NumPDBViolations": 0}}}))
    assert list(got.NodeNameToMetaVictims) == ["a"], \
        "evicting one 8 GiB pod on b leaves 8 GiB: not enough for 12 GiB"
    assert got.NodeNameToMetaVictims["a"].Pods == [wire.MetaPod(UID="uid-big")]
    both = preempt_reply(ev, args({"Pod": pod("p", mem=12288), "NodeNameToMetaVictims": {
        "b": {"Pods": [{"UID": "uid-half-1"}, {"UID": "uid-half-2"}]}}}))
    assert list(both.NodeNameToMetaVictims) == ["b"]


def test_full_victim_pods_are_read_by_their_uid_and_nothing_is_reserved():
    ev = scene()
    before = [(u.gpu.uuid, u.memory_used_mib) for u in ev.state.cluster.gpu_usage()]
    victim = assigned(pod("big", mem=16384), "a", ["GPU-a-0"])
    got = preempt_reply(ev, args({"Pod": pod("p", mem=4096), "NodeNameToVictims": {
        "a": {"Pods": [victim], "NumPDBViolations": 1}}}))
    assert got.NodeNameToMetaVictims == {"a": wire.MetaVictims(
        Pods=[wire.MetaPod(UID="uid-big")], NumPDBViolations=1)}
    assert [(u.gpu.uuid, u.memory_used_mib) for u in ev.state.cluster.gpu_usage()] == before


def test_a_node_without_gpu_inventory_is_never_worth_an_eviction():
    ev = scene()
    got = preempt_reply(ev, args({"Pod": pod("p"), "NodeNameToMetaVictims": {
        "cpu-only": {"Pods": [{"UID": "uid-x"}]}}}))
    assert got.NodeNameToMetaVictims == {}

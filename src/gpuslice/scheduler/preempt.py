"""The `preempt` verb: which of kube-scheduler's preemption candidates would really free GPUs.

kube-scheduler picks victims by the resources it sees (CPU, memory, device counts); it cannot
tell whether evicting them frees the right GPU slices. With `preemptVerb` set it asks the
extender: for each candidate node and its victims, would the pod fit once they are gone?
Owns: `preempt_reply` — keeps a node (with the same victims) when the pod fits on the node's
GPUs after removing the victims' slices, drops it otherwise.
Does not: choose victims (kube-scheduler does) or evict anything; nothing is reserved.
Wire (Go field names, as every verb): ExtenderPreemptionArgs {Pod, NodeNameToVictims,
NodeNameToMetaVictims}; with nodeCacheCapable: true only NodeNameToMetaVictims {node: {Pods:
[{UID}], NumPDBViolations}} is sent; the reply is {NodeNameToMetaVictims}.
Tests: tests/unit/scheduler/test_preempt.py
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuslice.allocator import AllocationError, ClusterState
from gpuslice.scheduler.filter import Evaluator
from gpuslice.scheduler.state import ExtenderState
from gpuslice.scheduler.wire import MetaPod, MetaVictims, PreemptionArgs, PreemptionResult

__all__ = ["preempt_reply"]


def _victim_uids(args: PreemptionArgs) -> dict[str, tuple[MetaVictims, set[str]]]:
    """node -> (victims as the reply names them, their UIDs), from either form."""
    out: dict[str, tuple[MetaVictims, set[str]]] = {}
    for node, meta in (args.NodeNameToMetaVictims or {}).items():
        out[node] = (meta, {p.UID for p in meta.Pods or ()})
    for node, full in (args.NodeNameToVictims or {}).items():
        uids = [str((p.get("metadata") or {}).get("uid") or "") for p in full.Pods or ()]
        out[node] = (MetaVictims(Pods=[MetaPod(UID=u) for u in uids],
                                 NumPDBViolations=full.NumPDBViolations), set(uids))
    return out


def _fits_without(ev: Evaluator, state: ExtenderState, pod: Mapping[str, Any], node: str,
                  victims: set[str]) -> bool:
    inventory = state.inventory(node)
    if inventory is None:
        return False
    cluster = ClusterState()
    cluster.add_node(inventory)
    try:
        for key, assignment in state.held_on(node).items():
            if state.uid(key) not in victims:
                cluster.assign(key, assignment)
    except AllocationError:
        return False  # the node's slices cannot all be counted even without the victims
    return node in cluster.filter(ev.request(pod), ev.policy, [node]).fits


def preempt_reply(ev: Evaluator, args: PreemptionArgs) -> PreemptionResult:
    """The candidates where evicting the victims lets the pod's slices fit (RequestError for a
    pod the dialects reject)."""
    ev.request(args.Pod)  # an invalid pod fails here, once
    kept = {node: meta for node, (meta, uids) in _victim_uids(args).items()
            if _fits_without(ev, ev.state, args.Pod, node, uids)}
    return PreemptionResult(NodeNameToMetaVictims=kept)

"""The extender's state and preemption with MIG nodes: assignments read from annotations are
held as MIG placements, an overlapping one waits instead of being double-booked, and evicting a
pod frees its placement for preemption."""

from __future__ import annotations

import json
from typing import Any

from gpuslice import codec, handoff, mig, model
from gpuslice.allocator import parse_policy
from gpuslice.scheduler import wire
from gpuslice.scheduler.filter import Evaluator
from gpuslice.scheduler.preempt import preempt_reply
from gpuslice.scheduler.state import ExtenderState

from .objects import NOW, Clock, pod

H100 = mig.CATALOG["H100-80GB"]


def mig_node(name: str) -> dict[str, Any]:
    inv = model.NodeInventory(node=name, gpus=(model.GPU(
        uuid=f"GPU-{name}-0", model="NVIDIA H100 80GB HBM3", memory_mib=81559,
        mig=mig.MigGPU(profiles=H100)),))
    return {"metadata": {"name": name, "resourceVersion": "1", "annotations": {
        codec.INVENTORY_ANNOTATION: codec.encode_inventory(inv)}}}


def mig_pod(name: str, mem: int) -> dict[str, Any]:
    p = pod(name, annotations={"volcano.sh/vgpu-mode": "mig"})
    p["spec"]["containers"][0]["resources"]["limits"] = {
        "volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": str(mem)}
    return p


def placed(p: dict[str, Any], node: str, profile: str, start: int) -> dict[str, Any]:
    prof = next(q for q in H100 if q.name == profile)
    a = model.PodAssignment(node=node, containers=(model.ContainerAssignment(
        container="main", slices=(model.GPUSlice(
            uuid=f"GPU-{node}-0", memory_mib=prof.memory_mib, cores=prof.compute * 100 // 7,
            mig=mig.MigSlice(profile=profile, start=start)),)),))
    ann = {**p["metadata"]["annotations"], codec.ASSIGNMENT_ANNOTATION: codec.encode_assignment(a),
           handoff.BOUND_AT: handoff.format_time(NOW), handoff.ALLOCATED: "main"}
    return {**p, "metadata": {**p["metadata"], "annotations": ann},
            "spec": {**p["spec"], "nodeName": node}}


def test_an_overlapping_mig_assignment_waits_and_is_never_double_booked():
    s = ExtenderState(timeout_s=30, clock=Clock())
    s.on_node("ADDED", mig_node("m"))
    s.on_pod("ADDED", placed(mig_pod("a", 30000), "m", "3g.40gb", 4))
    s.on_pod("ADDED", placed(mig_pod("b", 8000), "m", "1g.10gb", 5))  # inside a's slices
    assert s.held("default/a") is not None and s.held("default/b") is None
    assert s.waiting("m") == 1
    s.on_pod("DELETED", placed(mig_pod("a", 30000), "m", "3g.40gb", 4))
    assert s.held("default/b") is not None, "retried when the node changed"


def test_preemption_counts_a_victims_mig_placement_as_freed():
    s = ExtenderState(timeout_s=30, clock=Clock())
    s.on_node("ADDED", mig_node("m"))
    s.on_pod("ADDED", placed(mig_pod("small", 8000), "m", "1g.10gb", 0))
    ev = Evaluator(s, parse_policy("binpack"))
    body = {"Pod": mig_pod("whole", 70000),
            "NodeNameToMetaVictims": {"m": {"Pods": [{"UID": "uid-small"}]}}}
    got = preempt_reply(ev, wire.decode(json.dumps(body).encode(), wire.PreemptionArgs))
    assert list(got.NodeNameToMetaVictims) == ["m"], "a 7g.80gb fits once the 1g is gone"
    body["NodeNameToMetaVictims"] = {"m": {"Pods": []}}
    got = preempt_reply(ev, wire.decode(json.dumps(body).encode(), wire.PreemptionArgs))
    assert got.NodeNameToMetaVictims == {}

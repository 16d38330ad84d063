"""Node and Pod objects as the API server returns them, for the extender's tests."""

from __future__ import annotations

from typing import Any

from gpuslice import codec, handoff, model

NOW = 1_800_000_000.0


class Clock:
    """A settable clock for ExtenderState."""

    def __init__(self, t: float = NOW) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def node(name: str, gpus: int = 2, mem: int = 16384, gpu_model: str = "NVIDIA A10",
         split: int = 10, inventory: bool = True) -> dict[str, Any]:
    inv = model.NodeInventory(node=name, gpus=tuple(
        model.GPU(uuid=f"GPU-{name}-{i}", model=gpu_model, memory_mib=mem, index=i,
                  split_count=split) for i in range(gpus)))
    ann = {codec.INVENTORY_ANNOTATION: codec.encode_inventory(inv)} if inventory else {}
    return {"metadata": {"name": name, "resourceVersion": "1", "annotations": ann,
                         "labels": {"kubernetes.io/hostname": name}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


def pod(name: str, mem: int = 4096, cores: int = 10, gpus: int = 1, ns: str = "default",
        annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    """A webhook-normalised HAMi pod (names nvidia.com/gpu)."""
    limits = {"nvidia.com/gpu": str(gpus), "nvidia.com/gpumem": str(mem),
              "nvidia.com/gpucores": str(cores)}
    return {"metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}",
                         "resourceVersion": "10", "creationTimestamp": "2026-11-24T00:00:00Z",
                         "labels": {handoff.MANAGED_LABEL: "true"},
                         "annotations": dict(annotations or {})},
            "spec": {"schedulerName": "gpuslice-scheduler",
                     "containers": [{"name": "main", "image": "x",
                                     "resources": {"limits": limits}}], **spec},
            "status": {"phase": "Pending"}}


def assigned(p: dict[str, Any], node_name: str, uuids: list[str], *, at: float = NOW,
             bound: bool = True, allocated: str | None = None) -> dict[str, Any]:
    """`p` as bind leaves it: assignment + bound-at (+ spec.nodeName when `bound`)."""
    limits = p["spec"]["containers"][0]["resources"]["limits"]
    a = model.PodAssignment(node=node_name, containers=(model.ContainerAssignment(
        container="main", slices=tuple(
            model.GPUSlice(uuid=u, memory_mib=int(limits["nvidia.com/gpumem"]),
                           cores=int(limits["nvidia.com/gpucores"])) for u in uuids)),))
    ann = {**p["metadata"]["annotations"], codec.ASSIGNMENT_ANNOTATION: codec.encode_assignment(a),
           handoff.BOUND_AT: handoff.format_time(at)}
    if allocated is not None:
        ann[handoff.ALLOCATED] = allocated
    spec = {**p["spec"], **({"nodeName": node_name} if bound else {})}
    return {**p, "metadata": {**p["metadata"], "annotations": ann}, "spec": spec}

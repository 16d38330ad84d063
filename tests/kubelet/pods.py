"""Pods as the gpuslice webhook and extender leave them, for the node agent's tests."""

from __future__ import annotations

from typing import Any

from gpuslice import codec, handoff, model

NODE = "node-a"


def gpu(i: int) -> str:
    """The fake backend's UUID of GPU i (gpuslice.node.nvml.fake_uuid)."""
    return f"GPU-00000000-0000-4000-8000-{i:012d}"


def container(name: str, resource: str = "nvidia.com/gpu", quantity: int = 1, *,
              mem: int = 1024, cores: int = 10, priority: int | None = None) -> dict[str, Any]:
    if resource == "tencent.com/vcuda-core":
        limits = {resource: str(quantity), "tencent.com/vcuda-memory": str(mem // 256)}
    elif resource == "volcano.sh/vgpu-number":
        limits = {resource: str(quantity), "volcano.sh/vgpu-memory": str(mem),
                  "volcano.sh/vgpu-cores": str(cores)}
    else:
        limits = {resource: str(quantity), "nvidia.com/gpumem": str(mem),
                  "nvidia.com/gpucores": str(cores)}
        if priority is not None:
            limits["nvidia.com/priority"] = str(priority)
    return {"name": name, "image": "cuda", "resources": {"limits": limits}}


def pod(name: str, containers: list[dict[str, Any]], gpus: dict[str, list[str]], *,
        at: float, node: str = NODE, ns: str = "default", init: list[dict[str, Any]] = (),
        allocated: str | None = None, mem: dict[str, int] | None = None,
        cores: dict[str, int] | None = None) -> dict[str, Any]:
    """A managed pod bound to `node` at `at`, container name -> its GPU UUIDs in `gpus`."""
    assigned = []
    for kind, cs in (("init", init), ("app", containers)):
        for c in cs:
            limits = c["resources"]["limits"]
            m = (mem or {}).get(c["name"], int(limits.get("nvidia.com/gpumem",
                                                          limits.get("volcano.sh/vgpu-memory",
                                                                     1024))))
            k = (cores or {}).get(c["name"], int(limits.get("nvidia.com/gpucores", 10)))
            assigned.append(model.ContainerAssignment(
                container=c["name"], kind=model.ContainerKind(kind),
                slices=tuple(model.GPUSlice(uuid=u, memory_mib=m, cores=k)
                             for u in gpus[c["name"]])))
    ann = {codec.ASSIGNMENT_ANNOTATION: codec.encode_assignment(
               model.PodAssignment(node=node, containers=tuple(assigned))),
           handoff.BOUND_AT: handoff.format_time(at)}
    if allocated is not None:
        ann[handoff.ALLOCATED] = allocated
    spec: dict[str, Any] = {"containers": list(containers), "nodeName": node,
                            "schedulerName": "gpuslice-scheduler"}
    if init:
        spec["initContainers"] = list(init)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": ns, "name": name, "uid": f"uid-{name}",
                         "labels": {handoff.MANAGED_LABEL: "true"}, "annotations": ann,
                         "creationTimestamp": "2026-11-24T00:00:00Z"},
            "spec": spec, "status": {"phase": "Pending"}}

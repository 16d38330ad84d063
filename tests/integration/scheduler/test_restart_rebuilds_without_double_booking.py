"""A restarted extender rebuilds its state from the annotations alone: nothing placed before is
handed out twice, and an assignment written just before a crash (no Binding yet) is held for
the in-flight timeout, then released."""

from __future__ import annotations

import time

from sched_helpers import Running, create, node_obj, pod_obj

from gpuslice import codec, handoff, model
from gpuslice.kube.patch import patch_metadata


async def test_a_new_replica_sees_every_slice_the_old_one_placed(kube_api):
    admin = kube_api.async_client()
    await create(admin, node_obj("gpu-1", gpus=2, mem=8192))
    for name in ("a", "b", "c"):
        await create(admin, pod_obj(name, mem=8192))
    async with Running(kube_api) as first:
        assert await first.place("a", ["gpu-1"]) == "gpu-1"
        assert await first.place("b", ["gpu-1"]) == "gpu-1"
        before = {u.gpu.uuid: u.memory_used_mib for u in first.ext.state.cluster.gpu_usage()}
    async with Running(kube_api) as second:  # a fresh process: lists, then watches
        after = {u.gpu.uuid: u.memory_used_mib for u in second.ext.state.cluster.gpu_usage()}
        assert after == before == {"GPU-gpu-1-0": 8192, "GPU-gpu-1-1": 8192}
        got = await second.filter("c", ["gpu-1"])
        assert got["NodeNames"] == [] and "gpu-1" in got["FailedNodes"], \
            "both GPUs are taken: placing c would double-book one"


async def test_an_assignment_without_a_binding_holds_nothing(kube_api):
    from lightkube.resources.core_v1 import Pod

    admin = kube_api.async_client()
    await create(admin, node_obj("gpu-1", gpus=1, mem=8192))
    for name in ("crashed", "next"):
        await create(admin, pod_obj(name, mem=8192))
    # gpuslice's bind writes the assignment and spec.nodeName in one Binding, so an assignment
    # on an unbound pod was written by someone else (or left by a release that patched first):
    # believed, it would hold the GPU for the in-flight timeout (docs/scheduler.md)
    a = model.PodAssignment(node="gpu-1", containers=(model.ContainerAssignment(
        container="main", slices=(model.GPUSlice(uuid="GPU-gpu-1-0", memory_mib=8192,
                                                 cores=10),)),))
    await patch_metadata(admin, Pod, "crashed", namespace="default", annotations={
        codec.ASSIGNMENT_ANNOTATION: codec.encode_assignment(a),
        handoff.BOUND_AT: handoff.format_time(time.time())})
    async with Running(kube_api) as ext:
        assert ext.ext.state.held("default/crashed") is None
        assert await ext.place("next", ["gpu-1"]) == "gpu-1"

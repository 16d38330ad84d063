"""The node agent's Allocate answer for a 2-GPU container, used as that container's environment
on the 2-GPU fake driver: the caps the scheduler chose per GPU hold in every process of the
container, whatever order CUDA_VISIBLE_DEVICES gives the GPUs. The container's processes are
tests/gpu/progs/multi_gpu_holder.py on the driver API (ctypes), the child the real-GPU tests
use (tests/gpu/test_multi_gpu.py), so it is checked here too. Mounts are simulated as in
tests/gpu/test_node_agent_on_gpu.py (LD_PRELOAD for ld.so.preload, the region by its host path)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import yaml
from harness import GRANULE, REPO, Harness, MiB

from gpuslice import codec, dialects, handoff, model
from gpuslice.allocator import ClusterState, parse_policy
from gpuslice.container import edits, regions
from gpuslice.node import allocate as alloc
from gpuslice.node.inventory import node_gpus
from gpuslice.node.nvml import FakeBackend
from gpuslice.node.settings import load

sys.path.insert(0, str(REPO / "tests" / "gpu"))
from gpu_harness import Child

GPU0 = "GPU-face0000-0000-0000-0000-000000000000"  # the fake driver's devices
GPU1 = "GPU-face0000-0000-0000-0000-000000000001"
NODE = "node-a"
HOLDER = REPO / "tests" / "gpu" / "progs" / "multi_gpu_holder.py"


@pytest.fixture
def answer(gs: Harness, tmp_path: Path) -> alloc.Answer:
    """The agent's answer for a pod asking 2 GPUs at 50 % of their memory on a node whose NVML
    reports 128 and 256 MiB GPUs (the fake backend), the region written as the agent does."""
    path = tmp_path / "gpus.yaml"
    path.write_text(yaml.safe_dump({"gpus": [
        {"uuid": GPU0, "memoryMiB": 128, "nvlinkPeers": [GPU1]},
        {"uuid": GPU1, "memoryMiB": 256, "nvlinkPeers": [GPU0]}]}))
    cfg = load(None, flags={"nodeName": NODE}, environ={})
    gpus = node_gpus(FakeBackend.from_file(str(path)).devices(), cfg, {})
    state = ClusterState()
    state.add_node(model.NodeInventory(node=NODE, gpus=gpus))
    limits = {"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "50"}
    pod = {"metadata": {"namespace": "default", "name": "p", "uid": "uid-p", "annotations": {},
                        "labels": {handoff.MANAGED_LABEL: "true"}},
           "spec": {"schedulerName": "gpuslice-scheduler", "containers": [
               {"name": "main", "image": "cuda", "resources": {"limits": limits}}]}}
    placed = state.schedule(dialects.parse_pod(pod), parse_policy("topology"))
    assert placed is not None
    pod["metadata"]["annotations"] = {
        codec.ASSIGNMENT_ANNOTATION: codec.encode_assignment(placed.assignment),
        handoff.BOUND_AT: handoff.format_time(time.time() - 1)}
    pod["spec"]["nodeName"] = NODE
    layout = edits.Layout(library_host=str(gs.bins.lib), preload_host="/unused",
                          regions_host=str(tmp_path / "regions"),
                          board_host=str(regions.prepare_board(tmp_path)))
    a = alloc.answer(alloc.in_flight([pod], NODE, time.time(), 120),
                     alloc.assigned_pods([pod], NODE), {g.uuid: g for g in gpus},
                     "nvidia.com/gpu", [f"{GPU0}::0", f"{GPU1}::0"], layout)
    regions.place(regions.prepare(layout.regions_host, a.pod_uid, a.container) /
                  edits.REGION_FILE, a.region)
    return a


def _container_process(gs: Harness, a: alloc.Answer, visible: str) -> Child:
    env = gs.env(devices=2, fake_mib=1024, extra={**a.envs, "CUDA_VISIBLE_DEVICES": visible})
    env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = str(Path(a.region_host_dir) / edits.REGION_FILE)
    ordinals = ",".join(str(i) for i in range(len(visible.split(","))))
    return Child([sys.executable, str(HOLDER), "--api", "driver", "--devices", ordinals], env,
                 timeout=30)


def test_the_answer_gives_each_gpu_its_own_share_in_the_containers_device_order(
        answer: alloc.Answer) -> None:
    assert (answer.envs["GPUSLICE_DEVICE_UUIDS"], answer.envs["CUDA_DEVICE_MEMORY_LIMIT_0"],
            answer.envs["CUDA_DEVICE_MEMORY_LIMIT_1"]) == (f"{GPU0},{GPU1}", "64m", "128m")
    assert answer.region.limits == (64 * MiB, 128 * MiB)


@pytest.mark.parametrize("visible", ["0,1", "1,0"])
def test_every_process_of_the_container_is_capped_per_gpu_by_the_answer(
        gs: Harness, answer: alloc.Answer, visible: str) -> None:
    child = _container_process(gs, answer, visible)
    try:
        seen = {d["uuid"]: d["total"] for d in child.ready["devices"]}
        assert seen == {GPU0: 64 * MiB, GPU1: 128 * MiB}, (
            f"each GPU shows its share whatever its ordinal: {child.ready}\n{child.log()}")
        for d in child.ready["devices"]:
            fill = child.send(op="fill", device=d["ordinal"], chunks=[16 * MiB, GRANULE])
            assert fill["error"] == "CUDA_ERROR_OUT_OF_MEMORY", fill
            assert fill["allocated"] == d["free"], (
                f"{d['uuid']}: all of what it showed free, and no more: {fill}")
    finally:
        child.close()

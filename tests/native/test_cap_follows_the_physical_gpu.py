"""The cap follows the physical GPU, not the CUDA ordinal: processes of one container that see
different CUDA_VISIBLE_DEVICES (per-rank pinning, torchrun) share each GPU's cap; re-ordering
CUDA_VISIBLE_DEVICES gives a tenant no bigger cap; with GPUSLICE_DEVICE_UUIDS (set by the node
agent) CUDA_DEVICE_MEMORY_LIMIT_<i> is the i-th GPU of that list whatever a process sees; a
stream-ordered pool is charged to its own GPU, not to its stream's. Fake driver with 2 GPUs."""

from __future__ import annotations

from harness import CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS, Harness, MiB, read_line

from gpuslice.shim import Region

GPU0 = "GPU-face0000-0000-0000-0000-000000000000"
GPU1 = "GPU-face0000-0000-0000-0000-000000000001"


def _visible(order: str, **extra: str) -> dict[str, str]:
    return {"CUDA_VISIBLE_DEVICES": order, **extra}


def test_two_processes_that_see_the_gpus_in_another_order_share_each_gpus_cap(gs: Harness) -> None:
    first = gs.spawn("init", "ctx", 0, "alloc", 48 * MiB, "hold", limit="64Mi", devices=2,
                     extra=_visible("0,1"))
    try:
        assert read_line(first, "alloc").rc == CUDA_SUCCESS
        # ordinal 1 of this process is physical GPU 0, which already holds 48 of its 64 MiB
        res = gs.probe("init", "ctx", 1, "alloc", 32 * MiB, "ctx", 0, "alloc", 48 * MiB,
                       limit="64Mi", devices=2, extra=_visible("1,0"))
        on_gpu0, on_gpu1 = (a.rc for a in res.of("alloc"))
        assert on_gpu0 == CUDA_ERROR_OUT_OF_MEMORY, (
            f"GPU 0 is full whatever its ordinal:\n{res.describe()}")
        assert on_gpu1 == CUDA_SUCCESS, f"GPU 1 is idle, so it has room:\n{res.describe()}"
        region = Region.read(gs.region).by_uuid()
        assert (region[GPU0].used, region[GPU1].used) == (48 * MiB, 0), "counted per GPU UUID"
    finally:
        first.kill()
        first.wait()


def test_reordering_visible_devices_gives_no_bigger_cap(gs: Harness) -> None:
    agent = {"GPUSLICE_DEVICE_UUIDS": f"{GPU0},{GPU1}", "CUDA_DEVICE_MEMORY_LIMIT_0": "64Mi",
             "CUDA_DEVICE_MEMORY_LIMIT_1": "256Mi"}
    # the tenant puts GPU 1 first: its ordinal 1 is GPU 0, still index 0 of the agent's list
    res = gs.probe("init", "ctx", 1, "alloc", 128 * MiB, "ctx", 0, "alloc", 128 * MiB, devices=2,
                   extra=_visible("1,0", **agent))
    on_gpu0, on_gpu1 = (a.rc for a in res.of("alloc"))
    assert on_gpu0 == CUDA_ERROR_OUT_OF_MEMORY, f"GPU 0 keeps its 64 MiB cap:\n{res.describe()}"
    assert on_gpu1 == CUDA_SUCCESS, f"GPU 1 has 256 MiB:\n{res.describe()}"
    res = gs.probe("init", "ctx", 0, "info", devices=2, extra=_visible("1", **agent))
    assert res.one("info").int("total") == 256 * MiB, (
        f"a process seeing only GPU 1 gets its cap (index 1 of the list):\n{res.describe()}")


def test_a_gpu_outside_the_agents_list_is_refused(gs: Harness) -> None:
    agent = {"GPUSLICE_DEVICE_UUIDS": GPU1, "CUDA_DEVICE_MEMORY_LIMIT": "64Mi"}
    res = gs.probe("init", "ctx", 0, "alloc", 2 * MiB, devices=2, extra=_visible("0", **agent))
    assert res.one("alloc").rc == CUDA_ERROR_OUT_OF_MEMORY, res.describe()
    errors = res.log_lines("E")
    assert any("not one of this container's GPUs" in ln for ln in errors), res.describe()


def test_a_pool_is_charged_to_its_own_gpu_not_to_its_streams(gs: Harness) -> None:
    limits = {"CUDA_DEVICE_MEMORY_LIMIT_0": "64Mi", "CUDA_DEVICE_MEMORY_LIMIT_1": "1Gi"}
    # the pool is created on GPU 0, and first used from a stream of GPU 1
    res = gs.probe("init", "ctx", 0, "poolcreate", "ctx", 1, "poolalloc", 80 * MiB, "info",
                   devices=2, extra=limits)
    assert res.one("poolcreate").rc == CUDA_SUCCESS, res.describe()
    assert res.one("poolalloc").rc == CUDA_ERROR_OUT_OF_MEMORY, (
        f"80 MiB on GPU 0 passes its 64 MiB:\n{res.describe()}")
    assert res.one("info").int("free") == 1024 * MiB, (
        f"nothing was charged to the stream's GPU 1:\n{res.describe()}")


def test_nvidia_smi_alone_in_a_fresh_container_sees_each_gpus_cap(gs: Harness) -> None:
    # nvidia-smi calls NVML only, never cuInit: the GPUs get their entries from NVML's UUIDs
    gpus = gs.smi(devices=2, extra={"CUDA_DEVICE_MEMORY_LIMIT_0": "64Mi",
                                    "CUDA_DEVICE_MEMORY_LIMIT_1": "128Mi"})
    assert [g["v2_total"] for g in gpus] == [str(64 * MiB), str(128 * MiB)], gpus
    agent = {"GPUSLICE_DEVICE_UUIDS": f"{GPU1},{GPU0}", "CUDA_DEVICE_MEMORY_LIMIT_0": "256Mi",
             "CUDA_DEVICE_MEMORY_LIMIT_1": "64Mi"}
    gpus = gs.smi(devices=2, region=gs.tmp / "agent.region", extra=agent)
    assert [g["v2_total"] for g in gpus] == [str(64 * MiB), str(256 * MiB)], (
        f"with the agent's list, index 0 is GPU 1 whatever NVML's order: {gpus}")

"""NVML under libgpuslice reports the slice: nvmlDeviceGetMemoryInfo and _v2 give total = limit,
used = the region's accounted use, free = total - used, whether NVML is dlopen'ed (nvidia-smi,
pynvml) or linked. NVML devices are mapped to CUDA ordinals by UUID, so CUDA_VISIBLE_DEVICES
(which NVML ignores) still puts the limit on the right GPU."""

from __future__ import annotations

import pytest
from harness import CUDA_SUCCESS, Harness, MiB, read_line

LIMIT = 64 * MiB


@pytest.mark.parametrize("linked", [False, True], ids=["dlopen", "linked"])
def test_nvml_memory_info_v1_and_v2_show_the_slice(gs: Harness, linked: bool) -> None:
    holder = gs.spawn("init", "ctx", "alloc", 10 * MiB, "hold", limit="64Mi")
    try:
        assert read_line(holder, "alloc").rc == CUDA_SUCCESS
        gpu = gs.smi(linked=linked, limit="64Mi")[0]
    finally:
        holder.kill()
        holder.wait()
    assert (gpu["v1_rc"], gpu["v2_rc"]) == ("0", "0"), gpu
    assert (int(gpu["v1_total"]), int(gpu["v1_used"]), int(gpu["v1_free"])) == (
        LIMIT,
        10 * MiB,
        LIMIT - 10 * MiB,
    ), f"NVML v1 must show the slice: {gpu}"
    v2 = (int(gpu["v2_total"]), int(gpu["v2_used"]) + int(gpu["v2_reserved"]), int(gpu["v2_free"]))
    assert v2 == (LIMIT, 10 * MiB, LIMIT - 10 * MiB), f"NVML v2 must show the slice: {gpu}"


def test_nvml_used_counts_every_process_of_the_region(gs: Harness) -> None:
    holders = [gs.spawn("init", "ctx", "alloc", n * MiB, "hold", limit="64Mi") for n in (8, 16)]
    try:
        for h in holders:
            assert read_line(h, "alloc").rc == CUDA_SUCCESS
        gpu = gs.smi(limit="64Mi")[0]
    finally:
        for h in holders:
            h.kill()
            h.wait()
    assert int(gpu["v1_used"]) == 24 * MiB, f"8 + 16 MiB from two processes: {gpu}"


def test_the_limit_follows_the_uuid_when_cuda_visible_devices_reorders_gpus(gs: Harness) -> None:
    env = {"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_MEMORY_LIMIT_0": "32Mi"}
    holder = gs.spawn("init", "ctx", "alloc", 4 * MiB, "hold", devices=2, fake_mib=512, extra=env)
    try:
        assert read_line(holder, "alloc").rc == CUDA_SUCCESS
        gpus = gs.smi(devices=2, fake_mib=512, extra=env)
    finally:
        holder.kill()
        holder.wait()
    physical1 = gpus[1]
    assert int(physical1["v1_total"]) == 32 * MiB, (
        f"CUDA ordinal 0 is physical GPU 1 (by UUID); its NVML entry must show the limit: {gpus}"
    )
    assert int(physical1["v1_used"]) == 4 * MiB, gpus
    assert int(gpus[0]["v1_total"]) != 32 * MiB, f"physical GPU 0 is not this container's: {gpus}"

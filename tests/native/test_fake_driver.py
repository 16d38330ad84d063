"""The fake driver itself (no libgpuslice): the behaviour the library tests rely on, so a broken
fake cannot make them pass. ABI-variant selection of cuGetProcAddress, pools that keep memory until
trimmed or synchronised, shared device memory across processes with dead processes' bytes freed,
NVML per-process usage, CUDA_VISIBLE_DEVICES, and the virtual GPU timeline of launches."""

from __future__ import annotations

import signal

import pytest
from harness import (
    CUDA_ERROR_NOT_FOUND,
    CUDA_ERROR_OUT_OF_MEMORY,
    CUDA_SUCCESS,
    Harness,
    MiB,
    read_line,
)


@pytest.mark.parametrize(
    ("via", "cmd", "variant"),
    [
        ("procaddr:13000", "async", "cuMemAllocAsync"),
        ("procaddr:13000:ptsz", "async", "cuMemAllocAsync_ptsz"),
        ("procaddr_v1:11040:ptsz", "poolalloc", "cuMemAllocFromPoolAsync_ptsz"),
        ("procaddr:11040", "ctxcreate", "cuCtxCreate_v3"),
        ("procaddr:13000", "ctxcreate", "cuCtxCreate_v4"),
        ("procaddr:11000", "uuid", "cuDeviceGetUuid"),
        ("dlopen:ptsz", "sync", "cuStreamSynchronize_ptsz"),
    ],
)
def test_fake_get_proc_address_picks_the_variant_for_version_and_flag(
    gs: Harness, via: str, cmd: str, variant: str
) -> None:
    args = [cmd, MiB] if cmd in ("async", "poolalloc") else [cmd]
    res = gs.probe("init", "ctx", *args, via=via, binary="probe_dl", preload=False)
    assert res.one(cmd).kv["variant"] == variant, res.describe()


def test_fake_get_proc_address_reports_too_old_versions_and_unknown_names(gs: Harness) -> None:
    res = gs.probe(
        "init",
        "resolve",
        "cuMemAllocAsync",
        11000,
        "resolve",
        "cuBogus",
        13000,
        via="procaddr:13000",
        binary="probe_dl",
        preload=False,
    )
    old, bogus = res.of("resolve")
    assert (old.rc, old.int("status")) == (CUDA_ERROR_NOT_FOUND, 2), res.describe()
    assert (bogus.rc, bogus.int("status")) == (CUDA_ERROR_NOT_FOUND, 1), res.describe()


def test_fake_pool_keeps_memory_until_trim_or_synchronize(gs: Harness) -> None:
    res = gs.probe(
        "init",
        "ctx",
        "async",
        10 * MiB,
        "free",
        "poolattr",
        "trim",
        4 * MiB,
        "poolattr",
        "sync",
        "poolattr",
        preload=False,
    )
    kept, trimmed, synced = res.of("poolattr")
    assert (kept.int("reserved"), kept.int("used")) == (10 * MiB, 0), res.describe()
    assert trimmed.int("reserved") == 4 * MiB, res.describe()
    assert synced.int("reserved") == 0, f"threshold 0: released at sync:\n{res.describe()}"


def test_fake_device_memory_is_shared_and_a_killed_process_frees_it(gs: Harness) -> None:
    holder = gs.spawn("init", "ctx", "alloc", 200 * MiB, "hold", preload=False, fake_mib=256)
    try:
        assert read_line(holder, "alloc").rc == CUDA_SUCCESS
        res = gs.probe("init", "ctx", "info", "alloc", 100 * MiB, preload=False, fake_mib=256)
        assert res.one("info").int("free") == 56 * MiB, res.describe()
        assert res.one("alloc").rc == CUDA_ERROR_OUT_OF_MEMORY, res.describe()
        assert [g["procs"].split(":")[1].strip() for g in gs.smi(preload=False, fake_mib=256)] == [
            str(200 * MiB)
        ], "NVML lists the holder's bytes"
    finally:
        holder.popen.send_signal(signal.SIGKILL)
        holder.wait()
    res = gs.probe("init", "ctx", "alloc", 200 * MiB, preload=False, fake_mib=256)
    assert res.one("alloc").rc == CUDA_SUCCESS, res.describe()
    assert gs.fake().peak[0] == 200 * MiB


def test_fake_cuda_visible_devices_selects_and_orders_gpus(gs: Harness) -> None:
    res = gs.probe(
        "init", "ctx", "uuid", preload=False, devices=3, extra={"CUDA_VISIBLE_DEVICES": "2,0"}
    )
    assert res.one("uuid").kv["bytes"].endswith("02"), (
        f"ordinal 0 is physical GPU 2:\n{res.describe()}"
    )


def test_fake_launches_occupy_the_virtual_gpu_for_their_block_count(gs: Harness) -> None:
    res = gs.probe("init", "ctx", "launch", 2000, 10, preload=False)
    ms = float(res.one("launch").kv["ms"])
    assert 20.0 <= ms < 200.0, (
        f"10 launches x 2000 blocks x 1 us = 20 ms of GPU time:\n{res.describe()}"
    )

"""Every allocation path counts against the cap and gets CUDA_ERROR_OUT_OF_MEMORY over it: plain,
pitch (the driver's real pitch x height), managed, VMM (cuMemCreate at the driver's granularity),
stream-ordered (cuMemAllocAsync, cuMemAllocFromPoolAsync: what the pool really reserves, until a
trim or a synchronisation releases it), arrays (1D/2D, 3D, mipmapped) and contexts' own footprint.
The fake charges exactly what each path takes on a real GPU (native/fake/fake.h)."""

from __future__ import annotations

import pytest
from harness import CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS, GRANULE, Harness, MiB, Result, read_line

LIMIT = 64 * MiB
CAP = "64Mi"


def rcs(res: Result, cmd: str) -> list[int]:
    return [ln.rc for ln in res.of(cmd)]


@pytest.mark.parametrize(
    ("path", "cmd", "args"),
    [
        ("plain", "alloc", [LIMIT]),
        ("managed", "managed", [LIMIT]),
        ("vmm", "vmm", [LIMIT]),
        ("stream-ordered, default pool", "async", [LIMIT]),
        ("stream-ordered, own pool", "poolalloc", [LIMIT]),
        ("pitch 1024 x 65536", "pitch", [1000, 65536, 4]),
        ("2D array 128 floats x 131072 rows", "array", [128, 131072]),
        ("3D array 128 x 1024 x 128 floats", "array3d", [128, 1024, 128]),
    ],
)
def test_each_path_can_use_the_whole_cap_and_nothing_more(
    gs: Harness, path: str, cmd: str, args: list[int]
) -> None:
    res = gs.probe("init", "ctx", cmd, *args, "alloc", 1, "info", limit=CAP)
    assert res.of(cmd)[0].rc == CUDA_SUCCESS, (
        f"{path}: the whole cap must be usable:\n{res.describe()}"
    )
    assert res.of("alloc")[-1].rc == CUDA_ERROR_OUT_OF_MEMORY, (
        f"{path}: its bytes must count against the cap:\n{res.describe()}"
    )
    assert res.one("info").int("free") == 0, f"{path}: cuMemGetInfo must see it:\n{res.describe()}"


@pytest.mark.parametrize(
    ("path", "cmd", "args"),
    [
        ("plain", "alloc", [LIMIT + 1]),
        ("managed", "managed", [LIMIT + 1]),
        ("vmm", "vmm", [LIMIT + GRANULE]),
        ("stream-ordered, default pool", "async", [LIMIT + 1]),
        ("stream-ordered, own pool", "poolalloc", [LIMIT + 1]),
        ("pitch: 1000 B rows fit, 1024 B real pitch does not", "pitch", [1000, 66000, 4]),
        ("2D array", "array", [128, 131073]),
        ("3D array", "array3d", [128, 1024, 129]),
        ("mipmapped array", "mipmap", [4096, 4096, 2]),
    ],
)
def test_each_path_over_the_cap_is_out_of_memory(
    gs: Harness, path: str, cmd: str, args: list[int]
) -> None:
    res = gs.probe("init", "ctx", cmd, *args, "info", limit=CAP)
    assert rcs(res, cmd) == [CUDA_ERROR_OUT_OF_MEMORY], f"{path}:\n{res.describe()}"
    assert res.one("info").int("free") == LIMIT, (
        f"{path}: a refusal charges nothing:\n{res.describe()}"
    )


@pytest.mark.parametrize(
    ("cmd", "args"),
    [
        ("alloc", [LIMIT]),
        ("managed", [LIMIT]),
        ("vmm", [LIMIT]),
        ("pitch", [1000, 65536, 4]),
        ("array", [128, 131072]),
        ("array3d", [128, 1024, 128]),
        ("mipmap", [1024, 1024, 1]),
    ],
)
def test_each_path_gives_its_bytes_back_when_freed(gs: Harness, cmd: str, args: list[int]) -> None:
    res = gs.probe("init", "ctx", cmd, *args, "free", "info", "alloc", LIMIT, limit=CAP)
    assert res.one("free").rc == CUDA_SUCCESS, res.describe()
    assert res.one("info").int("free") == LIMIT, f"{cmd}: freed bytes return:\n{res.describe()}"
    assert res.of("alloc")[-1].rc == CUDA_SUCCESS, res.describe()


def test_the_pitch_charged_is_the_drivers_pitch_times_height(gs: Harness) -> None:
    res = gs.probe("init", "ctx", "pitch", 1000, 16384, 4, "info", limit=CAP)
    line = res.one("pitch")
    assert (line.rc, line.int("pitch")) == (CUDA_SUCCESS, 1024), res.describe()
    assert res.one("info").int("free") == LIMIT - 1024 * 16384, (
        f"1024 B pitch x 16384 rows = 16 MiB, not 1000 x 16384:\n{res.describe()}"
    )


def test_vmm_allocations_use_the_drivers_granularity(gs: Harness) -> None:
    res = gs.probe("init", "ctx", "vmm", 3 * MiB, "info", limit=CAP)
    line = res.one("vmm")
    assert (line.rc, line.int("granularity")) == (CUDA_SUCCESS, GRANULE), res.describe()
    assert res.one("info").int("free") == LIMIT - 4 * MiB, res.describe()


def test_a_pool_keeps_freed_memory_counted_until_it_is_trimmed(gs: Harness) -> None:
    res = gs.probe(
        "init",
        "ctx",
        "threshold",
        2**64 - 1,
        "async",
        LIMIT,
        "free",
        "poolattr",
        "alloc",
        GRANULE,
        "trim",
        0,
        "poolattr",
        "alloc",
        LIMIT,
        limit=CAP,
    )
    held, trimmed = res.of("poolattr")
    assert held.int("reserved") == LIMIT, f"the fake pool keeps its memory:\n{res.describe()}"
    first, second = res.of("alloc")
    assert first.rc == CUDA_ERROR_OUT_OF_MEMORY, (
        f"memory the pool still reserves is in use on the GPU and must count:\n{res.describe()}"
    )
    assert trimmed.int("reserved") == 0, res.describe()
    assert second.rc == CUDA_SUCCESS, f"cuMemPoolTrimTo returned the bytes:\n{res.describe()}"


def test_a_pool_reuses_its_reserve_without_being_charged_twice(gs: Harness) -> None:
    res = gs.probe(
        "init",
        "ctx",
        "threshold",
        2**64 - 1,
        "async",
        32 * MiB,
        "free",
        "async",
        32 * MiB,
        "alloc",
        32 * MiB,
        "alloc",
        1,
        limit=CAP,
    )
    assert rcs(res, "async") == [CUDA_SUCCESS, CUDA_SUCCESS], res.describe()
    assert rcs(res, "alloc") == [CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY], (
        f"32 MiB pool + 32 MiB plain fill the cap exactly:\n{res.describe()}"
    )


def test_memory_a_pool_releases_at_synchronize_is_given_back(gs: Harness) -> None:
    # CUDA: with the default release threshold (0) a pool returns unused memory to the OS at the
    # next stream/event/context synchronisation; the fake does the same.
    res = gs.probe(
        "init", "ctx", "async", LIMIT, "free", "sync", "poolattr", "alloc", LIMIT, limit=CAP
    )
    assert res.one("poolattr").int("reserved") == 0, res.describe()
    assert res.one("alloc").rc == CUDA_SUCCESS, (
        f"the pool gave its memory back at cuStreamSynchronize:\n{res.describe()}"
    )


def test_an_own_pool_is_trimmed_and_destroyed_back_to_zero(gs: Harness) -> None:
    res = gs.probe(
        "init",
        "ctx",
        "poolalloc",
        32 * MiB,
        "free",
        "ownpoolattr",
        "alloc",
        48 * MiB,
        "owntrim",
        0,
        "alloc",
        32 * MiB,
        "free",
        "free",
        "poolalloc",
        16 * MiB,
        "free",
        "destroypool",
        "info",
        limit=CAP,
    )
    assert rcs(res, "alloc") == [CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS], res.describe()
    assert res.one("destroypool").rc == CUDA_SUCCESS, res.describe()
    assert res.one("info").int("free") == LIMIT, (
        f"a destroyed pool holds nothing:\n{res.describe()}"
    )


def test_each_context_footprint_counts_against_the_cap(gs: Harness) -> None:
    res = gs.probe(
        "init",
        "ctx",
        "info",
        "ctxcreate",
        "info",
        "alloc",
        LIMIT - 16 * MiB,
        "alloc",
        1,
        "free",
        "free",
        "ctxdestroy",
        "info",
        limit=CAP,
        ctx_mib=8,
    )
    primary, extra, destroyed = res.of("info")
    assert primary.int("free") == LIMIT - 8 * MiB, (
        f"the primary context's 8 MiB is on the GPU and must count:\n{res.describe()}"
    )
    assert extra.int("free") == LIMIT - 16 * MiB, f"a second context adds 8 MiB:\n{res.describe()}"
    assert rcs(res, "alloc") == [CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY], res.describe()
    assert destroyed.int("free") == LIMIT - 8 * MiB, (
        f"cuCtxDestroy gives 8 MiB back:\n{res.describe()}"
    )


def test_total_is_the_limit_on_every_reporting_path(gs: Harness) -> None:
    holder = gs.spawn("init", "ctx", "alloc", 10 * MiB, "info", "total", "hold", limit=CAP)
    try:
        info, total = read_line(holder, "info"), read_line(holder, "total")
        read_line(holder, "hold")
        assert info.int("total") == LIMIT and total.int("total") == LIMIT, (
            f"{info.text}\n{total.text}"
        )
        gpu = gs.smi(limit=CAP)[0]
        assert (int(gpu["v1_total"]), int(gpu["v2_total"])) == (LIMIT, LIMIT), (
            f"NVML v1 and v2 must report the limit as total: {gpu}"
        )
        assert (int(gpu["v1_used"]), int(gpu["v1_free"])) == (10 * MiB, LIMIT - 10 * MiB), gpu
    finally:
        holder.kill()
        holder.wait()

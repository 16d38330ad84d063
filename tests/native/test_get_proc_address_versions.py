"""Every way an application finds driver functions sees the cap: direct linking, dlopen + dlsym of
the ABI names on the libcuda handle, and cuGetProcAddress / cuGetProcAddress_v2 for several CUDA
versions with and without the per-thread-default-stream flag. The fake records which exported ABI
variant ran last (fakecuda_last_variant), so the tests also check that the library forwards to
exactly the variant the version and flag select (e.g. cuMemAllocAsync_ptsz, cuCtxCreate_v3)."""

from __future__ import annotations

import pytest
from harness import CUDA_ERROR_NOT_FOUND, CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS, Harness, MiB

LIMIT = 64 * MiB
CAP = "64Mi"

ACCESS = [  # (id, binary, --via, per-thread-stream variants expected)
    ("linked", "probe", None, False),
    ("linked, per-thread default stream", "probe_ptsz", None, True),
    ("dlopen+dlsym", "probe_dl", "dlopen", False),
    ("dlopen+dlsym _ptsz names", "probe_dl", "dlopen:ptsz", True),
    ("cuGetProcAddress_v2 12.0", "probe_dl", "procaddr:12000", False),
    ("cuGetProcAddress_v2 12.5", "probe_dl", "procaddr:12050", False),
    ("cuGetProcAddress_v2 13.0", "probe_dl", "procaddr:13000", False),
    ("cuGetProcAddress_v2 12.0 ptds", "probe_dl", "procaddr:12000:ptsz", True),
    ("cuGetProcAddress_v2 13.0 ptds", "probe_dl", "procaddr:13000:ptsz", True),
    ("cuGetProcAddress 11.4", "probe_dl", "procaddr_v1:11040", False),
    ("cuGetProcAddress 12.0 ptds", "probe_dl", "procaddr_v1:12000:ptsz", True),
]


@pytest.mark.parametrize(
    ("binary", "via", "ptsz"), [a[1:] for a in ACCESS], ids=[a[0] for a in ACCESS]
)
def test_every_access_path_sees_the_cap(
    gs: Harness, binary: str, via: str | None, ptsz: bool
) -> None:
    res = gs.probe(
        "init",
        "ctx",
        "info",
        "alloc",
        LIMIT,
        "async",
        1,
        "free",
        "async",
        LIMIT,
        "alloc",
        1,
        "free",
        "trim",
        0,
        "info",
        via=via,
        binary=binary,
        limit=CAP,
    )
    first_info, last_info = res.of("info")
    assert first_info.int("total") == LIMIT, f"cuMemGetInfo must be virtualised:\n{res.describe()}"
    plain_ok, plain_over = res.of("alloc")
    over_async, async_ok = res.of("async")
    assert plain_ok.rc == CUDA_SUCCESS and plain_ok.kv["variant"] == "cuMemAlloc_v2", res.describe()
    assert over_async.rc == CUDA_ERROR_OUT_OF_MEMORY, f"async over a full cap:\n{res.describe()}"
    want = "cuMemAllocAsync_ptsz" if ptsz else "cuMemAllocAsync"
    assert async_ok.rc == CUDA_SUCCESS and async_ok.kv["variant"] == want, (
        f"the library must call the driver's {want}:\n{res.describe()}"
    )
    assert plain_over.rc == CUDA_ERROR_OUT_OF_MEMORY, f"the pool holds the cap:\n{res.describe()}"
    free_async = res.of("free")[1]
    assert free_async.kv["variant"] == ("cuMemFreeAsync_ptsz" if ptsz else "cuMemFreeAsync"), (
        res.describe()
    )
    assert last_info.int("free") == LIMIT, f"everything was freed and trimmed:\n{res.describe()}"


@pytest.mark.parametrize(
    ("version", "variant"),
    [
        (11000, "cuCtxCreate_v2"),
        (11040, "cuCtxCreate_v3"),
        (12000, "cuCtxCreate_v3"),
        (12050, "cuCtxCreate_v4"),
        (13000, "cuCtxCreate_v4"),
    ],
)
def test_cu_ctx_create_resolves_to_the_abi_of_the_requested_version(
    gs: Harness, version: int, variant: str
) -> None:
    res = gs.probe(
        "init",
        "ctx",
        "info",
        "ctxcreate",
        "info",
        via=f"procaddr:{version}",
        binary="probe_dl",
        limit=CAP,
        ctx_mib=8,
    )
    create = res.one("ctxcreate")
    assert (create.rc, create.kv["variant"]) == (CUDA_SUCCESS, variant), res.describe()
    before, after = res.of("info")
    assert before.int("free") - after.int("free") == 8 * MiB, (
        f"a context created through {variant} is charged its footprint:\n{res.describe()}"
    )


@pytest.mark.parametrize(
    ("version", "variant"), [(11000, "cuDeviceGetUuid"), (13000, "cuDeviceGetUuid_v2")]
)
def test_unhooked_functions_keep_the_drivers_version_choice(
    gs: Harness, version: int, variant: str
) -> None:
    res = gs.probe("init", "ctx", "uuid", via=f"procaddr:{version}", binary="probe_dl", limit=CAP)
    assert res.one("uuid").kv["variant"] == variant, res.describe()


@pytest.mark.parametrize(
    ("name", "version", "flag", "owner"),
    [
        ("cuMemAlloc", 13000, "", "libgpuslice.so"),
        ("cuMemAllocAsync", 12000, "ptsz", "libgpuslice.so"),
        ("cuMemGetInfo", 12000, "", "libgpuslice.so"),
        ("cuGetProcAddress", 13000, "", "libgpuslice.so"),
        ("cuStreamSynchronize", 13000, "ptsz", "libgpuslice.so"),
        ("cuStreamQuery", 13000, "ptsz", "libcuda.so.1"),
        ("cuDeviceGetName", 13000, "", "libcuda.so.1"),
    ],
)
def test_get_proc_address_substitutes_exactly_the_hooked_functions(
    gs: Harness, name: str, version: int, flag: str, owner: str
) -> None:
    args = ["resolve", name, version] + ([flag] if flag else [])
    res = gs.probe("init", *args, via="procaddr:13000", binary="probe_dl", limit=CAP)
    line = res.one("resolve")
    assert (line.rc, line.kv["obj"]) == (CUDA_SUCCESS, owner), res.describe()


@pytest.mark.parametrize(
    ("name", "version", "status"),
    [
        ("cuNoSuchFunction", 13000, 1),  # CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND
        ("cuMemAllocAsync", 11000, 2),  # CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT (added in 11.2)
    ],
)
def test_get_proc_address_failures_are_the_drivers(
    gs: Harness, name: str, version: int, status: int
) -> None:
    with_lib = gs.probe(
        "init", "resolve", name, version, via="procaddr:13000", binary="probe_dl", limit=CAP
    )
    line = with_lib.one("resolve")
    assert (line.rc, line.int("status"), line.kv["obj"]) == (CUDA_ERROR_NOT_FOUND, status, "-"), (
        with_lib.describe()
    )

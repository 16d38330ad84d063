"""With libgpuslice preloaded but no limit in the environment, everything passes through: the
whole fake device can be allocated, every reported number equals the driver's own, and
cuGetProcAddress hands out the driver's functions (nothing is substituted that need not be)."""

from __future__ import annotations

from harness import CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS, GRANULE, Harness, MiB

SCRIPT = (
    "init",
    "ctx",
    "info",
    "total",
    "alloc",
    100 * MiB,
    "pitch",
    1000,
    100,
    4,
    "async",
    3 * MiB,
    "poolattr",
    "vmm",
    4 * MiB,
    "info",
    "freeall",
    "info",
)


def test_numbers_are_the_drivers_own_with_the_library_and_no_limit(gs: Harness) -> None:
    bare = gs.probe(*SCRIPT, preload=False, fake_mib=256)
    shim = gs.probe(*SCRIPT, fake_mib=256)
    assert [ln.text for ln in shim.lines] == [ln.text for ln in bare.lines], (
        f"without a limit the library must change nothing:\n{bare.describe()}\n{shim.describe()}"
    )
    assert shim.of("info")[0].int("total") == 256 * MiB


def test_the_whole_device_can_be_allocated_without_a_limit(gs: Harness) -> None:
    res = gs.probe("init", "ctx", "fill", GRANULE, fake_mib=256)
    fill = res.one("fill")
    assert (fill.int("bytes"), fill.rc) == (256 * MiB, CUDA_ERROR_OUT_OF_MEMORY), res.describe()
    assert not res.log_lines(), (
        f"the driver's own OOM is not the library's to report:\n{res.describe()}"
    )


def test_get_proc_address_returns_the_drivers_functions_without_a_limit(gs: Harness) -> None:
    res = gs.probe(
        "init",
        "resolve",
        "cuMemAlloc",
        13000,
        "resolve",
        "cuMemGetInfo",
        13000,
        "resolve",
        "cuMemAllocAsync",
        13000,
        "ptsz",
        via="procaddr:13000",
        binary="probe_dl",
    )
    owners = {ln.args[0]: ln.kv["obj"] for ln in res.of("resolve")}
    assert owners == dict.fromkeys(
        ("cuMemAlloc", "cuMemGetInfo", "cuMemAllocAsync"), "libcuda.so.1"
    ), res.describe()


def test_nvml_numbers_are_unchanged_without_a_limit(gs: Harness) -> None:
    holder = gs.spawn("init", "ctx", "alloc", 10 * MiB, "hold", fake_mib=256)
    try:
        from harness import read_line

        assert read_line(holder, "alloc").rc == CUDA_SUCCESS
        bare, shim = gs.smi(preload=False, fake_mib=256), gs.smi(fake_mib=256)
    finally:
        holder.kill()
        holder.wait()
    assert bare == shim, f"NVML must pass through: {bare} vs {shim}"
    assert int(shim[0]["v1_total"]) == 256 * MiB and int(shim[0]["v1_used"]) == 10 * MiB

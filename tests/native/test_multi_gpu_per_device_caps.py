"""Per-device caps on a 2-GPU fake driver, as issue 14 item 1 asks of a real 2-GPU machine:
a process seeing both GPUs with CUDA_DEVICE_MEMORY_LIMIT_0/_1 is capped on each at its own cap;
processes of one container pinned to different GPUs (CUDA_VISIBLE_DEVICES=0 and =1, per-rank
pinning) and one that sees both in the other order share each GPU's cap, and what the region
accounts per GPU and per process equals what the driver's NVML lists. The same checks on real
GPUs: tests/gpu/test_multi_gpu.py. Contexts cost 4 MiB here, so they are counted too."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from harness import (
    CUDA_ERROR_OUT_OF_MEMORY,
    CUDA_SUCCESS,
    Harness,
    MiB,
    Spawned,
    read_line,
)

from gpuslice.shim import Region

GPU0 = "GPU-face0000-0000-0000-0000-000000000000"  # the fake driver's physical devices
GPU1 = "GPU-face0000-0000-0000-0000-000000000001"
CTX = 4 * MiB
# what the node agent sets for a 2-GPU container: its GPUs, then a cap per index of that list
AGENT = {"GPUSLICE_DEVICE_UUIDS": f"{GPU0},{GPU1}", "CUDA_DEVICE_MEMORY_LIMIT_0": "64Mi",
         "CUDA_DEVICE_MEMORY_LIMIT_1": "128Mi"}


@pytest.fixture
def spawned() -> Iterator[list[Spawned]]:
    procs: list[Spawned] = []
    yield procs
    for p in procs:
        p.kill()
        p.wait()


def _start(gs: Harness, spawned: list[Spawned], visible: str, *cmds: object,
           **extra: str) -> Spawned:
    p = gs.spawn("init", *cmds, "hold", devices=2, ctx_mib=CTX // MiB,
                 extra={"CUDA_VISIBLE_DEVICES": visible, **extra})
    spawned.append(p)
    return p


def _nvml_by_gpu(gs: Harness) -> dict[str, dict[int, int]]:
    """uuid -> {pid: used bytes} as the fake NVML lists them, read without the library."""
    return {g["uuid"]: {int(pid): int(used) for pid, used in
                        (p.split(":") for p in g["procs"].split())}
            for g in gs.smi(devices=2, preload=False)}


def _accounted_by_gpu(gs: Harness) -> dict[str, dict[int, int]]:
    """uuid -> {pid: accounted bytes} from the region, live processes only."""
    region = Region.read(gs.region)
    return {d.uuid: {p.pid: p.used[d.index] for p in region.processes
                     if p.state == "live" and p.used[d.index]}
            for d in region.devices if d.uuid}


def test_a_process_seeing_both_gpus_is_capped_on_each_at_its_own_cap(
        gs: Harness, spawned: list[Spawned]) -> None:
    p = _start(gs, spawned, "0,1", "ctx", 0, "fill", 2 * MiB, "info", "ctx", 1, "fill", 2 * MiB,
               "info", CUDA_DEVICE_MEMORY_LIMIT_0="64Mi",
               CUDA_DEVICE_MEMORY_LIMIT_1="128Mi")
    for cap in (64 * MiB, 128 * MiB):  # GPU 0, then GPU 1
        fill, info = read_line(p, "fill"), read_line(p, "info")
        assert fill.rc == CUDA_ERROR_OUT_OF_MEMORY, f"filling stops at the cap: {p.seen}"
        assert fill.int("bytes") == cap - CTX, f"usable = this GPU's cap - its context: {p.seen}"
        assert (info.int("total"), info.int("free")) == (cap, 0), p.seen
    read_line(p, "hold")
    region = Region.read(gs.region).by_uuid()
    assert (region[GPU0].limit, region[GPU1].limit) == (64 * MiB, 128 * MiB), region
    assert _accounted_by_gpu(gs) == _nvml_by_gpu(gs) == {
        GPU0: {p.pid: 64 * MiB}, GPU1: {p.pid: 128 * MiB}}, "accounted = NVML, per GPU"
    assert gs.fake().used(0) == 64 * MiB and gs.fake().used(1) == 128 * MiB, (
        "the driver holds no more than each GPU's cap")


def test_pinned_ranks_and_a_reordered_process_share_each_gpus_cap(
        gs: Harness, spawned: list[Spawned]) -> None:
    rank0 = _start(gs, spawned, "0", "ctx", 0, "alloc", 40 * MiB, **AGENT)
    rank1 = _start(gs, spawned, "1", "ctx", 0, "alloc", 100 * MiB, **AGENT)
    for rank in (rank0, rank1):
        assert read_line(rank, "alloc").rc == CUDA_SUCCESS, rank.seen
        read_line(rank, "hold")
    # ordinal 0 here is GPU 1 (128 MiB: 100 + 4 taken by rank 1), ordinal 1 is GPU 0 (64: 44)
    other = _start(gs, spawned, "1,0", "ctx", 0, "info", "alloc", 26 * MiB, "alloc", 20 * MiB,
                   "ctx", 1, "info", "alloc", 18 * MiB, "alloc", 16 * MiB, **AGENT)
    on_gpu1 = read_line(other, "info")
    allocs = [read_line(other, "alloc").rc for _ in range(2)]
    on_gpu0 = read_line(other, "info")
    allocs += [read_line(other, "alloc").rc for _ in range(2)]
    read_line(other, "hold")
    assert (on_gpu1.int("total"), on_gpu1.int("free")) == (128 * MiB, 20 * MiB), (
        f"GPU 1's cap minus rank 1's 104 MiB and this context: {other.seen}")
    assert (on_gpu0.int("total"), on_gpu0.int("free")) == (64 * MiB, 16 * MiB), (
        f"GPU 0's cap minus rank 0's 44 MiB and this context: {other.seen}")
    assert allocs == [CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY,
                      CUDA_SUCCESS], f"each GPU's last bytes, whatever its ordinal: {other.seen}"
    expected = {GPU0: {rank0.pid: 44 * MiB, other.pid: 20 * MiB},
                GPU1: {rank1.pid: 104 * MiB, other.pid: 24 * MiB}}
    assert _accounted_by_gpu(gs) == _nvml_by_gpu(gs) == expected, "accounted = NVML, per GPU"
    assert (gs.fake().used(0), gs.fake().used(1)) == (64 * MiB, 128 * MiB), (
        "together the three fill each GPU to its cap and not one byte past it")


def test_without_the_agents_list_a_gpu_keeps_the_one_cap_its_first_user_gave_it(
        gs: Harness, spawned: list[Spawned]) -> None:
    limits = {"CUDA_DEVICE_MEMORY_LIMIT_0": "64Mi", "CUDA_DEVICE_MEMORY_LIMIT_1": "128Mi"}
    first = _start(gs, spawned, "1", "ctx", 0, "alloc", 40 * MiB, **limits)
    assert read_line(first, "alloc").rc == CUDA_SUCCESS, first.seen
    read_line(first, "hold")
    # GPU 1 was first used at index 0, so its cap is LIMIT_0; a process that sees it at index 1
    # shares that cap (a GPU never gets two), it does not get LIMIT_1 beside it
    res = gs.probe("init", "ctx", 1, "info", "alloc", 24 * MiB, "alloc", 16 * MiB, devices=2,
                   ctx_mib=CTX // MiB, extra={"CUDA_VISIBLE_DEVICES": "0,1", **limits})
    assert res.one("info").int("total") == 64 * MiB, res.describe()
    assert [a.rc for a in res.of("alloc")] == [CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS], (
        f"64 - 44 (first) - 4 (this context) = 16 MiB left on GPU 1:\n{res.describe()}")

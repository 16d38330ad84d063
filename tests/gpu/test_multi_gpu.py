"""Per-device caps on two real GPUs (issue 14 item 1), PyTorch and the raw driver API alike.

A process that sees both GPUs with CUDA_DEVICE_MEMORY_LIMIT_0/_1 of different sizes is capped on
each at its own cap; two processes of one container pinned to different GPUs
(CUDA_VISIBLE_DEVICES=0 and =1, as torchrun ranks) and a third that sees both in the other order
share each GPU's cap. Ground truth: NVML's per-process used memory on each GPU, which must equal
what the region accounts to that process on that GPU (within 2 MiB + one granule, DESIGN §6).
The container's env is what the node agent gives a 2-GPU container: GPUSLICE_DEVICE_UUIDS in
NVML order with a limit per index. The same checks on the fake driver:
tests/native/test_multi_gpu_per_device_caps.py. Skipped unless PyTorch sees 2 GPUs.
Run on a machine with 2 GPUs (benchmarks/multi_gpu/run.sh does):
  PYTHONPATH=src python3 -m pytest -m gpu tests/gpu/test_multi_gpu.py --confcutdir=tests/gpu -rA
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from gpu_harness import GRANULE, PROGS, Child, GiB, MiB, nvml_used_by_pid, shim_env, source_env

from gpuslice.shim import Region

pytestmark = pytest.mark.gpu

CAPS = (4 * GiB, 6 * GiB)  # GPU 0's and GPU 1's, different so that a swap shows
CHUNKS = [256 * MiB, 16 * MiB, 2 * MiB]
TOLERANCE = 2 * MiB + GRANULE


@pytest.fixture(scope="module")
def uuids(nvml: Any) -> list[str]:
    """NVML's first two GPUs, skipping unless PyTorch (in a child: the parent never creates a
    CUDA context) sees at least two."""
    count = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                           capture_output=True, text=True, timeout=120, env=source_env())
    seen = int(count.stdout.strip()) if count.returncode == 0 else 0
    if seen < 2:
        pytest.skip(f"needs 2 GPUs; PyTorch sees {seen} ({count.stderr.strip()[-200:]})")
    out = []
    for i in range(2):
        u = nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(i))
        out.append(u.decode() if isinstance(u, bytes) else u)
    return out


@pytest.fixture
def start(libgpuslice: Path, region_path: Path, uuids: list[str]
          ) -> Iterator[Callable[..., Child]]:
    """Start a multi_gpu_holder child of the container: `visible` its CUDA_VISIBLE_DEVICES,
    ordinals PCI-ordered so that they match NVML's indexes."""
    started: list[Child] = []
    agent = {"GPUSLICE_DEVICE_UUIDS": ",".join(uuids), "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
             "CUDA_DEVICE_MEMORY_LIMIT_0": f"{CAPS[0]}", "CUDA_DEVICE_MEMORY_LIMIT_1": f"{CAPS[1]}"}

    def run(visible: str, api: str = "torch") -> Child:
        env = shim_env(libgpuslice, region_path, CUDA_VISIBLE_DEVICES=visible, **agent)
        ordinals = ",".join(str(i) for i in range(len(visible.split(","))))
        child = Child([sys.executable, str(PROGS / "multi_gpu_holder.py"), "--api", api,
                       "--devices", ordinals], env, timeout=120)
        started.append(child)
        return child

    yield run
    for child in started:
        child.kill()
        if child.log():
            print(f"--- stderr of pid {child.pid}:\n{child.log()}")


def _same_gpu(a: str, b: str) -> bool:
    """One GPU by UUID, whatever the spelling (NVML's `GPU-` prefix, PyTorch's own format)."""
    def digits(u: str) -> str:
        return re.sub(r"[^0-9a-f]", "", u.lower().removeprefix("gpu-"))

    return digits(a) == digits(b)


def _per_gpu(nvml: Any, region: Path, uuids: list[str], pids: list[int]
             ) -> dict[str, dict[int, tuple[int, int]]]:
    """uuid -> pid -> (accounted by the region, used per NVML) for each GPU and process."""
    entries = Region.read(region).by_uuid()
    live = {p.pid: p for p in Region.read(region).processes if p.state == "live"}
    out: dict[str, dict[int, tuple[int, int]]] = {}
    for index, uuid in enumerate(uuids):
        entry = entries.get(uuid)
        out[uuid] = {pid: (live[pid].used[entry.index] if entry and pid in live else 0,
                           nvml_used_by_pid(nvml, pid, index) or 0) for pid in pids}
    return out


def _assert_accounted_is_nvml(table: dict[str, dict[int, tuple[int, int]]]) -> None:
    for uuid, by_pid in table.items():
        for pid, (accounted, used) in by_pid.items():
            assert abs(accounted - used) <= TOLERANCE, (
                f"{uuid} pid {pid}: accounted {accounted / MiB:.1f} MiB, NVML {used / MiB:.1f} "
                "MiB")


@pytest.mark.parametrize("api", ["torch", "driver"])
def test_a_process_seeing_both_gpus_is_capped_on_each_at_its_own_cap(
        api: str, start: Callable[..., Child], nvml: Any, region_path: Path, uuids: list[str],
        record: Callable[..., None]) -> None:
    both = start("0,1", api)
    seen = both.ready["devices"]
    assert [d["total"] for d in seen] == list(CAPS), f"each GPU shows its own cap: {seen}"
    assert all(_same_gpu(d["uuid"], u) for d, u in zip(seen, uuids, strict=True)), (seen, uuids)
    fills = [both.send(op="fill", device=d, chunks=CHUNKS, timeout=300) for d in (0, 1)]
    table = _per_gpu(nvml, region_path, uuids, [both.pid])
    record("multi_gpu_one_process_both_gpus", api=api, caps=CAPS,
           filled=[f["allocated"] for f in fills], errors=[f["error"] for f in fills],
           accounted_nvml={u: t[both.pid] for u, t in table.items()})
    oom = "OutOfMemoryError" if api == "torch" else "CUDA_ERROR_OUT_OF_MEMORY"
    assert [f["error"] for f in fills] == [oom, oom], fills
    for uuid, cap in zip(uuids, CAPS, strict=True):
        used = table[uuid][both.pid][1]
        assert cap - 512 * MiB <= used <= cap + GRANULE, (
            f"{uuid}: NVML shows {used / MiB:.0f} MiB for a {cap / MiB:.0f} MiB cap")
    _assert_accounted_is_nvml(table)


@pytest.mark.parametrize("api", ["torch", "driver"])
def test_pinned_ranks_and_a_reordered_process_share_each_gpus_cap(
        api: str, start: Callable[..., Child], nvml: Any, region_path: Path, uuids: list[str],
        record: Callable[..., None]) -> None:
    rank0, rank1 = start("0"), start("1")
    assert rank0.send(op="alloc", bytes=2 * GiB)["ok"], rank0.log()
    assert rank1.send(op="alloc", bytes=3 * GiB)["ok"], rank1.log()
    other = start("1,0", api)  # its ordinal 0 is GPU 1, ordinal 1 is GPU 0
    seen = other.ready["devices"]
    assert [d["total"] for d in seen] == [CAPS[1], CAPS[0]], f"caps follow the GPU: {seen}"
    assert _same_gpu(seen[0]["uuid"], uuids[1]), seen
    fills = [other.send(op="fill", device=d, chunks=CHUNKS, timeout=300) for d in (0, 1)]
    pids = [rank0.pid, rank1.pid, other.pid]
    table = _per_gpu(nvml, region_path, uuids, pids)
    totals = [sum(used for _, used in table[u].values()) for u in uuids]
    record("multi_gpu_pinned_and_reordered", api=api, caps=CAPS, nvml_totals=totals,
           filled=[f["allocated"] for f in fills],
           accounted_nvml={u: {str(p): v for p, v in t.items()} for u, t in table.items()})
    assert all(f["error"] is not None for f in fills), f"both GPUs end full: {fills}"
    for uuid, cap, total in zip(uuids, CAPS, totals, strict=True):
        assert cap - 512 * MiB <= total <= cap + 2 * GRANULE, (
            f"{uuid}: the container's processes hold {total / MiB:.0f} MiB in NVML's view, "
            f"cap {cap / MiB:.0f} MiB")
    assert table[uuids[0]][rank1.pid] == (0, 0) and table[uuids[1]][rank0.pid] == (0, 0), (
        "a pinned rank has nothing on the other GPU")
    _assert_accounted_is_nvml(table)

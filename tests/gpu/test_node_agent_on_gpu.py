"""The node agent on a real GPU: NVML discovery, an Allocate answer that caps PyTorch, the
exporter against NVML, and the watchdog catching a process that runs without the library.

The Allocate answer is computed for a test pod by the agent's own code (node.allocate, with
the library installed by node.agent.install_library and the region written by
container.regions.place), then used as a PyTorch process's environment; the container mounts are
simulated: `/etc/ld.so.preload` -> LD_PRELOAD of the installed library, the region directory
mount -> CUDA_DEVICE_MEMORY_SHARED_CACHE pointing at the host directory. No kubelet, no API
server: those paths are covered without a GPU (tests/integration/node/).
Run on the GPU machine:
  PYTHONPATH=src python3 -m pytest -m gpu tests/gpu/test_node_agent_on_gpu.py -q -rA
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gpu_harness import GRANULE, GiB, MiB, nvml_used_by_pid, source_env

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the kubelet package

from gpuslice import codec, model
from gpuslice.container import edits, regions
from gpuslice.node import allocate as alloc
from gpuslice.node.exporter import AgentMetrics, UsageCollector
from gpuslice.node.health import Health
from gpuslice.node.install import install_library
from gpuslice.node.inventory import node_gpus
from gpuslice.node.nvml import NvmlBackend
from gpuslice.node.settings import WatchdogConfig, load
from gpuslice.node.watchdog import Watchdog
from kubelet.pods import NODE, container, pod

pytestmark = pytest.mark.gpu

CAP_MIB = 4096


@pytest.fixture(scope="module")
def backend() -> Any:
    b = NvmlBackend()
    yield b
    b.close()


def _smi(query: str) -> list[list[str]]:
    out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    return [[f.strip() for f in line.split(",")] for line in out.strip().splitlines()]


def test_nvml_discovery_gives_the_right_inventory(backend: Any, record: Callable[..., None]
                                                  ) -> None:
    cfg = load(None, flags={"nodeName": NODE}, environ={})
    gpus = node_gpus(backend.devices(), cfg, {})
    inv = codec.decode_inventory(codec.encode_inventory(model.NodeInventory(node=NODE, gpus=gpus)),
                                 node=NODE)
    smi = _smi("uuid,name,memory.total")
    assert [(g.uuid, g.model, g.memory_mib) for g in inv.gpus] == [
        (u, n, int(m)) for u, n, m in smi], "UUID, model and MiB as nvidia-smi reports them"
    sms = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda."
                          "get_device_properties(0).multi_processor_count)"],
                         capture_output=True, text=True, timeout=120, env=source_env())
    if sms.returncode == 0:
        assert inv.gpus[0].sm_count == int(sms.stdout.strip()), "SMs as CUDA reports them"
    assert all(g.sm_count > 0 for g in inv.gpus)
    record("node_agent_inventory", gpus=[{"uuid": g.uuid, "model": g.model,
                                          "memory_mib": g.memory_mib, "sm_count": g.sm_count,
                                          "numa_node": g.numa_node} for g in inv.gpus])


def test_health_events_and_polling_work_on_real_nvml(backend: Any) -> None:
    uuids = [d.uuid for d in backend.devices()]
    health = Health(backend, uuids, recovery_s=60)
    start = time.monotonic()
    events = backend.wait_events(0.5)  # registers for XIDs on first use, then waits
    waited = time.monotonic() - start
    assert events == [], f"no critical XID expected on a healthy GPU, got {events}"
    assert waited < 5, f"wait_events(0.5) took {waited:.1f} s"
    assert health.poll() is False and health.unhealthy == {}
    stats = backend.stats(uuids[0])
    assert stats.memory_total > 0 and stats.temperature is not None


@pytest.fixture
def answer(backend: Any, libgpuslice: Path, tmp_path: Path) -> alloc.Answer:
    """The agent's Allocate answer for a pod with one container capped at CAP_MIB on GPU 0."""
    state = tmp_path / "state"
    lib, preload = install_library(libgpuslice, state, "/usr/local/gpuslice/lib/libgpuslice.so")
    layout = edits.Layout(library_host=str(lib), preload_host=str(preload),
                          regions_host=str(state / "regions"),
                          board_host=str(regions.prepare_board(state)))
    cfg = load(None, flags={"nodeName": NODE}, environ={})
    gpus = {g.uuid: g for g in node_gpus(backend.devices(), cfg, {})}
    uuid = backend.devices()[0].uuid
    p = pod("trainer", [container("main", mem=CAP_MIB, cores=0)], {"main": [uuid]},
            at=time.time() - 1)
    a = alloc.answer(alloc.in_flight([p], NODE, time.time(), 120),
                     alloc.assigned_pods([p], NODE), gpus, "nvidia.com/gpu", [f"{uuid}::0"],
                     layout)
    regions.place(regions.prepare(layout.regions_host, a.pod_uid, a.container) /
                  edits.REGION_FILE, a.region)  # as the agent does at Allocate
    return a


def _as_container(a: alloc.Answer) -> dict[str, str]:
    """The answer's env, with its mounts simulated by host paths."""
    mounts = {m.container_path: m.host_path for m in a.mounts}
    env = source_env(**a.envs)
    loaded = Path(mounts["/etc/ld.so.preload"]).read_text().strip()  # a path in the container
    env["LD_PRELOAD"] = mounts[loaded]
    env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = str(Path(a.region_host_dir) / edits.REGION_FILE)
    env.pop("NVIDIA_VISIBLE_DEVICES", None)  # no container runtime here: the host sees the GPUs
    return env


def _exported(root: Path, backend: Any, a: alloc.Answer) -> dict[tuple[str, str], float]:
    m = AgentMetrics()
    m.add_usage(UsageCollector(backend, root, lambda: [], lambda: {a.pod_uid: ("default", "p")},
                               dict))
    out = {}
    for fam in m.registry.collect():
        for s in fam.samples:
            if s.name == "gpuslice_container_memory_used_bytes":
                out[(s.labels["container"], s.labels["uuid"])] = s.value
    return out


def test_the_allocate_answer_caps_pytorch_and_the_exporter_matches_nvml(
        answer: alloc.Answer, backend: Any, torch_available: None, nvml: Any,
        children: Callable[..., Any], record: Callable[..., None]) -> None:
    cap = CAP_MIB * MiB
    child = children(_as_container(answer), api="torch")
    assert child.ready["total"] == cap, (
        f"mem_get_info total must be the limit the agent gave ({cap}), got "
        f"{child.ready['total']}; stderr:\n{child.log()}")
    held = child.send(op="alloc", bytes=1 * GiB)
    assert held["ok"], held
    root = Path(answer.region_host_dir).parents[1]
    uuid = answer.gpus[0]
    exported = _exported(root, backend, answer)[("main", uuid)]
    nvml_used = nvml_used_by_pid(nvml, child.pid)
    assert nvml_used is not None
    record("node_agent_exporter_vs_nvml", exported=exported, nvml=nvml_used,
           diff=exported - nvml_used)
    assert abs(exported - nvml_used) <= 2 * MiB, (
        f"exporter {exported / MiB:.1f} MiB vs NVML {nvml_used / MiB:.1f} MiB for pid {child.pid}")
    filled = child.send(op="fill", chunks=[256 * MiB, 16 * MiB, 2 * MiB])
    nvml_full = nvml_used_by_pid(nvml, child.pid) or 0
    record("node_agent_cap", cap=cap, error=filled["error"], nvml_used=nvml_full)
    assert filled["error"] == "OutOfMemoryError", filled
    assert nvml_full <= cap + GRANULE, f"NVML shows {nvml_full / MiB:.0f} MiB past the cap"


def _host_pid(child: Any, in_namespace: bool) -> int:
    """The pid NVML lists for a holder here (under unshare: the child of unshare)."""
    if not in_namespace:
        return child.pid
    pid = child.proc.pid
    return int(Path(f"/proc/{pid}/task/{pid}/children").read_text().split()[0])


@pytest.mark.parametrize("in_namespace", [False, True], ids=["same pid namespace",
                                                           "own pid namespace"])
def test_the_watchdog_flags_and_kills_a_process_without_the_library(
        in_namespace: bool, answer: alloc.Answer, backend: Any, torch_available: None,
        children: Callable[..., Any], record: Callable[..., None]) -> None:
    prefix = ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc"] if in_namespace \
        else None
    if prefix and subprocess.run([*prefix, "true"], capture_output=True).returncode != 0:
        pytest.skip("unshare --pid is not allowed here")
    capped = children(_as_container(answer), api="torch", prefix=prefix)  # as in a container
    capped_pid = _host_pid(capped, in_namespace)
    rogue = children(source_env(), api="torch")  # no library: escapes every limit
    assert rogue.send(op="alloc", bytes=(CAP_MIB + 1024) * MiB)["ok"]
    root = Path(answer.region_host_dir).parents[1]
    assignment = {answer.pod_uid: model.PodAssignment(node=NODE, containers=(
        model.ContainerAssignment(container="main", slices=(
            model.GPUSlice(uuid=answer.gpus[0], memory_mib=CAP_MIB, cores=0),)),))}
    gpus = node_gpus(backend.devices(), load(None, flags={"nodeName": NODE}, environ={}), {})
    killed: list[int] = []
    dog = Watchdog(backend, root, WatchdogConfig(kill=True), gpus=lambda: gpus,
                   assignments=lambda: assignment, pods_fresh=lambda: True,
                   kill=lambda pid, sig: killed.append(pid))
    found = dog.check()
    record("node_agent_watchdog", in_namespace=in_namespace, capped_pid=capped_pid,
           violations=[(v.kind, v.pids, v.used_bytes) for v in found])
    rogue_hits = [v for v in found if rogue.pid in v.pids]
    assert [v.kind for v in rogue_hits] == ["unmanaged"], found
    assert rogue_hits[0].used_bytes >= CAP_MIB * MiB
    assert capped_pid not in {p for v in found for p in v.pids}, "the capped process is fine"
    assert killed == [rogue.pid]

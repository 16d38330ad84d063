"""The node agent on a multi-GPU machine (issue 14 item 3): what NVML reports, what the agent
publishes, and its Allocate for a 2-GPU pod under the `topology` policy.

Part 1, `nvml` (pynvml only, with --backend nvml): per GPU its index, UUID, name, memory, PCI bus,
NUMA node (or NVML's answer when it has none), active NVLink links (remote bus and device type),
and per pair NVML's NVLink P2P status and common topology ancestor; `nvidia-smi topo -m` as text.
Part 2, `agent`: the node agent's own code with that backend: `Agent` (its inventory, the
annotation it publishes, its device plugins) registered over real unix sockets with the kubelet
emulator of tests/kubelet. A 2-GPU pod is placed by the allocator under `topology` on the
published inventory, put in the agent's pod store (what its informer would receive; there is no
API server here) and admitted by the emulated kubelet (GetPreferredAllocation, Allocate). Checks:
the pair is as well connected as the node allows, the answer's limits follow the container's
device order (env and the region the agent wrote).
Part 3, `holder` (--holder, needs PyTorch and GPUs): the answer used as a PyTorch process's
environment (mounts simulated as in tests/gpu/test_node_agent_on_gpu.py) sees each GPU's cap.
Prints one JSON object; exit 1 when a check fails. CPU dry run: --backend fake:FILE.yaml.
Usage: PYTHONPATH=src python3 benchmarks/multi_gpu/inventory.py [--backend nvml] [--holder]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from itertools import combinations
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "gpu"))  # gpu_harness (part 3)
sys.path.insert(0, str(ROOT / "tests"))  # kubelet.emulator (part 2)
sys.path.insert(0, str(ROOT / "src"))

from gpuslice import codec, handoff, model  # noqa: E402 (after the path set-up)
from gpuslice.allocator import ClusterState, parse_policy  # noqa: E402 (after the path set-up)
from gpuslice.dialects import parse_pod  # noqa: E402 (after the path set-up)
from gpuslice.shim import Region  # noqa: E402 (after the path set-up)

NODE = "multi-gpu-node"
RESOURCE = "nvidia.com/gpu"
POD_MIB, POD_CORES = 8192, 30
P2P_READ, P2P_NVLINK = 0, 2  # nvmlGpuP2PCapsIndex_t (pynvml 13 spells READ as a tuple)


# ---------------------------------------------------------------- part 1: NVML as it is

def _nvml_call(name: str, *args: Any) -> Any:
    """pynvml.<name>(*args), or what went wrong as text (Not Supported in a VM, a pynvml too old
    for the call): every answer is a fact to record, none stops the report."""
    import pynvml

    try:
        return getattr(pynvml, name)(*args)
    except Exception as exc:  # NVMLError, AttributeError, ctypes errors alike
        return f"error: {type(exc).__name__}: {exc}"


def _text(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes) else v


def nvml_report() -> dict[str, Any]:
    import pynvml

    pynvml.nvmlInit()
    try:
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i)
                   for i in range(pynvml.nvmlDeviceGetCount())]
        gpus = []
        for i, h in enumerate(handles):
            links = []
            for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
                state = _nvml_call("nvmlDeviceGetNvLinkState", h, link)
                if state != 1:
                    continue
                pci = _nvml_call("nvmlDeviceGetNvLinkRemotePciInfo", h, link)
                links.append({"link": link, "remote_bus": _text(getattr(pci, "busId", pci)),
                              "remote_type": _nvml_call("nvmlDeviceGetNvLinkRemoteDeviceType",
                                                        h, link)})
            mem = _nvml_call("nvmlDeviceGetMemoryInfo", h)
            pci = _nvml_call("nvmlDeviceGetPciInfo", h)
            gpus.append({
                "index": i, "uuid": _text(pynvml.nvmlDeviceGetUUID(h)),
                "name": _text(_nvml_call("nvmlDeviceGetName", h)),
                "memory_mib": getattr(mem, "total", 0) >> 20,
                "pci_bus": _text(getattr(pci, "busId", pci)),
                "numa_node": _nvml_call("nvmlDeviceGetNumaNodeId", h),
                "nvlink_links": links})
        pairs = []
        for a, b in combinations(range(len(handles)), 2):
            ha, hb = handles[a], handles[b]
            pairs.append({
                "gpus": [a, b],
                "p2p_nvlink": _nvml_call("nvmlDeviceGetP2PStatus", ha, hb, P2P_NVLINK),
                "p2p_read": _nvml_call("nvmlDeviceGetP2PStatus", ha, hb, P2P_READ),
                "common_ancestor": _nvml_call("nvmlDeviceGetTopologyCommonAncestor", ha, hb)})
        return {"driver": _text(_nvml_call("nvmlSystemGetDriverVersion")), "gpus": gpus,
                "pairs": pairs, "nvidia_smi_topo": _smi_topo(),
                "legend": "p2p: 0 OK, else NVML's nvmlGpuP2PStatus; common_ancestor: 0 same "
                          "board, 10 single switch, 20 multiple switches, 30 host bridge, "
                          "40 NUMA node, 50 system"}
    finally:
        pynvml.nvmlShutdown()


def _smi_topo() -> str:
    if shutil.which("nvidia-smi") is None:
        return "no nvidia-smi"
    out = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True,
                         timeout=60)
    return out.stdout + out.stderr


# ---------------------------------------------------------------- part 2: the agent's paths

def _connection(gpus: list[model.GPU]) -> tuple[bool, bool]:
    """(one NUMA node, all NVLink-linked) for a set of GPUs, as the topology policy sees it."""
    numa = {g.numa_node if g.numa_node is not None else f"?{g.uuid}" for g in gpus}
    linked = all(b.uuid in a.nvlink_peers or a.uuid in b.nvlink_peers
                 for a, b in combinations(gpus, 2))
    return len(numa) == 1, linked


def _pod(count: int, assignment: model.PodAssignment | None) -> dict[str, Any]:
    limits = {RESOURCE: str(count), "nvidia.com/gpumem": str(POD_MIB),
              "nvidia.com/gpucores": str(POD_CORES)}
    ann = {} if assignment is None else {
        codec.ASSIGNMENT_ANNOTATION: codec.encode_assignment(assignment),
        handoff.BOUND_AT: handoff.format_time(time.time())}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": "default", "name": "trainer", "uid": "uid-trainer",
                         "resourceVersion": "1", "labels": {handoff.MANAGED_LABEL: "true"},
                         "annotations": ann, "creationTimestamp": "2026-11-24T00:00:00Z"},
            "spec": {"schedulerName": "gpuslice-scheduler", "nodeName": NODE,
                     "containers": [{"name": "main", "image": "cuda",
                                     "resources": {"limits": limits}}]},
            "status": {"phase": "Pending"}}


async def agent_allocate(backend_spec: str, library: Path, base: Path, count: int
                         ) -> dict[str, Any]:
    from lightkube import AsyncClient, KubeConfig

    from gpuslice.node.agent import Agent
    from gpuslice.node.nvml import open_backend
    from gpuslice.node.settings import load
    from kubelet.emulator import Kubelet, env_of, mounts_of

    cfg = load(None, flags={"nodeName": NODE, "devicePluginDir": str(base / "dp"),
                            "stateDir": str(base / "state"), "splitCount": 4,
                            "podResourcesSocket": str(base / "pr.sock"),
                            "metricsAddress": "127.0.0.1:0"}, environ={})
    # an API client the agent needs but never calls here (no informer or write loop runs)
    client = AsyncClient(config=KubeConfig.from_dict({
        "clusters": [{"name": "none", "cluster": {"server": "http://127.0.0.1:9"}}],
        "users": [{"name": "none", "user": {"token": "none"}}],
        "contexts": [{"name": "none", "context": {"cluster": "none", "user": "none"}}],
        "current-context": "none"}))
    agent = Agent(cfg, open_backend(backend_spec), client, library=library)
    agent.inventory.update({})  # queues the annotation for the API server (never sent here)
    published = codec.encode_inventory(model.NodeInventory(node=NODE, gpus=agent.gpus()))
    agent.kubelet.poll_s = 0.05
    kubelet = Kubelet(str(base / "dp"), str(base / "pr.sock"))
    await kubelet.start()
    serving = asyncio.create_task(agent.kubelet.run())
    try:
        devices = await kubelet.wait_devices(RESOURCE)
        inv = codec.decode_inventory(published, node=NODE)
        state = ClusterState()
        state.add_node(inv)
        placed = state.schedule(parse_pod(_pod(count, None)), parse_policy("topology"))
        if placed is None:
            return {"inventory": json.loads(published),
                    "error": f"the allocator found no room for a {count}-GPU pod on this node"}
        pod = _pod(count, placed.assignment)
        agent.cluster._put(pod)  # what the agent's informer would receive from the API server
        resp = (await kubelet.admit(pod))["main"]
    finally:
        await agent.kubelet.stop()
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await serving
        await kubelet.stop()
        agent.backend.close()
    env, mounts = env_of(resp), mounts_of(resp)
    region_dir = next(h for c, h, _ in mounts if c == cfg.container_region_dir)
    region = Region.read(Path(region_dir) / "region", check_alive=False)
    chosen = [s.uuid for s in placed.assignment.containers[0].slices]
    by_uuid = {g.uuid: g for g in inv.gpus}
    best = max((_connection(list(c)) for c in combinations(inv.gpus, count)),
               default=(False, False))
    return {
        "inventory": json.loads(published),
        "kubelet_devices": len(devices),
        "assignment": chosen,
        "connection": dict(zip(("one_numa_node", "nvlink"), _connection(
            [by_uuid[u] for u in chosen]), strict=True)),
        "best_connection_on_node": dict(zip(("one_numa_node", "nvlink"), best, strict=True)),
        "kubelet_device_ids": [d for _, ids in kubelet.assigned[("default", "trainer")]["main"]
                               for d in ids],
        "env": env, "mounts": [list(m) for m in mounts],
        "region": {"uuid_list": region.uuid_list,
                   "devices": [[d.uuid, d.limit] for d in region.devices if d.uuid],
                   "sm_limit": region.sm_limit},
    }


def checks(got: dict[str, Any]) -> list[str]:
    """What is wrong with part 2's answer (empty: all good)."""
    if "error" in got:
        return [got["error"]]
    bad = []
    chosen, env = got["assignment"], got["env"]
    quality = lambda c: (c["one_numa_node"], c["nvlink"])  # noqa: E731
    if quality(got["connection"]) < quality(got["best_connection_on_node"]):
        bad.append(f"pair {chosen} is less connected ({got['connection']}) than the node allows "
                   f"({got['best_connection_on_node']})")
    if env.get("GPUSLICE_DEVICE_UUIDS", "").split(",") != chosen:
        bad.append(f"GPUSLICE_DEVICE_UUIDS={env.get('GPUSLICE_DEVICE_UUIDS')} is not the "
                   f"assignment {chosen}")
    limits = [env.get(f"CUDA_DEVICE_MEMORY_LIMIT_{i}") for i in range(len(chosen))]
    if limits != [f"{POD_MIB}m"] * len(chosen):
        bad.append(f"env limits {limits}, want {POD_MIB}m per device")
    if got["region"]["devices"] != [[u, POD_MIB << 20] for u in chosen]:
        bad.append(f"region devices {got['region']['devices']} are not {chosen} at {POD_MIB} MiB")
    if {d.split("::")[0] for d in got["kubelet_device_ids"]} != set(chosen):
        bad.append(f"the kubelet's devices {got['kubelet_device_ids']} are not on {chosen}")
    return bad


# ---------------------------------------------------------------- part 3: a capped process

def holder(got: dict[str, Any]) -> dict[str, Any]:
    """The answer's env for a PyTorch process on the pair: each GPU's total must be the cap."""
    from gpu_harness import PROGS, Child, source_env

    mounts = {c: h for c, h, _ in got["mounts"]}
    env = source_env(**got["env"])
    env["LD_PRELOAD"] = mounts[Path(mounts["/etc/ld.so.preload"]).read_text().strip()]
    env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = str(Path(mounts["/var/run/gpuslice"]) / "region")
    env.pop("NVIDIA_VISIBLE_DEVICES", None)  # no container runtime: the GPUs by UUID instead
    env["CUDA_VISIBLE_DEVICES"] = ",".join(got["assignment"])
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    ordinals = ",".join(str(i) for i in range(len(got["assignment"])))
    child = Child([sys.executable, str(PROGS / "multi_gpu_holder.py"), "--devices", ordinals],
                  env, timeout=180)
    try:
        return {"devices": child.ready["devices"], "stderr": child.log()[-1000:]}
    finally:
        child.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="nvml", help="nvml (default) or fake:FILE.yaml")
    p.add_argument("--library", default=str(ROOT / "native" / "build" / "libgpuslice.so"))
    p.add_argument("--gpus", type=int, default=2, help="GPUs of the pod (default 2; 1 for a "
                   "rehearsal on a one-GPU machine)")
    p.add_argument("--holder", action="store_true", help="part 3: a PyTorch process on the pair")
    p.add_argument("--out", help="also write the JSON here")
    args = p.parse_args(argv)
    out: dict[str, Any] = {"backend": args.backend}
    if args.backend == "nvml":
        out["nvml"] = nvml_report()
    base = Path(tempfile.mkdtemp(prefix="gs-inv"))  # short: unix socket paths
    try:  # a part that breaks (a missing wheel, an agent error) is reported; part 1 stays
        out["agent"] = asyncio.run(agent_allocate(args.backend, Path(args.library), base,
                                                   args.gpus))
        out["problems"] = checks(out["agent"])
        if args.holder and not out["problems"]:
            out["holder"] = h = holder(out["agent"])
            caps = [d["total"] for d in h["devices"]]
            if caps != [POD_MIB << 20] * len(caps):
                out["problems"].append(f"the capped process sees totals {caps}")
    except Exception as exc:
        traceback.print_exc()
        out.setdefault("problems", []).append(f"{type(exc).__name__}: {exc}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    text = json.dumps(out, indent=1, default=str)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 1 if out["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())

"""`gpuslice node-agent` in MIG mode, a real process: SIGKILLed right after it made a pod's MIG
instance and before it answered Allocate (the fake NVML's killAfterMigCreate), then started
again; the retried Allocate gets that same instance (no second one, none leaked), and once the
pod is gone the instance is destroyed, not while a process runs on it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from lightkube.resources.core_v1 import Node, Pod

from gpuslice import codec, mig, model
from gpuslice.kube.client import dict_view
from kubelet.emulator import AdmissionError, Kubelet, env_of, short_dir
from kubelet.nodeharness import create, wait_for
from kubelet.pods import NODE, container, gpu, pod

REPO = Path(__file__).resolve().parents[3]
H100 = "NVIDIA H100 80GB HBM3"
RESOURCE = "volcano.sh/vgpu-number"


def write_gpus(path: Path, *, kill: bool) -> None:
    path.write_text(f"gpus:\n- {{uuid: {gpu(0)}, model: {H100}, memoryMiB: 81559, mig: {{}}}}\n"
                    f"killAfterMigCreate: {'true' if kill else 'false'}\n")


def instances(gpus: Path) -> list[dict]:
    state = gpus.with_name(gpus.name + ".mig.json")
    return json.loads(state.read_text())["gpus"].get(gpu(0), []) if state.exists() else []


def mig_pod(name: str) -> dict:
    p = pod(name, [container("c", RESOURCE, 1, mem=30000)], {"c": [gpu(0)]}, at=time.time())
    three = next(q for q in mig.CATALOG["H100-80GB"] if q.name == "3g.40gb")
    p["metadata"]["annotations"][codec.ASSIGNMENT_ANNOTATION] = codec.encode_assignment(
        model.PodAssignment(node=NODE, containers=(model.ContainerAssignment(
            container="c", slices=(model.GPUSlice(uuid=gpu(0), memory_mib=three.memory_mib,
                                                  cores=42, mig=mig.MigSlice(profile="3g.40gb",
                                                                             start=4)),)),)))
    p["metadata"]["annotations"]["volcano.sh/vgpu-mode"] = "mig"
    return p


async def start_agent(base: Path, kube_api, gpus: Path) -> asyncio.subprocess.Process:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "GPUSLICE_NODE_MODE": "mig",
           "GPUSLICE_NODE_VERIFY_INTERVAL_SECONDS": "0.2",
           "GPUSLICE_NODE_IN_FLIGHT_TIMEOUT_SECONDS": "300"}
    return await asyncio.create_subprocess_exec(
        sys.executable, "-c", "from gpuslice.cli import main; main()", "node-agent",
        "--gpu-backend", f"fake:{gpus}", "--node-name", NODE,
        "--kubeconfig", str(kube_api.kubeconfig), "--device-plugin-dir", str(base / "dp"),
        "--pod-resources-socket", str(base / "pr.sock"), "--state-dir", str(base / "state"),
        "--library", str(base / "libgpuslice.so"), "--metrics-address", "127.0.0.1:0",
        env=env, stderr=(base / "agent.log").open("ab"))  # a file: a full pipe would block it


@pytest.mark.timeout(120)
async def test_an_agent_killed_between_create_and_allocate_hands_out_the_same_instance(kube_api):
    base = Path(short_dir())
    (base / "libgpuslice.so").write_bytes(b"library")
    gpus = base / "gpus.yaml"
    write_gpus(gpus, kill=True)
    kubelet = Kubelet(str(base / "dp"), str(base / "pr.sock"))
    await kubelet.start()
    client = kube_api.async_client()
    await client.create(dict_view(Node)({"apiVersion": "v1", "kind": "Node",
                                         "metadata": {"name": NODE}}))
    proc = await start_agent(base, kube_api, gpus)
    try:
        await kubelet.wait_devices(RESOURCE, timeout=30)

        async def published_mig() -> bool:
            n = await client.get(Node, NODE)
            text = (n.metadata.annotations or {}).get(codec.INVENTORY_ANNOTATION)
            return bool(text) and codec.decode_inventory(text, node=NODE).gpus[0].mig is not None
        await wait_for(published_mig, "the inventory says MIG", 30)
        p = await create(client, mig_pod("p"))
        with pytest.raises(AdmissionError):
            await kubelet.admit(p)
        assert await asyncio.wait_for(proc.wait(), 20) == -signal.SIGKILL
        (made,) = instances(gpus)
        assert (made["profile"], made["start"]) == ("3g.40gb", 4), "created, then killed"
        journal = json.loads((base / "state" / "mig.json").read_text())
        assert journal[f"{gpu(0)}@4"]["pod"] == p["metadata"]["uid"]

        write_gpus(gpus, kill=False)
        old = kubelet.endpoints[RESOURCE]
        proc = await start_agent(base, kube_api, gpus)
        await wait_for(lambda: kubelet.endpoints[RESOURCE] is not old, "registered again", 30)
        await kubelet.wait_devices(RESOURCE, updates=1, timeout=30)
        await asyncio.sleep(1.0)  # a reconcile round ran: the live pod's instance stays
        assert [i["uuid"] for i in instances(gpus)] == [made["uuid"]]
        resp = (await kubelet.admit(p))["c"]
        assert env_of(resp)["NVIDIA_VISIBLE_DEVICES"] == made["uuid"], "the same instance"
        assert not resp.mounts, "MIG: no library, no region"
        assert [i["uuid"] for i in instances(gpus)] == [made["uuid"]], "no second instance"

        state = gpus.with_name(gpus.name + ".mig.json")
        data = json.loads(state.read_text())
        data["gpus"][gpu(0)][0]["pids"] = [4242]  # a process still on the instance
        state.write_text(json.dumps(data))
        await client.delete(Pod, "p", namespace="default", grace_period=0)
        await asyncio.sleep(1.5)
        assert len(instances(gpus)) == 1, "never destroyed under a running process"
        data["gpus"][gpu(0)][0]["pids"] = []
        state.write_text(json.dumps(data))
        await wait_for(lambda: not instances(gpus), "the gone pod's instance destroyed", 15)
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 20) == 0, (base / "agent.log").read_text()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await kubelet.stop()

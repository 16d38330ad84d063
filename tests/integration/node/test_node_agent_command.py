"""`gpuslice node-agent` as the DaemonSet runs it: serves the kubelet, and SIGTERM stops it
cleanly (exit 0, plugin sockets removed)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from pathlib import Path

import aiohttp
from lightkube.resources.core_v1 import Node

from gpuslice.kube.client import dict_view
from kubelet.emulator import Kubelet, short_dir
from kubelet.nodeharness import wait_for
from kubelet.pods import NODE

REPO = Path(__file__).resolve().parents[3]


async def test_the_command_registers_and_stops_cleanly_on_sigterm(kube_api):
    base = Path(short_dir())
    lib = base / "libgpuslice.so"
    lib.write_bytes(b"library")
    kubelet = Kubelet(str(base / "dp"), str(base / "pr.sock"))
    await kubelet.start()
    client = kube_api.async_client()
    await client.create(dict_view(Node)({"apiVersion": "v1", "kind": "Node",
                                         "metadata": {"name": NODE}}))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "GPUSLICE_NODE_SPLIT_COUNT": "3"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "from gpuslice.cli import main; main()", "node-agent",
        "--gpu-backend", "fake:2", "--node-name", NODE, "--kubeconfig", str(kube_api.kubeconfig),
        "--device-plugin-dir", str(base / "dp"), "--pod-resources-socket",
        str(base / "pr.sock"), "--state-dir", str(base / "state"), "--library", str(lib),
        "--metrics-address", f"127.0.0.1:{port}", env=env, stderr=asyncio.subprocess.PIPE)
    try:
        await wait_for(lambda: len(kubelet.endpoints) == 3, "three resources registered", 30)
        devs = await kubelet.wait_devices("nvidia.com/gpu")
        assert len(devs) == 6, "GPUSLICE_NODE_SPLIT_COUNT=3 replicas on each of 2 GPUs"
        assert (base / "state" / "lib" / "ld.so.preload").read_text() == \
            "/usr/local/gpuslice/lib/libgpuslice.so\n"
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http:
            async def ready():
                async with http.get("/readyz") as r:
                    return r.status == 200
            await wait_for(ready, "/readyz 200 once registered")
            async with http.get("/metrics") as r:
                text = await r.text()
        assert 'gpuslice_node_slots 6.0' in text, "2 GPUs x split count 3"
        proc.send_signal(signal.SIGTERM)
        rc = await asyncio.wait_for(proc.wait(), 20)
        err = (await proc.stderr.read()).decode()
        assert rc == 0, err
        assert not list((base / "dp").glob("gpuslice-*.sock")), "plugin sockets removed"
        lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
        assert {"level": "info", "msg": "node agent serving"}.items() <= \
            next(x for x in lines if x["msg"] == "node agent serving").items(), "JSON lines"
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await kubelet.stop()

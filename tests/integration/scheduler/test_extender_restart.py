"""A restarted `gpuslice scheduler`: a call kube-scheduler makes while it starts waits for it
(its port listens first, its verbs wait for the caches to sync) and is answered with the
cluster as it is, the pods bound before the restart counted; no call is failed for it."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Any

import yaml
from sched_helpers import Running, create, node_obj, pod_obj
from test_command_serves_until_sigterm import free_port


def call_as_soon_as_it_listens(port: int, verb: str, body: dict[str, Any]) -> dict[str, Any]:
    """Connect as soon as the port accepts (as kube-scheduler's retries would), then call."""
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.005)
    request = urllib.request.Request(f"http://127.0.0.1:{port}/{verb}",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as r:  # kube-scheduler's httpTimeout: 5 s
        return dict(json.loads(r.read()))


async def test_a_call_during_the_start_is_answered_once_synced_not_failed(kube_api, tmp_path):
    client = kube_api.async_client()
    await create(client, node_obj("gpu-1", gpus=1, mem=16384))
    for name, mem in (("held", 12288), ("small", 4096), ("big", 8192)):
        await create(client, pod_obj(name, mem=mem))
    async with Running(kube_api) as before:  # the extender before its restart
        assert await before.place("held", ["gpu-1"]) == "gpu-1"
        await before.mark_allocated("held")
        small, big = await before.pod("small"), await before.pod("big")

    port = free_port()
    cfg = tmp_path / "scheduler.yaml"
    cfg.write_text(yaml.safe_dump({"port": port, "metricsAddress": "", "logLevel": "warning",
                                   "kubeconfig": str(kube_api.kubeconfig),
                                   "leaderElection": {"enabled": False}}))
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from gpuslice.cli import main; "
                             "sys.exit(main())", "scheduler", "--config", str(cfg)],
                            stderr=subprocess.PIPE)
    try:
        first = await asyncio.to_thread(call_as_soon_as_it_listens, port, "filter",
                                        {"Pod": small, "NodeNames": ["gpu-1"]})
        assert first["Error"] == "" and first["NodeNames"] == ["gpu-1"], first
        refused = await asyncio.to_thread(call_as_soon_as_it_listens, port, "filter",
                                          {"Pod": big, "NodeNames": ["gpu-1"]})
        assert refused["NodeNames"] == [] and "gpu-1" in refused["FailedNodes"], \
            f"the pod bound before the restart holds 12 of 16 GiB: {refused}"
    finally:
        proc.kill()
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == -9, err.decode()

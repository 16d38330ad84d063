"""`gpuslice scheduler` as a process: it serves once synced and leading, and on SIGTERM stops
cleanly, giving its Lease back so another replica need not wait for it to expire."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import urllib.request

import yaml
from lightkube.resources.coordination_v1 import Lease
from sched_helpers import create, node_obj, wait_for

from gpuslice.kube.client import dict_view


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return int(r.status)
    except OSError:
        return 0


async def test_the_command_serves_then_releases_its_lease_on_sigterm(kube_api, tmp_path):
    await create(kube_api.async_client(), node_obj("gpu-1"))
    port, metrics = free_port(), free_port()
    cfg = tmp_path / "scheduler.yaml"
    cfg.write_text(yaml.safe_dump({
        "port": port, "metricsAddress": f"127.0.0.1:{metrics}", "logLevel": "warning",
        "kubeconfig": str(kube_api.kubeconfig), "leaderElection": {
            "leaseNamespace": "default", "leaseSeconds": 4, "renewDeadlineSeconds": 3,
            "retryPeriodSeconds": 1}}))
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from gpuslice.cli import main; "
                             "sys.exit(main())", "scheduler", "--config", str(cfg)],
                            stderr=subprocess.PIPE)
    try:
        ready = f"http://127.0.0.1:{metrics}/readyz"
        async def is_ready() -> bool:
            return await asyncio.to_thread(status, ready) == 200
        await wait_for(is_ready, "readiness", timeout=20)
        assert await asyncio.to_thread(status, f"http://127.0.0.1:{port}/healthz") == 200
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 10) == 0, proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
    lease = await kube_api.async_client().get(dict_view(Lease), "gpuslice-scheduler",
                                              namespace="default")
    assert lease["spec"]["holderIdentity"] == "", "released: the next leader takes over at once"

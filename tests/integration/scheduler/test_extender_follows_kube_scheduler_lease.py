"""`gpuslice scheduler` with `leaderElection.follow: true` next to the REAL kube-scheduler
(v1.36, leader election on, the Lease of deploy/scheduler/kube-scheduler-config.yaml:
gpuslice-kube-scheduler in kube-system, short durations), on the real control plane only.
Proves, with the Lease kube-scheduler itself writes (holderIdentity `<hostname>_<uuid>`,
renewTime in microseconds): (a) while kube-scheduler leads, the extender leads
(gpuslice_scheduler_leader 1) and a GPU pod is bound through the extender's bind (its
assignment annotation is on the pod); (b) when kube-scheduler stops, on SIGTERM (it releases
the Lease: ReleaseOnCancel, holderIdentity "") or SIGKILL (the Lease is left to expire), the
extender stops leading, within the lease duration (plus one read of the Lease), and answers
bind with NOT_LEADER, leaving the pod unbound; (c) a new kube-scheduler takes the Lease (at
once after a release, after expiry after a kill) and the extender leads and binds again."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Pod
from sched_helpers import create, pod_obj, ready_node, wait_for

from gpuslice import codec, handoff
from gpuslice.kube import errors
from gpuslice.kube.client import dict_view
from gpuslice.kube.patch import patch_metadata
from gpuslice.scheduler.app import NOT_LEADER

DEPLOY = Path(__file__).parents[3] / "deploy" / "scheduler" / "kube-scheduler-config.yaml"
LEASE_S, RENEW_S, RETRY_S = 4, 3, 1  # kube-scheduler's leaseDuration / renewDeadline / retry
READ_S = 0.5  # how often the extender reads the Lease (its retryPeriodSeconds)
ALLOCATABLE = {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "20",
               "volcano.sh/vgpu-number": "20", "tencent.com/vcuda-core": "200"}

pytestmark = pytest.mark.kube_backends("kube-apiserver")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kube_scheduler_config(extender_port: int) -> dict[str, Any]:
    """deploy/'s configuration, the extender on our port, the election made fast."""
    config = yaml.safe_load(DEPLOY.read_text())
    config["extenders"][0]["urlPrefix"] = f"http://127.0.0.1:{extender_port}"
    config["leaderElection"].update(leaseDuration=f"{LEASE_S}s", renewDeadline=f"{RENEW_S}s",
                                    retryPeriod=f"{RETRY_S}s")
    return config


class Extender:
    """`gpuslice scheduler` as a process, following kube-scheduler's Lease as deployed."""

    def __init__(self, kube_api: Any, work: Path, port: int, lease: tuple[str, str]) -> None:
        self.port, self.metrics = port, free_port()
        self.log = work / "gpuslice-scheduler.log"
        cfg = work / "scheduler.yaml"
        cfg.write_text(yaml.safe_dump({
            "port": self.port, "metricsAddress": f"127.0.0.1:{self.metrics}",
            "logLevel": "info", "kubeconfig": str(kube_api.kubeconfig),
            "leaderElection": {"follow": True, "leaseName": lease[0], "leaseNamespace": lease[1],
                               "leaseSeconds": LEASE_S, "renewDeadlineSeconds": RENEW_S,
                               "retryPeriodSeconds": READ_S}}))
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", "import sys; from gpuslice.cli import main; "
                 "sys.exit(main())", "scheduler", "--config", str(cfg)],
                stdout=out, stderr=subprocess.STDOUT)
        self.http = aiohttp.ClientSession()

    async def close(self) -> None:
        await self.http.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(self.proc.wait, 10)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    async def get(self, path: str) -> tuple[int, str]:
        with contextlib.suppress(aiohttp.ClientError):
            async with self.http.get(f"http://127.0.0.1:{self.metrics}{path}") as r:
                return r.status, await r.text()
        return 0, ""

    async def leads(self) -> bool:
        status, text = await self.get("/metrics")
        assert status in (0, 200), text
        return "gpuslice_scheduler_leader 1.0" in text

    async def follows(self) -> bool:
        status, text = await self.get("/metrics")
        return status == 200 and "gpuslice_scheduler_leader 0.0" in text

    async def bind(self, pod: dict[str, Any], node: str) -> str:
        """The bind kube-scheduler sends (the extender's verbs listener)."""
        body = {"PodName": pod["metadata"]["name"], "PodNamespace": "default",
                "PodUID": pod["metadata"]["uid"], "Node": node}
        async with self.http.post(f"http://127.0.0.1:{self.port}/bind", json=body) as r:
            assert r.status == 200, await r.text()
            return str((await r.json())["Error"])

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


async def test_the_extender_leads_exactly_while_the_real_kube_scheduler_holds_its_lease(
        kube_api, tmp_path):
    plane = kube_api.control_plane
    if plane.assets.kube_scheduler is None:
        pytest.fail(f"{plane.assets.folder} has no kube-scheduler (tools/kube/build.sh)")
    admin = kube_api.async_client()
    port = free_port()  # the extender's verbs, where kube-scheduler's configuration calls them
    config = kube_scheduler_config(port)
    lease_name = (config["leaderElection"]["resourceName"],
                  config["leaderElection"]["resourceNamespace"])
    host = socket.gethostname()

    await ready_node(admin, "gpu-1", ALLOCATABLE, gpus=2)

    async def lease() -> dict[str, Any]:
        with contextlib.suppress(errors.APIError), errors.translate("get lease"):
            return dict((await admin.get(dict_view(Lease), lease_name[0],
                                         namespace=lease_name[1]))["spec"])
        return {}

    async def pod(name: str) -> dict[str, Any]:
        return dict(await admin.get(dict_view(Pod), name, namespace="default"))

    async def bound_by_the_extender(name: str) -> bool:
        p = await pod(name)
        if not p["spec"].get("nodeName"):
            return False
        assignment = (p["metadata"].get("annotations") or {}).get(codec.ASSIGNMENT_ANNOTATION)
        assert assignment, f"{name} bound without the extender's assignment: {p['metadata']}"
        assert codec.decode_assignment(assignment).node == "gpu-1"
        await patch_metadata(admin, Pod, name, namespace="default",  # as the node agent does
                             annotations={handoff.ALLOCATED: "main"})
        return True

    ext = Extender(kube_api, tmp_path, port, lease_name)
    started: list[Any] = []
    try:
        await wait_for(ext.follows, "the extender to serve, not leading: no Lease yet", 30)

        # (a) kube-scheduler takes its Lease; the extender leads; a GPU pod binds through it
        started.append(plane.start_scheduler(config))
        await wait_for(lambda: _held_by(lease, host), "kube-scheduler to take its Lease", 30)
        first_holder = (await lease())["holderIdentity"]
        assert first_holder.startswith(f"{host}_") and len(first_holder) == len(host) + 37, \
            f"client-go's identity is <hostname>_<uuid>, got {first_holder!r}"
        await wait_for(ext.leads, "the extender to lead with kube-scheduler", 10)
        await create(admin, pod_obj("first"))
        await wait_for(lambda: bound_by_the_extender("first"),
                       "kube-scheduler to bind 'first' through the extender", 30)

        # (b1) SIGTERM: kube-scheduler releases the Lease; the extender stops at once
        started[-1].stop()
        released = await lease()
        assert released.get("holderIdentity") in (None, ""), \
            f"kube-scheduler v1.36 releases its Lease on SIGTERM (ReleaseOnCancel): {released}"
        t0 = time.monotonic()
        await wait_for(ext.follows, "the extender to stop leading", LEASE_S + READ_S + 2)
        stepped_down_after_release = time.monotonic() - t0
        await create(admin, pod_obj("second"))
        assert await ext.bind(await pod("second"), "gpu-1") == NOT_LEADER
        assert not (await pod("second"))["spec"].get("nodeName")

        # (c1) a new kube-scheduler takes the released Lease; the extender leads again
        started.append(plane.start_scheduler(config))
        await wait_for(lambda: _held_by(lease, host, not_by=first_holder),
                       "a new kube-scheduler to take the released Lease", 30)
        second_holder = (await lease())["holderIdentity"]
        await wait_for(ext.leads, "the extender to lead again", 10)
        await wait_for(lambda: bound_by_the_extender("second"),
                       "the new kube-scheduler to bind 'second' through the extender", 30)

        # (b2) SIGKILL: no release; the Lease stops being renewed and the extender steps down
        # within leaseDuration of the last renewal it saw
        killed = started[-1].popen
        killed.send_signal(signal.SIGKILL)
        await asyncio.to_thread(killed.wait)
        t0 = time.monotonic()
        assert (await lease())["holderIdentity"] == second_holder, "a killed holder keeps it"
        await wait_for(ext.follows, "the extender to stop leading after the kill",
                       LEASE_S + READ_S + 5)
        stepped_down_after_kill = time.monotonic() - t0
        assert stepped_down_after_kill <= LEASE_S + READ_S + 1.5, stepped_down_after_kill
        await create(admin, pod_obj("third"))
        assert await ext.bind(await pod("third"), "gpu-1") == NOT_LEADER
        assert not (await pod("third"))["spec"].get("nodeName")

        # (c2) another kube-scheduler waits for the expiry, takes the Lease, and binds
        started.append(plane.start_scheduler(config))
        await wait_for(lambda: _held_by(lease, host, not_by=second_holder),
                       "a new kube-scheduler to take the expired Lease", 30)
        await wait_for(ext.leads, "the extender to lead with the third kube-scheduler", 10)
        await wait_for(lambda: bound_by_the_extender("third"),
                       "the third kube-scheduler to bind 'third' through the extender", 30)
        assert stepped_down_after_release <= READ_S + 1.5, stepped_down_after_release
        print(f"extender stepped down {stepped_down_after_release:.2f} s after kube-scheduler's "
              f"release, {stepped_down_after_kill:.2f} s after its kill (lease {LEASE_S} s)")
    except BaseException:
        print("gpuslice scheduler log:\n" + ext.tail())
        for proc in started:
            print(f"{proc.log}:\n" + proc.log.read_text(errors="replace")[-2000:])
        raise
    finally:
        for proc in started:
            proc.stop()
        await ext.close()
        await admin.close()


async def _held_by(lease: Any, host: str, not_by: str = "") -> bool:
    holder = (await lease()).get("holderIdentity") or ""
    return holder.startswith(f"{host}_") and holder != not_by

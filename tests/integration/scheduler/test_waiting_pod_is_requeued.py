"""A pod the extender refuses only because a confusable pod is still in flight on the node
("waiting for pod X to be allocated") is scheduled again as soon as the node agent marks X
allocated, with the REAL kube-scheduler v1.36 and no other event.

The extender relies on this: kube-scheduler (queueing hints on, the default) parks a pod that an
extender refused and moves it back on any cluster event, an assigned pod's update included
(extenders register a wildcard event; MoveAllToActiveOrBackoffQueue in eventhandlers.go). The
scheduler driver of tests/kubeapi does the same (scheduler_queue.py); this test keeps both
honest. Were it not so, the pod would wait for podMaxInUnschedulablePodsDuration (5 minutes).

"late": the extender's watch shows the mark 1.5 s after kube-scheduler's does, so kube-scheduler
tries the pod while the extender's cache still has X in flight. The extender reads X again
before refusing (scheduler/recheck.py); without that the pod stays unbound past 60 s (seen once
in CI, 2026-11-28)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube.resources.core_v1 import Event, Pod
from sched_helpers import Running, create, pod_obj, ready_node, wait_for

from gpuslice import handoff
from gpuslice.kube.client import dict_view

DEPLOY = Path(__file__).parents[3] / "deploy" / "scheduler" / "kube-scheduler-config.yaml"
ALLOCATABLE = {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "20"}

pytestmark = pytest.mark.kube_backends("kube-apiserver")


def kube_scheduler_config(url: str) -> dict[str, Any]:
    config = yaml.safe_load(DEPLOY.read_text())
    config["extenders"][0]["urlPrefix"] = url
    config["leaderElection"] = {"leaderElect": False}
    return config


def lag_the_mark(running: Running, seconds: float) -> None:
    """The extender's pod watch (not started yet) shows the allocated mark `seconds` after it
    comes: kube-scheduler sees it first and tries the waiting pod while the extender still has
    'first' in flight."""
    informer = running.ext.pods
    stream = informer._stream

    async def late() -> AsyncIterator[Any]:
        async for event in stream():
            annotations = event["object"]["metadata"].get("annotations") or {}
            if handoff.ALLOCATED in annotations:
                await asyncio.sleep(seconds)
            yield event
    informer._stream = late  # type: ignore[method-assign]


@pytest.mark.parametrize("watch", ["in step", "late"])
async def test_a_pod_waiting_for_an_in_flight_pod_is_bound_once_that_pod_is_allocated(
        kube_api, watch):
    plane = kube_api.control_plane
    if plane.assets.kube_scheduler is None:
        pytest.fail(f"{plane.assets.folder} has no kube-scheduler (tools/kube/build.sh)")
    admin = kube_api.async_client()
    await ready_node(admin, "gpu-1", ALLOCATABLE, gpus=1)

    async def node_of(name: str) -> str:
        return str((await admin.get(dict_view(Pod), name, namespace="default"))["spec"]
                   .get("nodeName") or "")

    running = Running(kube_api)
    if watch == "late":
        lag_the_mark(running, 1.5)
    async with running as ext:
        scheduler = plane.start_scheduler(kube_scheduler_config(ext.url))
        try:
            await create(admin, pod_obj("first", mem=4096))
            await wait_for(lambda: node_of("first"), "kube-scheduler to bind 'first'", 30)
            # 'second' asks for nvidia.com/gpu=1 too but another size: the node agent could
            # not tell the two apart, so it waits while 'first' is in flight
            await create(admin, pod_obj("second", mem=2048))

            async def refused_twice() -> bool:
                events = [e async for e in admin.list(dict_view(Event), namespace="default")]
                return sum(e.get("count") or 1 for e in events
                           if e["involvedObject"]["name"] == "second"
                           and e["reason"] == "FailedScheduling"
                           and "waiting for pod default/first" in e["message"]) >= 2
            await wait_for(refused_twice, "kube-scheduler to try 'second' and give up", 30)
            await asyncio.sleep(2)  # past its back-off: parked in the unschedulable pool
            assert await node_of("second") == ""

            await ext.mark_allocated("first")  # what the node agent writes after Allocate
            t0 = time.monotonic()
            # at once when the pod waits in the unschedulable pool; if the update came while
            # the pod was being tried, after its back-off (at most 10 s); never the 5 minutes
            # of the unschedulable pool's flush (a loaded CI machine once took over 20 s)
            await wait_for(lambda: node_of("second"),
                           "'second' to be bound once 'first' is allocated", 60)
            waited = time.monotonic() - t0
            print(f"'second' bound {waited:.1f} s after 'first' was marked allocated")
        except BaseException:
            lines = scheduler.log.read_text(errors="replace").splitlines()
            print("\n".join([ln for ln in lines if "second" in ln or "first" in ln][-40:]))
            raise
        finally:
            scheduler.stop()
            await admin.close()

"""Issue 20, items 2 and 3, tried against the node agent and the kubelet emulator: a pod that
skipped gpuslice, and a pod admitted after its flight expired, never get another pod's slice."""

from __future__ import annotations

import time
from typing import Any

import pytest
from lightkube.resources.core_v1 import Event, Pod

from gpuslice.kube.client import dict_view
from kubelet.emulator import AdmissionError, env_of
from kubelet.nodeharness import create, wait_for
from kubelet.pods import NODE, container, gpu, pod


def stranger(name: str, quantity: int = 1) -> dict[str, Any]:
    """A GPU pod created past gpuslice: another scheduler's name, bound by hand, no label and
    no assignment (what the webhook now denies; the agent must hold even without it)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": "default", "name": name},
            "spec": {"schedulerName": "other-scheduler", "nodeName": NODE, "containers": [
                {"name": "main", "image": "cuda",
                 "resources": {"limits": {"nvidia.com/gpu": str(quantity)}}}]}}


async def _in_store(node: Any, uid: str) -> None:
    await wait_for(lambda: any(p["metadata"]["uid"] == uid for p in node.agent.cluster.pods()),
                   "the pod in the agent's store")


async def _events(node: Any, reason: str) -> list[dict[str, Any]]:
    await node.agent.cluster.events.flush()
    return [e async for e in node.client.list(dict_view(Event), namespace="default")
            if e["reason"] == reason]


async def _gone(node: Any, name: str) -> None:
    """What the kubelet does with a pod it refused (it fails it); here: delete it."""
    await node.client.delete(dict_view(Pod), name, namespace="default", grace_period=0)
    await node.agent.cluster.refresh()


async def test_a_pod_that_skipped_gpuslice_never_gets_an_in_flight_share(node):
    owner = await create(node.client, pod("owner", [container("main", mem=12000, cores=60)],
                                          {"main": [gpu(0)]}, at=time.time() - 1))
    thief = await create(node.client, stranger("thief"))
    await _in_store(node, thief["metadata"]["uid"])  # the store holds unmanaged pods too
    await node.kubelet.wait_devices("nvidia.com/gpu")

    with pytest.raises(AdmissionError, match="may be for default/owner") as refused:
        await node.kubelet.admit(thief)  # before the fix: owner's 12000 MiB / 60 %
    assert "default/thief asks for it without a gpuslice placement" in str(refused.value)
    assert node.agent.metrics.allocations.labels("nvidia.com/gpu", "ambiguous")._value.get() == 1
    told = {e["involvedObject"]["name"] for e in await _events(node, "AllocateAmbiguous")}
    assert told == {"owner", "thief"}, "both pods say why, not only the one being admitted"

    await _gone(node, "thief")
    got = await node.kubelet.admit(owner)  # the real owner still gets its slice
    assert env_of(got["main"])["CUDA_DEVICE_MEMORY_LIMIT_0"] == "12000m"

    alone = await create(node.client, stranger("alone"))
    await _in_store(node, alone["metadata"]["uid"])
    with pytest.raises(AdmissionError, match="default/alone, refused"):
        await node.kubelet.admit(alone)


async def test_a_stranger_the_watch_has_not_delivered_is_found_before_the_first_answer(node):
    await create(node.client, pod("owner", [container("main", mem=12000)], {"main": [gpu(0)]},
                                  at=time.time() - 1))
    thief = await create(node.client, stranger("thief"))
    uid = thief["metadata"]["uid"]
    await _in_store(node, uid)
    node.agent.cluster._pods.pop(uid)  # as if the agent's watch lagged behind the kubelet's
    await node.kubelet.wait_devices("nvidia.com/gpu")
    with pytest.raises(AdmissionError, match="default/thief asks for it"):
        await node.kubelet.allocate("nvidia.com/gpu", 1)


async def test_a_stranger_asking_for_another_quantity_does_not_block_the_owner(node):
    owner = await create(node.client, pod("owner", [container("main")], {"main": [gpu(0)]},
                                          at=time.time() - 1))
    other = await create(node.client, stranger("other", quantity=2))
    await _in_store(node, other["metadata"]["uid"])
    await node.kubelet.wait_devices("nvidia.com/gpu")
    got = await node.kubelet.admit(owner)  # a 1-device call cannot be the 2-device pod's
    assert env_of(got["main"])["NVIDIA_VISIBLE_DEVICES"] == gpu(0)


async def test_a_late_admission_never_gets_a_newer_pods_bigger_slice(node):
    """The issue's run: the kubelet admits `late` long after its bind (a restart); meanwhile the
    extender, which stopped waiting for it, bound `newer` with the same first request and
    another slice. Before: `late` got newer's 12000 MiB and newer failed, while the extender
    charged late 4000 MiB: 26,000 MiB of limits ended up on a 16,384 MiB GPU."""
    timeout = node.agent.cfg.in_flight_timeout_seconds
    late = await create(node.client, pod("late", [container("main", mem=4000)],
                                         {"main": [gpu(0)]}, at=time.time() - 4 * timeout))
    newer = await create(node.client, pod("newer", [container("main", mem=12000)],
                                          {"main": [gpu(0)]}, at=time.time() - 1))
    await node.kubelet.wait_devices("nvidia.com/gpu")
    with pytest.raises(AdmissionError, match="default/newer bound beside default/late"):
        await node.kubelet.admit(late)
    told = {e["involvedObject"]["name"] for e in await _events(node, "AllocateAmbiguous")}
    assert told == {"late", "newer"}

    await _gone(node, "late")  # the kubelet fails the refused pod; its controller recreates it
    got = await node.kubelet.admit(newer)
    assert env_of(got["main"])["CUDA_DEVICE_MEMORY_LIMIT_0"] == "12000m"


async def test_a_late_admission_alone_still_gets_its_own_slice(node):
    """Expiry ends the extender's wait, not the pod's claim: with no confusable pod beside it,
    the late pod is answered with its own assignment (before: refused, 'no pod in flight')."""
    timeout = node.agent.cfg.in_flight_timeout_seconds
    late = await create(node.client, pod("late", [container("main", mem=4000)],
                                         {"main": [gpu(1)]}, at=time.time() - 4 * timeout))
    await node.kubelet.wait_devices("nvidia.com/gpu")
    got = await node.kubelet.admit(late)
    assert env_of(got["main"])["CUDA_DEVICE_MEMORY_LIMIT_0"] == "4000m"
    assert env_of(got["main"])["NVIDIA_VISIBLE_DEVICES"] == gpu(1)

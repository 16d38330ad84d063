"""Issue 20, items 2 and 3, on the REAL kubelet: a pod that skipped gpuslice, and a pod the
kubelet admits long after its bind, get no other pod's slice. The kubelet is paused
(SIGSTOP) while the pods are bound, as a partition would hold it, so that it meets them
together when it resumes and admits the older first; its plugins stay registered meanwhile."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from lightkube.resources.core_v1 import Pod

from gpuslice import codec
from gpuslice.kube.client import dict_view
from kubelet import real

SMALL = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000", "nvidia.com/gpucores": "10"}
BIG = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "12000", "nvidia.com/gpucores": "60"}
TIMEOUT_S = 30  # inFlightTimeoutSeconds of the tier's extender and agent (their default)


@contextmanager
def paused(node: real.RealNode) -> Iterator[None]:
    node.pause_kubelet()
    try:
        yield
    finally:
        node.resume_kubelet()


def bound(client: Any, name: str, ns: str, timeout: float = 30.0) -> dict[str, Any]:
    """The pod once the extender has bound it (assignment and spec.nodeName)."""
    deadline = time.monotonic() + timeout
    while True:
        pod = dict(client.get(dict_view(Pod), name, namespace=ns))
        if pod["spec"].get("nodeName") and codec.ASSIGNMENT_ANNOTATION in (
                pod["metadata"].get("annotations") or {}):
            return pod
        assert time.monotonic() < deadline, f"{name} not bound: {pod['status']}"
        time.sleep(0.2)


def settled(client: Any, name: str, ns: str, timeout: float = 60.0) -> dict[str, Any]:
    """The pod once the kubelet admitted (Running) or refused (Failed) it."""
    deadline = time.monotonic() + timeout
    while True:
        pod = dict(client.get(dict_view(Pod), name, namespace=ns))
        if pod["status"].get("phase") in ("Running", "Failed"):
            return pod
        assert time.monotonic() < deadline, f"{name} not admitted: {pod['status']}"
        time.sleep(0.2)


def own_slice_or_refused(node: real.RealNode, pod: dict[str, Any]) -> str:
    """What happened to a gpuslice pod: 'ran' with exactly its own assignment's limits (the
    kubelet's checkpoint), or 'refused' by the agent as ambiguous."""
    if pod["status"]["phase"] == "Failed":
        assert "may be for" in pod["status"]["message"], pod["status"]
        return "refused"
    a = codec.decode_assignment(pod["metadata"]["annotations"][codec.ASSIGNMENT_ANNOTATION])
    (entry,) = [e for e in node.checkpoint() if e["pod_uid"] == pod["metadata"]["uid"]]
    mine = a.containers[0].slices[0]
    assert entry["envs"]["CUDA_DEVICE_MEMORY_LIMIT_0"] == f"{mine.memory_mib}m"
    assert entry["envs"]["GPUSLICE_DEVICE_UUIDS"] == mine.uuid
    return "ran"


def test_a_pod_that_skipped_gpuslice_takes_no_in_flight_share(tier):
    client, ns, node = tier.client(), tier.namespace, tier.node
    with real.outside_namespace(tier) as out:
        with paused(node):
            client.create(dict_view(Pod)(real.pod_body("thief", out, {"nvidia.com/gpu": "1"},
                                                       nodeName=real.NODE)))
            client.create(dict_view(Pod)(real.pod_body("owner", ns, BIG)))
            bound(client, "owner", ns)
        thief = real.wait_phase(client, "thief", out, "Failed")
        # before: the thief ran with the owner's 12000 MiB / 60 % and the owner failed
        msg = thief["status"]["message"]
        assert f"{out}/thief asks for it without a gpuslice placement" in msg, msg
        assert all(e["pod_uid"] != thief["metadata"]["uid"] for e in node.checkpoint())
        outcome = own_slice_or_refused(node, settled(client, "owner", ns))
        real.report("stranger_beside_an_in_flight_pod", {"thief": "refused", "owner": outcome})


def test_a_late_admission_gets_no_newer_pods_bigger_slice(tier):
    """Before: the extender stopped waiting for `late` after inFlightTimeoutSeconds and bound the
    confusable `newer` beside it; the kubelet then gave `late` newer's 12000 MiB and `newer`
    failed, while the extender charged `late` 4000 MiB. Now the extender keeps `late` in flight
    until the kubelet admits it, so `newer` waits, and each runs with its own slice (the agent's
    refusal of such a pair is tried with a stranger above and in tests/integration/node)."""
    client, ns, node = tier.client(), tier.namespace, tier.node
    with paused(node):
        client.create(dict_view(Pod)(real.pod_body("late", ns, SMALL)))
        bound(client, "late", ns)
        time.sleep(TIMEOUT_S + 1)  # past the old in-flight timeout
        client.create(dict_view(Pod)(real.pod_body("newer", ns, BIG)))
        time.sleep(3)  # kube-scheduler tries it meanwhile
        waiting = dict(client.get(dict_view(Pod), "newer", namespace=ns))
        assert not waiting["spec"].get("nodeName"), "bound beside a pod not admitted yet"
    late = settled(client, "late", ns)
    assert own_slice_or_refused(node, late) == "ran", "the late pod gets its own slice"
    newer = settled(client, "newer", ns)
    assert newer["spec"]["nodeName"] == real.NODE
    assert own_slice_or_refused(node, newer) == "ran"
    real.report("late_admission_beside_a_newer_pod", {"late": "ran", "newer": "ran",
                                                      "newer_waited_unbound": True})

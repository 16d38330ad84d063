"""lightkube (the client gpuslice ships with) against the API: typed create, list, watch, patch,
replace, delete, on the async and the sync client (either backend)."""

from __future__ import annotations

import asyncio

import pytest
from lightkube import ApiError
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Event, Node, Pod
from lightkube.types import PatchType

from kubeapi.raw import pod_body


async def test_async_client_creates_lists_and_patches_pods(kube_api):
    client = kube_api.async_client()
    await client.create(Pod.from_dict(pod_body("a", labels={"gpuslice.io/managed": "true"})))
    await client.create(Pod.from_dict(pod_body("b")))
    managed = [p.metadata.name async for p in client.list(
        Pod, namespace="default", labels={"gpuslice.io/managed": "true"})]
    assert managed == ["a"]
    patched = await client.patch(Pod, "a", {"metadata": {"annotations": {
        "gpuslice.io/assignment": "x"}}}, patch_type=PatchType.MERGE)
    assert patched.metadata.annotations == {"gpuslice.io/assignment": "x"}
    patched = await client.patch(Pod, "a", [{"op": "replace", "path":
                                             "/metadata/annotations/gpuslice.io~1assignment",
                                             "value": "y"}], patch_type=PatchType.JSON)
    assert patched.metadata.annotations == {"gpuslice.io/assignment": "y"}


async def test_async_watch_streams_changes_after_a_list(kube_api):
    client = kube_api.async_client()
    await client.create(Pod.from_dict(pod_body("a")))
    listing = client.list(Pod, namespace="default")
    names = [p.metadata.name async for p in listing]
    seen: list[tuple[str, str]] = []

    async def watch() -> None:
        async for kind, pod in client.watch(Pod, namespace="default",
                                            resource_version=listing.resourceVersion):
            seen.append((kind, pod.metadata.name))
            if len(seen) == 3:
                return

    task = asyncio.create_task(watch())
    await asyncio.sleep(0.2)
    await client.create(Pod.from_dict(pod_body("b")))
    await client.delete(Pod, "a")
    await asyncio.wait_for(task, 10)
    # a deleted pod is first MODIFIED (its deletionTimestamp), then DELETED
    assert names == ["a"] and seen == [("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "a")]


async def test_the_lease_round_trip_leader_election_needs(kube_api):
    client = kube_api.async_client()
    # microseconds that are not 0: lightkube writes a datetime back without them otherwise
    # (see the next test)
    spec = LeaseSpec(holderIdentity="replica-1", leaseDurationSeconds=15,
                     renewTime="2026-11-24T00:00:00.000001Z")
    lease = await client.create(Lease(metadata=ObjectMeta(name="gpuslice-scheduler"), spec=spec),
                                namespace="kube-system")
    lease.spec.holderIdentity = "replica-2"
    taken = await client.replace(lease, namespace="kube-system")
    assert taken.spec.holderIdentity == "replica-2"
    lease.spec.holderIdentity = "replica-3"  # replica-3 read the lease before replica-2 wrote
    with pytest.raises(ApiError) as caught:
        await client.replace(lease, namespace="kube-system")
    assert caught.value.status.code == 409


async def test_a_typed_lease_read_at_a_whole_second_cannot_be_written_back(kube_api):
    """lightkube reads a MicroTime into a datetime and writes it with isoformat(), which
    drops ".000000": the server refuses that (MicroTime needs six digits). gpuslice's leader
    election (gpuslice.kube.lease) writes Leases as dicts for this reason."""
    client = kube_api.async_client()
    spec = LeaseSpec(holderIdentity="replica-1", renewTime="2026-11-24T00:00:00.000000Z")
    lease = await client.create(Lease(metadata=ObjectMeta(name="whole-second"), spec=spec),
                                namespace="default")
    assert lease.to_dict()["spec"]["renewTime"] == "2026-11-24T00:00:00Z"
    with pytest.raises(ApiError) as caught:
        await client.replace(lease, namespace="default")
    assert caught.value.status.code == 400
    assert caught.value.status.message == (
        'Lease in version "v1" cannot be handled as a Lease: parsing time '
        '"2026-11-24T00:00:00Z" as "2006-01-02T15:04:05.000000Z07:00": cannot parse "Z" as '
        '".000000"')


async def test_events_can_be_posted_for_a_pod(kube_api):
    client = kube_api.async_client()
    pod = await client.create(Pod.from_dict(pod_body("a")))
    event = Event.from_dict({
        "metadata": {"generateName": "a."}, "type": "Warning", "reason": "FailedScheduling",
        "message": "0/2 nodes are available: 2 Insufficient GPU memory.",
        "involvedObject": {"kind": "Pod", "namespace": "default", "name": "a",
                           "uid": pod.metadata.uid}})
    await client.create(event)
    found = [e async for e in client.list(Event, namespace="default",
                                          fields={"involvedObject.name": "a"})]
    assert [e.reason for e in found] == ["FailedScheduling"]


def test_the_sync_client_works_from_plain_threads(kube_api):
    client = kube_api.client()
    client.create(Node.from_dict({"metadata": {"name": "n1", "labels": {"gpu": "yes"}}}))
    client.patch(Node, "n1", {"metadata": {"annotations": {"gpuslice.io/inventory": "{}"}}})
    node = client.get(Node, "n1")
    # a real cluster's kube-controller-manager may have added its own
    # (node.alpha.kubernetes.io/ttl): the patch merged ours in
    assert node.metadata.annotations["gpuslice.io/inventory"] == "{}"
    assert [n.metadata.name for n in client.list(Node, labels={"gpu": "yes"})] == ["n1"]

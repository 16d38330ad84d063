"""resourceVersion, 409 and Status semantics, identical on the in-process and a real server."""

from __future__ import annotations

import pytest
from lightkube import ApiError
from lightkube.models.core_v1 import Container, PodSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Pod
from lightkube.types import PatchType


def pod(name: str, **meta) -> Pod:
    return Pod(metadata=ObjectMeta(name=name, **meta),
               spec=PodSpec(containers=[Container(name="c", image="registry.invalid/pause:1")]))


async def test_every_write_takes_a_larger_resource_version_than_the_last(kube_api):
    client = kube_api.async_client()
    first = await client.create(pod("rv-a"))
    second = await client.create(pod("rv-b"))
    patched = await client.patch(Pod, "rv-a", {"metadata": {"labels": {"x": "1"}}})
    versions = [int(o.metadata.resourceVersion) for o in (first, second, patched)]
    assert versions == sorted(versions) and len(set(versions)) == 3, versions
    assert first.metadata.uid and first.metadata.creationTimestamp


async def test_a_write_that_changes_nothing_keeps_its_resource_version(kube_api):
    client = kube_api.async_client()
    created = await client.create(ConfigMap(metadata=ObjectMeta(name="same"), data={"a": "1"}))
    again = await client.patch(ConfigMap, "same", {"data": {"a": "1"}},
                               patch_type=PatchType.MERGE)
    assert again.metadata.resourceVersion == created.metadata.resourceVersion


async def test_an_update_from_a_stale_read_is_a_409_conflict(kube_api):
    client = kube_api.async_client()
    stale = await client.create(ConfigMap(metadata=ObjectMeta(name="cm"), data={"a": "1"}))
    await client.patch(ConfigMap, "cm", {"data": {"a": "2"}}, patch_type=PatchType.MERGE)
    stale.data = {"a": "3"}
    with pytest.raises(ApiError) as caught:
        await client.replace(stale)
    status = caught.value.status
    assert (status.code, status.reason) == (409, "Conflict")
    assert status.message == ('Operation cannot be fulfilled on configmaps "cm": the object has '
                              "been modified; please apply your changes to the latest version "
                              "and try again")


async def test_a_patch_carrying_a_stale_resource_version_is_a_409_conflict(kube_api):
    client = kube_api.async_client()
    created = await client.create(ConfigMap(metadata=ObjectMeta(name="cm2"), data={"a": "1"}))
    await client.patch(ConfigMap, "cm2", {"data": {"a": "2"}}, patch_type=PatchType.MERGE)
    with pytest.raises(ApiError) as caught:
        await client.patch(ConfigMap, "cm2", {"metadata": {
            "resourceVersion": created.metadata.resourceVersion}, "data": {"a": "3"}},
            patch_type=PatchType.MERGE)
    assert caught.value.status.code == 409


async def test_creating_an_existing_name_is_409_already_exists_with_the_real_body(kube_api):
    client = kube_api.async_client()
    await client.create(pod("twice"))
    async with kube_api.http() as http:
        reply = await http.post("/api/v1/namespaces/default/pods", json={
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "twice"},
            "spec": {"containers": [{"name": "c", "image": "registry.invalid/pause:1"}]}})
    assert reply.status_code == 409
    assert reply.headers["content-type"] == "application/json"
    assert reply.json() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'pods "twice" already exists', "reason": "AlreadyExists",
        "details": {"name": "twice", "kind": "pods"}, "code": 409}


async def test_a_missing_object_is_404_with_group_and_kind_in_details(kube_api):
    async with kube_api.http() as http:
        reply = await http.get("/apis/coordination.k8s.io/v1/namespaces/default/leases/none")
    assert reply.status_code == 404
    assert reply.json() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'leases.coordination.k8s.io "none" not found', "reason": "NotFound",
        "details": {"name": "none", "group": "coordination.k8s.io", "kind": "leases"},
        "code": 404}


async def test_an_invalid_pod_is_422_listing_every_problem(kube_api):
    async with kube_api.http() as http:
        reply = await http.post("/api/v1/namespaces/default/pods", json={
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "Bad_Name"},
            "spec": {"containers": [{"name": "c"}]}})
    body = reply.json()
    assert (reply.status_code, body["reason"]) == (422, "Invalid"), body
    fields = {c["field"] for c in body["details"]["causes"]}
    assert {"metadata.name", "spec.containers[0].image"} <= fields, body


async def test_a_fractional_extended_resource_is_422_as_on_a_real_server(kube_api):
    bad = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "half"}, "spec": {
        "containers": [{"name": "c", "image": "registry.invalid/pause:1",
                        "resources": {"limits": {"nvidia.com/gpu": "0.5"}}}]}}
    async with kube_api.http() as http:
        reply = await http.post("/api/v1/namespaces/default/pods", json=bad)
    assert reply.status_code == 422, reply.text
    assert "must be an integer" in reply.json()["message"]


async def test_a_pod_in_a_missing_namespace_is_404_for_the_namespace(kube_api):
    client = kube_api.async_client()
    with pytest.raises(ApiError) as caught:
        await client.create(pod("lost"), namespace="no-such-namespace")
    assert caught.value.status.code == 404
    assert caught.value.status.message == 'namespaces "no-such-namespace" not found'


async def test_generate_name_gives_a_unique_name_with_that_prefix(kube_api):
    client = kube_api.async_client()
    made = [await client.create(pod("", generateName="gen-")) for _ in range(3)]
    names = {p.metadata.name for p in made}
    assert len(names) == 3 and all(n.startswith("gen-") and len(n) == 9 for n in names)


async def test_a_pod_spec_cannot_change_after_creation_except_images(kube_api):
    client = kube_api.async_client()
    await client.create(pod("frozen"))
    with pytest.raises(ApiError) as caught:
        await client.patch(Pod, "frozen", {"spec": {"nodeName": "n1"}})
    assert caught.value.status.code == 422
    moved = await client.patch(Pod, "frozen", {"spec": {"containers": [
        {"name": "c", "image": "registry.invalid/pause:2"}]}})
    assert moved.spec.containers[0].image == "registry.invalid/pause:2"


async def test_the_main_resource_cannot_write_status_and_status_cannot_write_spec(kube_api):
    client = kube_api.async_client()
    await client.create(pod("split"))
    ignored = await client.patch(Pod, "split", {"status": {"phase": "Running"}})
    assert ignored.status.phase == "Pending"
    running = await client.patch(Pod.Status, "split", {"status": {"phase": "Running"}})
    assert running.status.phase == "Running"


async def test_deleting_a_bound_pod_leaves_it_terminating_until_grace_zero(kube_api, raw):
    client = kube_api.async_client()
    await client.create(pod("bound"))
    assert (await raw.bind("bound", "n1"))[0] == 201
    await client.delete(Pod, "bound")
    still = await client.get(Pod, "bound")
    assert still.metadata.deletionTimestamp is not None
    await client.delete(Pod, "bound", grace_period=0)
    with pytest.raises(ApiError) as caught:
        await client.get(Pod, "bound")
    assert caught.value.status.code == 404


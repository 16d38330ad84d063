"""Object lifecycle details components meet on a real server: finalizers, collection deletes,
dry runs, the name in the URL, UID preconditions (either backend unless marked)."""

from __future__ import annotations

import pytest

from kubeapi.raw import node_body, pod_body

PODS = "/api/v1/namespaces/default/pods"
CM = "/api/v1/namespaces/default/configmaps"
MERGE = "application/merge-patch+json"


def _cm(name: str, **meta) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, **meta},
            "data": {"a": "1"}}


async def test_a_finalizer_holds_a_deleted_object_until_it_is_removed(raw):
    await raw.call("POST", CM, _cm("held", finalizers=["example.com/keep"]))
    code, held = await raw.call("DELETE", f"{CM}/held")
    assert code == 200 and held["metadata"]["deletionTimestamp"]
    code, _ = await raw.call("GET", f"{CM}/held")
    assert code == 200, "still there while the finalizer is"
    code, _ = await raw.call("PATCH", f"{CM}/held", {"metadata": {"finalizers": None}}, MERGE)
    assert code == 200
    code, _ = await raw.call("GET", f"{CM}/held")
    assert code == 404, "gone once the last finalizer is removed"


async def test_deleting_a_collection_honours_the_label_selector(raw):
    for name, app in (("a", "x"), ("b", "x"), ("c", "y")):
        await raw.create(pod_body(name, labels={"app": app}))
    code, _ = await raw.call("DELETE", PODS, labelSelector="app=x")
    _, left = await raw.call("GET", PODS)
    assert code == 200 and [p["metadata"]["name"] for p in left["items"]] == ["c"]


async def test_a_dry_run_create_validates_but_stores_nothing(raw):
    code, pod = await raw.call("POST", PODS, pod_body("dry"), dryRun="All")
    assert code == 201 and pod["status"]["phase"] == "Pending"
    code, _ = await raw.call("GET", f"{PODS}/dry")
    assert code == 404


async def test_a_put_whose_body_names_another_object_is_a_400(raw):
    await raw.call("POST", CM, _cm("one"))
    code, reply = await raw.call("PUT", f"{CM}/one", _cm("two"))
    assert (code, reply["reason"]) == (400, "BadRequest")


async def test_an_update_carrying_another_uid_is_a_409(raw):
    await raw.call("POST", CM, _cm("one"))
    body = {**_cm("one"), "metadata": {"name": "one",
                                       "uid": "00000000-0000-0000-0000-000000000000"}}
    code, reply = await raw.call("PUT", f"{CM}/one", body)
    assert code == 409 and reply["message"].startswith(
        'Operation cannot be fulfilled on configmaps "one": StorageError: invalid object, '
        "Code: 4, Key: /registry/configmaps/default/one, ResourceVersion: 0, "
        "AdditionalErrorMsg: Precondition failed: UID in precondition: "
        "00000000-0000-0000-0000-000000000000, UID in object meta: ")


async def test_a_patch_carrying_another_uid_is_a_422(raw):
    await raw.call("POST", CM, _cm("one"))
    code, reply = await raw.call("PATCH", f"{CM}/one", {"metadata": {
        "uid": "00000000-0000-0000-0000-000000000000"}}, MERGE)
    assert (code, reply["reason"]) == (422, "Invalid")
    assert reply["message"] == ('ConfigMap "one" is invalid: metadata.uid: Invalid value: '
                                '"00000000-0000-0000-0000-000000000000": field is immutable')


async def test_a_patch_that_renames_the_object_is_a_400(raw):
    await raw.call("POST", CM, _cm("one"))
    code, reply = await raw.call("PATCH", f"{CM}/one", {"metadata": {"name": "two"}}, MERGE)
    assert (code, reply["reason"]) == (400, "BadRequest")


async def test_a_delete_with_a_wrong_uid_precondition_is_a_409(raw):
    made = await raw.create(node_body("n1"))
    code, reply = await raw.call("DELETE", "/api/v1/nodes/n1", {
        "kind": "DeleteOptions", "apiVersion": "v1",
        "preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}})
    assert code == 409 and reply["message"] == (
        'Operation cannot be fulfilled on Node "n1": the UID in the precondition '
        "(00000000-0000-0000-0000-000000000000) does not match the UID in record "
        f"({made['metadata']['uid']}). The object might have been deleted and then recreated")
    assert reply["details"] == {"name": "n1", "kind": "Node"}


async def test_a_delete_with_a_stale_resource_version_precondition_is_a_409(raw):
    _, made = await raw.call("POST", "/apis/coordination.k8s.io/v1/namespaces/default/leases", {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"},
        "spec": {}})
    code, reply = await raw.call(
        "DELETE", "/apis/coordination.k8s.io/v1/namespaces/default/leases/l",
        {"preconditions": {"resourceVersion": "1"}})
    assert code == 409 and reply["message"] == (
        'Operation cannot be fulfilled on Lease.coordination.k8s.io "l": the ResourceVersion in '
        f"the precondition (1) does not match the ResourceVersion in record "
        f"({made['metadata']['resourceVersion']}). The object might have been modified")


async def test_a_lease_in_kube_node_lease_round_trips_micro_time(raw):
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "metadata": {"name": "n1"},
             "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40,
                      "renewTime": "2026-11-24T00:12:03.123456Z"}}
    code, made = await raw.call(
        "POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", lease)
    assert code == 201 and made["spec"]["renewTime"] == "2026-11-24T00:12:03.123456Z"


LEASES = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
LAYOUT = "2006-01-02T15:04:05.000000Z07:00"


@pytest.mark.parametrize(("sent", "why"), [
    ("2026-11-24T00:00:00Z", 'cannot parse "Z" as ".000000"'),
    ("2026-11-24T00:00:00.123Z", 'cannot parse ".123Z" as ".000000"'),
    ("2026-11-24T00:00:00.1234567Z", 'cannot parse "7Z" as "Z07:00"'),
    ("yesterday", 'cannot parse "yesterday" as "2006"'),
])
async def test_a_lease_time_without_six_fractional_digits_is_a_400(raw, sent, why):
    """MicroTime is read with Go's layout RFC3339Micro: exactly six digits after the second."""
    code, reply = await raw.call("POST", LEASES, {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"},
        "spec": {"holderIdentity": "a", "renewTime": sent}})
    assert (code, reply["reason"]) == (400, "BadRequest")
    assert reply["message"] == ('Lease in version "v1" cannot be handled as a Lease: parsing '
                                f'time "{sent}" as "{LAYOUT}": {why}')


async def test_a_lease_time_with_an_offset_comes_back_in_utc(raw):
    code, made = await raw.call("POST", LEASES, {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"},
        "spec": {"acquireTime": "2026-11-24T00:30:00.000001+01:00",
                 "renewTime": "2026-11-24T00:30:00.000001Z"}})
    assert code == 201
    assert made["spec"]["acquireTime"] == "2026-11-23T23:30:00.000001Z"
    assert made["spec"]["renewTime"] == "2026-11-24T00:30:00.000001Z"


async def test_deleting_a_namespace_takes_its_objects_with_it(kube_api, raw):
    kube_api.need_faults()  # a real server leaves it Terminating without the controller
    await raw.call("POST", "/api/v1/namespaces", {"metadata": {"name": "scratch"}})
    await raw.call("POST", "/api/v1/namespaces/scratch/configmaps", _cm("x"))
    code, _ = await raw.call("DELETE", "/api/v1/namespaces/scratch")
    assert code == 200
    code, _ = await raw.call("GET", "/api/v1/namespaces/scratch/configmaps/x")
    assert code == 404


async def test_the_legacy_watch_path_streams_like_the_query_parameter(raw):
    created = await raw.create(pod_body("a"))
    await raw.create(pod_body("b"))
    events = await raw.watch_lines("/api/v1/watch/namespaces/default/pods", 1,
                                   resourceVersion=created["metadata"]["resourceVersion"])
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "b")]

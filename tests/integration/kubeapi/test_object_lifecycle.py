"""Object lifecycle details components meet on a real server: finalizers, collection deletes,
dry runs, the name in the URL, UID preconditions (either backend unless marked)."""

from __future__ import annotations

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
    assert code == 409 and "Precondition failed: UID in precondition" in reply["message"]


async def test_a_patch_that_renames_the_object_is_a_400(raw):
    await raw.call("POST", CM, _cm("one"))
    code, reply = await raw.call("PATCH", f"{CM}/one", {"metadata": {"name": "two"}}, MERGE)
    assert (code, reply["reason"]) == (400, "BadRequest")


async def test_a_delete_with_a_wrong_uid_precondition_is_a_409(raw):
    await raw.create(node_body("n1"))
    code, reply = await raw.call("DELETE", "/api/v1/nodes/n1", {
        "kind": "DeleteOptions", "apiVersion": "v1",
        "preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}})
    assert code == 409 and "Precondition failed: UID in precondition" in reply["message"]


async def test_a_lease_in_kube_node_lease_round_trips_micro_time(raw):
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "metadata": {"name": "n1"},
             "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40,
                      "renewTime": "2026-11-24T00:12:03.123456Z"}}
    code, made = await raw.call(
        "POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", lease)
    assert code == 201 and made["spec"]["renewTime"] == "2026-11-24T00:12:03.123456Z"


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

"""JSON merge patch, strategic merge patch and JSON patch, as kube-apiserver applies them."""

from __future__ import annotations

from kubeapi.raw import pod_body

POD = "/api/v1/namespaces/default/pods/p"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
BARE_NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}


async def test_a_merge_patch_sets_and_removes_annotations(raw):
    await raw.create(pod_body("p"))
    _, pod = await raw.call("PATCH", POD, {"metadata": {"annotations": {"a": "1", "b": "2"}}},
                            MERGE)
    code, pod = await raw.call("PATCH", POD, {"metadata": {"annotations": {"a": None}}}, MERGE)
    assert code == 200 and pod["metadata"]["annotations"] == {"b": "2"}


async def test_a_merge_patch_replaces_lists_whole(raw):
    await raw.create(BARE_NODE)
    path = "/api/v1/nodes/n/status"
    await raw.call("PATCH", path, {"status": {"conditions": [
        {"type": "A", "status": "True"}, {"type": "B", "status": "True"}]}}, MERGE)
    code, node = await raw.call("PATCH", path, {"status": {"conditions": [
        {"type": "A", "status": "False"}]}}, MERGE)
    assert code == 200 and node["status"]["conditions"] == [{
        "type": "A", "status": "False", "lastHeartbeatTime": None, "lastTransitionTime": None}]


async def test_a_merge_patch_of_a_pod_keeps_its_defaults(raw):
    await raw.create(pod_body("p"))
    code, pod = await raw.call("PATCH", POD, {"spec": {"containers": [
        {"name": "c", "image": "registry.invalid/pause:2"}]}}, MERGE)
    assert code == 200, pod
    (container,) = pod["spec"]["containers"]
    assert container["image"] == "registry.invalid/pause:2"
    assert container["terminationMessagePolicy"] == "File", "defaulted again after the patch"


async def test_a_strategic_patch_merges_containers_by_name(raw):
    await raw.create(pod_body("p"))
    code, pod = await raw.call("PATCH", POD, {"spec": {"containers": [
        {"name": "c", "image": "registry.invalid/pause:3"}]}}, STRATEGIC)
    assert code == 200
    (container,) = pod["spec"]["containers"]
    assert container["image"] == "registry.invalid/pause:3"
    assert container["terminationMessagePolicy"] == "File", "other fields are kept"


async def test_a_strategic_status_patch_merges_conditions_by_type(raw):
    await raw.create(BARE_NODE)
    path = "/api/v1/nodes/n/status"
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady"}
    pressure = {"type": "MemoryPressure", "status": "False"}
    await raw.call("PATCH", path, {"status": {"conditions": [ready, pressure]}}, STRATEGIC)
    code, node = await raw.call("PATCH", path, {"status": {"conditions": [
        {"type": "Ready", "status": "False"}]}}, STRATEGIC)
    assert code == 200
    conditions = {c["type"]: c for c in node["status"]["conditions"]}
    unset = {"lastHeartbeatTime": None, "lastTransitionTime": None}  # Go's zero metav1.Time
    assert conditions["Ready"] == {**ready, **unset, "status": "False"}
    assert conditions["MemoryPressure"] == {**pressure, **unset}


async def test_a_strategic_patch_can_delete_one_list_element(raw):
    await raw.create(BARE_NODE)
    path = "/api/v1/nodes/n/status"
    await raw.call("PATCH", path, {"status": {"conditions": [
        {"type": "A", "status": "True"}, {"type": "B", "status": "True"}]}}, STRATEGIC)
    code, node = await raw.call("PATCH", path, {"status": {"conditions": [
        {"type": "A", "$patch": "delete"}]}}, STRATEGIC)
    assert code == 200 and [c["type"] for c in node["status"]["conditions"]] == ["B"]


async def test_a_json_patch_adds_an_annotation_with_an_escaped_key(raw):
    await raw.create(pod_body("p"))
    code, pod = await raw.call("PATCH", POD, [
        {"op": "add", "path": "/metadata/annotations", "value": {}},
        {"op": "add", "path": "/metadata/annotations/gpuslice.io~1assignment", "value": "x"},
    ], JSON_PATCH)
    assert code == 200 and pod["metadata"]["annotations"] == {"gpuslice.io/assignment": "x"}


async def test_a_json_patch_whose_test_fails_changes_nothing(raw):
    created = await raw.create(pod_body("p", labels={"v": "1"}))
    code, reply = await raw.call("PATCH", POD, [
        {"op": "replace", "path": "/metadata/labels/v", "value": "2"},
        {"op": "test", "path": "/metadata/labels/v", "value": "1"},
    ], JSON_PATCH)
    assert code == 422, reply
    _, pod = await raw.call("GET", POD)
    assert pod["metadata"]["labels"] == {"v": "1"}
    assert pod["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


async def test_a_json_patch_removing_a_missing_path_is_422(raw):
    await raw.create(pod_body("p"))
    code, reply = await raw.call("PATCH", POD, [
        {"op": "remove", "path": "/metadata/annotations/nope"}], JSON_PATCH)
    assert code == 422, reply


async def test_a_json_patch_can_guard_on_the_resource_version(raw):
    created = await raw.create(pod_body("p"))
    await raw.call("PATCH", POD, {"metadata": {"labels": {"x": "1"}}}, MERGE)
    code, _ = await raw.call("PATCH", POD, [
        {"op": "test", "path": "/metadata/resourceVersion",
         "value": created["metadata"]["resourceVersion"]},
        {"op": "add", "path": "/metadata/labels/y", "value": "2"}], JSON_PATCH)
    assert code == 422, "the resourceVersion moved on, so the test op fails"


async def test_an_unknown_patch_type_is_415(raw):
    await raw.create(pod_body("p"))
    code, reply = await raw.call("PATCH", POD, {"metadata": {}}, "application/json")
    assert (code, reply["reason"]) == (415, "UnsupportedMediaType")

"""The pod binding subresource, as kube-scheduler and the extender's bind verb use it."""

from __future__ import annotations

from kubeapi.raw import pod_body


async def test_binding_sets_the_node_and_marks_the_pod_scheduled(raw):
    await raw.create(pod_body("p"))
    code, reply = await raw.bind("p", "node-a")
    assert code == 201
    assert reply == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                     "code": 201}
    _, pod = await raw.call("GET", "/api/v1/namespaces/default/pods/p")
    assert pod["spec"]["nodeName"] == "node-a"
    scheduled = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert scheduled and scheduled[0]["status"] == "True"


async def test_binding_a_bound_pod_again_is_a_409_naming_its_node(raw):
    await raw.create(pod_body("p"))
    await raw.bind("p", "node-a")
    code, reply = await raw.bind("p", "node-b")
    assert (code, reply["reason"]) == (409, "Conflict")
    assert reply["message"] == ('Operation cannot be fulfilled on pods/binding "p": pod p is '
                                'already assigned to node "node-a"')


async def test_binding_with_another_pods_uid_is_a_409_precondition_failure(raw):
    await raw.create(pod_body("p"))
    code, reply = await raw.bind("p", "node-a", uid="00000000-0000-0000-0000-000000000000")
    assert code == 409 and "Precondition failed: UID in precondition" in reply["message"]
    _, pod = await raw.call("GET", "/api/v1/namespaces/default/pods/p")
    assert "nodeName" not in pod["spec"], "a refused binding must not bind"


async def test_binding_a_missing_pod_is_404(raw):
    code, reply = await raw.bind("ghost", "node-a")
    assert (code, reply["reason"]) == (404, "NotFound")


async def test_binding_annotations_are_copied_to_the_pod(raw):
    await raw.create(pod_body("p"))
    code, _ = await raw.bind("p", "node-a", annotations={"example.com/why": "test"})
    _, pod = await raw.call("GET", "/api/v1/namespaces/default/pods/p")
    assert code == 201 and pod["metadata"]["annotations"] == {"example.com/why": "test"}


async def test_binding_from_an_outdated_resource_version_is_a_409_and_binds_nothing(raw):
    version = (await raw.create(pod_body("p")))["metadata"]["resourceVersion"]
    await raw.call("PATCH", "/api/v1/namespaces/default/pods/p",
                   {"metadata": {"labels": {"changed": "yes"}}},
                   content_type="application/merge-patch+json")
    code, reply = await raw.bind("p", "node-a", resourceVersion=version,
                                 annotations={"example.com/chosen-from": version})
    assert code == 409 and "Precondition failed: ResourceVersion in precondition" in \
        reply["message"], "the pod changed after the binding's choice was made"
    _, pod = await raw.call("GET", "/api/v1/namespaces/default/pods/p")
    assert "nodeName" not in pod["spec"] and "example.com/chosen-from" not in (
        pod["metadata"].get("annotations") or {}), "nothing of a refused binding lands"
    code, _ = await raw.bind("p", "node-a", resourceVersion=pod["metadata"]["resourceVersion"])
    assert code == 201, "from the current version it binds"

"""scheduler/state.py's PodFields and NodeFields: the extender's informers decode watched pods
and nodes through them, so trim_pod and trim_node must see, through each schema, all they read.
Property: for any object, golden or generated (well-formed or not), the trim of its decode
through the schema equals the trim of its whole decode (or both fail alike)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuslice import codec, handoff
from gpuslice.kube.cache import decoder
from gpuslice.scheduler.state import NodeFields, PodFields, trim_node, trim_pod

SAMPLES = Path(__file__).parent / "samples"


def outcome(trim: Callable[[Any], Any], obj: Any) -> Any:
    try:
        return trim(obj)
    except Exception as exc:  # equal failures count as equal: whatever the whole decode does
        return type(exc)


def same_through(schema: Any, trim: Callable[[Any], Any], data: bytes) -> None:
    through = outcome(trim, decoder(schema)(data))
    assert through == outcome(trim, msgspec.json.decode(data)), data


def test_the_golden_pods_and_nodes_trim_alike_through_their_schemas():
    """What kube-scheduler really sent (tests/unit/scheduler/samples): its Pod, its Nodes."""
    request = json.loads((SAMPLES / "extender-filter-nodecachecapable-false.request.json")
                         .read_text())
    same_through(PodFields, trim_pod, json.dumps(request["Pod"]).encode())
    assert request["Nodes"]["items"]
    for node in request["Nodes"]["items"]:
        same_through(NodeFields, trim_node, json.dumps(node).encode())


def test_a_pod_and_a_node_with_every_field_the_trims_read_keep_them_all():
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "p", "namespace": "ml", "uid": "u", "resourceVersion": "7",
        "creationTimestamp": "2026-11-28T00:00:00Z", "deletionTimestamp": "2026-11-28T00:01:00Z",
        "annotations": {codec.ASSIGNMENT_ANNOTATION: "{}", handoff.BOUND_AT: "t",
                        handoff.ALLOCATED: "main", "gpuslice.io/gang": "g"},
        "labels": {handoff.MANAGED_LABEL: "true"}, "managedFields": [{"manager": "m"}]},
        "spec": {"nodeName": "n", "schedulerName": "s",
                 "initContainers": [{"name": "i", "restartPolicy": "Always",
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
                 "containers": [{"name": "main", "resources": {"limits": {"cpu": "1"}},
                                 "env": [{"name": "A", "value": "x"}]}]},
        "status": {"phase": "Running", "initContainerStatuses": [{"name": "i", "ready": True}],
                   "containerStatuses": [{"name": "main", "ready": False}]}}
    data = json.dumps(pod).encode()
    assert trim_pod(decoder(PodFields)(data)) == trim_pod(pod)
    assert all(trim_pod(pod)[k] for k in ("metadata", "spec", "status"))
    node = {"metadata": {"name": "n", "resourceVersion": "3",
                         "annotations": {codec.INVENTORY_ANNOTATION: "{}"}},
            "status": {"images": [{"names": ["x"]}]}}
    assert trim_node(decoder(NodeFields)(json.dumps(node).encode())) == trim_node(node)


leaf = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=6)
anything = st.recursive(leaf, lambda inner: st.lists(inner, max_size=3)
                        | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                        max_leaves=6)


def shaped(fields: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """An object with some of `fields` and keys of no interest, or (rarely) anything at all."""
    obj = st.builds(lambda known, other: {**other, **known},
                    st.fixed_dictionaries({}, optional=fields),
                    st.dictionaries(st.sampled_from(["managedFields", "env", "image", "x"]),
                                    anything, max_size=2))
    return st.one_of(obj, obj, obj, obj, anything)


annotations = st.dictionaries(
    st.sampled_from([codec.ASSIGNMENT_ANNOTATION, handoff.BOUND_AT, handoff.ALLOCATED,
                     codec.INVENTORY_ANNOTATION, "gpuslice.io/gang", "other.io/note"]),
    st.text(max_size=12), max_size=4)
meta = shaped({"name": st.text(max_size=4), "namespace": leaf, "uid": leaf,
               "resourceVersion": leaf, "creationTimestamp": leaf, "deletionTimestamp": leaf,
               "annotations": annotations | anything,
               "labels": st.dictionaries(st.sampled_from([handoff.MANAGED_LABEL, "app"]),
                                         leaf, max_size=2) | anything})
container = shaped({"name": leaf, "restartPolicy": leaf, "resources": anything})
named = shaped({"name": leaf, "ready": leaf})
pods = shaped({
    "metadata": meta,
    "spec": shaped({"nodeName": leaf, "schedulerName": leaf,
                    "containers": st.lists(container, min_size=1, max_size=2) | anything,
                    "initContainers": st.lists(container, max_size=2) | anything}),
    "status": shaped({"phase": leaf, "qosClass": leaf,
                      "containerStatuses": st.lists(named, max_size=2) | anything,
                      "initContainerStatuses": st.lists(named, max_size=2) | anything})})
nodes = shaped({"metadata": meta, "status": anything})


@settings(max_examples=400)
@given(pods)
def test_any_pod_trims_alike_through_pod_fields(pod):
    same_through(PodFields, trim_pod, json.dumps(pod).encode())


@settings(max_examples=200)
@given(nodes)
def test_any_node_trims_alike_through_node_fields(node):
    same_through(NodeFields, trim_node, json.dumps(node).encode())

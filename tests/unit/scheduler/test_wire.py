"""Every body a real kube-scheduler v1.36 sent decodes, and every reply has the keys of the
reply it accepted (samples/, captured from the real scheduler: capitalised Go field names)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuslice.allocator import parse_policy
from gpuslice.scheduler import wire
from gpuslice.scheduler.filter import Evaluator, filter_reply
from gpuslice.scheduler.prioritize import prioritize_reply
from gpuslice.scheduler.state import ExtenderState

from .objects import Clock, node

SAMPLES = Path(__file__).parent / "samples"
CALLS = ["filter-nodecachecapable-true", "filter-nodecachecapable-false",
         "prioritize-nodecachecapable-true", "prioritize-nodecachecapable-false"]


def sample(name: str) -> bytes:
    return (SAMPLES / f"extender-{name}.json").read_bytes()


@pytest.mark.parametrize("call", CALLS)
def test_each_sample_request_decodes_with_its_pod_and_nodes(call):
    args = wire.decode(sample(f"{call}.request"), wire.ExtenderArgs)
    assert args.Pod["metadata"]["name"] == "gpu-1"
    if call.endswith("true"):
        assert args.Nodes is None and args.NodeNames == ["node-b", "node-a"]
    else:
        assert args.NodeNames is None
        names = [wire.decode(bytes(r), wire.NodeHead).metadata.name for r in args.Nodes.items]
        assert names == ["node-b", "node-a"]


@pytest.mark.parametrize("call", CALLS)
def test_each_reply_has_the_keys_of_the_reply_the_scheduler_accepted(call):
    state = ExtenderState(timeout_s=30, clock=Clock())
    state.on_node("ADDED", node("node-a"))
    ev = Evaluator(state, parse_policy("binpack"))
    args = wire.decode(sample(f"{call}.request"), wire.ExtenderArgs)
    if args.Nodes is not None:
        verdict, names = ev.given(args.Pod, args.Nodes)
    else:
        names = args.NodeNames
        verdict = ev.cached(args.Pod, names)
    accepted = json.loads(sample(f"{call}.response"))
    if call.startswith("filter"):
        reply = json.loads(wire.encode(filter_reply(verdict, names)))
        assert set(reply) == set(accepted)
    else:
        reply = json.loads(wire.encode(prioritize_reply(ev, verdict, names)))
        assert [set(h) for h in reply] == [set(h) for h in accepted]
        assert [h["Host"] for h in reply] == [h["Host"] for h in accepted]


def test_bind_sample_decodes_and_the_reply_is_the_accepted_one():
    args = wire.decode(sample("bind.request"), wire.BindingArgs)
    assert (args.PodName, args.PodNamespace, args.Node) == ("gpu-1", "default", "node-b")
    assert json.loads(wire.encode(wire.BindingResult())) == json.loads(sample("bind.response"))


@pytest.mark.parametrize("body", [b"", b"[]", b'{"Pod": 3}', b'{"pod": {}, "nodenames": []}',
                                  b'{"Pod": {}, "NodeNames": "node-a"}', b"\xff\xfe"])
def test_malformed_bodies_raise_wire_error_naming_the_body(body):
    with pytest.raises(wire.WireError, match="ExtenderArgs body: "):
        wire.decode(body, wire.ExtenderArgs)

"""Properties of codec.py: decode(encode(x)) == x, and garbage only ever raises CodecError."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuslice import model
from gpuslice.codec import decode_assignment, decode_inventory, encode_assignment, encode_inventory
from gpuslice.errors import CodecError

I64 = 2**63 - 1
names = st.text(min_size=1, max_size=12)
uuids = st.text(min_size=1, max_size=8).map(lambda s: f"GPU-{s}")


@st.composite
def inventories(draw: st.DrawFn) -> model.NodeInventory:
    ids = draw(st.lists(uuids, unique=True, max_size=8))
    gpus = tuple(
        model.GPU(
            uuid=u, model=draw(st.text(max_size=20)), memory_mib=draw(st.integers(1, I64)),
            index=draw(st.integers(0, 64)), sm_count=draw(st.integers(0, 512)),
            numa_node=draw(st.none() | st.integers(0, 8)),
            nvlink_peers=tuple(draw(st.lists(st.sampled_from(ids), max_size=3))),
            healthy=draw(st.booleans()), split_count=draw(st.integers(1, 64)),
        )
        for u in ids
    )
    return model.NodeInventory(node=draw(names), gpus=gpus)


@st.composite
def assignments(draw: st.DrawFn) -> model.PodAssignment:
    containers = tuple(
        model.ContainerAssignment(
            container=name, kind=draw(st.sampled_from(model.ContainerKind)),
            slices=tuple(
                model.GPUSlice(uuid=u, memory_mib=draw(st.integers(1, I64)),
                               cores=draw(st.integers(0, 100)))
                for u in draw(st.lists(uuids, unique=True, min_size=1, max_size=4))
            ),
        )
        for name in draw(st.lists(names, unique=True, max_size=4))
    )
    return model.PodAssignment(node=draw(names), containers=containers)


@given(inventories())
def test_every_valid_inventory_survives_encode_then_decode(inv):
    assert decode_inventory(encode_inventory(inv), node=inv.node) == inv


@given(assignments())
def test_every_valid_assignment_survives_encode_then_decode(a):
    assert decode_assignment(encode_assignment(a)) == a


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(["version", "gpus", "node", "containers", "uuid", "model",
                                       "memoryMiB", "cores", "slices", "name", "kind",
                                       "splitCount", "numaNode", "nvlinkPeers", "x"]),
                      inner, max_size=5),
    max_leaves=20,
)


def _mutated(text: str, data: st.DataObject) -> str:
    i = data.draw(st.integers(0, len(text)))
    j = data.draw(st.integers(i, min(len(text), i + 4)))
    return text[:i] + data.draw(st.text(max_size=3)) + text[j:]


def _only_codec_errors(text: str) -> None:
    for decode in (lambda t: decode_inventory(t, node="n"), decode_assignment):
        try:
            decode(text)
        except CodecError as err:
            assert str(err).startswith("gpuslice.io/"), "every message names the annotation"


@settings(max_examples=200)
@given(st.one_of(json_values.map(json.dumps), json_values.map(lambda v: json.dumps(
    {"version": 1, "gpus": v, "node": "n", "containers": v})), st.text(max_size=40)))
def test_garbage_json_raises_nothing_but_codec_error(text):
    _only_codec_errors(text)


@settings(max_examples=200)
@given(st.one_of(inventories().map(encode_inventory), assignments().map(encode_assignment)),
       st.data())
def test_small_corruptions_of_valid_annotations_raise_nothing_but_codec_error(text, data):
    _only_codec_errors(_mutated(text, data))

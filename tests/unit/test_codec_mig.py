"""codec.py's MIG fields: round trips (hypothesis), the unchanged wire of shim GPUs, and clear
refusals of inconsistent MIG blocks."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuslice import mig, model
from gpuslice.codec import decode_assignment, decode_inventory, encode_assignment, encode_inventory
from gpuslice.errors import CodecError
from mig_helpers import legal_layouts

H100 = mig.CATALOG["H100-80GB"]


@st.composite
def mig_inventories(draw: st.DrawFn) -> model.NodeInventory:
    gpus = []
    for i in range(draw(st.integers(1, 4))):
        table, slices = draw(legal_layouts())
        instances = tuple(
            mig.Instance(profile=s.profile, start=s.start,
                         size=next(p for p in table if p.name == s.profile).size,
                         uuid=draw(st.sampled_from(["", f"MIG-{i}-{s.start}"])))
            for s in slices)
        m = None if draw(st.booleans()) else mig.MigGPU(profiles=table, instances=instances)
        gpus.append(model.GPU(uuid=f"GPU-{i}", model="NVIDIA H100 80GB HBM3",
                              memory_mib=81559, index=i, mig=m))
    return model.NodeInventory(node="n", gpus=tuple(gpus))


@given(mig_inventories())
def test_every_mig_inventory_survives_encode_then_decode(inv):
    assert decode_inventory(encode_inventory(inv), node="n") == inv


@given(legal_layouts())
def test_every_mig_assignment_survives_encode_then_decode(layout):
    _, slices = layout
    a = model.PodAssignment(node="n", containers=tuple(
        model.ContainerAssignment(container=f"c{i}", slices=(model.GPUSlice(
            uuid="GPU-0", memory_mib=1, cores=14, mig=s),))
        for i, s in enumerate(slices)))
    assert decode_assignment(encode_assignment(a)) == a


def test_a_shim_gpu_writes_no_mode_or_mig_key():
    text = encode_inventory(model.NodeInventory(node="n", gpus=(
        model.GPU(uuid="GPU-0", model="m", memory_mib=1),)))
    assert "mode" not in json.loads(text)["gpus"][0]
    assert "mig" not in json.loads(text)["gpus"][0]


def test_a_mig_gpu_publishes_mode_instances_and_free_placements():
    inv = model.NodeInventory(node="n", gpus=(model.GPU(
        uuid="GPU-0", model="m", memory_mib=81559, mig=mig.MigGPU(profiles=H100, instances=(
            mig.Instance(profile="3g.40gb", start=4, size=4, uuid="MIG-x"),))),))
    g = json.loads(encode_inventory(inv))["gpus"][0]
    assert g["mode"] == "mig"
    assert g["mig"]["instances"] == [{"profile": "3g.40gb", "start": 4, "size": 4,
                                      "uuid": "MIG-x"}]
    assert g["mig"]["freePlacements"]["1g.10gb"] == [0, 1, 2, 3]
    assert g["mig"]["freePlacements"]["7g.80gb"] == []


def _mig_gpu(**over: object) -> str:
    g = {"uuid": "GPU-0", "model": "m", "memoryMiB": 81559, "mode": "mig",
         "mig": {"profiles": [{"name": "3g.40gb", "compute": 3, "memoryMiB": 40448, "size": 4,
                               "starts": [0, 4]}], "instances": []}}
    g.update(over)
    return json.dumps({"version": 1, "gpus": [g]})


@pytest.mark.parametrize(("text", "message"), [
    (_mig_gpu(mode="mps"), "$.gpus[0].mode: expected one of"),
    (_mig_gpu(mig=None), "$.gpus[0].mig: expected object"),
    (_mig_gpu(mode="shim"), "$.gpus[0].mig: mode shim takes no mig block"),
    (json.dumps({"version": 1, "gpus": [{"uuid": "G", "model": "m", "memoryMiB": 1,
                                         "mode": "mig"}]}),
     "$.gpus[0].mig: mode mig needs mig block"),
    (_mig_gpu(mig={"profiles": [], "instances": [
        {"profile": "a", "start": 0, "size": 4}, {"profile": "b", "start": 2, "size": 2}]}),
     "$.gpus[0].mig: instance b@2 overlaps a@0"),
    (_mig_gpu(mig={"profiles": [{"name": "x", "compute": 1, "memoryMiB": 1, "size": 4,
                                 "starts": [6]}]}),
     "$.gpus[0].mig: profile x: starts [6] must be non-empty and within 0..4"),
    (_mig_gpu(mig={"profiles": [{"name": "x", "compute": 8, "memoryMiB": 1, "size": 1,
                                 "starts": [0]}]}),
     "$.gpus[0].mig.profiles[0].compute: expected int <= 7"),
])
def test_inconsistent_mig_blocks_are_refused_with_the_path(text, message):
    with pytest.raises(CodecError) as err:
        decode_inventory(text, node="n")
    assert message in str(err.value)


def test_encode_refuses_overlapping_instances_it_would_not_read_back():
    inv = model.NodeInventory(node="n", gpus=(model.GPU(
        uuid="GPU-0", model="m", memory_mib=1, mig=mig.MigGPU(profiles=H100, instances=(
            mig.Instance(profile="7g.80gb", start=0, size=8),
            mig.Instance(profile="1g.10gb", start=3, size=1)))),))
    with pytest.raises(CodecError, match="refusing to write an invalid value"):
        encode_inventory(inv)

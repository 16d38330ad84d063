"""The gpuslice.io/ annotations: wire shape, round trips, and every way to be malformed."""

from __future__ import annotations

import json

import pytest

from gpuslice import model
from gpuslice.codec import (
    ASSIGNMENT_ANNOTATION,
    INVENTORY_ANNOTATION,
    decode_assignment,
    decode_inventory,
    encode_assignment,
    encode_inventory,
)
from gpuslice.errors import CodecError

H100 = "NVIDIA H100 80GB HBM3"
INVENTORY = model.NodeInventory(node="gpu-1", gpus=(
    model.GPU(uuid="GPU-aaa", model=H100, memory_mib=81559, index=0, sm_count=132, numa_node=0,
              nvlink_peers=("GPU-bbb",), split_count=4),
    model.GPU(uuid="GPU-bbb", model=H100, memory_mib=81559, index=1, sm_count=132,
              numa_node=None, nvlink_peers=("GPU-aaa",), healthy=False),
))
ASSIGNMENT = model.PodAssignment(node="gpu-1", containers=(
    model.ContainerAssignment(container="setup", kind=model.ContainerKind.INIT, slices=(
        model.GPUSlice(uuid="GPU-aaa", memory_mib=1024, cores=0),)),
    model.ContainerAssignment(container="train", slices=(
        model.GPUSlice(uuid="GPU-aaa", memory_mib=40000, cores=50),
        model.GPUSlice(uuid="GPU-bbb", memory_mib=40000, cores=50))),
))


def test_inventory_wire_shape_is_camel_case_json_with_version_first():
    text = encode_inventory(INVENTORY)
    assert text.startswith('{"version":1,'), "readers check the version before anything else"
    assert json.loads(text)["gpus"][0] == {
        "uuid": "GPU-aaa", "model": H100, "memoryMiB": 81559, "index": 0, "smCount": 132,
        "numaNode": 0, "nvlinkPeers": ["GPU-bbb"], "healthy": True, "splitCount": 4,
    }, "every inventory field of DESIGN §3, camelCase"
    assert "node" not in json.loads(text), "the node name is the Node object's own metadata"


def test_assignment_wire_shape_lists_containers_by_name_with_their_slices():
    text = encode_assignment(ASSIGNMENT)
    assert text.startswith('{"version":1,')
    assert json.loads(text) == {"version": 1, "node": "gpu-1", "containers": [
        {"name": "setup", "kind": "init",
         "slices": [{"uuid": "GPU-aaa", "memoryMiB": 1024, "cores": 0}]},
        {"name": "train", "kind": "app", "slices": [
            {"uuid": "GPU-aaa", "memoryMiB": 40000, "cores": 50},
            {"uuid": "GPU-bbb", "memoryMiB": 40000, "cores": 50}]},
    ]}


def test_inventory_round_trips_with_the_node_name_from_metadata():
    assert decode_inventory(encode_inventory(INVENTORY), node="gpu-1") == INVENTORY


def test_assignment_round_trips():
    assert decode_assignment(encode_assignment(ASSIGNMENT)) == ASSIGNMENT


def test_optional_inventory_fields_take_the_model_defaults_when_absent():
    got = decode_inventory('{"version":1,"gpus":[{"uuid":"GPU-x","model":"T4",'
                           '"memoryMiB":15360}]}', node="n")
    assert got.gpus == (model.GPU(uuid="GPU-x", model="T4", memory_mib=15360),)


def test_unknown_keys_are_ignored_so_newer_writers_can_add_optional_fields():
    got = decode_assignment('{"version":1,"node":"n","future":{"x":[1]},"containers":[]}')
    assert got == model.PodAssignment(node="n", containers=())


def inv(gpus: str) -> str:
    return '{"version":1,"gpus":[' + gpus + "]}"


GPU_OK = '"uuid":"GPU-1","model":"T4","memoryMiB":15360'

BAD_INVENTORIES = {
    "garbage": ("80G", "$: not valid JSON"),
    "an empty string": ("", "$: not valid JSON"),
    "a JSON array": ("[]", "$: expected object, got []"),
    "JSON null": ("null", "$: expected object, got null"),
    "no version": ('{"gpus":[]}', "$.version: required field is missing"),
    "a version as a string": ('{"version":"1","gpus":[]}', '$.version: expected int, got "1"'),
    "an unknown version": ('{"version":2,"gpus":[]}',
                           "$.version: unknown version 2 (this gpuslice reads version 1)"),
    "gpus missing": ('{"version":1}', "$.gpus: required field is missing"),
    "gpus not a list": ('{"version":1,"gpus":{}}', "$.gpus: expected array, got {}"),
    "memory as a quantity string": (
        inv(f'{{{GPU_OK}}},{{{GPU_OK.replace("1", "2", 1)}}},'
            '{"uuid":"GPU-3","model":"T4","memoryMiB":"80G"}'),
        '$.gpus[2].memoryMiB: expected int, got "80G"'),
    "memory of zero": (inv('{"uuid":"a","model":"m","memoryMiB":0}'),
                       "$.gpus[0].memoryMiB: expected int >= 1, got 0"),
    "memory as a float": (inv('{"uuid":"a","model":"m","memoryMiB":1.5}'),
                          "$.gpus[0].memoryMiB: expected int, got 1.5"),
    "memory beyond int64": (inv('{"uuid":"a","model":"m","memoryMiB":1' + "0" * 20 + "}"),
                            "$.gpus[0].memoryMiB: expected int <= 9223372036854775807"),
    "a missing uuid": (inv('{"model":"m","memoryMiB":1}'), "$.gpus[0].uuid: required field"),
    "an empty uuid": (inv('{"uuid":"","model":"m","memoryMiB":1}'),
                      '$.gpus[0].uuid: expected str of length >= 1, got ""'),
    "a split count of zero": (inv(f'{{{GPU_OK},"splitCount":0}}'),
                              "$.gpus[0].splitCount: expected int >= 1, got 0"),
    "a negative NUMA node": (inv(f'{{{GPU_OK},"numaNode":-1}}'),
                             "$.gpus[0].numaNode: expected int >= 0, got -1"),
    "health as a string": (inv(f'{{{GPU_OK},"healthy":"yes"}}'),
                           '$.gpus[0].healthy: expected bool, got "yes"'),
    "peers not a list": (inv(f'{{{GPU_OK},"nvlinkPeers":"GPU-2"}}'),
                         '$.gpus[0].nvlinkPeers: expected array, got "GPU-2"'),
    "duplicate GPU UUIDs": (inv(f"{{{GPU_OK}}},{{{GPU_OK}}}"),
                            '$.gpus[1].uuid: duplicate GPU "GPU-1" already at $.gpus[0].uuid'),
}


@pytest.mark.parametrize("text, detail", BAD_INVENTORIES.values(), ids=BAD_INVENTORIES.keys())
def test_a_bad_inventory_is_a_codec_error_naming_annotation_and_field_path(text, detail):
    with pytest.raises(CodecError) as err:
        decode_inventory(text, node="n")
    message = str(err.value)
    assert message.startswith(f"{INVENTORY_ANNOTATION}: {detail}"), message
    assert message.count("; ") >= 1, f"ends with what to do: {message}"


def asg(containers: str) -> str:
    return '{"version":1,"node":"n","containers":[' + containers + "]}"


SLICE_OK = '{"uuid":"GPU-1","memoryMiB":100,"cores":10}'

BAD_ASSIGNMENTS = {
    "garbage": ("{", "$: not valid JSON"),
    "an unknown version": ('{"version":0,"node":"n","containers":[]}', "$.version: unknown"),
    "no node": ('{"version":1,"containers":[]}', "$.node: required field is missing"),
    "an empty node name": ('{"version":1,"node":"","containers":[]}',
                           '$.node: expected str of length >= 1, got ""'),
    "cores above 100": (asg('{"name":"c","slices":[{"uuid":"a","memoryMiB":1,"cores":101}]}'),
                        "$.containers[0].slices[0].cores: expected int <= 100, got 101"),
    "negative cores": (asg('{"name":"c","slices":[{"uuid":"a","memoryMiB":1,"cores":-1}]}'),
                       "$.containers[0].slices[0].cores: expected int >= 0, got -1"),
    "memory of zero": (asg('{"name":"c","slices":[{"uuid":"a","memoryMiB":0,"cores":1}]}'),
                       "$.containers[0].slices[0].memoryMiB: expected int >= 1, got 0"),
    "an unknown container kind": (asg(f'{{"name":"c","kind":"job","slices":[{SLICE_OK}]}}'),
                                  "$.containers[0].kind: expected one of init, sidecar, app, "
                                  'got "job"'),
    "a container with no slices": (asg('{"name":"c","slices":[]}'),
                                   "$.containers[0].slices: expected array of length >= 1"),
    "a container without a name": (asg(f'{{"slices":[{SLICE_OK}]}}'),
                                   "$.containers[0].name: required field is missing"),
    "two containers with one name": (
        asg(f'{{"name":"c","slices":[{SLICE_OK}]}},{{"name":"c","slices":[{SLICE_OK}]}}'),
        '$.containers[1].name: duplicate container "c" already at $.containers[0].name'),
    "one GPU twice in one container": (
        asg(f'{{"name":"c","slices":[{SLICE_OK},{SLICE_OK}]}}'),
        '$.containers[0].slices[1].uuid: a second slice of GPU "GPU-1" already at '
        "$.containers[0].slices[0].uuid"),
}


@pytest.mark.parametrize("text, detail", BAD_ASSIGNMENTS.values(), ids=BAD_ASSIGNMENTS.keys())
def test_a_bad_assignment_is_a_codec_error_naming_annotation_and_field_path(text, detail):
    with pytest.raises(CodecError) as err:
        decode_assignment(text)
    message = str(err.value)
    assert message.startswith(f"{ASSIGNMENT_ANNOTATION}: {detail}"), message
    assert message.count("; ") >= 1, f"ends with what to do: {message}"


def test_one_gpu_in_two_containers_of_a_pod_is_fine():
    text = asg(f'{{"name":"a","slices":[{SLICE_OK}]}},{{"name":"b","slices":[{SLICE_OK}]}}')
    assert len(decode_assignment(text).slices()) == 2, "two containers may share one GPU"


@pytest.mark.parametrize("text", [b"{}", None, 5])
def test_decoding_something_other_than_text_is_a_codec_error(text):
    with pytest.raises(CodecError, match=r"^gpuslice.io/assignment: \$: expected JSON text"):
        decode_assignment(text)  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["\ud800", "[" * 100_000,
                                  inv(f'{{{GPU_OK},"extra":' + "[" * 50_000 + "]" * 50_000 + "}")])
def test_unreadable_or_absurdly_nested_text_is_a_codec_error_not_a_crash(text):
    with pytest.raises(CodecError):
        decode_inventory(text, node="n")


def test_encode_refuses_a_value_that_could_not_be_read_back():
    bad = model.PodAssignment(node="n", containers=(model.ContainerAssignment(
        container="c", slices=(model.GPUSlice(uuid="a", memory_mib=1, cores=150),)),))
    with pytest.raises(CodecError) as err:
        encode_assignment(bad)
    assert str(err.value) == (
        "gpuslice.io/assignment: refusing to write an invalid value: "
        "$.containers[0].slices[0].cores: expected int <= 100, got 150; fix the code that built it"
    ), "the writer learns at once, the reader never sees it"


def test_encode_refuses_duplicate_gpus_in_an_inventory():
    gpu = INVENTORY.gpus[0]
    with pytest.raises(CodecError, match=r"refusing to write.*duplicate GPU"):
        encode_inventory(model.NodeInventory(node="n", gpus=(gpu, gpu)))


def test_encode_refuses_values_of_the_wrong_python_type():
    bad = model.NodeInventory(node="n", gpus=(model.GPU(uuid="a", model="m", memory_mib=object()),))  # type: ignore[arg-type]
    with pytest.raises(CodecError, match="refusing to write an unencodable value"):
        encode_inventory(bad)

"""The cluster file: expansion into nodes, and every way a bad file is reported."""

from __future__ import annotations

import copy
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuslice.errors import InputFileError
from gpuslice.simulate.cluster import load_cluster, parse_cluster

ROOT = Path(__file__).resolve().parents[3]

GOOD: dict[str, Any] = {
    "version": 1,
    "nodeGroups": [
        {"name": "h100", "count": 2,
         "gpu": {"model": "NVIDIA H100 80GB HBM3", "count": 8, "memoryMiB": 81559, "smCount": 132,
                 "splitCount": 10, "numaNodes": 2, "nvlink": True}},
        {"name": "l4", "count": 3, "gpu": {"model": "NVIDIA L4", "count": 2, "memoryMiB": 23034}},
    ],
}


def test_the_bundled_cluster_has_50_nodes_mixing_80_48_and_24_gb_gpus() -> None:
    nodes = load_cluster(ROOT / "examples" / "cluster.yaml")
    assert len(nodes) == 50, "the brief asks for a 50-node example cluster"
    per_model = Counter(g.model for n in nodes for g in n.gpus)
    sizes = {g.memory_mib // 1000 for n in nodes for g in n.gpus}
    assert sizes == {81, 46, 23}, f"80, 48 and 24 GB GPUs expected, got {per_model}"
    assert {len(n.gpus) for n in nodes} == {8, 4, 2}, "8/4/2 GPUs per node by model"


def test_groups_expand_into_numbered_nodes_in_file_order() -> None:
    nodes = parse_cluster(GOOD)
    assert [n.node for n in nodes] == ["h100-000", "h100-001", "l4-000", "l4-001", "l4-002"]
    assert [g.index for g in nodes[0].gpus] == list(range(8)), "GPUs in NVML index order"


def test_numa_nodes_split_the_gpus_evenly_in_index_order() -> None:
    gpus = parse_cluster(GOOD)[0].gpus
    assert [g.numa_node for g in gpus] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_numa_is_unknown_when_the_file_does_not_say() -> None:
    assert {g.numa_node for g in parse_cluster(GOOD)[2].gpus} == {None}


def test_nvlink_makes_every_gpu_of_a_node_a_peer_of_all_the_others() -> None:
    node = parse_cluster(GOOD)[0]
    uuids = {g.uuid for g in node.gpus}
    for g in node.gpus:
        assert set(g.nvlink_peers) == uuids - {g.uuid}, "all-to-all NVLink, never itself"
    assert all(g.nvlink_peers == () for g in parse_cluster(GOOD)[2].gpus), "nvlink defaults off"


def test_gpu_uuids_are_unique_and_the_same_on_every_load() -> None:
    a, b = parse_cluster(GOOD), parse_cluster(copy.deepcopy(GOOD))
    uuids = [g.uuid for n in a for g in n.gpus]
    assert len(set(uuids)) == len(uuids), "a UUID names one GPU"
    assert a == b, "traces filter on UUIDs, so they must not change between runs"
    assert all(u.startswith("GPU-") for u in uuids), "NVML's UUID shape"


def test_defaults_fill_sm_count_split_count_and_health() -> None:
    g = parse_cluster(GOOD)[2].gpus[0]
    assert (g.sm_count, g.split_count, g.healthy) == (0, 10, True)


def _set(path: str, value: Any) -> Any:
    def change(doc: dict[str, Any]) -> None:
        *parents, last = path.split("/")
        target: Any = doc
        for p in parents:
            target = target[int(p)] if p.isdigit() else target[p]
        if value is _DELETE:
            del target[last]
        elif last.isdigit():
            target[int(last)] = value
        else:
            target[last] = value
    return change


_DELETE = object()

BAD = [
    ("memory of zero", _set("nodeGroups/1/gpu/memoryMiB", 0),
     "nodeGroups[1].gpu.memoryMiB: expected int >= 1", "in MiB"),
    ("memory as a string with units", _set("nodeGroups/1/gpu/memoryMiB", "80G"),
     "nodeGroups[1].gpu.memoryMiB: expected int, got str", "in MiB"),
    ("negative memory", _set("nodeGroups/0/gpu/memoryMiB", -1),
     "nodeGroups[0].gpu.memoryMiB: expected int >= 1", "in MiB"),
    ("node count of zero", _set("nodeGroups/0/count", 0),
     "nodeGroups[0].count: expected int >= 1", "whole number"),
    ("GPU count of zero", _set("nodeGroups/0/gpu/count", 0),
     "nodeGroups[0].gpu.count: expected int >= 1", "whole number"),
    ("fractional node count", _set("nodeGroups/0/count", 1.5),
     "nodeGroups[0].count: expected int, got float", "whole number"),
    ("a misspelt key", _set("nodeGroups/0/gpu/nvlnk", True),
     "nodeGroups[0].gpu.nvlnk: unknown key", "known keys here: model, count, memoryMiB"),
    ("an unknown top-level key", _set("nodes", []), "nodes: unknown key", "version, nodeGroups"),
    ("a missing model", _set("nodeGroups/0/gpu/model", _DELETE),
     "nodeGroups[0].gpu.model: missing (required)", "NVML product name"),
    ("nvlink as a word", _set("nodeGroups/0/gpu/nvlink", "yes"),
     "nodeGroups[0].gpu.nvlink: expected bool, got str", "true"),
    ("a second version", _set("version", 2), "version: unsupported version 2", "version: 1"),
    ("no node groups", _set("nodeGroups", []), "nodeGroups: expected array of length >= 1",
     "list node groups"),
    ("node groups as a mapping", _set("nodeGroups", {}), "nodeGroups: expected array, got object",
     "list node groups"),
    ("an upper-case group name", _set("nodeGroups/0/name", "H100"),
     "nodeGroups[0].name: 'H100' is not a lower-case DNS label", "lower-case name"),
    ("the same group name twice", _set("nodeGroups/1/name", "h100"),
     "nodeGroups[1].name: duplicate group name 'h100'", "lower-case name"),
    ("more NUMA nodes than GPUs", _set("nodeGroups/0/gpu/numaNodes", 9),
     "nodeGroups[0].gpu.numaNodes: 9 NUMA nodes for 8 GPUs", "1..GPU count"),
    ("a blank model", _set("nodeGroups/0/gpu/model", "  "),
     "nodeGroups[0].gpu.model: empty model name", "NVML product name"),
    ("split count of zero", _set("nodeGroups/0/gpu/splitCount", 0),
     "nodeGroups[0].gpu.splitCount: expected int >= 1", "most slices"),
]


@pytest.mark.parametrize(("change", "where", "fix"), [b[1:] for b in BAD],
                         ids=[b[0] for b in BAD])
def test_a_bad_cluster_file_names_the_file_the_entry_and_the_fix(change: Any, where: str,
                                                                  fix: str) -> None:
    doc = copy.deepcopy(GOOD)
    change(doc)
    with pytest.raises(InputFileError) as err:
        parse_cluster(doc, file="c.yaml")
    text = str(err.value)
    assert text.startswith(f"c.yaml: {where}"), f"file and entry first: {text}"
    assert fix in text, f"the message should say how to fix it: {text}"


@pytest.mark.parametrize(("content", "expected"), [
    ("", "c.yaml: expected a mapping with version and nodeGroups, got an empty file"),
    ("- 1\n- 2\n", "c.yaml: expected a mapping with version and nodeGroups, got list"),
    ("version: 1\nnodeGroups: [\n", "c.yaml:3: not valid YAML"),
], ids=["an empty file", "a list instead of a mapping", "broken YAML syntax"])
def test_a_file_that_is_not_a_cluster_document_is_rejected(tmp_path: Path, content: str,
                                                            expected: str) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(content)
    with pytest.raises(InputFileError) as err:
        load_cluster(f)
    assert str(err.value).replace(str(tmp_path) + "/", "").startswith(expected), str(err.value)


def test_a_missing_cluster_file_says_to_check_the_path(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match=r"nope\.yaml: cannot read the cluster file"):
        load_cluster(tmp_path / "nope.yaml")


groups = st.lists(
    st.tuples(st.integers(1, 4), st.integers(1, 8), st.integers(1, 200_000),
              st.one_of(st.none(), st.integers(1, 8)), st.booleans()),
    min_size=1, max_size=4)


@settings(max_examples=50, deadline=None)
@given(groups)
def test_any_valid_file_expands_to_the_nodes_and_gpus_it_declares(spec: list[Any]) -> None:
    doc = {"version": 1, "nodeGroups": [
        {"name": f"g{i}", "count": count,
         "gpu": {"model": "M", "count": gpus, "memoryMiB": mem, "nvlink": nvlink,
                 **({} if numa is None else {"numaNodes": min(numa, gpus)})}}
        for i, (count, gpus, mem, numa, nvlink) in enumerate(spec)]}
    nodes = parse_cluster(doc)
    assert len(nodes) == sum(s[0] for s in spec), "one node per count"
    for inv in nodes:
        group = spec[int(inv.node[1:].split("-")[0])]
        assert len(inv.gpus) == group[1]
        if group[3] is not None:
            sizes = Counter(g.numa_node for g in inv.gpus).values()
            assert max(sizes) - min(sizes) <= 1, "NUMA nodes split the GPUs evenly"
            assert len(sizes) == min(group[3], group[1]), "every NUMA node gets a GPU"

"""The simulator with MIG: cluster-file MIG groups, --gpu-mode, usage checked against the
allocator event by event, MIG-aware fragmentation, and the bundled comparison."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuslice.allocator import parse_policy
from gpuslice.cli import main
from gpuslice.errors import InputFileError
from gpuslice.mig import CATALOG, MigGPU, MigSlice
from gpuslice.model import GPU, ContainerAssignment, GPUSlice, PodAssignment
from gpuslice.simulate.cluster import parse_cluster
from gpuslice.simulate.engine import replay
from gpuslice.simulate.metrics import UsageTracker
from gpuslice.simulate.modes import apply_mode
from gpuslice.simulate.trace import load_trace

ROOT = Path(__file__).resolve().parents[3]
CLUSTER = ROOT / "examples" / "mig" / "cluster.yaml"
TRACE = ROOT / "examples" / "mig" / "trace.jsonl"
H100 = "NVIDIA H100 80GB HBM3"


def group(**gpu: object) -> dict:
    return {"version": 1, "nodeGroups": [{"name": "h", "count": 1, "gpu": {
        "model": H100, "count": 2, "memoryMiB": 81559, **gpu}}]}


def test_a_mig_group_gets_its_profiles():
    (node,) = parse_cluster(group(mode="mig", migProfiles=["3g.40gb", "7g.80gb"]))
    assert [p.name for p in node.gpus[0].mig.profiles] == ["3g.40gb", "7g.80gb"]
    (shim,) = parse_cluster(group())
    assert shim.gpus[0].mig is None


@pytest.mark.parametrize(("gpu", "message"), [
    ({"mode": "mig", "model": "NVIDIA L4", "memoryMiB": 23034},
     "nodeGroups[0].gpu.mode: no MIG profile table for 'NVIDIA L4'"),
    ({"mode": "mig", "migProfiles": ["2g.10gb"]},
     "nodeGroups[0].gpu.migProfiles: 2g.10gb: not a profile of NVIDIA H100 80GB HBM3"),
    ({"migProfiles": ["1g.10gb"]}, "migProfiles: given for a group in shim mode"),
    ({"mode": "mps"}, "nodeGroups[0].gpu.mode"),
])
def test_bad_mig_groups_are_refused_naming_the_entry(gpu, message):
    with pytest.raises(InputFileError) as err:
        parse_cluster(group(**gpu))
    assert message in str(err.value)


def test_gpu_modes_turn_nodes_and_pods_and_keep_job_order():
    nodes = parse_cluster(group())
    jobs = load_trace(str(TRACE))[:5]
    mig_nodes, mig_jobs = apply_mode(nodes, jobs, "mig")
    assert all(g.mig is not None for g in mig_nodes[0].gpus)
    assert [j.index for j in mig_jobs] == [j.index for j in jobs] and all(
        j.pod.mig for j in mig_jobs)
    shim_nodes, shim_jobs = apply_mode(mig_nodes, mig_jobs, "shim")
    assert shim_nodes == nodes and [j.pod for j in shim_jobs] == [j.pod for j in jobs]


def test_a_mig_replay_matches_the_allocator_at_every_event():
    nodes, jobs = apply_mode(parse_cluster(group()), load_trace(str(TRACE))[:150], "mig")
    r = replay(nodes, jobs, parse_policy("binpack"), check=True)
    assert r.metrics.placed == 150 and 0 < r.metrics.fragmentation < 1


def test_mig_fragmentation_counts_free_memory_no_placement_can_use():
    gpu = GPU(uuid="g", model=H100, memory_mib=81559, mig=MigGPU(profiles=CATALOG["H100-80GB"]))
    t = UsageTracker([gpu], threshold_mib=30000)  # the median job gets a 3g.40gb
    assert t.stranded_mib == 0

    def a(start: int, profile: str = "1g.10gb") -> PodAssignment:
        return PodAssignment(node="n", containers=(ContainerAssignment(container="c", slices=(
            GPUSlice(uuid="g", memory_mib=9059, cores=14, mig=MigSlice(profile=profile,
                                                                      start=start)),)),))
    t.hold("p0", a(1))  # slices 0-3 can no longer hold a 3g; 4-7 still can
    assert t.stranded_mib == 0
    t.hold("p1", a(5))  # now neither half can: all free memory is stranded
    assert t.stranded_mib == 81559 - 2 * 9059
    t.drop("p1")
    assert t.stranded_mib == 0


def test_the_bundled_example_compares_shim_and_mig_side_by_side():
    out = CliRunner().invoke(main, ["simulate", "--cluster", str(CLUSTER), "--trace", str(TRACE),
                                    "--gpu-mode", "both", "--policy", "binpack", "--json",
                                    "--no-progress"])
    assert out.exit_code == 0, out.output
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["policy"] for r in rows] == ["binpack/binpack shim", "binpack/binpack mig"]
    assert all(r["placed"] == 600 for r in rows)
    shim, mig = rows
    assert mig["mean_memory_utilization"] > shim["mean_memory_utilization"], (
        "a MIG instance holds its whole profile: rounding up shows as memory taken")


def test_a_mig_pod_with_an_init_container_is_charged_both_instances(tmp_path):
    init = {"arrival": 0, "duration": 10, "pod": {"metadata": {"name": "p"}, "spec": {
        "initContainers": [{"name": "warm", "resources": {"limits": {
            "volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "8000"}}}],
        "containers": [{"name": "main", "resources": {"limits": {
            "volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "30000"}}}]}}}
    path = tmp_path / "trace.jsonl"
    path.write_text(json.dumps(init) + "\n")
    nodes, jobs = apply_mode(parse_cluster(group(count=1)), load_trace(str(path)), "mig")
    r = replay(nodes, jobs, parse_policy("binpack"), check=True)  # tracker == allocator
    assert r.metrics.placed == 1
    assert r.metrics.peak_memory_utilization == round((9059 + 37670) / 81559, 6)

"""A burst of GPU pods of mixed shapes onto the one REAL kubelet node: every pod runs, no GPU is
over-committed, every container's devices (the kubelet's checkpoint) lie on its assigned GPUs
with the Allocate answer and its region naming them (for interchangeable pods the kubelet
admitted out of bind order: once the agent has swapped their assignments), and the agent
reports no mismatch. The timings (how long the extender's in-flight rule holds pods, bind ->
Running through the kubelet's admission and the agent's Allocate) are reported
(docs/benchmarks.md, "Burst onto one real kubelet"; benchmarks/real_node_burst.py runs the same
standalone). GPUSLICE_REAL_NODE_BURST=N changes the number of pods (default 30)."""

from __future__ import annotations

import asyncio
import os

from kubelet import real


def test_a_burst_of_mixed_shapes_runs_on_one_real_kubelet_without_overcommit(tier):
    count = int(os.environ.get("GPUSLICE_REAL_NODE_BURST", "30"))
    got = asyncio.run(real.burst(tier, count=count))
    real.report("burst", got)
    assert got["failed"] == {}, got
    assert got["running"] == count, got
    assert got["overcommitted_gpus"] == 0, got
    assert got["devices_not_on_assigned_gpus"] == [], got
    assert got["agent_mismatches"] == 0, got

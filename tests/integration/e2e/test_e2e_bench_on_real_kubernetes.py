"""benchmarks/e2e_bench.py on the real control plane (etcd, kube-apiserver,
kube-controller-manager and kube-scheduler of tools/kube/build.sh): GPU pods of every dialect go
through kube-apiserver's call to the webhook, kube-scheduler's calls to the extender and the
extender's binds; the extender is SIGKILLed halfway (--restart) and its successor finishes the
burst with no GPU over-committed. The comparison's plain run (the stock kube-scheduler alone)
binds every pod too. The real rates are measured at full size (docs/benchmarks.md); here the
sizes are small, so CI stays quick."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "e2e_bench.py"
pytestmark = pytest.mark.slow


def bench(*args: str) -> dict:
    done = subprocess.run([sys.executable, str(BENCH), "--json", "--timeout", "120", *args],
                          capture_output=True, text=True, timeout=280, env=os.environ)
    assert done.stdout.strip(), f"e2e_bench printed nothing (exit {done.returncode}):\n" \
                                f"{done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_burst_survives_an_extender_crash_with_nothing_over_committed(kube_control_plane):
    out = bench("--nodes", "10", "--pods", "300", "--restart")
    assert out["api_server"] == kube_control_plane.version
    assert out["scheduler"].startswith("kube-scheduler v1.36")
    assert out["webhook"].startswith("gpuslice webhook")
    assert out["restarted_extender"] is True
    assert out["bound"] == 300
    # the restart's timeline: every bind in one of the seconds, the kill within the run
    restart = out["restart"]
    assert sum(restart["binds_per_s"]) == 300
    assert 0 < restart["killed_at_s"] <= out["seconds"] and restart["ready_after_s"] > 0
    assert 0 <= restart["longest_pause_s"] <= out["seconds"]
    assert out["overcommitted_gpus"] == 0 and out["bound_without_assignment"] == 0
    # every process's CPU is reported, the real control plane's included
    assert {"kube-apiserver", "etcd", "kube-scheduler", "kube-controller-manager", "extender",
            "webhook"} <= set(out["cpu_ms_per_pod"])
    assert out["api_requests_per_pod"]["POST pods binding"] >= 0.99
    # each node's first kubelet status ends the pod's flight: no allocated mark is needed
    assert out["node_write_failures"] == [] and "PATCH pods" not in out["api_requests_per_pod"]


def test_the_comparison_runs_plain_and_gpuslice_side_by_side(kube_control_plane):
    out = bench("--compare", "--nodes", "5", "--pods", "100")
    assert out["bound"] == 100 and out["overcommitted_gpus"] == 0
    plain, gpuslice = out["rounds"][0]["plain"], out["rounds"][0]["gpuslice"]
    assert plain["mode"] == "plain" and plain["extender"].startswith("not used")
    assert gpuslice["mode"] == "gpuslice" and gpuslice["bound_without_assignment"] == 0
    assert out["ratio_median"] == round(gpuslice["pods_per_s"] / plain["pods_per_s"], 3)


def test_the_pods_of_a_gang_are_bound_to_one_node_where_spread_would_split_them(
        kube_control_plane):
    """Jobs of 4 pods under the spread policy: apart unless they name a gpuslice.io/gang, with
    the real kube-scheduler pipelining one pod's filter before the last one's bind."""
    common = ("--nodes", "4", "--pods", "32", "--group", "4", "--policy", "spread")
    apart, together = bench(*common), bench(*common, "--gang")
    assert apart["gangs"] is False and apart["groups_split"] > 0, "spread splits a plain job"
    assert together["gangs"] is True and together["bound"] == 32
    assert together["groups_split"] == 0 and together["overcommitted_gpus"] == 0

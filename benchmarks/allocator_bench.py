"""Time the allocator's filter+prioritize over a large synthetic cluster (DESIGN §6 target:
5,000 nodes x 8 GPUs, 40,000 slices, p99 <= 10 ms per call).

Builds a seeded random cluster (node models mixed 80/48/24 GB, one model per node), commits
`--slices` random single-GPU slices through ClusterState.assign, then times
filter+prioritize of several pod shapes (small, large-memory, multi-GPU, typed, exclusive,
percent, multi-container) over all nodes with time.perf_counter_ns.
One untimed warm-up call per shape comes first (the first filter after the node set changes
builds the NodeTable, O(nodes x GPUs); reported as first_call_ms, as is the table build).
The state keeps every-node results and scores per pod shape (allocator/reuse.py), and the
same pods are asked again with nothing changed, so the rounds time that kept path (scores from
FilterResult.scores, as the extender reads them); `--no-reuse` decides every node on every call.
`--naive N` also times N rounds of a per-GPU scan of every node (fit.place / explain) for the
ratio. Prints a table, or with --json one JSON object.
Usage: python benchmarks/allocator_bench.py [--json] [--nodes 5000 --gpus 8 --slices 40000
       --repeat 30 --policy binpack --naive 2 --no-reuse]
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import random
import statistics
import sys
import time

from gpuslice.allocator import ClusterState, parse_policy
from gpuslice.allocator.fit import PodPlan, place
from gpuslice.model import (
    GPU,
    ContainerAssignment,
    ContainerKind,
    GPUFilter,
    GPUSlice,
    NodeInventory,
    PodAssignment,
    PodRequest,
    SliceRequest,
)

TARGET = ("small", "large-memory", "multi-gpu", "typed", "exclusive", "percent",
          "multi-container")
"""Shapes behind the top-level p50/p99: all of them (multi-container pods are decided from the
node summaries too). `p99_single_container_ms` keeps the earlier single-container figure."""
MODELS = (("NVIDIA H100 80GB HBM3", 81920), ("NVIDIA L40S", 49152), ("NVIDIA A10", 24576))


def build(nodes: int, gpus: int, slices: int, seed: int,
          reuse: bool = True) -> tuple[ClusterState, float]:
    rng = random.Random(seed)
    st = ClusterState(reuse=reuse)
    invs = []
    for n in range(nodes):
        model, mem = MODELS[n % len(MODELS)]
        name = f"node-{n:05d}"
        uu = [f"GPU-{n:05d}-{i}" for i in range(gpus)]
        nvl = model.startswith("NVIDIA H100")
        invs.append(NodeInventory(node=name, gpus=tuple(
            GPU(uuid=uu[i], model=model, memory_mib=mem, index=i, numa_node=i * 2 // gpus,
                nvlink_peers=tuple(u for u in uu if u != uu[i]) if nvl else (),
                healthy=rng.random() > 0.002)
            for i in range(gpus))))
        st.add_node(invs[-1])
    t0 = time.perf_counter()
    free = {(n, i): [invs[n].gpus[i].memory_mib, 100, 0] for n in range(nodes) for i in range(gpus)}
    placed = 0
    while placed < slices:
        n, i = rng.randrange(nodes), rng.randrange(gpus)
        f = free[n, i]
        excl = rng.random() < 0.01
        mem = rng.choice((1024, 2048, 4096, 8192, 12288, 16384, 24576))
        cores = 100 if excl else rng.choice((0, 0, 10, 20, 30, 50))
        if mem > f[0] or cores > f[1] or f[2] >= 10 or (excl and f[2]) or f[1] < 0:
            continue
        f[0] -= mem
        f[1] -= cores
        f[2] += 1
        if excl:
            f[1] = -1  # held: nothing else goes here
        g = invs[n].gpus[i]
        st.assign(f"bench/p{placed}", PodAssignment(node=invs[n].node, containers=(
            ContainerAssignment(container="main", slices=(
                GPUSlice(uuid=g.uuid, memory_mib=mem, cores=cores),)),)))
        placed += 1
    return st, time.perf_counter() - t0


def pods() -> dict[str, PodRequest]:
    def pod(name: str, *slices: SliceRequest, flt: GPUFilter | None = None) -> PodRequest:
        return PodRequest(namespace="bench", name=name, slices=slices, filter=flt or GPUFilter())

    return {
        "small": pod("small", SliceRequest(container="c", memory_mib=2048, cores=10)),
        "large-memory": pod("large", SliceRequest(container="c", memory_mib=40960, cores=20)),
        "multi-gpu": pod("multi", SliceRequest(container="c", count=4, memory_mib=10240,
                                               cores=20)),
        "typed": pod("typed", SliceRequest(container="c", memory_mib=8192),
                     flt=GPUFilter(use_types=("H100",))),
        "exclusive": pod("excl", SliceRequest(container="c", memory_mib=16384, cores=100)),
        "percent": pod("pct", SliceRequest(container="c", memory_percent=25, cores=10)),
        "multi-container": pod(
            "mc", SliceRequest(container="init", kind=ContainerKind.INIT, memory_mib=8192),
            SliceRequest(container="side", kind=ContainerKind.SIDECAR, memory_mib=1024),
            SliceRequest(container="app", count=2, memory_mib=16384, cores=30)),
    }


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--slices", type=int, default=40000)
    ap.add_argument("--repeat", type=int, default=30, help="rounds over all pod shapes")
    ap.add_argument("--policy", default="binpack")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--naive", type=int, default=0, help="rounds of the per-GPU scan baseline")
    ap.add_argument("--no-reuse", action="store_true",
                    help="decide every node on every call (nothing kept per pod shape)")
    ap.add_argument("--no-gc-freeze", action="store_true",
                    help="leave the built cluster to the cyclic GC (default: gc.freeze() it)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.slices > a.nodes * a.gpus * 6:
        ap.error(f"--slices={a.slices}: too many for {a.nodes}x{a.gpus} GPUs; lower it")
    policy = parse_policy(a.policy)
    st, build_s = build(a.nodes, a.gpus, a.slices, a.seed, reuse=not a.no_reuse)
    if not a.no_gc_freeze:  # what a long-running extender does after its initial list
        gc.collect()
        gc.freeze()
    shapes = pods()
    times: dict[str, list[float]] = {k: [] for k in shapes}
    fits: dict[str, int] = {}
    first: dict[str, float] = {}

    def call(pod: PodRequest) -> int:
        """filter + prioritize as the extender does them; the number of fitting nodes."""
        fr = st.filter(pod, policy)
        if (fr.scores() if fr.scores is not None else None) is None:
            st.prioritize(pod, policy, fr.fits)
        return len(fr.fits)  # freeing the result is part of the call

    for k, pod in shapes.items():  # warm-up: what a long-running extender has already done
        t0 = time.perf_counter_ns()
        call(pod)
        first[k] = (time.perf_counter_ns() - t0) / 1e6
    for _ in range(a.repeat):
        for k, pod in shapes.items():
            t0 = time.perf_counter_ns()
            fits[k] = call(pod)
            times[k].append((time.perf_counter_ns() - t0) / 1e6)
    naive: dict[str, list[float]] = {k: [] for k in shapes}
    snaps = [st.snapshot(n) for n in st.nodes()]
    for _ in range(a.naive):
        for k, pod in shapes.items():
            t0 = time.perf_counter_ns()
            plan = PodPlan(pod)
            for s in snaps:
                if place(s, plan, policy.gpu) is None:
                    plan.explain(s)
            naive[k].append((time.perf_counter_ns() - t0) / 1e6)
    every = [t for k, v in times.items() if k in TARGET for t in v]
    all_calls = [t for v in times.values() for t in v]
    single = [t for k, v in times.items() if k != "multi-container" for t in v]
    out = {
        "nodes": a.nodes, "gpus": a.gpus, "slices": a.slices, "repeats": a.repeat,
        "policy": policy.name, "calls": len(every),
        "p50_ms": round(pct(every, 0.5), 3), "p99_ms": round(pct(every, 0.99), 3),
        "max_ms": round(max(every), 3), "p99_all_shapes_ms": round(pct(all_calls, 0.99), 3),
        "p99_single_container_ms": round(pct(single, 0.99), 3),
        "percentiles_over": list(TARGET), "gc_freeze": not a.no_gc_freeze,
        "reuse": not a.no_reuse,
        "build_assign_s": round(build_s, 2),
        "python": platform.python_version(), "machine": platform.machine(),
        "shapes": {k: {"p50_ms": round(pct(v, 0.5), 3), "p99_ms": round(pct(v, 0.99), 3),
                       "max_ms": round(max(v), 3), "first_call_ms": round(first[k], 3),
                       "fitting_nodes": fits[k],
                       **({"naive_p50_ms": round(pct(naive[k], 0.5), 1)} if naive[k] else {})}
                   for k, v in times.items()},
    }
    if a.json:
        print(json.dumps(out))
        return 0
    print(f"{a.nodes} nodes x {a.gpus} GPUs, {a.slices} slices, policy {policy.name}, "
          f"{a.repeat} rounds, Python {out['python']} (build+assign {build_s:.1f} s)")
    print(f"{'pod shape':<16} {'fit nodes':>9} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
          f"{'1st call':>8}" + (f" {'naive p50':>10}" if a.naive else ""))
    for k, v in out["shapes"].items():
        print(f"{k:<16} {v['fitting_nodes']:>9} {v['p50_ms']:>8.2f} {v['p99_ms']:>8.2f} "
              f"{v['max_ms']:>8.2f} {v['first_call_ms']:>8.2f}"
              + (f" {v['naive_p50_ms']:>10.1f}" if a.naive else ""))
    print(f"{'target shapes':<16} {'':>9} {out['p50_ms']:>8.2f} {out['p99_ms']:>8.2f}"
          f"   (mean {statistics.mean(every):.2f}; gc.freeze {out['gc_freeze']}; "
          f"reuse {out['reuse']})")
    print(f"{'all shapes':<16} {'':>9} {pct(all_calls, 0.5):>8.2f} {pct(all_calls, 0.99):>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

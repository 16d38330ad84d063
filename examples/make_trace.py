"""Make the bundled trace for `gpuslice simulate`, seeded: the same command gives the same bytes.

    python examples/make_trace.py --seed 7            # writes examples/trace.jsonl (5,000 jobs)

Jobs mix every request dialect gpuslice accepts (HAMi incl. percent memory, exclusive cores,
priority, GPU type/UUID filters, init and sidecar containers; Volcano; GPU Manager), single- and
multi-GPU jobs, Poisson arrivals and log-normal durations, plus a few jobs no GPU in the cluster
can hold (they show up as "never placed"). GPU UUIDs for the UUID filters come from the cluster
file, read with the simulator's own loader. Only the standard library and gpuslice are used.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuslice.simulate.cluster import load_cluster

HERE = Path(__file__).resolve().parent
IMAGES = ("nvcr.io/nvidia/pytorch:25.01-py3", "vllm/vllm-openai:v0.8.4",
          "nvcr.io/nvidia/tritonserver:25.01-py3")
NAMESPACES = ("team-a", "team-b", "research", "default")

Pod = dict[str, Any]


def container(name: str, limits: dict[str, Any], image: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": image,
            "resources": {"limits": {k: str(v) for k, v in limits.items()}}, **extra}


def pod(name: str, ns: str, containers: list[dict[str, Any]], *,
        annotations: dict[str, str] | None = None,
        init: list[dict[str, Any]] | None = None) -> Pod:
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if annotations:
        meta["annotations"] = annotations
    spec: dict[str, Any] = {"containers": containers}
    if init:
        spec["initContainers"] = init
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


class Gen:
    """One seeded generator; each method returns (pod, mean-duration factor)."""

    def __init__(self, rng: random.Random, uuids: list[str]) -> None:
        self.rng = rng
        self.uuids = uuids

    def hami_small(self, name: str, ns: str) -> tuple[Pod, float]:
        r = self.rng
        limits: dict[str, Any] = {"nvidia.com/gpu": 1,
                                  "nvidia.com/gpumem": r.choice((2048, 4096, 8192, 12288, 16384)),
                                  "nvidia.com/gpucores": r.choice((10, 20, 25, 30, 50))}
        if r.random() < 0.3:
            limits["nvidia.com/priority"] = 1
        return pod(name, ns, [container("infer", limits, r.choice(IMAGES))]), 1.0

    def hami_percent(self, name: str, ns: str) -> tuple[Pod, float]:
        r = self.rng
        limits = {"nvidia.com/gpu": r.choice((1, 1, 2)),
                  "nvidia.com/gpumem-percentage": r.choice((25, 50, 50, 75)),
                  "nvidia.com/gpucores": r.choice((25, 50))}
        return pod(name, ns, [container("main", limits, r.choice(IMAGES))]), 1.0

    def hami_exclusive(self, name: str, ns: str) -> tuple[Pod, float]:
        r = self.rng
        limits = {"nvidia.com/gpu": r.choice((1, 1, 2)), "nvidia.com/gpucores": 100}
        return pod(name, ns, [container("train", limits, IMAGES[0])]), 1.5

    def hami_typed(self, name: str, ns: str) -> tuple[Pod, float]:
        r = self.rng
        ann = ({"nvidia.com/use-gputype": "H100"} if r.random() < 0.5
               else {"nvidia.com/nouse-gputype": "L4"})
        limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": r.choice((16384, 24576, 32768)),
                  "nvidia.com/gpucores": r.choice((30, 50))}
        return pod(name, ns, [container("main", limits, r.choice(IMAGES))], annotations=ann), 1.0

    def hami_uuid(self, name: str, ns: str) -> tuple[Pod, float]:
        r = self.rng
        if r.random() < 0.5:
            ann = {"nvidia.com/nouse-gpuuuid": ",".join(r.sample(self.uuids, 3))}
        else:
            ann = {"nvidia.com/use-gpuuuid": ",".join(r.sample(self.uuids, 12))}
        limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": r.choice((4096, 8192)),
                  "nvidia.com/gpucores": 20}
        return pod(name, ns, [container("main", limits, r.choice(IMAGES))], annotations=ann), 1.0

    def hami_lifecycle(self, name: str, ns: str) -> tuple[Pod, float]:
        """An init container warms a model cache on the GPU; a sidecar exports GPU metrics."""
        r = self.rng
        mem = r.choice((8192, 12288, 16384))
        init = [container("warm-cache", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 2 * mem,
                                         "nvidia.com/gpucores": 50}, IMAGES[0])]
        if r.random() < 0.5:
            init.append(container("metrics", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1024},
                                  IMAGES[2], restartPolicy="Always"))
        app = container("serve", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": mem,
                                  "nvidia.com/gpucores": 30}, IMAGES[1])
        return pod(name, ns, [app], init=init), 1.0

    def volcano(self, name: str, ns: str) -> tuple[Pod, float]:
        r = self.rng
        limits = {"volcano.sh/vgpu-number": r.choice((1, 1, 1, 2)),
                  "volcano.sh/vgpu-memory": r.choice((4096, 8192, 16384, 20480)),
                  "volcano.sh/vgpu-cores": r.choice((20, 30, 50))}
        return pod(name, ns, [container("worker", limits, r.choice(IMAGES))]), 1.0

    def gpu_manager(self, name: str, ns: str) -> tuple[Pod, float]:
        r = self.rng
        core = r.choice((10, 25, 50, 50, 100, 200))
        gpus = max(1, core // 100)
        per_gpu_units = r.choice((8, 16, 32, 48))  # x 256 MiB: 2, 4, 8, 12 GiB per GPU
        limits = {"tencent.com/vcuda-core": core, "tencent.com/vcuda-memory": per_gpu_units * gpus}
        return pod(name, ns, [container("app", limits, r.choice(IMAGES))]), 1.0

    def training(self, name: str, ns: str) -> tuple[Pod, float]:
        """Multi-GPU training on one node: 2, 4 or 8 H100s (or any GPUs with 40 GB+)."""
        r = self.rng
        n = r.choice((2, 2, 4, 8))
        if r.random() < 0.6:
            limits = {"nvidia.com/gpu": n, "nvidia.com/gpucores": 100}
            ann = {"nvidia.com/use-gputype": "H100"}
        else:
            limits = {"nvidia.com/gpu": n, "nvidia.com/gpumem": r.choice((40960, 61440)),
                      "nvidia.com/gpucores": 60}
            ann = {}
        if r.random() < 0.3:
            ann["gpuslice.io/gpu-policy"] = "topology"
        return pod(name, ns, [container("trainer", limits, IMAGES[0])], annotations=ann), 1.5

    def impossible(self, name: str, ns: str, which: int) -> tuple[Pod, float]:
        """Jobs no node of the bundled cluster can hold, one per cause."""
        limits: dict[str, Any]
        ann: dict[str, str] = {}
        if which == 0:  # more memory than any GPU has
            limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 98304}
        elif which == 1:  # more GPUs than any node has
            limits = {"nvidia.com/gpu": 12, "nvidia.com/gpumem": 8192}
        else:  # a GPU model the cluster does not have
            limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 8192}
            ann = {"nvidia.com/use-gputype": "A100"}
        return pod(name, ns, [container("main", limits, IMAGES[0])], annotations=ann), 1.0


def generate(*, seed: int = 7, jobs: int = 5000, cluster: Path = HERE / "cluster.yaml",
             mean_gap: float = 10.0, median_duration: float = 1800.0, sigma: float = 1.0,
             impossible: int = 6) -> list[dict[str, Any]]:
    """The jobs of the trace, as rows ready to be written one JSON object per line."""
    rng = random.Random(seed)
    nodes = load_cluster(cluster)
    gen = Gen(rng, [g.uuid for inv in nodes for g in inv.gpus])
    kinds: list[tuple[float, str, Callable[[str, str], tuple[Pod, float]]]] = [
        (30, "infer", gen.hami_small), (8, "pct", gen.hami_percent),
        (5, "excl", gen.hami_exclusive), (7, "typed", gen.hami_typed),
        (3, "uuid", gen.hami_uuid), (6, "cached", gen.hami_lifecycle),
        (18, "vc", gen.volcano), (15, "gm", gen.gpu_manager), (4, "train", gen.training),
    ]
    weights = [k[0] for k in kinds]
    # the impossible jobs sit at evenly spread, seed-independent positions
    odd = {(k + 1) * jobs // (impossible + 1): k for k in range(impossible)}
    out = []
    t = 0.0
    mu = math.log(median_duration)
    for i in range(jobs):
        t += rng.expovariate(1.0 / mean_gap)
        ns = rng.choice(NAMESPACES)
        if i in odd:
            spec, factor = gen.impossible(f"too-big-{i:05d}", ns, odd[i] % 3)
        else:
            _, prefix, make = rng.choices(kinds, weights)[0]
            spec, factor = make(f"{prefix}-{i:05d}", ns)
        duration = factor * rng.lognormvariate(mu, sigma)
        out.append({"arrival": round(t, 2), "duration": round(max(duration, 1.0), 1), "pod": spec})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    d = inspect.signature(generate).parameters
    ap.add_argument("--seed", type=int, default=d["seed"].default)
    ap.add_argument("--jobs", type=int, default=d["jobs"].default)
    ap.add_argument("--cluster", type=Path, default=d["cluster"].default)
    ap.add_argument("--out", type=Path, default=HERE / "trace.jsonl")
    ap.add_argument("--mean-gap", type=float, default=d["mean_gap"].default,
                    help="mean seconds between arrivals (Poisson process)")
    ap.add_argument("--median-duration", type=float, default=d["median_duration"].default,
                    help="median job duration in seconds (log-normal)")
    ap.add_argument("--sigma", type=float, default=d["sigma"].default,
                    help="log-normal sigma of durations")
    ap.add_argument("--impossible", type=int, default=d["impossible"].default,
                    help="jobs no GPU of the bundled cluster can hold")
    args = ap.parse_args()
    rows = generate(seed=args.seed, jobs=args.jobs, cluster=args.cluster, mean_gap=args.mean_gap,
                    median_duration=args.median_duration, sigma=args.sigma,
                    impossible=args.impossible)
    args.out.write_text(dumps(rows), encoding="utf-8")
    print(f"wrote {len(rows)} jobs to {args.out}")


def dumps(rows: list[dict[str, Any]]) -> str:
    """JSON lines, compact, in row order."""
    return "".join(json.dumps(row, separators=(",", ":")) + "\n" for row in rows)


if __name__ == "__main__":
    main()

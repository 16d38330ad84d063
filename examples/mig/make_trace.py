"""Writes examples/mig/trace.jsonl: Volcano vGPU pods (one GPU each, memory only), seeded.

Memory requests follow inference-serving sizes (5-70 GB); arrivals are Poisson, durations
exponential; the load keeps 32 H100s busy enough that placement quality shows in wait times.
Run: python3 examples/mig/make_trace.py > examples/mig/trace.jsonl
"""

import json
import random

rng = random.Random(22)
SIZES = [(5000, 25), (10000, 25), (18000, 20), (30000, 15), (40000, 10), (70000, 5)]  # MiB, %
t = 0.0
for i in range(600):
    t += rng.expovariate(1 / 6.0)
    mem = rng.choices([m for m, _ in SIZES], [w for _, w in SIZES])[0]
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": f"vgpu-{i:04d}", "namespace": "team-a"},
           "spec": {"containers": [{"name": "main", "image": "inference:1", "resources": {
               "limits": {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": str(mem)}}}]}}
    print(json.dumps({"arrival": round(t, 2), "duration": round(rng.expovariate(1 / 900.0), 1),
                      "pod": pod}, separators=(",", ":")))

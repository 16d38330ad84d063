"""The `prioritize` verb: a 0..10 score per offered node from the placement policy.

Owns: the prioritize reply (every offered node once, in request order; 0 where the pod does not
fit, which the filter has already refused).
Does not: decide fit (filter.py's Evaluator, whose result for the same pod is reused) or choose
GPUs (bind.py).
Invariants: scores are the allocator's (ClusterState.prioritize: the node policy applied to how
full the node will be with the pod), so prioritize and `gpuslice simulate` agree.
Tests: tests/unit/scheduler/test_prioritize.py
"""

from __future__ import annotations

from gpuslice.scheduler import wire
from gpuslice.scheduler.filter import Evaluator, Verdict

__all__ = ["prioritize_reply"]


def prioritize_reply(ev: Evaluator, v: Verdict, names: list[str]) -> list[wire.HostPriority]:
    # the names offered are usually exactly the filter's fits: score those, skip the subset
    fits = v.fits if len(names) * 2 >= len(v.fits) else {n: v.fits[n] for n in names
                                                          if n in v.fits}
    scores = ev.state.cluster.prioritize(v.pod, ev.policy, fits) if fits else {}
    return list(map(wire.HostPriority, names, map(scores.get, names, [0] * len(names))))

"""The `prioritize` verb: a 0..10 score per offered node from the placement policy.

Owns: the prioritize reply (every offered node once, in request order; 0 where the pod does not
fit, which the filter has already refused).
Does not: decide fit (filter.py's Evaluator, whose result for the same pod version is reused
for up to 2 s, even when other pods were placed in between: the scores are what the filter saw,
and bind checks the chosen node again) or choose GPUs (bind.py).
Invariants: scores are the allocator's (ClusterState.prioritize, or the same scores kept with the
filter's result: the node policy applied to how full the node will be with the pod), so
prioritize and `gpuslice simulate` agree.
Tests: tests/unit/scheduler/test_filter.py, test_app.py, test_kept_answers_properties.py
"""

from __future__ import annotations

from itertools import repeat

from gpuslice.scheduler import wire
from gpuslice.scheduler.filter import Evaluator, Verdict

__all__ = ["prioritize_reply"]


def prioritize_reply(ev: Evaluator, v: Verdict, names: list[str]) -> list[wire.HostPriority]:
    scores = v.scores() if v.scores is not None else None  # kept with the filter's result
    if scores is None:
        fits = v.fits
        if len(names) * 2 < len(fits):  # a few of the fits offered: score only those
            fits = {n: fits[n] for n in names if n in fits}
        scores = ev.state.cluster.prioritize(v.pod, ev.policy, fits) if fits else {}
    elif v.dropped:  # kept scores still score the nodes the in-flight rule refused
        scores = dict(scores)
        for n in v.dropped:
            scores.pop(n, None)
    return list(map(wire.HostPriority, names, map(scores.get, names, repeat(0))))

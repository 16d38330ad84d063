"""The `prioritize` verb: a 0..10 score per offered node from the placement policy.

Owns: the prioritize reply (every offered node once, in request order; 0 where the pod does not
fit, which the filter has already refused); `best_node`, the same scores' choice, which the
filter answers alone (chooseNodeInFilter) for pods without scheduling preferences of their own
(`has_own_preferences`): kube-scheduler then neither scores nor calls prioritize.
Does not: decide fit (filter.py's Evaluator, whose result for the same pod version is reused
for up to 2 s, even when other pods were placed in between: the scores are what the filter saw,
and bind checks the chosen node again) or choose GPUs (bind.py).
Also: a pod that names a `gpuslice.io/gang` goes where its gang's pods are held, or where the
filter last chose for one (its bind may still be on the way), when one of those nodes fits;
where none does and the pod says how many pods the gang has (`gpuslice.io/gang-size`), to a
node that takes all of them still to come (`gang_targets`; in prioritize they score the
maximum, every other node 0): the in-container library couples the compute budgets of a gang's
pods only on one node (docs/compute.md "Ranks of one job"), so ranks on two nodes could stall
each other under a compute limit. While a gang that said its size has pods still to come, other
pods go to the node chosen for it only where nothing else fits (`_kept`; in prioritize it scores
0): a preference, never a refusal, so no pod waits on it.
Invariants: scores are otherwise the allocator's (ClusterState.prioritize, or the same scores
kept with the filter's result: the node policy applied to how full the node will be with the
pod), so prioritize and `gpuslice simulate` agree for pods without a gang.
Tests: tests/unit/scheduler/test_filter.py, test_app.py, test_kept_answers_properties.py
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from itertools import repeat
from typing import Any

from gpuslice import dialects
from gpuslice.scheduler import wire
from gpuslice.scheduler.filter import Evaluator, Verdict
from gpuslice.scheduler.state import gang_key

__all__ = ["best_node", "gang_targets", "has_own_preferences", "prioritize_reply"]

_MAX_SCORE = 10  # kube-scheduler's MaxExtenderPriority
_ROOM_TRIES = 1024  # placements tried for a gang's room per call: ~60 ms on a 2-core VM


def gang_targets(ev: Evaluator, v: Verdict, pod: Mapping[str, Any], names: Collection[str],
                 scores: Mapping[str, int] | None = None) -> Collection[str]:
    """Where the pod's gang wants it among `names`: the nodes holding pods of the gang (none
    without one); where none of those is offered and fits and the gang's size is given, the
    best-scoring fitting node with room for every pod of the gang not yet held, this one
    included. Room is tried in score order for at most _ROOM_TRIES placements (the loop is the
    extender's)."""
    g = gang_key(pod)
    if g is None:
        return ()
    held = ev.state.gang_nodes(*g)
    need = dialects.gang_size_of(pod) - sum(ev.state.gang_held(*g).values())
    offered = set(names)
    if need <= 1 or any(n in v.fits and n in offered for n in held):
        return held
    scores = _scores(ev, v, list(names)) if scores is None else scores
    tries = 0
    for n in sorted((n for n in names if n in v.fits), key=lambda n: -scores.get(n, 0)):
        room = ev.state.cluster.room(v.pod, ev.policy, n, need)
        if room == need:
            return [n]
        tries += room + 1
        if tries >= _ROOM_TRIES:
            break
    return held


def _scores(ev: Evaluator, v: Verdict, names: list[str]) -> Mapping[str, int]:
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
    return scores


def prioritize_reply(ev: Evaluator, v: Verdict, names: list[str],
                     pod: Mapping[str, Any] | None = None) -> list[wire.HostPriority]:
    """The pod's gang_targets that fit score the maximum, and then every other node 0: the
    policy could score another node the maximum too (binpack, the fullest), and a gang split
    over nodes is worth more than any policy difference (its compute limits couple on one
    node only). For other pods, the nodes kept for gangs with pods to come score 0 where the
    pod fits elsewhere (_kept)."""
    scores = _scores(ev, v, names)
    together, kept = _leaning(ev, v, pod, [n for n in names if n in v.fits], scores)
    if together:
        scores = {n: _MAX_SCORE if n in together else 0 for n in scores}
    elif kept:
        scores = {n: 0 if n in kept else s for n, s in scores.items()}
    return list(map(wire.HostPriority, names, map(scores.get, names, repeat(0))))


def _leaning(ev: Evaluator, v: Verdict, pod: Mapping[str, Any] | None, fitting: list[str],
             scores: Mapping[str, int]) -> tuple[set[str], set[str]]:
    """Among `fitting` (offered nodes that fit): the pod's gang_targets, else the nodes it keeps
    off (_kept)."""
    if pod is None:
        return set(), set()
    together = set(gang_targets(ev, v, pod, fitting, scores)).intersection(fitting)
    return together, set() if together else _kept(ev, pod, fitting)


def _kept(ev: Evaluator, pod: Mapping[str, Any], fitting: Collection[str]) -> set[str]:
    """The nodes of `fitting` kept for other gangs' pods still to come (state.kept_for_gangs),
    if the pod fits elsewhere too."""
    kept = ev.state.kept_for_gangs(but=gang_key(pod))
    if not kept:
        return kept
    kept.intersection_update(fitting)
    return kept if len(kept) < len(fitting) else set()


def best_node(ev: Evaluator, v: Verdict, fitting: list[str],
              pod: Mapping[str, Any] | None = None) -> str:
    """The fitting node prioritize would score highest, among the pod's gang_targets where any
    fits (and then remembered as the gang's choice), else away from the nodes kept for other
    gangs where it can; the first in `fitting` among equals (kube-scheduler offers nodes from
    a rotating start, so equals are not always the same)."""
    scores = _scores(ev, v, fitting)
    together, kept = _leaning(ev, v, pod, fitting, scores)
    best = max([n for n in fitting if n in together]
               or [n for n in fitting if n not in kept], key=lambda n: scores.get(n, 0))
    if pod is not None and (g := gang_key(pod)):
        ev.state.gang_chosen(*g, best, dialects.gang_size_of(pod))
    return best


def has_own_preferences(pod: Mapping[str, Any]) -> bool:
    """Whether kube-scheduler's scoring has something of the pod's own to weigh: preferred node
    or pod (anti-)affinity, or a topology spread constraint it may break (ScheduleAnyway)."""
    spec = pod.get("spec") or {}
    affinity = spec.get("affinity") or {}
    if any((affinity.get(kind) or {}).get("preferredDuringSchedulingIgnoredDuringExecution")
           for kind in ("nodeAffinity", "podAffinity", "podAntiAffinity")):
        return True
    return any(c.get("whenUnsatisfiable") == "ScheduleAnyway"
               for c in spec.get("topologySpreadConstraints") or ())

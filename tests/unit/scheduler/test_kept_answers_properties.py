"""Hypothesis: the extender's kept answers (results per pod shape, the in-flight rule per node,
scores carried from filter to prioritize) reply exactly as deciding everything afresh.

Two ExtenderStates see the same random events (pods bound and left in flight, the agent
answering, pods deleted); one keeps results per shape and is asked through one long-lived
Evaluator, the other decides every node on every call (`reuse=False`) through a new Evaluator
each time. Every filter and prioritize reply, for all nodes or some (an unknown one among them
at times), must be identical.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuslice import handoff
from gpuslice.allocator import ClusterState, parse_policy
from gpuslice.scheduler import wire
from gpuslice.scheduler.filter import Evaluator, filter_reply
from gpuslice.scheduler.prioritize import prioritize_reply
from gpuslice.scheduler.state import ExtenderState

from .objects import Clock, assigned, node, pod

EXAMPLES = int(os.environ.get("GPUSLICE_HYPOTHESIS_EXAMPLES", "120"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SHAPES = [(1024, 0, 1), (4096, 30, 1), (6144, 0, 2), (1024, 30, 2)]  # few: asked again often
STEPS = ("ask", "bind", "bind", "allocate", "delete", "again")


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[dict], str, list[tuple[str, int, int, int]]]:
    nodes = [node(f"n{i}", gpus=draw(st.integers(1, 3)), mem=draw(st.sampled_from((8192, 16384))))
             for i in range(draw(st.integers(1, 5)))]
    steps = draw(st.lists(st.tuples(st.sampled_from(STEPS), st.integers(0, len(SHAPES) - 1),
                                    st.integers(0, 99), st.integers(0, 2)), max_size=25))
    return nodes, draw(st.sampled_from(("binpack", "spread"))), steps


def replies(ev: Evaluator, p: dict, names: list[str]) -> tuple[bytes, bytes, bytes, list[str]]:
    """filter, prioritize of the nodes that passed, prioritize of all asked; the passed."""
    f = filter_reply(ev.cached(p, names), names)
    passed = list(f.NodeNames or ())
    pr = prioritize_reply(ev, ev.cached(p, passed), passed)
    every = prioritize_reply(ev, ev.cached(p, names), names)
    return wire.encode(f), wire.encode(pr), wire.encode(every), passed


@SETTINGS
@given(histories())
def test_kept_answers_reply_as_deciding_afresh(case):
    nodes, pname, steps = case
    fast = ExtenderState(timeout_s=30, clock=Clock())
    slow = ExtenderState(timeout_s=30, clock=Clock())
    slow.cluster = ClusterState(reuse=False)
    for n in nodes:
        fast.on_node("ADDED", n)
        slow.on_node("ADDED", n)
    kept = Evaluator(fast, parse_policy(pname))
    names = [n["metadata"]["name"] for n in nodes]
    placed: list[dict] = []
    for serial, (step, shape, pick, offer) in enumerate(steps):
        mem, cores, gpus = SHAPES[shape]
        p = pod(f"p{serial}", mem=mem, cores=cores, gpus=gpus)
        if step == "again" and placed:  # a pod bound (maybe in flight) is asked about again
            p = placed[pick % len(placed)]
            p = {**p, "metadata": {**p["metadata"], "resourceVersion": str(serial + 100)}}
        asked = (names, names[pick % len(names):], [*names, "unknown"])[offer]
        got = replies(kept, p, asked)
        assert got == replies(Evaluator(slow, parse_policy(pname)), p, asked)
        if step == "bind" and got[3]:
            where = got[3][pick % len(got[3])]
            a = kept.cached(p, [where]).fits[where].assignment
            bound = assigned(p, where, [s.uuid for s in a.containers[0].slices],
                             allocated="main" if pick % 3 == 0 else None)
            for s in (fast, slow):
                s.on_pod("ADDED", bound)
            placed.append(bound)
        elif step == "allocate" and placed:
            done = placed[pick % len(placed)]
            done = {**done, "metadata": {**done["metadata"], "annotations": {
                **done["metadata"]["annotations"], handoff.ALLOCATED: "main"}}}
            for s in (fast, slow):
                s.on_pod("MODIFIED", done)
        elif step == "delete" and placed:
            gone = placed.pop(pick % len(placed))
            for s in (fast, slow):
                s.on_pod("DELETED", gone)

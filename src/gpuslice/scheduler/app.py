"""The extender's HTTP routes: POST /filter /prioritize /bind /preempt, /healthz /readyz /metrics.

Owns: decoding each body (wire.py), calling the verb, encoding the reply, timing it, and the
rule that only the leader binds. Errors go in the reply with HTTP 200, as kube-scheduler expects
(`Error` for filter and bind; prioritize has no error field, so an invalid pod scores 0 and an
unreadable body gets 400, which the scheduler logs and ignores). Extenders are called for every
scheduler profile: a pod that names another scheduler passes filter untouched and is bound
without an assignment (bind.py).
Does not: decide anything (filter.py, prioritize.py, bind.py) or start services (service.py).
POST /preempt keeps only the preemption candidates whose victims free enough GPU (preempt.py).
A filter that would leave a pod no node because of pods in flight has those read again first
(recheck.py).
Tests: tests/unit/scheduler/test_app.py
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Collection

from aiohttp import web

from gpuslice import ops
from gpuslice.errors import RequestError
from gpuslice.kube.events import EventRecorder
from gpuslice.scheduler import wire
from gpuslice.scheduler.bind import Binder
from gpuslice.scheduler.filter import Evaluator, Verdict, filter_reply, unfit_message, waited_for
from gpuslice.scheduler.metrics import Metrics
from gpuslice.scheduler.preempt import preempt_reply
from gpuslice.scheduler.prioritize import best_node, has_own_preferences, prioritize_reply

__all__ = ["NOT_LEADER", "START_WAIT_S", "make_app"]

# A verb that comes while the caches sync waits this long for them: below kube-scheduler's
# httpTimeout (the chart's 5 s), so a restarted extender holds kube-scheduler for a moment
# where every failed call would cost a FailedScheduling event, a status write and a back-off.
START_WAIT_S = 3.0

NOT_LEADER = ("this gpuslice-scheduler replica is not the leader and does not bind; "
              "kube-scheduler will retry (check the leader's /readyz)")


class _Starting(Exception):
    """The caches have not synced: any answer now could be wrong."""


class _NotOurs(Exception):
    """A pod of another scheduler profile (extenders are called for every profile)."""

    def __init__(self, args: wire.ExtenderArgs) -> None:
        self.body = args


def _json(obj: object) -> web.Response:
    return web.Response(body=wire.encode(obj), content_type="application/json")


def make_app(ev: Evaluator, binder: Binder, metrics: Metrics, *, ready: Callable[[], str | None],
             is_leader: Callable[[], bool], recorder: EventRecorder | None = None,
             starting: Callable[[], str | None] = lambda: None,
             synced: Callable[[], Awaitable[object]] | None = None,
             start_wait_s: float = START_WAIT_S,
             choose_node: bool = False,
             recheck: Callable[[Collection[str]], Awaitable[bool]] | None = None
             ) -> web.Application:
    """`starting()` says why the cache cannot answer yet (None once synced): until then every
    verb answers an error, which kube-scheduler retries, never a wrong "no GPU inventory";
    with `synced` (done when they are), a verb first waits up to `start_wait_s` for it.
    `choose_node`: filter answers only the best fitting node (chooseNodeInFilter). `recheck`:
    reads pods in flight again before a filter leaves a pod no node (recheck.py)."""

    async def not_started() -> str | None:
        why = starting()
        if why is not None and synced is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(start_wait_s):  # (wait_for: see gpuslice/aio.py)
                    await synced()
            why = starting()
        return why

    async def evaluate(request: web.Request, *, as_filtered: bool = False
                       ) -> tuple[wire.ExtenderArgs, Verdict, list[str]]:
        not_yet = await not_started()
        if not_yet is not None:
            raise _Starting(not_yet)
        args = wire.decode(await request.read(), wire.ExtenderArgs)
        if not ev.ours(args.Pod):
            raise _NotOurs(args)
        return (args, *judge(args, as_filtered=as_filtered))

    def judge(args: wire.ExtenderArgs, *, as_filtered: bool = False
              ) -> tuple[Verdict, list[str]]:
        if args.NodeNames is not None:
            return ev.cached(args.Pod, args.NodeNames, as_filtered=as_filtered), args.NodeNames
        if args.Nodes is not None:
            return ev.given(args.Pod, args.Nodes)
        raise wire.WireError("ExtenderArgs body: both Nodes and NodeNames are null; "
                             "send one of them")

    async def filter_(request: web.Request) -> web.Response:
        t0 = time.perf_counter()
        try:
            args, verdict, names = await evaluate(request)
        except _NotOurs as other:  # another profile's pod: no opinion
            return _json(wire.FilterResult(Nodes=other.body.Nodes,
                                           NodeNames=other.body.NodeNames))
        except (wire.WireError, RequestError, _Starting) as exc:
            return _json(wire.FilterResult(Error=str(exc)))
        reply = filter_reply(verdict, names)
        if not reply.NodeNames and recheck is not None \
                and await recheck(waited_for(verdict, names)):  # the watch may lag (recheck.py)
            verdict, names = judge(args)
            reply = filter_reply(verdict, names)
        if args.Nodes is not None:  # answer in the request's shape: the fitting Node objects
            keep = set(reply.NodeNames or ())
            items = [raw for raw, name in zip(args.Nodes.items, names, strict=True)
                     if name in keep]
            reply = wire.FilterResult(Nodes=wire.NodeList(items=items,
                                                          metadata=args.Nodes.metadata),
                                      FailedNodes=reply.FailedNodes,
                                      FailedAndUnresolvableNodes=reply.FailedAndUnresolvableNodes)
        elif choose_node and len(reply.NodeNames or ()) > 1 \
                and not has_own_preferences(args.Pod):  # one node: kube-scheduler scores none
            reply = wire.FilterResult(
                NodeNames=[best_node(ev, verdict, reply.NodeNames,  # type: ignore[arg-type]
                                     args.Pod)],
                FailedNodes=reply.FailedNodes,
                FailedAndUnresolvableNodes=reply.FailedAndUnresolvableNodes)
        elif not reply.NodeNames and names:  # (full Nodes come from simulations: no event)
            top = Counter(verdict.refusal(n).reason for n in names).most_common(1)[0][0]
            metrics.refused.labels("waiting for an in-flight pod"
                                   if top.startswith("waiting for pod") else top).inc()
            if recorder is not None and is_leader():
                recorder.emit({"apiVersion": "v1", "kind": "Pod", **args.Pod}, "Warning",
                              "NoGPUFit", unfit_message(verdict, names))
        response = _json(reply)
        metrics.latency.labels("filter").observe(time.perf_counter() - t0)
        return response

    async def prioritize(request: web.Request) -> web.Response:
        t0 = time.perf_counter()
        try:
            args, verdict, names = await evaluate(request, as_filtered=True)
            reply = prioritize_reply(ev, verdict, names, args.Pod)
        except wire.WireError as exc:
            return web.Response(status=400, text=f"{exc}\n")
        except _Starting as exc:
            return web.Response(status=503, text=f"{exc}\n")
        except (RequestError, _NotOurs):
            return _json([])  # refused by the filter already, or another profile's pod
        response = _json(reply)
        metrics.latency.labels("prioritize").observe(time.perf_counter() - t0)
        return response

    async def bind(request: web.Request) -> web.Response:
        t0 = time.perf_counter()
        try:
            args = wire.decode(await request.read(), wire.BindingArgs)
        except wire.WireError as exc:
            return _json(wire.BindingResult(Error=str(exc)))
        error = await not_started() or (await binder.bind(args) if is_leader() else NOT_LEADER)
        if error:
            metrics.bind_failed.inc()
        else:
            metrics.placed.inc()
        metrics.latency.labels("bind").observe(time.perf_counter() - t0)
        return _json(wire.BindingResult(Error=error))

    async def preempt(request: web.Request) -> web.Response:
        t0 = time.perf_counter()
        try:
            if (not_yet := await not_started()) is not None:
                raise _Starting(not_yet)
            args = wire.decode(await request.read(), wire.PreemptionArgs)
            reply = preempt_reply(ev, args) if ev.ours(args.Pod) else wire.PreemptionResult(
                NodeNameToMetaVictims=dict(args.NodeNameToMetaVictims or {}))
        except (wire.WireError, _Starting) as exc:
            return web.Response(status=503 if isinstance(exc, _Starting) else 400,
                                text=f"{exc}\n")
        except RequestError:
            reply = wire.PreemptionResult(NodeNameToMetaVictims={})  # no eviction helps
        metrics.latency.labels("preempt").observe(time.perf_counter() - t0)
        return _json(reply)

    app = web.Application(client_max_size=64 << 20)  # a NodeList of 5,000 nodes is ~20 MiB
    app.router.add_post("/filter", filter_)
    app.router.add_post("/prioritize", prioritize)
    app.router.add_post("/bind", bind)
    app.router.add_post("/preempt", preempt)
    ops.add_ops_routes(app, ready=ready, registry=metrics.registry)
    return app

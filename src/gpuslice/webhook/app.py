"""The webhook's HTTP routes: POST /mutate, plus /healthz, /readyz and /metrics (ops.py).

Owns: turning a request body into admit's inputs and its decision into the AdmissionReview
reply; one JSON log line per acted-on pod; the request metrics.
Does not: decide (admit.py), encode the wire (review.py), or listen and serve TLS (command.py).
Failure: a body that is not an AdmissionReview -> 400 with a one-line reason (never a
traceback), over MAX_BODY -> 413; a bug inside admit -> 500, logged with the traceback, so
kube-apiserver applies the configuration's failurePolicy. Namespace lookups only happen for
GPU pods being created.
Tests: tests/integration/webhook/test_webhook_over_https.py
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from aiohttp import web
from lightkube import AsyncClient

from gpuslice import dialects, ops
from gpuslice.webhook import dra, review
from gpuslice.webhook.admit import Decision, Options, Result, admit
from gpuslice.webhook.dra_cluster import TemplateError, Templates, foreign_claims
from gpuslice.webhook.metrics import Metrics

__all__ = ["MAX_BODY", "make_app"]

log = logging.getLogger(__name__)

MAX_BODY = 8 << 20  # kube-apiserver objects are at most ~3 MiB; the review holds old + new

LabelLookup = Callable[[str], Awaitable[Mapping[str, str] | None]]


def make_app(options: Options, metrics: Metrics, *, ready: Callable[[], str | None],
             namespace_labels: LabelLookup | None = None,
             dra_inventory: Callable[[], dra.Inventory | None] = lambda: None,
             templates: Templates | None = None,
             claims_client: AsyncClient | None = None) -> web.Application:
    """The application; `namespace_labels` None = trust the namespaceSelector alone;
    `dra_inventory` and `templates`: for pods on the DRA path (webhook/dra_cluster.py);
    `claims_client`: refuse pods that name a claim made for another pod (foreign_claims)."""

    async def lookup(req: review.Request) -> Mapping[str, str] | None:
        if namespace_labels is None or not req.namespace or req.operation != "CREATE" \
                or not dialects.is_gpu_pod(req.object):
            return None
        return await namespace_labels(req.namespace)

    async def mutate(request: web.Request) -> web.Response:
        start = time.perf_counter()
        try:
            req = review.decode(await request.read())
        except (review.ReviewError, web.HTTPRequestEntityTooLarge) as exc:
            metrics.observe(Result.ERROR, time.perf_counter() - start)
            log.warning("rejected a malformed admission request: %s", exc)
            if isinstance(exc, web.HTTPException):
                raise
            return web.Response(status=400, text=f"{exc}\n")
        try:
            decision = admit(req.operation, req.object, await lookup(req), options,
                             kind=req.kind.kind, sub_resource=req.sub_resource,
                             user=req.user_info.username, dra_inventory=dra_inventory())
            if decision.templates and not req.dry_run:  # dryRun: no side effects
                decision = await _make_templates(decision, templates)
            if claims_client is not None and decision.allowed and req.operation == "CREATE":
                stolen = await foreign_claims(claims_client, req.object, req.namespace)
                if stolen:
                    decision = Decision(result=Result.DENIED, why="another pod's claim",
                                        message="\n".join(stolen))
        except Exception:
            metrics.observe(Result.ERROR, time.perf_counter() - start)
            log.exception("admission of %s/%s failed", req.namespace, req.name,
                          extra={"uid": req.uid})
            return web.Response(status=500, text="internal error in gpuslice admission; "
                                                 "see the webhook's log\n")
        body = _reply(req.uid, decision)
        metrics.observe(decision.result, time.perf_counter() - start)
        _log(req, decision)
        return web.Response(body=body, content_type="application/json")

    app = web.Application(client_max_size=MAX_BODY)
    app.router.add_post("/mutate", mutate)
    ops.add_ops_routes(app, ready=ready, registry=metrics.registry)
    return app


async def _make_templates(d: Decision, templates: Templates | None) -> Decision:
    """The DRA pod's templates exist before it is admitted, else it is denied with why."""
    try:
        if templates is None:
            raise TemplateError("the webhook has no API client to create ResourceClaimTemplates "
                                "with; set dra.enabled in its configuration")
        for body in d.templates:
            await templates.ensure(body)
    except TemplateError as exc:
        return Decision(result=Result.DENIED, why="ResourceClaimTemplate", message=str(exc))
    return d


def _reply(uid: str, d: Decision) -> bytes:
    if d.result is Result.DENIED:
        return review.encode(uid, allowed=False, code=422, reason="Invalid", message=d.message)
    return review.encode(uid, allowed=True, patch=list(d.patch), warnings=list(d.warnings))


def _log(req: review.Request, d: Decision) -> None:
    meta = req.object.get("metadata") if isinstance(req.object, Mapping) else None
    meta = meta if isinstance(meta, Mapping) else {}
    name = req.name or meta.get("name") or meta.get("generateName") or ""
    level = logging.DEBUG if d.result is Result.ALLOWED else logging.INFO
    log.log(level, "%s %s/%s: %s", d.result.value, req.namespace, name, d.why,
            extra={"pod": f"{req.namespace}/{name}", "uid": req.uid, "result": d.result.value,
                   "dry_run": req.dry_run, "problems": d.message.count("\n") + 1 if d.message
                   else 0})

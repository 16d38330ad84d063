"""What every long-running service shares: JSON logs and the /healthz, /readyz, /metrics routes.

Owns: the log line format (one JSON object per line: time, level, logger, msg, plus any
`extra=` fields such as pod, node, gpu) and the three operational HTTP routes.
Does not: define any metric (each service owns its registry) or serve TLS (the service does).
Tests: tests/unit/test_ops.py
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable

import msgspec
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

__all__ = ["QUIET_BELOW_DEBUG", "JSONFormatter", "add_ops_routes", "setup_logging"]

QUIET_BELOW_DEBUG = ("httpx2", "httpcore2")  # lightkube's HTTP client: its records at warning+
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


class JSONFormatter(logging.Formatter):
    """One JSON object per record; extra fields passed with `extra=` are kept as keys (a value
    JSON has no type for as its str()). The webhook writes one per pod it patches, so a line
    costs a third of what json.dumps and a strftime per record did."""

    _encode = msgspec.json.Encoder(enc_hook=str).encode

    def __init__(self) -> None:
        super().__init__()
        self._second, self._stamp = -1, ""  # the last second formatted, as text

    def format(self, record: logging.LogRecord) -> str:
        second = int(record.created)
        if second != self._second:
            self._second = second
            self._stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        out = {"time": f"{self._stamp}.{int(record.msecs):03d}Z",
               "level": record.levelname.lower(), "logger": record.name,
               "msg": record.getMessage()}
        out.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        try:
            return self._encode(out).decode()
        except (TypeError, ValueError, RecursionError):  # e.g. an extra that holds itself
            return self._encode({k: v if isinstance(v, str | int | float | bool | None)
                                 else str(v) for k, v in out.items()}).decode()


def setup_logging(level: str = "info", *, json_lines: bool = True) -> None:
    """Configure the root logger once for a service (stderr)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JSONFormatter() if json_lines else
                         logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    # none of these is in a line, and a record would look each up (the logging HOWTO's
    # "Optimization")
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # the Kubernetes client's HTTP library logs every request at info: a line per lease read
    # (every 2 s, for ever), watch, patch and event; that is debug detail here
    for name in QUIET_BELOW_DEBUG:
        logging.getLogger(name).setLevel(logging.DEBUG if level.lower() == "debug"
                                         else logging.WARNING)


def add_ops_routes(app: web.Application, *, ready: Callable[[], str | None],
                   registry: CollectorRegistry) -> None:
    """GET /healthz (the process answers), /readyz (200 when `ready()` returns None, else 503
    with the reason it returned) and /metrics (Prometheus text from `registry`)."""

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        reason = ready()
        if reason is None:
            return web.Response(text="ok\n")
        return web.Response(status=503, text=f"not ready: {reason}\n")

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)

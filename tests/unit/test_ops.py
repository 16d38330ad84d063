"""The operational routes and the JSON log line every service shares."""

from __future__ import annotations

import json
import logging

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry, Counter

from gpuslice import ops


async def test_health_ready_and_metrics_routes():
    registry = CollectorRegistry()
    Counter("gpuslice_test_total", "a test counter", registry=registry).inc()
    state = {"reason": "cache not synced"}
    app = web.Application()
    ops.add_ops_routes(app, ready=lambda: state["reason"], registry=registry)
    async with TestClient(TestServer(app)) as client:
        assert (await client.get("/healthz")).status == 200
        r = await client.get("/readyz")
        assert r.status == 503 and "cache not synced" in await r.text()
        state["reason"] = None
        assert (await client.get("/readyz")).status == 200
        text = await (await client.get("/metrics")).text()
        assert "gpuslice_test_total 1.0" in text


def test_log_lines_are_json_with_extra_fields():
    record = logging.LogRecord("gpuslice.x", logging.WARNING, __file__, 1, "bound %s", ("p",),
                               None)
    record.pod = "ns/p"
    line = json.loads(ops.JSONFormatter().format(record))
    assert line["msg"] == "bound p" and line["level"] == "warning" and line["pod"] == "ns/p"
    assert line["time"].endswith("Z")


def test_an_extra_json_has_no_type_for_is_written_as_its_text():
    loop: dict[str, object] = {}
    loop["self"] = loop
    for value, shown in ((object, str(object)), ({3: b"x"}, {"3": "eA=="}), (loop, str(loop))):
        record = logging.LogRecord("gpuslice.x", logging.INFO, __file__, 1, "m", (), None)
        record.value = value
        assert json.loads(ops.JSONFormatter().format(record))["value"] == shown


def test_the_http_clients_request_lines_show_at_debug_only(capsys):
    root, saved = logging.getLogger(), logging.getLogger().handlers[:]
    try:
        for level, shown in (("info", False), ("debug", True)):
            ops.setup_logging(level)
            logging.getLogger("httpx2").info("HTTP Request: GET /leases/x \"HTTP/1.1 200 OK\"")
            logging.getLogger("httpx2").warning("a retry")
            err = capsys.readouterr().err
            assert ("HTTP Request" in err) is shown, (level, err)
            assert "a retry" in err
    finally:
        root.handlers[:] = saved
        root.setLevel(logging.WARNING)
        for name in ops.QUIET_BELOW_DEBUG:
            logging.getLogger(name).setLevel(logging.NOTSET)

"""MicroTimes (Lease renewTime/acquireTime, Event eventTime) as kube-apiserver reads them:
Go's time.Parse with the layout "2006-01-02T15:04:05.000000Z07:00", in UTC after. The
in-process server's port (kubeapi.microtime) against examples the real library printed
(microtime_examples.json, made by microtime_examples.go); the API tests are in
test_object_lifecycle.py."""

from __future__ import annotations

import json
from pathlib import Path

from kubeapi.microtime import ParseError, parse

EXAMPLES = json.loads((Path(__file__).parent / "microtime_examples.json").read_text())


def _parsed(text: str) -> str:
    try:
        return parse(text)
    except ParseError as e:
        return f"error: {e}"


def test_the_port_gives_what_the_real_library_gives_for_every_example():
    assert len(EXAMPLES) > 1500
    assert sum(want.startswith("error: ") for _, want in EXAMPLES) > 500, "errors covered"
    assert [(text, want, _parsed(text)) for text, want in EXAMPLES
            if _parsed(text) != want] == []

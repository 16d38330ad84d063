"""The node agent against the kubelet emulator (tests/kubelet/) and the test API server."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "kubelet"))


@pytest.fixture
async def node(kube_api, request):
    from nodeharness import running_node

    async with running_node(kube_api, **(getattr(request, "param", None) or {})) as n:
        yield n

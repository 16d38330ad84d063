"""The node agent against the kubelet emulator (tests/kubelet/) and the test API server."""

from __future__ import annotations

import pytest


@pytest.fixture
async def node(kube_api, request):
    from kubelet.nodeharness import running_node

    async with running_node(kube_api, **(getattr(request, "param", None) or {})) as n:
        yield n

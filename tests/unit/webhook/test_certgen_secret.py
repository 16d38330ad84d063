"""certgen's Secret path against a small fake API, for what is awkward to stage on a server
(tests/integration/webhook/test_certgen_against_api.py covers the plain path there): created,
kept, rewritten when garbled, refused when another type, retried on a conflict."""

from __future__ import annotations

import base64
import copy

import pytest

from gpuslice.errors import ConfigError
from gpuslice.kube import errors
from gpuslice.webhook.certgen import certgen


class FakeSecrets:
    """get/create/patch of one Secret, with resourceVersions and injectable conflicts."""

    def __init__(self) -> None:
        self.obj: dict | None = None
        self.conflicts = 0
        self.patches = 0

    async def get(self, resource, name, namespace=None):
        if self.obj is None:
            raise errors.NotFound(f"secret {namespace}/{name}: not found", code=404)
        return copy.deepcopy(self.obj)

    async def create(self, body):
        self.obj = body.to_dict()
        self.obj["metadata"]["resourceVersion"] = "1"

    async def patch(self, resource, name, patch, namespace=None, patch_type=None):
        if self.conflicts:
            self.conflicts -= 1
            self.obj["metadata"]["resourceVersion"] += "0"  # someone else wrote meanwhile
            raise errors.Conflict("the object has been modified", code=409)
        assert patch["metadata"]["resourceVersion"] == self.obj["metadata"]["resourceVersion"]
        self.obj["data"] = patch["data"]
        self.patches += 1


async def run(api):
    return await certgen(service="wh", namespace="ns", secret="wh-tls", client=api)


async def test_the_secret_is_created_then_kept():
    api = FakeSecrets()
    assert (await run(api))[-1] == "secret ns/wh-tls: created"
    assert api.obj["type"] == "kubernetes.io/tls"
    assert set(api.obj["data"]) == {"ca.crt", "ca.key", "tls.crt", "tls.key"}
    assert api.obj["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpuslice-certgen"}
    again = await run(api)
    assert again[0].startswith("kept") and again[-1] == "secret ns/wh-tls: unchanged"


async def test_a_garbled_secret_is_replaced_by_a_new_set():
    api = FakeSecrets()
    await run(api)
    api.obj["data"]["tls.key"] = base64.b64encode(b"not a key").decode()
    done = await run(api)
    assert done[0].startswith("made a new certificate for wh.ns.svc: the serving certificate "
                              "cannot be used")
    assert done[-1] == "secret ns/wh-tls: updated"


async def test_a_conflicting_write_is_read_again_and_retried():
    api = FakeSecrets()
    await run(api)
    api.obj["data"] = {"tls.crt": "!!"}
    api.conflicts = 2
    assert (await run(api))[-1] == "secret ns/wh-tls: updated"
    assert api.patches == 1


async def test_a_secret_of_another_type_is_not_overwritten():
    api = FakeSecrets()
    await run(api)
    api.obj["type"] = "Opaque"
    api.obj["data"] = {}
    with pytest.raises(ConfigError, match=r"has type Opaque, not kubernetes\.io/tls"):
        await run(api)

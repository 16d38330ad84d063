"""Admission webhooks on CREATE, through the API (either backend): the AdmissionReview the
webhook gets, JSONPatch applied, denials, failure policies, selectors, warnings."""

from __future__ import annotations

import base64
import json
import socket
import ssl
from pathlib import Path

import pytest
from aiohttp import web

from kubeapi.certs import make_pki
from kubeapi.raw import pod_body

# what a real kube-apiserver v1.36 sent (copied from the shared wire-samples)
SAMPLE = Path(__file__).parents[2] / "unit/webhook/samples/admissionreview-pod-create.request.json"


class StubWebhook:
    """An HTTPS webhook whose answer the test sets; it records the reviews it gets."""

    def __init__(self) -> None:
        self.reviews: list[dict] = []
        self.patch: list[dict] | None = None
        self.allowed = True
        self.status: dict = {}
        self.warnings: list[str] = []
        self.patch_everywhere = False  # also answer /validate with the patch
        self.pki = make_pki()
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        review = await request.json()
        self.reviews.append({"query": dict(request.query), "headers": dict(request.headers),
                             "path": request.path, **review})
        response = {"uid": review["request"]["uid"], "allowed": self.allowed}
        if self.status:
            response["status"] = self.status
        if self.warnings:
            response["warnings"] = self.warnings
        if self.patch is not None and (request.path == "/mutate" or self.patch_everywhere):
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(self.patch).encode()).decode()
        return web.json_response({"apiVersion": "admission.k8s.io/v1",
                                  "kind": "AdmissionReview", "response": response})

    def configuration(self, kind: str = "Mutating", url: str = "", **hook) -> dict:
        """A configuration calling /mutate (Mutating) or /validate (Validating)."""
        plural = f"{kind.lower()}webhookconfigurations"
        url = url or self.url.replace("/mutate", f"/{kind.lower().removesuffix('ing')}e")
        return {"path": f"/apis/admissionregistration.k8s.io/v1/{plural}", "body": {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": f"{kind}WebhookConfiguration", "metadata": {"name": f"stub-{kind.lower()}"},
            "webhooks": [{
                "name": f"{kind.lower()}.stub.example.com", "admissionReviewVersions": ["v1"],
                "sideEffects": "None", "timeoutSeconds": 5,
                "clientConfig": {"url": url, "caBundle": base64.b64encode(
                    self.pki.ca_cert).decode()},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                           "resources": ["pods"]}], **hook}]}}


@pytest.fixture
async def webhook(tmp_path):
    stub = StubWebhook()
    files = stub.pki.write(tmp_path / "webhook-pki")
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(files["serving.crt"], files["serving.key"])
    app = web.Application()
    app.router.add_post("/mutate", stub.handle)
    app.router.add_post("/validate", stub.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    stub.url = f"https://127.0.0.1:{sock.getsockname()[1]}/mutate"
    await web.SockSite(runner, sock, ssl_context=tls).start()
    yield stub
    await runner.cleanup()


async def _register(raw, config: dict) -> None:
    code, reply = await raw.call("POST", config["path"], config["body"])
    assert code == 201, reply


async def _create(raw, body: dict) -> tuple[int, dict]:
    return await raw.call("POST", "/api/v1/namespaces/default/pods", body)


async def _first_refusal(raw, body: dict) -> tuple[int, dict]:
    """Create until refused: a real kube-apiserver needs about 1 s to see a configuration."""
    import asyncio

    for _ in range(50):
        code, reply = await _create(raw, body)
        if code != 201:
            return code, reply
        await raw.call("DELETE", f"/api/v1/namespaces/default/pods/{body['metadata']['name']}")
        await asyncio.sleep(0.1)
    return code, reply


async def _settle(raw, webhook, paths: tuple[str, ...] = ("/mutate",)) -> None:
    """Until a probe pod reaches every path (a real kube-apiserver needs about 1 s to see a
    new configuration)."""
    import asyncio

    for _ in range(50):
        await raw.call("POST", "/api/v1/namespaces/default/pods", pod_body("probe"))
        await raw.call("DELETE", "/api/v1/namespaces/default/pods/probe",
                       gracePeriodSeconds="0")
        if {r["path"] for r in webhook.reviews} >= set(paths):
            webhook.reviews.clear()
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the webhook was never called on {paths}")


async def test_a_mutating_webhook_gets_the_real_review_and_its_patch_is_applied(raw, webhook):
    await _register(raw, webhook.configuration())
    await _settle(raw, webhook)
    webhook.patch = [{"op": "add", "path": "/metadata/labels", "value": {"seen": "yes"}}]
    code, pod = await _create(raw, pod_body("wh-1"))
    assert code == 201 and pod["metadata"]["labels"] == {"seen": "yes"}
    (review,) = webhook.reviews
    assert review["query"] == {"timeout": "5s"}
    assert review["headers"]["User-Agent"] == "kube-apiserver-admission"
    request = review["request"]
    sample = json.loads(SAMPLE.read_text())["request"]
    assert request.keys() == sample.keys()
    assert request["object"].keys() == sample["object"].keys()
    assert request["object"]["spec"].keys() == sample["object"]["spec"].keys()
    assert (request["operation"], request["name"], request["namespace"]) == (
        "CREATE", "wh-1", "default")
    assert "uid" not in request["object"]["metadata"], "not assigned before admission"
    assert request["object"]["status"] == {}


async def test_a_denial_is_the_webhooks_message_behind_the_servers_words(raw, webhook):
    await _register(raw, webhook.configuration())
    await _settle(raw, webhook)
    webhook.allowed = False
    webhook.status = {"code": 403, "message": "nvidia.com/gpucores=150: above 100"}
    code, reply = await _create(raw, pod_body("no"))
    assert code == 403
    assert reply["message"] == ('admission webhook "mutating.stub.example.com" denied the '
                                "request: nvidia.com/gpucores=150: above 100")


async def test_an_unreachable_webhook_fails_closed_by_default_policy(raw, webhook):
    dead = "https://127.0.0.1:9/mutate"
    await _register(raw, webhook.configuration(url=dead, failurePolicy="Fail"))
    code, reply = await _first_refusal(raw, pod_body("a"))
    assert code == 500, reply
    assert 'failed calling webhook "mutating.stub.example.com"' in reply["message"]


async def test_an_ignorable_webhook_that_fails_lets_the_pod_through(raw, webhook):
    await _register(raw, webhook.configuration(url="https://127.0.0.1:9/mutate",
                                               failurePolicy="Ignore"))
    code, _ = await raw.call("POST", "/api/v1/namespaces/default/pods", pod_body("a"))
    assert code == 201


async def test_an_object_selector_opt_out_skips_the_webhook(raw, webhook):
    await _register(raw, webhook.configuration(objectSelector={"matchExpressions": [
        {"key": "gpuslice.io/skip", "operator": "DoesNotExist"}]}))
    await _settle(raw, webhook)
    code, _ = await _create(raw, pod_body("skipped", labels={"gpuslice.io/skip": "true"}))
    assert code == 201 and webhook.reviews == []


async def test_warnings_reach_the_client_as_warning_headers(kube_api, raw, webhook):
    await _register(raw, webhook.configuration())
    await _settle(raw, webhook)
    webhook.warnings = ["schedulerName volcano kept"]
    async with kube_api.http() as http:
        reply = await http.post("/api/v1/namespaces/default/pods", json=pod_body("w"))
    assert reply.status_code == 201
    assert reply.headers.get("warning") == '299 - "schedulerName volcano kept"'


async def test_a_validating_webhook_sees_what_the_mutating_one_changed(raw, webhook):
    await _register(raw, webhook.configuration())
    await _register(raw, webhook.configuration("Validating"))
    await _settle(raw, webhook, ("/mutate", "/validate"))
    webhook.patch = [{"op": "add", "path": "/metadata/labels", "value": {"m": "1"}}]
    code, reply = await _create(raw, pod_body("v"))
    assert code == 201, reply
    assert [(r["path"], r["request"]["object"]["metadata"].get("labels"))
            for r in webhook.reviews] == [("/mutate", None), ("/validate", {"m": "1"})], \
        "mutating first (before its patch), then validating (after)"


async def test_a_validating_webhook_that_answers_with_a_patch_has_failed(raw, webhook):
    await _register(raw, webhook.configuration("Validating"))
    await _settle(raw, webhook, ("/validate",))
    webhook.patch, webhook.patch_everywhere = [
        {"op": "add", "path": "/metadata/labels", "value": {"m": "1"}}], True
    code, reply = await _create(raw, pod_body("v"))
    assert code == 500 and reply["message"] == (
        'Internal error occurred: failed calling webhook "validating.stub.example.com": '
        "received invalid webhook response: validating webhook may not return response.patch")

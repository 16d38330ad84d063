"""The webhook as kube-apiserver meets it: HTTPS with our CA, the golden AdmissionReview, bad
bodies, the ops routes, a certificate replaced while serving, and the namespace opt-out read
from the API (either backend)."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
from pathlib import Path

import aiohttp
import pytest
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace

from gpuslice.errors import EnvironmentProblem
from gpuslice.webhook import config
from gpuslice.webhook.certgen import read_dir, write_dir
from gpuslice.webhook.certs import ensure
from gpuslice.webhook.command import Server

SAMPLE = (Path(__file__).parents[2] / "unit" / "webhook" / "samples" /
          "admissionreview-pod-create.request.json").read_bytes()
GPU_SAMPLE = SAMPLE.replace(b"example.com/gpu-slice", b"nvidia.com/gpumem")


def in_namespace(body: bytes, namespace: str) -> bytes:
    return body.replace(b'"namespace": "default"', f'"namespace": "{namespace}"'.encode())


@pytest.fixture
def tls_dir(tmp_path):
    bundle, _ = ensure(None, ["localhost"], ["127.0.0.1"])
    write_dir(tmp_path, bundle)
    return tmp_path


def make_config(folder: Path, **kw) -> config.WebhookConfig:
    settings = {"address": "127.0.0.1", "port": 0, "cert_file": str(folder / "tls.crt"),
                "key_file": str(folder / "tls.key"), "tls_reload_seconds": 0.05,
                "check_namespace_labels": False, **kw}
    return config.WebhookConfig(**settings)


@pytest.fixture
async def webhook(tls_dir):
    server = Server(make_config(tls_dir))
    await server.start()
    yield server
    await server.stop()


def client_for(folder: Path) -> aiohttp.ClientSession:
    """Like kube-apiserver: trusts only the caBundle, checks the name (127.0.0.1 SAN)."""
    context = ssl.create_default_context(cadata=(folder / "ca.crt").read_text())
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context))


async def post(server: Server, folder: Path, body: bytes) -> tuple[int, bytes]:
    async with client_for(folder) as http, http.post(
            f"https://127.0.0.1:{server.port}/mutate?timeout=5s", data=body,
            headers={"Content-Type": "application/json"}) as r:
        return r.status, await r.read()


async def test_the_golden_review_is_answered_over_https_with_a_decodable_patch(webhook, tls_dir):
    status, body = await post(webhook, tls_dir, GPU_SAMPLE)
    assert status == 200
    response = json.loads(body)["response"]
    assert response["uid"] == "8d5ff7e4-6b52-492f-95a0-44c971507812"
    assert response["allowed"] is True and response["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(response["patch"]))
    assert {"op": "add", "path": "/metadata/labels",
            "value": {"gpuslice.io/managed": "true"}} in ops


async def test_a_malformed_body_is_a_400_with_a_sentence_not_a_traceback(webhook, tls_dir):
    status, body = await post(webhook, tls_dir, b'{"apiVersion": "admission.k8s.io/v1beta1",'
                                                b' "kind": "AdmissionReview"}')
    assert status == 400
    text = body.decode()
    assert "set admissionReviewVersions: [v1]" in text and "Traceback" not in text


async def test_ops_routes_report_health_readiness_and_counted_results(webhook, tls_dir):
    await post(webhook, tls_dir, GPU_SAMPLE)
    await post(webhook, tls_dir, SAMPLE)
    await post(webhook, tls_dir, b"garbage")
    async with client_for(tls_dir) as http:
        base = f"https://127.0.0.1:{webhook.port}"
        async with http.get(f"{base}/healthz") as r:
            assert r.status == 200
        async with http.get(f"{base}/readyz") as r:
            assert r.status == 200
        async with http.get(f"{base}/metrics") as r:
            text = await r.text()
    for result, count in (("patched", 1), ("allowed", 1), ("error", 1), ("denied", 0)):
        assert f'gpuslice_webhook_requests_total{{result="{result}"}} {count}.0' in text
    assert "gpuslice_webhook_admission_duration_seconds_count 3.0" in text
    assert "gpuslice_webhook_certificate_expiry_timestamp_seconds" in text


async def peer_serial(port: int, folder: Path) -> int:
    from cryptography import x509

    context = ssl.create_default_context(cadata=(folder / "ca.crt").read_text())
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    return x509.load_der_x509_certificate(der).serial_number


async def test_a_certificate_replaced_on_disk_is_served_without_a_restart(webhook, tls_dir):
    from cryptography import x509

    before = await peer_serial(webhook.port, tls_dir)
    current = read_dir(tls_dir)
    renewed, why = ensure(current, ["localhost", "renewed.example"], ["127.0.0.1"])
    assert why is not None and renewed.ca_cert == current.ca_cert
    write_dir(tls_dir, renewed)
    want = x509.load_pem_x509_certificate(renewed.cert).serial_number
    for _ in range(100):
        if await peer_serial(webhook.port, tls_dir) == want:
            break
        await asyncio.sleep(0.05)
    else:
        pytest.fail("the new certificate was not served within 5 s")
    assert want != before and webhook.tls.reloads == 1
    status, _ = await post(webhook, tls_dir, SAMPLE)
    assert status == 200, "admission keeps working across the reload"


async def test_a_taken_port_is_an_environment_problem_naming_it(webhook, tls_dir):
    second = Server(make_config(tls_dir, port=webhook.port))
    with pytest.raises(EnvironmentProblem, match=f"127.0.0.1:{webhook.port}"):
        await second.start()


async def test_a_namespace_labelled_to_opt_out_is_skipped_when_its_selector_failed(
        kube_api, tls_dir):
    client = kube_api.async_client()
    await client.create(Namespace(metadata=ObjectMeta(
        name="research", labels={"gpuslice.io/webhook": "disabled"})))
    await client.create(Namespace(metadata=ObjectMeta(name="team")))
    server = Server(make_config(tls_dir, check_namespace_labels=True),
                    client=kube_api.async_client())
    await server.start()
    try:
        _, skipped = await post(server, tls_dir, in_namespace(GPU_SAMPLE, "research"))
        _, patched = await post(server, tls_dir, in_namespace(GPU_SAMPLE, "team"))
        _, unknown = await post(server, tls_dir, in_namespace(GPU_SAMPLE, "no-such-ns"))
    finally:
        await server.stop()
    assert "patch" not in json.loads(skipped)["response"], "opted out: left exactly as sent"
    assert "patch" in json.loads(patched)["response"]
    assert "patch" in json.loads(unknown)["response"], (
        "a failed lookup falls back to the selector instead of failing the pod")
    assert server.metrics.namespace_lookup_errors._value.get() == 1


async def test_a_body_over_the_limit_is_refused_with_413_and_counted(webhook, tls_dir):
    from gpuslice.webhook.app import MAX_BODY

    status, _ = await post(webhook, tls_dir, b" " * (MAX_BODY + 1))
    assert status == 413
    assert webhook.metrics.requests.labels("error")._value.get() == 1


async def test_a_bug_in_the_decision_is_a_500_so_the_failure_policy_applies(
        webhook, tls_dir, monkeypatch, caplog):
    def broken(*_, **__):
        raise KeyError("bug")

    monkeypatch.setattr("gpuslice.webhook.app.admit", broken)
    status, body = await post(webhook, tls_dir, GPU_SAMPLE)
    assert status == 500 and b"Traceback" not in body
    assert "admission of default/wh-1 failed" in caplog.text
    assert webhook.metrics.requests.labels("error")._value.get() == 1

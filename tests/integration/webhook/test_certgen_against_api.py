"""certgen against the API (either backend): the caBundle of every webhook is set, a second run
changes nothing, a renewal under the same CA leaves the caBundle alone, and a missing
configuration says what to do."""

from __future__ import annotations

import base64
import stat

import pytest
from lightkube.models.admissionregistration_v1 import (
    MutatingWebhook,
    RuleWithOperations,
    ServiceReference,
    WebhookClientConfig,
)
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.admissionregistration_v1 import MutatingWebhookConfiguration
from lightkube.resources.core_v1 import Secret

from gpuslice.errors import ConfigError
from gpuslice.webhook.certgen import certgen, read_dir

NAME = "gpuslice-webhook"


def hook(name: str) -> MutatingWebhook:
    return MutatingWebhook(
        name=name, admissionReviewVersions=["v1"], sideEffects="None",
        clientConfig=WebhookClientConfig(service=ServiceReference(
            name=NAME, namespace="gpuslice-system", path="/mutate")),
        rules=[RuleWithOperations(apiGroups=[""], apiVersions=["v1"], operations=["CREATE"],
                                  resources=["pods"])])


@pytest.fixture
async def client(kube_api):
    client = kube_api.async_client()
    await client.create(MutatingWebhookConfiguration(
        metadata=ObjectMeta(name=NAME), webhooks=[hook("pods.gpuslice.io"),
                                                  hook("pods-again.gpuslice.io")]))
    yield client
    await client.close()


async def bundles(client) -> list[bytes]:
    obj = await client.get(MutatingWebhookConfiguration, NAME)
    return [base64.b64decode(w.clientConfig.caBundle) for w in obj.webhooks]


async def run(client, tmp_path, **kw):
    kw = {"service": NAME, "namespace": "gpuslice-system", "out_dir": str(tmp_path),
          "webhook_config": NAME, "client": client, **kw}
    return await certgen(**kw)


async def test_every_webhook_trusts_the_ca_written_to_the_folder(client, tmp_path):
    done = await run(client, tmp_path)
    assert done[0] == "made a new certificate for gpuslice-webhook.gpuslice-system.svc: " \
                      "no certificate yet"
    assert done[1] == f"caBundle of mutatingwebhookconfiguration {NAME}: updated (2 webhooks)"
    ca = (tmp_path / "ca.crt").read_bytes()
    assert await bundles(client) == [ca, ca]
    for name in ("tls.key", "ca.key"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600, "keys are private"


async def test_a_second_run_changes_nothing(client, tmp_path):
    await run(client, tmp_path)
    before = (await client.get(MutatingWebhookConfiguration, NAME)).metadata.resourceVersion
    files = read_dir(tmp_path)
    done = await run(client, tmp_path)
    assert done[0].startswith("kept the certificate for gpuslice-webhook.gpuslice-system.svc")
    assert done[1:] == [f"caBundle of mutatingwebhookconfiguration {NAME}: unchanged",
                        f"{tmp_path}: unchanged"]
    after = (await client.get(MutatingWebhookConfiguration, NAME)).metadata.resourceVersion
    assert after == before and read_dir(tmp_path) == files


async def test_new_names_renew_the_certificate_under_the_same_ca(client, tmp_path):
    await run(client, tmp_path)
    first = read_dir(tmp_path)
    done = await run(client, tmp_path, dns=["webhook.example.com"], ips=["10.0.0.9"])
    assert "its names differ" in done[0]
    assert done[1].endswith(": unchanged"), "same CA: the API server needs no new caBundle"
    assert done[2] == f"{tmp_path}: wrote tls.crt, tls.key"
    assert read_dir(tmp_path).ca_cert == first.ca_cert


async def test_a_replaced_ca_is_trusted_next_to_the_old_one_until_the_next_run(client, tmp_path):
    await run(client, tmp_path)
    old_ca = (tmp_path / "ca.crt").read_bytes()
    (tmp_path / "ca.key").write_bytes(b"lost")  # the CA can no longer sign: a new one
    await run(client, tmp_path)
    new_ca = (tmp_path / "ca.crt").read_bytes()
    assert new_ca != old_ca
    assert await bundles(client) == [new_ca + old_ca] * 2, (
        "webhook pods still serving the old certificate stay trusted until they reload")
    await run(client, tmp_path)
    assert await bundles(client) == [new_ca] * 2


async def test_a_missing_configuration_says_to_apply_the_manifests(kube_api, tmp_path):
    client = kube_api.async_client()
    with pytest.raises(ConfigError, match="apply the webhook manifests first"):
        await run(client, tmp_path, webhook_config="nope")


async def test_nowhere_to_write_is_refused_before_anything_is_made(tmp_path):
    with pytest.raises(ConfigError, match="pass --out-dir DIR and/or --secret NAME"):
        await certgen(service=NAME, namespace="x")


async def test_the_secret_holds_the_set_and_is_read_back_on_the_next_run(client):
    done = await certgen(service=NAME, namespace="default", secret="webhook-tls",
                         client=client)
    assert done[-1] == "secret default/webhook-tls: created"
    secret = await client.get(Secret, "webhook-tls", namespace="default")
    assert secret.type == "kubernetes.io/tls"
    assert set(secret.data) == {"ca.crt", "ca.key", "tls.crt", "tls.key"}
    again = await certgen(service=NAME, namespace="default", secret="webhook-tls",
                          client=client)
    assert again[0].startswith("kept") and again[-1] == "secret default/webhook-tls: unchanged"

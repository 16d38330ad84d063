"""`gpuslice certgen`: the webhook's certificates in files or a Secret, and the caBundle set.

Owns: where a certificate set is read from and written to (a folder of ca.crt, ca.key,
tls.crt, tls.key; or a kubernetes.io/tls Secret holding the same four keys), and the caBundle
of every webhook in a MutatingWebhookConfiguration. Idempotent: a set certs.ensure keeps is
not rewritten and an equal caBundle is not patched, so it can run at every install/upgrade.
Order when the CA changes: the caBundle first, trusting the new and the old CA, then the new
certificate, so the API server trusts the webhook before and after it reloads the files.
Does not: make or judge certificates (certs.py).
Failure: EnvironmentProblem / kube.errors with what to fix (no API access, the configuration
not created yet); writes go through a temporary file and a rename (never half a key file);
API writes are guarded by resourceVersion and retried on conflict.
RBAC: get, create, patch secrets (in --namespace); get, patch mutatingwebhookconfigurations.
Tests: tests/integration/webhook/test_certgen_against_api.py
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cryptography import x509
from lightkube import AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.admissionregistration_v1 import MutatingWebhookConfiguration
from lightkube.resources.core_v1 import Secret
from lightkube.types import PatchType

from gpuslice.errors import ConfigError
from gpuslice.kube import errors
from gpuslice.kube.client import dict_view, make_client
from gpuslice.kube.patch import retry_on_conflict
from gpuslice.webhook.certs import Bundle, ensure, service_names

__all__ = ["FILES", "certgen", "command", "read_dir", "write_dir"]

FILES = {"ca_cert": "ca.crt", "ca_key": "ca.key", "cert": "tls.crt", "key": "tls.key"}
_SECRET_LABELS = {"app.kubernetes.io/managed-by": "gpuslice-certgen"}


def read_dir(folder: Path) -> Bundle | None:
    try:
        return Bundle(**{f: (folder / name).read_bytes() for f, name in FILES.items()})
    except FileNotFoundError:
        return None


def write_dir(folder: Path, bundle: Bundle) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for field, name in FILES.items():
        path, data = folder / name, getattr(bundle, field)
        if path.is_file() and path.read_bytes() == data:
            continue
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.")
        try:
            os.fchmod(fd, 0o600 if name.endswith(".key") else 0o644)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        written.append(name)
    return written


def _secret_data(bundle: Bundle) -> dict[str, str]:
    return {name: base64.b64encode(getattr(bundle, f)).decode() for f, name in FILES.items()}


async def _read_secret(client: AsyncClient, name: str, namespace: str) -> dict[str, Any] | None:
    try:
        with errors.translate(f"get secret {namespace}/{name}"):
            return dict(await client.get(dict_view(Secret), name, namespace=namespace))
    except errors.NotFound:
        return None


def _bundle_of(secret: dict[str, Any] | None) -> Bundle | None:
    data = (secret or {}).get("data") or {}
    try:
        return Bundle(**{f: base64.b64decode(data[name], validate=True)
                         for f, name in FILES.items()})
    except (KeyError, ValueError, TypeError):
        return None  # missing or garbled: make a new set


async def _write_secret(client: AsyncClient, name: str, namespace: str, bundle: Bundle) -> str:
    data = _secret_data(bundle)

    async def once() -> str:
        current = await _read_secret(client, name, namespace)
        if current is None:
            body = Secret(metadata=ObjectMeta(name=name, namespace=namespace,
                                              labels=_SECRET_LABELS),
                          type="kubernetes.io/tls", data=data)
            with errors.translate(f"create secret {namespace}/{name}"):
                await client.create(body)
            return "created"
        if current.get("data") == data:
            return "unchanged"
        if current.get("type") != "kubernetes.io/tls":
            raise ConfigError(f"secret {namespace}/{name} has type {current.get('type')}, not "
                              "kubernetes.io/tls; delete it or choose another --secret name")
        patch = {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
                 "data": data}
        with errors.translate(f"patch secret {namespace}/{name}"):
            await client.patch(dict_view(Secret), name, patch, namespace=namespace,
                               patch_type=PatchType.MERGE)
        return "updated"

    return await retry_on_conflict(once)


def _still_valid_ca(pem: bytes | None, now: dt.datetime) -> bytes:
    try:
        return pem if pem and x509.load_pem_x509_certificate(pem).not_valid_after_utc > now \
            else b""
    except ValueError:
        return b""


async def _patch_ca_bundle(client: AsyncClient, name: str, ca: bytes) -> str:
    encoded = base64.b64encode(ca).decode()

    async def once() -> str:
        try:
            with errors.translate(f"get mutatingwebhookconfiguration {name}"):
                obj = dict(await client.get(dict_view(MutatingWebhookConfiguration), name))
        except errors.NotFound:
            raise ConfigError(f"mutatingwebhookconfiguration {name}: not found; apply the "
                              "webhook manifests first, or leave out --webhook-config") from None
        hooks = obj.get("webhooks") or []
        if not hooks:
            raise ConfigError(f"mutatingwebhookconfiguration {name}: has no webhooks to trust "
                              "the CA; check the manifest")
        if all((h.get("clientConfig") or {}).get("caBundle") == encoded for h in hooks):
            return "unchanged"
        for h in hooks:
            h.setdefault("clientConfig", {})["caBundle"] = encoded
        patch = {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
                 "webhooks": hooks}
        with errors.translate(f"patch mutatingwebhookconfiguration {name}"):
            await client.patch(dict_view(MutatingWebhookConfiguration), name, patch,
                               patch_type=PatchType.MERGE)
        return f"updated ({len(hooks)} webhook{'s' * (len(hooks) != 1)})"

    return await retry_on_conflict(once)


async def certgen(*, service: str, namespace: str, dns: Sequence[str] = (),
                  ips: Sequence[str] = (), days: int = 365, out_dir: str | None = None,
                  secret: str | None = None, webhook_config: str | None = None,
                  client: AsyncClient | None = None) -> list[str]:
    """Make or keep the set, store it, trust its CA; returns what was done, one line each.
    `client` is needed for `secret` and `webhook_config`."""
    if not out_dir and not secret:
        raise ConfigError("nowhere to put the certificate; pass --out-dir DIR and/or "
                          "--secret NAME")
    if (secret or webhook_config) and client is None:
        raise ConfigError("--secret and --webhook-config need the Kubernetes API")
    names = list(dict.fromkeys([*service_names(service, namespace), *dns]))
    current = None
    if secret:
        assert client is not None
        current = _bundle_of(await _read_secret(client, secret, namespace))
    if current is None and out_dir:
        current = read_dir(Path(out_dir))
    try:
        bundle, why = ensure(current, names, ips, days=days)
    except ValueError as exc:
        raise ConfigError(f"--ip: {exc}; give IPv4 or IPv6 addresses") from None
    cert = x509.load_pem_x509_certificate(bundle.cert)
    done = [f"kept the certificate for {names[2]} (expires {cert.not_valid_after_utc:%Y-%m-%d})"
            if why is None else f"made a new certificate for {names[2]}: {why}"]
    if webhook_config:
        assert client is not None
        old = b"" if current is None or current.ca_cert == bundle.ca_cert else \
            _still_valid_ca(current.ca_cert, dt.datetime.now(dt.UTC))
        result = await _patch_ca_bundle(client, webhook_config, bundle.ca_cert + old)
        done.append(f"caBundle of mutatingwebhookconfiguration {webhook_config}: {result}")
    if secret:
        assert client is not None
        result = await _write_secret(client, secret, namespace, bundle)
        done.append(f"secret {namespace}/{secret}: {result}")
    if out_dir:
        written = write_dir(Path(out_dir), bundle)
        done.append(f"{out_dir}: wrote {', '.join(written)}" if written
                    else f"{out_dir}: unchanged")
    return done


def command(*, kubeconfig: str | None = None, **kw: Any) -> None:
    """`gpuslice certgen`: one line per thing done, on stdout."""

    async def go() -> list[str]:
        needs_api = kw.get("secret") or kw.get("webhook_config")
        client = make_client(kubeconfig) if needs_api else None
        try:
            return await certgen(client=client, **kw)
        finally:
            if client is not None:
                await client.close()

    for line in asyncio.run(go()):
        print(line)

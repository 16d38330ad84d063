"""Certificates and kubeconfigs for test control planes (in-process or real kube-apiserver).
Owns: a throwaway CA, a serving certificate for 127.0.0.1/localhost, an admin client
certificate (CN admin, O system:masters: every right under RBAC), a service-account signing
key, and the admin kubeconfig that kubectl and lightkube read.
EC P-256 keys: generating them takes milliseconds, so every server can have its own.
Tests: tests/integration/kubeapi/test_envtest_launch_plan.py (kubeconfig contents)"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

HOSTS = ("127.0.0.1", "localhost")


@dataclass(frozen=True)
class Pki:
    ca_cert: bytes  # PEM
    ca_key: bytes
    serving_cert: bytes
    serving_key: bytes
    client_cert: bytes
    client_key: bytes

    def write(self, folder: Path) -> dict[str, Path]:
        """Write every PEM into `folder`; return their paths by name (`ca.crt`, ...)."""
        folder.mkdir(parents=True, exist_ok=True)
        files = {"ca.crt": self.ca_cert, "ca.key": self.ca_key,
                 "serving.crt": self.serving_cert, "serving.key": self.serving_key,
                 "admin.crt": self.client_cert, "admin.key": self.client_key}
        paths = {}
        for name, data in files.items():
            path = folder / name
            path.write_bytes(data)
            path.chmod(0o600)
            paths[name] = path
        return paths


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _cert(subject: x509.Name, key: ec.EllipticCurvePrivateKey, issuer: x509.Name,
          issuer_key: ec.EllipticCurvePrivateKey, *, ca: bool = False,
          sans: list[x509.GeneralName] | None = None, client: bool = False) -> bytes:
    now = dt.datetime.now(dt.UTC)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(minutes=5))
               .not_valid_after(now + dt.timedelta(days=7))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False,
            encipher_only=False, decipher_only=False), critical=True)
    else:
        usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(issuer_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def make_pki(hosts: tuple[str, ...] = HOSTS) -> Pki:
    ca_key, serving_key, client_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpuslice-test-ca")])
    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    serving = _cert(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]),
                    serving_key, ca_name, ca_key, sans=sans)
    client = _cert(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                              x509.NameAttribute(NameOID.COMMON_NAME, "admin")]),
                   client_key, ca_name, ca_key, client=True)
    return Pki(_cert(ca_name, ca_key, ca_name, ca_key, ca=True), _key_pem(ca_key),
               serving, _key_pem(serving_key), client, _key_pem(client_key))


def service_account_key() -> bytes:
    """A PEM signing key for kube-apiserver's --service-account-* flags and
    kube-controller-manager's --service-account-private-key-file. Traditional (SEC1) PEM:
    kube-apiserver reads its public half with keyutil, which refuses PKCS#8 ("data does not
    contain any valid RSA or ECDSA public keys")."""
    key = ec.generate_private_key(ec.SECP256R1())
    return key.private_bytes(serialization.Encoding.PEM,
                             serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())


def kubeconfig(server: str, pki: Pki, *, name: str = "gpuslice-test") -> dict:
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return {
        "apiVersion": "v1", "kind": "Config", "current-context": name, "preferences": {},
        "clusters": [{"name": name, "cluster": {
            "server": server, "certificate-authority-data": b64(pki.ca_cert)}}],
        "users": [{"name": "admin", "user": {
            "client-certificate-data": b64(pki.client_cert),
            "client-key-data": b64(pki.client_key)}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": "admin",
                                                "namespace": "default"}}],
    }


def write_kubeconfig(path: Path, server: str, pki: Pki) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(kubeconfig(server, pki), sort_keys=False))
    path.chmod(0o600)
    return path

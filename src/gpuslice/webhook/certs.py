"""The webhook's certificates: a private CA and a serving certificate it signs (PEM).

Owns: making them (ECDSA P-256, SHA-256), the names a Service is reached by, and deciding
whether an existing set can be kept: same SANs, signed by the CA, keys matching, and more than
`renew_days` left on both. A CA that is still good is kept when only the serving certificate
is renewed, so the webhook configuration's caBundle does not change.
Does not: read or write files or the API (certgen.py), or serve TLS (tls.py).
Failure: an unreadable existing set is a reason to make a new one, never an error.
Tests: tests/unit/webhook/test_certs.py
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence

import msgspec
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["Bundle", "ensure", "service_names"]

ONE_DAY = dt.timedelta(days=1)
_SKEW = dt.timedelta(minutes=5)  # valid a little before "now": API server clocks differ


class Bundle(msgspec.Struct, frozen=True, kw_only=True):
    """PEM bytes of the CA and the serving certificate with their keys."""

    ca_cert: bytes
    ca_key: bytes
    cert: bytes
    key: bytes


def service_names(service: str, namespace: str) -> list[str]:
    """The DNS names kube-apiserver may use for a Service (it calls `<svc>.<ns>.svc`)."""
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc",
            f"{service}.{namespace}.svc.cluster.local"]


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _builder(subject: str, issuer: x509.Name | None, public: ec.EllipticCurvePublicKey,
             now: dt.datetime, days: int) -> x509.CertificateBuilder:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    return (x509.CertificateBuilder().subject_name(name).issuer_name(issuer or name)
            .public_key(public).serial_number(x509.random_serial_number())
            .not_valid_before(now - _SKEW).not_valid_after(now + days * ONE_DAY)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False))


def _make_ca(now: dt.datetime, days: int) -> tuple[bytes, bytes]:
    key = _key()
    cert = (_builder(f"gpuslice-webhook-ca-{now:%Y%m%d%H%M%S}", None, key.public_key(), now, days)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                         crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def _make_serving(ca_pem: bytes, ca_key_pem: bytes, dns: Sequence[str], ips: Sequence[str],
                  now: dt.datetime, days: int) -> tuple[bytes, bytes]:
    ca = x509.load_pem_x509_certificate(ca_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, None)  # ours, or an RSA/EC one kept
    key = _key()
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns]
    sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in ips]
    cert = (_builder(dns[0] if dns else ips[0], ca.subject, key.public_key(), now, days)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ca_key.public_key()), critical=False)  # type: ignore[arg-type]
            .sign(ca_key, hashes.SHA256()))  # type: ignore[arg-type]
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def _spki(key: object) -> bytes:
    return key.public_bytes(serialization.Encoding.DER,  # type: ignore[attr-defined]
                            serialization.PublicFormat.SubjectPublicKeyInfo)


def _same_key(cert: x509.Certificate, key_pem: bytes) -> bool:
    key = serialization.load_pem_private_key(key_pem, None)
    return _spki(cert.public_key()) == _spki(key.public_key())


def _ca_problem(b: Bundle, now: dt.datetime, renew: dt.timedelta) -> str | None:
    try:
        ca = x509.load_pem_x509_certificate(b.ca_cert)
        if not ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca:
            return "the CA certificate is not a CA"
        if not _same_key(ca, b.ca_key):
            return "the CA key does not match the CA certificate"
    except (ValueError, TypeError, x509.ExtensionNotFound) as exc:
        return f"the CA cannot be read ({exc})"
    if ca.not_valid_after_utc - now < renew:
        return f"the CA expires {ca.not_valid_after_utc:%Y-%m-%d}"
    return None


def _cert_problem(b: Bundle, dns: Sequence[str], ips: Sequence[str], now: dt.datetime,
                  renew: dt.timedelta) -> str | None:
    try:
        ca = x509.load_pem_x509_certificate(b.ca_cert)
        cert = x509.load_pem_x509_certificate(b.cert)
        cert.verify_directly_issued_by(ca)
        if not _same_key(cert, b.key):
            return "the serving key does not match its certificate"
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, TypeError, x509.ExtensionNotFound, InvalidSignature) as exc:
        return f"the serving certificate cannot be used ({exc or type(exc).__name__})"
    have = (set(san.get_values_for_type(x509.DNSName)),
            {str(a) for a in san.get_values_for_type(x509.IPAddress)})
    want = (set(dns), {str(ipaddress.ip_address(a)) for a in ips})
    if have != want:
        return "its names differ from the ones asked for"
    if cert.not_valid_after_utc - now < renew:
        return f"it expires {cert.not_valid_after_utc:%Y-%m-%d}"
    return None


def ensure(existing: Bundle | None, dns: Sequence[str], ips: Sequence[str] = (), *,
           days: int = 365, ca_days: int = 3650, renew_days: int = 30,
           now: dt.datetime | None = None) -> tuple[Bundle, str | None]:
    """(the bundle to use, why it was made new or None when `existing` is kept). `ips` are
    IP address strings; ValueError for one that is not an address."""
    for a in ips:
        ipaddress.ip_address(a)  # ValueError names the bad address
    if not dns and not ips:
        raise ValueError("a serving certificate needs at least one DNS name or IP address")
    now = now or dt.datetime.now(dt.UTC)
    renew = renew_days * ONE_DAY
    if existing is None:
        ca_why: str | None = "no certificate yet"
    else:
        ca_why = _ca_problem(existing, now, renew)
    if existing is not None and ca_why is None:
        why = _cert_problem(existing, dns, ips, now, renew)
        if why is None:
            return existing, None
        ca_cert, ca_key = existing.ca_cert, existing.ca_key
    else:
        why = ca_why
        ca_cert, ca_key = _make_ca(now, ca_days)
    cert, key = _make_serving(ca_cert, ca_key, dns, ips, now, days)
    return Bundle(ca_cert=ca_cert, ca_key=ca_key, cert=cert, key=key), why

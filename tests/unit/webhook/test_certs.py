"""certs.ensure: a good set is kept, anything else is remade with the reason, the CA kept when
it is still good (so the caBundle does not change)."""

from __future__ import annotations

import datetime as dt
import ipaddress

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from gpuslice.webhook.certs import Bundle, ensure, service_names

NAMES = service_names("gpuslice-webhook", "gpuslice-system")
NOW = dt.datetime(2026, 11, 24, tzinfo=dt.UTC)


@pytest.fixture(scope="module")
def bundle():
    made, why = ensure(None, NAMES, ["10.0.0.7"], now=NOW)
    assert why == "no certificate yet"
    return made


def test_the_serving_certificate_names_the_service_and_is_signed_by_the_ca(bundle):
    ca = x509.load_pem_x509_certificate(bundle.ca_cert)
    cert = x509.load_pem_x509_certificate(bundle.cert)
    cert.verify_directly_issued_by(ca)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [
        "gpuslice-webhook", "gpuslice-webhook.gpuslice-system",
        "gpuslice-webhook.gpuslice-system.svc",
        "gpuslice-webhook.gpuslice-system.svc.cluster.local"]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.0.0.7")]
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert isinstance(cert.public_key(), ec.EllipticCurvePublicKey)
    assert cert.not_valid_before_utc < NOW, "valid a few minutes early: clocks differ"
    assert cert.not_valid_after_utc == NOW + dt.timedelta(days=365)


def test_a_valid_set_for_the_same_names_is_kept_as_it_is(bundle):
    kept, why = ensure(bundle, NAMES, ["10.0.0.7"], now=NOW + dt.timedelta(days=100))
    assert why is None and kept is bundle


@pytest.mark.parametrize(("why", "change", "names", "ips", "later"), [
    ("its names differ from the ones asked for", {}, NAMES, [], 0),
    ("its names differ from the ones asked for", {}, [*NAMES, "extra.example"], ["10.0.0.7"], 0),
    ("it expires 2027-11-24", {}, NAMES, ["10.0.0.7"], 340),
    ("the serving key does not match its certificate", {"key": "ca_key"}, NAMES, ["10.0.0.7"], 0),
])
def test_a_serving_certificate_that_cannot_be_kept_is_remade_under_the_same_ca(
        bundle, why, change, names, ips, later):
    given = Bundle(**{**{f: getattr(bundle, f) for f in Bundle.__struct_fields__},
                      **{k: getattr(bundle, v) for k, v in change.items()}})
    made, reason = ensure(given, names, ips, now=NOW + dt.timedelta(days=later))
    assert reason == why
    assert made.ca_cert == bundle.ca_cert, "the caBundle stays valid"
    assert made.cert != bundle.cert
    assert ensure(made, names, ips, now=NOW + dt.timedelta(days=later))[1] is None


def test_a_ca_near_its_end_is_replaced_with_a_new_ca(bundle):
    made, why = ensure(bundle, NAMES, ["10.0.0.7"], now=NOW + dt.timedelta(days=3630))
    assert why.startswith("the CA expires") and made.ca_cert != bundle.ca_cert


@pytest.mark.parametrize("garbage", [b"", b"-----BEGIN CERTIFICATE-----\nAAAA\n", b"\x00" * 10])
def test_garbage_files_are_a_reason_to_remake_never_an_error(bundle, garbage):
    for field in Bundle.__struct_fields__:
        given = Bundle(**{**{f: getattr(bundle, f) for f in Bundle.__struct_fields__},
                          field: garbage})
        made, why = ensure(given, NAMES, ["10.0.0.7"], now=NOW)
        assert why is not None, f"garbage {field} must not be kept"
        assert ensure(made, NAMES, ["10.0.0.7"], now=NOW)[1] is None


def test_a_serving_certificate_from_another_ca_is_remade(bundle):
    other, _ = ensure(None, NAMES, ["10.0.0.7"], now=NOW)
    mixed = Bundle(ca_cert=bundle.ca_cert, ca_key=bundle.ca_key, cert=other.cert, key=other.key)
    assert ensure(mixed, NAMES, ["10.0.0.7"], now=NOW)[1].startswith(
        "the serving certificate cannot be used")


def test_a_bad_ip_address_or_no_name_at_all_is_refused():
    with pytest.raises(ValueError, match=r"999\.1\.1\.1"):
        ensure(None, NAMES, ["999.1.1.1"])
    with pytest.raises(ValueError, match="at least one DNS name or IP address"):
        ensure(None, [], [])

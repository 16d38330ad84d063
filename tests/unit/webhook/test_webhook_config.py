"""The webhook's config: file < GPUSLICE_WEBHOOK_* < flags, every mistake named before start."""

from __future__ import annotations

import pytest

from gpuslice import dialects
from gpuslice.errors import ConfigError
from gpuslice.webhook import config


@pytest.fixture(autouse=True)
def _no_env(monkeypatch):
    import os
    for var in [v for v in os.environ if v.startswith("GPUSLICE_WEBHOOK_")]:
        monkeypatch.delenv(var)


def test_defaults_give_the_documented_options():
    options = config.load(None).options()
    assert (options.scheduler_name, options.opt_out_key, options.opt_out_value) == (
        "gpuslice-scheduler", "gpuslice.io/webhook", "disabled")
    assert options.defaults == dialects.Defaults()


def test_file_then_env_then_flags(tmp_path, monkeypatch):
    path = tmp_path / "webhook.yaml"
    path.write_text("schedulerName: from-file\nport: 9000\ndefaults:\n  memoryMiB: 2048\n"
                    "optOutLabel: example.com/skip\n")
    monkeypatch.setenv("GPUSLICE_WEBHOOK_PORT", "9100")
    monkeypatch.setenv("GPUSLICE_WEBHOOK_DEFAULTS__CORES", "20")
    got = config.load(str(path), port=9443, cert_file=None, key_file="/k")
    assert (got.scheduler_name, got.port, got.cert_file, got.key_file) == (
        "from-file", 9443, "/etc/gpuslice/tls/tls.crt", "/k")
    assert got.options().defaults == dialects.Defaults(memory_mib=2048, cores=20)
    assert got.options().opt_out_key == "example.com/skip"


@pytest.mark.parametrize(("text", "expected"), [
    ("defaults:\n  memoryMiB: 0\n", "defaults: memoryMiB=0: outside 1..1048576"),
    ("defaults:\n  memoryMib: 10\n", "has unknown field `memoryMib`; known keys: cores, memoryMiB"),
    ("port: 70000\n", "port"),
    ("schedulerName: ''\n", "schedulerName"),
    ("logLevel: loud\n", "logLevel"),
    ("tlsReloadSeconds: 0\n", "tlsReloadSeconds"),
])
def test_a_bad_file_is_a_config_error_naming_the_key(tmp_path, text, expected):
    path = tmp_path / "webhook.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        config.load(str(path))
    assert str(caught.value).startswith(f"config {path}: ") and expected in str(caught.value)


def test_a_bad_env_override_names_the_variable(monkeypatch):
    monkeypatch.setenv("GPUSLICE_WEBHOOK_PORT", "eighty")
    with pytest.raises(ConfigError, match=r"^GPUSLICE_WEBHOOK_PORT: port"):
        config.load(None)

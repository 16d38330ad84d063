"""The webhook's settings: one YAML file, `GPUSLICE_WEBHOOK_*` overrides, then flags.

Owns: the schema (every key with its default; docs/webhook.md "Configuration" lists them) and
turning it into admit.Options. Loading, env names and error wording are gpuslice.config's.
Failure: ConfigError naming the file or variable and the key, raised before anything listens.
Tests: tests/unit/webhook/test_webhook_config.py
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from gpuslice import config
from gpuslice.config import DefaultsConfig
from gpuslice.webhook import dra
from gpuslice.webhook.admit import Options

__all__ = ["ENV_PREFIX", "WebhookConfig", "load"]

ENV_PREFIX = "GPUSLICE_WEBHOOK"

_Name = Annotated[str, msgspec.Meta(min_length=1, max_length=253)]
_Seconds = Annotated[float, msgspec.Meta(gt=0, le=3600)]


class DraSection(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """Which GPU pods become DRA claims (webhook/dra.py; docs/dra.md)."""

    enabled: bool = False
    default_path: Literal["device-plugin", "dra"] = msgspec.field(default="device-plugin",
                                                                  name="defaultPath")
    scheduler_name: _Name = msgspec.field(default="default-scheduler", name="schedulerName")
    device_class_name: _Name = msgspec.field(default=dra.DRIVER, name="deviceClassName")
    explain_unschedulable: bool = msgspec.field(default=True, name="explainUnschedulable")

    def build(self) -> dra.DraOptions:
        return dra.DraOptions(enabled=self.enabled, default_path=self.default_path,
                              scheduler_name=self.scheduler_name,
                              device_class=self.device_class_name)


class WebhookConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    scheduler_name: _Name = msgspec.field(default="gpuslice-scheduler", name="schedulerName")
    opt_out_label: _Name = msgspec.field(default="gpuslice.io/webhook", name="optOutLabel")
    opt_out_value: str = msgspec.field(default="disabled", name="optOutValue")
    # GPU pods here may skip gpuslice (opt-out label, another scheduler, spec.nodeName)
    bypass_namespaces: list[_Name] = msgspec.field(default_factory=list,
                                                   name="bypassNamespaces")
    check_namespace_labels: bool = msgspec.field(default=True, name="checkNamespaceLabels")
    namespace_cache_seconds: _Seconds = msgspec.field(default=30.0,
                                                      name="namespaceCacheSeconds")
    defaults: DefaultsConfig = msgspec.field(default_factory=DefaultsConfig)
    dra: DraSection = msgspec.field(default_factory=DraSection)
    address: str = "0.0.0.0"
    port: Annotated[int, msgspec.Meta(ge=1, le=65535)] = 8443
    cert_file: _Name = msgspec.field(default="/etc/gpuslice/tls/tls.crt", name="certFile")
    key_file: _Name = msgspec.field(default="/etc/gpuslice/tls/tls.key", name="keyFile")
    tls_reload_seconds: _Seconds = msgspec.field(default=10.0, name="tlsReloadSeconds")
    kubeconfig: str | None = None
    log_level: Literal["debug", "info", "warning", "error"] = msgspec.field(
        default="info", name="logLevel")

    def options(self) -> Options:
        return Options(scheduler_name=self.scheduler_name, opt_out_key=self.opt_out_label,
                       opt_out_value=self.opt_out_value,
                       bypass_namespaces=frozenset(self.bypass_namespaces),
                       defaults=self.defaults.build(),
                       dra=self.dra.build())


def load(path: str | None, **flags: object) -> WebhookConfig:
    """Defaults < the file at `path` < GPUSLICE_WEBHOOK_* < flags, given by attribute name
    (cert_file=...; None = not given)."""
    wire = {f.name: f.encode_name for f in msgspec.structs.fields(WebhookConfig)}
    return config.load(WebhookConfig, path, env_prefix=ENV_PREFIX,
                       flags={wire[k]: v for k, v in flags.items()})

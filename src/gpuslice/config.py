"""One way to configure every long-running service: defaults < YAML file < env < flags.

Owns: reading a service's config file, applying `<PREFIX>_<KEY>` environment overrides
(`<PREFIX>_<A>__<B>` for nested keys) and command-line flags, and validating the result into
the service's msgspec Struct (its schema, defaults included).
Does not: define a service's keys (each service owns its schema: a msgspec Struct with
`forbid_unknown_fields=True, kw_only=True` and a default for every key), but for `defaults`, the
one section the webhook and the extender share: both must read a pod's request the same way.
Failure: ConfigError naming the file or variable and the key, what is wrong and the fix; unknown
keys are errors (a typo never silently falls back to a default).
Tests: tests/unit/test_config.py
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import yaml

from gpuslice import dialects
from gpuslice.errors import ConfigError

__all__ = ["DefaultsConfig", "load"]

T = TypeVar("T", bound=msgspec.Struct)

_MAX_FILE = 1 << 20  # a config file is a few KiB; more is a wrong path


class _NoAliasLoader(yaml.SafeLoader):
    """Safe YAML without anchors/aliases: a config needs none, and they allow alias bombs."""

    def compose_node(self, parent: Any, index: Any) -> Any:  # type: ignore[override]
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise ConfigError(f"line {event.start_mark.line + 1}: YAML aliases (*name) are not "
                              "allowed in a config file; write the value out")
        return super().compose_node(parent, index)


def _read_file(path: str) -> dict[str, Any]:
    p = Path(path)
    try:
        if p.stat().st_size > _MAX_FILE:
            raise ConfigError(f"config {p}: larger than 1 MiB; check the path")
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config {p}: no such file; check the path or omit --config") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config {p}: cannot read: {exc}; check the file") from None
    try:
        data = yaml.load(text, Loader=_NoAliasLoader)  # a SafeLoader subclass
    except ConfigError as exc:
        raise ConfigError(f"config {p}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config {p}: not valid YAML: {exc}; fix the syntax") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config {p}: expected a mapping of keys to values at the top, got "
                          f"{type(data).__name__}; write `key: value` lines")
    return data


def _known(schema: type[msgspec.Struct], key: str) -> str:
    """The keys allowed in the section `key` ("" = top level, "a.b" nested) of `schema`."""
    info: Any = msgspec.inspect.type_info(schema)
    for part in filter(None, key.split(".")):
        info = next((f.type for f in getattr(info, "fields", ()) if f.encode_name == part), None)
    return ", ".join(sorted(f.encode_name for f in getattr(info, "fields", ())))


def _env_key(name: str) -> str:
    """policyName / policy_name / policy-name -> POLICY_NAME."""
    return re.sub(r"[^A-Za-z0-9]", "_", re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name)).upper()


def _apply_env(schema: type[msgspec.Struct], data: dict[str, Any], prefix: str,
               environ: Mapping[str, str]) -> list[str]:
    """Copy `<PREFIX>_...` variables into `data` (strings; msgspec converts them); returns the
    variable names used, so an error can name the one at fault."""
    used = []
    start = prefix + "_"
    for var, value in sorted(environ.items()):
        if not var.startswith(start):
            continue
        path = var[len(start):].split("__")
        target, info = data, msgspec.inspect.type_info(schema)
        for depth, part in enumerate(path):
            fields = {_env_key(f.encode_name): f for f in getattr(info, "fields", ())}
            field = fields.get(part)
            if field is None:
                known = ", ".join(sorted(start + "__".join([*path[:depth], k]) for k in fields))
                raise ConfigError(f"{var}: no such setting; known: {known}")
            if depth == len(path) - 1:
                target[field.encode_name] = value
            else:
                target = target.setdefault(field.encode_name, {})
                if not isinstance(target, dict):
                    raise ConfigError(f"{var}: {field.encode_name} is not a section; "
                                      "drop the __ part")
                info = field.type
        used.append(var)
    return used


def load(schema: type[T], path: str | None = None, *, env_prefix: str,
         flags: Mapping[str, Any] | None = None,
         environ: Mapping[str, str] | None = None) -> T:
    """The service's validated config: `schema`'s defaults, then the YAML file at `path`, then
    `<env_prefix>_<KEY>` variables, then `flags` whose value is not None (top-level keys)."""
    data = _read_file(path) if path else {}
    where = f"config {path}" if path else "config"
    env_used = _apply_env(schema, data, env_prefix, os.environ if environ is None else environ)
    for key, value in (flags or {}).items():
        if value is not None:
            data[key] = value
    try:
        return msgspec.convert(data, schema, strict=False)
    except msgspec.ValidationError as exc:
        text = str(exc)
        at = text.rsplit(" - at `$.", 1)
        key = at[1].rstrip("`") if len(at) == 2 else ""
        what = at[0]
        first = key.split(".")[0].split("[")[0]
        env = [v for v in env_used if v.split("__")[0] == f"{env_prefix}_{_env_key(first)}"]
        source = env[0] if env else where
        if what.startswith("Object contains unknown field"):
            where_key = f"{key}: " if key else ""
            raise ConfigError(f"{source}: {where_key}{what.replace('Object contains', 'has')}; "
                              f"known keys: {_known(schema, key)}") from None
        raise ConfigError(f"{source}: {key or 'value'}: {what}; fix the value "
                          "(docs/configuration.md lists every key)") from None


class DefaultsConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """What a slice request gets for a dimension it leaves out (dialects.Defaults)."""

    memory_mib: int | None = msgspec.field(default=None, name="memoryMiB")
    memory_percent: int | None = msgspec.field(default=None, name="memoryPercent")
    cores: int = 0

    def __post_init__(self) -> None:
        try:
            self.build()
        except ValueError as exc:  # msgspec -> ConfigError naming `defaults`; say it our way
            text = str(exc).removeprefix("defaults: ")
            raise ValueError(text.replace("memory_mib", "memoryMiB")
                             .replace("memory_percent", "memoryPercent")) from None

    def build(self) -> dialects.Defaults:
        percent = self.memory_percent
        if percent is None and self.memory_mib is None:
            percent = 100
        return dialects.Defaults(memory_mib=self.memory_mib, memory_percent=percent,
                                 cores=self.cores)

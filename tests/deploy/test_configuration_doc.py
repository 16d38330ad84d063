"""docs/configuration.md lists every setting with the default the code really has: each chart
value (values.schema.json's paths, defaults from values.yaml), each key of the three services'
config schemas and each option of `gpuslice scheduler|webhook|certgen|node-agent`. A setting
added to the code or the chart fails here until the page describes it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from gpuslice.cli import main as cli
from gpuslice.node.settings import NodeConfig
from gpuslice.scheduler.config import SchedulerConfig
from gpuslice.webhook.config import WebhookConfig

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "configuration.md"
CHART = ROOT / "deploy" / "helm" / "gpuslice"
SERVICES = {"gpuslice scheduler": SchedulerConfig(), "gpuslice webhook": WebhookConfig(),
            "gpuslice node-agent": NodeConfig()}
COMMANDS = ("scheduler", "webhook", "certgen", "node-agent")
SECTION = object()  # a config section passed through to a service: its keys have defaults
_ROW = re.compile(r"^\|\s*(`[^|]+`(?:\s*,\s*`[^|]+`)*)\s*\|\s*([^|]*?)\s*\|", re.M)


def shown(value: Any) -> str:
    """A default as the page writes it: `unset` for none, else the value in backticks."""
    if value is None:
        return "unset"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool | list | dict):
        value = json.dumps(value, separators=(", ", ": "))
    return f"`{value if value != '' else chr(34) * 2}`"


def sections() -> dict[str, str]:
    """`## heading` -> its text, for the page's second-level sections."""
    parts = re.split(r"^## (.+)$", PAGE.read_text(), flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def section(command: str) -> str:
    found = [text for head, text in sections().items() if f"`{command}`" in head]
    assert len(found) == 1, f"docs/configuration.md: one section whose heading names `{command}`"
    return found[0]


def rows(text: str) -> dict[str, str]:
    """Table rows: each name in the first cell (`a`, `b`) -> the second cell, or its part in
    the same position when that cell lists as many values (`1`, `2`)."""
    out = {}
    for first, second in _ROW.findall(text):
        names = re.findall(r"`([^`]+)`", first)
        values = second.split("`, `")
        if len(names) > 1 and len(values) == len(names):
            values = [v if v.startswith("`") else "`" + v for v in values]
            second = [v if v.endswith("`") else v + "`" for v in values]
        for i, name in enumerate(names):
            out[name] = second[i] if isinstance(second, list) else second
    return out


def config_keys(struct: msgspec.Struct, prefix: str = "") -> dict[str, Any]:
    """Dotted wire names -> defaults, nested structs flattened (leaderElection.leaseName)."""
    out = {}
    for f in msgspec.structs.fields(struct):
        value = getattr(struct, f.name)
        if isinstance(value, msgspec.Struct):
            out.update(config_keys(value, f"{prefix}{f.encode_name}."))
        else:
            out[prefix + f.encode_name] = value
    return out


def chart_values() -> dict[str, Any]:
    """values.schema.json's paths -> values.yaml's default; the services' config sections
    (schema $ref: no default of their own, SECTION) by the keys values.yaml sets in them."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    out: dict[str, Any] = {}

    def flat(value: Any, path: str) -> None:
        out[path] = SECTION if isinstance(value, dict) else value
        for k, v in (value.items() if isinstance(value, dict) else ()):
            flat(v, f"{path}.{k}")

    def walk(node: dict[str, Any], value: Any, path: str) -> None:
        if "$ref" in node:
            flat(value, path)
        elif "properties" in node:
            for k, child in node["properties"].items():
                walk(child, value[k], f"{path}.{k}" if path else k)
        else:
            out[path] = value

    walk(schema, values, "")
    return out


def test_every_chart_value_is_listed_with_its_default():
    table = rows(sections()["Chart values"])
    missing = [k for k in chart_values() if k not in table]
    assert not missing, f"chart values missing from docs/configuration.md: {missing}"
    wrong = {k: (table[k], shown(v)) for k, v in chart_values().items()
             if v is not SECTION and not table[k].startswith(shown(v))}
    assert not wrong, f"defaults that differ from values.yaml (page, chart): {wrong}"


@pytest.mark.parametrize("command", SERVICES)
def test_every_config_key_of_each_service_is_listed_with_its_default(command):
    table = rows(section(command))
    keys = config_keys(SERVICES[command])
    missing = [k for k in keys if k not in table]
    assert not missing, f"{command}: config keys missing from docs/configuration.md: {missing}"
    wrong = {k: (table[k], shown(v)) for k, v in keys.items()
             if k != "nodeName" and not table[k].startswith(shown(v))}
    assert not wrong, f"{command}: defaults that differ from the code (page, code): {wrong}"


@pytest.mark.parametrize("name", COMMANDS)
def test_every_option_of_each_command_is_listed(name):
    text = section(f"gpuslice {name}")
    options = [o for p in cli.commands[name].params for o in p.opts if o.startswith("--")]
    missing = [o for o in options if f"`{o}" not in text]
    assert not missing, f"gpuslice {name}: options missing from docs/configuration.md: {missing}"


def test_the_checks_notice_a_missing_key():
    """The row parser finds names only in a table's first cell, so prose cannot satisfy it."""
    assert rows("| `a`, `b` | `1` | x |\nsee `c` here\n") == {"a": "`1`", "b": "`1`"}
    assert rows("| `a`, `b` | `1`, `{2, 3}` | x |") == {"a": "`1`", "b": "`{2, 3}`"}
    assert shown(None) == "unset" and shown(30.0) == "`30`" and shown("") == '`""`'
    assert shown(["kube-system"]) == '`["kube-system"]`' and shown(False) == "`false`"

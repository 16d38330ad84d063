"""docs/metrics.md and the Grafana dashboard name exactly the metrics the node agent exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

from gpuslice import model
from gpuslice.node.exporter import AgentMetrics, UsageCollector
from gpuslice.node.nvml import FakeBackend

REPO = Path(__file__).resolve().parents[3]
NAME = re.compile(r"\bgpuslice_[a-z_]+[a-z]\b")


def exported(tmp_path) -> set[str]:
    backend = FakeBackend.with_count(1)
    gpus = [model.GPU(uuid=d.uuid, model=d.model, memory_mib=1) for d in backend.devices()]
    m = AgentMetrics()
    m.add_usage(UsageCollector(backend, tmp_path, lambda: gpus, dict, dict))
    out = set()
    for fam in m.registry.collect():
        out.add(fam.name + "_total" if fam.type == "counter" else fam.name)
    return out


def test_every_dashboard_expression_uses_exported_metrics(tmp_path):
    names = exported(tmp_path)
    dash = json.loads((REPO / "deploy/grafana/gpuslice-dashboard.json").read_text())
    used = set()
    for panel in dash["panels"]:
        for target in panel["targets"]:
            found = set(NAME.findall(target["expr"]))
            assert found, f"panel {panel['title']!r} queries no gpuslice metric"
            assert found <= names, f"panel {panel['title']!r}: {found - names} not exported"
            used |= found
    query = dash["templating"]["list"][1]["query"]
    assert set(NAME.findall(query)) <= names


def test_docs_list_every_exported_metric_and_no_other(tmp_path):
    names = exported(tmp_path)
    documented = set(NAME.findall((REPO / "docs/metrics.md").read_text()))
    assert names - documented == set(), "exported but not in docs/metrics.md"
    assert documented - names == set(), "in docs/metrics.md but not exported"

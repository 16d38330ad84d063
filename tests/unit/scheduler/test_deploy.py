"""The shipped kube-scheduler and extender configurations agree with the code."""

from __future__ import annotations

from pathlib import Path

import yaml

from gpuslice import dialects, handoff
from gpuslice.scheduler import config

DEPLOY = Path(__file__).parents[3] / "deploy" / "scheduler"


def test_the_extender_manages_every_dialect_resource_and_the_scheduler_counts_device_ones():
    doc = yaml.safe_load((DEPLOY / "kube-scheduler-config.yaml").read_text())
    assert doc["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert [p["schedulerName"] for p in doc["profiles"]] == ["default-scheduler",
                                                             "gpuslice-scheduler"]
    (ext,) = doc["extenders"]
    assert (ext["filterVerb"], ext["prioritizeVerb"], ext["bindVerb"]) == (
        "filter", "prioritize", "bind")
    assert ext["nodeCacheCapable"] is True and ext["ignorable"] is False
    managed = {r["name"]: r["ignoredByScheduler"] for r in ext["managedResources"]}
    assert set(managed) == set(dialects.RESOURCE_NAMES), "every dialect's names, no others"
    device = set(handoff.DEVICE_RESOURCES.values())
    assert {n for n, ignored in managed.items() if not ignored} == device, \
        "the node agent advertises device resources: kube-scheduler must count them"


def test_the_example_extender_config_loads_and_equals_the_defaults():
    path = DEPLOY / "scheduler-config.yaml"
    assert config.load(str(path)) == config.load(None)

"""The shipped kube-scheduler and extender configurations agree with the code."""

from __future__ import annotations

from pathlib import Path

import msgspec
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
    assert (ext["filterVerb"], ext["prioritizeVerb"], ext["bindVerb"], ext["preemptVerb"]) == (
        "filter", "prioritize", "bind", "preempt")
    assert ext["nodeCacheCapable"] is True and ext["ignorable"] is False
    managed = {r["name"]: r["ignoredByScheduler"] for r in ext["managedResources"]}
    assert set(managed) == set(dialects.RESOURCE_NAMES), "every dialect's names, no others"
    device = set(handoff.DEVICE_RESOURCES.values())
    assert {n for n, ignored in managed.items() if not ignored} == device, \
        "the node agent advertises device resources: kube-scheduler must count them"


def test_the_example_extender_config_loads_and_leads_with_its_kube_scheduler():
    cfg = config.load(str(DEPLOY / "scheduler-config.yaml"))
    default = config.load(None)
    assert msgspec.structs.replace(cfg, metrics_address="", leader_election=default.
                                   leader_election) == default, \
        "the example shows every default, plus the metrics listener and the Lease it follows"
    doc = yaml.safe_load((DEPLOY / "kube-scheduler-config.yaml").read_text())
    assert doc["extenders"][0]["urlPrefix"] == f"http://{cfg.address}:{cfg.port}"
    assert cfg.address == "127.0.0.1", "bind has no authentication: loopback only"
    le = cfg.leader_election
    assert le.follow and (le.lease_name, le.lease_namespace) == (
        doc["leaderElection"]["resourceName"], doc["leaderElection"]["resourceNamespace"]), \
        "the extender that binds must be the one its leading kube-scheduler calls"

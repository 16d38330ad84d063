"""The node agent's configuration: one validated file (+ GPUSLICE_NODE_* env, + flags).

Owns: the schema `NodeConfig` (every key, its default and meaning; docs/node-agent.md lists
them) and `load()`. Precedence (config.load): defaults < YAML file < GPUSLICE_NODE_<KEY>
(nested: GPUSLICE_NODE_WATCHDOG__KILL) < command-line flags.
Failure: ConfigError naming the file or variable and the key (exit 1), at start.
Tests: tests/unit/node/test_settings.py
"""

from __future__ import annotations

import re
from typing import Any, Literal

import msgspec

from gpuslice import config, handoff
from gpuslice.dra import DRIVER
from gpuslice.errors import ConfigError

__all__ = ["DraConfig", "MigConfig", "NodeConfig", "WatchdogConfig", "load"]

_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class WatchdogConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    interval_seconds: float = msgspec.field(name="intervalSeconds", default=5.0)
    kill: bool = False  # SIGKILL violators (else report only)
    tolerance_mib: int = msgspec.field(name="toleranceMiB", default=16)
    unmanaged: bool = True  # report processes on shared GPUs that run without the library
    region_grace_seconds: float = msgspec.field(name="regionGraceSeconds", default=300.0)


class DraConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The DRA driver (docs/dra.md): slices, the kubelet DRA plugin, CDI specs."""

    enabled: bool = False
    driver_name: str = msgspec.field(name="driverName", default=DRIVER)
    plugin_dir: str = msgspec.field(name="pluginDir", default=f"/var/lib/kubelet/plugins/{DRIVER}")
    registry_dir: str = msgspec.field(name="registryDir",
                                      default="/var/lib/kubelet/plugins_registry")
    cdi_dir: str = msgspec.field(name="cdiDir", default="/var/run/cdi")
    memory_step_mib: int = msgspec.field(name="memoryStepMiB", default=256)


class MigConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """MIG mode's geometry (docs/mig.md): GPU model substring -> profile names pods may get
    (longest match wins; a model no key matches offers every profile its GPU has)."""

    profiles: dict[str, list[str]] = msgspec.field(default_factory=dict)


class NodeConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    node_name: str = msgspec.field(name="nodeName", default="")
    kubeconfig: str | None = None
    gpu_backend: str = msgspec.field(name="gpuBackend", default="nvml")
    device_plugin_dir: str = msgspec.field(name="devicePluginDir",
                                           default="/var/lib/kubelet/device-plugins")
    pod_resources_socket: str = msgspec.field(
        name="podResourcesSocket", default="/var/lib/kubelet/pod-resources/kubelet.sock")
    state_dir: str = msgspec.field(name="stateDir", default="/var/lib/gpuslice")
    resources: list[str] = msgspec.field(
        default_factory=lambda: list(handoff.DEVICE_RESOURCES.values()))
    # the node's GPUs go to one path: its label gpuslice.io/gpu-path, else this (node/path.py)
    gpu_path: Literal["device-plugin", "dra"] = msgspec.field(name="gpuPath",
                                                             default="device-plugin")
    # per-node overrides of what the inventory says
    split_count: int = msgspec.field(name="splitCount", default=10)
    memory_scaling: float = msgspec.field(name="memoryScaling", default=1.0)
    hide_gpus: list[str] = msgspec.field(name="hideGPUs", default_factory=list)
    # what containers get
    cdi: bool = False
    compute_mode: Literal["hard", "work-conserving"] = msgspec.field(name="computeMode",
                                                                     default="hard")
    container_library_path: str = msgspec.field(name="containerLibraryPath",
                                                default="/usr/local/gpuslice/lib/libgpuslice.so")
    container_region_dir: str = msgspec.field(name="containerRegionDir",
                                              default="/var/run/gpuslice")
    # timing
    in_flight_timeout_seconds: float = msgspec.field(name="inFlightTimeoutSeconds", default=30.0)
    allocated_mark_after_seconds: float = msgspec.field(name="allocatedMarkAfterSeconds",
                                                        default=2.0)
    inventory_interval_seconds: float = msgspec.field(name="inventoryIntervalSeconds",
                                                      default=300.0)
    pod_resync_seconds: float = msgspec.field(name="podResyncSeconds", default=300.0)
    verify_interval_seconds: float = msgspec.field(name="verifyIntervalSeconds", default=10.0)
    xid_recovery_seconds: float = msgspec.field(name="xidRecoverySeconds", default=300.0)
    health_interval_seconds: float = msgspec.field(name="healthIntervalSeconds", default=5.0)
    watchdog: WatchdogConfig = msgspec.field(default_factory=WatchdogConfig)
    dra: DraConfig = msgspec.field(default_factory=DraConfig)
    # shim: shared slices through the library; mig: MIG instances (docs/mig.md)
    mode: Literal["shim", "mig"] = "shim"
    mig: MigConfig = msgspec.field(default_factory=MigConfig)
    # service
    metrics_address: str = msgspec.field(name="metricsAddress", default="0.0.0.0:9400")
    log_level: str = msgspec.field(name="logLevel", default="info")


def _check(c: NodeConfig, where: str) -> None:
    problems = []
    if not c.node_name:
        problems.append("nodeName: empty; pass --node-name (in a DaemonSet: the downward API's "
                        "spec.nodeName into GPUSLICE_NODE_NODE_NAME)")
    if not 1 <= c.split_count <= 1000:
        problems.append(f"splitCount={c.split_count}: use 1..1000 slices per GPU")
    if not 0 < c.memory_scaling <= 10:
        problems.append(f"memoryScaling={c.memory_scaling}: use a factor in (0, 10]; 1 = the "
                        "GPU's real memory")
    unknown = [r for r in c.resources if r not in handoff.REPLICAS_PER_GPU]
    if unknown or not (c.resources or c.dra.enabled):
        problems.append(f"resources={c.resources}: use some of "
                        f"{', '.join(handoff.REPLICAS_PER_GPU)} (none only with dra.enabled: "
                        "a node that serves DRA alone)")
    if c.gpu_path == "dra" and not c.dra.enabled:
        problems.append("gpuPath=dra without dra.enabled: enable DRA (the chart's dra.enabled) "
                        "or use gpuPath=device-plugin")
    if c.gpu_path == "device-plugin" and not c.resources:
        problems.append("gpuPath=device-plugin with resources=[]: name the device resources to "
                        "serve, or use gpuPath=dra")
    port = c.metrics_address.rpartition(":")[2]
    if not port.isdigit() or not 0 <= int(port) < 65536:
        problems.append(f"metricsAddress={c.metrics_address!r}: use HOST:PORT, e.g. 0.0.0.0:9400")
    for key in ("in_flight_timeout_seconds", "inventory_interval_seconds", "pod_resync_seconds",
                "verify_interval_seconds", "health_interval_seconds"):
        if getattr(c, key) <= 0:
            problems.append(f"{key}: must be above 0")
    if not 0 <= c.allocated_mark_after_seconds <= 3600:
        problems.append(f"allocatedMarkAfterSeconds={c.allocated_mark_after_seconds}: use 0..3600 "
                        "(0: mark every pod at once; default 2)")
    if not 1 <= c.dra.memory_step_mib <= 1 << 20:
        problems.append(f"dra.memoryStepMiB={c.dra.memory_step_mib}: use 1..1048576 MiB (default "
                        "256): the step of the memory a DRA claim can ask for")
    if not _DNS_SUBDOMAIN.fullmatch(c.dra.driver_name) or len(c.dra.driver_name) > 63:
        problems.append(f"dra.driverName={c.dra.driver_name!r}: use a DNS subdomain of at most 63 "
                        f"characters, e.g. {DRIVER}")
    if c.mode == "mig" and c.dra.enabled:
        problems.append("mode=mig with dra.enabled: MIG instances are served on the device "
                        "plugin path only; disable dra on MIG nodes")
    problems += [f"mig.profiles[{k!r}]: empty; list the profiles pods may get, e.g. "
                 "[1g.10gb, 3g.40gb], or remove the key"
                 for k, v in c.mig.profiles.items() if not v]
    if problems:
        raise ConfigError("\n".join(f"{where}: {p}" for p in problems))


def load(path: str | None, flags: dict[str, Any] | None = None,
         environ: dict[str, str] | None = None) -> NodeConfig:
    c = config.load(NodeConfig, path, env_prefix="GPUSLICE_NODE", flags=flags, environ=environ)
    _check(c, f"config {path}" if path else "config")
    return c

"""Which path a node's GPUs take: device plugins or DRA, never both (docs/dra.md).

Owns: the node label `gpuslice.io/gpu-path` (dra | device-plugin; absent: the config's
`gpuPath`), the path the node serves now (journalled to `<state-dir>/gpu-path`, so a restart
keeps it even while the API server is away), and the switch: when the label asks for the other
path, the current one first drains (it advertises every GPU unhealthy, or an empty
ResourceSlice, so nothing new is placed there) and the switch happens only once no pod holds a
GPU through it (the kubelet's PodResources; DRA: claims still prepared). A path the agent
cannot serve (DRA off in its config, no device resources) is refused with a problem string.
Does not: start or stop plugins (node/agent.py does, on what `serving` says) or read the API.
Invariant: at any time at most one path advertises GPUs.
Tests: tests/unit/node/test_gpu_path.py, tests/integration/node/test_gpu_path_per_node.py,
tests/integration/real_node/test_real_node_gpu_path.py (the real kubelet)
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from gpuslice import handoff, model
from gpuslice.files import write_atomic
from gpuslice.node import verify
from gpuslice.node.allocate import Answer
from gpuslice.node.plugin import Source

__all__ = ["DEVICE_PLUGIN", "DRA", "LABEL", "PATHS", "GpuPath", "Offer", "Step", "decide",
           "device_plugin_holders", "wanted"]

log = logging.getLogger(__name__)
LABEL = "gpuslice.io/gpu-path"
DEVICE_PLUGIN, DRA = "device-plugin", "dra"
PATHS = (DEVICE_PLUGIN, DRA)
_SHOWN = 5  # holders named in a message


def wanted(labels: Mapping[str, str], default: str,
           available: Collection[str]) -> tuple[str | None, str | None]:
    """(the path the node's label asks for, else `default`; a problem). None: keep the current
    path (the label is wrong, or names a path this agent cannot serve)."""
    value = labels.get(LABEL)
    if value is None:
        return default, None
    if value not in PATHS:
        return None, (f"node label {LABEL}={value!r}: use dra or device-plugin (or remove it "
                      f"for the chart's default, {default})")
    if value not in available:
        fix = ("set dra.enabled=true in the chart" if value == DRA else
               "give the agent device resources (nodeAgent.config.resources)")
        return None, (f"node label {LABEL}={value}, but this agent cannot serve that path: "
                      f"{fix}, or label the node {LABEL}={next(iter(available))}")
    return value, None


@dataclass(frozen=True)
class Step:
    """What the node serves after one look."""

    path: str
    draining: bool  # the label asks for the other path: advertise nothing new here
    problem: str | None  # for /readyz and the log


def decide(current: str, want: str | None, holders: Sequence[str] | None) -> Step:
    """The next step from `current` towards `want`; `holders`: the pods (ns/name) that hold GPUs
    through `current` (None: cannot tell, so the switch waits)."""
    if want is None or want == current:
        return Step(current, False, None)
    if holders is None:
        return Step(current, True, f"switching the GPUs from {current} to {want} waits: "
                                   f"cannot tell which pods hold GPUs through {current}")
    if holders:
        named = ", ".join(holders[:_SHOWN]) + (f" and {len(holders) - _SHOWN} more"
                                               if len(holders) > _SHOWN else "")
        return Step(current, True, f"switching the GPUs from {current} to {want} waits for "
                                   f"{len(holders)} pod(s) holding GPUs through {current} "
                                   f"({named}); no new pod gets a GPU here meanwhile")
    return Step(want, False, None)


async def device_plugin_holders(socket: str) -> list[str] | None:
    """ns/name of every pod the kubelet gave a gpuslice device resource; None if it does not
    answer."""
    try:
        actual = await verify.list_pod_resources(socket)
    except Exception as exc:  # grpc errors, a missing socket
        log.warning("PodResources List failed: %s", exc)
        return None
    ours = set(handoff.DEVICE_RESOURCES.values())
    return sorted(f"{ns}/{name}" for (ns, name), containers in actual.items()
                  if any(r in ours and ids for c in containers.values() for r, ids in c.items()))


class GpuPath:
    """The node's path, its journal and the label last seen on its Node."""

    def __init__(self, journal: Path, *, default: str, available: Collection[str]) -> None:
        self.journal = journal
        self.default = default
        self.available = tuple(p for p in PATHS if p in available)
        self.labels: dict[str, str] | None = None  # None: the Node not read yet
        self.draining = False
        self.problem: str | None = None
        self.current = self._load() or default

    def _load(self) -> str | None:
        with contextlib.suppress(OSError):
            text = self.journal.read_text().strip()
            if text in self.available:
                return text
            log.warning("%s says %r, not a path this agent serves (%s); ignored", self.journal,
                        text, ", ".join(self.available))
        return None

    def _save(self) -> None:
        write_atomic(self.journal, f"{self.current}\n".encode(), 0o600)

    def on_node(self, node: Mapping[str, Any] | None) -> None:
        """The agent's Node as the API server has it (None: deleted)."""
        self.labels = dict((node or {}).get("metadata", {}).get("labels") or {})

    def want(self) -> tuple[str | None, str | None]:
        if self.labels is None:  # not read yet: stay where the journal says
            return None, None
        return wanted(self.labels, self.default, self.available)

    def settle(self, holders: Sequence[str] | None) -> bool:
        """Apply one step; True when the path or the draining changed. `holders`: the pods
        holding GPUs through the current path (only read when the label asks for another)."""
        want, problem = self.want()
        step = decide(self.current, want, holders)
        changed = (step.path, step.draining) != (self.current, self.draining)
        if step.path != self.current:
            log.info("GPU path switched", extra={"from": self.current, "to": step.path})
        self.current, self.draining = step.path, step.draining
        self.problem = problem or step.problem
        if changed or not self.journal.exists():
            self._save()
        return changed

    def switching(self) -> bool:
        """The label asks for another path than the current one."""
        want = self.want()[0]
        return want is not None and want != self.current

    def advertised(self, path: str, gpus: Sequence[model.GPU]) -> tuple[model.GPU, ...]:
        """What `path` may offer of `gpus`: all of them on the current path, every one
        unhealthy while it drains or on the other path."""
        if path == self.current and not self.draining:
            return tuple(gpus)
        return tuple(msgspec.structs.replace(g, healthy=False) for g in gpus)


class Offer:
    """The agent as the device plugins see it (plugin.Source): its GPUs as `GpuPath` lets the
    device-plugin path advertise them."""

    def __init__(self, source: Source, path: GpuPath) -> None:
        self.source, self.path = source, path

    def gpus(self) -> Sequence[model.GPU]:
        return self.path.advertised(DEVICE_PLUGIN, self.source.gpus())

    async def allocate(self, resource: str, device_ids: Sequence[str]) -> Answer:
        return await self.source.allocate(resource, device_ids)

    async def preferred(self, resource: str, available: Sequence[str],
                        must_include: Sequence[str], size: int) -> list[str]:
        return await self.source.preferred(resource, available, must_include, size)

"""The watchdog: NVML's view of who holds GPU memory, checked against the containers' limits.

Owns: finding (1) containers whose processes hold more than their limit on a GPU (NVML's
per-process used memory, summed per container, beyond `toleranceMiB`) and (2) processes on a
GPU shared through gpuslice whose pid is in no region slot (they run without the library:
static CUDA, a cleared ld.so.preload, a binary that ignores it); reporting each once per
process (event LimitViolation on the pod, metric, log), and SIGKILL when configured; and
removing the region directories of pods that no longer exist, and gang directories no live pod
names (`gangs_root`), after a grace period, only with a fresh pod list: never while the API
server is away. DRA claims' regions (`claims_root`;
pod_uid = the claim uid, container empty) are checked against the caps the DRA plugin prepared
(`claims`: a tenant can rewrite its region's), never swept here (the DRA plugin removes them).
Whose process: region slots hold pids as the container sees them, NVML here lists host pids;
they are joined on (innermost pid, start time) from /proc/<pid>/status and stat.
Does not: enforce anything inside containers (the library does; this is the backstop).
Failure: a GPU NVML cannot query is skipped this round; a process gone before the kill is fine.
Tests: tests/integration/{node/test_exporter_reads_real_regions.py,
dra/test_plugin_cdi_edits_cap_the_container.py}, tests/gpu/test_node_agent_on_gpu.py
"""

from __future__ import annotations

import logging
import os
import re
import signal
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuslice import model
from gpuslice.container import regions
from gpuslice.container.limits import ClaimShares, region_spec
from gpuslice.node.nvml import GPUBackend, GPULost
from gpuslice.node.settings import WatchdogConfig

__all__ = ["Violation", "Watchdog", "pod_uid_of_pid", "process_identity"]

log = logging.getLogger(__name__)
MiB = 1 << 20
# kubepods-burstable-pod<uid with _>.slice (systemd) or kubepods/burstable/pod<uid> (cgroupfs)
_POD_UID = re.compile(r"pod([0-9a-f]{8}(?:[-_][0-9a-f]{4}){3}[-_][0-9a-f]{12})")


@dataclass(frozen=True)
class Violation:
    kind: str  # "over_limit" | "unmanaged"
    uuid: str
    pids: tuple[int, ...]
    used_bytes: int
    limit_bytes: int | None
    pod_uid: str | None
    container: str | None

    def message(self) -> str:
        used = f"{self.used_bytes / MiB:.0f} MiB"
        who = ", ".join(map(str, self.pids))
        if self.kind == "over_limit":
            whose = f"container {self.container}" if self.container else "the claim's containers"
            return (f"{whose}: processes {who} hold {used} on GPU {self.uuid}, "
                    f"over the limit of {(self.limit_bytes or 0) / MiB:.0f} MiB; the in-container "
                    "library should have refused this: check that it is loaded in every process "
                    "(/etc/ld.so.preload) and not bypassed")
        return (f"process {who} holds {used} on shared GPU {self.uuid} without libgpuslice "
                "(no region slot): it escapes every limit; run it through the library (do not "
                "clear /etc/ld.so.preload or link CUDA statically)")


def process_identity(pid: int, proc: str = "/proc") -> tuple[int, int, str | None] | None:
    """(pid in its innermost pid namespace, start time in clock ticks, pod UID or None) of a
    host pid, from /proc; None when the process is gone or unreadable."""
    try:
        stat = Path(f"{proc}/{pid}/stat").read_text(errors="replace")[:4096]
        status = Path(f"{proc}/{pid}/status").read_text(errors="replace")[:65536]
        start = int(stat[stat.rindex(")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None
    ns = next((line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")),
              [str(pid)])
    try:
        ns_pid = int(ns[-1])
    except (ValueError, IndexError):
        return None
    return ns_pid, start, pod_uid_of_pid(pid, proc)


def pod_uid_of_pid(pid: int, proc: str = "/proc") -> str | None:
    """The pod UID in the process's cgroup path (kubepods...pod<uid>...), or None."""
    try:
        text = Path(f"{proc}/{pid}/cgroup").read_text(errors="replace")[:65536]
    except OSError:
        return None
    m = _POD_UID.search(text)
    return m.group(1).replace("_", "-") if m else None


class Watchdog:
    def __init__(self, backend: GPUBackend, regions_root: str | Path, cfg: WatchdogConfig, *,
                 gpus: Callable[[], Sequence[model.GPU]],
                 assignments: Callable[[], Mapping[str, model.PodAssignment]],
                 pods_fresh: Callable[[], bool],
                 claims_root: str | Path | None = None,
                 claims: Callable[[], Mapping[str, ClaimShares]] = dict,
                 gangs_root: str | Path | None = None,
                 kill: Callable[[int, int], None] = os.kill,
                 proc: str = "/proc") -> None:
        self.backend = backend
        self.root = Path(regions_root)
        self.claims_root = Path(claims_root) if claims_root is not None else None
        self.claims = claims  # claim uid -> its shares (the DRA plugin's checkpoint)
        self.gangs_root = Path(gangs_root) if gangs_root is not None else None
        self.cfg = cfg
        self.gpus = gpus
        self.assignments = assignments
        self.pods_fresh = pods_fresh
        self._kill = kill
        self._proc = proc
        self._reported: set[tuple[str, int]] = set()

    def _regions(self) -> list[regions.ContainerRegion]:
        """Device-plugin containers' regions and DRA claims' (pod_uid = the claim uid)."""
        claims = regions.scan_claims(self.claims_root) if self.claims_root is not None else []
        return regions.scan(self.root) + claims

    def _owner_finder(self) -> tuple[Callable[[int], tuple[str, str] | None],
                                     dict[tuple[str, str, str], int]]:
        """Who owns an NVML pid, and each container's limit per GPU, from the regions (a DRA
        claim's from its shares as prepared)."""
        by_ns: dict[tuple[int, int], list[tuple[str, str]]] = {}  # (pid, start) -> containers
        by_nvml: dict[int, tuple[str, str]] = {}
        limits: dict[tuple[str, str, str], int] = {}  # (uid, container, uuid) -> limit
        for cr in self._regions():
            if cr.region is None:
                continue
            for p in cr.region.processes:
                if p.state != "free":
                    by_ns.setdefault((p.pid, p.start_time), []).append((cr.pod_uid, cr.container))
                    if p.nvml_pid:
                        by_nvml[p.nvml_pid] = (cr.pod_uid, cr.container)
            for d in cr.region.by_uuid().values():
                if d.limit:
                    limits[(cr.pod_uid, cr.container, d.uuid)] = d.limit
        for uid, c in self.claims().items():  # what prepare gave, whatever the file says now
            spec = region_spec(c)
            limits.update({(uid, "", u): b for u, b in zip(spec.device_uuids, spec.limits,
                                                          strict=True)})

        def owner(pid: int) -> tuple[str, str] | None:
            """Slots hold pids as the process sees them (its pid namespace); NVML here lists
            host pids: match on the innermost pid and start time (and the pod, from the
            cgroup, when two containers could match), else on the pid NVML gave the library."""
            ident = process_identity(pid, self._proc)
            if ident is not None:
                ns_pid, start, uid = ident
                # a claim's region (no container) is any of its pods': the cgroup cannot tell
                mine = [o for o in by_ns.get((ns_pid, start), ())
                        if uid in (None, o[0]) or not o[1]]
                if len(mine) == 1:
                    return mine[0]
            return by_nvml.get(pid)

        return owner, limits

    def check(self) -> list[Violation]:
        """One round; returns the violations not reported before (each process once per kind)."""
        owner_of, limits = self._owner_finder()
        shared = {s.uuid for a in self.assignments().values() for s in a.slices()} | \
            {u for (_, c, u) in limits if not c}  # a GPU with a DRA claim's region (no container)
        found = []
        for g in self.gpus():
            if g.mig is not None:  # MIG instances: isolated by the hardware, no library to check
                continue
            try:
                procs = self.backend.processes(g.uuid)
            except GPULost:
                continue
            per_container: dict[tuple[str, str], list[tuple[int, int]]] = {}
            for p in procs:
                owner = owner_of(p.pid)
                if owner is not None:
                    per_container.setdefault(owner, []).append((p.pid, p.used_bytes))
                elif g.uuid in shared and self.cfg.unmanaged:
                    found.append(Violation("unmanaged", g.uuid, (p.pid,), p.used_bytes, None,
                                           pod_uid_of_pid(p.pid, self._proc), None))
            for (uid, container), items in per_container.items():
                limit = limits.get((uid, container, g.uuid))
                total = sum(b for _, b in items)
                if limit is not None and total > limit + self.cfg.tolerance_mib * MiB:
                    found.append(Violation("over_limit", g.uuid, tuple(p for p, _ in items),
                                           total, limit, uid, container))
        new = [v for v in found if any((v.kind, p) not in self._reported for p in v.pids)]
        for v in new:
            self._reported.update((v.kind, p) for p in v.pids)
            if self.cfg.kill:
                for pid in v.pids:
                    try:
                        self._kill(pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError) as exc:
                        log.warning("watchdog: cannot kill %d: %s", pid, exc)
        return new

    def sweep(self, live_uids: set[str], *, now: float | None = None) -> list[str]:
        """Remove region directories of pods not in `live_uids` (a fresh list) once they are
        older than the grace period; returns the removed pod UIDs."""
        if not self.pods_fresh():
            return []
        now = time.time() if now is None else now
        removed = []
        try:
            entries = list(os.scandir(self.root))
        except FileNotFoundError:
            return []
        for e in entries:
            if e.name in live_uids or e.name.startswith(".") or not e.is_dir(follow_symlinks=False):
                continue
            if now - e.stat(follow_symlinks=False).st_mtime < self.cfg.region_grace_seconds:
                continue
            regions.remove(self.root, e.name)
            removed.append(e.name)
        return removed

    def sweep_gangs(self, live: Collection[tuple[str, str]], *,
                    now: float | None = None) -> list[str]:
        """Remove gang directories that no pod in `live` (namespace, gang) names once they are
        older than the grace period (regions.remove_gangs); returns `<namespace>/<gang>` of
        each removed."""
        if self.gangs_root is None or not self.pods_fresh():
            return []
        return regions.remove_gangs(self.gangs_root, live, self.cfg.region_grace_seconds,
                                    time.time() if now is None else now)

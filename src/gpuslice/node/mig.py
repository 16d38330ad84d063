"""The node agent's MIG mode: checks at start, instances made at Allocate, removed after pods.

Owns: `start` (refuses a GPU without MIG or with MIG disabled: the agent never changes MIG mode,
docs/mig.md says why), `MigManager.decorate` (the inventory's MIG block per GPU: the
geometry's profiles and the instances that exist), `attach` (the GPU + compute instances of
one container's assignment, made or found, and its MIG-... UUIDs), `answer` (the Allocate answer
with those devices instead of the library), `reconcile` (instances of pods that are gone are
destroyed, those of live pods kept; never under a running process), and the journal
<state-dir>/mig.json (placement -> owning pod UID), written before each create so an agent
killed between create and Allocate finds its instance again.
Does not: choose placements (the extender's bind wrote them in the assignment) or talk to the
API (agent.py passes the live pods' assignments in).
Invariants: only instances this agent made (journal) are destroyed, and only when no live
pod's assignment names their placement and NVML lists no process on them; an instance at the
placement of a pod's assignment is that pod's (the extender never gives two pods one place).
Failure: MigError -> AllocateError naming the GPU, profile and NVML's answer.
Tests: tests/unit/node/test_mig_agent.py, tests/integration/node/test_mig_agent_killed.py
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec

from gpuslice import mig, model
from gpuslice.errors import EnvironmentProblem
from gpuslice.files import write_atomic
from gpuslice.node.allocate import AllocateError, Answer
from gpuslice.node.nvml import DeviceInfo, MigBackend, MigBusy, MigDevice, MigError
from gpuslice.node.settings import MigConfig

__all__ = ["MigManager", "start"]

log = logging.getLogger(__name__)
JOURNAL = "mig.json"


def start(backend: MigBackend, devices: Sequence[DeviceInfo], cfg: MigConfig,
          state_dir: Path, *, hidden: Sequence[str] = ()) -> MigManager:
    """Check every GPU but the `hidden` ones (hideGPUs: UUIDs or NVML indexes) is MIG-capable
    with MIG enabled now; EnvironmentProblem otherwise."""
    devices = [d for d in devices if d.uuid not in hidden and str(d.index) not in hidden]
    problems = []
    for d in devices:
        at = f"GPU {d.index} ({d.uuid}, {d.model})"
        try:
            m = backend.mig_mode(d.uuid)
        except MigError as err:
            problems.append(f"{at}: cannot read its MIG mode: {err}")
            continue
        if m is None:
            problems.append(f"{at} does not support MIG (A100, A30, H100, H200 and later do); "
                            "run this node with mode: shim")
        elif not m.current:
            pending = (" (enabled, pending a GPU reset: reset the GPU or reboot the node)"
                       if m.pending else "")
            problems.append(f"{at}: MIG mode is disabled{pending}; an administrator enables it "
                            "with `nvidia-smi -i {0} -mig 1` on an idle GPU (the agent never "
                            "changes MIG mode), or run this node with mode: shim"
                            .replace("{0}", str(d.index)))
    if problems:
        raise EnvironmentProblem("mode: mig, but " + "; ".join(problems))
    geometry = mig.Geometry(profiles={k: tuple(v) for k, v in cfg.profiles.items()})
    manager = MigManager(backend, devices, geometry, state_dir)
    for d in devices:
        offered = backend.mig_profiles(d.uuid)
        unknown = geometry.unknown(d.model, offered)
        if unknown:
            log.warning("mig.profiles names profiles GPU %s (%s) does not offer: %s (it offers "
                        "%s)", d.index, d.model, ", ".join(unknown),
                        ", ".join(p.name for p in offered))
        if not geometry.allowed(d.model, offered):
            raise EnvironmentProblem(f"mig.profiles leaves GPU {d.index} ({d.model}) no profile; "
                                     f"it offers {', '.join(p.name for p in offered)}")
    return manager


class MigManager:
    def __init__(self, backend: MigBackend, devices: Sequence[DeviceInfo],
                 geometry: mig.Geometry, state_dir: Path) -> None:
        self.backend = backend
        self.geometry = geometry
        self._models = {d.uuid: d.model for d in devices}
        self._journal_path = state_dir / JOURNAL
        self._lock = threading.Lock()  # Allocate (gRPC) and reconcile may overlap
        self.changed = True  # instances changed since the inventory last read them

    # -- journal: "<gpu>@<start>" -> {"pod": uid, "profile": name}
    def _journal(self) -> dict[str, dict[str, str]]:
        try:
            data = json.loads(self._journal_path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as err:
            log.error("MIG journal %s unreadable (%s): instances it listed are kept until an "
                      "administrator removes them", self._journal_path, err)
            return {}
        return data if isinstance(data, dict) else {}

    def _write(self, journal: Mapping[str, Mapping[str, str]]) -> None:
        write_atomic(self._journal_path, json.dumps(journal, sort_keys=True).encode(), 0o600)

    # -- the inventory's view
    def decorate(self, gpus: tuple[model.GPU, ...]) -> tuple[model.GPU, ...]:
        out = []
        for g in gpus:
            try:
                profiles = self.geometry.allowed(g.model, self.backend.mig_profiles(g.uuid))
                instances = tuple(mig.Instance(profile=d.profile, start=d.start, size=d.size,
                                               uuid=d.uuid)
                                  for d in self.backend.mig_devices(g.uuid))
            except MigError as err:  # published with no profile: nothing is placed there
                log.error("MIG state of GPU %s unreadable: %s", g.uuid, err)
                profiles, instances = (), ()
            out.append(replace_gpu(g, mig.MigGPU(profiles=profiles, instances=instances)))
        self.changed = False
        return tuple(out)

    # -- Allocate
    def attach(self, pod_uid: str, slices: Sequence[model.GPUSlice],
               live: Mapping[str, model.PodAssignment]) -> list[str]:
        """MIG-... UUIDs of the container's instances, made where missing."""
        with self._lock:
            try:
                return [self._one(pod_uid, s, live) for s in slices]
            except MigError as err:  # a read (devices, profiles, processes) NVML refused
                raise AllocateError(f"MIG: {err}") from None

    def _one(self, pod_uid: str, s: model.GPUSlice,
             live: Mapping[str, model.PodAssignment]) -> str:
        if s.mig is None:
            raise AllocateError(f"GPU {s.uuid}: the assignment gives a shared slice but this node "
                                "runs MIG mode; recreate the pod so the scheduler places it again")
        key = f"{s.uuid}@{s.mig.start}"
        journal = self._journal()
        devices = self.backend.mig_devices(s.uuid)
        here = next((d for d in devices if d.start == s.mig.start), None)
        owner = journal.get(key, {}).get("pod")
        if here is not None and here.profile == s.mig.profile and here.uuid and \
                owner in (pod_uid, None):
            if owner is None:  # an idle instance an administrator made: now this pod's
                journal[key] = {"pod": pod_uid, "profile": here.profile}
                self._write(journal)
            return here.uuid
        p = next((q for q in self.backend.mig_profiles(s.uuid) if q.name == s.mig.profile), None)
        if p is None:
            raise AllocateError(f"GPU {s.uuid} offers no MIG profile {s.mig.profile}")
        held = {f"{x.uuid}@{x.mig.start}" for uid, a in live.items() if uid != pod_uid
                for x in a.slices() if x.mig is not None}
        for d in devices:  # clear what is in the way: idle instances no other live pod holds
            if not mig.overlaps(d.start, d.size, s.mig.start, p.size):
                continue
            if f"{d.gpu}@{d.start}" in held:
                raise AllocateError(f"GPU {s.uuid}: {s.mig.profile}@{s.mig.start} overlaps "
                                    f"{d.profile}@{d.start}, held by another live pod; the "
                                    "scheduler's view is stale: recreate the pod")
            self._destroy(d, journal, why=f"in the way of {s.mig.profile}@{s.mig.start}")
        journal[key] = {"pod": pod_uid, "profile": s.mig.profile}
        self._write(journal)  # before the create: a kill after it still finds the owner
        try:
            made = self.backend.mig_create(s.uuid, s.mig.profile, s.mig.start)
        except MigError as err:
            journal.pop(key, None)
            self._write(journal)
            raise AllocateError(f"creating MIG instance {s.mig.profile}@{s.mig.start}: {err}"
                                ) from None
        self.changed = True
        log.info("MIG instance created", extra={"gpu": s.uuid, "profile": s.mig.profile,
                                                "start": s.mig.start, "mig": made.uuid})
        if not made.uuid:
            raise AllocateError(f"GPU {s.uuid}: instance {s.mig.profile}@{s.mig.start} has no "
                                "MIG device UUID after create")
        return made.uuid

    def _destroy(self, d: MigDevice, journal: dict[str, Any], *, why: str) -> None:
        """Destroy `d` unless a process runs on it (AllocateError then: never under a process)."""
        try:
            pids = self.backend.mig_processes(d.gpu, d.gi_id)
        except MigError as err:  # never destroyed blind
            raise AllocateError(f"GPU {d.gpu}: cannot tell which processes run on "
                                f"{d.profile}@{d.start} ({err}); not destroyed") from None
        if pids:
            raise AllocateError(f"GPU {d.gpu}: MIG instance {d.profile}@{d.start} is {why} but "
                                f"processes {list(pids)} still run on it; retry when they end")
        try:
            self.backend.mig_destroy(d.gpu, d.gi_id)
        except MigBusy as err:
            raise AllocateError(f"GPU {d.gpu}: {err}; retry when its processes end") from None
        except MigError as err:
            raise AllocateError(f"destroying {d.profile}@{d.start}: {err}") from None
        journal.pop(f"{d.gpu}@{d.start}", None)
        self._write(journal)
        self.changed = True
        log.info("MIG instance destroyed", extra={"gpu": d.gpu, "profile": d.profile,
                                                  "start": d.start, "reason": why})

    def answer(self, a: Answer, uuids: Sequence[str], cdi: bool) -> Answer:
        """The Allocate answer for MIG devices: no library, no region, only the devices."""
        envs = {"NVIDIA_VISIBLE_DEVICES": "void" if cdi else ",".join(uuids),
                "GPUSLICE_MIG_DEVICES": ",".join(uuids)}
        return replace(a, envs=envs, mounts=(), gang="",
                       cdi_devices=tuple(f"nvidia.com/gpu={u}" for u in uuids) if cdi else ())

    # -- after pods
    def reconcile(self, live: Mapping[str, model.PodAssignment]) -> list[str]:
        """Destroy the journal's instances whose placement no live pod's assignment names (its
        pod is gone); keep those under a process for a later round. An instance a live pod
        names is kept and owned by that pod (two interchangeable pods' assignments may have
        been swapped after Allocate: node/swap.py). Returns what was destroyed."""
        with self._lock:
            journal = self._journal()
            wanted = {f"{x.uuid}@{x.mig.start}": uid for uid, a in live.items()
                      for x in a.slices() if x.mig is not None}
            done = []
            by_gpu: dict[str, tuple[MigDevice, ...] | None] = {}
            for key, entry in sorted(journal.items()):
                gpu, _, start = key.rpartition("@")
                if gpu in by_gpu and by_gpu[gpu] is None:
                    continue  # its GPU did not answer this round
                if key in wanted:  # a live pod's placement: kept, whoever the journal named
                    if wanted[key] != entry.get("pod"):  # (the agent swapped two pods' places)
                        journal[key] = {**entry, "pod": wanted[key]}
                    continue
                if gpu not in self._models:
                    journal.pop(key)
                    continue
                if gpu not in by_gpu:
                    try:
                        by_gpu[gpu] = self.backend.mig_devices(gpu)
                    except MigError as err:
                        log.error("MIG instances of GPU %s unreadable: %s", gpu, err)
                        by_gpu[gpu] = None
                        continue
                devices = by_gpu[gpu] or ()
                d = next((x for x in devices if str(x.start) == start), None)
                if d is None:  # made never (killed before create) or destroyed by someone
                    journal.pop(key)
                    continue
                try:
                    self._destroy(d, journal, why=f"left by pod {entry.get('pod')}, now gone")
                    done.append(key)
                except AllocateError as err:
                    log.info("MIG instance kept: %s", err)
            self._write(journal)
            return done


def replace_gpu(g: model.GPU, m: mig.MigGPU) -> model.GPU:
    return msgspec.structs.replace(g, mig=m)

"""MIG-mode nodes: which GPU and which MIG placement a `mig` pod gets, and what pods hold.

Owns: `MigNodes` (inventories of MIG nodes, the MIG slices committed pods hold, filter,
assign/release), `MigPlacement` (shaped like fit.Placement for the extender and simulator).
Does not: word the shared-slice reasons (reasons.py) or touch NVML (node/mig.py acts on it).
Rule per requested GPU, on each GPU the pod may use, its smallest profile holding the request
(mig.profile_for); the GPU is chosen by kind, then fullest first, then index:
  1. an idle instance of that profile already there (no re-partitioning),
  2. a free placement beside what exists (mig.choose_start: least fragmentation),
  3. re-partitioning a GPU no pod holds anything on (its idle instances are destroyed);
a GPU where a pod holds an instance is never re-partitioned. A container's GPUs are distinct;
init and app containers are charged together (each gets its own instance).
Invariants: the slices held on a GPU are always `mig.legal` together (assign refuses the rest,
all or nothing); same inputs -> same placement (inventory order, no randomness); a node's
results are kept per pod shape until that node or what it holds changes.
Tests: tests/unit/allocator/test_mig_placement.py, test_mig_placement_properties.py
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpuslice import mig
from gpuslice.allocator.reasons import (
    MIG_NODE,
    NO_MIG,
    NO_PLACEMENT,
    NO_PROFILE,
    RESOLVABLE,
    Rejection,
)
from gpuslice.allocator.reuse import shape_of
from gpuslice.allocator.usage import AllocationError, Use
from gpuslice.model import (
    EXCLUSIVE_CORES,
    GPU,
    ContainerAssignment,
    GPUSlice,
    NodeInventory,
    PodAssignment,
    PodRequest,
    SliceRequest,
)

__all__ = ["MIG_NODE", "NO_MIG", "NO_PLACEMENT", "NO_PROFILE", "MigNodes", "MigPlacement",
           "mig_footprint"]

_REUSE, _FREE, _REPARTITION = 0, 1, 2
_SHAPES = 64  # pod shapes whose result is kept per node


def is_mig_node(inv: NodeInventory) -> bool:
    return any(g.mig is not None for g in inv.gpus)


def mig_footprint(a: PodAssignment) -> dict[str, Use]:
    """What a pod holds per GPU on a MIG node: every container's instance at once (init
    containers too: an instance is made per container, not time-shared), unlike usage.footprint's
    lifecycle rule for shared slices. What the simulator charges for a MIG pod."""
    out: dict[str, Use] = {}
    for s in a.slices():
        u = out.get(s.uuid, Use(0, 0, 0, 0))
        out[s.uuid] = Use(u.mem + s.memory_mib, u.cores + s.cores, u.slots + 1,
                          u.excl + (s.cores >= EXCLUSIVE_CORES))
    return dict(sorted(out.items()))


def cores_of(p: mig.Profile) -> int:
    """The share of the GPU's compute an instance is, as the library's cores percent (so the
    shared-slice arithmetic, e.g. the node agent's over-commit check, holds for MIG too)."""
    return p.compute * EXCLUSIVE_CORES // mig.COMPUTE_SLICES


class _Snap:
    """What the extender reads off a placement's snapshot (no uniform size: MIG sizes vary)."""

    uniform_mem = 0


class MigPlacement:
    """A mig pod's placement on one node (fit.Placement's interface: assignment, fullness)."""

    __slots__ = ("_full", "assignment", "node")
    snapshot = _Snap()
    _add = None

    def __init__(self, assignment: PodAssignment, full: float) -> None:
        self.node = assignment.node
        self.assignment = assignment
        self._full = full

    def fullness(self) -> float:
        return self._full

    def __repr__(self) -> str:
        return f"MigPlacement({self.assignment!r})"


def _rejection(reason: str, detail: str) -> Rejection:
    return Rejection(reason, RESOLVABLE[reason], detail)


def _memory(s_mem: int | None, percent: int | None, gpu: mig.MigGPU) -> int:
    """MiB a slice asks for; a percent is of the GPU's largest profile (100 = the whole-GPU
    instance: a MIG GPU never offers its full memory to one instance)."""
    if s_mem is not None:
        return s_mem
    largest = max((p.memory_mib for p in gpu.profiles), default=0)
    return largest * (percent or 0) // 100


class _GPUView:
    """One MIG GPU during a placement: its held slices (pods) and idle instances."""

    def __init__(self, gpu: GPU, held: list[mig.MigSlice]) -> None:
        assert gpu.mig is not None
        self.gpu, self.m = gpu, gpu.mig
        self.held = list(held)
        spans = self._held_spans()
        self.idle = [i for i in self.m.instances
                     if not any(mig.overlaps(i.start, i.size, s, n) for s, n in spans)]

    def _held_spans(self) -> list[tuple[int, int]]:
        out = []
        for s in self.held:
            p = self.m.profile(s.profile)
            out.append((s.start, p.size if p else mig.MEMORY_SLICES))
        return out

    def used_slices(self) -> int:
        return sum(n for _, n in self._held_spans())

    def choice(self, p: mig.Profile) -> tuple[int, int] | None:
        """(kind, start) of the best placement of `p` here, or None."""
        for i in self.idle:
            if i.profile == p.name and i.start in p.starts:
                return _REUSE, i.start
        taken = self._held_spans()
        start = mig.choose_start(p, self.m.profiles, taken + [(i.start, i.size)
                                                              for i in self.idle])
        if start is not None:
            return _FREE, start
        if not self.held:
            start = mig.choose_start(p, self.m.profiles, [])
            if start is not None:
                return _REPARTITION, start
        return None

    def take(self, p: mig.Profile, start: int) -> None:
        self.held.append(mig.MigSlice(profile=p.name, start=start))
        self.idle = [i for i in self.idle if not mig.overlaps(i.start, i.size, start, p.size)]


def _allowed(pod: PodRequest, gpu: GPU) -> bool:
    f = pod.filter
    model = gpu.model.casefold()
    if f.use_types and not any(t.casefold() in model for t in f.use_types):
        return False
    if any(t.casefold() in model for t in f.nouse_types):
        return False
    if f.use_uuids and gpu.uuid not in f.use_uuids:
        return False
    return gpu.uuid not in f.nouse_uuids


class MigNodes:
    """MIG nodes and the MIG slices committed pods hold there (single-threaded)."""

    def __init__(self) -> None:
        self._inv: dict[str, NodeInventory] = {}
        self._pods: dict[str, PodAssignment] = {}
        self._node_pods: dict[str, set[str]] = {}
        # node -> pod shape (identity blanked) -> its placement or rejection there; dropped
        # whenever the node or what it holds changes, so a filter over every node redoes only
        # the nodes changed since (placements name no pod: a result serves any pod of the shape)
        self._decided: dict[str, dict[PodRequest, MigPlacement | Rejection]] = {}

    def __contains__(self, name: object) -> bool:
        return name in self._inv

    def names(self) -> list[str]:
        return sorted(self._inv)

    def inventory(self, name: str) -> NodeInventory:
        return self._inv[name]

    def pods(self) -> dict[str, PodAssignment]:
        return dict(self._pods)

    # -- nodes
    def add_node(self, inv: NodeInventory) -> list[str]:
        """Add or replace; pods whose slices the new inventory cannot hold are dropped (keys
        returned, sorted) so they wait for their node again instead of being double-booked."""
        self._inv[inv.node] = inv
        self._decided.pop(inv.node, None)
        keys = sorted(self._node_pods.setdefault(inv.node, set()))
        for k in keys:
            self._node_pods[inv.node].discard(k)
        dropped = []
        for k in keys:
            a = self._pods.pop(k)
            try:
                self.assign(k, a)
            except AllocationError:
                dropped.append(k)
        return dropped

    def remove_node(self, name: str) -> list[str]:
        self._inv.pop(name, None)
        self._decided.pop(name, None)
        dropped = sorted(self._node_pods.pop(name, ()))
        for k in dropped:
            del self._pods[k]
        return dropped

    # -- commitments
    def _held(self, node: str, without: str | None = None) -> dict[str, list[mig.MigSlice]]:
        out: dict[str, list[mig.MigSlice]] = {}
        for k in sorted(self._node_pods.get(node, ())):
            if k == without:
                continue
            for s in self._pods[k].slices():
                if s.mig is not None:
                    out.setdefault(s.uuid, []).append(s.mig)
        return out

    def assign(self, key: str, a: PodAssignment) -> None:
        """Commit `a` (replacing the pod's earlier one), all or nothing: every slice must name a
        MIG GPU of the node and a placement legal beside what other pods hold."""
        inv = self._inv.get(a.node)
        if inv is None:
            raise AllocationError(f"pod {key}: node {a.node!r} is not a MIG node in the "
                                  "inventory; add the node before assigning pods to it")
        gpus = {g.uuid: g for g in inv.gpus}
        held = self._held(a.node, without=key)
        problems = []
        for c in a.containers:
            for s in c.slices:
                g = gpus.get(s.uuid)
                at = f"pod {key} container {c.container!r} GPU {s.uuid} on {a.node}"
                if g is None or g.mig is None or s.mig is None:
                    problems.append(f"{at}: " + ("not a GPU of the node" if g is None else
                                                 "not a MIG GPU" if g.mig is None else
                                                 "a shared slice on a MIG GPU"))
                    continue
                p = g.mig.profile(s.mig.profile)
                if p is not None and s.memory_mib > p.memory_mib:
                    problems.append(f"{at}: {s.memory_mib} MiB is more than profile {p.name} "
                                    f"holds ({p.memory_mib} MiB)")
                held.setdefault(s.uuid, []).append(s.mig)
        for uuid, slices in held.items():
            g = gpus.get(uuid)
            if g is None or g.mig is None:
                continue
            why = mig.legal(g.mig.profiles, slices)
            if why is not None:
                problems.append(f"pod {key} GPU {uuid} on {a.node}: {why}")
        if problems:
            raise AllocationError("; ".join(problems))
        self.release(key)
        self._pods[key] = a
        self._node_pods.setdefault(a.node, set()).add(key)
        self._decided.pop(a.node, None)

    def release(self, key: str) -> bool:
        a = self._pods.pop(key, None)
        if a is None:
            return False
        self._node_pods.get(a.node, set()).discard(key)
        self._decided.pop(a.node, None)
        return True

    # -- placement
    def place(self, name: str, pod: PodRequest) -> MigPlacement | Rejection:
        """The pod's placement on MIG node `name`, or why there is none (names the profile)."""
        shape = shape_of(pod)
        decided = self._decided.setdefault(name, {})
        got = decided.get(shape)
        if got is None:
            if len(decided) >= _SHAPES:
                decided.clear()
            got = decided[shape] = self._place(name, shape)
        return got

    def _place(self, name: str, pod: PodRequest) -> MigPlacement | Rejection:
        inv = self._inv[name]
        held = self._held(name)
        views = [_GPUView(g, held.get(g.uuid, [])) for g in inv.gpus if g.mig is not None]
        containers = []
        for s in pod.slices:
            chosen: list[GPUSlice] = []
            for _ in range(s.count):
                best: tuple[tuple[int, int, int], _GPUView, mig.Profile, int] | None = None
                wanted: set[str] = set()
                for v in views:
                    if not v.gpu.healthy or not _allowed(pod, v.gpu) or \
                            any(c.uuid == v.gpu.uuid for c in chosen):
                        continue
                    p = mig.profile_for(v.m.profiles, _memory(s.memory_mib, s.memory_percent,
                                                              v.m), s.cores)
                    if p is None:
                        continue
                    wanted.add(p.name)
                    got = v.choice(p)
                    if got is None:
                        continue
                    rank = (got[0], -v.used_slices(), v.gpu.index)
                    if best is None or rank < best[0]:
                        best = (rank, v, p, got[1])
                if best is None:
                    return self._why_not(name, pod, s, views, wanted)
                _, v, p, start = best
                v.take(p, start)
                chosen.append(GPUSlice(uuid=v.gpu.uuid, memory_mib=p.memory_mib,
                                       cores=cores_of(p),
                                       mig=mig.MigSlice(profile=p.name, start=start)))
            containers.append(ContainerAssignment(container=s.container, kind=s.kind,
                                                  slices=tuple(chosen)))
        total = 8 * len(views) or 1
        full = sum(v.used_slices() for v in views) / total
        return MigPlacement(PodAssignment(node=name, containers=tuple(containers)), full)

    def _why_not(self, name: str, pod: PodRequest, s: SliceRequest, views: list[_GPUView],
                 wanted: set[str]) -> Rejection:
        usable = [v for v in views if v.gpu.healthy and _allowed(pod, v.gpu)]
        container = s.container
        if len(usable) < s.count:
            return _rejection(NO_PLACEMENT, f"node {name}: container {container!r} asks for "
                              f"{s.count} MIG instances on distinct GPUs; {len(usable)} healthy "
                              "MIG GPU(s) there that the pod may use")
        fitting = [p for v in usable if (p := mig.profile_for(
            v.m.profiles, _memory(s.memory_mib, s.memory_percent, v.m), s.cores)) is not None]
        if not fitting:
            largest = max((p for v in usable for p in v.m.profiles),
                          key=lambda p: p.memory_mib, default=None)
            most = f"{largest.name} ({largest.memory_mib} MiB)" if largest else "none"
            return _rejection(NO_PROFILE, f"node {name}: container {container!r} asks for more "
                              f"than any allowed MIG profile holds (largest {most}); ask for "
                              "less memory or cores, or allow a larger profile in the "
                              "node's mig.profiles")
        wanted = wanted or {p.name for p in fitting}
        taken = "; ".join(
            f"GPU {v.gpu.index}: " + (", ".join(f"{h.profile}@{h.start}" for h in v.held)
                                      or "idle") for v in usable)
        return _rejection(NO_PLACEMENT, f"node {name}: no free placement for "
                          f"{' or '.join(sorted(wanted))} (container {container!r}); in use: "
                          f"{taken}")

    def filter(self, pod: PodRequest, names: Iterable[str]
               ) -> tuple[dict[str, MigPlacement], dict[str, Rejection]]:
        fits: dict[str, MigPlacement] = {}
        failed: dict[str, Rejection] = {}
        for n in names:
            if n not in self._inv:
                continue
            got = self.place(n, pod)
            if isinstance(got, MigPlacement):
                fits[n] = got
            else:
                failed[n] = got
        return fits, failed

    def usage(self, name: str) -> Mapping[str, list[mig.MigSlice]]:
        """GPU uuid -> the MIG slices pods hold there."""
        return self._held(name)

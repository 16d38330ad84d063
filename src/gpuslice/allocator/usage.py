"""Per-GPU usage, pod footprints, per-node snapshots and the column table placement reads.

Owns: `footprint` (public: what a pod holds per GPU, from its assignment; the simulator uses
it too), `Use`, `NodeSnapshot` (a node's GPUs + usage + summaries), `NodeTable` (summaries as
columns, for the filter's bulk test), `GPUUsage`, `AllocationError`. Not: GPU choice, pods.
Lifecycle rule: INIT containers run one at a time before the others; SIDECARs and APPs run
together. On each GPU, per dimension (memory, cores, slots),
    footprint = max(app phase = sidecars + apps, max over inits of (init + sidecars)),
and `exclusive` if any phase has an exclusive slice there. Usage of a GPU = sum of the
footprints of the pods on it; since no phase ever exceeds its footprint, usage within
capacity means no instant is over-committed. An exclusive slice is alone in its phase on
its GPU, and an exclusive footprint is alone on its GPU (no other pod).
Invariants: snapshots never change after construction (lazy placements may keep them).
Tests: tests/unit/allocator/test_state.py, test_fit_properties.py, test_usage.py
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

import msgspec

from gpuslice.errors import GpusliceError
from gpuslice.model import EXCLUSIVE_CORES, GPU, ContainerKind, NodeInventory, PodAssignment


class AllocationError(GpusliceError):
    """An assignment cannot be committed (over-commit, unknown node or GPU, bad slice)."""


class GPUUsage(msgspec.Struct, frozen=True, kw_only=True):
    """One GPU and what the committed pods hold on it (sum of their footprints)."""

    node: str
    gpu: GPU
    memory_used_mib: int
    cores_used: int
    slices: int  # slots taken (of gpu.split_count)
    exclusive: bool  # held by an exclusive slice: no other pod may use it


class Use(NamedTuple):
    """A footprint (one pod on one GPU) or a sum of footprints (a GPU's usage)."""

    mem: int  # MiB
    cores: int  # percent of one GPU
    slots: int  # slices counted against GPU.split_count
    excl: int  # exclusive footprints: 0 or 1 for one pod, and on any valid GPU


class _Phase:
    __slots__ = ("cores", "excl", "mem", "slots")

    def __init__(self) -> None:
        self.mem = self.cores = self.slots = self.excl = 0


def footprint(assignment: PodAssignment, gpus: Mapping[str, GPU] | None = None, *,
              pod_key: str | None = None) -> dict[str, Use]:
    """What a pod holds on each GPU (uuid -> Use, sorted by uuid), by the lifecycle rule above.

    The one implementation of the rule: ClusterState charges exactly this, and the simulator
    integrates it over time. `gpus` (uuid -> GPU of the node), when given, also rejects slices
    on GPUs it does not list. Raises AllocationError naming the pod (`pod_key`, else the node),
    container and GPU for a slice listed twice in a container, out-of-range memory or cores,
    or an exclusive slice sharing its GPU with another slice of the same phase.
    """
    who = f"pod {pod_key}" if pod_key is not None else f"pod on node {assignment.node!r}"
    problems: list[str] = []
    app: dict[str, _Phase] = {}
    side: dict[str, _Phase] = {}
    inits: list[tuple[str, dict[str, _Phase]]] = []
    for c in assignment.containers:
        seen: set[str] = set()
        own: dict[str, _Phase] = {}
        if c.kind is ContainerKind.INIT:
            inits.append((c.container, own))
        for s in c.slices:
            bad = None
            if gpus is not None and s.uuid not in gpus:
                bad = f"not a GPU of node {assignment.node!r}"
            elif s.uuid in seen:
                bad = "listed twice; a container needs distinct GPUs"
            else:
                seen.add(s.uuid)
                if s.memory_mib < 0 or not 0 <= s.cores <= EXCLUSIVE_CORES:
                    bad = (f"memory_mib={s.memory_mib} cores={s.cores} out of range "
                           f"(memory >= 0, cores 0..{EXCLUSIVE_CORES})")
            if bad is not None:
                problems.append(f"{who} container {c.container!r} GPU {s.uuid!r}: {bad}")
                continue
            targets = [own] if c.kind is ContainerKind.INIT else [app]
            if c.kind is ContainerKind.SIDECAR:
                targets.append(side)
            for t in targets:
                p = t.setdefault(s.uuid, _Phase())
                p.mem += s.memory_mib
                p.cores += s.cores
                p.slots += 1
                p.excl += s.cores >= EXCLUSIVE_CORES
    phases: list[tuple[str, dict[str, _Phase]]] = [("app phase", app)]
    for name, own in inits:
        merged: dict[str, _Phase] = {}
        for src in (side, own):
            for u, p in src.items():
                m = merged.setdefault(u, _Phase())
                m.mem += p.mem
                m.cores += p.cores
                m.slots += p.slots
                m.excl += p.excl
        phases.append((f"init container {name!r} with sidecars", merged))
    out: dict[str, list[int]] = {}
    for label, ph in phases:
        for u in sorted(ph):
            p = ph[u]
            if p.excl and p.slots > 1:
                problems.append(f"{who} GPU {u}: an exclusive slice shares it with another "
                                f"slice in the {label}; give the exclusive container its own GPU")
            acc = out.setdefault(u, [0, 0, 0, 0])
            acc[0] = max(acc[0], p.mem)
            acc[1] = max(acc[1], p.cores)
            acc[2] = max(acc[2], p.slots)
            acc[3] = max(acc[3], 1 if p.excl else 0)
    if problems:
        raise AllocationError("; ".join(problems))
    return {u: Use(*v) for u, v in sorted(out.items())}


class NodeSnapshot:
    """One node's GPUs and usage at one moment, with the summaries that reject most pods early.

    Summaries (over healthy GPUs): n_healthy; n_open (not held exclusively); n_slot (open and
    a slot free); `free`: (free MiB, free cores, idle, MiB total, pos, free slots) of every
    slot GPU, most free memory first; models: sorted distinct models of healthy GPUs.
    """

    __slots__ = (
        "cap_cores", "cap_mem", "cores", "excl", "free", "gpus", "half_per_core",
        "half_per_mib", "healthy_pos", "idle_prefix", "max_free_mem", "mem", "min_cores_prefix",
        "models", "n_healthy", "n_open", "n_slot", "n_total", "name", "pos", "slots",
        "uniform_mem", "used_cores", "used_mem", "weights",
    )

    def __init__(self, inv: NodeInventory, use: Sequence[Use]) -> None:
        self.name = inv.node
        self.gpus = inv.gpus
        self.pos = {g.uuid: i for i, g in enumerate(inv.gpus)}
        self.mem = tuple(u.mem for u in use)
        self.cores = tuple(u.cores for u in use)
        self.slots = tuple(u.slots for u in use)
        self.excl = tuple(u.excl > 0 for u in use)
        self.n_total = len(inv.gpus)
        n_healthy = n_open = cap_mem = used_mem = used_cores = 0
        free: list[tuple[int, int, bool, int, int, int]] = []
        models: set[str] = set()
        sizes: set[int] = set()
        for p, (g, u) in enumerate(zip(inv.gpus, use, strict=True)):
            if not g.healthy:
                continue
            n_healthy += 1
            models.add(g.model)
            sizes.add(g.memory_mib)
            cap_mem += g.memory_mib
            used_mem += u.mem
            used_cores += u.cores
            if u.excl:
                continue
            n_open += 1
            if u.slots < g.split_count:
                free.append((g.memory_mib - u.mem, EXCLUSIVE_CORES - u.cores, u.slots == 0,
                             g.memory_mib, p, g.split_count - u.slots))
        free.sort(key=lambda t: (-t[0], t[4]))
        self.n_healthy = n_healthy
        self.healthy_pos = tuple(p for p, g in enumerate(inv.gpus) if g.healthy)
        self.n_open = n_open
        self.n_slot = len(free)
        self.free = tuple(free)
        self.max_free_mem = free[0][0] if free else -1
        # [k]: over the k+1 slot GPUs with the most free memory: least free cores / all idle
        mc, idle = EXCLUSIVE_CORES, True
        mcp, idp = [], []
        for f in free:
            mc = min(mc, f[1])
            idle = idle and f[2]
            mcp.append(mc)
            idp.append(idle)
        self.min_cores_prefix = tuple(mcp)
        self.idle_prefix = tuple(idp)
        self.models = tuple(sorted(models))
        self.uniform_mem = sizes.pop() if len(sizes) == 1 else 0  # MiB if all healthy equal
        self.cap_mem = cap_mem
        self.cap_cores = EXCLUSIVE_CORES * n_healthy
        self.used_mem = used_mem
        self.used_cores = used_cores
        self.half_per_mib = 0.5 / cap_mem if cap_mem else 0.0  # fullness weights (0.5 each)
        self.half_per_core = 0.5 / self.cap_cores if n_healthy else 0.0
        self.weights = (used_mem, self.half_per_mib, used_cores, self.half_per_core)

    def fullness(self, add_mem: int = 0, add_cores: int = 0) -> float:
        """How full the healthy GPUs are (memory and cores weighted equally), 0..1."""
        if not self.n_healthy:
            return 1.0
        return ((self.used_mem + add_mem) * self.half_per_mib
                + (self.used_cores + add_cores) * self.half_per_core)


def add_use(total: Use, fp: Use, sign: int) -> Use:
    return Use(total.mem + sign * fp.mem, total.cores + sign * fp.cores,
               total.slots + sign * fp.slots, total.excl + sign * fp.excl)


def zero_use(n: int) -> list[Use]:
    return [Use(0, 0, 0, 0)] * n


def sum_use(gpus: Sequence[GPU], fps: Iterable[dict[str, Use]]) -> list[Use]:
    pos = {g.uuid: i for i, g in enumerate(gpus)}
    use = zero_use(len(gpus))
    for fp in fps:
        for u, f in fp.items():
            use[pos[u]] = add_use(use[pos[u]], f, 1)
    return use


class NodeTable:
    """Every node's snapshot in name order, with the summaries the filter's bulk test reads
    laid out as columns (one list per rank k of a node's slot GPUs, most free memory first).

    free_mem[k][i]: free MiB of node i's (k+1)-th slot GPU, -1 if it has no such GPU;
    min_cores[k][i]: least free cores over its first k+1 slot GPUs (-1 if none);
    all_idle[k][i]: whether those k+1 are all idle. `models` and `uniform_mem` are per node.
    Kept current by ClusterState on every node change (`update`, O(width)); rebuilt when the
    set of nodes changes or a node is wider than the table.
    """

    __slots__ = ("all_idle", "free_mem", "index", "min_cores", "model_sets", "models", "names",
                 "snaps", "uniform_mem", "width")

    def __init__(self, snaps: Mapping[str, NodeSnapshot]) -> None:
        self.names = sorted(snaps)
        self.snaps = [snaps[n] for n in self.names]
        self.index = {n: i for i, n in enumerate(self.names)}
        n = len(self.names)
        self.width = max((s.n_total for s in self.snaps), default=0)
        self.free_mem = [[-1] * n for _ in range(self.width)]
        self.min_cores = [[-1] * n for _ in range(self.width)]
        self.all_idle = [[False] * n for _ in range(self.width)]
        self.models: list[tuple[str, ...]] = [()] * n
        self.uniform_mem = [0] * n
        self.model_sets: set[tuple[str, ...]] = set()
        for i, s in enumerate(self.snaps):
            self._fill(i, s)

    def update(self, s: NodeSnapshot) -> bool:
        """Take a node's new snapshot; False if the table must be rebuilt instead."""
        i = self.index.get(s.name)
        if i is None or s.n_total > self.width:
            return False
        self.snaps[i] = s
        self._fill(i, s)
        return True

    def _fill(self, i: int, s: NodeSnapshot) -> None:
        free, mcp, idp = s.free, s.min_cores_prefix, s.idle_prefix
        for k in range(self.width):
            if k < len(free):
                self.free_mem[k][i] = free[k][0]
                self.min_cores[k][i] = mcp[k]
                self.all_idle[k][i] = idp[k]
            else:
                self.free_mem[k][i] = self.min_cores[k][i] = -1
                self.all_idle[k][i] = False
        self.models[i] = s.models
        self.model_sets.add(s.models)
        self.uniform_mem[i] = s.uniform_mem

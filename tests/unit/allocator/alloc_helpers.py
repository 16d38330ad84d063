"""Builders (plain and hypothesis-drawn) and an independent reference for the allocator tests
(not a test module)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from hypothesis import strategies as st

from gpuslice.allocator import ClusterState
from gpuslice.model import (
    GPU,
    ContainerAssignment,
    ContainerKind,
    GPUFilter,
    GPUSlice,
    NodeInventory,
    PodAssignment,
    PodRequest,
    SliceRequest,
)

H100 = "NVIDIA H100 80GB HBM3"
A10 = "NVIDIA A10"


def gpu(node: str, i: int, mem: int = 81920, model: str = H100, **kw: object) -> GPU:
    return GPU(uuid=f"{node}-gpu{i}", model=model, memory_mib=mem, index=i, **kw)  # type: ignore[arg-type]


def node(name: str, n: int = 8, mem: int = 81920, model: str = H100, **kw: object) -> NodeInventory:
    return NodeInventory(node=name, gpus=tuple(gpu(name, i, mem, model, **kw) for i in range(n)))


def req(container: str = "main", *, mem: int | None = 1024, pct: int | None = None,
        count: int = 1, cores: int = 0, kind: ContainerKind = ContainerKind.APP) -> SliceRequest:
    return SliceRequest(container=container, kind=kind, count=count,
                        memory_mib=None if pct is not None else mem, memory_percent=pct,
                        cores=cores)


def pod(*slices: SliceRequest, name: str = "p", flt: GPUFilter | None = None,
        node_policy: str | None = None, gpu_policy: str | None = None) -> PodRequest:
    return PodRequest(namespace="ns", name=name, slices=slices or (req(),),
                      filter=flt or GPUFilter(), node_policy=node_policy, gpu_policy=gpu_policy)


def one(node_name: str, *slices: tuple[int, int, int], container: str = "main",
        kind: ContainerKind = ContainerKind.APP) -> PodAssignment:
    """An assignment of one container: slices given as (gpu index, MiB, cores)."""
    return PodAssignment(node=node_name, containers=(ContainerAssignment(
        container=container, kind=kind,
        slices=tuple(GPUSlice(uuid=f"{node_name}-gpu{i}", memory_mib=m, cores=c)
                     for i, m, c in slices)),))


def state(*invs: NodeInventory) -> ClusterState:
    st = ClusterState()
    for inv in invs:
        st.add_node(inv)
    return st


def random_node(draw: st.DrawFn, name: str, n: int, models: Sequence[str], mems: Sequence[int],
                max_split: int) -> NodeInventory:
    """Node `name` of n GPUs `<name>-g<i>`: random model, memory, NUMA node, NVLink peers among its
    own GPUs, health (1 in 10 unhealthy) and split count (1..max_split)."""
    uu = [f"{name}-g{i}" for i in range(n)]
    return NodeInventory(node=name, gpus=tuple(
        GPU(uuid=uu[i], model=draw(st.sampled_from(models)),
            memory_mib=draw(st.sampled_from(mems)), index=i,
            numa_node=draw(st.sampled_from((0, 1, None))),
            nvlink_peers=tuple(draw(st.lists(st.sampled_from(uu), max_size=2, unique=True))),
            healthy=draw(st.integers(0, 9)) > 0, split_count=draw(st.integers(1, max_split)))
        for i in range(n)))


def lifecycle_phases(a: PodAssignment) -> list[list[ContainerAssignment]]:
    """The containers running together: apps with sidecars, then each init with the sidecars."""
    side = [c for c in a.containers if c.kind is ContainerKind.SIDECAR]
    apps = [c for c in a.containers if c.kind is not ContainerKind.INIT]
    return [apps] + [[c, *side] for c in a.containers if c.kind is ContainerKind.INIT]


def reference_usage(pods: dict[str, PodAssignment]) -> dict[str, tuple[int, int, int, int]]:
    """uuid -> (MiB, cores, slots, pods holding it exclusively), recomputed from scratch with
    the lifecycle rule: per GPU and dimension, max(sidecars+apps, each init + sidecars)."""
    total: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for a in pods.values():
        per: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
        for ph in lifecycle_phases(a):
            acc: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
            for c in ph:
                for s in c.slices:
                    acc[s.uuid][0] += s.memory_mib
                    acc[s.uuid][1] += s.cores
                    acc[s.uuid][2] += 1
                    acc[s.uuid][3] |= s.cores >= 100
            for u, v in acc.items():
                per[u] = [max(x, y) for x, y in zip(per[u], v, strict=True)]
        for u, v in per.items():
            total[u] = [x + y for x, y in zip(total[u], v, strict=True)]
    return {u: (v[0], v[1], v[2], v[3]) for u, v in total.items()}

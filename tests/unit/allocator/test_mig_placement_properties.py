"""Properties of MIG placement (hypothesis): whatever pods come and go, every GPU's held
instances are a legal MIG layout, no GPU is over-committed, a GPU a pod holds is never
re-partitioned, and a refusal is only given when no GPU could take the instance."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuslice import mig
from gpuslice.allocator import ClusterState, parse_policy
from gpuslice.model import GPU, NodeInventory, PodRequest, SliceRequest
from mig_helpers import legal_slices

POLICY = parse_policy("binpack")
BOARDS = {"A100-40GB": ("NVIDIA A100-SXM4-40GB", 40960), "H100-80GB": ("NVIDIA H100 80GB HBM3",
                                                                       81559),
          "H200-141GB": ("NVIDIA H200", 143771)}


@st.composite
def mig_cluster(draw: st.DrawFn) -> list[NodeInventory]:
    nodes = []
    for n in range(draw(st.integers(1, 3))):
        gpus = []
        for i in range(draw(st.integers(1, 3))):
            key = draw(st.sampled_from(sorted(BOARDS)))
            table = mig.CATALOG[key]
            idle = draw(legal_slices(table, most=4))
            sizes = {p.name: p.size for p in table}
            gpus.append(GPU(uuid=f"n{n}-g{i}", model=BOARDS[key][0], memory_mib=BOARDS[key][1],
                            index=i, healthy=draw(st.booleans()) or i > 0,
                            mig=mig.MigGPU(profiles=table, instances=tuple(
                                mig.Instance(profile=s.profile, start=s.start,
                                             size=sizes[s.profile]) for s in idle))))
        nodes.append(NodeInventory(node=f"n{n}", gpus=tuple(gpus)))
    return nodes


ops = st.lists(st.tuples(st.sampled_from(["place", "place", "release"]),
                         st.integers(1, 150_000), st.integers(1, 2), st.integers(0, 100)),
               min_size=1, max_size=25)


def _check(cs: ClusterState, nodes: list[NodeInventory]) -> None:
    gpus = {g.uuid: g for n in nodes for g in n.gpus}
    per_gpu: dict[str, list[mig.MigSlice]] = {}
    for a in cs.pods().values():
        for s in a.slices():
            assert s.mig is not None
            per_gpu.setdefault(s.uuid, []).append(s.mig)
    for uuid, slices in per_gpu.items():
        g = gpus[uuid]
        assert g.mig is not None
        assert mig.legal(g.mig.profiles, slices) is None, (uuid, slices)
        ps = [g.mig.profile(s.profile) for s in slices]
        assert sum(p.memory_mib for p in ps if p) <= g.memory_mib
        assert sum(p.compute for p in ps if p) <= mig.COMPUTE_SLICES


@settings(max_examples=150, deadline=None)
@given(mig_cluster(), ops)
def test_mig_placement_keeps_every_gpu_legal_and_never_disturbs_a_held_gpu(nodes, steps):
    cs = ClusterState()
    for inv in nodes:
        cs.add_node(inv)
    gpus = {g.uuid: g for n in nodes for g in n.gpus}
    for i, (op, mem, count, cores) in enumerate(steps):
        if op == "release":
            if cs.pods():
                cs.release(sorted(cs.pods())[mem % len(cs.pods())])
            continue
        pod = PodRequest(namespace="ns", name=f"p{i}", mig=True, slices=(
            SliceRequest(container="c", count=count, memory_mib=mem, cores=cores),))
        before = {u: [s.mig for a in cs.pods().values() for s in a.slices() if s.uuid == u]
                  for u in gpus}
        pl = cs.schedule(pod, POLICY)
        if pl is None:
            if count == 1:  # nothing could take one instance: check against brute force
                for g in gpus.values():
                    if not g.healthy:
                        continue
                    assert g.mig is not None
                    p = mig.profile_for(g.mig.profiles, mem, cores)
                    if p is None:
                        continue
                    taken = [(s.start, g.mig.profile(s.profile).size)  # type: ignore[union-attr]
                             for s in before[g.uuid]]
                    if taken:  # a held GPU is not re-partitioned: its idle instances stay
                        taken += [(i.start, i.size) for i in g.mig.instances
                                  if not any(mig.overlaps(i.start, i.size, *t) for t in taken)]
                    assert not mig.free_starts(p, taken), (g.uuid, p.name, taken)
            continue
        for s in pl.assignment.slices():
            assert s.mig is not None and gpus[s.uuid].healthy
            g = gpus[s.uuid]
            assert g.mig is not None
            p = g.mig.profile(s.mig.profile)
            assert p is not None and p.memory_mib >= mem and s.memory_mib == p.memory_mib
            assert s.mig.start in p.starts
            if before[s.uuid]:  # a held GPU: the new instance avoids every held one
                taken = [(h.start, g.mig.profile(h.profile).size)  # type: ignore[union-attr]
                         for h in before[s.uuid]]
                assert mig.free_starts(p, taken).count(s.mig.start) == 1
        cs.assign(pod.key, pl.assignment)
        _check(cs, nodes)

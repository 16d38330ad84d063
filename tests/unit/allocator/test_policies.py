"""Policy registry, presets, parse errors and the GPU/node choices of each policy."""

from __future__ import annotations

import random

import pytest
from alloc_helpers import gpu, node, one, pod, req, state

from gpuslice.allocator import parse_policy
from gpuslice.allocator.policies import GPU, NODE, PRESETS
from gpuslice.errors import RequestError
from gpuslice.model import GPU as GPU_
from gpuslice.model import GPU_POLICIES, NODE_POLICIES, NodeInventory


def test_registry_names_match_the_shared_model_contract():
    assert tuple(NODE) == NODE_POLICIES, "model.NODE_POLICIES documents the node policy names"
    assert tuple(GPU) == GPU_POLICIES, "model.GPU_POLICIES documents the GPU policy names"


@pytest.mark.parametrize(("text", "name"), [
    pytest.param("binpack", "binpack/binpack", id="binpack preset packs nodes and GPUs"),
    pytest.param("spread", "spread/spread", id="spread preset spreads nodes and GPUs"),
    pytest.param("topology", "binpack/topology", id="topology preset binpacks nodes"),
    pytest.param("spread/binpack", "spread/binpack", id="explicit NODE/GPU form"),
    pytest.param(" Spread/Topology ", "spread/topology", id="case and spaces are forgiven"),
])
def test_parse_policy_accepts_presets_and_node_slash_gpu(text, name):
    assert parse_policy(text).name == name


@pytest.mark.parametrize("text", ["", "pack", "topology/binpack", "binpack/", "a/b/c"])
def test_parse_policy_rejects_unknown_names_listing_the_valid_ones(text):
    with pytest.raises(RequestError) as e:
        parse_policy(text)
    msg = str(e.value)
    for name in (*PRESETS, *NODE, *GPU):
        assert name in msg, f"the error must list {name!r} so the user can fix the value"


def test_unknown_per_pod_override_is_a_request_error_naming_the_field():
    st = state(node("n1"))
    with pytest.raises(RequestError, match="gpu_policy='best'"):
        st.filter(pod(gpu_policy="best"), parse_policy("binpack"))


def _picked(st, p, policy):
    pl = st.schedule(p, parse_policy(policy))
    assert pl is not None
    return pl.node, [s.uuid for c in pl.assignment.containers for s in c.slices]


def test_gpu_binpack_picks_the_fullest_gpu_and_spread_the_emptiest():
    st = state(node("n1", 3))
    st.assign("ns/a", one("n1", (1, 50000, 0)))
    st.assign("ns/b", one("n1", (2, 20000, 0)))
    assert _picked(st, pod(req(mem=1000)), "binpack")[1] == ["n1-gpu1"], \
        "gpu1 has the least memory left that still fits"
    assert _picked(st, pod(req(mem=1000)), "spread")[1] == ["n1-gpu0"], "gpu0 is empty"


def test_node_binpack_picks_the_fuller_node_and_spread_the_emptier():
    st = state(node("a", 2), node("b", 2))
    st.assign("ns/x", one("b", (0, 40000, 50)))
    assert _picked(st, pod(req(mem=1000)), "binpack")[0] == "b"
    assert _picked(st, pod(req(mem=1000)), "spread")[0] == "a"


def test_equal_nodes_tie_on_name_for_every_policy():
    st = state(node("b", 2), node("a", 2), node("c", 2))
    for policy in ("binpack", "spread", "topology"):
        assert _picked(st, pod(req(mem=1000)), policy)[0] == "a", "ties go to the first name"


def _topo_node() -> NodeInventory:
    # gpu0-3 on NUMA 0, gpu4-7 on NUMA 1; NVLink pairs (2,3) and (6,7) only.
    def peers(i: int) -> tuple[str, ...]:
        mate = {2: 3, 3: 2, 6: 7, 7: 6}.get(i)
        return (f"t-gpu{mate}",) if mate is not None else ()

    return NodeInventory(node="t", gpus=tuple(
        gpu("t", i, numa_node=i // 4, nvlink_peers=peers(i) if i in (2, 6) else ())
        for i in range(8)))


def test_topology_prefers_one_numa_node_then_nvlink_peers():
    st = state(_topo_node())
    # Fill gpu0 and gpu4 a little so binpack alone would pair them across NUMA nodes.
    st.assign("ns/a", one("t", (0, 10000, 0)))
    st.assign("ns/b", one("t", (4, 10000, 0)))
    two = pod(req(mem=1000, count=2))
    assert _picked(st, two, "binpack")[1] == ["t-gpu0", "t-gpu4"], "binpack: fullest two"
    assert _picked(st, two, "topology")[1] == ["t-gpu2", "t-gpu3"], \
        "topology: same NUMA node and NVLink-linked (link listed on one side only)"


def test_topology_is_a_preference_never_a_reason_to_reject():
    inv = NodeInventory(node="t", gpus=tuple(gpu("t", i, numa_node=i) for i in range(3)))
    st = state(inv)
    pl = st.schedule(pod(req(mem=1000, count=3)), parse_policy("topology"))
    assert pl is not None, "three GPUs on three NUMA nodes still take a 3-GPU container"


def test_topology_treats_unknown_numa_as_its_own_group():
    inv = NodeInventory(node="t", gpus=(gpu("t", 0), gpu("t", 1), gpu("t", 2, numa_node=0),
                                        gpu("t", 3, numa_node=0)))
    st = state(inv)
    assert _picked(st, pod(req(mem=1000, count=2)), "topology")[1] == ["t-gpu2", "t-gpu3"], \
        "two GPUs of unknown NUMA are not known to share one"


def test_score_all_equals_score_for_every_node_policy():
    fulls = {f"n{i}": i / 40 for i in range(41)} | {"over": 1.3, "zero": 0.0}
    for pol in NODE.values():
        assert pol.score_all(fulls) == {k: pol.score(f) for k, f in fulls.items()}
        assert all(0 <= v <= 10 for v in pol.score_all(fulls).values())



def test_every_node_policys_line_gives_exactly_its_score_on_0_to_1():
    rng = random.Random(3)
    fulls = [i / 1000 for i in range(1001)] + [i / 20 for i in range(21)] + [
        rng.random() for _ in range(5000)] + [0.35, 0.45, 0.05, 0.95]  # x.5 boundaries too
    for pol in NODE.values():
        base, slope = pol.line
        bad = [f for f in fulls if int(base + slope * f) != pol.score(f)]
        assert not bad, f"{pol.name}: prioritize's one-pass formula differs from score at {bad[:3]}"


@pytest.mark.parametrize("name", sorted(GPU))
def test_a_pre_first_gpu_policy_takes_the_smallest_pre_values(name):
    rng = random.Random(7)
    pol = GPU[name]
    uu = [f"g{i}" for i in range(8)]
    gpus = [GPU_(uuid=uu[i], model="m", memory_mib=1000, index=i, numa_node=rng.choice((0, 1)),
                 nvlink_peers=tuple(rng.sample(uu, 3))) for i in range(8)]
    checked = 0
    for _ in range(300):
        ps = rng.sample(range(8), rng.randint(1, 8))
        cands = [(rng.choice((0, 0, 100, 500)), rng.randrange(1000), rng.randrange(100), p, p)
                 for p in ps]
        count = rng.randint(1, len(cands))
        if not pol.pre_first(count):
            continue
        checked += 1
        chosen = pol.choose(cands, count, gpus)
        assert sorted(c[0] for c in chosen) == sorted(c[0] for c in cands)[:count], \
            "pre_first promises no larger PRE is taken while a smaller one is left"
    assert checked > 50, "pre_first holds for single GPUs at least"

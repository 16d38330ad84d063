"""Fit checks: every reason string, details with numbers, lifecycle, exclusivity, filters."""

from __future__ import annotations

import pytest
from alloc_helpers import A10, H100, gpu, node, one, pod, req, state

from gpuslice.allocator import REASONS, ClusterState, parse_policy
from gpuslice.allocator.plan import PodPlan
from gpuslice.allocator.reasons import NO_INVENTORY
from gpuslice.errors import RequestError
from gpuslice.model import ContainerKind, GPUFilter, NodeInventory

BINPACK = parse_policy("binpack")
INIT, SIDECAR = ContainerKind.INIT, ContainerKind.SIDECAR


def _busy_node() -> ClusterState:
    """n: 8 x 80 GiB; gpu0 exclusive, gpu1 full of slots (split 2), gpu2-7 with 70000 MiB used
    and 60 % cores, except gpu7 idle."""
    inv = NodeInventory(node="n", gpus=tuple(
        gpu("n", i, split_count=2 if i == 1 else 10) for i in range(8)))
    st = state(inv)
    st.assign("ns/excl", one("n", (0, 1000, 100)))
    st.assign("ns/s1", one("n", (1, 100, 0)))
    st.assign("ns/s2", one("n", (1, 100, 0)))
    for i in range(2, 7):
        st.assign(f"ns/b{i}", one("n", (i, 70000, 60)))
    return st


CASES = [
    # id, node inventory tweak, pod, reason, resolvable, detail fragment
    ("too few GPUs", None, pod(req(count=9)), "too few GPUs on node", False,
     "node has 8 GPUs; container 'main' needs 9"),
    ("no healthy GPU", "all-unhealthy", pod(req()), "no healthy GPU", False, "0/8 GPUs healthy"),
    ("too few healthy GPUs", "one-healthy", pod(req(count=2)), "too few GPUs on node", False,
     "1/8 GPUs healthy"),
    ("type filter", None, pod(req(), flt=GPUFilter(use_types=("a100",))),
     "GPU type not allowed by pod", False, "0/8 healthy GPUs match the pod's GPU types"),
    ("nouse type filter", None, pod(req(), flt=GPUFilter(nouse_types=("h100",))),
     "GPU type not allowed by pod", False, "models here: NVIDIA H100 80GB HBM3"),
    ("uuid filter", None, pod(req(), flt=GPUFilter(use_uuids=("other-gpu0",))),
     "GPU UUID not allowed by pod", False, "0/8 eligible GPUs pass the pod's GPU UUID lists"),
    ("held exclusively", None, pod(req(), flt=GPUFilter(use_uuids=("n-gpu0",))),
     "GPU held exclusively", True, "1/1 eligible GPUs held by an exclusive slice"),
    ("no free slot", None, pod(req(), flt=GPUFilter(use_uuids=("n-gpu1",))),
     "no free GPU slot", True, "1/1 open GPUs have every slot taken"),
    ("memory, none big enough", None, pod(req(mem=82000)), "insufficient GPU memory", True,
     "6/8 GPUs free but each has < 82000 MiB free"),
    ("memory, too few big enough", None, pod(req(mem=20000, count=2)),
     "insufficient GPU memory", True, "only 1/6 free GPUs have 20000 MiB free"),
    ("cores", None, pod(req(mem=1000, cores=50, count=2)), "insufficient GPU cores", True,
     "1/6 GPUs with room have 50% cores free"),
    ("exclusive needs idle", None, pod(req(mem=1000, cores=100, count=2)),
     "insufficient GPU cores", True, "an exclusive slice (cores=100) needs an idle GPU"),
    ("containers do not fit together", None,
     pod(req("a", mem=60000), req("b", mem=60000)), "no GPU set fits all containers", True,
     "each container fits alone but not all together"),
]


@pytest.mark.parametrize(("tweak", "p", "reason", "resolvable", "fragment"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_reason_is_reported_with_this_nodes_numbers(tweak, p, reason, resolvable, fragment):
    st = _busy_node()
    if tweak:
        inv = st.snapshot("n")
        healthy = {"all-unhealthy": set(), "one-healthy": {7}}[tweak]
        st.add_node(NodeInventory(node="n", gpus=tuple(
            g.__class__(**{**_fields(g), "healthy": g.index in healthy}) for g in inv.gpus)))
    fr = st.filter(p, BINPACK)
    assert "n" in fr.failed, f"the pod must not fit: {fr}"
    r = fr.failed["n"]
    assert r.reason == reason
    assert r.reason in REASONS, "every reason is one of the published categories"
    assert r.resolvable is resolvable, "preemption only helps with capacity reasons"
    assert fragment in r.detail, r.detail
    assert str(r) == r.detail


def _fields(g):
    return {f: getattr(g, f) for f in g.__struct_fields__}


def test_memory_detail_matches_the_documented_example():
    inv = NodeInventory(node="n", gpus=tuple(
        gpu("n", i, split_count=1 if i < 6 else 10) for i in range(8)))
    st = state(inv)
    for i in range(8):
        st.assign(f"ns/f{i}", one("n", (i, 70000 if i >= 6 else 10, 0)))
    r = st.filter(pod(req(mem=20000)), BINPACK).failed["n"]
    assert (r.reason, r.detail) == ("insufficient GPU memory",
                                    "2/8 GPUs free but each has < 20000 MiB free")


def test_the_same_cause_gives_an_identical_reason_on_every_node():
    st = state(node("a", 2, mem=10000), node("b", 4, mem=20000), node("c", 8, mem=30000))
    fr = st.filter(pod(req(mem=40000)), BINPACK)
    assert {r.reason for r in fr.failed.values()} == {"insufficient GPU memory"}
    assert len({r.detail for r in fr.failed.values()}) == 3, "details carry per-node numbers"


def test_unknown_node_names_fail_as_unresolvable():
    fr = state(node("a")).filter(pod(), BINPACK, nodes=["a", "cpu-node"])
    assert list(fr.fits) == ["a"]
    assert fr.failed["cpu-node"].reason == NO_INVENTORY
    assert fr.failed["cpu-node"].resolvable is False


def test_type_filter_matches_model_substrings_case_insensitively_on_mixed_nodes():
    inv = NodeInventory(node="m", gpus=(gpu("m", 0, model=A10, mem=24576), gpu("m", 1)))
    st = state(inv)
    for flt, want in [(GPUFilter(use_types=("h100",)), "m-gpu1"),
                      (GPUFilter(use_types=("A10",)), "m-gpu0"),
                      (GPUFilter(nouse_types=("a10",)), "m-gpu1"),
                      (GPUFilter(nouse_uuids=("m-gpu1",)), "m-gpu0"),
                      (GPUFilter(use_uuids=("m-gpu0",)), "m-gpu0")]:
        pl = st.schedule(pod(req(mem=1000), flt=flt), BINPACK)
        assert pl is not None and pl.assignment.containers[0].slices[0].uuid == want, flt


def test_percent_memory_scales_with_each_gpu():
    inv = NodeInventory(node="m", gpus=(gpu("m", 0, model=A10, mem=24576),))
    pl = state(inv).schedule(pod(req(pct=50)), BINPACK)
    assert pl is not None
    assert pl.assignment.containers[0].slices[0].memory_mib == 12288, "50 % of 24576 MiB"


def test_init_container_reuses_capacity_the_app_phase_will_use_later():
    st = state(node("n", 1, mem=10000))
    p = pod(req("init", mem=8000, kind=INIT), req("app", mem=8000))
    fr = st.filter(p, BINPACK)
    assert "n" in fr.fits, "init (8000) runs before app (8000): the footprint is 8000, not 16000"
    st.assign(p.key, fr.fits["n"].assignment)
    assert [u.memory_used_mib for u in st.gpu_usage()] == [8000]


def test_init_runs_next_to_sidecars_so_both_count_together():
    st = state(node("n", 1, mem=10000))
    p = pod(req("side", mem=3000, kind=SIDECAR), req("init", mem=8000, kind=INIT),
            req("app", mem=1000))
    fr = st.filter(p, BINPACK)
    assert fr.failed["n"].reason == "no GPU set fits all containers", \
        "sidecar 3000 + init 8000 > 10000 even though each fits alone"


def test_init_prefers_gpus_where_it_adds_nothing_to_the_footprint():
    st = state(node("n", 2))
    st.assign("ns/other", one("n", (1, 1000, 0)))  # binpack alone would prefer gpu1
    p = pod(req("init", mem=4000, kind=INIT), req("app", mem=8000))
    pl = st.schedule(p, parse_policy("spread"))
    assert pl is not None
    by = {c.container: c.slices[0].uuid for c in pl.assignment.containers}
    assert by["init"] == by["app"], "the init fits under the app's footprint on the same GPU"


def test_containers_of_one_pod_may_share_a_gpu_and_each_slice_counts():
    inv = NodeInventory(node="n", gpus=(gpu("n", 0, split_count=2),))
    st = state(inv)
    assert "n" in st.filter(pod(req("a"), req("b")), BINPACK).fits
    fr = st.filter(pod(req("a"), req("b"), req("c")), BINPACK)
    assert fr.failed["n"].reason == "no GPU set fits all containers", "three slices, two slots"


def test_exclusive_slice_needs_an_idle_gpu_and_then_blocks_every_other():
    st = state(node("n", 2))
    st.assign("ns/a", one("n", (0, 100, 0)))
    pl = st.schedule(pod(req(mem=1000, cores=100)), BINPACK)
    assert pl is not None and pl.assignment.containers[0].slices[0].uuid == "n-gpu1"
    st.assign("ns/x", pl.assignment)
    fr = st.filter(pod(req(mem=0), flt=GPUFilter(use_uuids=("n-gpu1",))), BINPACK)
    assert fr.failed["n"].reason == "GPU held exclusively"


def test_exclusive_and_other_container_of_the_same_pod_do_not_share_a_gpu():
    st = state(node("n", 1))
    fr = st.filter(pod(req("a", cores=100), req("b")), BINPACK)
    assert fr.failed["n"].reason == "no GPU set fits all containers"


def test_per_pod_policy_override_replaces_the_given_policy():
    st = state(node("n", 2))
    st.assign("ns/a", one("n", (1, 50000, 0)))
    pl = st.schedule(pod(req(mem=1000), gpu_policy="spread"), BINPACK)
    assert pl is not None and pl.assignment.containers[0].slices[0].uuid == "n-gpu0"


def test_pod_without_gpu_requests_fits_everywhere_with_no_slices():
    p = pod()
    p = p.__class__(namespace="ns", name="cpu", slices=())
    fr = state(node("a"), node("b")).filter(p, BINPACK)
    assert sorted(fr.fits) == ["a", "b"]
    assert fr.fits["a"].assignment.containers == ()


@pytest.mark.parametrize(("bad", "field"), [
    (req(count=0), "count=0"),
    (req(mem=-1), "memory_mib=-1"),
    (req(pct=0), "memory_percent=0"),
    (req(pct=101), "memory_percent=101"),
    (req(cores=101), "cores=101"),
    (req(mem=None), "set exactly one"),
])
def test_invalid_requests_raise_request_error_naming_the_field(bad, field):
    with pytest.raises(RequestError, match=field):
        state(node("a")).filter(pod(bad), BINPACK)


def test_duplicate_container_names_are_rejected():
    with pytest.raises(RequestError, match="listed twice"):
        PodPlan(pod(req("x"), req("x")))


def test_rejection_detail_read_late_shows_the_numbers_the_filter_saw():
    inv = NodeInventory(node="n", gpus=tuple(gpu("n", i, mem=1000, split_count=1)
                                             for i in range(2)))
    st = state(inv)
    fr = st.filter(pod(req(mem=2000)), BINPACK)
    st.assign("ns/a", one("n", (0, 500, 0)))  # changes the node after the filter ran
    assert fr.failed["n"].detail == "2/2 GPUs free but each has < 2000 MiB free", \
        "details are computed from the snapshot the filter decided on"
    late = st.filter(pod(req(mem=2000)), BINPACK).failed["n"].detail
    assert late == "1/2 GPUs free but each has < 2000 MiB free"


def test_mixed_model_node_partial_type_match_counts_only_matching_gpus():
    inv = NodeInventory(node="m", gpus=(gpu("m", 0, model=A10, mem=24576), gpu("m", 1, model=H100)))
    fr = state(inv).filter(pod(req(count=2), flt=GPUFilter(use_types=("H100",))), BINPACK)
    assert fr.failed["m"].reason == "GPU type not allowed by pod"
    assert "1/2 healthy GPUs match" in fr.failed["m"].detail

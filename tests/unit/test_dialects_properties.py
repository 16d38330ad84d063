"""Properties of dialects.py: valid requests map field for field; any input -> RequestError only."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuslice.dialects import RESOURCE_NAMES, Defaults, is_gpu_pod, parse_pod
from gpuslice.errors import RequestError
from gpuslice.model import EXCLUSIVE_CORES, Priority


def _pod(limits: dict[str, object]) -> dict[str, object]:
    return {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "c", "resources": {"limits": limits}}]}}


@given(count=st.integers(1, 16), mib=st.none() | st.integers(1, 1024 * 1024),
       cores=st.none() | st.integers(0, 100), priority=st.none() | st.sampled_from([0, 1]),
       as_text=st.booleans(), default_cores=st.integers(0, 100))
def test_a_valid_hami_request_maps_field_for_field(count, mib, cores, priority, as_text,
                                                   default_cores):
    spell = str if as_text else int
    limits = {"nvidia.com/gpu": spell(count)}
    for name, value in (("nvidia.com/gpumem", mib), ("nvidia.com/gpucores", cores),
                        ("nvidia.com/priority", priority)):
        if value is not None:
            limits[name] = spell(value)
    (got,) = parse_pod(_pod(limits), Defaults(cores=default_cores)).slices
    want_cores = default_cores if cores is None else cores
    assert (got.count, got.memory_mib, got.cores) == (count, mib, want_cores)
    assert got.priority == Priority(priority or 0)
    if mib is None:
        assert got.memory_percent == 100, "no memory: the default (or whole GPU) percent"
    assert (got.memory_mib is None) != (got.memory_percent is None), "exactly one memory field"
    assert got.exclusive == (want_cores >= EXCLUSIVE_CORES)


@given(core=st.integers(0, 1600), units=st.none() | st.integers(1, 4096))
def test_gpu_manager_requests_are_accepted_exactly_when_they_split_evenly(core, units):
    limits: dict[str, object] = {"tencent.com/vcuda-core": core}
    if units is not None:
        limits["tencent.com/vcuda-memory"] = units
    count = core // 100 if core >= 100 else 1
    ok = (core < 100 or core % 100 == 0) and (units is None or units % count == 0)
    try:
        (got,) = parse_pod(_pod(limits)).slices
    except RequestError:
        assert not ok, "only uneven splits and non-multiples of 100 are refused"
        return
    assert ok
    assert got.count == count
    if units is not None:
        assert got.memory_mib * got.count == units * 256, "vcuda-memory is the container total"


quantities = st.one_of(st.integers(-5, 2**64), st.text(max_size=6), st.booleans(), st.none(),
                       st.floats(), st.lists(st.integers(), max_size=2))
anything = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["name", "resources", "limits", "requests", "containers",
                         "initContainers", "restartPolicy", "spec", "metadata", "annotations",
                         *sorted(RESOURCE_NAMES)]), inner, max_size=4),
    max_leaves=15,
)
containers = st.lists(st.one_of(anything, st.fixed_dictionaries(
    {"name": st.text(max_size=3), "resources": st.fixed_dictionaries({
        "limits": st.dictionaries(st.sampled_from(sorted(RESOURCE_NAMES)), quantities,
                                  max_size=3),
        "requests": st.dictionaries(st.sampled_from(sorted(RESOURCE_NAMES)), quantities,
                                    max_size=2)})})), max_size=3)
pods = st.one_of(anything, st.fixed_dictionaries({
    "metadata": st.one_of(anything, st.fixed_dictionaries({"annotations": st.dictionaries(
        st.sampled_from(["nvidia.com/use-gputype", "nvidia.com/nouse-gpuuuid",
                         "gpuslice.io/node-policy", "hami.io/gpu-scheduler-policy"]),
        st.text(",ab ", max_size=5) | anything, max_size=3)})),
    "spec": st.one_of(anything, st.fixed_dictionaries(
        {"containers": containers, "initContainers": containers})),
}))


@settings(max_examples=300)
@given(pods)
def test_any_input_gives_a_request_or_a_request_error_never_another_exception(p):
    try:
        got = parse_pod(p)
    except RequestError as err:
        assert err.problems, "a refusal always says why"
        assert all("; " in line for line in err.problems), "and how to fix it"
    else:
        assert all(1 <= s.count <= 16 for s in got.slices), "accepted counts are in range"
        assert all(0 <= s.cores <= 100 for s in got.slices), "accepted cores are in range"
    assert is_gpu_pod(p) in (True, False), "is_gpu_pod never raises"

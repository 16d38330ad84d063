"""Every request dialect -> PodRequest, defaults, filters, policies, and every error path."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from gpuslice import model
from gpuslice.dialects import RESOURCE_NAMES, Defaults, is_gpu_pod, parse_pod
from gpuslice.errors import RequestError
from gpuslice.model import ContainerKind, Priority, SliceRequest


def ctr(name: str = "main", limits: dict[str, Any] | None = None,
        requests: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    resources = {k: v for k, v in (("limits", limits), ("requests", requests)) if v is not None}
    return {"name": name, "image": "x", "resources": resources, **extra}


def pod(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = (),
        annotations: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    meta = {"name": "p", "namespace": "ns", "uid": "u-1", "annotations": annotations or {}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def one(limits: dict[str, Any], defaults: Defaults | None = None, **kw: Any) -> SliceRequest:
    (got,) = parse_pod(pod(ctr(limits=limits, **kw)), defaults or Defaults()).slices
    return got


def want(**kw: Any) -> SliceRequest:
    return SliceRequest(container="main", **kw)


MIB_DEFAULTS = Defaults(memory_mib=2048)

ACCEPTED = {
    "HAMi count, MiB and cores map one to one": (
        {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "4096", "nvidia.com/gpucores": "30"},
        Defaults(), want(count=2, memory_mib=4096, cores=30)),
    "HAMi memory percentage becomes memory_percent": (
        {"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 50},
        Defaults(), want(memory_percent=50)),
    "HAMi without memory takes the default percent": (
        {"nvidia.com/gpu": "1"}, Defaults(), want(memory_percent=100)),
    "HAMi without memory takes a configured default MiB": (
        {"nvidia.com/gpu": "1"}, MIB_DEFAULTS, want(memory_mib=2048)),
    "HAMi without cores takes the configured default cores": (
        {"nvidia.com/gpu": "1"}, Defaults(cores=20), want(memory_percent=100, cores=20)),
    "HAMi exclusive cores without memory takes the whole GPU, not the default MiB": (
        {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "100"}, MIB_DEFAULTS,
        want(memory_percent=100, cores=100)),
    "HAMi memory without a count asks for one GPU": (
        {"nvidia.com/gpumem": "1000"}, Defaults(), want(memory_mib=1000)),
    "HAMi cores of zero mean best effort": (
        {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "0"}, Defaults(), want(memory_percent=100)),
    "HAMi priority 1 is low": (
        {"nvidia.com/gpu": "1", "nvidia.com/priority": "1"}, Defaults(),
        want(memory_percent=100, priority=Priority.LOW)),
    "HAMi 16 GPUs is the most one container may ask for": (
        {"nvidia.com/gpu": "16"}, Defaults(), want(count=16, memory_percent=100)),
    "HAMi 1 TiB per GPU is the largest memory accepted": (
        {"nvidia.com/gpumem": str(1024 * 1024)}, Defaults(), want(memory_mib=1024 * 1024)),
    "HAMi quantities may use any Kubernetes spelling": (
        {"nvidia.com/gpu": "2000m", "nvidia.com/gpumem": "4k"}, Defaults(),
        want(count=2, memory_mib=4000)),
    "Volcano number, memory and cores map one to one": (
        {"volcano.sh/vgpu-number": "2", "volcano.sh/vgpu-memory": "3000",
         "volcano.sh/vgpu-cores": "40"}, Defaults(), want(count=2, memory_mib=3000, cores=40)),
    "Volcano memory alone asks for one GPU with the default cores": (
        {"volcano.sh/vgpu-memory": "3000"}, Defaults(cores=5), want(memory_mib=3000, cores=5)),
    "Volcano exclusive cores without memory takes the whole GPU": (
        {"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-cores": 100}, MIB_DEFAULTS,
        want(memory_percent=100, cores=100)),
    "GPU Manager vcuda-core below 100 is one GPU with that share": (
        {"tencent.com/vcuda-core": "50", "tencent.com/vcuda-memory": "16"}, Defaults(),
        want(memory_mib=16 * 256, cores=50)),
    "GPU Manager vcuda-core 200 is two exclusive GPUs, memory split between them": (
        {"tencent.com/vcuda-core": "200", "tencent.com/vcuda-memory": "32"}, Defaults(),
        want(count=2, memory_mib=16 * 256, cores=100)),
    "GPU Manager vcuda-core 100 without memory takes the whole GPU": (
        {"tencent.com/vcuda-core": "100"}, MIB_DEFAULTS, want(memory_percent=100, cores=100)),
    "GPU Manager vcuda-core 0 is one best-effort GPU": (
        {"tencent.com/vcuda-core": "0", "tencent.com/vcuda-memory": "4"}, Defaults(),
        want(memory_mib=1024)),
    "GPU Manager memory alone asks for one GPU with the default cores": (
        {"tencent.com/vcuda-memory": "8"}, Defaults(cores=10), want(memory_mib=2048, cores=10)),
}


@pytest.mark.parametrize("limits, defaults, expected", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_each_dialect_maps_to_one_slice_request(limits, defaults, expected):
    assert one(limits, defaults) == expected, "DESIGN §3 maps this request to exactly this slice"


def test_values_may_come_from_requests_when_limits_are_absent():
    got = one({}, requests={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "512"})
    assert got == want(memory_mib=512), "requests stand in for limits for extended resources"


def test_equal_limits_and_requests_in_different_spellings_are_accepted():
    got = one({"nvidia.com/gpu": 1}, requests={"nvidia.com/gpu": "1000m"})
    assert got.count == 1, "1 and 1000m are the same quantity"


def test_containers_without_gpu_resources_get_no_slice():
    got = parse_pod(pod(ctr("web", limits={"cpu": "1", "memory": "1Gi"}), ctr("plain")))
    assert got.slices == (), "only containers that ask for GPUs appear in slices"


def test_a_count_of_zero_alone_asks_for_no_gpu():
    got = parse_pod(pod(ctr(limits={"nvidia.com/gpu": "0"}), ctr("b", limits={
        "volcano.sh/vgpu-number": 0})))
    assert got.slices == (), "nvidia.com/gpu: 0 is how people switch a GPU off"


def test_slices_follow_pod_order_with_init_and_sidecar_containers_first():
    gpu = {"nvidia.com/gpu": "1"}
    got = parse_pod(pod(
        ctr("app-b", limits=gpu), ctr("no-gpu"), ctr("app-a", limits={"volcano.sh/vgpu-number": 2}),
        init=(ctr("setup", limits=gpu), ctr("proxy", limits={"tencent.com/vcuda-core": "10"},
                                             restartPolicy="Always"))))
    assert [(s.container, s.kind) for s in got.slices] == [
        ("setup", ContainerKind.INIT), ("proxy", ContainerKind.SIDECAR),
        ("app-b", ContainerKind.APP), ("app-a", ContainerKind.APP),
    ], "init containers first (restartPolicy Always = sidecar), then app containers, in order"


def test_dialects_may_differ_between_containers_of_one_pod():
    got = parse_pod(pod(ctr("a", limits={"nvidia.com/gpu": 1}),
                        ctr("b", limits={"volcano.sh/vgpu-number": 1})))
    assert [s.container for s in got.slices] == ["a", "b"], "mixing is only wrong inside one"


def test_pod_metadata_is_carried_into_the_request():
    got = parse_pod(pod(ctr(limits={"nvidia.com/gpu": 1})))
    assert (got.namespace, got.name, got.uid, got.key) == ("ns", "p", "u-1", "ns/p")


def test_a_pod_without_name_or_namespace_uses_generate_name_and_default():
    p = {"metadata": {"generateName": "job-"}, "spec": {"containers": [ctr()]}}
    got = parse_pod(p)
    assert (got.namespace, got.name) == ("default", "job-"), "admission sees pods unnamed"


def test_gpu_filters_come_from_comma_separated_annotations_trimmed():
    got = parse_pod(pod(ctr(limits={"nvidia.com/gpu": 1}), annotations={
        "nvidia.com/use-gputype": " A100 , H100", "nvidia.com/nouse-gputype": "T4",
        "nvidia.com/use-gpuuuid": "GPU-1,GPU-2", "nvidia.com/nouse-gpuuuid": "GPU-3",
    }))
    assert got.filter == model.GPUFilter(use_types=("A100", "H100"), nouse_types=("T4",),
                                         use_uuids=("GPU-1", "GPU-2"), nouse_uuids=("GPU-3",))


@pytest.mark.parametrize("annotations, node, gpu", [
    ({}, None, None),
    ({"gpuslice.io/node-policy": "spread", "gpuslice.io/gpu-policy": "topology"},
     "spread", "topology"),
    ({"hami.io/node-scheduler-policy": "binpack", "hami.io/gpu-scheduler-policy": "spread"},
     "binpack", "spread"),
    ({"gpuslice.io/node-policy": "spread", "hami.io/node-scheduler-policy": "spread"},
     "spread", None),
], ids=["no annotation keeps the configured policies", "our spelling overrides",
        "HAMi's spelling overrides", "both spellings agreeing are accepted"])
def test_policy_annotations_override_the_policies_per_pod(annotations, node, gpu):
    got = parse_pod(pod(ctr(limits={"nvidia.com/gpu": 1}), annotations=annotations))
    assert (got.node_policy, got.gpu_policy) == (node, gpu)


HAMI = {"nvidia.com/gpu": "1"}

REFUSED = {
    "mixed dialects in one container": (
        {"nvidia.com/gpu": "1", "volcano.sh/vgpu-memory": "100"},
        'container "main": resources=', "mixes dialects (HAMi and Volcano)", "keep only the HAMi"),
    "gpumem and gpumem-percentage together": (
        {**HAMI, "nvidia.com/gpumem": "100", "nvidia.com/gpumem-percentage": "50"},
        'container "main": nvidia.com/gpumem-percentage=50: given together with',
        "nvidia.com/gpumem", "give memory either in MiB"),
    "count zero with memory": (
        {"nvidia.com/gpu": "0", "nvidia.com/gpumem": "100"},
        'container "main": nvidia.com/gpu=0: asks for no GPU but nvidia.com/gpumem is set',
        "", "raise nvidia.com/gpu to 1 or more, or remove nvidia.com/gpumem"),
    "count zero with cores (Volcano)": (
        {"volcano.sh/vgpu-number": "0", "volcano.sh/vgpu-cores": "10"},
        'container "main": volcano.sh/vgpu-number=0: asks for no GPU', "vgpu-cores is set",
        "raise volcano.sh/vgpu-number"),
    "a negative count": (
        {"nvidia.com/gpu": "-1"}, 'container "main": nvidia.com/gpu=-1: negative', "",
        "ask for 1 or more GPUs"),
    "a fractional count": (
        {"nvidia.com/gpu": "1.5"}, 'container "main": nvidia.com/gpu=1.5: must be a whole number',
        "", "write an integer, e.g. 2"),
    "a millicore-style count": (
        {"nvidia.com/gpu": "500m"}, 'container "main": nvidia.com/gpu=500m: must be a whole',
        "", "write an integer"),
    "a malformed count": (
        {"nvidia.com/gpu": "one"}, 'container "main": nvidia.com/gpu=one: not a number', "",
        "write a whole number"),
    "more than 16 GPUs": (
        {"nvidia.com/gpu": "17"}, 'container "main": nvidia.com/gpu=17: more than 16 GPUs', "",
        "ask for at most 16"),
    "zero memory": (
        {**HAMI, "nvidia.com/gpumem": "0"}, 'container "main": nvidia.com/gpumem=0: below 1', "",
        "give MiB per GPU"),
    "negative memory": (
        {**HAMI, "nvidia.com/gpumem": "-5"}, 'container "main": nvidia.com/gpumem=-5: negative',
        "", "give MiB per GPU"),
    "huge memory (4Gi read as MiB)": (
        {**HAMI, "nvidia.com/gpumem": "4Gi"},
        'container "main": nvidia.com/gpumem=4Gi: 4294967296 MiB is more than 1 TiB per GPU',
        "unit mix-up", "nvidia.com/gpumem is in MiB, not bytes: write e.g. 4096 for 4 GiB "
        "(did you mean 4096?)"),
    "huge Volcano memory": (
        {"volcano.sh/vgpu-memory": str(2 * 1024 * 1024)},
        'container "main": volcano.sh/vgpu-memory=2097152: 2097152 MiB is more than 1 TiB',
        "", "volcano.sh/vgpu-memory is in MiB"),
    "percentage above 100": (
        {**HAMI, "nvidia.com/gpumem-percentage": "150"},
        'container "main": nvidia.com/gpumem-percentage=150: above 100 percent', "",
        "give 1 to 100"),
    "percentage zero": (
        {**HAMI, "nvidia.com/gpumem-percentage": "0"},
        'container "main": nvidia.com/gpumem-percentage=0: below 1', "", "give 1 to 100"),
    "cores above 100": (
        {**HAMI, "nvidia.com/gpucores": "150"},
        'container "main": nvidia.com/gpucores=150: above 100 (100 = one whole GPU)', "",
        "to use more, raise nvidia.com/gpu"),
    "Volcano cores above 100": (
        {"volcano.sh/vgpu-cores": "101"}, 'container "main": volcano.sh/vgpu-cores=101: above',
        "", "to use more, raise volcano.sh/vgpu-number"),
    "negative cores": (
        {**HAMI, "nvidia.com/gpucores": "-1"}, 'container "main": nvidia.com/gpucores=-1: negative',
        "", "0 (best effort) to 100"),
    "priority other than 0 or 1": (
        {**HAMI, "nvidia.com/priority": "2"},
        'container "main": nvidia.com/priority=2: must be 0 (high) or 1 (low)', "", "use 0 or 1"),
    "priority alone": (
        {"nvidia.com/priority": "1"}, 'container "main": nvidia.com/priority=1: priority alone',
        "", "add nvidia.com/gpu: 1, or remove nvidia.com/priority"),
    "vcuda-core above 100 that is not whole GPUs": (
        {"tencent.com/vcuda-core": "150"},
        'container "main": tencent.com/vcuda-core=150: above 100 it must be a multiple of 100',
        "", "use 100 or 200 for whole GPUs"),
    "vcuda-core beyond 16 GPUs": (
        {"tencent.com/vcuda-core": "1700"},
        'container "main": tencent.com/vcuda-core=1700: more than 16 whole GPUs', "",
        "ask for at most 1600"),
    "vcuda-memory that does not split over the GPUs": (
        {"tencent.com/vcuda-core": "200", "tencent.com/vcuda-memory": "3"},
        'container "main": tencent.com/vcuda-memory=3: does not split evenly over 2 GPUs',
        "total for the container", "use a multiple of 2"),
    "vcuda-memory of zero": (
        {"tencent.com/vcuda-memory": "0"}, 'container "main": tencent.com/vcuda-memory=0: below 1',
        "", "give units of 256 MiB"),
    "huge vcuda-memory": (
        {"tencent.com/vcuda-memory": str(5000 * 1024)},
        'container "main": tencent.com/vcuda-memory=5120000: 1310720000 MiB per GPU', "1 TiB",
        "counts units of 256 MiB"),
    "a boolean where a quantity belongs": (
        {"nvidia.com/gpu": True}, 'container "main": nvidia.com/gpu=true: not a number', "",
        "write a whole number"),
}


@pytest.mark.parametrize("limits, prefix, middle, fix", REFUSED.values(), ids=REFUSED.keys())
def test_each_bad_request_is_refused_naming_container_field_and_fix(limits, prefix, middle, fix):
    with pytest.raises(RequestError) as err:
        parse_pod(pod(ctr(limits=limits)))
    (problem,) = err.value.problems
    assert problem.startswith(prefix), f"names container, field=value and what is wrong: {problem}"
    assert middle in problem, f"explains the cause: {problem}"
    assert fix in problem.rsplit("; ", 1)[1], f"ends with the fix: {problem}"


def test_limits_and_requests_that_differ_are_refused():
    with pytest.raises(RequestError) as err:
        parse_pod(pod(ctr(limits={"nvidia.com/gpu": "2"}, requests={"nvidia.com/gpu": "1"})))
    assert err.value.problems == [
        'container "main": nvidia.com/gpu=2: resources.limits and resources.requests differ '
        "(2 vs 1); Kubernetes requires them equal; give the same value in both, or only in limits"
    ]


def test_every_problem_is_reported_at_once_one_line_each():
    bad = pod(
        ctr("a", limits={"nvidia.com/gpu": "17", "nvidia.com/gpucores": "150"}),
        ctr("b", limits={"volcano.sh/vgpu-memory": "0"}),
        ctr("ok", limits={"nvidia.com/gpu": "1"}),
        init=(ctr("i", limits={"tencent.com/vcuda-core": "250"}),),
        annotations={"gpuslice.io/gpu-policy": "fastest"},
    )
    with pytest.raises(RequestError) as err:
        parse_pod(bad)
    problems = err.value.problems
    assert [p.split(":")[0] for p in problems] == [
        'container "i"', 'container "a"', 'container "a"', 'container "b"', "pod"
    ], f"every problem, in pod order, one line each: {problems}"
    assert str(err.value) == "; ".join(problems), "the message carries them all"


POD_PROBLEMS = {
    "an empty item in a filter list": (
        {"nvidia.com/use-gputype": "A100,,H100"},
        'pod: annotation nvidia.com/use-gputype="A100,,H100": empty item in the comma-separated '
        'list; separate names with single commas, e.g. "A100,H100"'),
    "an empty filter annotation": (
        {"nvidia.com/nouse-gpuuuid": ""},
        'pod: annotation nvidia.com/nouse-gpuuuid="": empty item'),
    "a filter annotation that is not a string": (
        {"nvidia.com/use-gpuuuid": 5}, "pod: annotation nvidia.com/use-gpuuuid=5: empty item"),
    "a type both used and excluded": (
        {"nvidia.com/use-gputype": "A100", "nvidia.com/nouse-gputype": "a100"},
        "pod: annotation nvidia.com/nouse-gputype=a100: excludes a100, which "
        "nvidia.com/use-gputype asks for; name it in only one of the two"),
    "a UUID both used and excluded": (
        {"nvidia.com/use-gpuuuid": "GPU-1", "nvidia.com/nouse-gpuuuid": "GPU-1,GPU-2"},
        'pod: annotation nvidia.com/nouse-gpuuuid="GPU-1,GPU-2": excludes GPU-1'),
    "an unknown node policy": (
        {"gpuslice.io/node-policy": "random"},
        "pod: annotation gpuslice.io/node-policy=random: unknown node policy; "
        "use one of binpack, spread"),
    "an unknown GPU policy in HAMi's spelling": (
        {"hami.io/gpu-scheduler-policy": "fastest"},
        "pod: annotation hami.io/gpu-scheduler-policy=fastest: unknown GPU policy; "
        "use one of binpack, spread, topology"),
    "both spellings of a policy disagreeing": (
        {"gpuslice.io/gpu-policy": "binpack", "hami.io/gpu-scheduler-policy": "spread"},
        "pod: annotation hami.io/gpu-scheduler-policy=spread: disagrees with "
        "gpuslice.io/gpu-policy=binpack; give one of the two, or the same value"),
}


@pytest.mark.parametrize("annotations, expected", POD_PROBLEMS.values(), ids=POD_PROBLEMS.keys())
def test_bad_pod_annotations_are_refused_with_the_fix(annotations, expected):
    with pytest.raises(RequestError) as err:
        parse_pod(pod(ctr(limits=HAMI), annotations=annotations))
    (problem,) = err.value.problems
    assert problem.startswith(expected), f"names annotation, value and fix: {problem}"


MALFORMED = {
    "a pod that is not a mapping": ([], "pod: []: expected a Pod object"),
    "spec missing": ({"metadata": {}}, "pod: spec=null: missing or not an object"),
    "spec not an object": ({"spec": "x"}, "pod: spec=x: missing or not an object"),
    "containers not a list": ({"spec": {"containers": {"a": 1}}},
                              "pod: spec.containers={'a': 1}: expected a non-empty list"),
    "containers empty": ({"spec": {"containers": []}}, "pod: spec.containers=[]: expected"),
    "initContainers not a list": ({"spec": {"containers": [ctr()], "initContainers": 3}},
                                  "pod: spec.initContainers=3: expected a non-empty list"),
    "a container that is not a mapping": ({"spec": {"containers": ["x"]}},
                                          "pod: spec.containers[0]=x: expected a container"),
    "an unnamed container": ({"spec": {"containers": [{"resources": {}}]}},
                             "pod: spec.containers[0].name=null: every container needs a name"),
    "an empty container name": ({"spec": {"initContainers": [{"name": ""}],
                                          "containers": [ctr()]}},
                                'pod: spec.initContainers[0].name="": every container'),
    "two containers with one name": ({"spec": {"containers": [ctr(), ctr()]}},
                                     'container "main": name=main: two containers share'),
    "resources not an object": ({"spec": {"containers": [{"name": "a", "resources": 1}]}},
                                'container "a": resources=1: expected an object'),
    "limits not an object": ({"spec": {"containers": [{"name": "a",
                                                       "resources": {"limits": ["x"]}}]}},
                             'container "a": resources.limits=[\'x\']: expected an object'),
    "metadata not an object": ({"metadata": 1, "spec": {"containers": [ctr()]}},
                               "pod: metadata=1: expected an object"),
    "annotations not an object": ({"metadata": {"annotations": [1]},
                                   "spec": {"containers": [ctr()]}},
                                  "pod: metadata.annotations=[1]: expected an object"),
}


@pytest.mark.parametrize("bad, expected", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_pod_is_a_request_error_never_a_key_or_type_error(bad, expected):
    with pytest.raises(RequestError) as err:
        parse_pod(bad)
    assert err.value.problems[0].startswith(expected), f"says where: {err.value.problems}"
    assert all("; " in p for p in err.value.problems), "every problem says how to fix it"


def test_is_gpu_pod_sees_any_dialect_in_any_container_list():
    assert not is_gpu_pod(pod(ctr(limits={"cpu": "1"}))), "CPU-only pods are not ours"
    for name in sorted(RESOURCE_NAMES):
        assert is_gpu_pod(pod(ctr(), init=(ctr("i", requests={name: "1"}),))), name
    assert is_gpu_pod(pod(ctr(limits={"nvidia.com/gpu": "0"}))), "even a zero count names it"


@pytest.mark.parametrize("bad", [None, [], {"spec": 1}, {"spec": {"containers": "x"}},
                                 {"spec": {"containers": [1, {"resources": []}]}}])
def test_is_gpu_pod_answers_false_for_malformed_pods_instead_of_raising(bad):
    assert is_gpu_pod(bad) is False


def test_resource_names_cover_all_three_dialects():
    expected = {
        "nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage",
        "nvidia.com/gpucores", "nvidia.com/priority", "volcano.sh/vgpu-number",
        "volcano.sh/vgpu-memory", "volcano.sh/vgpu-cores", "tencent.com/vcuda-core",
        "tencent.com/vcuda-memory",
    }
    assert expected == RESOURCE_NAMES, "HAMi (5), Volcano (3) and GPU Manager (2) names"


def test_defaults_take_a_mib_value_in_place_of_the_default_percent():
    d = Defaults(memory_mib=4096)
    assert (d.memory_mib, d.memory_percent) == (4096, None), "exactly one memory default"


@pytest.mark.parametrize("kwargs, message", [
    ({"memory_mib": 100, "memory_percent": 50}, "exactly one must be set"),
    ({"memory_percent": None}, "exactly one must be set"),
    ({"memory_mib": 0}, "memory_mib=0: outside"),
    ({"memory_percent": 101}, "memory_percent=101: outside 1..100"),
    ({"cores": 101}, "cores=101: outside 0..100"),
    ({"cores": -1}, "cores=-1: outside 0..100"),
])
def test_defaults_are_validated_when_built(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Defaults(**kwargs)


def test_defaults_from_a_config_file_fail_as_msgspec_validation_errors():
    with pytest.raises(msgspec.ValidationError, match="cores=500"):
        msgspec.convert({"cores": 500}, Defaults)


def test_the_worked_example_in_docs_concepts_places_pods_as_documented():
    """docs/concepts.md, "Worked example": requests -> allocator -> annotation round trip."""
    from gpuslice.allocator import ClusterState, parse_policy
    from gpuslice.codec import decode_assignment, encode_assignment

    gpu = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 20000, "nvidia.com/gpucores": 30}
    vgpu = {"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 40000,
            "volcano.sh/vgpu-cores": 50}
    two = {"nvidia.com/gpu": 2, "nvidia.com/gpumem": 30000, "nvidia.com/gpucores": 20}
    pods = []
    for name, limits in (("small", gpu), ("medium", vgpu), ("pair", two)):
        p = pod(ctr(limits=limits))
        p["metadata"]["name"] = name
        pods.append(parse_pod(p))
    expected = {
        "binpack": {"small": ["node-a-0"], "medium": ["node-a-0"],
                    "pair": ["node-b-0", "node-b-1"]},
        "spread": {"small": ["node-a-0"], "medium": ["node-b-0"],
                   "pair": ["node-a-0", "node-a-1"]},
    }
    for preset, want_gpus in expected.items():
        cluster = ClusterState()
        for node in ("node-a", "node-b"):
            cluster.add_node(model.NodeInventory(node=node, gpus=tuple(
                model.GPU(uuid=f"{node}-{i}", model="NVIDIA H100 80GB HBM3", memory_mib=81920,
                          index=i) for i in range(2))))
        got = {}
        for request in pods:
            placement = cluster.schedule(request, parse_policy(preset))
            assert placement is not None, f"{preset}: {request.name} fits somewhere"
            assignment = decode_assignment(encode_assignment(placement.assignment))
            cluster.assign(request.key, assignment)
            got[request.name] = [s.uuid for s in assignment.slices()]
        assert got == want_gpus, f"{preset}: the doc's explanation no longer matches the code"

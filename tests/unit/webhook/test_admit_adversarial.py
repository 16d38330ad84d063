"""Tenants are adversaries: garbage pods are denied with a clear line, never a traceback, and a
tenant cannot preset what gpuslice sets (the node agent's limits)."""

from __future__ import annotations

import copy
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from webhook_pods import admitted, apply_patch, container, gpu_pod

from gpuslice import dialects, handoff
from gpuslice.webhook.admit import Options, Result, admit

OPTIONS = Options()


def decide(pod):
    return admit("CREATE", pod, {}, OPTIONS)


@pytest.mark.parametrize(("why", "pod", "expected"), [
    ("a list instead of a pod", [1, 2], "not a Pod object"),
    ("metadata that is a string", {"metadata": "x", "spec": {}}, "metadata='x': not an object"),
    ("a non-dict container", {"metadata": {}, "spec": {"containers": [
        "evil", container(limits={"nvidia.com/gpu": "1"})]}},
     "spec.containers[0]=evil: expected a container object"),
    ("labels that are a list", gpu_pod(container(limits={"nvidia.com/gpu": "1"}),
                                       labels=["a"]), "metadata.labels=['a']: not an object"),
    ("env that is a map", gpu_pod(container(limits={"nvidia.com/gpu": "1"}, env={"A": "1"})),
     "env={'A': '1'}: not a list"),
    ("garbage policy annotation", gpu_pod(container(limits={"nvidia.com/gpu": "1"}),
                                          annotations={"gpuslice.io/gpu-policy": ["x"]}),
     "annotation gpuslice.io/gpu-policy"),
    ("garbage GPU type list", gpu_pod(container(limits={"nvidia.com/gpu": "1"}),
                                      annotations={"nvidia.com/use-gputype": "A100,,H100"}),
     "empty item in the comma-separated list"),
    ("annotations that are a list", gpu_pod(container(limits={"nvidia.com/gpu": "1"}),
                                            annotations=[1]), "metadata.annotations"),
])
def test_garbage_is_denied_with_the_field_and_never_raises(why, pod, expected):
    decision = decide(pod)
    assert decision.result is Result.DENIED, why
    assert expected in decision.message, f"{why}: {decision.message}"


@pytest.mark.parametrize("value", ["9" * 5000, "1e300", "1Ei", "-1", "0.5", "NaN", [1], None,
                                   {"x": 1}, True])
def test_huge_and_odd_quantities_are_denied_in_one_short_line(value):
    decision = decide(gpu_pod(container(limits={"nvidia.com/gpumem": value})))
    assert decision.result is Result.DENIED
    (line,) = decision.message.splitlines()
    assert line.startswith('container "c": nvidia.com/gpumem=') and len(line) <= 300


def test_a_pod_with_thousands_of_bad_containers_gets_a_bounded_denial():
    pod = gpu_pod(*[container(f"c{i}", limits={"nvidia.com/gpucores": "101"})
                    for i in range(3000)])
    lines = decide(pod).message.splitlines()
    assert len(lines) == 51 and lines[-1] == "... and 2950 more problems"


@pytest.mark.parametrize("var", ["CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_MEMORY_LIMIT_0",
                                 "CUDA_DEVICE_SM_LIMIT", "CUDA_DEVICE_MEMORY_SHARED_CACHE",
                                 "CUDA_TASK_PRIORITY", "NVIDIA_VISIBLE_DEVICES",
                                 "GPUSLICE_DEVICE_UUIDS", "GPUSLICE_COMPUTE_MODE"])
def test_a_tenant_cannot_preset_what_the_node_agent_sets(var):
    """The kubelet appends spec env after the device plugin's, so a spec value would win."""
    c = container(limits={"nvidia.com/gpu": "1"},
                  env=[{"name": var, "value": "all"}])
    c["initContainers"] = None
    decision = decide(gpu_pod(c))
    assert decision.result is Result.DENIED
    assert decision.message == (f'container "c": env {var}: set by gpuslice\'s node agent for '
                                "the slice the pod is given; remove it from the pod")


def test_agent_variables_in_containers_without_a_slice_are_not_ours_to_police():
    pod = gpu_pod(container("gpu", limits={"nvidia.com/gpu": "1"}),
                  container("web", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]))
    assert decide(pod).result is Result.PATCHED


def test_env_problems_and_request_problems_are_reported_together():
    pod = gpu_pod(container(limits={"nvidia.com/gpucores": "101"},
                            env=[{"name": "CUDA_DEVICE_SM_LIMIT", "value": "100"}]))
    lines = decide(pod).message.splitlines()
    assert len(lines) == 2 and "gpucores=101" in lines[0] and "CUDA_DEVICE_SM_LIMIT" in lines[1]


def test_names_with_slashes_and_tildes_cannot_escape_their_json_pointer():
    pod = gpu_pod(container("a~1b", limits={"nvidia.com/gpumem": "1024"}),
                  labels={"gpuslice.io~1managed": "x", "a/b": "c"})
    out = admitted(pod)
    assert out["metadata"]["labels"] == {"gpuslice.io~1managed": "x", "a/b": "c",
                                         "gpuslice.io/managed": "true"}
    assert out["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"


# --- property: any GPU pod we patch is valid afterwards and a fixpoint -----------------------

_NAMES = st.text(string.ascii_lowercase, min_size=1, max_size=4)
_HAMI = st.fixed_dictionaries({}, optional={
    "nvidia.com/gpu": st.sampled_from(["1", "2"]),
    "nvidia.com/gpumem": st.sampled_from(["1024", "40000"]),
    "nvidia.com/gpucores": st.sampled_from(["0", "30", "100"])})
_VOLCANO = st.fixed_dictionaries({}, optional={
    "volcano.sh/vgpu-number": st.just("1"), "volcano.sh/vgpu-memory": st.just("2048")})
_GPU_MANAGER = st.fixed_dictionaries({"tencent.com/vcuda-core": st.sampled_from(["25", "100"])},
                                     optional={"tencent.com/vcuda-memory": st.just("4")})
_ENV = st.lists(st.fixed_dictionaries({
    "name": st.sampled_from(["GPUSLICE_POD_UID", "GPUSLICE_CONTAINER_NAME", "A", "B"]),
    "value": _NAMES}),
    max_size=4)


@st.composite
def _containers(draw, i):
    values = draw(st.one_of(_HAMI, _VOLCANO, _GPU_MANAGER, st.just({"cpu": "1"})))
    where = draw(st.sampled_from(["limits", "requests", "both"]))
    resources = {s: dict(values) for s in (("limits", "requests") if where == "both"
                                           else (where,))}
    c = {"name": f"c{i}", "image": "x", "resources": resources}
    if draw(st.booleans()):
        c["env"] = draw(_ENV)
    return c


@st.composite
def _pods(draw):
    pod = gpu_pod(*[draw(_containers(i)) for i in range(draw(st.integers(1, 3)))])
    if draw(st.booleans()):
        pod["spec"]["initContainers"] = [draw(_containers(9))]
    if draw(st.booleans()):
        pod["metadata"]["labels"] = {"app": "x"}
    if draw(st.booleans()):
        del pod["spec"]["schedulerName"]
    return pod


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_pods())
def test_every_patched_pod_is_valid_managed_and_a_fixpoint(pod):
    before = copy.deepcopy(pod)
    decision = decide(pod)
    assert pod == before, "admit must not modify its input"
    if decision.result is not Result.PATCHED:
        assert decision.patch == ()
        return
    out = apply_patch(pod, decision.patch)
    dialects.parse_pod(out)  # still valid
    assert [c.get("env") for k in ("initContainers", "containers") for c in out["spec"].get(k, [])
            ] == [c.get("env") for k in ("initContainers", "containers")
                  for c in pod["spec"].get(k, [])], "env as the tenant wrote it"
    assert handoff.missing_device_resources(out) == ()
    assert out["metadata"]["labels"][handoff.MANAGED_LABEL] == "true"
    for key in ("initContainers", "containers"):
        for c in out["spec"].get(key, []):
            res = c["resources"]
            if "requests" in res and "limits" in res:
                shared = set(res["requests"]) & set(res["limits"])
                assert all(res["requests"][n] == res["limits"][n] for n in shared)
    assert decide(out).patch == (), "a second admission changes nothing"


@pytest.mark.parametrize("name", ["gpuslice.io/assignment", "gpuslice.io/bound-at",
                                  "gpuslice.io/allocated"])
def test_a_pod_cannot_arrive_with_a_placement_only_gpuslice_writes(name):
    """The node agent answers Allocate from these annotations: a forged one would hand the
    pod GPUs and limits the extender never granted."""
    pod = gpu_pod(container(limits={"nvidia.com/gpu": "1"}), annotations={name: "forged"})
    decision = decide(pod)
    assert decision.result is Result.DENIED
    assert decision.message == (f"pod: annotation {name}: written by gpuslice when it places "
                                "the pod; remove it")


def test_a_gpu_pod_cannot_skip_the_scheduler_with_node_name():
    pod = gpu_pod(container(limits={"nvidia.com/gpu": "1"}))
    pod["spec"]["nodeName"] = "gpu-node-1"
    assert decide(pod).message.startswith("pod: spec.nodeName='gpu-node-1': a GPU pod must be "
                                          "placed by the gpuslice scheduler")


def test_a_mirror_pod_of_a_static_gpu_pod_is_left_as_the_kubelet_wrote_it():
    pod = gpu_pod(container(limits={"nvidia.com/gpu": "1"}),
                  annotations={"kubernetes.io/config.mirror": "abc"})
    pod["spec"]["nodeName"] = "gpu-node-1"
    decision = admit("CREATE", pod, {}, OPTIONS, user="system:node:gpu-node-1")
    assert decision.result is Result.ALLOWED and decision.patch == ()


def test_a_tenant_cannot_pass_a_pod_off_as_a_mirror_pod():
    """kube-apiserver lets anyone create a pod with the mirror annotation and a nodeName; only
    the kubelet (a system:node: user) writes real ones."""
    pod = gpu_pod(container(limits={"nvidia.com/gpu": "1"}),
                  annotations={"kubernetes.io/config.mirror": "abc",
                               "gpuslice.io/assignment": "forged"})
    pod["spec"]["nodeName"] = "gpu-node-1"
    decision = admit("CREATE", pod, {}, OPTIONS, user="alice")
    assert decision.result is Result.DENIED
    assert "spec.nodeName" in decision.message and "gpuslice.io/assignment" in decision.message


# --- fuzz: any JSON anywhere in a pod gives a Decision, never an exception ---------------------

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
    | st.sampled_from(["nvidia.com/gpu", "nvidia.com/gpumem", "1", "4096", "GPUSLICE_POD_UID"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["name", "env", "resources", "limits", "requests", "nvidia.com/gpu",
                         "nvidia.com/gpumem", "tencent.com/vcuda-core", "value", "x"]),
        inner, max_size=3),
    max_leaves=12)


@st.composite
def _garbled_pods(draw):
    pod = gpu_pod(container(limits={"nvidia.com/gpu": "1"}, env=[{"name": "A", "value": "1"}]))
    where = draw(st.sampled_from([
        ("metadata", "labels"), ("metadata", "annotations"), ("spec", "containers"),
        ("spec", "initContainers"), ("spec", "schedulerName"), ("spec", "nodeName"),
        ("spec", "containers", 0, "env"), ("spec", "containers", 0, "resources"),
        ("spec", "containers", 0, "resources", "limits"), ("spec", "containers", 0, "name"),
        ("spec", "containers", 0, "env", 0)]))
    target = pod
    for part in where[:-1]:
        target = target[part]
    target[where[-1]] = draw(_JSON)
    return pod


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_garbled_pods())
def test_garbage_anywhere_gives_a_decision_never_an_exception(pod):
    decision = decide(pod)
    assert decision.result in Result
    if decision.result is Result.PATCHED:
        apply_patch(pod, decision.patch)


def test_an_env_entry_whose_name_is_not_a_string_is_no_crash():
    """Found by the fuzz test above: `{"name": []}` in env raised TypeError (unhashable)."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team"},
           "spec": {"containers": [{"name": "c", "image": "registry.invalid/app",
                                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                                    "env": [{"name": []}]}]}}
    assert decide(pod).result in Result

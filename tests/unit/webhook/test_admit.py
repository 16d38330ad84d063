"""Every branch of the admission decision: pass, skip, deny, and each part of the patch."""

from __future__ import annotations

import pytest
from webhook_pods import admitted, apply_patch, container, gpu_pod

from gpuslice import dialects, handoff
from gpuslice.webhook.admit import Options, Result, admit, pointer

OPTIONS = Options()
HAMI_HALF = container(limits={"nvidia.com/gpumem": "4096"})


def decide(pod, namespace_labels=None, options=OPTIONS, operation="CREATE", **kw):
    return admit(operation, pod, namespace_labels or {}, options, **kw)


# --- what passes untouched ----------------------------------------------------------------

@pytest.mark.parametrize(("why", "pod", "kw"), [
    ("a pod without slice requests", gpu_pod(container(limits={"cpu": "1"})), {}),
    ("a pod asking for 0 GPUs", gpu_pod(container(limits={"nvidia.com/gpu": "0"})), {}),
    ("an UPDATE (GPU resources are immutable)", gpu_pod(HAMI_HALF), {"operation": "UPDATE"}),
    ("a DELETE", gpu_pod(HAMI_HALF), {"operation": "DELETE"}),
    ("a subresource", gpu_pod(HAMI_HALF), {"sub_resource": "ephemeralcontainers"}),
    ("another kind", gpu_pod(HAMI_HALF), {"kind": "Deployment"}),
])
def test_requests_gpuslice_does_not_own_pass_without_a_patch(why, pod, kw):
    decision = decide(pod, **kw)
    assert decision.result is Result.ALLOWED and decision.allowed, why
    assert decision.patch == () and decision.warnings == (), f"{why} must not be changed"


def test_a_pod_already_as_gpuslice_needs_it_gets_no_patch_on_reinvocation():
    once = admitted(gpu_pod(HAMI_HALF))
    again = decide(once)
    assert again.result is Result.ALLOWED and again.patch == (), (
        "reinvocationPolicy IfNeeded calls us again; a second pass must change nothing")


# --- opt-out --------------------------------------------------------------------------------

def test_a_namespace_labelled_to_opt_out_is_skipped_even_for_an_invalid_gpu_pod():
    pod = gpu_pod(container(limits={"nvidia.com/gpucores": "150"}))
    decision = decide(pod, {"gpuslice.io/webhook": "disabled"})
    assert decision.result is Result.SKIPPED and decision.patch == ()
    assert "namespace" in decision.why


def test_a_pod_labelled_to_opt_out_is_skipped_in_a_bypass_namespace():
    pod = gpu_pod(HAMI_HALF, labels={"gpuslice.io/webhook": "disabled"})
    decision = decide(pod, options=Options(bypass_namespaces=frozenset({"team"})))
    assert decision.result is Result.SKIPPED and decision.patch == ()
    assert "pod labelled" in decision.why


def test_the_opt_out_label_must_carry_the_opt_out_value():
    pod = gpu_pod(HAMI_HALF, labels={"gpuslice.io/webhook": "enabled"})
    assert decide(pod, {"gpuslice.io/webhook": "yes"}).result is Result.PATCHED


def test_a_configured_opt_out_label_replaces_the_default_one():
    options = Options(opt_out_key="example.com/gpu-admission", opt_out_value="off")
    assert decide(gpu_pod(HAMI_HALF), {"example.com/gpu-admission": "off"},
                  options).result is Result.SKIPPED
    assert decide(gpu_pod(HAMI_HALF), {"gpuslice.io/webhook": "disabled"},
                  options).result is Result.PATCHED, "the default key no longer opts out"


def test_unknown_namespace_labels_fall_back_to_the_configuration_selector():
    decision = admit("CREATE", gpu_pod(HAMI_HALF), None, OPTIONS)
    assert decision.result is Result.PATCHED, "None = lookup failed: the selector already ran"


# --- schedulerName --------------------------------------------------------------------------

@pytest.mark.parametrize(("given", "op"), [
    ("default-scheduler", "replace"), ("", "replace"), (None, "add")])
def test_a_pod_meant_for_the_default_scheduler_gets_gpuslices(given, op):
    pod = gpu_pod(HAMI_HALF)
    if given is None:
        del pod["spec"]["schedulerName"]
    else:
        pod["spec"]["schedulerName"] = given
    ops = [o for o in decide(pod).patch if o["path"] == "/spec/schedulerName"]
    assert ops == [{"op": op, "path": "/spec/schedulerName", "value": "gpuslice-scheduler"}]
    assert admitted(pod)["spec"]["schedulerName"] == "gpuslice-scheduler"


def test_the_configured_scheduler_name_is_used_and_not_rewritten():
    options = Options(scheduler_name="gpu-sched")
    assert admitted(gpu_pod(HAMI_HALF), options)["spec"]["schedulerName"] == "gpu-sched"
    pod = gpu_pod(HAMI_HALF)
    pod["spec"]["schedulerName"] = "gpu-sched"
    assert all(o["path"] != "/spec/schedulerName" for o in decide(pod, options=options).patch)


def test_a_pod_naming_another_scheduler_in_a_bypass_namespace_is_left_alone_with_a_warning():
    pod = gpu_pod(HAMI_HALF)
    pod["spec"]["schedulerName"] = "volcano"
    bypass = Options(bypass_namespaces=frozenset({"team"}))
    decision = decide(pod, options=bypass)
    assert decision.allowed and decision.result is Result.SKIPPED and decision.patch == ()
    (warning,) = decision.warnings
    assert warning == ("spec.schedulerName=volcano: gpuslice will not place or cap this pod; "
                       "remove it to use gpuslice")
    pod["spec"]["schedulerName"] = "x" * 300
    assert len(decide(pod, options=bypass).warnings[0]) <= 120, \
        "kube-apiserver asks for at most 120 characters"


# --- label ----------------------------------------------------------------------------------

def test_the_managed_label_creates_the_labels_map_when_there_is_none():
    ops = decide(gpu_pod(HAMI_HALF)).patch
    assert {"op": "add", "path": "/metadata/labels",
            "value": {"gpuslice.io/managed": "true"}} in ops


def test_the_managed_label_is_added_with_an_escaped_pointer_next_to_other_labels():
    pod = gpu_pod(HAMI_HALF, labels={"app": "train"})
    ops = decide(pod).patch
    assert {"op": "add", "path": "/metadata/labels/gpuslice.io~1managed", "value": "true"} in ops
    assert admitted(pod)["metadata"]["labels"] == {"app": "train", handoff.MANAGED_LABEL: "true"}


def test_pointer_escapes_tilde_before_slash():
    assert pointer("a/b", "c~d", 3) == "/a~1b/c~0d/3", "RFC 6901: ~ -> ~0, / -> ~1"


# --- env ------------------------------------------------------------------------------------

def _env(c):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}


def test_the_webhook_adds_no_env_and_leaves_the_tenants_as_written():
    """What a container gets comes from the node agent's Allocate answer; env in the pod would
    only make every stored, watched and patched copy of it larger. The identity names the
    webhook added before 2026-11-27 are still admitted (a pod copied from an old one)."""
    env = [{"name": "GPUSLICE_POD_UID", "value": "copied-from-an-old-pod"},
           {"name": "LOG", "value": "$(GPUSLICE_POD_NAME).log"}]
    pod = gpu_pod(container("gpu", limits={"nvidia.com/gpu": "1"}, env=env),
                  container("plain-gpu", limits={"nvidia.com/gpu": "1"}),
                  container("sidecar", limits={"cpu": "1"}))
    pod["spec"]["initContainers"] = [container("prep", limits={"volcano.sh/vgpu-number": "1"})]
    out = admitted(pod)
    assert out["spec"]["containers"][0]["env"] == env
    assert all("env" not in c for c in (*out["spec"]["containers"][1:],
                                        out["spec"]["initContainers"][0]))


# --- resources ------------------------------------------------------------------------------

@pytest.mark.parametrize(("limits", "added"), [
    ({"nvidia.com/gpumem": "4096"}, {"nvidia.com/gpu": "1"}),
    ({"nvidia.com/gpucores": "30"}, {"nvidia.com/gpu": "1"}),
    ({"volcano.sh/vgpu-memory": "2048"}, {"volcano.sh/vgpu-number": "1"}),
    ({"nvidia.com/gpu": "2", "nvidia.com/gpumem": "4096"}, {}),
    ({"tencent.com/vcuda-core": "50", "tencent.com/vcuda-memory": "8"}, {}),
])
def test_each_gpu_container_names_its_device_resource_in_limits(limits, added):
    out = admitted(gpu_pod(container(limits=dict(limits))))
    assert out["spec"]["containers"][0]["resources"]["limits"] == {**limits, **added}
    assert handoff.missing_device_resources(out) == (), "the kubelet will call Allocate"


def test_requests_written_by_the_user_stay_equal_to_limits():
    pod = gpu_pod(container(limits={"nvidia.com/gpumem": "4096", "cpu": "2"},
                            requests={"nvidia.com/gpumem": "4096", "cpu": "1"}))
    res = admitted(pod)["spec"]["containers"][0]["resources"]
    assert res["limits"]["nvidia.com/gpu"] == res["requests"]["nvidia.com/gpu"] == "1"
    assert res["requests"]["cpu"] == "1", "other requests are the user's business"


def test_slice_resources_written_only_as_requests_are_copied_into_limits():
    pod = gpu_pod(container(requests={"nvidia.com/gpumem": "4096"}))
    res = admitted(pod)["spec"]["containers"][0]["resources"]
    assert res["limits"] == {"nvidia.com/gpumem": "4096", "nvidia.com/gpu": "1"}, (
        "Kubernetes rejects an extended resource in requests without a limit")
    assert res["requests"] == res["limits"]
    dialects.parse_pod(admitted(pod))  # still one valid request


def test_a_gpu_manager_container_without_vcuda_core_is_denied():
    decision = decide(gpu_pod(container(limits={"tencent.com/vcuda-memory": "8"})))
    assert decision.result is Result.DENIED
    assert 'container "c": tencent.com/vcuda-core=0: GPU Manager hands out GPUs' in \
        decision.message


# --- denial ---------------------------------------------------------------------------------

def test_an_invalid_pod_is_denied_with_every_problem_one_per_line():
    pod = gpu_pod(container("a", limits={"nvidia.com/gpucores": "150"}),
                  container("b", limits={"nvidia.com/gpumem": "4Gi"}),
                  annotations={"gpuslice.io/node-policy": "fastest"})
    decision = decide(pod)
    assert not decision.allowed and decision.patch == ()
    lines = decision.message.splitlines()
    assert lines == [
        'container "a": nvidia.com/gpucores=150: above 100 (100 = one whole GPU); to use more, '
        "raise nvidia.com/gpu",
        'container "b": nvidia.com/gpumem=4Gi: 4294967296 MiB is more than 1 TiB per GPU, '
        "probably a unit mix-up; nvidia.com/gpumem is in MiB, not bytes: write e.g. 4096 for "
        "4 GiB (did you mean 4096?)",
        "pod: annotation gpuslice.io/node-policy=fastest: unknown node policy; use one of "
        "binpack, spread",
    ], "the dialect parser's lines, unchanged and all at once"


def test_configured_defaults_are_what_the_request_is_checked_with():
    options = Options(defaults=dialects.Defaults(memory_mib=2048, cores=10))
    assert decide(gpu_pod(container(limits={"nvidia.com/gpu": "1"})), options=options).allowed


def test_a_patch_never_uses_replace_on_a_member_that_may_be_missing():
    out = decide(gpu_pod(HAMI_HALF)).patch
    apply_patch(gpu_pod(HAMI_HALF), out)  # strict: a replace of a missing member fails
    assert all(o["op"] in ("add", "replace") for o in out)

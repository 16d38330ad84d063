"""The webhook's DRA path (webhook/dra.py through admit): which pods take it, what their
claims ask for (same meaning as the device-plugin path), the patch as kube-apiserver applies
it, and what is refused. The real control plane runs the result in
tests/integration/dra/test_dialects_through_dra.py."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from webhook_pods import container, gpu_pod

from gpuslice.dra import DRIVER
from gpuslice.webhook import dra
from gpuslice.webhook.admit import Options, Result, admit

ON = Options(dra=dra.DraOptions(enabled=True, default_path="dra"))
INVENTORY = dra.Inventory(served=True, slices=3, sharing=True, memory_mib=(40960, 81920))
DRA_NS = {dra.PATH_LABEL: dra.DRA}


def decide(pod, labels=None, options=ON, inventory=INVENTORY):
    return admit("CREATE", pod, labels if labels is not None else {}, options,
                 dra_inventory=inventory)


def apply(doc: Any, ops: Any) -> Any:
    """RFC 6902 add (with `-`) and remove, strictly: the parent and a removed member exist."""
    doc = copy.deepcopy(doc)
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent = doc
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        last = parts[-1]
        if op["op"] == "remove":
            assert last in parent, f"remove of a missing member: {op}"
            del parent[last]
        elif isinstance(parent, list):
            assert op["op"] == "add" and last == "-", op
            parent.append(copy.deepcopy(op["value"]))
        else:
            assert op["op"] == "add", op
            parent[last] = copy.deepcopy(op["value"])
    return doc


def request_of(decision, container_name: str = "c") -> dict[str, Any]:
    """The one request of the template a container's claim comes from."""
    entries = {e["op"]: e for e in decision.patch if e["path"] == "/spec/resourceClaims"}
    claims = entries["add"]["value"]
    name = next(c["resourceClaimTemplateName"] for c in claims
                if c["name"] == f"gpu-{container_name}")
    (template,) = [t for t in decision.templates if t["metadata"]["name"] == name]
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    return request


# --- which path -------------------------------------------------------------------------------

@pytest.mark.parametrize(("why", "options", "pod_selector", "ns_labels", "path"), [
    ("DRA off in the webhook: never", Options(), {dra.PATH_LABEL: "dra"}, DRA_NS,
     "device-plugin"),
    ("the configured default", ON, None, {}, "dra"),
    ("the namespace's label over the default",
     Options(dra=dra.DraOptions(enabled=True)), None, DRA_NS, "dra"),
    ("the pod's nodeSelector over the namespace", ON, {dra.PATH_LABEL: "device-plugin"},
     DRA_NS, "device-plugin"),
])
def test_the_path_is_the_pods_then_the_namespaces_then_the_default(why, options, pod_selector,
                                                                      ns_labels, path):
    pod = gpu_pod(container(limits={"nvidia.com/gpumem": "4096"}))
    if pod_selector:
        pod["spec"]["nodeSelector"] = pod_selector
    d = decide(pod, ns_labels, options)
    assert d.result is Result.PATCHED, d.message
    on_dra = any(op["path"] == "/spec/resourceClaims" for op in d.patch)
    assert on_dra == (path == "dra"), why
    assert bool(d.templates) == (path == "dra"), why


def test_a_path_value_that_is_none_is_refused():
    pod = gpu_pod(container(limits={"nvidia.com/gpumem": "4096"}))
    d = decide(pod, {dra.PATH_LABEL: "gpu"})
    said = "namespace label gpuslice.io/gpu-path='gpu': not a GPU path; use dra or device-plugin"
    assert not d.allowed and said in d.message


# --- what a claim asks for --------------------------------------------------------------------

@pytest.mark.parametrize(("why", "limits", "exactly"), [
    ("HAMi MiB and cores", {"nvidia.com/gpumem": "4096", "nvidia.com/gpucores": "30"},
     {"count": 1, "capacity": {"requests": {"memory": "4096Mi", "cores": "30"}}}),
    ("HAMi count = distinct GPUs", {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "1000"},
     {"count": 2, "capacity": {"requests": {"memory": "1000Mi"}}}),
    ("a whole GPU: no capacity named, the published default is all of it",
     {"nvidia.com/gpu": "1"}, {"count": 1}),
    ("Volcano", {"volcano.sh/vgpu-memory": "2048", "volcano.sh/vgpu-cores": "20"},
     {"count": 1, "capacity": {"requests": {"memory": "2048Mi", "cores": "20"}}}),
    ("GPU Manager: memory is units of 256 MiB for the container",
     {"tencent.com/vcuda-core": "200", "tencent.com/vcuda-memory": "32"},
     {"count": 2, "capacity": {"requests": {"memory": "4096Mi", "cores": "100"}}}),
])
def test_each_dialect_asks_for_what_the_device_plugin_path_gives(why, limits, exactly):
    d = decide(gpu_pod(container(limits=limits)))
    request = request_of(d)
    assert request == {"name": "gpu", "exactly": {"deviceClassName": DRIVER,
                                                  "allocationMode": "ExactCount", **exactly}}, why


def test_a_percent_is_one_subrequest_per_published_memory_size():
    d = decide(gpu_pod(container(limits={"nvidia.com/gpumem-percentage": "25"})))
    subs = request_of(d)["firstAvailable"]
    assert [s["capacity"]["requests"]["memory"] for s in subs] == ["20480Mi", "10240Mi"]
    assert subs[0]["selectors"][-1]["cel"]["expression"].endswith(
        'memory.compareTo(quantity("81920Mi")) == 0'), "the size each amount is a percent of"


def test_a_percent_with_nothing_published_is_refused_with_what_to_do():
    empty = dra.Inventory(served=True)
    d = decide(gpu_pod(container(limits={"nvidia.com/gpumem-percentage": "25"})),
               inventory=empty)
    assert not d.allowed and "give memory in MiB" in d.message
    whole = decide(gpu_pod(container(limits={"nvidia.com/gpu": "1"})), inventory=empty)
    assert whole.allowed, "a whole GPU needs no size: it waits for the slices"


def test_filters_become_cel_selectors_and_priority_the_drivers_config():
    pod = gpu_pod(container(limits={"nvidia.com/gpumem": "1024", "nvidia.com/priority": "1"}),
                  annotations={"nvidia.com/use-gputype": "A100,H100",
                               "nvidia.com/nouse-gputype": "MIG",
                               "nvidia.com/use-gpuuuid": 'GPU-a,GPU-"b'})
    d = decide(pod)
    expressions = [s["cel"]["expression"] for s in request_of(d)["exactly"]["selectors"]]
    model = f'device.attributes["{DRIVER}"].model.lowerAscii()'
    assert expressions == [
        f'{model}.contains("a100") || {model}.contains("h100")',
        f'!{model}.contains("mig")',
        f'device.attributes["{DRIVER}"].uuid in ["GPU-a", "GPU-\\"b"]']
    (template,) = d.templates
    assert template["spec"]["spec"]["devices"]["config"] == [{"requests": ["gpu"], "opaque": {
        "driver": DRIVER, "parameters": {"apiVersion": "gpu.gpuslice.io/v1alpha1",
                                         "kind": "ShareConfig", "priority": 1}}}]


# --- the pod as stored ------------------------------------------------------------------------

def test_the_stored_pod_names_its_claims_and_keeps_the_request_for_display():
    pod = gpu_pod(container("train", limits={"nvidia.com/gpumem": "4096"},
                            requests={"nvidia.com/gpumem": "4096", "cpu": "1"}),
                  container("log", limits={"cpu": "1"}))
    pod["spec"]["initContainers"] = [container("fetch", limits={"volcano.sh/vgpu-memory": "512"})]
    pod["spec"]["schedulerName"] = "gpuslice-scheduler"
    d = decide(pod)
    stored = apply(pod, d.patch)
    spec = stored["spec"]
    assert spec["schedulerName"] == "default-scheduler"
    assert [c["name"] for c in spec["resourceClaims"]] == ["gpu-fetch", "gpu-train"]
    assert spec["initContainers"][0]["resources"] == {"limits": {}, "claims": [
        {"name": "gpu-fetch"}]}
    assert spec["containers"][0]["resources"] == {"limits": {}, "requests": {"cpu": "1"},
                                                  "claims": [{"name": "gpu-train"}]}
    assert spec["containers"][1]["resources"] == {"limits": {"cpu": "1"}}, "no GPU: untouched"
    assert json.loads(stored["metadata"]["annotations"][dra.REQUESTED]) == {
        "fetch": {"volcano.sh/vgpu-memory": "512"}, "train": {"nvidia.com/gpumem": "4096"}}
    assert stored["metadata"]["labels"] == {dra.TRANSLATED: "true"}
    assert "gpuslice.io/managed" not in stored["metadata"]["labels"], \
        "the extender must not count a DRA pod"
    assert all("env" not in c for c in (*spec["containers"], *spec["initContainers"]))
    again = decide(stored)
    assert again.result is Result.ALLOWED and again.patch == () and not again.templates, \
        "a second pass (reinvocation) changes nothing"


def test_two_containers_of_one_shape_share_a_template_not_a_claim():
    pod = gpu_pod(container("a", limits={"nvidia.com/gpumem": "2048"}),
                  container("b", limits={"nvidia.com/gpumem": "2048"}))
    d = decide(pod)
    stored = apply(pod, d.patch)
    claims = stored["spec"]["resourceClaims"]
    assert len(d.templates) == 1 and len(claims) == 2
    assert claims[0]["resourceClaimTemplateName"] == claims[1]["resourceClaimTemplateName"]


def test_user_claims_are_kept_and_ours_appended():
    pod = gpu_pod(container(limits={"nvidia.com/gpumem": "1024"}))
    pod["spec"]["resourceClaims"] = [{"name": "gpu-c", "resourceClaimName": "mine"}]
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu-c"}]
    stored = apply(pod, decide(pod).patch)
    names = [c["name"] for c in stored["spec"]["resourceClaims"]]
    assert names == ["gpu-c", "gpu-c-2"], "a name the user took is not reused"
    assert stored["spec"]["containers"][0]["resources"]["claims"] == [
        {"name": "gpu-c"}, {"name": "gpu-c-2"}]


# --- what is refused --------------------------------------------------------------------------

@pytest.mark.parametrize(("why", "inventory", "said"), [
    ("no resource.k8s.io/v1", dra.Inventory(served=False), "does not serve resource.k8s.io/v1"),
    ("not known yet", None, "does not serve resource.k8s.io/v1"),
    ("DRAConsumableCapacity off: every device exclusive",
     dra.Inventory(served=True, slices=2, sharing=False, memory_mib=(81920,)),
     "DRAConsumableCapacity is off"),
])
def test_a_cluster_that_cannot_share_by_dra_gets_a_denial_not_a_whole_gpu(why, inventory, said):
    d = decide(gpu_pod(container(limits={"nvidia.com/gpumem": "1024"})), inventory=inventory)
    assert not d.allowed and said in d.message, why


def test_the_dialects_problems_are_still_listed_on_the_dra_path():
    d = decide(gpu_pod(container(limits={"nvidia.com/gpucores": "150"})))
    assert not d.allowed and "nvidia.com/gpucores=150: above 100" in d.message


def test_too_many_memory_sizes_for_a_percent_are_refused():
    many = dra.Inventory(served=True, slices=9, sharing=True,
                         memory_mib=tuple(1024 * (i + 1) for i in range(9)))
    d = decide(gpu_pod(container(limits={"nvidia.com/gpumem-percentage": "50"})),
               inventory=many)
    assert not d.allowed and "9 GPU memory sizes" in d.message


def test_template_names_follow_the_spec_only():
    a = decide(gpu_pod(container(limits={"nvidia.com/gpumem": "1024"})))
    b = decide(gpu_pod(container("other", limits={"nvidia.com/gpumem": "1024"}),
                       name="q"))
    c = decide(gpu_pod(container(limits={"nvidia.com/gpumem": "1025"})))
    names = [x.templates[0]["metadata"]["name"] for x in (a, b, c)]
    assert names[0] == names[1] != names[2]
    assert all(n.startswith(dra.TEMPLATE_PREFIX) and len(n) <= 63 for n in names)

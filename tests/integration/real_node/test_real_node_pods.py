"""Pods through the whole path onto the REAL kubelet: kube-apiserver -> `gpuslice webhook` ->
kube-scheduler + `gpuslice scheduler` -> kubelet v1.36 (fake CRI) -> the node agent's
GetPreferredAllocation/Allocate. What the kubelet did is read from its own records: the device
manager's checkpoint (device IDs and the Allocate answer it keeps for each container) and its
PodResources API; what the agent did from its region files and metrics."""

from __future__ import annotations

import asyncio
import time

import pytest
from lightkube import ApiError
from lightkube.resources.core_v1 import Event, Pod

from gpuslice import codec, dialects, handoff
from gpuslice.kube.client import dict_view
from gpuslice.node.verify import list_pod_resources
from gpuslice.shim import Region
from kubelet import real

DIALECTS = {  # pod name -> (limits as the user writes them, device resource, devices wanted)
    "hami": ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"},
             "nvidia.com/gpu", 1),
    "volcano": ({"volcano.sh/vgpu-number": "2", "volcano.sh/vgpu-memory": "2000",
                 "volcano.sh/vgpu-cores": "20"}, "volcano.sh/vgpu-number", 2),
    "gpu-manager": ({"tencent.com/vcuda-core": "50", "tencent.com/vcuda-memory": "8"},
                    "tencent.com/vcuda-core", 50),
}
EXPECTED = {"hami": (3000, 30), "volcano": (2000, 20), "gpu-manager": (2048, 50)}  # MiB, cores


def test_a_pod_of_each_dialect_runs_with_the_allocate_answer_its_assignment_names(tier):
    client, ns, node = tier.client(), tier.namespace, tier.node
    for name, (limits, _, _) in DIALECTS.items():  # at once: three distinguishable pods
        client.create(dict_view(Pod)(real.pod_body(name, ns, limits)))
    pods = tier.wait_pods(list(DIALECTS))
    checkpoint = {(e["pod_uid"], e["container"]): e for e in node.checkpoint()}
    actual = asyncio.run(list_pod_resources(str(node.pod_resources_socket)))
    for name, (_, resource, quantity) in DIALECTS.items():
        pod = pods[name]
        uid, ann = pod["metadata"]["uid"], pod["metadata"]["annotations"]
        # the webhook's work, as kube-apiserver stored it
        assert pod["spec"]["schedulerName"] == "gpuslice-scheduler"
        assert pod["metadata"]["labels"][handoff.MANAGED_LABEL] == "true"
        assert pod["spec"]["containers"][0]["resources"]["limits"][resource] == str(quantity)
        # the extender's: node and GPUs, in one write with the binding
        assert pod["spec"]["nodeName"] == real.NODE
        assignment = codec.decode_assignment(ann[codec.ASSIGNMENT_ANNOTATION])
        assert assignment.node == real.NODE
        slices = assignment.containers[0].slices
        uuids = [s.uuid for s in slices]
        mem, cores = EXPECTED[name]
        assert [(s.memory_mib, s.cores) for s in slices] == [(mem, cores)] * len(slices)
        assert len(set(uuids)) == (2 if name == "volcano" else 1)
        # the kubelet admitted it, so its status ends the pod's flight: the agent's mark is
        # needed only where that status is late (allocatedMarkAfterSeconds)
        assert handoff.admitted(pod)
        # the kubelet's record: devices it chose (steered by GetPreferredAllocation onto the
        # assigned GPUs) and the Allocate answer it gives the container runtime
        entry = checkpoint[(uid, "main")]
        assert entry["resource"] == resource
        assert len(entry["devices"]) == quantity
        assert {d.split("::")[0] for d in entry["devices"]} == set(uuids), \
            f"{name}: the kubelet's devices lie on the assigned GPUs only"
        envs = entry["envs"]
        assert envs["NVIDIA_VISIBLE_DEVICES"] == ",".join(uuids)
        assert envs["GPUSLICE_DEVICE_UUIDS"] == ",".join(uuids)
        for i in range(len(uuids)):
            assert envs[f"CUDA_DEVICE_MEMORY_LIMIT_{i}"] == f"{mem}m"
        assert envs["CUDA_DEVICE_SM_LIMIT"] == str(cores)
        assert envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"] == "/var/run/gpuslice/region"
        region_dir = node.state_dir / "regions" / uid / "main"
        lib = node.state_dir / "lib"
        assert sorted(entry["mounts"]) == sorted([
            ("/usr/local/gpuslice/lib/libgpuslice.so", str(lib / "libgpuslice.so"), True),
            ("/etc/ld.so.preload", str(lib / "ld.so.preload"), True),
            ("/var/run/gpuslice", str(region_dir), False),
            ("/var/run/gpuslice-board", str(node.state_dir / "board"), False)])
        # the region the agent wrote before answering holds the same limits
        region = Region.read(region_dir / "region")
        assert [(d.uuid, d.limit) for d in region.devices if d.uuid] == \
            [(u, mem << 20) for u in uuids]
        assert region.sm_limit == cores
        # and the kubelet's PodResources API (what the agent's check reads) agrees
        assert sorted(actual[(ns, name)]["main"][resource]) == entry["devices"]
    time.sleep(2 * 2 + 0.5)  # two PodResources rounds of the agent (verifyIntervalSeconds 2)
    metrics = node.agent_metrics()
    for _, resource, _ in DIALECTS.values():
        assert real.metric(metrics, "gpuslice_allocations_total", resource=resource,
                           result="ok") >= 1
    assert real.metric(metrics, "gpuslice_allocate_mismatches_total") == 0


def test_a_gpu_pod_placed_by_hand_is_refused_at_admission_with_the_agents_message(tier):
    client, ns, node = tier.client(), tier.namespace, tier.node
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1024"}
    # through the webhook, spec.nodeName is denied outright, and so is the opt-out label
    for extra in ({"nodeName": real.NODE},
                  {"nodeName": real.NODE, "labels": {real.OPT_OUT[0]: real.OPT_OUT[1]}}):
        with pytest.raises(ApiError) as denied:
            client.create(dict_view(Pod)(real.pod_body("by-hand", ns, limits, **extra)))
        assert 'admission webhook "pods.gpuslice.io" denied the request' in str(denied.value)
        assert ("spec.nodeName" if "labels" not in extra else "bypassNamespaces") in \
            str(denied.value)
    # ... so a pod in a namespace the webhook never sees (an opted-out one) names the node and
    # skips webhook and extender: the kubelet admits it, asks the agent, and the agent refuses
    with real.outside_namespace(tier) as out:
        refused_before = real.metric(node.agent_metrics(), "gpuslice_allocations_total",
                                     result="refused")
        client.create(dict_view(Pod)(real.pod_body("by-hand", out, limits, nodeName=real.NODE)))
        pod = real.wait_phase(client, "by-hand", out, "Failed")
        assert pod["status"]["reason"] == "UnexpectedAdmissionError"
        want = ("gpuslice: nvidia.com/gpu: no pod in flight on this node asks for "
                "nvidia.com/gpu=1 now (in flight: none); pods on this node ask for it without a "
                f"gpuslice placement (created past gpuslice's webhook or scheduler): "
                f"{out}/by-hand, refused; check that the pod was scheduled by the gpuslice "
                "scheduler extender")
        assert want in pod["status"]["message"]
        events = [e for e in client.list(dict_view(Event), namespace=out,
                                         fields={"involvedObject.name": "by-hand"})]
        hit = [e for e in events if e["reason"] == "UnexpectedAdmissionError"]
        seen = [(e["reason"], e["message"]) for e in events]
        assert hit, f"no UnexpectedAdmissionError event: {seen}"
        assert hit[0]["type"] == "Warning" and hit[0]["source"]["component"] == "kubelet"
        assert hit[0]["message"].startswith("Allocate failed due to rpc error: code = "
                                            "FailedPrecondition desc = " + want)
        assert real.metric(node.agent_metrics(), "gpuslice_allocations_total",
                           result="refused") > refused_before
        assert all(e["pod_uid"] != pod["metadata"]["uid"] for e in node.checkpoint()), \
            "the kubelet keeps no devices for a pod it rejected"


def test_an_app_container_on_another_gpu_than_its_init_container_is_admitted(tier):
    """The real kubelet gives an app container its pod's init container's devices again (device
    manager devicesToReuse), without GetPreferredAllocation: with the init container on another
    GPU (the extender places init containers apart from the app phase) the agent refused the
    app container and the pod failed admission, until it learnt to tell those IDs apart."""
    client, ns, node = tier.client(), tier.namespace, tier.node
    image = "registry.invalid/cuda:never-pulled"
    client.create(dict_view(Pod)(real.pod_body("filler", ns, {
        "nvidia.com/gpu": "1", "nvidia.com/gpumem": "10000", "nvidia.com/gpucores": "10"})))
    tier.wait_pods(["filler"])
    # binpack: the app (4000 MiB) joins the filler's GPU, the init (12000 MiB) cannot
    client.create(dict_view(Pod)(real.pod_body("init-apart", ns, {}, containers=[
        {"name": "app", "image": image, "resources": {"limits": {
            "nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000", "nvidia.com/gpucores": "10"}}}],
        initContainers=[{"name": "init", "image": image, "resources": {"limits": {
            "nvidia.com/gpu": "1", "nvidia.com/gpumem": "12000", "nvidia.com/gpucores": "5"}}}])))
    deadline = time.monotonic() + 60
    while True:  # fake-cri's init container never ends: the pod stays Pending once admitted
        pod = dict(client.get(dict_view(Pod), "init-apart", namespace=ns))
        if handoff.admitted(pod) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert pod["status"].get("phase") != "Failed", pod["status"].get("message")
    assert handoff.admitted(pod), "the kubelet admitted it: both containers were answered"
    slices = {c.container: [s.uuid for s in c.slices] for c in codec.decode_assignment(
        pod["metadata"]["annotations"][codec.ASSIGNMENT_ANNOTATION]).containers}
    assert slices["init"] != slices["app"], "the case under test: init and app on other GPUs"
    entries = {e["container"]: e for e in node.checkpoint()
               if e["pod_uid"] == pod["metadata"]["uid"]}
    assert entries["app"]["devices"] == entries["init"]["devices"], \
        "the kubelet reused the init container's device for the app container"
    assert {d.split("::")[0] for d in entries["init"]["devices"]} == set(slices["init"])
    assert entries["app"]["envs"]["NVIDIA_VISIBLE_DEVICES"] == slices["app"][0]
    assert entries["app"]["envs"]["CUDA_DEVICE_MEMORY_LIMIT_0"] == "4000m"
    assert entries["init"]["envs"]["CUDA_DEVICE_MEMORY_LIMIT_0"] == "12000m"
    region = Region.read(node.state_dir / "regions" / pod["metadata"]["uid"] / "app" / "region")
    assert [(d.uuid, d.limit) for d in region.devices if d.uuid] == [(slices["app"][0],
                                                                      4000 << 20)]
    time.sleep(2 * 2 + 0.5)  # two PodResources rounds: the reused ID is no mismatch
    assert real.metric(node.agent_metrics(), "gpuslice_allocate_mismatches_total") == 0


def test_pods_of_one_gang_are_handed_one_directory_of_their_namespace(tier):
    """gpuslice.io/gang on the real kubelet: each container under a compute limit of the gang's
    pods gets GPUSLICE_GANG_DIR and `<stateDir>/gangs/<namespace>/<gang>` (1777) in the Allocate
    answer the kubelet keeps; a pod without the annotation gets neither."""
    client, ns, node = tier.client(), tier.namespace, tier.node
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000", "nvidia.com/gpucores": "30"}
    gang_of = {"gang-a": "train", "gang-b": "train", "alone": None}
    for name, gang in gang_of.items():
        ann = {dialects.GANG_ANNOTATION: gang} if gang else {}
        client.create(dict_view(Pod)(real.pod_body(name, ns, limits, annotations=ann)))
    pods = tier.wait_pods(list(gang_of))
    checkpoint = {(e["pod_uid"], e["container"]): e for e in node.checkpoint()}
    directory = node.state_dir / "gangs" / ns / "train"
    for name, gang in gang_of.items():
        entry = checkpoint[(pods[name]["metadata"]["uid"], "main")]
        mounts = {m[0]: m for m in entry["mounts"]}
        if gang:
            assert entry["envs"]["GPUSLICE_GANG_DIR"] == "/var/run/gpuslice-gang", name
            assert mounts["/var/run/gpuslice-gang"] == (
                "/var/run/gpuslice-gang", str(directory), False), name
        else:
            assert "GPUSLICE_GANG_DIR" not in entry["envs"]
            assert "/var/run/gpuslice-gang" not in mounts
    assert directory.is_dir() and directory.stat().st_mode & 0o7777 == 0o1777

"""HAMi, Volcano and GPU Manager pods, unchanged, on DRA (issue 23), on the real control plane:
kube-apiserver calls gpuslice's webhook over HTTPS, the webhook writes the pod's claims from
ResourceClaimTemplates it creates, kube-controller-manager makes each claim (owned by the pod),
the real kube-scheduler allocates it with no extender, and gpuslice's kubelet DRA plugin
(over its gRPC sockets, through tests/kubelet's DRA kubelet emulator) prepares exactly that
claim: the limits in its CDI spec equal consumedCapacity and what the pod asked. A pod that
fits nowhere gets a NoGPUFit event naming the dimension and the nearest node; a deleted pod's
claims are deleted with it; the tenant attacks of issue 20 are refused on this path too."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest
from lightkube import ApiError
from lightkube.resources.core_v1 import Event, Pod
from lightkube.resources.resource_v1 import DeviceClass, ResourceClaim, ResourceClaimTemplate

from gpuslice import model
from gpuslice.dra import DRIVER, cdi
from gpuslice.kube.client import dict_view
from gpuslice.node.nvml import DeviceInfo
from gpuslice.quantity import parse_quantity
from gpuslice.webhook import config, dra
from gpuslice.webhook.certgen import certgen
from gpuslice.webhook.command import Server
from gpuslice.webhook.dra_cluster import Templates

pytestmark = pytest.mark.kube_backends("kube-apiserver")

MiB = 1 << 20
NS = "default"


def gpu(node: str, i: int, model: str, gib: int) -> DeviceInfo:
    return DeviceInfo(index=i, uuid=f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{node}/{i}')}",
                      model=model, memory_bytes=gib << 30,
                      sm_count=108, minor=i)


def pod(name: str, limits: dict[str, str] | None = None, *, annotations: dict | None = None,
        init: dict[str, str] | None = None, env: list | None = None,
        extra: list | None = None) -> dict[str, Any]:
    containers = [{"name": "main", "image": "registry.invalid/pause:1",
                   "resources": {"limits": limits or {}}, **({"env": env} if env else {})},
                  *(extra or ())]
    spec: dict[str, Any] = {"containers": containers}
    if init is not None:
        spec["initContainers"] = [{"name": "warmup", "image": "registry.invalid/pause:1",
                                   "resources": {"limits": init}}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "annotations": annotations or {}},
            "spec": spec}


@pytest.fixture
async def cluster(kube_api, tmp_path, dra_e2e):
    """The webhook (DRA path by default), two fake GPU nodes (an H100 80 GB with 2 GPUs, an
    A100 40 GB with 1) publishing slices and serving the plugin, kube-scheduler running."""
    client = kube_api.async_client()
    cfg = config.WebhookConfig(address="127.0.0.1", port=0, cert_file=str(tmp_path / "tls.crt"),
                               key_file=str(tmp_path / "tls.key"),
                               dra=config.DraSection(enabled=True, default_path="dra"))
    await certgen(service="unused", namespace="default", ips=["127.0.0.1"],
                  out_dir=str(tmp_path))
    server = Server(cfg, client=kube_api.async_client())
    await server.start()
    await client.create(dict_view(DeviceClass)({
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}))
    await client.create(dra_e2e.webhook_configuration(
        "gpuslice-webhook", f"https://127.0.0.1:{server.port}/mutate"))
    await certgen(service="unused", namespace="default", ips=["127.0.0.1"],
                  out_dir=str(tmp_path), webhook_config="gpuslice-webhook", client=client)
    base = Path(tempfile.mkdtemp(prefix="dra-d-", dir="/tmp"))  # short unix socket paths
    nodes = {}
    try:
        for name, gpus in (("h100-node", [gpu("h100-node", i, "NVIDIA H100 80GB HBM3", 80)
                                          for i in range(2)]),
                           ("a100-node", [gpu("a100-node", 0, "NVIDIA A100-SXM4-40GB", 40)])):
            nodes[name], _ = await dra_e2e.start_node(client, name, base, 0, 256, gpus)
        await dra_e2e.ready_nodes(client, list(nodes), 60)
        for _ in range(200):  # the webhook sees the slices, kube-apiserver calls it
            inv = server.inventory.current() if server.inventory else None
            if inv is not None and inv.slices == 2:
                try:
                    probe = await client.create(dict_view(Pod)(
                        pod("probe", {"nvidia.com/gpumem": "1024"})), dry_run=True)
                except ApiError as exc:
                    if "failed calling webhook" not in exc.status.message:
                        raise
                else:
                    if probe["spec"].get("resourceClaims"):
                        break
            await asyncio.sleep(0.1)
        else:
            pytest.fail("the webhook never translated a pod")
        scheduler = kube_api.control_plane.start_scheduler(dra_e2e.scheduler_configuration(200))
        try:
            yield client, nodes, server
        finally:
            scheduler.stop()
    finally:
        for n in nodes.values():
            await n.stop()
        await server.stop()
        await client.close()
        shutil.rmtree(base, ignore_errors=True)


async def claims_of(client, name: str, count: int, timeout: float = 30) -> list[dict]:
    """The pod's claims once kube-controller-manager made all `count` and kube-scheduler
    allocated them."""
    for _ in range(int(timeout * 10)):
        got = [dict(c) async for c in client.list(dict_view(ResourceClaim), namespace=NS)
               if any(o.get("name") == name and o.get("kind") == "Pod"
                      for o in c["metadata"].get("ownerReferences") or ())]
        if len(got) == count and all((c.get("status") or {}).get("allocation") for c in got):
            return got
        await asyncio.sleep(0.1)
    raise AssertionError(f"pod {name}: {count} allocated claims expected, have {got}")


async def prepared_env(nodes, claim: dict) -> dict[str, str]:
    """Prepare the claim through its node's kubelet emulator; the env of its CDI spec."""
    pool = claim["status"]["allocation"]["devices"]["results"][0]["pool"]
    node = nodes[pool]
    answer = (await node.kubelet.prepare(DRIVER, claim))[claim["metadata"]["uid"]]
    assert not answer.error, answer.error
    spec = json.loads(cdi.path(node.dir / "cdi", claim["metadata"]["uid"]).read_text())
    return dict(e.split("=", 1) for e in spec["devices"][0]["containerEdits"]["env"])


def consumed(claim: dict) -> list[dict[str, int]]:
    """Each result's consumedCapacity, in MiB of memory and cores."""
    return [{k: int(parse_quantity(v) / (MiB if k == "memory" else 1))
             for k, v in (r.get("consumedCapacity") or {}).items()}
            for r in claim["status"]["allocation"]["devices"]["results"]]


async def test_each_dialect_is_allocated_by_kube_scheduler_and_capped_as_consumed(cluster):
    client, nodes, _ = cluster
    hami = await client.create(dict_view(Pod)(pod("hami", {
        "nvidia.com/gpumem": "4096", "nvidia.com/gpucores": "30", "nvidia.com/priority": "1"})))
    volcano = await client.create(dict_view(Pod)(pod("volcano", {
        "volcano.sh/vgpu-memory": "8000", "volcano.sh/vgpu-cores": "50"})))
    tencent = await client.create(dict_view(Pod)(pod("gpu-manager", {
        "tencent.com/vcuda-core": "25", "tencent.com/vcuda-memory": "16"})))
    half_a100 = await client.create(dict_view(Pod)(pod(
        "half-a100", {"nvidia.com/gpumem-percentage": "50"},
        annotations={"nvidia.com/use-gputype": "a100"})))
    two = await client.create(dict_view(Pod)(pod("two-gpus", {
        "nvidia.com/gpu": "2", "nvidia.com/gpumem": "1000"})))
    for p in (hami, volcano, tencent, half_a100, two):
        assert p["spec"]["schedulerName"] == "default-scheduler"
        assert not any(n.startswith(("nvidia.com/", "volcano.sh/", "tencent.com/"))
                       for n in p["spec"]["containers"][0]["resources"].get("limits") or {}), \
            "no device plugin is asked for the dialect's resources: nothing counted twice"
        assert p["metadata"]["labels"][dra.TRANSLATED] == "true"
    assert json.loads(hami["metadata"]["annotations"][dra.REQUESTED]) == {"main": {
        "nvidia.com/gpumem": "4096", "nvidia.com/gpucores": "30", "nvidia.com/priority": "1"}}

    (c,) = await claims_of(client, "hami", 1)
    assert consumed(c) == [{"memory": 4096, "cores": 30}]
    env = await prepared_env(nodes, c)
    assert (env["CUDA_DEVICE_MEMORY_LIMIT_0"], env["CUDA_DEVICE_SM_LIMIT"],
            env["CUDA_TASK_PRIORITY"]) == ("4096m", "30", "1")

    (c,) = await claims_of(client, "volcano", 1)
    env = await prepared_env(nodes, c)  # 8000 MiB rounds up to the 256 MiB step
    assert consumed(c) == [{"memory": 8192, "cores": 50}]
    assert (env["CUDA_DEVICE_MEMORY_LIMIT_0"], env["CUDA_DEVICE_SM_LIMIT"]) == ("8192m", "50")
    assert env["CUDA_TASK_PRIORITY"] == "0"

    (c,) = await claims_of(client, "gpu-manager", 1)
    env = await prepared_env(nodes, c)  # 16 units of 256 MiB
    assert (env["CUDA_DEVICE_MEMORY_LIMIT_0"], env["CUDA_DEVICE_SM_LIMIT"]) == ("4096m", "25")

    (c,) = await claims_of(client, "half-a100", 1)
    results = c["status"]["allocation"]["devices"]["results"]
    assert results[0]["pool"] == "a100-node", "the type filter's CEL selector kept it on A100"
    env = await prepared_env(nodes, c)
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "20480m", "50% of the A100's 40960 MiB"
    assert env["CUDA_DEVICE_SM_LIMIT"] == "100", "no cores asked: no compute limit"

    (c,) = await claims_of(client, "two-gpus", 1)
    results = c["status"]["allocation"]["devices"]["results"]
    assert len({(r["pool"], r["device"]) for r in results}) == 2, "count = distinct GPUs"
    env = await prepared_env(nodes, c)
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == env["CUDA_DEVICE_MEMORY_LIMIT_1"] == "1024m"
    assert len(env["GPUSLICE_DEVICE_UUIDS"].split(",")) == 2


async def test_init_and_app_containers_get_claims_of_their_own(cluster):
    client, nodes, _ = cluster
    p = await client.create(dict_view(Pod)(pod(
        "staged", {"nvidia.com/gpumem": "2048"}, init={"volcano.sh/vgpu-memory": "12288"})))
    names = {c["name"]: c["resources"]["claims"] for c in
             (*p["spec"]["initContainers"], *p["spec"]["containers"])}
    assert names == {"warmup": [{"name": "gpu-warmup"}], "main": [{"name": "gpu-main"}]}
    claims = await claims_of(client, "staged", 2)
    limits = sorted([(await prepared_env(nodes, c))["CUDA_DEVICE_MEMORY_LIMIT_0"]
                     for c in claims])
    assert limits == ["12288m", "2048m"]


async def test_a_pod_that_fits_nowhere_is_told_which_dimension_and_the_nearest_node(cluster):
    client, _, _ = cluster
    for name in ("hog", "second-hog"):  # 50000 MiB: one on each H100, none on the A100
        await client.create(dict_view(Pod)(pod(name, {"nvidia.com/gpumem": "50000"})))
        await claims_of(client, name, 1)
    # each hog takes 50176 MiB (the 256 MiB step): no H100 has 70144 free, the A100 has 40960
    # in all; an H100 is nearer (38400 MiB short of 81920) than the A100 (29184 of 40960)
    await client.create(dict_view(Pod)(pod("too-big", {"nvidia.com/gpumem": "70000",
                                                       "nvidia.com/gpucores": "10"})))
    for _ in range(300):
        events = [dict(e) async for e in client.list(dict_view(Event), namespace=NS)
                  if e["involvedObject"].get("name") == "too-big" and e["reason"] == "NoGPUFit"]
        if events:
            break
        await asyncio.sleep(0.1)
    else:
        pytest.fail("no NoGPUFit event on the pod")
    message = events[0]["message"]
    assert events[0]["type"] == "Warning"
    assert message == ('container "main" (1 GPU, 70000 MiB, 10 cores each) fits no node: not '
                       "enough GPU memory (nearest: h100-node: gpu-0 has 31744 MiB / 100 cores "
                       "free of 81920 MiB / 100)"), message


async def test_a_deleted_pod_takes_its_claims_with_it(cluster):
    client, _, _ = cluster
    await client.create(dict_view(Pod)(pod("short", {"nvidia.com/gpumem": "1024"})))
    (c,) = await claims_of(client, "short", 1)
    await client.delete(Pod, "short", namespace=NS, grace_period=0)
    for _ in range(300):
        names = {x["metadata"]["name"] async for x in
                 client.list(dict_view(ResourceClaim), namespace=NS)}
        if c["metadata"]["name"] not in names:
            return
        await asyncio.sleep(0.1)
    pytest.fail("kube-controller-manager did not delete the pod's claim")


async def test_dry_run_creates_no_template(cluster):
    client, _, _ = cluster
    got = await client.create(dict_view(Pod)(pod("dry", {"nvidia.com/gpumem": "3333"})),
                              dry_run=True)
    name = got["spec"]["resourceClaims"][0]["resourceClaimTemplateName"]
    templates = {t["metadata"]["name"] async for t in
                 client.list(dict_view(ResourceClaimTemplate), namespace=NS)}
    assert name not in templates


async def test_a_template_forged_under_the_webhooks_name_is_not_used(cluster):
    client, _, _ = cluster
    probe = await client.create(dict_view(Pod)(pod("forge", {"nvidia.com/gpumem": "5120"})),
                                dry_run=True)
    name = probe["spec"]["resourceClaims"][0]["resourceClaimTemplateName"]
    await client.create(dict_view(ResourceClaimTemplate)({  # a whole GPU under that name
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": DRIVER}}]}}}}), namespace=NS)
    with pytest.raises(ApiError) as err:
        await client.create(dict_view(Pod)(pod("forge", {"nvidia.com/gpumem": "5120"})))
    assert "exists with another spec" in err.value.status.message


@pytest.mark.parametrize(("why", "body", "said"), [
    ("a device list for the NVIDIA toolkit beside the slice", pod(
        "t1", {"nvidia.com/gpumem": "1024"}, extra=[{
            "name": "side", "image": "registry.invalid/pause:1",
            "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}]),
     'container "side": env NVIDIA_VISIBLE_DEVICES'),
    ("its own memory limit in env", pod(
        "t2", {"nvidia.com/gpumem": "1024"},
        env=[{"name": "CUDA_DEVICE_MEMORY_LIMIT_0", "value": "80g"}]),
     "env CUDA_DEVICE_MEMORY_LIMIT_0: set by gpuslice"),
    ("a placement of its own", {**pod("t3", {"nvidia.com/gpumem": "1024"}), "spec": {
        **pod("t3", {"nvidia.com/gpumem": "1024"})["spec"], "nodeName": "h100-node"}},
     "spec.nodeName"),
    ("a forged placement (issue 20 item 1)", pod(
        "t5", {"nvidia.com/gpumem": "1024"},
        annotations={"gpuslice.io/assignment": '{"node":"h100-node","containers":[]}'}),
     "annotation gpuslice.io/assignment: written by gpuslice"),
    ("the opt-out label on a GPU pod (issue 20 item 2)", {**pod(
        "t6", {"nvidia.com/gpumem": "1024"}), "metadata": {
            "name": "t6", "namespace": NS, "labels": {"gpuslice.io/webhook": "disabled"}}},
     "gpuslice.io/webhook=disabled"),
    ("a path that is none", {**pod("t4", {"nvidia.com/gpumem": "1024"}), "spec": {
        **pod("t4", {"nvidia.com/gpumem": "1024"})["spec"],
        "nodeSelector": {dra.PATH_LABEL: "both"}}}, "not a GPU path"),
])
async def test_tenant_attacks_are_refused_on_the_dra_path(cluster, why, body, said):
    client, _, _ = cluster
    with pytest.raises(ApiError) as err:
        await client.create(dict_view(Pod)(body))
    assert said in err.value.status.message, (why, err.value.status.message)


EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "pods"
# docs/demo.md's five pods: (file, container) -> (GPUs, MiB each, cores): the request rounded up
# to the published 256 MiB step, a percent of the GPU the claim lands on
DEMO = {("hami.yaml", "ubuntu-container"): (1, 3072, "30"),
        ("volcano.yaml", "cuda-container"): (1, 3072, "50"),
        ("gpu-manager.yaml", "nvidia"): (1, 30 * 256, "50"),
        ("hami-multi-gpu.yaml", "ubuntu-container"): (2, 81920 // 4, "100"),
        ("hami-two-containers.yaml", "server"): (1, 2048, "20"),
        ("hami-two-containers.yaml", "warmup"): (1, 1024, "10")}


async def test_the_demos_five_pods_run_on_dra_with_their_limits(cluster):
    import yaml

    client, nodes, _ = cluster
    for f in sorted({f for f, _ in DEMO}):
        body = yaml.safe_load((EXAMPLES / f).read_text())
        body["metadata"]["namespace"] = NS
        created = await client.create(dict_view(Pod)(body))
        claims = {r["name"]: r["resourceClaimTemplateName"]
                  for r in created["spec"]["resourceClaims"]}
        want = {c: v for (file, c), v in DEMO.items() if file == f}
        assert set(claims) == {f"gpu-{c}" for c in want}, f
        got = await claims_of(client, body["metadata"]["name"], len(want))
        for c in got:
            container = c["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"]
            count, mib, cores = want[container.removeprefix("gpu-")]
            env = await prepared_env(nodes, c)
            assert len(env["GPUSLICE_DEVICE_UUIDS"].split(",")) == count, (f, container)
            assert [env[f"CUDA_DEVICE_MEMORY_LIMIT_{i}"] for i in range(count)] == \
                [f"{mib}m"] * count, (f, container, env)
            assert env["CUDA_DEVICE_SM_LIMIT"] == cores, (f, container)


async def test_a_template_kube_apiserver_stored_matches_what_another_replica_would_write(cluster):
    """A second webhook replica (or one whose memory of a template expired) finds the template
    made already: the stored spec (kube-apiserver adds metadata, writes 4096Mi as 4Gi) must
    read as the same, else every pod of that shape would be denied."""
    client, _, server = cluster
    first = await client.create(dict_view(Pod)(pod("first", {
        "nvidia.com/gpumem": "4096", "nvidia.com/gpucores": "30", "nvidia.com/priority": "1"},
        annotations={"nvidia.com/use-gputype": "h100"})))
    name = first["spec"]["resourceClaims"][0]["resourceClaimTemplateName"]
    stored = await client.get(dict_view(ResourceClaimTemplate), name, namespace=NS)
    assert stored["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"] == {
        "requests": {"memory": "4Gi", "cores": "30"}}, "kube-apiserver canonicalised it"
    other_replica = Templates(client)
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"spec": dra.claim_spec(
                model.SliceRequest(container="main", memory_mib=4096, cores=30,
                                   priority=model.Priority.LOW),
                model.GPUFilter(use_types=("h100",)), (), dra.DraOptions(enabled=True))}}
    assert dra.template_name(body["spec"]["spec"]) == name
    await other_replica.ensure(body)  # no TemplateError
    percent = await client.create(dict_view(Pod)(pod("pct", {
        "nvidia.com/gpumem-percentage": "10"})))
    pname = percent["spec"]["resourceClaims"][0]["resourceClaimTemplateName"]
    sizes = server.inventory.current().memory_mib
    await Templates(client).ensure({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": pname, "namespace": NS},
        "spec": {"spec": dra.claim_spec(model.SliceRequest(container="main", memory_percent=10),
                                        model.GPUFilter(), sizes, dra.DraOptions(enabled=True))}})


async def test_a_pod_cannot_take_the_claim_made_for_another(cluster):
    """kube-scheduler v1.36.2 reserves a claim made for pod A from its template for any pod of
    the namespace that names it (resourceClaimName), and the kubelet would then give that pod
    A's GPU share: the webhook refuses such a pod; a pod naming a claim of its own passes."""
    client, _, _ = cluster
    await client.create(dict_view(Pod)(pod("victim", {"nvidia.com/gpumem": "4096"})))
    (c,) = await claims_of(client, "victim", 1)
    thief = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "thief", "namespace": NS},
             "spec": {"resourceClaims": [{"name": "x", "resourceClaimName":
                                          c["metadata"]["name"]}],
                      "containers": [{"name": "c", "image": "registry.invalid/pause:1",
                                      "resources": {"claims": [{"name": "x"}]}}]}}
    with pytest.raises(ApiError) as err:
        await client.create(dict_view(Pod)(thief))
    assert f"resourceClaimName={c['metadata']['name']} was made for pod victim" in \
        err.value.status.message
    own = await client.create(dict_view(ResourceClaim)({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "mine", "namespace": NS}, "spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": DRIVER,
                                        "capacity": {"requests": {"memory": "1Gi"}}}}]}}}))
    thief["spec"]["resourceClaims"][0]["resourceClaimName"] = own["metadata"]["name"]
    await client.create(dict_view(Pod)(thief))  # a claim of one's own: allowed


async def test_the_webhook_is_ready_only_once_it_has_listed_the_slices(cluster):
    """Before the first list every DRA pod would be denied as if the cluster served no DRA:
    /readyz says so, and the Service sends it nothing meanwhile."""
    _, _, server = cluster
    assert server._ready() is None
    server.inventory.informer.synced.clear()
    try:
        assert "ResourceSlices are not listed yet" in server._ready()
    finally:
        server.inventory.informer.synced.set()

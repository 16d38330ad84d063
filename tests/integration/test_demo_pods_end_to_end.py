"""The worked demo (docs/demo.md): each pod of examples/pods/, written as HAMi, Volcano or GPU
Manager users write it, is created with kubectl through the API server, which calls the real
webhook over HTTPS; the kube-scheduler driver calls the real extender (filter, prioritize,
bind); the kubelet emulator calls the real node agent (2 fake GPUs) for Allocate. What a user
would check is asserted, and docs/demo.md must show what this run produced. Also: a pod as
Volcano's README writes it (`schedulerName: volcano`) is left to Volcano, and a pod no GPU can
hold stays Pending with the events docs/troubleshooting.md shows."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from demo_setup import EXAMPLES, PODS, ROOT, DemoCluster, Trip, demo, render

from gpuslice import codec, dialects, handoff
from kubeapi.quantity import stored
from kubelet.nodeharness import wait_for
from kubelet.pods import gpu

DOC = ROOT / "docs" / "demo.md"
GPUS = {gpu(0), gpu(1)}
MIB_PER_GPU = 16384  # the fake backend's GPUs


def check_admitted(t: Trip) -> None:
    """The webhook's patch was applied: our scheduler, the managed label, the resources."""
    pod, written = t.pod, yaml.safe_load((ROOT / t.file).read_text())
    assert pod["spec"]["schedulerName"] == "gpuslice-scheduler", t.file
    assert pod["metadata"]["labels"][handoff.MANAGED_LABEL] == "true", t.file
    for op in t.patch:  # the recorded reply is what the API server applied
        assert at(pod, op["path"]) == op["value"], f"{t.file}: {op['path']} as patched"
    for c, c_written in zip(pod["spec"]["containers"], written["spec"]["containers"],
                            strict=True):
        assert c.get("env") == c_written.get("env"), f"{t.file}: env as written"
        limits = c["resources"]["limits"]
        for name, value in c_written["resources"]["limits"].items():
            # as the API server stores it: the user's `gpumem: 3000` reads back as "3k"
            assert limits[name] == stored(value, milli=True), \
                f"{t.file}: the user's {name} is kept"


def at(obj: Any, pointer: str) -> Any:
    """The value at a JSON pointer (RFC 6901)."""
    for part in pointer.split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        obj = obj[int(part)] if isinstance(obj, list) else obj[part]
    return obj


def check_placed(t: Trip) -> dict[str, list[tuple[str, int, int]]]:
    """Bound to the node with an assignment that matches the request; container -> slices."""
    ann = t.pod["metadata"]["annotations"]
    assert t.pod["spec"]["nodeName"] == "node-a"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", ann[handoff.BOUND_AT])
    assignment = codec.decode_assignment(ann[codec.ASSIGNMENT_ANNOTATION])
    request = dialects.parse_pod(t.pod, dialects.Defaults(memory_percent=100))
    slices = {c.container: [(s.uuid, s.memory_mib, s.cores) for s in c.slices]
              for c in assignment.containers}
    for want in request.slices:
        got = slices[want.container]
        assert len(got) == want.count and {u for u, _, _ in got} <= GPUS, t.file
        assert len({u for u, _, _ in got}) == want.count, "a container's GPUs are distinct"
        mem = want.memory_mib or MIB_PER_GPU * want.memory_percent // 100
        assert all(m == mem and c == want.cores for _, m, c in got), (t.file, got, want)
    return slices


def check_allocated(t: Trip, slices: dict[str, list[tuple[str, int, int]]]) -> None:
    """Each container's Allocate answer carries its own slice, in the assignment's order."""
    uid = t.pod["metadata"]["uid"]
    assert t.pod["metadata"]["annotations"][handoff.ALLOCATED] == ",".join(t.allocate)
    for container, reply in t.allocate.items():
        env, mine = dict(reply.envs), slices[container]
        uuids = [u for u, _, _ in mine]
        assert env["GPUSLICE_DEVICE_UUIDS"] == ",".join(uuids)
        assert env["NVIDIA_VISIBLE_DEVICES"] == ",".join(uuids)
        for i, (_, mem, _) in enumerate(mine):
            assert env[f"CUDA_DEVICE_MEMORY_LIMIT_{i}"] == f"{mem}m", (container, i)
        assert env["CUDA_DEVICE_SM_LIMIT"] == str(mine[0][2])
        region = env["CUDA_DEVICE_MEMORY_SHARED_CACHE"]
        mounts = {m.container_path: m.host_path for m in reply.mounts}
        assert region.startswith("/var/run/gpuslice/"), region
        assert mounts["/var/run/gpuslice"].endswith(f"/regions/{uid}/{container}"), \
            "each container gets its own region directory"
        assert any(p.endswith("libgpuslice.so") for p in mounts), "the library is mounted"


async def test_every_example_pod_is_mutated_placed_and_allocated_as_docs_demo_shows(kube_api):
    async with demo(kube_api) as (cluster, trips):
        state_dir = str(cluster.node.state)
    used: dict[str, int] = {}
    for t in trips:
        check_admitted(t)
        slices = check_placed(t)
        check_allocated(t, slices)
        for uuid, mem, _ in (s for ss in slices.values() for s in ss):
            used[uuid] = used.get(uuid, 0) + mem
    assert all(v <= MIB_PER_GPU for v in used.values()), f"no GPU over-committed: {used}"
    env_doc = (ROOT / "docs" / "configuration.md").read_text().split(
        "## The container's environment")[1]
    names = {re.sub(r"_\d+$", "_<i>", k) for t in trips for r in t.allocate.values()
             for k in r.envs}
    assert all(f"| `{n}` |" in env_doc for n in names), \
        f"docs/configuration.md lists every variable the node agent sets: {sorted(names)}"
    shown, produced = doc_blocks(), render(trips, state_dir)
    assert sorted(shown) == sorted(produced), "docs/demo.md shows one block per step and pod"
    for name, text in produced.items():
        assert shown[name] == text, (
            f"docs/demo.md block {name!r} differs from this run; regenerate it with "
            f"`python examples/demo.py --markdown` and paste the block")


async def test_a_volcano_pod_that_names_the_volcano_scheduler_is_left_to_it_only_where_allowed(
        kube_api, tmp_path):
    """Volcano's own README sets schedulerName: volcano. Volcano would bind such a GPU pod with
    no gpuslice assignment, so it is denied, except in a namespace the operator lists in
    bypassNamespaces, where gpuslice leaves it to Volcano (docs/migrate.md "Volcano vGPU")."""
    from lightkube.resources.core_v1 import Namespace

    written = yaml.safe_load((EXAMPLES / "volcano.yaml").read_text())
    written["spec"]["schedulerName"] = "volcano"
    path = tmp_path / "volcano-as-documented.yaml"
    path.write_text(yaml.safe_dump(written))
    written["metadata"]["namespace"] = "volcano-jobs"
    elsewhere = tmp_path / "volcano-in-its-namespace.yaml"
    elsewhere.write_text(yaml.safe_dump(written))
    async with DemoCluster(kube_api, bypass_namespaces=("volcano-jobs",)) as cluster:
        denied = await cluster.create(path, check=False)
        await cluster.client.create(Namespace.from_dict({"metadata": {"name": "volcano-jobs"}}))
        printed = await cluster.create(elsewhere)
        pod = await cluster.pod("volcano-pod", namespace="volcano-jobs")
    assert "another scheduler would bind it" in denied, denied
    assert "bypassNamespaces; namespace 'default' is not one" in denied, denied
    assert "Warning: spec.schedulerName=volcano: gpuslice will not place or cap this pod; " \
           "remove it to use gpuslice" in printed
    assert pod["spec"]["schedulerName"] == "volcano"
    assert handoff.MANAGED_LABEL not in (pod["metadata"].get("labels") or {})


@pytest.mark.parametrize("name", PODS)
def test_each_example_pod_is_plain_kubernetes_yaml_without_gpuslice_fields(name):
    import kubernetes_validate

    text = (EXAMPLES / name).read_text()
    assert "gpuslice" not in text.split("apiVersion:", 1)[1], "no gpuslice-specific field"
    pod = yaml.safe_load(text)
    assert pod["kind"] == "Pod" and "schedulerName" not in pod["spec"]
    kubernetes_validate.validate(pod, "1.28.0", strict=True)  # the oldest version we support


def doc_blocks() -> dict[str, str]:
    """docs/demo.md's generated blocks: <!-- demo: NAME --> then a fenced block."""
    found = re.findall(r"<!-- demo: (.+?) -->\n```\w*\n(.*?)\n```", DOC.read_text(), re.S)
    return dict(found)


async def test_a_pod_no_gpu_can_hold_stays_pending_with_the_reasons_troubleshooting_lists(
        kube_api, tmp_path):
    from lightkube.resources.core_v1 import Event

    written = yaml.safe_load((EXAMPLES / "hami.yaml").read_text())
    written["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] = 20000
    path = tmp_path / "too-big.yaml"
    path.write_text(yaml.safe_dump(written))
    async with DemoCluster(kube_api) as cluster:
        await cluster.create(path)

        async def events() -> dict[str, str]:
            got = [e async for e in cluster.client.list(
                Event, namespace="default", fields={"involvedObject.name": "hami-pod"})]
            return {e.reason: e.message for e in got}

        await wait_for(lambda: _has(events, {"FailedScheduling", "NoGPUFit"}),
                       "the scheduler's and the extender's events")
        seen = await events()
        assert not (await cluster.pod("hami-pod"))["spec"].get("nodeName")
    assert seen["FailedScheduling"].startswith(
        "0/1 nodes are available: 1 insufficient GPU memory."), seen
    assert seen["NoGPUFit"].startswith("0/1 nodes can take the GPU request: "
                                       "1 insufficient GPU memory (node-a: "), seen
    page = (ROOT / "docs" / "troubleshooting.md").read_text()
    for reason in ("FailedScheduling", "NoGPUFit"):
        assert re.search(rf"Warning +{reason} +{re.escape(seen[reason])}\n", page), \
            f"docs/troubleshooting.md shows the {reason} event as it is: {seen[reason]}"


async def _has(events: Any, reasons: set[str]) -> bool:
    return reasons <= set(await events())

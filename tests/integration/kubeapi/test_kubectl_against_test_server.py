"""The machine's kubectl against the API (either backend): discovery, get, create, the three
patch types, delete and get -w, over HTTPS with the admin kubeconfig."""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest
import yaml

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl on PATH")

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "k", "labels": {"app": "a"}},
       "spec": {"containers": [{"name": "c", "image": "registry.invalid/pause:1"}]}}


def _create_pod(kube_api, tmp_path) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(POD))
    assert kube_api.kubectl("create", "-f", str(manifest)).stdout == "pod/k created\n"


def _labels(kube_api) -> dict[str, str]:
    return json.loads(kube_api.kubectl("get", "pod", "k", "-o", "json").stdout)["metadata"][
        "labels"]


def test_kubectl_reads_the_server_version_and_namespaces(kube_api):
    assert "Server Version: v1." in kube_api.kubectl("version").stdout
    names = kube_api.kubectl("get", "namespaces", "-o", "name").stdout.split()
    assert {"namespace/default", "namespace/kube-system"} <= set(names)


def test_kubectl_creates_and_gets_a_pod_as_a_table_and_as_yaml(kube_api, tmp_path):
    _create_pod(kube_api, tmp_path)
    table = kube_api.kubectl("get", "pods").stdout.splitlines()
    assert table[0].split()[0] == "NAME" and table[1].split()[0] == "k"
    pod = yaml.safe_load(kube_api.kubectl("get", "pod", "k", "-o", "yaml").stdout)
    assert pod["status"]["phase"] == "Pending" and pod["metadata"]["uid"]


def test_kubectl_patches_with_all_three_types(kube_api, tmp_path):
    _create_pod(kube_api, tmp_path)
    kube_api.kubectl("patch", "pod", "k", "--type", "merge", "-p",
                     '{"metadata":{"labels":{"merge":"1"}}}')
    kube_api.kubectl("patch", "pod", "k", "--type", "strategic", "-p",
                     '{"metadata":{"labels":{"strategic":"1"}}}')
    kube_api.kubectl("patch", "pod", "k", "--type", "json", "-p",
                     '[{"op":"add","path":"/metadata/labels/json","value":"1"}]')
    assert _labels(kube_api) == {"app": "a", "merge": "1", "strategic": "1", "json": "1"}


def test_kubectl_typed_create_commands_send_protobuf_that_the_server_reads(kube_api):
    name = "kubectl-typed"  # unique: a real server keeps deleted namespaces Terminating
    kube_api.kubectl("create", "namespace", name)
    kube_api.kubectl("create", "configmap", "c", "--from-literal=a=b", "-n", name)
    kube_api.kubectl("create", "secret", "generic", "s", "--from-literal=k=v", "-n", name)
    ns = json.loads(kube_api.kubectl("get", "namespace", name, "-o", "json").stdout)
    cm = json.loads(kube_api.kubectl("get", "configmap", "c", "-n", name, "-o", "json").stdout)
    secret = json.loads(kube_api.kubectl("get", "secret", "s", "-n", name, "-o",
                                         "json").stdout)
    assert ns["metadata"]["labels"]["kubernetes.io/metadata.name"] == name
    assert cm["data"] == {"a": "b"}
    assert (secret["data"], secret["type"]) == ({"k": "dg=="}, "Opaque")


def test_kubectl_label_and_annotate_use_the_server_patch(kube_api, tmp_path):
    _create_pod(kube_api, tmp_path)
    kube_api.kubectl("label", "pod", "k", "app-", "tier=gpu")
    assert _labels(kube_api) == {"tier": "gpu"}


def test_kubectl_reports_a_missing_object_like_against_a_real_server(kube_api):
    result = kube_api.kubectl("get", "pod", "ghost", check=False)
    assert result.returncode == 1
    assert 'pods "ghost" not found' in result.stderr


def test_kubectl_deletes_a_pod(kube_api, tmp_path):
    _create_pod(kube_api, tmp_path)
    assert kube_api.kubectl("delete", "pod", "k").stdout == 'pod "k" deleted\n'
    assert kube_api.kubectl("get", "pods", "-o", "name").stdout == ""


def test_kubectl_get_watch_prints_each_change(kube_api, tmp_path):
    _create_pod(kube_api, tmp_path)
    watch = subprocess.Popen(
        ["kubectl", "--kubeconfig", str(kube_api.kubeconfig), "get", "pods", "-w",
         "-o", "custom-columns=NAME:.metadata.name,TIER:.metadata.labels.tier"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.5)  # kubectl has listed and opened its watch
        kube_api.kubectl("label", "pod", "k", "tier=gpu")
        kube_api.kubectl("label", "pod", "k", "tier=cpu", "--overwrite")
        time.sleep(1.0)
    finally:
        watch.terminate()
        out, err = watch.communicate(timeout=10)
    rows = [line.split() for line in out.splitlines()[1:]]
    assert rows[:3] == [["k", "<none>"], ["k", "gpu"], ["k", "cpu"]], (out, err)


def test_a_spawned_server_serves_kubectl_from_its_own_process(tmp_path):
    from kubeapi.server import spawn

    server = spawn(tmp_path / "spawned")
    try:
        result = subprocess.run(["kubectl", "--kubeconfig", str(server.kubeconfig), "get",
                                 "namespace", "default", "-o", "name"],
                                capture_output=True, text=True, timeout=30)
        assert result.stdout == "namespace/default\n", result.stderr
    finally:
        server.stop()
    assert server.process.returncode is not None, "stopped"

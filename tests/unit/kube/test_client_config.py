"""kube/client.py: the API configuration is found where documented, or the error says the fix."""

from __future__ import annotations

import textwrap

import pytest

from gpuslice.errors import EnvironmentProblem
from gpuslice.kube import client

KUBECONFIG = textwrap.dedent("""\
    apiVersion: v1
    kind: Config
    clusters:
    - name: {name}
      cluster: {{server: "https://{name}.test:6443", insecure-skip-tls-verify: true}}
    users:
    - name: admin
      user: {{token: secret-token}}
    contexts:
    - name: {name}
      context: {{cluster: {name}, user: admin, namespace: gpu}}
    - name: other
      context: {{cluster: {name}, user: admin}}
    current-context: {name}
    """)


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No $KUBECONFIG, no service account, an empty home: nothing to find by default."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path


def write(path, name):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(KUBECONFIG.format(name=name))
    return str(path)


def server(config, context=None) -> str:
    return config.get(context).cluster.server


def test_an_explicit_kubeconfig_wins_over_kubeconfig_env(clean_env, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", write(clean_env / "env.yaml", "env"))
    given = write(clean_env / "given.yaml", "given")
    assert server(client.load_config(given)) == "https://given.test:6443"


def test_kubeconfig_env_is_used_and_a_list_picks_the_first_existing_file(clean_env, monkeypatch):
    found = write(clean_env / "b.yaml", "second")
    monkeypatch.setenv("KUBECONFIG", f"{clean_env}/missing.yaml:{found}")
    assert server(client.load_config()) == "https://second.test:6443"


def test_the_service_account_is_used_in_a_pod(clean_env, monkeypatch):
    account = clean_env / "sa"
    account.mkdir()
    (account / "token").write_text("pod-token")
    (account / "namespace").write_text("gpuslice-system")
    (account / "ca.crt").write_text("")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    config = client.load_config(service_account=str(account)).get()
    assert config.cluster.server == "https://10.96.0.1:443"
    assert config.namespace == "gpuslice-system"


def test_home_kubeconfig_is_the_last_resort(clean_env):
    write(clean_env / "home" / ".kube" / "config", "home")
    assert server(client.load_config(service_account=str(clean_env / "none"))) == (
        "https://home.test:6443")


def test_nothing_found_names_every_place_looked_and_the_fix(clean_env, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")
    with pytest.raises(EnvironmentProblem) as info:
        client.load_config(service_account=str(clean_env / "none"))
    message = str(info.value)
    assert message.startswith("no Kubernetes API configuration found: ")
    assert "$KUBECONFIG=/nonexistent/kubeconfig (no such file)" in message
    assert "no service account" in message and "no ~/.kube/config" in message
    assert message.endswith("pass --kubeconfig or run in a pod with a service account")
    assert info.value.exit_code == 3


def test_a_missing_explicit_kubeconfig_is_not_silently_replaced_by_another(clean_env, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", write(clean_env / "env.yaml", "env"))
    with pytest.raises(EnvironmentProblem, match=r"kubeconfig /no/such: no such file"):
        client.load_config("/no/such")


def test_an_unknown_context_lists_the_contexts_there_are(clean_env):
    given = write(clean_env / "k.yaml", "k")
    expected = r"Context 'nope' not found \(contexts: k, other\)"
    with pytest.raises(EnvironmentProblem, match=expected):
        client.load_config(given, context="nope")
    assert server(client.load_config(given, context="other"), "other") == "https://k.test:6443"


@pytest.mark.parametrize("text", ["{not yaml: [", "clusters: 3\n", "- a list\n"],
                         ids=["bad-yaml", "bad-types", "not-a-mapping"])
def test_a_malformed_kubeconfig_is_an_environment_problem_not_a_traceback(clean_env, text):
    path = clean_env / "bad.yaml"
    path.write_text(text)
    with pytest.raises(EnvironmentProblem, match="cannot load the Kubernetes API configuration"):
        client.load_config(str(path))


async def test_make_client_builds_an_async_client_for_the_context(clean_env):
    api = client.make_client(write(clean_env / "k.yaml", "k"), timeout_s=2.5)
    try:
        assert api.namespace == "gpu"
        assert api.config.cluster.server == "https://k.test:6443"
    finally:
        await api.close()


def test_dict_view_keeps_the_api_path_and_leaves_lightkubes_registry_alone():
    from lightkube.core.resource_registry import resource_registry
    from lightkube.resources.coordination_v1 import Lease
    from lightkube.resources.core_v1 import Node, Pod

    view = client.dict_view(Pod)
    assert view is client.dict_view(Pod), "one class per resource (cached)"
    assert view._api_info is Pod._api_info and issubclass(view, dict)
    assert client.dict_view(Lease)._api_info.resource.group == "coordination.k8s.io"
    assert client.dict_view(Node)({"metadata": {"name": "n"}})["metadata"]["name"] == "n"
    assert resource_registry.get("v1", "Pod") in (None, Pod), "the typed class is not shadowed"
    with pytest.raises(TypeError, match="not a lightkube resource class"):
        client.dict_view(dict)


def test_list_items_get_the_type_kube_apiserver_leaves_out_of_them():
    """kube-apiserver sends a list's items without apiVersion and kind (lightkube builds each
    item with the class); events about a listed pod need them (the node agent's swap events
    failed on the real server without this)."""
    from lightkube.resources.core_v1 import Pod
    from lightkube.resources.resource_v1 import ResourceSlice

    from gpuslice.kube.client import dict_view

    item = dict_view(Pod)({"metadata": {"name": "p", "namespace": "ns"}, "spec": {}})
    assert (item["apiVersion"], item["kind"], item["metadata"]["name"]) == ("v1", "Pod", "p")
    assert dict_view(ResourceSlice)({"metadata": {"name": "s"}})["apiVersion"] == \
        "resource.k8s.io/v1"
    kept = dict_view(Pod)({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}})
    assert list(kept) == ["apiVersion", "kind", "metadata"]

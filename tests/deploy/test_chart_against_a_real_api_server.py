"""The chart on a real kube-apiserver (v1.36, kube-controller-manager running; the real tier of
docs/development.md): rendered by helm as `helm install` would against that server (its
version and API groups read by `helm template --dry-run=server`), then every object applied
with server-side apply by the same version's kubectl (tools/kube/bin/kubectl), for the default
values and for `dra.enabled=true`. Proves: the server's validation, defaulting and admission
accept every object (ServiceAccounts, ConfigMaps, RBAC, Services, the workloads, the
MutatingWebhookConfiguration, the ValidatingAdmissionPolicy and its binding, the DeviceClass,
the certgen Jobs) with no warning; the ValidatingAdmissionPolicy's CEL type-checks without a
warning; applying the same render again changes nothing (no difference for `kubectl diff
--server-side`, no object's spec or generation moves, and an object only the chart writes
keeps its resourceVersion). test_chart.py checks the render offline; this is what only a real
server can say."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_chart import CHART, helm

MANAGER = "gpuslice-chart-test"
NAMESPACE = "gpuslice-system"
CASES = {"default": [], "dra": ["--set", "dra.enabled=true"]}
# Kinds a value of the chart must add to a render of these cases (the server has them all).
EXPECTED = {"default": {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
                        "MutatingWebhookConfiguration", "ClusterRole", "Role", "Job"},
            "dra": {"DeviceClass", "ValidatingAdmissionPolicy"}}


def kubectl(kube_api: Any, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """The built kubectl (same version as the server), not whatever is on PATH."""
    binary = kube_api.control_plane.assets.kubectl
    if binary is None:
        pytest.fail(f"{kube_api.control_plane.assets.folder} has no kubectl "
                    "(tools/kube/build.sh builds one)")
    done = subprocess.run([str(binary), "--kubeconfig", str(kube_api.kubeconfig), *args],
                          capture_output=True, text=True, timeout=120, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed ({done.returncode}):\n"
                             f"{done.stdout}\n{done.stderr}")
    return done


def render(kube_api: Any, values: list[str]) -> list[dict[str, Any]]:
    """What `helm install` would create on this server: --dry-run=server reads its version and
    API groups (so the ValidatingAdmissionPolicy and, with DRA, the DeviceClass are in)."""
    done = subprocess.run(
        [helm(), "template", "t", str(CHART), "--namespace", NAMESPACE, "--dry-run=server",
         "--kubeconfig", str(kube_api.kubeconfig), *values],
        capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return [o for o in yaml.safe_load_all(done.stdout) if o]


def live(kube_api: Any, manifest: Path) -> dict[tuple[str, str], dict[str, Any]]:
    got = json.loads(kubectl(kube_api, "get", "-f", str(manifest), "-o", "json",
                             "--show-managed-fields").stdout)
    return {(o["kind"], o["metadata"]["name"]): o for o in got["items"]}


def content(obj: dict[str, Any]) -> dict[str, Any]:
    """An object without what the server and controllers keep changing."""
    meta = {k: v for k, v in obj["metadata"].items()
            if k not in ("managedFields", "resourceVersion")}
    return {**{k: v for k, v in obj.items() if k != "status"}, "metadata": meta}


def only_ours(obj: dict[str, Any]) -> bool:
    return {f["manager"] for f in obj["metadata"]["managedFields"]} == {MANAGER}


@pytest.mark.kube_backends("kube-apiserver")
@pytest.mark.parametrize("case", CASES)
def test_every_chart_object_is_applied_server_side_and_reapplying_changes_nothing(
        kube_api, tmp_path, case):
    objs = render(kube_api, CASES[case])
    kinds = {o["kind"] for o in objs}
    assert EXPECTED[case] <= kinds, f"rendered without {EXPECTED[case] - kinds}"
    manifest = tmp_path / "chart.yaml"
    manifest.write_text(yaml.safe_dump_all(objs))
    kubectl(kube_api, "create", "namespace", NAMESPACE)
    apply = ("--warnings-as-errors", "apply", "--server-side", f"--field-manager={MANAGER}",
             "-f", str(manifest))
    try:
        done = kubectl(kube_api, *apply)
        applied = [line for line in done.stdout.splitlines()
                   if line.endswith(" serverside-applied")]
        assert len(applied) == len(objs), done.stdout
        before = live(kube_api, manifest)
        assert set(before) == {(o["kind"], o["metadata"]["name"]) for o in objs}

        for (kind, name), obj in before.items():
            if kind == "ValidatingAdmissionPolicy":  # the server type-checks its CEL
                deadline = time.monotonic() + 30
                while (obj.get("status") or {}).get("observedGeneration") != \
                        obj["metadata"]["generation"] and time.monotonic() < deadline:
                    time.sleep(0.2)
                    obj = json.loads(kubectl(kube_api, "get", kind, name, "-o", "json").stdout)
                checked = obj.get("status") or {}
                assert checked.get("observedGeneration") == obj["metadata"]["generation"], obj
                warnings = (checked.get("typeChecking") or {}).get("expressionWarnings") or []
                assert not warnings, f"{kind} {name}: kube-apiserver's CEL type check:\n" + \
                    "\n".join(f"{w.get('fieldRef')}: {w.get('warning')}" for w in warnings)
        before = live(kube_api, manifest)  # after the policy's status write, if any

        time.sleep(1.1)  # managedFields times have seconds: a write now would show
        diff = kubectl(kube_api, "diff", "--server-side", f"--field-manager={MANAGER}",
                       "-f", str(manifest), check=False)
        assert diff.returncode == 0, f"re-applying would change:\n{diff.stdout}{diff.stderr}"
        kubectl(kube_api, *apply)
        after = live(kube_api, manifest)
        for key, obj in before.items():
            again = after[key]
            assert content(again) == content(obj), f"{key}: re-applying changed it"
            assert again["metadata"].get("generation") == obj["metadata"].get("generation"), key
            if only_ours(obj):  # nothing else writes it: not even a write happened
                assert again["metadata"]["resourceVersion"] == \
                    obj["metadata"]["resourceVersion"], f"{key}: re-applying wrote it"
    finally:
        # The placement policy binds the admin too: leave nothing for the tests that follow,
        # and wait until the workloads' pods are gone too (Job pods carry a finalizer; the
        # next test's reset must not meet them half-deleted)
        kubectl(kube_api, "delete", "-f", str(manifest), "--ignore-not-found",
                "--cascade=foreground", "--wait=true", "--timeout=90s", check=False)
        kubectl(kube_api, "delete", "namespace", NAMESPACE, "--ignore-not-found",
                "--wait=true", "--timeout=90s", check=False)

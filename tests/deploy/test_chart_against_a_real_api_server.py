"""With KUBEBUILDER_ASSETS (a real kube-apiserver + etcd, docs/development.md), the rendered
chart is applied with server-side dry-run: the real server's validation, defaulting and
admission accept every object. Without it (CI) this skips: test_chart.py validates offline."""

from __future__ import annotations

import subprocess

import pytest
import yaml
from test_chart import CHART, helm

CRD_KINDS = {"Certificate", "Issuer", "ServiceMonitor"}


def test_the_rendered_chart_passes_a_server_side_dry_run(kube_api, tmp_path):
    if not kube_api.is_real:
        pytest.skip("needs a real kube-apiserver: set KUBEBUILDER_ASSETS (docs/development.md)")
    version = kube_api.backend.rsplit("v", 1)[-1]
    done = subprocess.run(
        [helm(), "template", "t", str(CHART), "--namespace", "gpuslice-system",
         "--kube-version", version], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    objs = [o for o in yaml.safe_load_all(done.stdout) if o and o["kind"] not in CRD_KINDS]
    manifest = tmp_path / "chart.yaml"
    manifest.write_text(yaml.safe_dump_all(objs))
    kube_api.kubectl("create", "namespace", "gpuslice-system")
    result = kube_api.kubectl("apply", "--dry-run=server", "-f", str(manifest), timeout=120)
    applied = [line for line in result.stdout.splitlines() if "(server dry run)" in line]
    assert len(applied) == len(objs), result.stdout

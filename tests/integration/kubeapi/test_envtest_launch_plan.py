"""The real-backend code (envtest.py), tested without real binaries: its command lines, its
errors, and a whole start -> use -> reset -> stop cycle with stand-ins for etcd (a tiny HTTP
health server) and kube-apiserver (the in-process server, started by a script that reads
kube-apiserver's flags, so the certificates and kubeconfig envtest.py makes are really used)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kubeapi.envtest import (
    Assets,
    ControlPlane,
    EnvtestError,
    apiserver_command,
    etcd_command,
    find_assets,
    scheduler_command,
    scheduler_config,
    scheduler_version,
)
from kubeapi.raw import node_body, pod_body

TESTS = Path(__file__).resolve().parents[2]
FAKE_ETCD = f"""#!{sys.executable}
import sys, http.server
url = [a.split("=", 1)[1] for a in sys.argv if a.startswith("--listen-client-urls=")][0]
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
        self.wfile.write(b'{{"health":"true"}}')
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(url.rsplit(":", 1)[1])), Health).serve_forever()
"""
FAKE_APISERVER = f"""#!{sys.executable}
import sys, time
sys.path.insert(0, {str(TESTS)!r})
from pathlib import Path
from kubeapi.certs import Pki
from kubeapi.server import KubeApiServer
flags = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--"))
read = lambda flag: Path(flags[flag]).read_bytes()
pki = Pki(read("client-ca-file"), b"", read("tls-cert-file"), read("tls-private-key-file"),
          b"", b"")
KubeApiServer(pki=pki, https_port=int(flags["secure-port"])).start()
while True:
    time.sleep(60)
"""


def _assets(folder: Path, apiserver: str = FAKE_APISERVER, scheduler: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in (("etcd", FAKE_ETCD), ("kube-apiserver", apiserver)):
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)
    if scheduler:
        (folder / "kube-scheduler").write_text("#!/bin/sh\necho Kubernetes v1.36.2\n")
        (folder / "kube-scheduler").chmod(0o755)
    return folder


def test_no_kubebuilder_assets_means_the_in_process_server():
    assert find_assets(None) is None and find_assets("") is None


def test_a_folder_without_the_binaries_is_an_error_that_says_how_to_get_them(tmp_path):
    (tmp_path / "etcd").write_text("")
    with pytest.raises(EnvtestError, match=r"no executable etcd or kube-apiserver; build them "
                                           r"with `export KUBEBUILDER_ASSETS=\$\(bash "
                                           r"tools/kube/build.sh\)`"):
        find_assets(str(tmp_path))


def test_the_command_lines_are_loopback_with_our_certificates(tmp_path):
    assets = find_assets(str(_assets(tmp_path / "bin", scheduler=True)))
    assert assets is not None and assets.kube_scheduler == tmp_path / "bin" / "kube-scheduler"
    etcd = etcd_command(assets, tmp_path / "data", 2379, 2380)
    assert "--listen-client-urls=http://127.0.0.1:2379" in etcd
    assert "--initial-cluster=default=http://127.0.0.1:2380" in etcd
    files = {n: tmp_path / n for n in ("ca.crt", "serving.crt", "serving.key")}
    api = apiserver_command(assets, files, tmp_path / "sa.key", tmp_path / "certs", 2379, 6443)
    for flag in ("--etcd-servers=http://127.0.0.1:2379", "--bind-address=127.0.0.1",
                 "--secure-port=6443", f"--client-ca-file={files['ca.crt']}",
                 f"--tls-cert-file={files['serving.crt']}", "--authorization-mode=RBAC",
                 "--disable-admission-plugins=ServiceAccount",
                 f"--service-account-signing-key-file={tmp_path / 'sa.key'}"):
        assert flag in api, flag
    sched = scheduler_command(assets, tmp_path / "kubeconfig", tmp_path / "cfg.yaml", 10259)
    assert f"--config={tmp_path / 'cfg.yaml'}" in sched and "--secure-port=10259" in sched
    assert scheduler_version(assets) == "kube-scheduler v1.36.2"


def test_the_scheduler_config_points_at_our_api_server(tmp_path):
    config = {"apiVersion": "kubescheduler.config.k8s.io/v1",
              "kind": "KubeSchedulerConfiguration",
              "profiles": [{"schedulerName": "gpuslice-scheduler"}],
              "extenders": [{"urlPrefix": "http://127.0.0.1:1/ext", "filterVerb": "filter"}]}
    made = scheduler_config(config, tmp_path / "kubeconfig")
    assert made["clientConnection"] == {"kubeconfig": str(tmp_path / "kubeconfig")}
    assert made["leaderElection"] == {"leaderElect": False}
    assert made["extenders"] == config["extenders"] and made["profiles"] == config["profiles"]
    with pytest.raises(EnvtestError, match="expected a KubeSchedulerConfiguration"):
        scheduler_config({"kind": "Pod"}, tmp_path / "kubeconfig")


def test_no_kube_scheduler_in_the_folder_is_an_error_when_one_is_asked_for(tmp_path):
    assets = Assets(tmp_path, tmp_path / "etcd", tmp_path / "kube-apiserver", None)
    with pytest.raises(EnvtestError, match="has no kube-scheduler"):
        scheduler_command(assets, tmp_path / "k", tmp_path / "c", 1)


async def test_a_control_plane_starts_serves_resets_and_stops(tmp_path):
    assets = find_assets(str(_assets(tmp_path / "bin")))
    plane = ControlPlane(assets, tmp_path / "run").start(timeout=30)
    try:
        assert plane.version == "kube-apiserver v1.36.0-gpuslice-test"
        config = yaml.safe_load(plane.kubeconfig.read_text())
        assert config["clusters"][0]["cluster"]["server"] == plane.url
        assert config["users"][0]["user"]["client-certificate-data"]
        from kubeapi.fixtures import KubeApi
        from kubeapi.raw import Raw

        raw = Raw(KubeApi(plane.version, plane.url, plane.kubeconfig, control_plane=plane))
        await raw.create(pod_body("left-over"))
        await raw.create(node_body("n1"))
        await raw.call("POST", "/api/v1/namespaces/default/configmaps", {
            "metadata": {"name": "held", "finalizers": ["example.com/keep"]}})
        await raw.call("POST", "/api/v1/namespaces", {"metadata": {"name": "scratch"}})
        leases = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
        for name in ("apiserver-abc", "gpuslice-scheduler"):
            await raw.call("POST", leases, {"metadata": {"name": name}, "spec": {}})
        plane.reset()
        _, left = await raw.call("GET", leases)
        assert [i["metadata"]["name"] for i in left["items"]] == ["apiserver-abc"], \
            "the API server's own lease stays, a test's goes"
        _, pods = await raw.call("GET", "/api/v1/pods")
        _, nodes = await raw.call("GET", "/api/v1/nodes")
        _, namespaces = await raw.call("GET", "/api/v1/namespaces")
        code, _ = await raw.call("GET", "/api/v1/namespaces/default/configmaps/held")
        assert pods["items"] == [] and nodes["items"] == []
        assert code == 404, "a finalizer does not keep an object across tests"
        assert "scratch" not in {n["metadata"]["name"] for n in namespaces["items"]}
    finally:
        processes = list(plane.processes)
        plane.stop()
    assert [p.name for p in processes] == ["etcd", "kube-apiserver"]
    assert all(p.popen and p.popen.poll() is not None for p in processes), "all stopped"


def test_a_component_that_exits_is_reported_with_its_log(tmp_path):
    broken = "#!/bin/sh\necho 'error: bad flag --nope' >&2\nexit 3\n"
    assets = find_assets(str(_assets(tmp_path / "bin", apiserver=broken)))
    with pytest.raises(EnvtestError, match=r"(?s)kube-apiserver exited with code 3.*bad flag"):
        ControlPlane(assets, tmp_path / "run").start(timeout=20)


def test_with_kubebuilder_assets_the_kube_api_fixture_runs_tests_on_the_real_backend(tmp_path):
    test = tmp_path / "test_either.py"
    test.write_text(  # every kube_api test runs on each backend: in-process and the real one
        "def test_backend(kube_api, raw):\n"
        "    assert kube_api.is_real == kube_api.backend.startswith('kube-apiserver v1.')\n"
        "    assert (kube_api.faults is None) == kube_api.is_real\n"
        "def test_faults_skip(kube_api):\n"
        "    kube_api.need_faults()\n")
    env = {**{k: v for k, v in os.environ.items() if k != "GPUSLICE_KUBE_BACKENDS"},
           "KUBEBUILDER_ASSETS": str(_assets(tmp_path / "bin")),
           "PYTHONPATH": str(TESTS), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", str(test), "-p", "kubeapi.fixtures", "-v",
         "-p", "no:cacheprovider", "--rootdir", str(tmp_path), "-rs"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert "3 passed, 1 skipped" in result.stdout, result.stdout + result.stderr
    assert "test_backend[kube-apiserver] PASSED" in result.stdout
    assert "fault injection needs the in-process API server" in result.stdout

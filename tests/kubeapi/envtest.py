"""A real control plane for the same tests: etcd + kube-apiserver (+ kube-scheduler) from
KUBEBUILDER_ASSETS, the envtest convention (`setup-envtest use -p path 1.36.x`).
Owns: finding the binaries, their command lines (loopback only, generated certificates,
admin client certificate in system:masters, RBAC, ServiceAccount admission off as envtest
does), start-up with readiness checks, a kubeconfig, emptying the cluster between tests, and
starting kube-scheduler with a caller's KubeSchedulerConfiguration.
On failure: EnvtestError with the command and the tail of the component's log. A folder
without etcd or kube-apiserver is an error, not a silent fall-back to the in-process server.
Tests: tests/integration/kubeapi/test_envtest_launch_plan.py (command lines, kubeconfig)"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import ssl
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .certs import Pki, make_pki, service_account_key, write_kubeconfig

SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
SETUP_HINT = ("build them with `export KUBEBUILDER_ASSETS=$(bash tools/kube/build.sh)` "
              "(docs/development.md), or unset KUBEBUILDER_ASSETS to use the in-process server")


class EnvtestError(RuntimeError):
    """The real control plane is misconfigured or did not start; the message says which."""


@dataclass(frozen=True)
class Assets:
    """The binaries of a KUBEBUILDER_ASSETS folder; the optional ones are None when absent
    (setup-envtest's folders hold only etcd, kube-apiserver and kubectl; tools/kube/build.sh's
    hold them all)."""

    folder: Path
    etcd: Path
    kube_apiserver: Path
    kube_scheduler: Path | None = None
    kube_controller_manager: Path | None = None
    kubelet: Path | None = None
    fake_cri: Path | None = None
    kubectl: Path | None = None


def find_assets(value: str | None) -> Assets | None:
    """None when KUBEBUILDER_ASSETS is unset or empty; EnvtestError when it is set but wrong."""
    if not value:
        return None
    folder = Path(value)
    missing = [n for n in ("etcd", "kube-apiserver") if not _executable(folder / n)]
    if missing:
        raise EnvtestError(f"KUBEBUILDER_ASSETS={value} has no executable "
                           f"{' or '.join(missing)}; {SETUP_HINT}")

    def optional(name: str) -> Path | None:
        return folder / name if _executable(folder / name) else None

    return Assets(folder, folder / "etcd", folder / "kube-apiserver",
                  optional("kube-scheduler"), optional("kube-controller-manager"),
                  optional("kubelet"), optional("fake-cri"), optional("kubectl"))


REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "tools" / "kube" / "build.sh"


def build_assets(log: Path) -> Assets:
    """The project's own binaries (tools/kube/build.sh: from the Go module proxy, a no-op when
    they are current), for a run without KUBEBUILDER_ASSETS. The build's output goes to `log`;
    EnvtestError with its tail when it fails or Go is missing."""
    if shutil.which("go") is None:
        raise EnvtestError("the real Kubernetes tier needs Go >= 1.26 to build its binaries "
                           f"(tools/kube/build.sh); install Go, or {SETUP_HINT}")
    with log.open("wb") as out:
        done = subprocess.run(["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, stderr=out)
    if done.returncode != 0:
        raise EnvtestError(f"tools/kube/build.sh failed (exit {done.returncode}); its log "
                           f"({log}):\n{log.read_text(errors='replace')[-3000:]}")
    assets = find_assets(done.stdout.decode().strip().splitlines()[-1])
    assert assets is not None
    return assets


def _executable(path: Path) -> bool:
    return path.is_file() and path.stat().st_mode & 0o111 != 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def etcd_command(assets: Assets, data_dir: Path, client_port: int, peer_port: int) -> list[str]:
    client, peer = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
    return [str(assets.etcd), "--name=default", f"--data-dir={data_dir}",
            f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}", "--unsafe-no-fsync=true"]


def apiserver_command(assets: Assets, pki_files: dict[str, Path], sa_key: Path,
                      cert_dir: Path, etcd_port: int, port: int) -> list[str]:
    return [
        str(assets.kube_apiserver), f"--etcd-servers=http://127.0.0.1:{etcd_port}",
        "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={port}",
        f"--cert-dir={cert_dir}", f"--tls-cert-file={pki_files['serving.crt']}",
        f"--tls-private-key-file={pki_files['serving.key']}",
        f"--client-ca-file={pki_files['ca.crt']}",
        f"--service-account-issuer=https://127.0.0.1:{port}",
        f"--service-account-key-file={sa_key}", f"--service-account-signing-key-file={sa_key}",
        "--service-cluster-ip-range=10.0.0.0/24", "--allow-privileged=true",
        "--authorization-mode=RBAC", "--disable-admission-plugins=ServiceAccount",
    ]


def scheduler_command(assets: Assets, kubeconfig: Path, config: Path, port: int) -> list[str]:
    if assets.kube_scheduler is None:
        raise EnvtestError(f"{assets.folder} has no kube-scheduler; copy one there (same "
                           "version as kube-apiserver) or use the scheduler driver")
    return [str(assets.kube_scheduler), f"--config={config}", f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}", "--bind-address=127.0.0.1",
            f"--secure-port={port}", "--v=2"]


def controller_manager_command(assets: Assets, kubeconfig: Path, sa_key: Path, ca: Path,
                               port: int) -> list[str]:
    """Every default controller (namespaces finish deleting, ResourceClaims are made from
    templates and freed, ...). The node lifecycle controller runs too, so a Ready node loses the
    not-ready taint kube-apiserver gives every new Node; nodes without a kubelet get 5 minutes
    before it calls them unreachable (tests' nodes live one test)."""
    if assets.kube_controller_manager is None:
        raise EnvtestError(f"{assets.folder} has no kube-controller-manager; {SETUP_HINT}")
    return [str(assets.kube_controller_manager), f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}", "--bind-address=127.0.0.1",
            f"--secure-port={port}", "--leader-elect=false",
            f"--service-account-private-key-file={sa_key}", f"--root-ca-file={ca}",
            "--use-service-account-credentials=false", "--node-monitor-grace-period=300s",
            "--concurrent-resourceclaim-syncs=20", "--kube-api-qps=500", "--kube-api-burst=1000",
            "--v=1"]


def scheduler_version(assets: Assets) -> str:
    """`kube-scheduler vX.Y.Z`, as benchmarks report what ran."""
    if assets.kube_scheduler is None:
        raise EnvtestError(f"{assets.folder} has no kube-scheduler")
    out = subprocess.run([str(assets.kube_scheduler), "--version"], capture_output=True,
                         text=True, timeout=30).stdout.split()
    return f"kube-scheduler {out[-1] if out else 'unknown'}"


def scheduler_config(config: dict[str, Any], kubeconfig: Path) -> dict[str, Any]:
    """`config` with clientConnection.kubeconfig set to ours (with --config, kube-scheduler
    ignores --kubeconfig) and leader election off unless the config asks for it."""
    if config.get("kind") != "KubeSchedulerConfiguration":
        raise EnvtestError(f"expected a KubeSchedulerConfiguration, got kind "
                           f"{config.get('kind')!r}")
    return {**config,
            "clientConnection": {**(config.get("clientConnection") or {}),
                                 "kubeconfig": str(kubeconfig)},
            "leaderElection": config.get("leaderElection") or {"leaderElect": False}}


def kept_by_reset(kind: str, namespace: str, name: str) -> bool:
    """What reset() leaves alone: the API server's own objects (identity leases, the
    configmaps and secrets it keeps in kube-system)."""
    if kind == "Lease":
        return name.startswith("apiserver-")
    if kind in ("ConfigMap", "Secret"):
        return namespace == "kube-system" or name == "kube-root-ca.crt"
    return False


@dataclass
class Process:
    name: str
    command: list[str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Process:
        with self.log.open("wb") as out:
            self.popen = subprocess.Popen(self.command, stdout=out, stderr=subprocess.STDOUT)
        return self

    def failure(self, why: str) -> EnvtestError:
        tail = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
        return EnvtestError(f"{self.name} {why}\ncommand: {' '.join(self.command)}\n"
                            f"log ({self.log}):\n{tail}")

    def stop(self) -> None:
        if self.popen:
            end_process(self.popen)


def end_process(popen: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 10 s."""
    if popen.poll() is None:
        popen.terminate()
        try:
            popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait()


def _exists(client: Any, res: Any, name: str) -> bool:
    from lightkube import ApiError

    try:
        client.get(res, name)
    except ApiError as exc:
        if exc.status.code == 404:
            return False
        raise
    return True


def _no_verify() -> ssl.SSLContext:
    """For the health endpoints of kube-scheduler and kube-controller-manager, which serve
    with self-signed certificates of their own."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    return context


@dataclass
class ControlPlane:
    assets: Assets
    workdir: Path
    pki: Pki = field(default_factory=make_pki)
    url: str = ""
    version: str = ""
    kubeconfig: Path = field(init=False)
    processes: list[Process] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.kubeconfig = self.workdir / "kubeconfig"

    def start(self, timeout: float = 60.0) -> ControlPlane:
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, timeout: float) -> None:
        files = self.pki.write(self.workdir / "pki")
        sa_key = self.workdir / "pki" / "sa.key"
        sa_key.write_bytes(service_account_key())
        etcd_port, port = free_port(), free_port()
        etcd = self._launch("etcd", etcd_command(self.assets, self.workdir / "etcd", etcd_port,
                                                 free_port()))
        self._wait(etcd, f"http://127.0.0.1:{etcd_port}/health", timeout, None)
        api = self._launch("kube-apiserver", apiserver_command(
            self.assets, files, sa_key, self.workdir / "apiserver-certs", etcd_port, port))
        self.url = f"https://127.0.0.1:{port}"
        self._wait(api, f"{self.url}/readyz", timeout, self._tls())
        write_kubeconfig(self.kubeconfig, self.url, self.pki)
        with urllib.request.urlopen(f"{self.url}/version", context=self._tls()) as r:
            self.version = f"kube-apiserver {json.load(r)['gitVersion']}"
        if self.assets.kube_controller_manager is not None:
            port = free_port()
            kcm = self._launch("kube-controller-manager", controller_manager_command(
                self.assets, self.kubeconfig, sa_key, files["ca.crt"], port))
            self._wait(kcm, f"https://127.0.0.1:{port}/healthz", timeout, _no_verify())

    def start_scheduler(self, config: Path | dict[str, Any], timeout: float = 60.0) -> Process:
        """Start kube-scheduler with a KubeSchedulerConfiguration (a file or its dict), its
        client pointed at this control plane (see scheduler_config)."""
        if isinstance(config, Path):
            config = yaml.safe_load(config.read_text())
        path = self.workdir / "kube-scheduler.yaml"
        path.write_text(yaml.safe_dump(scheduler_config(config, self.kubeconfig)))
        port = free_port()
        proc = self._launch("kube-scheduler", scheduler_command(
            self.assets, self.kubeconfig, path, port))
        self._wait(proc, f"https://127.0.0.1:{port}/healthz", timeout, _no_verify())
        return proc

    def _launch(self, name: str, command: list[str]) -> Process:
        proc = Process(name, command, self.workdir / f"{name}.log").start()
        self.processes.append(proc)
        return proc

    def _tls(self) -> ssl.SSLContext:
        files = self.pki.write(self.workdir / "pki")
        context = ssl.create_default_context(cafile=str(files["ca.crt"]))
        context.load_cert_chain(files["admin.crt"], files["admin.key"])
        return context

    def _wait(self, proc: Process, url: str, timeout: float, tls: ssl.SSLContext | None) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.popen and proc.popen.poll() is not None:
                raise proc.failure(f"exited with code {proc.popen.returncode}")
            try:
                with urllib.request.urlopen(url, timeout=2, context=tls) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise proc.failure(f"was not ready at {url} within {timeout:.0f} s")

    def stop(self) -> None:
        for proc in reversed(self.processes):
            proc.stop()
        self.processes.clear()

    def reset(self) -> None:
        """Delete what tests create, so each test starts from an empty cluster. Namespaces
        stay Terminating on a real server without kube-controller-manager: tests should use
        unique namespace names."""
        from lightkube import ApiError, Client, KubeConfig
        from lightkube.resources.admissionregistration_v1 import (
            MutatingWebhookConfiguration,
            ValidatingWebhookConfiguration,
        )
        from lightkube.resources.coordination_v1 import Lease
        from lightkube.resources.core_v1 import ConfigMap, Event, Namespace, Node, Pod, Secret
        from lightkube.resources.resource_v1 import (
            DeviceClass,
            ResourceClaim,
            ResourceClaimTemplate,
            ResourceSlice,
        )
        from lightkube.types import PatchType

        client = Client(config=KubeConfig.from_file(self.kubeconfig))

        def remove(res: Any, obj: Any, ns: str | None = None) -> None:
            try:
                if obj.metadata.finalizers:  # nobody else would ever remove them here
                    client.patch(res, obj.metadata.name, {"metadata": {"finalizers": None}},
                                 namespace=ns, patch_type=PatchType.MERGE)
                client.delete(res, obj.metadata.name, namespace=ns, grace_period=0)
            except ApiError as exc:  # gone since the list (a controller deleted it)
                if exc.status.code != 404:
                    raise

        for res in (Pod, Event, Lease, ConfigMap, Secret, ResourceClaim, ResourceClaimTemplate):
            for obj in client.list(res, namespace="*"):
                ns = obj.metadata.namespace
                if not kept_by_reset(res.__name__, ns, obj.metadata.name):
                    remove(res, obj, ns)
        for res in (Node, MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
                    ResourceSlice, DeviceClass):
            for obj in client.list(res):
                remove(res, obj)
        going = [ns.metadata.name for ns in client.list(Namespace)
                 if ns.metadata.name not in SYSTEM_NAMESPACES]
        for name in going:
            with contextlib.suppress(ApiError):  # already terminating, or gone meanwhile
                client.delete(Namespace, name)
        # kube-controller-manager's namespace controller empties and removes them; a test that
        # reuses a name must not meet "object is being deleted"
        deadline = time.monotonic() + 60
        while going and time.monotonic() < deadline:
            going = [n for n in going if _exists(client, Namespace, n)]
            time.sleep(0.1)
        if going:
            raise EnvtestError(f"namespaces {going} were still terminating after 60 s; is "
                               "kube-controller-manager running? (see its log in "
                               f"{self.workdir})")

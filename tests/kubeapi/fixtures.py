"""pytest fixtures: one Kubernetes API for a test, in-process or real, behind one interface.
Owns: `kube_api` (a KubeApi: backend name, URL, kubeconfig, lightkube client factories,
kubectl, faults), `raw` (raw.py over it), `kube_control_plane`, and the choice of backend:
the in-process server (default; a fresh one per test), or, when KUBEBUILDER_ASSETS names a
folder with `etcd` and `kube-apiserver`, a real control plane started once per session
(envtest.py) and emptied between tests.
Tests that need faults call `kube_api.need_faults()`: on a real server they skip, with why.
Per-test settings of the in-process server: parametrize `kube_api` indirectly with a dict
(`history`, `bookmark_interval`, `watch_timeout`); a real server ignores them.
Registered from tests/conftest.py. Tests: tests/integration/kubeapi/"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    import httpx2 as httpx
    import lightkube

    from .envtest import ControlPlane
    from .faults import Faults
    from .raw import Raw
    from .server import KubeApiServer

IN_PROCESS = "in-process"


@dataclass
class KubeApi:
    """What a test gets: everything needed to talk to the API, whichever backend runs it."""

    backend: str  # "in-process" or "kube-apiserver vX.Y.Z"
    url: str  # https://127.0.0.1:PORT
    kubeconfig: Path  # admin credentials (system:masters)
    server: KubeApiServer | None = None  # the in-process server, else None
    control_plane: ControlPlane | None = None  # the real one, else None

    @property
    def faults(self) -> Faults | None:
        return self.server.faults if self.server else None

    @property
    def is_real(self) -> bool:
        return self.server is None

    @property
    def kube_scheduler(self) -> Path | None:
        """The real kube-scheduler binary, when KUBEBUILDER_ASSETS has one."""
        return self.control_plane.assets.kube_scheduler if self.control_plane else None

    def need_faults(self) -> Faults:
        """The fault handle; skips the test on a real API server, which cannot inject them."""
        if self.server is None:
            pytest.skip("fault injection needs the in-process API server (a real "
                        "kube-apiserver cannot drop watches or fail requests on demand)")
        return self.server.faults

    def config(self) -> lightkube.KubeConfig:
        from lightkube import KubeConfig

        return KubeConfig.from_file(self.kubeconfig)

    def client(self, **kwargs: Any) -> lightkube.Client:
        from lightkube import Client

        return Client(config=self.config(), **kwargs)

    def async_client(self, **kwargs: Any) -> lightkube.AsyncClient:
        from lightkube import AsyncClient

        return AsyncClient(config=self.config(), **kwargs)

    def http(self) -> httpx.AsyncClient:
        """A raw HTTP client with the admin credentials, for exact status codes and bodies."""
        from lightkube.config.client_adapter import AsyncClient, ConnectionParams

        return AsyncClient(self.config().get(), ConnectionParams())

    def kubectl(self, *args: str, check: bool = True, timeout: float = 30,
                **kwargs: Any) -> subprocess.CompletedProcess[str]:
        """Run the machine's kubectl against this API; raises with its stderr on failure."""
        result = subprocess.run(["kubectl", "--kubeconfig", str(self.kubeconfig), *args],
                                capture_output=True, text=True, timeout=timeout, **kwargs)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}):\n"
                                 f"{result.stderr}")
        return result


@pytest.fixture(scope="session")
def kube_control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[
        ControlPlane | None]:
    """The real control plane for the session, or None (the in-process server is used)."""
    from .envtest import ControlPlane, find_assets

    assets = find_assets(os.environ.get("KUBEBUILDER_ASSETS"))
    if assets is None:
        yield None
        return
    plane = ControlPlane(assets, tmp_path_factory.mktemp("envtest")).start()
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def kube_api(request: pytest.FixtureRequest, kube_control_plane: ControlPlane | None,
             tmp_path: Path) -> Iterator[KubeApi]:
    if kube_control_plane is not None:
        kube_control_plane.reset()
        yield KubeApi(kube_control_plane.version, kube_control_plane.url,
                      kube_control_plane.kubeconfig, control_plane=kube_control_plane)
        return
    from .server import KubeApiServer

    settings = getattr(request, "param", None) or {}
    with KubeApiServer(tmp_path / "kubeapi", **settings) as server:
        yield KubeApi(IN_PROCESS, server.url, server.kubeconfig, server=server)


@pytest.fixture
def raw(kube_api: KubeApi) -> Raw:
    """Plain HTTP calls against `kube_api` (exact status codes, bodies, watch lines)."""
    from .raw import Raw

    return Raw(kube_api)

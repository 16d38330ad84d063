"""pytest fixtures: one Kubernetes API for a test, in-process or real, behind one interface.
Owns: `kube_api` (a KubeApi: backend name, URL, kubeconfig, lightkube client factories,
kubectl, faults), `raw` (raw.py over it), `kube_control_plane`, and the choice of backend.
Every test that asks for `kube_api` runs on each backend there is (ids `[in-process]`,
`[kube-apiserver]`): the in-process server (a fresh one per test) and the real control plane
(envtest.py: etcd, kube-apiserver, kube-controller-manager; started once per session and
emptied between tests). The real one comes from KUBEBUILDER_ASSETS, else from the project's
own build (tools/kube/build.sh, which needs Go); GPUSLICE_KUBE_BACKENDS=in-process|kube-apiserver
runs one backend only. Under CI=true a real tier that cannot start fails, never skips.
`@pytest.mark.kube_backends("kube-apiserver")` keeps a test to the backends it names.
Tests that need faults call `kube_api.need_faults()`: on a real server they skip, with why.
Per-test settings of the in-process server: parametrize `kube_api` indirectly with a dict
(`history`, `bookmark_interval`, `watch_timeout`); a real server ignores them.
Registered from tests/conftest.py. Tests: tests/integration/kubeapi/"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
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
REAL = "kube-apiserver"
BACKENDS = (IN_PROCESS, REAL)
IN_CI = os.environ.get("CI", "") not in ("", "0", "false")


def chosen_backends() -> tuple[tuple[str, ...], str]:
    """The backends this run tests on, and a line saying why (pytest's header shows it)."""
    wanted = os.environ.get("GPUSLICE_KUBE_BACKENDS", "")
    if wanted:
        names = tuple(n.strip() for n in wanted.split(",") if n.strip())
        unknown = set(names) - set(BACKENDS)
        if unknown or not names:
            raise pytest.UsageError(f"GPUSLICE_KUBE_BACKENDS={wanted!r}: use one or both of "
                                    f"{', '.join(BACKENDS)} (comma-separated)")
        return names, f"GPUSLICE_KUBE_BACKENDS={wanted}"
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets:
        return BACKENDS, f"real control plane from KUBEBUILDER_ASSETS={assets}"
    if IN_CI or shutil.which("go"):
        return BACKENDS, "real control plane built by tools/kube/build.sh"
    return (IN_PROCESS,), ("in-process API server only: no KUBEBUILDER_ASSETS and no Go to build "
                           "the real binaries (docs/development.md)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "kube_backends(*names): run a kube_api test only on "
                            f"these backends ({', '.join(BACKENDS)})")
    config.stash[_BACKENDS] = chosen_backends()


def pytest_report_header(config: pytest.Config) -> str:
    names, why = config.stash[_BACKENDS]
    return f"kube_api backends: {', '.join(names)} ({why})"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "kube_api" not in metafunc.fixturenames:
        return
    names, _ = metafunc.config.stash[_BACKENDS]
    marker = metafunc.definition.get_closest_marker("kube_backends")
    if marker is not None:
        names = tuple(n for n in names if n in marker.args)
    if not names:  # every backend the test allows is switched off for this run
        names = marker.args[:1] if marker else (IN_PROCESS,)
        metafunc.parametrize("kube_backend", [pytest.param(
            names[0], marks=pytest.mark.skip(reason=f"needs the {names[0]} backend, not "
                                                     "chosen for this run"))])
        return
    metafunc.parametrize("kube_backend", names)


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


_BACKENDS = pytest.StashKey[tuple[tuple[str, ...], str]]()


_BUILD_FAILED = pytest.StashKey[str]()


def _wants_real(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    return ("kube_control_plane" in getattr(item, "fixturenames", ())
            or (callspec is not None and callspec.params.get("kube_backend") == REAL))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build the real binaries once, before any test runs (so the first build, minutes long,
    counts against no test's timeout), and only when a collected test needs them."""
    from .envtest import EnvtestError, build_assets

    if os.environ.get("KUBEBUILDER_ASSETS") or not any(map(_wants_real, session.items)):
        return
    report = session.config.pluginmanager.get_plugin("terminalreporter")
    if report is not None:
        report.write_line("kube_api: building the real Kubernetes binaries "
                          "(tools/kube/build.sh; a no-op when current, ~7 min the first time)")
    try:
        assets = build_assets(Path(tempfile.mkdtemp(prefix="kube-build-")) / "build.log")
    except EnvtestError as exc:
        session.config.stash[_BUILD_FAILED] = str(exc)
        return
    os.environ["KUBEBUILDER_ASSETS"] = str(assets.folder)  # benchmarks tests start read it


@pytest.fixture(scope="session")
def kube_control_plane(request: pytest.FixtureRequest,
                       tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """The real control plane for the session (KUBEBUILDER_ASSETS, or what
    pytest_collection_finish built). Under CI=true a plane that cannot start fails the test."""
    from .envtest import ControlPlane, EnvtestError, find_assets

    why = request.config.stash.get(_BUILD_FAILED, None)
    try:
        if why is not None:
            raise EnvtestError(why)
        assets = find_assets(os.environ.get("KUBEBUILDER_ASSETS"))
        if assets is None:
            raise EnvtestError("no real control plane: KUBEBUILDER_ASSETS is unset and nothing "
                               "was built (docs/development.md)")
    except EnvtestError as exc:
        if IN_CI:
            pytest.fail(str(exc), pytrace=False)
        pytest.skip(str(exc))
    plane = ControlPlane(assets, tmp_path_factory.mktemp("envtest")).start()
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def kube_api(request: pytest.FixtureRequest, kube_backend: str,
             tmp_path: Path) -> Iterator[KubeApi]:
    if kube_backend == REAL:
        plane: ControlPlane = request.getfixturevalue("kube_control_plane")
        plane.reset()
        yield KubeApi(plane.version, plane.url, plane.kubeconfig, control_plane=plane)
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

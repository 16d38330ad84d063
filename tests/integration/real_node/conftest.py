"""The node tier with the REAL kubelet (tests/kubelet/real.py): kube-apiserver, kube-scheduler
+ `gpuslice scheduler`, `gpuslice webhook`, the kubelet v1.36 against fake-cri, and `gpuslice
node-agent --gpu-backend fake:4`, on this machine.

`tier`: the running Tier for one test (its node started if a test stopped it); the test's pods
are deleted after it. One tier per session (one kubelet per machine: the device plugin
directory is fixed): started by the first test here, stopped (host restored) when the next
test to run lives outside this folder, and at the end of the session in any case.

Needs the real control plane (the `kube_control_plane` session fixture), root, and the
kubelet and fake-cri of tools/kube/build.sh. Where they are missing the tests skip with the
reason; under CI=true they fail instead. GPUSLICE_KUBE_BACKENDS without kube-apiserver skips
them (the run asked for the in-process server only).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kubeapi.fixtures import IN_CI, REAL, chosen_backends

HERE = Path(__file__).resolve().parent


class Slot:
    """The session's one tier, started on demand."""

    def __init__(self) -> None:
        self.tier: Any = None

    def stop(self) -> None:
        if self.tier is not None:
            tier, self.tier = self.tier, None
            tier.stop()


_SLOT = pytest.StashKey[Slot]()


@pytest.fixture(scope="session")
def real_tier_slot() -> Iterator[Slot]:
    slot = Slot()
    try:
        yield slot
    finally:
        slot.stop()


@pytest.fixture
def real_plane(request: pytest.FixtureRequest) -> Any:
    """The real control plane, once this machine can run the real kubelet (else the test
    skips with why; under CI=true it fails)."""
    names, why = chosen_backends()
    if REAL not in names:
        pytest.skip(f"the real kubelet tier needs the kube-apiserver backend ({why})")
    plane = request.getfixturevalue("kube_control_plane")
    from kubelet import real

    problem = real.cannot_run(plane.assets)
    if problem is not None:
        if IN_CI:
            pytest.fail(f"CI is set and {problem}", pytrace=False)
        pytest.skip(problem)
    return plane


@pytest.fixture
def tier(real_tier_slot: Slot, real_plane: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    from kubelet import real

    plane = real_plane
    request.session.stash[_SLOT] = real_tier_slot
    if real_tier_slot.tier is None:
        real_tier_slot.tier = real.Tier(plane).start()
    tier = real_tier_slot.tier
    tier.ensure()
    yield tier
    tier.clean()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """After the last test of this folder (in whatever order they run), stop the tier: its
    kube-scheduler and webhook must not meet other tests' pods, nor its kubelet outlive us."""
    result = yield
    if nextitem is None or Path(nextitem.path).resolve().parent != HERE:
        slot = item.session.stash.get(_SLOT, None)
        if slot is not None:
            slot.stop()
    return result

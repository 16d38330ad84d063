"""The REAL kubelet changes the host (sysctls, a bind mount of its root dir, /var/lib/kubelet,
/var/log/containers): the harness (tests/kubelet/real.py) must leave the machine as it found
it when the node stops normally, when it is interrupted (Ctrl-C, SIGTERM), and, for a run
killed outright, at the next harness's start (from the journal the dead run left)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from kubelet import real


def wait_gone(pids: list[int], timeout: float = 15.0) -> list[int]:
    """The pids still alive after `timeout` (zombies count as gone)."""
    deadline = time.monotonic() + timeout
    while True:
        alive = []
        for pid in pids:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state != "Z":
                alive.append(pid)
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


def changed_by_the_kubelet(pristine: real.HostState, node_work: str) -> list[str]:
    """What a running node changed, checked to include what the kubelet always does."""
    during = real.HostState.capture()
    changed = pristine.differences(during)
    assert f"mount {node_work}/root: new" in changed, changed
    assert any(line.startswith("/var/lib/kubelet") for line in changed), changed
    assert {k: during.sysctls.get(k) for k in real.KUBELET_SYSCTLS} == real.KUBELET_SYSCTLS
    return changed


def test_stopping_the_node_restores_the_host_and_ends_its_processes_cleanly(tier):
    node = tier.node
    pristine = node.guard.before
    assert pristine is not None
    changed_by_the_kubelet(pristine, str(node.work))
    pids = [p.popen.pid for p in (node.cri, node.kubelet, node.agent)]
    restored = node.stop()  # the next test's fixture starts a new one
    assert pristine.differences(real.HostState.capture()) == []
    assert wait_gone(pids, 0) == []
    assert node.exit_codes == {"node-agent": 0, "kubelet": 0, "fake-cri": 0}
    assert f"umount {node.root_dir}" in restored
    for name, value in pristine.sysctls.items():
        if value != real.KUBELET_SYSCTLS[name]:
            assert f"sysctl {name.replace('/', '.')}={value}" in restored
    assert not node.work.exists()
    assert not real.GUARD_DIR.exists(), "the journal and lock are gone too"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_harness_interrupted_restores_the_host(tier, sig):
    tier.node.stop()
    pristine = real.HostState.capture()
    plane = tier.plane
    with real.Held(plane.kubeconfig, plane.assets.folder) as held:
        ready = held.line()
        changed_by_the_kubelet(pristine, ready["work"])
        held.proc.send_signal(sig)
        stopped = held.line(60)
        assert held.proc.wait(30) == 130
    assert pristine.differences(real.HostState.capture()) == []
    assert stopped["exit_codes"] == {"node-agent": 0, "kubelet": 0, "fake-cri": 0}
    assert wait_gone(list(ready["pids"].values()), 0) == []
    assert not Path(ready["work"]).exists()


def test_a_harness_killed_outright_is_cleaned_up_by_the_next_one(tier):
    tier.node.stop()
    pristine = real.HostState.capture()
    plane = tier.plane
    with real.Held(plane.kubeconfig, plane.assets.folder) as held:
        ready = held.line()
        os.kill(held.proc.pid, signal.SIGKILL)
        held.proc.wait(10)
    # its children got SIGTERM from the kernel (PR_SET_PDEATHSIG) and ended ...
    assert wait_gone(list(ready["pids"].values())) == []
    # ... but nobody restored the host: the journal says what to undo
    left = pristine.differences(real.HostState.capture())
    assert left and (real.GUARD_DIR / "journal.json").exists()
    guard = real.HostGuard(Path(ready["work"]))
    guard.acquire()
    try:
        assert f"umount {ready['work']}/root" in guard.recovered
        assert f"removed {ready['work']}" in guard.recovered
    finally:
        guard.release()
    assert pristine.differences(real.HostState.capture()) == []
    assert not real.GUARD_DIR.exists()

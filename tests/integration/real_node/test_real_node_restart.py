"""A restart of the REAL kubelet: it removes every plugin socket and serves a new kubelet.sock;
the node agent must notice, serve again and register within 5 s of the kubelet being back, the
Node's GPU resources must come back, a pod running across the restart keeps running, and a new
pod is admitted (through the agent's Allocate) and runs."""

from __future__ import annotations

import threading
import time
from typing import Any

from lightkube.resources.core_v1 import Pod

from gpuslice.kube.client import dict_view
from kubelet import real

LIMITS = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1024", "nvidia.com/gpucores": "10"}


class Timeline(threading.Thread):
    """Polls, from the moment the kubelet stops: the kubelet's registration socket, the
    agent's registration counters and the Node's allocatable nvidia.com/gpu; keeps when each
    changed (time.monotonic())."""

    def __init__(self, node: real.RealNode) -> None:
        super().__init__(daemon=True)
        self.node = node
        self.old_socket = node.kubelet_socket_id()
        self.registrations0 = self._registrations()
        self.full = int(node.node()["status"]["allocatable"]["nvidia.com/gpu"])  # type: ignore[index]
        self.socket_back: float | None = None
        self.registered: float | None = None
        self.allocatable: list[tuple[float, int]] = []  # (when, value) at each change
        self.stopping = threading.Event()

    def _registrations(self) -> dict[str, float]:
        m = self.node.agent_metrics()
        return {r: real.metric(m, "gpuslice_kubelet_registrations_total", resource=r)
                for r in real.GPU_RESOURCES}

    def run(self) -> None:
        last_api = 0.0
        while not self.stopping.is_set():
            now = time.monotonic()
            sid = self.node.kubelet_socket_id()
            if self.socket_back is None and sid not in (None, self.old_socket):
                self.socket_back = now
            if self.socket_back is not None and self.registered is None:
                got = self._registrations()
                if all(got[r] > self.registrations0[r] for r in got):
                    self.registered = time.monotonic()
            if now - last_api > 0.1:
                last_api = now
                n = self.node.node()
                value = int(((n or {}).get("status") or {}).get("allocatable", {})
                            .get("nvidia.com/gpu", "0"))
                if not self.allocatable or self.allocatable[-1][1] != value:
                    self.allocatable.append((time.monotonic(), value))
            time.sleep(0.01)


def test_a_kubelet_restart_has_the_agent_register_again_and_a_new_pod_run(tier):
    client, ns, node = tier.client(), tier.namespace, tier.node
    client.create(dict_view(Pod)(real.pod_body("before", ns, LIMITS)))
    before = tier.wait_pods(["before"])["before"]
    timeline = Timeline(node)
    timeline.start()
    try:
        t_stop = time.monotonic()
        kubelet_exit = node.stop_kubelet()
        t_stopped = time.monotonic()
        time.sleep(1.0)  # the agent sees the kubelet gone (its socket stays or goes)
        t_start = time.monotonic()
        node.start_kubelet()
        t_healthy = time.monotonic()
        # until the agent registered, the kubelet had time for a few status updates (1 s
        # apart), and the Node offers every device again (or 20 s)
        deadline = time.monotonic() + 20
        while (timeline.registered is None or time.monotonic() - t_start < 4 or
               timeline.allocatable[-1][1] != timeline.full) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        timeline.stopping.set()
        timeline.join(5)
    assert timeline.socket_back is not None, "the new kubelet served no new kubelet.sock"
    assert timeline.registered is not None, "the agent did not register again within 20 s"
    figures: dict[str, Any] = {
        "kubelet_exit_code": kubelet_exit,
        "kubelet_stop_s": round(t_stopped - t_stop, 3),
        "kubelet_start_to_socket_s": round(timeline.socket_back - t_start, 3),
        "kubelet_start_to_healthz_s": round(t_healthy - t_start, 3),
        "socket_to_agent_registered_s": round(timeline.registered - timeline.socket_back, 3),
        "allocatable_nvidia_gpu": [(round(t - t_start, 3), v) for t, v in timeline.allocatable],
    }
    # the restarted kubelet offers none of the checkpointed devices until their plugin is back;
    # when the agent registers before the kubelet's first status update the Node never shows it
    dropped = [t for t, v in timeline.allocatable if v != timeline.full and t > t_start]
    back = [t for t, v in timeline.allocatable if v == timeline.full and dropped and
            t > dropped[0]]
    if back:
        figures["kubelet_start_to_allocatable_back_s"] = round(back[0] - t_start, 3)
    real.report("kubelet_restart", figures)
    assert timeline.registered - timeline.socket_back < 5.0, figures
    assert timeline.allocatable[-1][1] == timeline.full, \
        f"the Node's allocatable nvidia.com/gpu did not come back: {figures}"
    assert not dropped or back, figures
    # the pod that ran across the restart runs on (fake-cri kept its sandbox), same devices
    again = dict(client.get(dict_view(Pod), "before", namespace=ns))
    assert again["status"]["phase"] == "Running"
    assert again["metadata"]["uid"] == before["metadata"]["uid"]
    assert any(e["pod_uid"] == before["metadata"]["uid"] for e in node.checkpoint())
    # and a new pod goes through the new kubelet's admission and the agent's Allocate
    client.create(dict_view(Pod)(real.pod_body("after", ns, LIMITS)))
    after = tier.wait_pods(["after"])["after"]
    entry = next(e for e in node.checkpoint() if e["pod_uid"] == after["metadata"]["uid"])
    assert entry["envs"]["CUDA_DEVICE_MEMORY_LIMIT_0"] == "1024m"

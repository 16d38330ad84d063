"""`gpuslice scheduler`'s early listener: the verbs' port, taken before anything else."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from gpuslice.errors import EnvironmentProblem
from gpuslice.scheduler.command import listen


def test_a_taken_port_is_an_environment_problem_with_the_fix():
    with listen("127.0.0.1", 0) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(EnvironmentProblem, match=f"cannot listen on 127.0.0.1:{port}: .*"
                                                     r"free the port or choose another \(--port\)"):
            listen("127.0.0.1", port)


def test_an_ipv6_address_listens_on_ipv6():
    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    try:
        sock = listen("::1", 0)
    except EnvironmentProblem as exc:
        pytest.skip(f"no IPv6 loopback here: {exc}")
    with sock:
        assert sock.family == socket.AF_INET6
        with socket.create_connection(("::1", sock.getsockname()[1]), timeout=2):
            pass


def test_the_extender_loads_no_admission_dra_or_node_code():
    """A restarted extender serves after its imports, so each one is paid by every pod
    kube-scheduler holds meanwhile (docs/benchmarks.md, "What a restart costs")."""
    code = ("import sys; from gpuslice.cli import main; from gpuslice.scheduler import command, "
            "service, config; from gpuslice import ops; from gpuslice.kube import client; "
            "print(sorted(m for m in sys.modules if m.startswith(('gpuslice.webhook', "
            "'gpuslice.dra', 'gpuslice.node'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"

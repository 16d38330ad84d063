"""`gpuslice scheduler`: load the config, listen, then serve the extender until stopped.

Owns: start-up order. The verbs' port listens before the heavy imports and the caches' sync,
so a restarted extender's first seconds queue kube-scheduler's calls in the socket's backlog,
and the verbs then wait for the sync (app.py, START_WAIT_S): kube-scheduler waits a moment
where a refused connection would fail the pod (a FailedScheduling event, a status write and a
back-off of up to 10 s for each pod tried meanwhile).
Failure: ConfigError (bad config, exit 1) or EnvironmentProblem (port taken, no API access:
exit 3), each saying how to fix it, before anything is served.
Tests: tests/unit/scheduler/test_command.py, tests/integration/scheduler/test_extender_restart.py
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from gpuslice.errors import EnvironmentProblem
from gpuslice.scheduler import config

__all__ = ["listen", "serve"]

BACKLOG = 1024  # kube-scheduler's calls that wait for the start: a few dozen at most


def listen(address: str, port: int) -> socket.socket:
    """A socket listening on address:port (EnvironmentProblem if it cannot)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET  # "::1", "::"
    try:
        return socket.create_server((address, port), family=family, backlog=BACKLOG)
    except OSError as exc:
        raise EnvironmentProblem(f"cannot listen on {address}:{port}: {exc.strerror or exc}; "
                                 "free the port or choose another (--port)") from exc


def serve(config_path: str | None, **flags: Any) -> None:
    cfg = config.load(config_path, **flags)
    sock = listen(cfg.address, cfg.port)
    from gpuslice import ops
    from gpuslice.kube.client import make_client
    from gpuslice.scheduler.service import Extender

    ops.setup_logging(cfg.log_level)
    client = make_client(cfg.kubeconfig, timeout_s=cfg.api_timeout_seconds)

    async def main() -> None:
        try:
            await Extender(cfg, client).run(sock)
        finally:
            await client.close()

    asyncio.run(main())

"""Run the in-process API server by hand: `cd tests && python -m kubeapi [--port N]`.
Prints the URL and the admin kubeconfig's path, then serves until Ctrl-C; use it with
kubectl (`kubectl --kubeconfig PATH get pods`) or any client while developing. server.spawn()
runs it this way, in its own process, for benchmarks (no GIL shared with the client)."""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import threading
from pathlib import Path

from .server import KubeApiServer


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m kubeapi", description=__doc__)
    parser.add_argument("--port", type=int, default=0, help="HTTPS port (default: a free one)")
    parser.add_argument("--dir", type=Path, help="where to write the kubeconfig and certificates"
                        " (default: a temporary folder, removed on exit)")
    parser.add_argument("--history", type=int, default=1000,
                        help="writes kept for watches; older resourceVersions get 410")
    parser.add_argument("--ready-file", type=Path, help="once serving, write the URLs and the "
                        "kubeconfig path there as JSON (what server.spawn() waits for)")
    args = parser.parse_args()
    # The store keeps what it served (the watch history), so the heap only grows and full
    # collections would walk all of it again and again (~5% of a benchmark's CPU); stored
    # objects are acyclic JSON, freed by reference counting. Young collections stay frequent
    # enough for the event loop's short-lived cycles.
    gc.set_threshold(50_000, 20, 1000)
    with KubeApiServer(args.dir, history=args.history, https_port=args.port) as server:
        if args.ready_file:
            ready = {"url": server.url, "http_url": server.http_url,
                     "kubeconfig": str(server.kubeconfig)}
            args.ready_file.with_suffix(".tmp").write_text(json.dumps(ready))
            args.ready_file.with_suffix(".tmp").rename(args.ready_file)
        print(f"API server: {server.url} (plain HTTP: {server.http_url})")
        print(f"kubeconfig: {server.kubeconfig}")
        print(f"try: kubectl --kubeconfig {server.kubeconfig} get namespaces")
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()

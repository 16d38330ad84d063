"""Run the worked demo of docs/demo.md by hand: every pod of examples/pods/ goes through the
admission webhook, the scheduler extender (called by a kube-scheduler driver) and the node agent
(called by a kubelet emulator, 2 fake GPUs), against an in-process Kubernetes API server.
No cluster, GPU or container engine needed; needs a source checkout with the dev extra
(`pip install -e ".[dev]"`) and kubectl on PATH.

    python examples/demo.py              # each step, for a reader
    python examples/demo.py --markdown   # the blocks of docs/demo.md
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))

from demo_setup import demo, render

from kubeapi.fixtures import IN_PROCESS, KubeApi
from kubeapi.server import KubeApiServer

STEPS = {"kubectl": "you create the pod",
         "webhook": "the admission webhook's JSON Patch, applied by the API server",
         "extender": "the extender binds it and records the GPUs it chose",
         "node-agent": "the node agent answers the kubelet's Allocate for each container"}


async def main(markdown: bool) -> None:
    with tempfile.TemporaryDirectory() as folder, KubeApiServer(Path(folder)) as server:
        api = KubeApi(IN_PROCESS, server.url, server.kubeconfig, server=server)
        async with demo(api) as (cluster, trips):
            blocks = render(trips, str(cluster.node.state))
    for name, text in blocks.items():
        if markdown:
            print(f"<!-- demo: {name} -->\n```text\n{text}\n```\n")
        else:
            file, step = name.rsplit(" ", 1)
            print(f"== {file}: {STEPS[step]}\n{text}\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--markdown", action="store_true", help="print docs/demo.md's blocks")
    logging.disable(logging.WARNING)  # the services' own logs are not the demo
    asyncio.run(main(parser.parse_args().markdown))

"""Regenerate the checked-in gRPC code of the kubelet DRA plugin and plugin registration APIs.

`python3 -m gpuslice.dra.proto.generate [OUT_DIR]` (default: this directory); the same
generator as the device plugin's (gpuslice.node.proto.generate). Test:
tests/unit/test_generated_protos_are_current.py regenerates into a temporary folder and compares.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gpuslice.node.proto import generate as node_generate

HERE = Path(__file__).resolve().parent
PROTOS = ("dra.proto", "pluginregistration.proto")


def generate(out: Path) -> list[Path]:
    return node_generate.generate(out, HERE, PROTOS)


if __name__ == "__main__":
    for p in generate(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE):
        print(p)

"""The checked-in gRPC code of every proto package is what its .proto files generate."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest


@pytest.mark.parametrize("package", ["gpuslice.node.proto", "gpuslice.dra.proto"])
def test_regenerating_gives_byte_identical_files(package, tmp_path):
    pytest.importorskip("grpc_tools", reason="grpcio-tools (dev dependency) is not installed")
    generate = importlib.import_module(f"{package}.generate").generate
    checked_in = Path(importlib.import_module(package).__file__).parent

    made = generate(tmp_path)
    assert len(made) == 4
    for f in made:
        assert f.read_bytes() == (checked_in / f.name).read_bytes(), (
            f"{f.name} is stale: run python3 -m {package}.generate and commit")

#!/usr/bin/env bash
# The wheels a bare GPU machine lacks, at the versions in constraints.txt, into .whl/ (the GPU
# machine has no network and Python 3.12: carry .whl there, then
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
#   export PYTHONPATH=/tmp/site:src).
# What the device image already has (torch, aiohttp, click, rich, grpcio of another version...)
# is listed in the device docs; these are the rest, or the versions our generated code needs.
# usage: benchmarks/fetch_wheels.sh [DIR]   (default .whl)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEST=${1:-$ROOT/.whl}
NEEDED=(msgspec lightkube lightkube-models httpx2 httpcore2 truststore pytest-asyncio grpcio
        protobuf cryptography cffi pycparser)
pins=()
for name in "${NEEDED[@]}"; do
  pin=$(grep -i "^${name}==" "$ROOT/constraints.txt") || { echo "no pin for $name in constraints.txt" >&2; exit 1; }
  pins+=("$pin")
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$DEST" "${pins[@]}"
ls "$DEST"

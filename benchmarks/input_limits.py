"""Bounded work on hostile simulator input: time and peak memory of `gpuslice simulate` on a
YAML alias bomb ("billion laughs") and on a trace line with a 5,000-digit number.

Each case runs the real CLI in a child process (the gpuslice on PYTHONPATH or installed) and
prints wall seconds, the child's peak RSS, its exit code and its first stderr line.
Usage: python3 benchmarks/input_limits.py [--levels 9] [--src PATH_TO_SRC]
Results: docs/benchmarks.md, "Hostile input".
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "examples" / "cluster.yaml"


def bomb(levels: int) -> str:
    """One job whose GPU count nests `levels` lists of 9 aliases: 9**levels values."""
    anchors = "&a0 [x, x, x, x, x, x, x, x, x]"
    for i in range(1, levels):
        anchors = f"&a{i} [{anchors}, {', '.join([f'*a{i - 1}'] * 8)}]"
    return ("- arrival: 0\n  duration: 1\n  pod: {spec: {containers: [{name: a, resources: "
            f"{{limits: {{nvidia.com/gpu: {anchors}}}}}}}]}}}}\n")


def long_number(digits: int) -> str:
    pod = {"spec": {"containers": [{"name": "a", "resources": {"limits": {
        "nvidia.com/gpu": 123456789}}}]}}
    line = json.dumps({"arrival": 0, "duration": 1, "pod": pod})
    return line.replace("123456789", "1" * digits) + "\n"


def measure(trace: Path, src: str | None) -> tuple[float, int, int, str]:
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = src
    argv = [sys.executable, "-c", "import sys; from gpuslice.cli import main; sys.exit(main())",
            "simulate", "--cluster", str(CLUSTER), "--trace", str(trace), "--no-progress"]
    with tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak RSS
        seconds = time.perf_counter() - start
        err.seek(0)
        lines = err.read().strip().splitlines()
    return seconds, usage.ru_maxrss, os.waitstatus_to_exitcode(status), (lines or [""])[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--levels", type=int, default=9, help="alias nesting (9**levels values)")
    parser.add_argument("--src", help="PYTHONPATH for the gpuslice to measure (default: as is)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cases = {"alias bomb": (Path(tmp) / "bomb.yaml", bomb(args.levels)),
                 "5,000-digit number": (Path(tmp) / "long.jsonl", long_number(5000))}
        for name, (path, text) in cases.items():
            path.write_text(text)
            seconds, peak, code, line = measure(path, args.src)
            print(f"{name} ({len(text):,} bytes): {seconds:.2f} s, peak RSS {peak / 1024:.0f} MiB, "
                  f"exit {code}: {line[:160]}")


if __name__ == "__main__":
    main()

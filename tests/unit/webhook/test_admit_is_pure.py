"""admit.py and review.py are pure (STYLE.md: the decision could run inside a simulation): they
import with every edge library blocked."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PROGRAM = textwrap.dedent("""
    import importlib.abc, sys

    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {blocked!r}:
                raise ImportError(f"edge library imported: {{name}}")
            return None

    sys.meta_path.insert(0, Blocker())
    import gpuslice.webhook.admit, gpuslice.webhook.review
    print("imported")
""")


def run(blocked: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", PROGRAM.format(blocked=set(blocked))],
                          capture_output=True, text=True, timeout=60, check=False)


def test_the_decision_and_the_wire_import_without_edge_libraries():
    done = run(("aiohttp", "lightkube", "grpc", "pynvml", "prometheus_client", "cryptography"))
    assert done.returncode == 0 and "imported" in done.stdout, done.stderr


def test_the_blocker_really_blocks():
    done = run(("msgspec",))
    assert done.returncode != 0 and "edge library imported: msgspec" in done.stderr

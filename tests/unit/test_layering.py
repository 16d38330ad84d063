"""The pure core imports with every edge library blocked (DESIGN §2: a pure core, thin edges)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

BLOCKED = ("aiohttp", "lightkube", "grpc", "pynvml", "kopf", "kubernetes")
CORE = ("gpuslice.model", "gpuslice.quantity", "gpuslice.dialects", "gpuslice.codec",
        "gpuslice.errors", "gpuslice.handoff", "gpuslice.dra.claims", "gpuslice.dra.slices")
PACKAGES = ("gpuslice.allocator", "gpuslice.simulate")

PROGRAM = textwrap.dedent("""
    import importlib, importlib.abc, pkgutil, sys

    BLOCKED = {blocked!r}

    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"layering: the pure core imported {{name}}")
            return None

    sys.meta_path.insert(0, Blocker())
    for name in {core!r}:
        importlib.import_module(name)
    seen = []
    for name in {packages!r}:
        package = importlib.import_module(name)
        seen.append(name)
        for info in pkgutil.walk_packages(package.__path__, name + "."):
            importlib.import_module(info.name)
            seen.append(info.name)
    leaked = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    assert not leaked, leaked
    print("\\n".join(seen))
""")


def test_the_core_and_its_pure_packages_import_with_edge_libraries_blocked():
    program = PROGRAM.format(blocked=BLOCKED, core=CORE, packages=PACKAGES)
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, f"a core module imports an edge library:\n{done.stderr}"
    assert "gpuslice.allocator" in done.stdout.split(), "the walk really covered allocator/"


def test_the_blocker_really_blocks():
    program = PROGRAM.format(blocked=("msgspec",), core=("gpuslice.codec",), packages=())
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode != 0 and "layering: the pure core imported msgspec" in done.stderr, (
        "codec imports msgspec, so blocking it must fail: proves the finder is consulted")

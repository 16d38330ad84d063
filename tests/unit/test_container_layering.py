"""The device-plugin path (node/) and the DRA path (dra/) are edges on container/: neither
imports the other, except the node agent that runs both (agent.py) and its settings (the DRA
driver's name). container/'s pure modules import no edge library."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import gpuslice

SRC = Path(gpuslice.__file__).parent
NODE_MAY_IMPORT_DRA = {"agent.py", "settings.py"}


def imported(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def importers(package: str, target: str) -> set[str]:
    return {p.name for p in (SRC / package).glob("*.py")
            if any(m == target or m.startswith(target + ".") for m in imported(p))}


def test_dra_never_imports_the_device_plugin_path():
    assert importers("dra", "gpuslice.node") == set()


def test_the_device_plugin_path_imports_dra_only_where_the_agent_runs_both():
    assert importers("node", "gpuslice.dra") <= NODE_MAY_IMPORT_DRA


def test_container_imports_neither_path():
    assert importers("container", "gpuslice.node") == set()
    assert importers("container", "gpuslice.dra") == set()


def test_the_walk_sees_imports():
    """The check above could pass by reading nothing: the DRA plugin does import container/."""
    assert "plugin.py" in importers("dra", "gpuslice.container")


def test_the_pure_modules_of_both_paths_import_no_edge_library():
    program = ("import sys\nimport gpuslice.container.edits, gpuslice.container.limits, "
               "gpuslice.dra.fit, gpuslice.webhook.dra\n"
               "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
               "('grpc', 'lightkube', 'aiohttp', 'pynvml'))\nassert not bad, bad\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr

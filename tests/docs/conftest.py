"""The sandbox the docs tests run commands in: a copy of the checkout's tracked files and a fresh
virtual environment, on a machine without CUDA headers (CUDA_HOME=/nonexistent), as a newcomer's
laptop. pip runs offline there (no build isolation, no dependencies: they come from the
environment the tests run in), so `pip install .` is the real build without the network."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A copy of the checkout's tracked files and a virtual environment that sees the installed
    dependencies, with gpuslice installed from the copy (the laptop case: no CUDA headers)."""
    base = tmp_path_factory.mktemp("docs")
    tree = base / "gpuslice"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, tree / name)
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                    str(venv)], check=True)
    env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
           "VIRTUAL_ENV": str(venv), "CUDA_HOME": "/nonexistent", "PIP_NO_BUILD_ISOLATION": "0",
           "PIP_NO_DEPS": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    for k in ("CUDA_INCLUDE", "GPUSLICE_LIBRARY", "PYTHONPATH", "FORCE_COLOR", "NO_COLOR",
              "COLUMNS", "LINES", "TTY_COMPATIBLE"):  # the table as a pipe gets it, 80 wide
        env.pop(k, None)
    subprocess.run(["python3", "-m", "pip", "install", "-q", "."], cwd=tree, env=env, check=True)
    return tree, env

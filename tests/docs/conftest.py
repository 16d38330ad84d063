"""The sandbox the docs tests run commands in: a copy of the checkout's tracked files and a fresh
virtual environment, on a machine without a CUDA toolkit (CUDA_HOME=/nonexistent), as a newcomer's
laptop. pip runs offline there (no build isolation, no dependencies: they come from the
environment the tests run in, which the dev extra gave the build requirements: setuptools and
nvidia-cuda-runtime's cuda.h), so `pip install .` is the real build, library included, without the
network.

That environment is the one running pytest (sys.prefix), which need not be the interpreter's base:
run from a virtual environment, `python -m venv --system-site-packages` would hand the sandbox
the BASE interpreter's packages (an old setuptools, no dependencies) instead. So the sandbox venv
is made without them, and a .pth file adds the running environment's site directories to it."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def see_the_running_environment() -> str:
    """A .pth file's text: each site directory of this environment (with the user site where this
    environment reads it), after the sandbox's own, and with their .pth files processed
    (site.addsitedir, as --system-site-packages would for the base's)."""
    dirs = [*site.getsitepackages()]
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return "".join(f"import site; site.addsitedir({d!r})\n" for d in dirs if Path(d).is_dir())


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
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    own = subprocess.run([venv / "bin" / "python3", "-c",
                          "import sysconfig; print(sysconfig.get_path('purelib'))"],
                         capture_output=True, text=True, check=True).stdout.strip()
    (Path(own) / "_docs_tests_running_env.pth").write_text(see_the_running_environment())
    env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
           "VIRTUAL_ENV": str(venv), "CUDA_HOME": "/nonexistent", "PIP_NO_BUILD_ISOLATION": "0",
           "PIP_NO_DEPS": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    for k in ("CUDA_INCLUDE", "GPUSLICE_LIBRARY", "PYTHONPATH", "FORCE_COLOR", "NO_COLOR",
              "COLUMNS", "LINES", "TTY_COMPATIBLE"):  # the table as a pipe gets it, 80 wide
        env.pop(k, None)
    subprocess.run(["python3", "-m", "pip", "install", "-q", "."], cwd=tree, env=env, check=True)
    return tree, env

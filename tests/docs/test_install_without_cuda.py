"""docs/install.md's laptop case: without a CUDA toolkit (CUDA_HOME=/nonexistent) and without the
network, `pip install .` still builds libgpuslice.so, from the cuda.h of the PyPI package
nvidia-cuda-runtime (a build requirement; here, offline, the dev environment's). Where no C
compiler is, the install succeeds all the same, says why in one line, and every command that needs
the library explains its absence (exit 3) instead of hiding it."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # pip installs and whole simulations: about a minute

ROOT = Path(__file__).resolve().parents[2]


def run(sandbox: tuple[Path, dict[str, str]], *argv: str,
        **env: str) -> subprocess.CompletedProcess[str]:
    tree, base = sandbox
    return subprocess.run(argv, cwd=tree, env={**base, **env}, capture_output=True, text=True,
                          timeout=300)


def pypi_include() -> Path | None:
    """nvidia-cuda-runtime's include/ in this environment (native/cuda_headers.py's rule)."""
    spec = importlib.util.spec_from_file_location("_cuda_headers", ROOT / "native/cuda_headers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found: Path | None = module.pypi_include()
    return found


def test_the_install_builds_the_library_from_the_pypi_header(
        sandbox: tuple[Path, dict[str, str]]) -> None:
    tree, env = sandbox
    where = run(sandbox, "python3", "-c", "import gpuslice, pathlib; "
                "print(pathlib.Path(gpuslice.__file__).parent / '_native')")
    native = Path(where.stdout.strip())
    assert str(native).startswith(env["VIRTUAL_ENV"]), "the sandbox's own install"
    assert sorted(p.name for p in native.iterdir()) == ["libgpuslice.so"]
    shim = run(sandbox, "gpuslice", "shim", "--path")
    assert shim.returncode == 0, shim.stderr
    assert shim.stdout.strip() == str(native / "libgpuslice.so")
    # the compiler line of that build (native/Makefile's stamp) names the PyPI package's headers
    inc = pypi_include()
    assert inc is not None, "the dev extra installs nvidia-cuda-runtime"
    assert f"-I{inc} " in (tree / "native" / "build" / "compiler.txt").read_text() + " "


def test_without_a_c_compiler_the_install_holds_the_reason_instead_of_the_library(
        sandbox: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    tools = tmp_path / "bin"  # what PATH offers: the sandbox's python3 and make, no cc
    tools.mkdir()
    make = shutil.which("make")
    assert make is not None
    (tools / "make").symlink_to(make)
    target = tmp_path / "site"
    path = f"{sandbox[1]['VIRTUAL_ENV']}/bin{os.pathsep}{tools}"
    got = run(sandbox, "python3", "-m", "pip", "install", "-v", "--target", str(target), ".",
              PATH=path)
    assert got.returncode == 0, got.stdout + got.stderr
    notes = [line.strip() for line in (got.stdout + got.stderr).splitlines()
             if "gpuslice: libgpuslice.so not built" in line]
    assert notes == ["gpuslice: libgpuslice.so not built: no `cc` on PATH; everything else works; "
                     "to build it: `make -C native` (make, a C compiler, and cuda.h from "
                     "$CUDA_HOME or `pip install nvidia-cuda-runtime`), then reinstall (an "
                     "editable install finds native/build/ at once)"]
    native = target / "gpuslice" / "_native"
    assert sorted(p.name for p in native.iterdir()) == ["NOT-BUILT.txt"]

    shim = run(sandbox, "python3", "-c", "import sys; from gpuslice.cli import main; "
               "sys.exit(main())", "shim", "--path", PYTHONPATH=str(target))
    assert shim.returncode == 3, shim.stdout + shim.stderr
    (line,) = shim.stderr.splitlines()
    assert re.fullmatch(  # the message docs/install.md shows
        r"gpuslice: error: libgpuslice.so was not built when gpuslice was installed \(no `cc` on "
        r"PATH\); build it with `make -C native` \(a C compiler; cuda.h from \$CUDA_HOME or "
        r"`pip install nvidia-cuda-runtime`\) in a checkout and "
        r"reinstall, or set GPUSLICE_LIBRARY to the built file", line), line

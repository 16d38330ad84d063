"""Build hook: compile native/ (libgpuslice.so) where it can be built and ship it in the package.

Two builds (docs/install.md "What `pip install` builds"):
- plain (`pip install .`, `pip install -e .`): the host `cc`, so the library needs this machine's
  glibc or newer. cuda.h comes from native/cuda_headers.py's rule: `$CUDA_INCLUDE`, else
  `$CUDA_HOME/include` (default /usr/local/cuda) where it holds cuda.h, else the PyPI package
  nvidia-cuda-runtime, a build requirement (pyproject.toml), so no CUDA toolkit is needed. Where
  `make`/`cc` (or the headers) are missing, the library is skipped with one line saying how to
  build it later; everything pure Python (simulator, control plane) installs regardless.
- release (`GPUSLICE_RELEASE=1`): `zig cc -target x86_64-linux-gnu.2.17` (the ziglang package
  must be installed) for a manylinux2014 wheel; anything missing is an error, never a skip.
The wheel copies the library into gpuslice/_native/; an editable install leaves it in
native/build/, where gpuslice.shim.library_path finds it. Metadata lives in pyproject.toml.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

try:  # setuptools >= 70.1 ships bdist_wheel; older ones use the wheel package's
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # pragma: no cover
    try:
        from wheel.bdist_wheel import bdist_wheel  # type: ignore[no-redef]
    except ImportError:  # no wheel support at all (sdist / editable metadata only)
        bdist_wheel = None  # type: ignore[assignment,misc]

ROOT = Path(__file__).resolve().parent
RELEASE = os.environ.get("GPUSLICE_RELEASE", "") not in ("", "0")
SKIPPED_NOTE = "NOT-BUILT.txt"  # shipped instead of the library: why (gpuslice.shim reads it)


def _cuda_headers() -> ModuleType:
    """native/cuda_headers.py, loaded by path: gpuslice is not installed while this runs, and
    the Makefiles and tests/native/harness.py share that file's lookup rule."""
    spec = importlib.util.spec_from_file_location("_gpuslice_cuda_headers",
                                                  ROOT / "native" / "cuda_headers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def missing_tools() -> tuple[Path | None, str | None]:
    """(the directory of cuda.h, why the library cannot be built here: None when it can)."""
    inc, no_headers = _cuda_headers().find()
    if inc is None:
        return None, no_headers
    if RELEASE and importlib.util.find_spec("ziglang") is None:
        return inc, "GPUSLICE_RELEASE=1 needs the ziglang package (pip install ziglang)"
    for tool in ("make", os.environ.get("CC") or "cc"):
        if not RELEASE and shutil.which(tool) is None:
            return inc, f"no `{tool}` on PATH"
    return inc, None


class BuildWithNative(build_py):
    """build_py + `make -C native`; the wheel gets the library in gpuslice/_native/."""

    def run(self) -> None:
        super().run()
        editable = getattr(self, "editable_mode", False)
        # where gpuslice.shim looks: the wheel's package, or the checkout's for an editable install
        target = (ROOT / "src" if editable else Path(self.build_lib)) / "gpuslice" / "_native"
        target.mkdir(parents=True, exist_ok=True)
        for stale in (SKIPPED_NOTE, "libgpuslice.so"):  # left in build/ by an earlier build
            (target / stale).unlink(missing_ok=True)
        inc, why = missing_tools()
        if why is not None:
            if RELEASE:
                sys.exit(f"gpuslice release build: {why}")
            print(f"gpuslice: libgpuslice.so not built: {why}; everything else works; to build it: "
                  "`make -C native` (make, a C compiler, and cuda.h from $CUDA_HOME or `pip "
                  "install nvidia-cuda-runtime`), then reinstall (an editable install finds "
                  "native/build/ at once)", file=sys.stderr, flush=True)
            (target / SKIPPED_NOTE).write_text(why + "\n")
            return
        zig = f"{sys.executable} -m ziglang" if RELEASE else ""  # empty: the host cc
        subprocess.run(["make", "-C", str(ROOT / "native"), f"ZIG={zig}",
                        f"CUDA_INCLUDE={inc}"], check=True)
        if not editable:  # an editable install uses the checkout's native/build/ directly
            shutil.copy2(ROOT / "native" / "build" / "libgpuslice.so", target / "libgpuslice.so")


commands: dict[str, type] = {"build_py": BuildWithNative}
if bdist_wheel is not None:

    class PlatformWheel(bdist_wheel):  # type: ignore[misc,valid-type]
        """The wheel holds a native library but no Python extension: py3-none-<platform>."""

        def get_tag(self) -> tuple[str, str, str]:
            return "py3", "none", "manylinux2014_x86_64" if RELEASE else "linux_x86_64"

    commands["bdist_wheel"] = PlatformWheel


class BinaryDistribution(Distribution):
    """Not pure: the package carries libgpuslice.so (files land in platlib, not .data/)."""

    def has_ext_modules(self) -> bool:
        return True


setup(cmdclass=commands, distclass=BinaryDistribution)

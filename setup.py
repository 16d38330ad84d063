"""Build hook: compile native/ (libgpuslice.so) and ship it as gpuslice/_native/libgpuslice.so.

`pip install .` / `python -m build` run `make -C native` with zig (ziglang, a build requirement:
glibc 2.17 target, so the wheel is manylinux2014) or the host cc when zig is unavailable (the
wheel is then tagged linux_x86_64). Editable installs use native/build/ directly (see
gpuslice.shim.library_path). Metadata lives in pyproject.toml.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

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
HAVE_ZIG = importlib.util.find_spec("ziglang") is not None


class BuildWithNative(build_py):
    """build_py + `make -C native`, copying the library into the package."""

    def run(self) -> None:
        super().run()
        zig = f"{sys.executable} -m ziglang" if HAVE_ZIG else ""
        subprocess.run(["make", "-C", str(ROOT / "native"), f"ZIG={zig}"], check=True)
        target = Path(self.build_lib) / "gpuslice" / "_native"
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / "native" / "build" / "libgpuslice.so", target / "libgpuslice.so")


commands: dict[str, type] = {"build_py": BuildWithNative}
if bdist_wheel is not None:

    class PlatformWheel(bdist_wheel):  # type: ignore[misc,valid-type]
        """The wheel holds a native library but no Python extension: py3-none-<platform>."""

        def get_tag(self) -> tuple[str, str, str]:
            plat = "manylinux2014_x86_64" if HAVE_ZIG else "linux_x86_64"
            return "py3", "none", plat

    commands["bdist_wheel"] = PlatformWheel



class BinaryDistribution(Distribution):
    """Not pure: the package carries libgpuslice.so (files land in platlib, not .data/)."""

    def has_ext_modules(self) -> bool:
        return True


setup(cmdclass=commands, distclass=BinaryDistribution)

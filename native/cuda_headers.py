"""Where cuda.h is taken from: the one rule for setup.py, native/Makefile, native/fake/Makefile and
tests/native/harness.py (stdlib only: setup.py loads it by path before gpuslice is installed).

Order: $CUDA_INCLUDE (taken as given), else $CUDA_HOME/include (default /usr/local/cuda) where it
holds cuda.h, else the include directory of the PyPI package nvidia-cuda-runtime (CUDA 13:
nvidia/cu13/include/), found through the installed package's file list (importlib.metadata), in
whatever environment runs this: a build-isolation environment (pyproject's build-system requires)
or the dev environment (the dev extra). The library needs cuda.h and cudaTypedefs.h only (it
declares NVML itself, native/include/gpuslice/nvml_abi.h), both in that package.

`python3 native/cuda_headers.py` prints the directory (exit 0), or why there is none (exit 1).
"""

from __future__ import annotations

import os
import sys
from importlib import metadata
from pathlib import Path

PYPI_PACKAGE = "nvidia-cuda-runtime"


def pypi_include() -> Path | None:
    """The installed nvidia-cuda-runtime's directory of cuda.h, or None."""
    try:
        dist = metadata.distribution(PYPI_PACKAGE)
    except metadata.PackageNotFoundError:
        return None
    for f in dist.files or ():
        if f.name == "cuda.h" and f.parent.name == "include":
            header = Path(str(dist.locate_file(f)))
            if header.is_file():
                return header.parent
    return None


def find() -> tuple[Path | None, str]:
    """(the directory holding cuda.h, "") or (None, why there is none)."""
    inc = os.environ.get("CUDA_INCLUDE")
    if inc:  # asked for explicitly: no fallback behind the user's back
        if (Path(inc) / "cuda.h").is_file():
            return Path(inc), ""
        return None, f"no CUDA headers: {Path(inc) / 'cuda.h'} not found ($CUDA_INCLUDE)"
    home = Path(os.environ.get("CUDA_HOME") or "/usr/local/cuda") / "include"
    if (home / "cuda.h").is_file():
        return home, ""
    pypi = pypi_include()
    if pypi is not None:
        return pypi, ""
    return None, (f"no CUDA headers: {home / 'cuda.h'} not found and the {PYPI_PACKAGE} package "
                  "is not installed")


if __name__ == "__main__":
    found, why = find()
    if found is None:
        sys.exit(why)
    print(found)

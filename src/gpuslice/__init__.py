"""gpuslice: share NVIDIA GPUs between pods with hard memory and compute caps.

Packages, in the order to read them:
  model.py, quantity.py, dialects.py, codec.py   the pure core: requests, inventory, annotations
  allocator/                                     pure placement (fit, score, policies)
  simulate/                                      trace-driven cluster simulator on the allocator
  shim.py                                        Python side of libgpuslice (region reader, `run`)
  cli.py                                         the `gpuslice` command
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("gpuslice")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]

"""gpuslice: share NVIDIA GPUs between pods with hard memory and compute caps.

Packages, in the order to read them:
  model.py, quantity.py, dialects.py, codec.py   the pure core: requests, inventory, annotations
  allocator/                                     pure placement (fit, score, policies)
  simulate/                                      trace-driven cluster simulator on the allocator
  shim.py                                        Python side of libgpuslice (region reader, `run`)
  cli.py                                         the `gpuslice` command
"""

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    """`__version__`, read from the installed metadata on first use: importlib.metadata costs
    a service's every start about 15 ms, and only `gpuslice --version` asks."""
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("gpuslice")
    except PackageNotFoundError:  # running from a source tree that was never installed
        found = "0.0.0+unknown"
    globals()["__version__"] = found
    return found

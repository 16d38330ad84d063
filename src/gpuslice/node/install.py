"""Putting libgpuslice where containers get it: `<state-dir>/lib/` on the host.

Owns: copying the library there and writing the `ld.so.preload` that loads it (its one line is
the library's path inside containers, where Allocate mounts it read-only). Both are replaced
atomically (write, then rename), so a container starting meanwhile sees the old or the new
file, never half of one. Does not: decide mounts (allocate.py).
Tests: tests/integration/node/test_node_agent_command.py, tests/gpu/test_node_agent_on_gpu.py
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["install_library"]


def install_library(source: Path, state_dir: Path, container_path: str) -> tuple[Path, Path]:
    """Copy the library to <state-dir>/lib (atomically: containers may be starting) and write
    the ld.so.preload that loads it; returns (library, preload) host paths."""
    lib_dir = state_dir / "lib"
    lib_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(lib_dir, 0o755)
    lib, preload = lib_dir / "libgpuslice.so", lib_dir / "ld.so.preload"
    for target, write in ((lib, lambda t: shutil.copyfile(source, t)),
                          (preload, lambda t: t.write_text(container_path + "\n"))):
        tmp = target.with_name(f".{target.name}.{os.getpid()}")
        write(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    return lib, preload

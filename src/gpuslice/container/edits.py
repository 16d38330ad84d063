"""PURE: what a container is handed to run on its GPU shares: env, mounts and the region file.

Owns: `Layout` (where the library, the regions, the board and the gang directories lie on the
host and in the container), `container_edits` (the env and mounts for one region: the device
plugin's Allocate answer, node/allocate.py, and the DRA path's CDI spec, dra/cdi.py, both come
from here, each with the gang directory of the pods), `gang_host_dir`, the region's file name.
Does not: decide limits (node/allocate.py from an assignment, container/limits.py from a
claim's allocation) or touch files (container/regions.py).
Invariant: both paths give a container the same env and mounts for the same limits.
Tests: tests/unit/dra/test_cdi.py, tests/unit/node/test_allocate.py
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuslice.shim import AGENT_BOARD, AGENT_GANG, GANG_DIR_ENV, RegionSpec

__all__ = ["REGION_FILE", "Layout", "Mount", "container_edits", "gang_host_dir"]

REGION_FILE = "region"


@dataclass(frozen=True)
class Layout:
    """Where the library and regions are on the host (installed by the agent) and in containers."""

    library_host: str  # <state-dir>/lib/libgpuslice.so
    preload_host: str  # <state-dir>/lib/ld.so.preload (one line: library_container)
    regions_host: str  # <state-dir>/regions
    board_host: str  # <state-dir>/board: every container's, mounted at shim.AGENT_BOARD
    # <state-dir>/gangs: <namespace>/<gang>/ mounted at shim.AGENT_GANG ("" none), one root for
    # both paths, so pods of one gang on one node share a directory whichever path they take
    gangs_host: str = ""
    library_container: str = "/usr/local/gpuslice/lib/libgpuslice.so"
    region_container_dir: str = "/var/run/gpuslice"
    cdi: bool = False  # CDI device names instead of NVIDIA_VISIBLE_DEVICES
    compute_mode: str = "hard"


@dataclass(frozen=True)
class Mount:
    container_path: str
    host_path: str
    read_only: bool


def container_edits(region: RegionSpec, region_dir: str, layout: Layout, *, gang_dir: str = ""
                    ) -> tuple[dict[str, str], tuple[Mount, ...]]:
    """The env and mounts that give a container its GPUs, the library and `region` (kept in
    host directory `region_dir`): the device plugin's Allocate answer and the DRA plugin's CDI
    spec (dra/cdi.py) both come from here. `gang_dir`: the host directory of the pod's gang
    (gang_host_dir), handed to a container under a compute limit ("" none)."""
    uuids = region.device_uuids
    # the same limits as env, for a library that finds no region at its fixed path (a
    # containerRegionDir other than shim.AGENT_REGION's directory); the region wins otherwise
    envs = {
        "NVIDIA_VISIBLE_DEVICES": "void" if layout.cdi else ",".join(uuids),
        "GPUSLICE_DEVICE_UUIDS": ",".join(uuids),
        "CUDA_DEVICE_SM_LIMIT": str(region.sm_limit),
        "GPUSLICE_COMPUTE_MODE": region.compute_mode,
        "CUDA_TASK_PRIORITY": str(region.priority),
        "CUDA_DEVICE_MEMORY_SHARED_CACHE": f"{layout.region_container_dir}/{REGION_FILE}",
    }
    envs.update({f"CUDA_DEVICE_MEMORY_LIMIT_{i}": f"{limit >> 20}m"
                 for i, limit in enumerate(region.limits)})
    if 0 < region.sm_limit < 100:
        # the container's processes under a compute limit hold together, or collectives between
        # them stall (gang holds, docs/compute.md "Ranks of one job"); alone a process is as
        # without them
        envs["GPUSLICE_COMPUTE_PHASE"] = "1"
    gang = bool(gang_dir) and 0 < region.sm_limit < 100
    if gang:  # and so do those of every container of the gang's pods (docs/node-agent.md)
        envs[GANG_DIR_ENV] = AGENT_GANG

    mounts = (
        Mount(layout.library_container, layout.library_host, True),
        Mount("/etc/ld.so.preload", layout.preload_host, True),
        Mount(layout.region_container_dir, region_dir, False),
        Mount(AGENT_BOARD, layout.board_host, False),  # written by all tenants: docs/compute.md
    ) + ((Mount(AGENT_GANG, gang_dir, False),) if gang else ())
    return envs, mounts


def gang_host_dir(layout: Layout, namespace: str, gang: str) -> str:
    """The host directory of gang `gang` of `namespace` ("" where the layout has no gangs or
    the pod names none); container/regions.prepare_gang creates it."""
    return f"{layout.gangs_host}/{namespace}/{gang}" if layout.gangs_host and gang else ""

"""`gpuslice simulate --gpu-mode`: one trace replayed with shared slices, MIG, or as written.

Owns: turning the cluster and the jobs into one mode: `shim` (every GPU shared through the
library, every pod a shared slice), `mig` (every GPU with a MIG profile table, mig.CATALOG, in
MIG mode with its full table unless the cluster file narrows it; every pod asks for a MIG
instance), `as-is` (the cluster file's modes and the pods' own annotations).
Does not: place (allocator/) or measure (metrics.py).
Invariants: the same jobs in the same order in every mode; GPUs without a MIG table stay shared
in `mig` mode (their pods then say why: "node is not in MIG mode").
Tests: tests/unit/simulate/test_mig_modes.py
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from gpuslice import mig
from gpuslice.model import GPU, NodeInventory
from gpuslice.simulate.trace import Job

__all__ = ["MODES", "apply_mode"]

MODES = ("as-is", "shim", "mig", "both")
"""`both` replays each policy in shim mode, then in MIG mode (a side-by-side report)."""


def _gpu(g: GPU, mode: str) -> GPU:
    if mode == "shim":
        return msgspec.structs.replace(g, mig=None) if g.mig is not None else g
    if g.mig is not None:
        return g
    table = mig.catalog_for(g.model, g.memory_mib)
    return msgspec.structs.replace(g, mig=mig.MigGPU(profiles=table)) if table else g


def apply_mode(nodes: Sequence[NodeInventory], jobs: Sequence[Job], mode: str
               ) -> tuple[list[NodeInventory], list[Job]]:
    """The cluster and jobs for `mode` (one of shim, mig, as-is)."""
    if mode == "as-is":
        return list(nodes), list(jobs)
    want_mig = mode == "mig"
    out_nodes = [msgspec.structs.replace(n, gpus=tuple(_gpu(g, mode) for g in n.gpus))
                 for n in nodes]
    out_jobs = [j if j.pod.mig is want_mig else msgspec.structs.replace(
        j, pod=msgspec.structs.replace(j.pod, mig=want_mig)) for j in jobs]
    return out_nodes, out_jobs

"""Why a pod does not fit a node: the short reasons and the `Rejection` that carries one.

Owns: the reason strings (`REASONS`, kube-scheduler counts identical ones across nodes),
which of them preemption cannot cure (`UNRESOLVABLE`, `RESOLVABLE`), `Rejection`.
Does not: decide fit (plan.py, gate.py, search.py) or word the per-node detail (the plan's
`explain` does, on first use of `Rejection.detail`).
Invariants: `reason` is one of REASONS; two rejections are equal when reason and detail are.
Tests: tests/unit/allocator/test_fit.py, test_fit_properties.py
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from gpuslice.allocator.usage import NodeSnapshot

if TYPE_CHECKING:
    from gpuslice.allocator.plan import PodPlan

NO_INVENTORY = "node has no GPU inventory"
TOO_FEW = "too few GPUs on node"
NO_HEALTHY = "no healthy GPU"
TYPE = "GPU type not allowed by pod"
UUID = "GPU UUID not allowed by pod"
HELD = "GPU held exclusively"
SLOT = "no free GPU slot"
MEMORY = "insufficient GPU memory"
CORES = "insufficient GPU cores"
NO_SET = "no GPU set fits all containers"
SEARCH_CUT = "GPU set search cut short"
"""Each container fits alone, and the bounded search (search.MAX_SEARCH GPU sets) found no set
for all of them together before its budget ran out: a placement may exist beyond it."""
NO_MIG = "node is not in MIG mode"  # a MIG pod (docs/mig.md) on a node of shared slices
MIG_NODE = "node is in MIG mode"  # a shared-slice pod on a MIG node
NO_PROFILE = "no MIG profile holds the request"
NO_PLACEMENT = "no free MIG placement"
REASONS = (NO_INVENTORY, TOO_FEW, NO_HEALTHY, TYPE, UUID, HELD, SLOT, MEMORY, CORES, NO_SET,
           SEARCH_CUT, NO_MIG, MIG_NODE, NO_PROFILE, NO_PLACEMENT)
UNRESOLVABLE = frozenset({NO_INVENTORY, TOO_FEW, NO_HEALTHY, TYPE, UUID, NO_MIG, MIG_NODE,
                          NO_PROFILE})
"""Reasons preemption cannot cure (the extender's failedAndUnresolvableNodes)."""
RESOLVABLE = {r: r not in UNRESOLVABLE for r in REASONS}


class Rejection(msgspec.Struct, gc=False):
    """Why a pod does not fit a node. `reason` is short and the same on every node for one
    cause; `detail` (== str()) has this node's numbers and is worked out on first use."""

    reason: str
    resolvable: bool  # False where preemption cannot help
    _detail: str | None = None
    _snap: NodeSnapshot | None = None
    _plan: PodPlan | None = None

    @property
    def detail(self) -> str:
        if self._detail is None:
            assert self._snap is not None and self._plan is not None
            self._detail = self._plan.explain(self._snap)[1]
            self._snap = self._plan = None
        return self._detail

    def __str__(self) -> str:
        return self.detail

    def __repr__(self) -> str:
        return f"Rejection({self.reason!r}, {self.detail!r}, resolvable={self.resolvable})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Rejection):
            return NotImplemented
        return (self.reason, self.detail) == (other.reason, other.detail)

    __hash__ = None  # type: ignore[assignment]


def no_inventory(name: str) -> Rejection:
    return Rejection(NO_INVENTORY, RESOLVABLE[NO_INVENTORY],
                     f"node {name!r} reports no GPUs to gpuslice (is the gpuslice node agent "
                     "running there?)")

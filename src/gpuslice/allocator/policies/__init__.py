"""The policy registry: one line per policy, plus presets and the `parse_policy` parser.

Owns: name -> implementation maps for node policies and GPU policies, `Policy` (a node
policy + a GPU policy), presets ("binpack", "spread", "topology") and "NODE/GPU" parsing.
Does not: implement a policy (one module each: binpack.py, spread.py, topology.py).
Invariants: the registry names equal model.NODE_POLICIES / model.GPU_POLICIES.
Failure: an unknown name raises errors.RequestError listing every valid name.
Tests: tests/unit/allocator/test_policies.py
"""

from __future__ import annotations

import msgspec

from gpuslice.allocator.policies import binpack, spread, topology
from gpuslice.allocator.policies.base import Candidate, GpuPolicy, NodePolicy
from gpuslice.errors import RequestError

__all__ = [
    "GPU", "NODE", "PRESETS", "Candidate", "GpuPolicy", "NodePolicy", "Policy", "parse_policy",
]

NODE: dict[str, NodePolicy] = {
    binpack.NAME: binpack.node,
    spread.NAME: spread.node,
}
GPU: dict[str, GpuPolicy] = {
    binpack.NAME: binpack.gpu,
    spread.NAME: spread.gpu,
    topology.NAME: topology.gpu,
}
PRESETS: dict[str, tuple[str, str]] = {
    "binpack": ("binpack", "binpack"),
    "spread": ("spread", "spread"),
    "topology": ("binpack", "topology"),
}


class Policy(msgspec.Struct, frozen=True):
    """A node policy (which node) and a GPU policy (which GPUs on it)."""

    node: NodePolicy
    gpu: GpuPolicy

    @property
    def name(self) -> str:
        return f"{self.node.name}/{self.gpu.name}"

    def with_overrides(self, node_policy: str | None, gpu_policy: str | None) -> Policy:
        """This policy with a pod's per-pod overrides (registry names) applied."""
        if node_policy is None and gpu_policy is None:
            return self
        problems = []
        if node_policy is not None and node_policy not in NODE:
            problems.append(f"node_policy={node_policy!r}: unknown; use one of {_names(NODE)}")
        if gpu_policy is not None and gpu_policy not in GPU:
            problems.append(f"gpu_policy={gpu_policy!r}: unknown; use one of {_names(GPU)}")
        if problems:
            raise RequestError(problems)
        return Policy(
            NODE[node_policy] if node_policy is not None else self.node,
            GPU[gpu_policy] if gpu_policy is not None else self.gpu,
        )


def _names(d: dict[str, object]) -> str:
    return ", ".join(d)


def parse_policy(text: str) -> Policy:
    """A preset name or "NODE/GPU" (e.g. "spread/binpack") -> Policy; RequestError otherwise."""
    key = text.strip().lower()
    if key in PRESETS:
        node_name, gpu_name = PRESETS[key]
        return Policy(NODE[node_name], GPU[gpu_name])
    node_name, sep, gpu_name = key.partition("/")
    if sep and node_name in NODE and gpu_name in GPU:
        return Policy(NODE[node_name], GPU[gpu_name])
    raise RequestError(
        f"policy={text!r}: unknown; use a preset ({_names(PRESETS)}) or NODE/GPU with NODE one of "
        f"({_names(NODE)}) and GPU one of ({_names(GPU)}), e.g. 'spread/binpack'"
    )

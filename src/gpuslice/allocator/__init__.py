"""Pure, deterministic placement of GPU slices: which node, which GPUs, and why not.

Modules, in the order to read them:
  state.py       ClusterState: the public entry point (nodes, filter/prioritize/schedule,
                 assign/release, gpu_usage)
  usage.py       footprints (the lifecycle rule), NodeSnapshot summaries, AllocationError
  fit.py         fit check, GPU choice (`place`), Placement, Rejection and its reasons
  score.py       node scores 0..10 and the tie-break
  policies/      registry + presets + parse_policy; one module per policy
No I/O, no clocks, no randomness; iteration is always in sorted or inventory order.
Tests: tests/unit/allocator/
"""

from gpuslice.allocator.fit import REASONS, FilterResult, Placement, Rejection
from gpuslice.allocator.policies import Policy, parse_policy
from gpuslice.allocator.state import ClusterState
from gpuslice.allocator.usage import AllocationError, GPUUsage

__all__ = [
    "REASONS",
    "AllocationError",
    "ClusterState",
    "FilterResult",
    "GPUUsage",
    "Placement",
    "Policy",
    "Rejection",
    "parse_policy",
]

"""Pure, deterministic placement of GPU slices: which node, which GPUs, and why not.

Modules, in the order to read them:
  state.py       ClusterState: the public entry point (nodes, filter/prioritize/schedule,
                 assign/release, gpu_usage)
  usage.py       `footprint` (public: the lifecycle rule, what a pod holds per GPU; the
                 simulator charges it too), NodeSnapshot summaries, NodeTable, AllocationError
  fit.py         the filter: `prepare` a pod once, `filter_nodes` (Gate columns first,
                 then the exact check per node), Placement, FilterResult
  plan.py        PodPlan/ReqPlan: requests validated once, exact per-node `check`, `explain`
  gate.py        Gate: a sufficient condition for fit from node summaries (one node or
                 NodeTable columns at once)
  search.py      `place`: GPU choice (greedy, then a bounded backtracking search), `build`
  reasons.py     REASONS (short, identical across nodes), Rejection
  score.py       node scores 0..10 and the tie-break
  policies/      registry + presets + parse_policy; one module per policy
No I/O, no clocks, no randomness; iteration is always in sorted or inventory order.
Tests: tests/unit/allocator/
"""

from gpuslice.allocator.fit import FilterResult, Placement
from gpuslice.allocator.policies import Policy, parse_policy
from gpuslice.allocator.reasons import REASONS, Rejection
from gpuslice.allocator.state import ClusterState
from gpuslice.allocator.usage import AllocationError, GPUUsage, Use, footprint

__all__ = [
    "REASONS",
    "AllocationError",
    "ClusterState",
    "FilterResult",
    "GPUUsage",
    "Placement",
    "Policy",
    "Rejection",
    "Use",
    "footprint",
    "parse_policy",
]

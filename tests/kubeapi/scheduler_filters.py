"""The kube-scheduler's own node filters that run before an extender, and its failure wording.
Owns: NodeUnschedulable, NodeAffinity (nodeSelector only), TaintToleration, NodeResourcesFit
(requests against allocatable minus pods already on the node, skipping resources an extender
manages with ignoredByScheduler), how many nodes to look at (percentageOfNodesToScore), and the
"0/N nodes are available: ..." message with its preemption sentence.
Does not: call extenders or the API (scheduler_driver.py). Pure: plain dicts in, values out.
Tests: tests/integration/kubeapi/test_scheduler_driver_speaks_the_extender_wire.py"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from typing import Any

Obj = dict[str, Any]
UNSCHEDULABLE = "node(s) were unschedulable"
SELECTOR = "node(s) didn't match Pod's node affinity/selector"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"
_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
           "n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
           "P": 1e15, "E": 1e18}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|[A-Za-z]*)$")


def quantity(text: Any) -> float:
    found = _QUANTITY.match(str(text).strip())
    if not found:
        raise ValueError(f"not a quantity: {text!r}")
    number, suffix = found.groups()
    if suffix[:1] in ("e", "E"):
        return float(number + suffix)
    return float(number) * _SUFFIX[suffix]


def pod_requests(pod: Mapping[str, Any]) -> dict[str, float]:
    """Effective requests: max(sum of containers, each init container), plus one pod."""
    spec = pod.get("spec") or {}
    total: dict[str, float] = {}
    for c in spec.get("containers") or []:
        for name, value in ((c.get("resources") or {}).get("requests") or {}).items():
            total[name] = total.get(name, 0) + quantity(value)
    for c in spec.get("initContainers") or []:
        for name, value in ((c.get("resources") or {}).get("requests") or {}).items():
            total[name] = max(total.get(name, 0), quantity(value))
    total["pods"] = 1
    return total


def requested_names(pod: Mapping[str, Any]) -> set[str]:
    spec = pod.get("spec") or {}
    names: set[str] = set()
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        res = c.get("resources") or {}
        names |= set(res.get("requests") or {}) | set(res.get("limits") or {})
    return names


def node_allocatable(node: Mapping[str, Any]) -> dict[str, float]:
    """The node's allocatable resources as numbers (callers keep it per node)."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return {name: quantity(value) for name, value in allocatable.items()}


def fit_requests(requests: Mapping[str, float], ignored: Collection[str]) -> dict[str, float]:
    """The requests NodeResourcesFit checks, in its order: positive, not ignored, by name
    (once per pod; node_reasons then reads them per node)."""
    return {name: want for name, want in sorted(requests.items())
            if name not in ignored and want > 0}


def node_reasons(pod: Obj, node: Obj, requests: Mapping[str, float],
                 allocatable: Mapping[str, float], used: Mapping[str, float]) -> list[str]:
    """Why `pod` (asking for `requests`, see fit_requests) cannot go to `node` (`allocatable`
    from node_allocatable, `used` by pods there) by the scheduler's own filters ([] = fits)."""
    return placement_reasons(pod, node) + resource_reasons(requests, allocatable, used)


def placement_reasons(pod: Obj, node: Obj) -> list[str]:
    """NodeUnschedulable, NodeAffinity (nodeSelector) and TaintToleration: nothing to say
    unless the pod has a nodeSelector or the node is unschedulable or tainted (is_plain)."""
    spec, node_spec = pod.get("spec") or {}, node.get("spec") or {}
    reasons: list[str] = []
    if node_spec.get("unschedulable") and not _tolerates(spec, {
            "key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}):
        reasons.append(UNSCHEDULABLE)
    selector = spec.get("nodeSelector")
    if selector:
        labels = (node.get("metadata") or {}).get("labels") or {}
        if any(labels.get(k) != v for k, v in selector.items()):
            reasons.append(SELECTOR)
    for taint in node_spec.get("taints") or ():
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(spec, taint):
            reasons.append(f"node(s) had untolerated taint {{{taint.get('key')}: "
                           f"{taint.get('value', '')}}}")
            break
    return reasons


def is_plain(node: Obj) -> bool:
    """Neither unschedulable nor tainted: placement_reasons only matter with a nodeSelector."""
    node_spec = node.get("spec") or {}
    return not node_spec.get("unschedulable") and not node_spec.get("taints")


def resource_reasons(requests: Mapping[str, float], allocatable: Mapping[str, float],
                     used: Mapping[str, float]) -> list[str]:
    """NodeResourcesFit: each of `requests` (fit_requests) against allocatable minus used."""
    return [_short_of(name) for name, want in requests.items()
            if want > allocatable.get(name, 0) - used.get(name, 0)]


def first_resource_reason(requests: Mapping[str, float], allocatable: Mapping[str, float],
                          used: Mapping[str, float]) -> str | None:
    """resource_reasons(...)[0], or None when everything fits, without building the list."""
    for name, want in requests.items():
        if want > allocatable.get(name, 0) - used.get(name, 0):
            return _short_of(name)
    return None


def _short_of(resource: str) -> str:
    return "Too many pods" if resource == "pods" else f"Insufficient {resource}"


def _tolerates(spec: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    for t in spec.get("tolerations") or []:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        if t.get("operator") == "Exists" and (not t.get("key") or t["key"] == taint.get("key")):
            return True
        if t.get("key") == taint.get("key") and t.get("value", "") == taint.get("value", ""):
            return True
    return False


def nodes_to_find(total: int, percentage: int = 0) -> int:
    """numFeasibleNodesToFind: how many feasible nodes the scheduler looks for (all below 100)."""
    if total < 100 or percentage >= 100:
        return total
    adaptive = percentage or max(50 - total // 125, 5)
    return max(total * adaptive // 100, 100)


def failure_message(total: int, reasons: Mapping[str, str], unresolvable: Iterable[str]) -> str:
    """`0/N nodes are available: 2 Insufficient cpu, 1 node(s) were unschedulable. preemption:
    0/N nodes are available: ...`, counting identical reasons as kube-scheduler does."""
    stuck = set(unresolvable)
    counts = Counter(reasons.values())
    head = ", ".join(f"{n} {r}" for r, n in sorted(counts.items()))
    preempt = Counter(NOT_HELPFUL if node in stuck else NO_VICTIMS for node in reasons)
    tail = ", ".join(f"{n} {r}" for r, n in sorted(preempt.items()))
    message = f"0/{total} nodes are available: {head}." if head else \
        f"0/{total} nodes are available."
    return f"{message} preemption: 0/{total} nodes are available: {tail}." if tail else message

"""Which GPU pods may skip gpuslice's placement, and the denial for those that may not (pure).

Owns: the rule for a pod that asks for a GPU resource and would not be placed by gpuslice's
scheduler: the opt-out label on the pod (tenants set their own pods' labels), another
`schedulerName` (any scheduler would bind it with no assignment) or a hand-set `spec.nodeName`
(no scheduler at all). Such a pod reaches a GPU node's kubelet, which asks gpuslice's node agent
for devices of the resource it advertises: without gpuslice's assignment the agent cannot tell
its Allocate call from an in-flight pod's, so it must never be created there. It is allowed
only in the namespaces the operator lists (`bypassNamespaces`: pods there run on nodes without
gpuslice's agent, or under another device plugin's resource names), and a namespace carrying
the opt-out label never reaches this code (admit.py skips it: labelling a namespace is the
operator's act, not a tenant's).
Does not: decide anything else about the pod (admit.py), or see Bindings (a pods/binding
request carries no pod: docs/webhook.md "Bypassing gpuslice" says what covers it).
Tests: tests/unit/webhook/test_admit_bypass.py
"""

from __future__ import annotations

from collections.abc import Collection

from gpuslice.errors import brief

__all__ = ["bypass_refused"]

_HOW = {
    "label": "gpuslice skips a pod with this label",
    "scheduler": "another scheduler would bind it",
}


def bypass_refused(how: str, what: str, namespace: str, allowed: Collection[str]) -> str | None:
    """The denial line for a GPU pod in `namespace` that would skip gpuslice's placement `how`
    ("label" or "scheduler"; `what` is the field and value), or None where the operator allows
    it (`allowed`: the bypassNamespaces). spec.nodeName keeps admit.py's own line (it names
    the fix: a nodeSelector)."""
    if namespace in allowed:
        return None
    where = f"namespace {brief(namespace)}" if namespace else "this namespace"
    return (f"pod: {what}: {_HOW[how]}, and a GPU pod may skip gpuslice's placement only in "
            f"the namespaces the operator lists (webhook bypassNamespaces; {where} is not "
            "one); remove it so that gpuslice places the pod and caps its slice")

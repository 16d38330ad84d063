"""The kube-scheduler HTTP extender's JSON bodies (WIRE.md; wire-samples/extender-*).

Owns: msgspec types for ExtenderArgs, ExtenderFilterResult, HostPriority, ExtenderBindingArgs,
ExtenderBindingResult and ExtenderPreemptionArgs/Result with the capitalised Go field names the
real scheduler sends for every verb (no preempt sample was captured: its names follow the Go
types the same way); one decoder per request type and one encoder.
Does not: interpret a pod or a node (filter.py, prioritize.py, bind.py do).
Invariants: the Pod stays a plain mapping (dialects.parse_pod reads it); with nodeCacheCapable
false the NodeList items stay raw JSON (msgspec.Raw), so a reply echoes the scheduler's own
node objects byte for byte and only the few fields we read are decoded (`NodeHead`).
Failure: `decode` raises WireError naming the body and the field, for the route to answer.
Tests: tests/unit/scheduler/test_wire.py
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

__all__ = [
    "BindingArgs",
    "BindingResult",
    "ExtenderArgs",
    "FilterResult",
    "HostPriority",
    "MetaPod",
    "MetaVictims",
    "NodeHead",
    "NodeList",
    "PreemptionArgs",
    "PreemptionResult",
    "Victims",
    "WireError",
    "decode",
    "encode",
]

T = TypeVar("T")


class WireError(ValueError):
    """A request body the extender cannot read (the message names the field)."""


class NodeList(msgspec.Struct):
    """v1.NodeList as sent with nodeCacheCapable: false; items kept raw (see the header)."""

    items: list[msgspec.Raw] = []
    metadata: dict[str, Any] = {}


class _Meta(msgspec.Struct, frozen=True):
    name: str = ""
    annotations: dict[str, str] | None = None


class NodeHead(msgspec.Struct, frozen=True):
    """The part of a v1.Node the extender reads: its name and annotations."""

    metadata: _Meta = _Meta()


class ExtenderArgs(msgspec.Struct):
    """filter/prioritize request: Nodes (a NodeList) or NodeNames (names), the other null."""

    Pod: dict[str, Any]
    Nodes: NodeList | None = None
    NodeNames: list[str] | None = None


class FilterResult(msgspec.Struct):
    """filter reply, in the request's shape: names back for names, a NodeList for a NodeList."""

    Nodes: NodeList | None = None
    NodeNames: list[str] | None = None
    FailedNodes: dict[str, str] = {}
    FailedAndUnresolvableNodes: dict[str, str] = {}
    Error: str = ""


class HostPriority(msgspec.Struct, gc=False):  # thousands per reply: skip GC tracking
    """One entry of the prioritize reply (a JSON list of these); Score 0..10."""

    Host: str
    Score: int


class BindingArgs(msgspec.Struct):
    """bind request: the pod to bind and the node the scheduler chose."""

    PodName: str
    PodNamespace: str
    PodUID: str
    Node: str


class BindingResult(msgspec.Struct):
    Error: str = ""


class MetaPod(msgspec.Struct):
    """A victim, named by UID (nodeCacheCapable: true)."""

    UID: str


class MetaVictims(msgspec.Struct):
    Pods: list[MetaPod] | None = None
    NumPDBViolations: int = 0


class Victims(msgspec.Struct):
    Pods: list[dict[str, Any]] | None = None
    NumPDBViolations: int = 0


class PreemptionArgs(msgspec.Struct):
    """preempt request: victims per candidate node, as full pods or as UIDs."""

    Pod: dict[str, Any]
    NodeNameToVictims: dict[str, Victims] | None = None
    NodeNameToMetaVictims: dict[str, MetaVictims] | None = None


class PreemptionResult(msgspec.Struct):
    """preempt reply: the candidates kept, with their victims."""

    NodeNameToMetaVictims: dict[str, MetaVictims]


_DECODERS: dict[type, msgspec.json.Decoder[Any]] = {}
_ENCODER = msgspec.json.Encoder()


def decode(body: bytes, kind: type[T]) -> T:
    """Decode a request body; WireError with msgspec's path ("at `$.Pod`") when it is wrong."""
    decoder = _DECODERS.get(kind)
    if decoder is None:
        decoder = _DECODERS[kind] = msgspec.json.Decoder(kind)
    try:
        return decoder.decode(body)  # type: ignore[no-any-return]
    except msgspec.DecodeError as exc:
        raise WireError(f"{kind.__name__} body: {exc}; send the kube-scheduler's extender "
                        "JSON (capitalised Go field names, WIRE.md)") from None


def encode(obj: object) -> bytes:
    return _ENCODER.encode(obj)


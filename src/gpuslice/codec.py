"""The JSON annotations gpuslice owns: node inventory and pod assignment, versioned.

Owns: the wire shape (camelCase keys, "version": 1 first), its typed decode (msgspec) and the
semantic checks (sizes > 0, cores 0..100, split_count >= 1, unique GPU UUIDs per node, unique
container names, no GPU twice in one container). Does not: read or patch Kubernetes (kube/).
Invariants: decode(encode(x)) == x for every valid x; encode refuses what decode would reject,
so nothing we write can fail to read back; unknown keys are ignored (newer writers may add
optional ones), an unknown version is refused.
Failure: CodecError `<annotation>: <$.path>: <what>, got <value>; <fix>`; never a traceback.
Tests: tests/unit/test_codec.py, tests/unit/test_codec_properties.py
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

import msgspec

from gpuslice import mig, model
from gpuslice.errors import CodecError

__all__ = [
    "ASSIGNMENT_ANNOTATION",
    "INVENTORY_ANNOTATION",
    "VERSION",
    "decode_assignment",
    "decode_inventory",
    "encode_assignment",
    "encode_inventory",
]

INVENTORY_ANNOTATION = "gpuslice.io/inventory"
ASSIGNMENT_ANNOTATION = "gpuslice.io/assignment"
VERSION = 1

_FIX = {
    INVENTORY_ANNOTATION: "the node agent writes it: restart the agent on that node to rewrite it",
    ASSIGNMENT_ANNOTATION: "the scheduler writes it at bind: recreate the pod to place it again",
}

_I64 = 2**63 - 1
_Count = Annotated[int, msgspec.Meta(ge=0, le=_I64)]
_Positive = Annotated[int, msgspec.Meta(ge=1, le=_I64)]
_Cores = Annotated[int, msgspec.Meta(ge=0, le=model.EXCLUSIVE_CORES)]
_Name = Annotated[str, msgspec.Meta(min_length=1)]


class _Header(msgspec.Struct):
    version: int


_Slot = Annotated[int, msgspec.Meta(ge=0, le=mig.MEMORY_SLICES - 1)]
_Span = Annotated[int, msgspec.Meta(ge=1, le=mig.MEMORY_SLICES)]


class _Profile(msgspec.Struct, kw_only=True):
    name: _Name
    compute: Annotated[int, msgspec.Meta(ge=1, le=mig.COMPUTE_SLICES)]
    memory_mib: _Positive = msgspec.field(name="memoryMiB")
    size: _Span
    starts: Annotated[tuple[_Slot, ...], msgspec.Meta(min_length=1)]


class _Instance(msgspec.Struct, kw_only=True):
    profile: _Name
    start: _Slot
    size: _Span
    uuid: str = ""


class _Mig(msgspec.Struct, kw_only=True):
    profiles: tuple[_Profile, ...]
    instances: tuple[_Instance, ...] = ()
    # derived from the two above, for people and tools reading the node; decode ignores it
    free_placements: dict[str, tuple[int, ...]] = msgspec.field(name="freePlacements",
                                                                default_factory=dict)


class _GPU(msgspec.Struct, kw_only=True):
    uuid: _Name
    model: str
    memory_mib: _Positive = msgspec.field(name="memoryMiB")
    index: _Count = 0
    sm_count: _Count = msgspec.field(name="smCount", default=0)
    numa_node: _Count | None = msgspec.field(name="numaNode", default=None)
    nvlink_peers: tuple[_Name, ...] = msgspec.field(name="nvlinkPeers", default=())
    healthy: bool = True
    split_count: _Positive = msgspec.field(name="splitCount", default=10)
    # both left out for a shim GPU (UNSET is not written): the wire of shim nodes is unchanged
    mode: Literal["shim", "mig"] | msgspec.UnsetType = msgspec.UNSET
    mig: _Mig | msgspec.UnsetType = msgspec.UNSET


class _Inventory(msgspec.Struct, kw_only=True):
    version: int
    gpus: tuple[_GPU, ...]


class _MigSlice(msgspec.Struct, kw_only=True):
    profile: _Name
    start: _Slot


class _Slice(msgspec.Struct, kw_only=True):
    uuid: _Name
    memory_mib: _Positive = msgspec.field(name="memoryMiB")
    cores: _Cores
    mig: _MigSlice | msgspec.UnsetType = msgspec.UNSET  # left out for a library share


class _Container(msgspec.Struct, kw_only=True):
    name: _Name
    kind: model.ContainerKind = model.ContainerKind.APP
    slices: Annotated[tuple[_Slice, ...], msgspec.Meta(min_length=1)]


class _Assignment(msgspec.Struct, kw_only=True):
    version: int
    node: _Name
    containers: tuple[_Container, ...]


_ENCODER = msgspec.json.Encoder()
_AT = re.compile(r"(?P<msg>.*?)(?: - at `(?P<path>\$[^`]*)`)?", re.S)
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+)\]")
_MISSING = object()


def _lookup(value: Any, path: str) -> Any:
    """The raw JSON value at `path` ($.a[1].b), or _MISSING when it cannot be found."""
    for key, index in _STEP.findall(path[1:]):
        if key and isinstance(value, dict) and key in value:
            value = value[key]
        elif index and isinstance(value, list) and int(index) < len(value):
            value = value[int(index)]
        else:
            return _MISSING
    return value


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."


def _error(annotation: str, path: str, what: str) -> CodecError:
    return CodecError(f"{annotation}: {path}: {what}; {_FIX[annotation]}")


def _from_validation(annotation: str, text: str, err: msgspec.ValidationError) -> CodecError:
    """msgspec's "Expected `int`, got `str` - at `$.x`" -> "$.x: expected int, got "80G"."""
    try:  # the typed decoder stops at the first wrong type, even in text that is not JSON
        raw = msgspec.json.decode(text)
    except msgspec.DecodeError as bad:
        return _error(annotation, "$", f"not valid JSON ({bad})")
    except RecursionError:
        raw = _MISSING
    m = _AT.fullmatch(str(err))
    assert m is not None  # the pattern matches any text
    msg, path = m["msg"], m["path"] or "$"
    missing = re.fullmatch(r"Object missing required field `(.+)`", msg)
    if missing:
        return _error(annotation, f"{path}.{missing[1]}", "required field is missing")
    got = _MISSING if raw is _MISSING else _lookup(raw, path)
    if msg.startswith("Invalid enum value"):
        msg = "expected one of " + ", ".join(k.value for k in model.ContainerKind)
    msg = re.sub(r", got `[^`]*`$", "", msg).replace("`", "")
    msg = msg[:1].lower() + msg[1:]
    if got is not _MISSING:
        msg += f", got {_shown(got)}"
    return _error(annotation, path, msg)


def _decode(annotation: str, text: object, wire: type[Any]) -> Any:
    if not isinstance(text, str):
        raise _error(annotation, "$", f"expected JSON text, got {type(text).__name__}")
    try:
        header = msgspec.json.decode(text, type=_Header)
        if header.version != VERSION:
            raise CodecError(
                f"{annotation}: $.version: unknown version {header.version} (this gpuslice "
                f"reads version {VERSION}); run the same gpuslice version on every component"
            )
        return msgspec.json.decode(text, type=wire)
    except msgspec.ValidationError as err:
        raise _from_validation(annotation, text, err) from None
    except msgspec.DecodeError as err:
        raise _error(annotation, "$", f"not valid JSON ({err})") from None
    except (UnicodeError, RecursionError) as err:
        raise _error(annotation, "$", f"not readable JSON ({type(err).__name__})") from None


def _unique(annotation: str, items: list[tuple[str, str]], what: str) -> None:
    """Raise on the first (path, value) whose value repeats an earlier one."""
    seen: dict[str, str] = {}
    for path, value in items:
        if value in seen:
            raise _error(annotation, path, f"{what} {_shown(value)} already at {seen[value]}")
        seen[value] = path


def decode_inventory(text: str, *, node: str) -> model.NodeInventory:
    """A node's GPUs from its gpuslice.io/inventory annotation; `node` is metadata.name."""
    wire: _Inventory = _decode(INVENTORY_ANNOTATION, text, _Inventory)
    _unique(INVENTORY_ANNOTATION,
            [(f"$.gpus[{i}].uuid", g.uuid) for i, g in enumerate(wire.gpus)], "duplicate GPU")
    return model.NodeInventory(node=node, gpus=tuple(
        model.GPU(uuid=g.uuid, model=g.model, memory_mib=g.memory_mib, index=g.index,
                  sm_count=g.sm_count, numa_node=g.numa_node, nvlink_peers=g.nvlink_peers,
                  healthy=g.healthy, split_count=g.split_count,
                  mig=_mig_gpu(f"$.gpus[{i}]", g))
        for i, g in enumerate(wire.gpus)
    ))


def _mig_gpu(at: str, g: _GPU) -> mig.MigGPU | None:
    """The MIG block of one inventory GPU, checked against its `mode`."""
    mode = "shim" if g.mode is msgspec.UNSET else g.mode
    if (mode == "mig") != (g.mig is not msgspec.UNSET):
        raise _error(INVENTORY_ANNOTATION, f"{at}.mig",
                     f"mode {mode} {'needs' if mode == 'mig' else 'takes no'} mig block")
    if g.mig is msgspec.UNSET:
        return None
    out = mig.MigGPU(
        profiles=tuple(mig.Profile(name=p.name, compute=p.compute, memory_mib=p.memory_mib,
                                   size=p.size, starts=p.starts) for p in g.mig.profiles),
        instances=tuple(mig.Instance(profile=i.profile, start=i.start, size=i.size, uuid=i.uuid)
                        for i in g.mig.instances))
    problem = mig.check_gpu(out)
    if problem is not None:
        raise _error(INVENTORY_ANNOTATION, f"{at}.mig", problem)
    return out


def _mig_wire(m: mig.MigGPU | None) -> _Mig | msgspec.UnsetType:
    if m is None:
        return msgspec.UNSET
    return _Mig(profiles=tuple(_Profile(name=p.name, compute=p.compute, memory_mib=p.memory_mib,
                                        size=p.size, starts=tuple(p.starts))
                               for p in m.profiles),
                instances=tuple(_Instance(profile=i.profile, start=i.start, size=i.size,
                                          uuid=i.uuid) for i in m.instances),
                free_placements={k: tuple(v) for k, v in m.free_placements().items()})


def encode_inventory(inv: model.NodeInventory) -> str:
    """The gpuslice.io/inventory annotation value (node name not included: it is the Node's)."""
    wire = _Inventory(version=VERSION, gpus=tuple(
        _GPU(uuid=g.uuid, model=g.model, memory_mib=g.memory_mib, index=g.index,
             sm_count=g.sm_count, numa_node=g.numa_node, nvlink_peers=tuple(g.nvlink_peers),
             healthy=g.healthy, split_count=g.split_count,
             mode=msgspec.UNSET if g.mig is None else "mig", mig=_mig_wire(g.mig))
        for g in inv.gpus
    ))
    return _checked(INVENTORY_ANNOTATION, wire, lambda t: decode_inventory(t, node=inv.node))


def decode_assignment(text: str) -> model.PodAssignment:
    """Where a pod's slices are, from its gpuslice.io/assignment annotation."""
    wire: _Assignment = _decode(ASSIGNMENT_ANNOTATION, text, _Assignment)
    _unique(ASSIGNMENT_ANNOTATION,
            [(f"$.containers[{i}].name", c.name) for i, c in enumerate(wire.containers)],
            "duplicate container")
    for i, c in enumerate(wire.containers):
        _unique(ASSIGNMENT_ANNOTATION,
                [(f"$.containers[{i}].slices[{j}].uuid", s.uuid) for j, s in enumerate(c.slices)],
                "a second slice of GPU")
    return model.PodAssignment(node=wire.node, containers=tuple(
        model.ContainerAssignment(container=c.name, kind=c.kind, slices=tuple(
            model.GPUSlice(uuid=s.uuid, memory_mib=s.memory_mib, cores=s.cores,
                           mig=None if s.mig is msgspec.UNSET else
                           mig.MigSlice(profile=s.mig.profile, start=s.mig.start))
            for s in c.slices))
        for c in wire.containers
    ))


def encode_assignment(a: model.PodAssignment) -> str:
    """The gpuslice.io/assignment annotation value for a pod."""
    wire = _Assignment(version=VERSION, node=a.node, containers=tuple(
        _Container(name=c.container, kind=c.kind, slices=tuple(
            _Slice(uuid=s.uuid, memory_mib=s.memory_mib, cores=s.cores,
                   mig=msgspec.UNSET if s.mig is None else _MigSlice(profile=s.mig.profile,
                                                            start=s.mig.start))
            for s in c.slices))
        for c in a.containers
    ))
    return _checked(ASSIGNMENT_ANNOTATION, wire, decode_assignment)


def _checked(annotation: str, wire: msgspec.Struct, decode: Any) -> str:
    """Encode, then read it back: an invalid value is refused here, not by the reader later."""
    try:
        text = _ENCODER.encode(wire).decode()
    except (TypeError, ValueError, OverflowError) as err:
        raise CodecError(f"{annotation}: refusing to write an unencodable value: {err}; "
                         "fix the code that built it") from None
    try:
        decode(text)
    except CodecError as err:
        detail = str(err).removeprefix(f"{annotation}: ").removesuffix(f"; {_FIX[annotation]}")
        raise CodecError(f"{annotation}: refusing to write an invalid value: {detail}; "
                         "fix the code that built it") from None
    return text

"""PURE: why a slice request fits no node's published GPUs, in the extender's words: the
dimension that runs out and the nearest node (kube-scheduler only says "cannot allocate all
claims").

Owns: reading the devices of ResourceSlices (`devices`) and what allocated claims consume of
them (`used`: consumedCapacity, or the whole device), and `explain`: for each container's
request, the nodes whose GPUs pass its filters, ranked by how far the best `count` of them are
from holding it (memory and cores short, as fractions of the GPU); the nearest one named with
its numbers. Memory needs are rounded up to the device's step, as kube-scheduler rounds them.
Does not: watch anything or post events (webhook/explain.py) or decide placement: this is an
explanation, computed from a snapshot that kube-scheduler may have seen differently.
Tests: tests/unit/dra/test_dra_fit.py
"""

from __future__ import annotations

import contextlib
import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuslice import model
from gpuslice.container.limits import FULL_CORES, MiB
from gpuslice.dra import DRIVER
from gpuslice.quantity import QuantityError, parse_quantity

__all__ = ["Device", "Use", "devices", "explain", "used"]


@dataclass(frozen=True)
class Device:
    node: str  # the pool: the node's name
    name: str
    uuid: str
    model: str
    memory_mib: int
    step_mib: int
    shared: bool  # allowMultipleAllocations


@dataclass
class Use:
    memory_mib: int = 0
    cores: int = 0
    whole: bool = False  # allocated without consumedCapacity: nobody else fits


def _mib(value: Any, default: int = 0) -> int:
    try:
        return math.ceil(parse_quantity(value, field="memory") / MiB)
    except (QuantityError, TypeError):
        return default


def devices(slices: Iterable[Mapping[str, Any]], driver: str = DRIVER) -> list[Device]:
    out = []
    for s in slices:
        spec = s.get("spec") or {}
        if spec.get("driver") != driver:
            continue
        node = str((spec.get("pool") or {}).get("name") or spec.get("nodeName") or "")
        for d in spec.get("devices") or ():
            attrs = d.get("attributes") or {}
            memory = (d.get("capacity") or {}).get("memory") or {}
            step = ((memory.get("requestPolicy") or {}).get("validRange") or {}).get("step")
            out.append(Device(node, str(d.get("name")), str((attrs.get("uuid") or {}).get(
                "string", "")), str((attrs.get("model") or {}).get("string", "")),
                _mib(memory.get("value")), _mib(step, 1) or 1,
                bool(d.get("allowMultipleAllocations"))))
    return out


def used(claims: Iterable[Mapping[str, Any]], driver: str = DRIVER) -> dict[tuple[str, str], Use]:
    """(node, device) -> what the allocated claims take of it."""
    out: dict[tuple[str, str], Use] = defaultdict(Use)
    for c in claims:
        alloc = (c.get("status") or {}).get("allocation") or {}
        for r in (alloc.get("devices") or {}).get("results") or ():
            if r.get("driver") != driver:
                continue
            u = out[(str(r.get("pool")), str(r.get("device")))]
            consumed = r.get("consumedCapacity")
            if not isinstance(consumed, Mapping):
                u.whole = True
                continue
            u.memory_mib += _mib(consumed.get("memory"))
            with_cores = consumed.get("cores")
            if with_cores is not None:
                with contextlib.suppress(QuantityError):
                    u.cores += math.ceil(parse_quantity(with_cores, field="cores"))
    return out


def _passes(d: Device, f: model.GPUFilter) -> bool:
    m = d.model.lower()
    return (not f.use_types or any(t.lower() in m for t in f.use_types)) and \
        not any(t.lower() in m for t in f.nouse_types) and \
        (not f.use_uuids or d.uuid in f.use_uuids) and d.uuid not in f.nouse_uuids


def _need_mib(s: model.SliceRequest, d: Device) -> int:
    mib = s.memory_mib if s.memory_mib is not None else \
        d.memory_mib * (s.memory_percent or 100) // 100
    return -(-max(1, mib) // d.step_mib) * d.step_mib


@dataclass(frozen=True)
class _Gap:
    short: float  # 0: it fits; memory and cores short, as fractions of the GPU
    memory_short: int
    cores_short: int
    whole: bool
    text: str


def _gap(s: model.SliceRequest, d: Device, u: Use) -> _Gap:
    free_mem, free_cores = d.memory_mib - u.memory_mib, FULL_CORES - u.cores
    need = _need_mib(s, d)
    text = (f"{d.name} has {max(0, free_mem)} MiB / {max(0, free_cores)} cores free of "
            f"{d.memory_mib} MiB / {FULL_CORES}")
    if u.whole or (not d.shared and (u.memory_mib or u.cores)):
        return _Gap(2.0, need, s.cores, True, f"{d.name} is held whole by another claim")
    mem_short, cores_short = max(0, need - free_mem), max(0, s.cores - free_cores)
    return _Gap(mem_short / max(1, d.memory_mib) + cores_short / FULL_CORES, mem_short,
                cores_short, False, text)


def _dimension(gaps: Sequence[_Gap]) -> str:
    if any(g.whole for g in gaps):
        return "GPUs held whole by other claims"
    mem, cores = any(g.memory_short for g in gaps), any(g.cores_short for g in gaps)
    return ("not enough GPU memory and cores" if mem and cores else
            "not enough GPU memory" if mem else "not enough GPU cores")


def _describe(s: model.SliceRequest) -> str:
    memory = f"{s.memory_mib} MiB" if s.memory_mib is not None else \
        f"{s.memory_percent}% of the memory"
    gpus = f"{s.count} GPU" + ("s" if s.count > 1 else "")
    return f"container {json.dumps(s.container)} ({gpus}, {memory}, {s.cores} cores each)"


def explain(request: model.PodRequest, devs: Sequence[Device],
            use: Mapping[tuple[str, str], Use]) -> str:
    """One line per container that fits no node: the dimension that runs out on the nearest
    node and its numbers; or why the GPUs are not what keeps the pod out."""
    by_node: dict[str, list[Device]] = defaultdict(list)
    for d in devs:
        by_node[d.node].append(d)
    if not by_node:
        return f"no node publishes {DRIVER} GPUs yet (no ResourceSlice): is the node agent " \
               "running with dra.enabled on a node labelled gpuslice.io/gpu-path=dra?"
    lines, fits_on = [], set(by_node)
    for s in request.slices:
        best: tuple[float, str, list[_Gap]] | None = None
        fits = set()
        for node, ds in sorted(by_node.items()):
            passing = [d for d in ds if _passes(d, request.filter)]
            if len(passing) < s.count:
                score = 10.0 + s.count - len(passing)
                if best is None or score < best[0]:
                    best = (score, node, [])
                continue
            gaps = sorted((_gap(s, d, use.get((node, d.name), Use())) for d in passing),
                          key=lambda g: g.short)[:s.count]
            score = sum(g.short for g in gaps)
            if score == 0:
                fits.add(node)
            elif best is None or score < best[0]:
                best = (score, node, gaps)
        fits_on &= fits
        if fits or best is None:
            continue
        score, node, gaps = best
        if not gaps:
            has = len([d for d in by_node[node] if _passes(d, request.filter)])
            lines.append(f"{_describe(s)} fits no node: too few GPUs pass its type/UUID "
                         f"filters (nearest: {node}, {has} of {len(by_node[node])} GPUs pass, "
                         f"it needs {s.count})")
            continue
        lines.append(f"{_describe(s)} fits no node: {_dimension(gaps)} (nearest: "
                     f"{node}: {'; '.join(g.text for g in gaps)})")
    if lines:
        return "\n".join(lines)
    if fits_on:
        return (f"the GPU claims fit on {', '.join(sorted(fits_on)[:3])}"
                f"{' and more' if len(fits_on) > 3 else ''} by the published capacity: see "
                "kube-scheduler's FailedScheduling event for the reason (CPU, memory, node "
                "selectors, taints), or the claims are being allocated")
    return ("each container's GPU claim fits on some node alone, but no node holds all of them "
            "together")

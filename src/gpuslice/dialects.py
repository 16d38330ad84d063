"""Every accepted way to ask for a GPU slice (HAMi, Volcano, GPU Manager) -> one PodRequest.

Owns: resource and annotation names of each dialect, their units and ranges, the defaults
for missing dimensions, GPU filters, per-pod policy overrides (DESIGN §3) and the pod's GPU
mode (`volcano.sh/vgpu-mode: mig` and its HAMi/gpuslice twins -> PodRequest.mig), and the
pod's gang (`gpuslice.io/gang`, `gpuslice.io/gang-size`, read apart from parse_pod: `gang_of`,
`gang_size_of`, `gang_problems`).
Does not: decide placement (allocator/) or talk to the API (webhook/ calls parse_pod).
Invariants: values come from resources.limits, else requests (both given must be equal);
one dialect per container; slices in pod order, init containers first; every SliceRequest
has exactly one of memory_mib / memory_percent.
Failure: RequestError listing EVERY problem, one line each, shaped
`container "<name>": <field>=<value>: <what is wrong>; <how to fix>`; never KeyError/TypeError.
Tests: tests/unit/test_dialects.py, tests/unit/test_dialects_properties.py
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import msgspec

from gpuslice import model
from gpuslice.errors import RequestError, brief
from gpuslice.quantity import QuantityError, parse_quantity

__all__ = [
    "ANNOTATIONS",
    "DIALECTS",
    "DNS_LABEL",
    "GANG_ANNOTATION",
    "MAX_GPUS_PER_CONTAINER",
    "MAX_MEMORY_MIB",
    "RESOURCE_NAMES",
    "Defaults",
    "gang_of",
    "gang_problems",
    "gang_size_of",
    "is_gpu_pod",
    "parse_pod",
]

# HAMi
GPU = "nvidia.com/gpu"
GPUMEM = "nvidia.com/gpumem"
GPUMEM_PERCENTAGE = "nvidia.com/gpumem-percentage"
GPUCORES = "nvidia.com/gpucores"
PRIORITY = "nvidia.com/priority"
# Volcano
VGPU_NUMBER = "volcano.sh/vgpu-number"
VGPU_MEMORY = "volcano.sh/vgpu-memory"
VGPU_CORES = "volcano.sh/vgpu-cores"
# GPU Manager
VCUDA_CORE = "tencent.com/vcuda-core"
VCUDA_MEMORY = "tencent.com/vcuda-memory"
VCUDA_MEMORY_UNIT_MIB = 256

DIALECTS: dict[str, tuple[str, ...]] = {
    "HAMi": (GPU, GPUMEM, GPUMEM_PERCENTAGE, GPUCORES, PRIORITY),
    "Volcano": (VGPU_NUMBER, VGPU_MEMORY, VGPU_CORES),
    "GPU Manager": (VCUDA_CORE, VCUDA_MEMORY),
}
RESOURCE_NAMES: frozenset[str] = frozenset(n for names in DIALECTS.values() for n in names)
_DIALECT_OF = {n: d for d, names in DIALECTS.items() for n in names}

USE_GPUTYPE = "nvidia.com/use-gputype"
NOUSE_GPUTYPE = "nvidia.com/nouse-gputype"
USE_GPUUUID = "nvidia.com/use-gpuuuid"
NOUSE_GPUUUID = "nvidia.com/nouse-gpuuuid"
NODE_POLICY = ("gpuslice.io/node-policy", "hami.io/node-scheduler-policy")
GPU_POLICY = ("gpuslice.io/gpu-policy", "hami.io/gpu-scheduler-policy")
# Pod-level: MIG instances instead of shared slices (docs/mig.md). Volcano's key first, HAMi's
# dynamic-MIG key, ours; any dialect's resources may go with it.
GPU_MODE = ("volcano.sh/vgpu-mode", "nvidia.com/vgpu-mode", "gpuslice.io/gpu-mode")
_MODES = {"mig": True, "hami-core": False, "shim": False}
# Pod-level: the pods of one job on a node whose processes stop and go together (the node agent
# hands their containers one gang directory, docs/node-agent.md). A DNS label, so that it names
# a host directory as it is; a tenant's annotation (webhook/admit.py TENANT_ANNOTATIONS).
GANG_ANNOTATION = "gpuslice.io/gang"
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")  # a gang; a namespace too
# How many pods the gang has: the scheduler places its first pod where all of them fit. At most
# the gang file's slots (native/src/compute/crew.h: 64 processes).
GANG_SIZE_ANNOTATION = "gpuslice.io/gang-size"
MAX_GANG_SIZE = 64
ANNOTATIONS: frozenset[str] = frozenset(
    (USE_GPUTYPE, NOUSE_GPUTYPE, USE_GPUUUID, NOUSE_GPUUUID, *NODE_POLICY, *GPU_POLICY,
     *GPU_MODE, GANG_ANNOTATION, GANG_SIZE_ANNOTATION)
)

MAX_GPUS_PER_CONTAINER = 16
MAX_MEMORY_MIB = 1024 * 1024  # 1 TiB per GPU: more is a unit mix-up, not a real GPU


class Defaults(msgspec.Struct, frozen=True):
    """What a request gets for a dimension it leaves out (configurable per deployment).

    Exactly one of memory_mib / memory_percent is set afterwards; giving memory_mib alone
    clears the default memory_percent=100 (giving both with another percent is an error).
    """

    memory_mib: int | None = None
    memory_percent: int | None = 100
    cores: int = 0

    def __post_init__(self) -> None:
        if self.memory_mib is not None and self.memory_percent == 100:
            msgspec.structs.force_setattr(self, "memory_percent", None)
        if (self.memory_mib is None) == (self.memory_percent is None):
            raise ValueError(
                f"defaults: memory_mib={self.memory_mib} memory_percent={self.memory_percent}: "
                "exactly one must be set; give either a default MiB or a default percent"
            )
        if self.memory_mib is not None and not 1 <= self.memory_mib <= MAX_MEMORY_MIB:
            raise ValueError(f"defaults: memory_mib={self.memory_mib}: outside "
                             f"1..{MAX_MEMORY_MIB}; give MiB per GPU, e.g. 4096")
        if self.memory_percent is not None and not 1 <= self.memory_percent <= 100:
            raise ValueError(f"defaults: memory_percent={self.memory_percent}: outside 1..100; "
                             "give a percent of the GPU's memory, e.g. 100")
        if not 0 <= self.cores <= model.EXCLUSIVE_CORES:
            raise ValueError(f"defaults: cores={self.cores}: outside 0..100; "
                             "give a percent of one GPU's compute (0 = best effort)")


_DEFAULTS = Defaults()


def _show(value: object) -> str:
    """A value as the user wrote it; strings that would read ambiguously get JSON quotes."""
    if isinstance(value, str):
        value = value[:100]
        plain = value and value.strip() == value and not any(c in value for c in ' ,"=:;')
        text = value if plain else json.dumps(value)
    elif isinstance(value, bool | None):
        text = json.dumps(value)
    else:
        text = brief(value)
    return text if len(text) <= 80 else text[:77] + "..."  # a denial message stays readable


class _Problems:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, where: str, field: str, value: object, what: str, fix: str) -> None:
        self.lines.append(f"{where}: {field}={_show(value)}: {what}; {fix}")


class _Reader:
    """Reads one container's values, recording problems under its `where` label."""

    def __init__(self, name: str, values: dict[str, Any], problems: _Problems) -> None:
        self.name, self.values, self.problems = name, values, problems
        self.where = f"container {json.dumps(name)}"
        self._start = len(problems.lines)

    @property
    def failed(self) -> bool:
        return len(self.problems.lines) > self._start

    def fail(self, name: str, what: str, fix: str) -> None:
        self.problems.add(self.where, name, self.values[name], what, fix)

    def integer(self, name: str, lo: int, hi: int | None, low_fix: str,
                high: tuple[str, str] = ("", "")) -> int | None:
        """The value of `name` as an int in lo..hi; None (and a problem) when it is not."""
        raw = self.values[name]
        try:
            value = parse_quantity(raw, field=name)
        except QuantityError:
            self.fail(name, "not a number", f"write a whole number, e.g. {max(lo, 1)}")
            return None
        if value.denominator != 1:
            self.fail(name, "must be a whole number", f"write an integer, e.g. {_round_up(value)}")
            return None
        number = value.numerator
        if number < lo:
            self.fail(name, "negative" if number < 0 else f"below {lo}", low_fix)
            return None
        if hi is not None and number > hi:
            self.fail(name, *high)
            return None
        return number

    def memory_mib(self, name: str) -> int | None:
        """MiB per GPU from a resource counted in MiB; catches 4Gi read as 4294967296 MiB."""
        mib = self.integer(name, 1, None, "give MiB per GPU, e.g. 4096 for 4 GiB")
        if mib is not None and mib > MAX_MEMORY_MIB:
            guess = f" (did you mean {mib >> 20}?)" if mib % (1 << 20) == 0 else ""
            self.fail(name, f"{mib} MiB is more than 1 TiB per GPU, probably a unit mix-up",
                      f"{name} is in MiB, not bytes: write e.g. 4096 for 4 GiB{guess}")
            return None
        return mib

    def build(self, kind: model.ContainerKind, defaults: Defaults, *, count: int,
              mib: int | None = None, percent: int | None = None, cores: int | None = None,
              priority: int = 0) -> model.SliceRequest:
        """The SliceRequest, with missing dimensions filled from `defaults` (DESIGN §3)."""
        cores = defaults.cores if cores is None else cores
        if mib is None and percent is None:
            if cores >= model.EXCLUSIVE_CORES:
                percent = 100  # a whole GPU with no memory given gets all of its memory
            else:
                mib, percent = defaults.memory_mib, defaults.memory_percent
        return model.SliceRequest(container=self.name, kind=kind, count=count, memory_mib=mib,
                                  memory_percent=percent, cores=cores,
                                  priority=model.Priority(priority))


def _round_up(value: Fraction) -> int:
    return max(1, -(-value.numerator // value.denominator))


def _count(r: _Reader, name: str) -> int | None:
    return r.integer(name, 0, MAX_GPUS_PER_CONTAINER,
                     "ask for 1 or more GPUs, or leave it out",
                     (f"more than {MAX_GPUS_PER_CONTAINER} GPUs in one container",
                      f"ask for at most {MAX_GPUS_PER_CONTAINER}"))


def _cores(r: _Reader, name: str, count_name: str) -> int | None:
    return r.integer(name, 0, model.EXCLUSIVE_CORES,
                     "give a percent of one GPU, 0 (best effort) to 100 (whole GPU)",
                     ("above 100 (100 = one whole GPU)", f"to use more, raise {count_name}"))


def _zero_count(r: _Reader, count_name: str, others: tuple[str, ...]) -> None:
    """count=0 asks for no GPU; next to memory/cores/priority it is a contradiction."""
    for other in (n for n in others if n in r.values):
        r.fail(count_name, f"asks for no GPU but {other} is set",
               f"raise {count_name} to 1 or more, or remove {other}")


def _hami(r: _Reader, kind: model.ContainerKind, d: Defaults) -> model.SliceRequest | None:
    v = r.values
    count = _count(r, GPU) if GPU in v else 1
    mib = r.memory_mib(GPUMEM) if GPUMEM in v else None
    percent = None
    if GPUMEM_PERCENTAGE in v:
        percent = r.integer(GPUMEM_PERCENTAGE, 1, 100, "give 1 to 100 percent of each GPU's memory",
                            ("above 100 percent of the GPU's memory", "give 1 to 100"))
    cores = _cores(r, GPUCORES, GPU) if GPUCORES in v else None
    priority = 0
    if PRIORITY in v:
        priority = r.integer(PRIORITY, 0, 1, "use 0 (high) or 1 (low)",
                             ("must be 0 (high) or 1 (low)", "use 0 or 1")) or 0
    if GPUMEM in v and GPUMEM_PERCENTAGE in v:
        r.fail(GPUMEM_PERCENTAGE, f"given together with {GPUMEM}",
               f"give memory either in MiB ({GPUMEM}) or in percent ({GPUMEM_PERCENTAGE})")
    if count == 0:
        _zero_count(r, GPU, (GPUMEM, GPUMEM_PERCENTAGE, GPUCORES, PRIORITY))
        return None
    if set(v) == {PRIORITY}:
        r.fail(PRIORITY, "priority alone asks for no GPU", f"add {GPU}: 1, or remove {PRIORITY}")
    if r.failed or count is None:
        return None
    return r.build(kind, d, count=count, mib=mib, percent=percent, cores=cores,
                   priority=priority)


def _volcano(r: _Reader, kind: model.ContainerKind, d: Defaults) -> model.SliceRequest | None:
    v = r.values
    count = _count(r, VGPU_NUMBER) if VGPU_NUMBER in v else 1
    mib = r.memory_mib(VGPU_MEMORY) if VGPU_MEMORY in v else None
    cores = _cores(r, VGPU_CORES, VGPU_NUMBER) if VGPU_CORES in v else None
    if count == 0:
        _zero_count(r, VGPU_NUMBER, (VGPU_MEMORY, VGPU_CORES))
        return None
    if r.failed or count is None:
        return None
    return r.build(kind, d, count=count, mib=mib, cores=cores)


def _gpu_manager(r: _Reader, kind: model.ContainerKind, d: Defaults) -> model.SliceRequest | None:
    """vcuda-core: <100 is a share of one GPU, k*100 is k whole GPUs; memory is a total."""
    v = r.values
    count, cores = 1, None
    if VCUDA_CORE in v:
        most = 100 * MAX_GPUS_PER_CONTAINER
        core = r.integer(VCUDA_CORE, 0, most,
                         "give 0-99 for a share of one GPU, or 100 per whole GPU",
                         (f"more than {MAX_GPUS_PER_CONTAINER} whole GPUs",
                          f"ask for at most {most}"))
        if core is None:
            return None
        if core >= 100 and core % 100:
            r.fail(VCUDA_CORE, "above 100 it must be a multiple of 100 (100 per whole GPU)",
                   f"use {core // 100 * 100} or {core // 100 * 100 + 100} for whole GPUs, "
                   "or below 100 for a share of one")
            return None
        count, cores = (core // 100, 100) if core >= 100 else (1, core)
    mib = None
    if VCUDA_MEMORY in v:
        units = r.integer(VCUDA_MEMORY, 1, None,
                          "give units of 256 MiB for the whole container, e.g. 16 for 4 GiB")
        if units is None:
            return None
        if units % count:
            r.fail(VCUDA_MEMORY, f"does not split evenly over {count} GPUs "
                   f"({VCUDA_CORE}={_show(v[VCUDA_CORE])}); it is the total for the container",
                   f"use a multiple of {count}")
            return None
        mib = units // count * VCUDA_MEMORY_UNIT_MIB
        if mib > MAX_MEMORY_MIB:
            r.fail(VCUDA_MEMORY, f"{mib} MiB per GPU is more than 1 TiB, probably a unit mix-up",
                   f"{VCUDA_MEMORY} counts units of 256 MiB: write e.g. 16 for 4 GiB")
            return None
    return r.build(kind, d, count=count, mib=mib, cores=cores)


_PARSERS = {"HAMi": _hami, "Volcano": _volcano, "GPU Manager": _gpu_manager}


def _resource_values(c: Mapping[str, Any], where: str, p: _Problems) -> dict[str, Any] | None:
    """Our resource names -> raw value (limits, else requests); None when malformed."""
    resources = c.get("resources")
    if resources is None:
        return {}
    if not isinstance(resources, Mapping):
        p.add(where, "resources", resources, "expected an object", "give limits/requests maps")
        return None
    sections: dict[str, Mapping[str, Any]] = {}
    for section in ("limits", "requests"):
        got = resources.get(section)
        if got is None:
            continue
        if not isinstance(got, Mapping):
            p.add(where, f"resources.{section}", got, "expected an object",
                  "map resource names to quantities")
            return None
        sections[section] = got
    limits, requests = sections.get("limits", {}), sections.get("requests", {})
    values: dict[str, Any] = {}
    differ = False
    for name in sorted((set(limits) | set(requests)) & RESOURCE_NAMES):
        values[name] = limits[name] if name in limits else requests[name]
        if name in limits and name in requests and not _same(limits[name], requests[name]):
            p.add(where, name, limits[name],
                  f"resources.limits and resources.requests differ ({_show(limits[name])} vs "
                  f"{_show(requests[name])}); Kubernetes requires them equal",
                  "give the same value in both, or only in limits")
            differ = True
    return None if differ else values


def _same(a: object, b: object) -> bool:
    try:
        return parse_quantity(a, field="a") == parse_quantity(b, field="b")  # type: ignore[arg-type]
    except QuantityError:
        return a == b


def _container(c: object, kind: model.ContainerKind, label: str, names: set[str],
               defaults: Defaults, p: _Problems) -> model.SliceRequest | None:
    if not isinstance(c, Mapping):
        p.add("pod", label, c, "expected a container object", "give each container as a mapping")
        return None
    name = c.get("name")
    if not isinstance(name, str) or not name:
        p.add("pod", f"{label}.name", name, "every container needs a name",
              "give the container a name")
        return None
    where = f"container {json.dumps(name)}"
    if name in names:
        p.add(where, "name", name, "two containers share this name",
              "give every container its own name")
    names.add(name)
    values = _resource_values(c, where, p)
    if not values:
        return None
    dialects = sorted({_DIALECT_OF[n] for n in values}, key=list(DIALECTS).index)
    if len(dialects) > 1:
        p.add(where, "resources", ",".join(values),
              f"mixes dialects ({' and '.join(dialects)}) in one container",
              f"keep only the {' or only the '.join(dialects)} resources")
        return None
    return _PARSERS[dialects[0]](_Reader(name, values, p), kind, defaults)


def _list_annotation(ann: Mapping[str, Any], key: str, p: _Problems) -> tuple[str, ...]:
    if key not in ann:
        return ()
    raw = ann[key]
    items = raw.split(",") if isinstance(raw, str) else None
    if items is None or any(not i.strip() for i in items):
        p.add("pod", f"annotation {key}", raw, "empty item in the comma-separated list",
              'separate names with single commas, e.g. "A100,H100"')
        return ()
    return tuple(i.strip() for i in items)


def _policy(ann: Mapping[str, Any], keys: tuple[str, str], allowed: tuple[str, ...], level: str,
            p: _Problems) -> str | None:
    chosen: dict[str, str] = {}
    for key in keys:
        if key not in ann:
            continue
        raw = ann[key]
        value = raw.strip() if isinstance(raw, str) else raw
        if value not in allowed:
            p.add("pod", f"annotation {key}", raw, f"unknown {level} policy",
                  f"use one of {', '.join(allowed)}")
        else:
            chosen[key] = value
    if len(set(chosen.values())) > 1:
        p.add("pod", f"annotation {keys[1]}", chosen[keys[1]],
              f"disagrees with {keys[0]}={chosen[keys[0]]}",
              "give one of the two, or the same value")
        return None
    return next(iter(chosen.values()), None)


def _mode(ann: Mapping[str, Any], p: _Problems) -> bool:
    """True when the pod asks for MIG instances; every mode annotation given must agree."""
    chosen: dict[str, bool] = {}
    for key in GPU_MODE:
        if key not in ann:
            continue
        raw = ann[key]
        value = raw.strip().lower() if isinstance(raw, str) else raw
        if value not in _MODES:
            p.add("pod", f"annotation {key}", raw, "unknown GPU mode",
                  "use mig (a MIG instance) or hami-core (a shared slice, the default)")
        else:
            chosen[key] = _MODES[value]
    if len(set(chosen.values())) > 1:
        first = next(iter(chosen))
        other = next(k for k in chosen if chosen[k] != chosen[first])
        p.add("pod", f"annotation {other}", ann[other], f"disagrees with {first}="
              f"{ann[first]}", "give one mode annotation, or the same value in each")
    return any(chosen.values())


def _annotations(pod: object) -> Mapping[str, Any]:
    meta = pod.get("metadata") if isinstance(pod, Mapping) else None
    ann = meta.get("annotations") if isinstance(meta, Mapping) else None
    return ann if isinstance(ann, Mapping) else {}


def gang_of(pod: object) -> str:
    """The pod's gang (`gpuslice.io/gang`), or "" when it names none or an invalid one (the
    webhook refuses those: gang_problems). Never raises."""
    got = _annotations(pod).get(GANG_ANNOTATION)
    return got if isinstance(got, str) and DNS_LABEL.fullmatch(got) else ""


def gang_size_of(pod: object) -> int:
    """How many pods the pod's gang has (`gpuslice.io/gang-size`), or 0 when it names no gang,
    no size or an invalid one (the webhook refuses those: gang_problems). Never raises."""
    got = _annotations(pod).get(GANG_SIZE_ANNOTATION)
    if not gang_of(pod) or not isinstance(got, str) or not (got.isascii() and got.isdigit()):
        return 0
    size = int(got)
    return size if 1 <= size <= MAX_GANG_SIZE else 0


def gang_problems(pod: object) -> list[str]:
    """What is wrong with the pod's `gpuslice.io/gang` and `gpuslice.io/gang-size`, one line
    per problem (none: [])."""
    ann = _annotations(pod)
    p = _Problems()
    if GANG_ANNOTATION in ann and not gang_of(pod):
        p.add("pod", f"annotation {GANG_ANNOTATION}", ann[GANG_ANNOTATION],
              "must be a DNS label (lowercase letters, digits and '-', at most 63, starting and "
              "ending with a letter or digit)", "name the job's pods alike, e.g. the job's name")
    elif GANG_SIZE_ANNOTATION in ann and GANG_ANNOTATION not in ann:
        p.add("pod", f"annotation {GANG_SIZE_ANNOTATION}", ann[GANG_SIZE_ANNOTATION],
              "sizes a gang, but the pod names none", f"add {GANG_ANNOTATION}: <job>, or "
              f"remove {GANG_SIZE_ANNOTATION}")
    elif GANG_SIZE_ANNOTATION in ann and not gang_size_of(pod):
        p.add("pod", f"annotation {GANG_SIZE_ANNOTATION}", ann[GANG_SIZE_ANNOTATION],
              f"must be a whole number from 1 to {MAX_GANG_SIZE}",
              "give the number of the job's pods, e.g. \"4\"")
    return p.lines


def _filter(ann: Mapping[str, Any], p: _Problems) -> model.GPUFilter:
    f = {k: _list_annotation(ann, k, p) for k in (USE_GPUTYPE, NOUSE_GPUTYPE, USE_GPUUUID,
                                                   NOUSE_GPUUUID)}
    for use, nouse, fold in ((USE_GPUTYPE, NOUSE_GPUTYPE, str.casefold),
                             (USE_GPUUUID, NOUSE_GPUUUID, str)):
        both = {fold(x) for x in f[use]} & {fold(x) for x in f[nouse]}
        for item in sorted(both):
            p.add("pod", f"annotation {nouse}", ann[nouse],
                  f"excludes {item}, which {use} asks for", "name it in only one of the two")
    return model.GPUFilter(use_types=f[USE_GPUTYPE], nouse_types=f[NOUSE_GPUTYPE],
                           use_uuids=f[USE_GPUUUID], nouse_uuids=f[NOUSE_GPUUUID])


def _list(spec: Mapping[str, Any], key: str, p: _Problems, required: bool) -> list[Any]:
    got = spec.get(key)
    if got is None and not required:
        return []
    if not isinstance(got, list) or (required and not got):
        p.add("pod", f"spec.{key}", got, "expected a non-empty list of containers",
              "give the pod's containers as a list")
        return []
    return got


def parse_pod(pod: Mapping[str, Any], defaults: Defaults = _DEFAULTS) -> model.PodRequest:
    """Translate a pod (as the API returns it) into a PodRequest.

    Raises RequestError listing every problem. A missing namespace reads as "default", a
    missing name as metadata.generateName (admission sees pods before they are named).
    """
    if not isinstance(pod, Mapping):
        raise RequestError(f"pod: {_show(pod)}: expected a Pod object; pass the pod as a mapping")
    p = _Problems()
    meta = pod.get("metadata", {})
    if not isinstance(meta, Mapping):
        p.add("pod", "metadata", meta, "expected an object", "give the pod's metadata")
        meta = {}
    ann = meta.get("annotations") or {}
    if not isinstance(ann, Mapping):
        p.add("pod", "metadata.annotations", ann, "expected an object",
              "map annotation names to strings")
        ann = {}
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        p.add("pod", "spec", spec, "missing or not an object",
              "give the pod a spec with containers")
    names: set[str] = set()
    slices: list[model.SliceRequest] = []
    for key, required in (("initContainers", False), ("containers", True)):
        for i, c in enumerate(_list(spec, key, p, required) if isinstance(spec, Mapping) else []):
            kind = model.ContainerKind.APP
            if key == "initContainers":
                sidecar = isinstance(c, Mapping) and c.get("restartPolicy") == "Always"
                kind = model.ContainerKind.SIDECAR if sidecar else model.ContainerKind.INIT
            got = _container(c, kind, f"spec.{key}[{i}]", names, defaults, p)
            if got is not None:
                slices.append(got)
    request_filter = _filter(ann, p)
    node_policy = _policy(ann, NODE_POLICY, model.NODE_POLICIES, "node", p)
    gpu_policy = _policy(ann, GPU_POLICY, model.GPU_POLICIES, "GPU", p)
    mig = _mode(ann, p)
    if p.lines:
        raise RequestError(p.lines)
    name = meta.get("name") or meta.get("generateName") or ""
    return model.PodRequest(
        namespace=str(meta.get("namespace") or "default"), name=str(name),
        uid=str(meta.get("uid") or ""), slices=tuple(slices), filter=request_filter,
        node_policy=node_policy, gpu_policy=gpu_policy, mig=mig,
    )


def is_gpu_pod(pod: Mapping[str, Any]) -> bool:
    """True when any container names any resource of any dialect (never raises)."""
    spec = pod.get("spec") if isinstance(pod, Mapping) else None
    if not isinstance(spec, Mapping):
        return False
    for key in ("initContainers", "containers"):
        containers = spec.get(key)
        for c in containers if isinstance(containers, list) else ():
            resources = c.get("resources") if isinstance(c, Mapping) else None
            if not isinstance(resources, Mapping):
                continue
            for section in ("limits", "requests"):
                got = resources.get(section)
                if isinstance(got, Mapping) and any(n in RESOURCE_NAMES for n in got):
                    return True
    return False

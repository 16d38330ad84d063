"""MIG geometry, pure: profiles, their legal placements, and where a new instance may go.

Owns: `Profile` / `Instance` / `MigGPU` / `MigSlice` (the MIG facts the inventory and the
assignment carry), the default profile tables of A100 40/80GB, H100 80GB and H200 141GB
(`catalog_for`), the geometry config (`Geometry`: allowed profile names per GPU model), and the
placement arithmetic: `profile_for` (smallest profile that holds a request), `free_starts`,
`choose_start` (the start that keeps most placements open), `legal` (a set of slices that MIG
hardware can hold at once).
Does not: choose GPUs or nodes (allocator/mig.py) or touch NVML (node/mig.py, node/nvml.py).
Model (NVIDIA MIG user guide, "Supported MIG Profiles"): a GPU has 8 memory slices; a profile
spans `size` consecutive slices from one of its allowed `starts`; instances never overlap.
Invariants: every table profile's placements lie inside the 8 slices; values are frozen.
Tests: tests/unit/test_mig_geometry.py, tests/unit/test_mig_geometry_properties.py
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import msgspec

__all__ = ["MEMORY_SLICES", "Geometry", "Instance", "MigGPU", "MigSlice", "Profile",
           "catalog_for", "check_gpu", "choose_start", "free_starts", "legal", "overlaps",
           "profile_for"]

MEMORY_SLICES = 8
COMPUTE_SLICES = 7


class Profile(msgspec.Struct, frozen=True, kw_only=True):
    """A GPU instance profile as NVML describes it (nvmlDeviceGetGpuInstanceProfileInfo and
    nvmlDeviceGetGpuInstancePossiblePlacements)."""

    name: str  # "3g.40gb" (NVML's name without its "MIG " prefix)
    compute: int  # compute slices (the "3" of 3g), of 7
    memory_mib: int  # memory of one instance
    size: int  # memory slices an instance spans (placement size)
    starts: tuple[int, ...]  # allowed placement starts


class Instance(msgspec.Struct, frozen=True, kw_only=True):
    """A GPU instance that exists on the GPU (published by the node agent)."""

    profile: str  # may be outside the geometry (an instance an administrator made)
    start: int
    size: int  # memory slices it spans
    uuid: str = ""  # MIG-... of its compute instance; "" when it has none yet


class MigGPU(msgspec.Struct, frozen=True, kw_only=True):
    """A GPU in MIG mode: the profiles pods may get (the node's geometry) and what exists."""

    profiles: tuple[Profile, ...]
    instances: tuple[Instance, ...] = ()

    def profile(self, name: str) -> Profile | None:
        return next((p for p in self.profiles if p.name == name), None)

    def free_placements(self) -> dict[str, list[int]]:
        """Profile name -> starts where a new instance fits beside the existing ones."""
        taken = [(i.start, i.size) for i in self.instances]
        return {p.name: free_starts(p, taken) for p in self.profiles}


class MigSlice(msgspec.Struct, frozen=True, kw_only=True):
    """Where one container's MIG instance goes on its GPU (written by the extender's bind)."""

    profile: str
    start: int


def _table(gb: Mapping[str, float], sizes: Mapping[str, tuple[int, int, tuple[int, ...]]]
           ) -> tuple[Profile, ...]:
    """Profiles from names; memory is a lower bound of the real size: NVIDIA rounds the name's
    GB to the nearest, so an instance holds at least (GB - 0.5) * 10^9 bytes. The node agent
    publishes NVML's exact memorySizeMB instead (these tables serve the fake and simulator)."""
    out = []
    for name, (compute, size, starts) in sizes.items():
        mib = int((gb[name] - 0.5) * 1e9) >> 20
        out.append(Profile(name=name, compute=compute, memory_mib=mib, size=size, starts=starts))
    return tuple(out)


_ONE = (1, 1, (0, 1, 2, 3, 4, 5, 6))  # 1g: one memory slice, any of the first seven
_ONE_X2 = (1, 2, (0, 2, 4, 6))  # 1g with two memory slices (NVML 1_SLICE_REV2)
_TWO = (2, 2, (0, 2, 4))
_THREE = (3, 4, (0, 4))
_FOUR = (4, 4, (0,))
_SEVEN = (7, 8, (0,))


def _family(names: Sequence[str]) -> tuple[Profile, ...]:
    """The A100/H100/H200 layout, names scaled to the board's memory per slice."""
    shapes = (_ONE, _ONE_X2, _TWO, _THREE, _FOUR, _SEVEN)
    return _table({n: float(n.split(".")[1].removesuffix("gb")) for n in names},
                  dict(zip(names, shapes, strict=True)))


CATALOG: dict[str, tuple[Profile, ...]] = {
    "A100-40GB": _family(("1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb")),
    "A100-80GB": _family(("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")),
    "H100-80GB": _family(("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")),
    "H100-94GB": _family(("1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb")),
    "H200-141GB": _family(("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb",
                               "7g.141gb")),
}
"""Default profiles per board (media-extension "+me" profiles left out: one per GPU, a rule
of their own). Keys: family + memory class, see `catalog_for`."""


def catalog_key(model: str, memory_mib: int) -> str | None:
    """The CATALOG key of an NVML product name and memory size, or None (no MIG, or unknown)."""
    gib = memory_mib / 1024
    for family in ("A100", "A800", "H100", "H800", "H200"):
        if family not in model or "GH200" in model:
            continue
        base = {"A800": "A100", "H800": "H100"}.get(family, family)
        if base == "A100":
            return "A100-40GB" if gib < 60 else "A100-80GB"
        if base == "H100":
            return "H100-94GB" if gib > 85 else "H100-80GB"
        return "H200-141GB"
    return None


def catalog_for(model: str, memory_mib: int) -> tuple[Profile, ...]:
    key = catalog_key(model, memory_mib)
    return CATALOG[key] if key else ()


class Geometry(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Which profiles pods may get, per GPU model (node agent config `mig.profiles`: a model
    substring -> profile names; the longest matching key wins; no match: every profile)."""

    profiles: dict[str, tuple[str, ...]] = msgspec.field(default_factory=dict)

    def allowed(self, model: str, available: Iterable[Profile]) -> tuple[Profile, ...]:
        """`available` (what the GPU offers) cut to this geometry's names for `model`."""
        key = max((k for k in self.profiles if k.casefold() in model.casefold()), key=len,
                  default=None)
        offered = tuple(available)
        if key is None:
            return offered
        names = self.profiles[key]
        return tuple(p for p in offered if p.name in names)

    def unknown(self, model: str, available: Iterable[Profile]) -> list[str]:
        """Names the config allows for `model` that the GPU does not offer (config mistakes)."""
        key = max((k for k in self.profiles if k.casefold() in model.casefold()), key=len,
                  default=None)
        offered = {p.name for p in available}
        return [] if key is None else [n for n in self.profiles[key] if n not in offered]


def compute_for(cores: int) -> int:
    """Compute slices that give at least `cores` percent of the GPU (0 -> 1)."""
    return max(1, math.ceil(cores * COMPUTE_SLICES / 100))


def profile_for(profiles: Iterable[Profile], memory_mib: int, cores: int = 0) -> Profile | None:
    """The smallest profile with at least `memory_mib` and `cores` percent of the compute
    (smallest: fewest memory slices, then compute slices, then memory)."""
    need = compute_for(cores)
    fits = [p for p in profiles if p.memory_mib >= memory_mib and p.compute >= need]
    return min(fits, key=lambda p: (p.size, p.compute, p.memory_mib, p.name), default=None)


def overlaps(a_start: int, a_size: int, b_start: int, b_size: int) -> bool:
    return a_start < b_start + b_size and b_start < a_start + a_size


def free_starts(profile: Profile, taken: Iterable[tuple[int, int]]) -> list[int]:
    """Starts of `profile` that overlap none of the (start, size) spans in `taken`."""
    spans = list(taken)
    return [s for s in profile.starts
            if not any(overlaps(s, profile.size, t, n) for t, n in spans)]


def _open_placements(profiles: Sequence[Profile], taken: list[tuple[int, int]]) -> int:
    return sum(len(free_starts(p, taken)) for p in profiles)


def choose_start(profile: Profile, profiles: Sequence[Profile],
                 taken: Iterable[tuple[int, int]]) -> int | None:
    """The free start of `profile` that leaves most placements of every profile open (least
    fragmentation), the lowest on a tie; None when none is free."""
    spans = list(taken)
    starts = free_starts(profile, spans)
    if not starts:
        return None
    return max(starts, key=lambda s: (_open_placements(profiles, [*spans, (s, profile.size)]),
                                      -s))


def check_gpu(gpu: MigGPU) -> str | None:
    """None when a published MIG GPU is consistent; else what is wrong: profiles named twice or
    with placements outside the 8 slices, instances outside them or overlapping."""
    seen: set[str] = set()
    for p in gpu.profiles:
        if p.name in seen:
            return f"profile {p.name} listed twice"
        seen.add(p.name)
        if not 1 <= p.compute <= COMPUTE_SLICES or not 1 <= p.size <= MEMORY_SLICES:
            return f"profile {p.name}: compute {p.compute} / size {p.size} outside 1..7 / 1..8"
        if not p.starts or any(not 0 <= s <= MEMORY_SLICES - p.size for s in p.starts):
            return (f"profile {p.name}: starts {list(p.starts)} must be non-empty and within "
                    f"0..{MEMORY_SLICES - p.size}")
    spans: list[Instance] = []
    for i in gpu.instances:
        if not 1 <= i.size <= MEMORY_SLICES or not 0 <= i.start <= MEMORY_SLICES - i.size:
            return f"instance {i.profile}@{i.start} (size {i.size}) lies outside the 8 slices"
        for o in spans:
            if overlaps(i.start, i.size, o.start, o.size):
                return f"instance {i.profile}@{i.start} overlaps {o.profile}@{o.start}"
        spans.append(i)
    return None


def legal(profiles: Sequence[Profile], slices: Iterable[MigSlice]) -> str | None:
    """None when MIG hardware can hold all `slices` at once on a GPU offering `profiles`; else
    what is wrong (unknown profile, a start the profile may not take, two overlapping)."""
    by_name = {p.name: p for p in profiles}
    spans: list[tuple[int, int, str]] = []
    for s in slices:
        p = by_name.get(s.profile)
        if p is None:
            return f"profile {s.profile} is not offered (offered: {', '.join(by_name) or 'none'})"
        if s.start not in p.starts:
            return (f"{s.profile} may start at slice {', '.join(map(str, p.starts))}, "
                    f"not {s.start}")
        for start, size, name in spans:
            if overlaps(s.start, p.size, start, size):
                return f"{s.profile}@{s.start} overlaps {name}@{start}"
        spans.append((s.start, p.size, s.profile))
    return None

"""Allocates pending ResourceClaims the way kube-scheduler v1.36 does (DRAConsumableCapacity on),
for tests and the DRA benchmark when no real kube-scheduler is at hand.
Owns: `plan()` (PURE: one claim + the published devices + what is already consumed -> its
status.allocation, or None when nothing fits) and `StandInAllocator` (lists slices, classes
and claims; allocates the pending ones in creation order; writes status through /status, 409
-> re-read; adds the delete-protection finalizer as the scheduler does).
Rules, from dra-samples/returned: a shareable device (allowMultipleAllocations) gives a share
with consumedCapacity for EVERY capacity of the device (requested, else requestPolicy.default,
else the full value; rounded UP onto validRange min + n*step or the next validValues entry)
and a fresh shareID; the sums never pass a capacity's value. A device without it is taken
whole (no consumedCapacity, no shareID), only when nothing else holds it; capacity requests
then only filter. One request never takes one device twice; distinctAttribute and
matchAttribute constraints hold; all results of a claim are on one node.
Not modelled: pods (claims are allocated on their own; reservedFor is left to the caller),
CEL other than `device.driver == "..."`, firstAvailable, admin access, taints, scoring (first
node in name order that fits).
Tests: tests/integration/dra/test_dra_e2e_allocator.py"""

from __future__ import annotations

import math
import re
import uuid
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

from gpuslice.quantity import parse_quantity

Obj = dict[str, Any]
DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"
_DRIVER_CEL = re.compile(r'^\s*device\.driver\s*==\s*"([^"]+)"\s*$')
_BINARY = re.compile(r"[KMGTPE]i$")


class AllocatorError(Exception):
    """A claim or class the stand-in cannot read (the message says which and why)."""


@dataclass(frozen=True)
class Device:
    driver: str
    pool: str
    node: str
    name: str
    obj: Obj  # the slice's device entry

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.name)

    @property
    def shareable(self) -> bool:
        return bool(self.obj.get("allowMultipleAllocations"))

    @property
    def capacity(self) -> dict[str, Obj]:
        return self.obj.get("capacity") or {}


def devices_of(slices: Iterable[Obj]) -> list[Device]:
    """Every device of the newest generation of each pool, in slice then device order."""
    newest: dict[tuple[str, str], int] = {}
    for s in slices:
        spec = s.get("spec") or {}
        key = (spec.get("driver", ""), (spec.get("pool") or {}).get("name", ""))
        newest[key] = max(newest.get(key, 0), int((spec.get("pool") or {}).get("generation", 0)))
    out = []
    for s in slices:
        spec = s.get("spec") or {}
        pool = spec.get("pool") or {}
        if newest[(spec.get("driver", ""), pool.get("name", ""))] != pool.get("generation", 0):
            continue
        out += [Device(spec["driver"], pool["name"], spec.get("nodeName", ""), d["name"], d)
                for d in spec.get("devices") or []]
    return out


def format_quantity(value: Fraction, binary: bool) -> str:
    """The API server's canonical spelling: 30Gi, 1500Mi, 40, 2500m."""
    if binary and value.denominator == 1 and value > 0:
        n, suffix = int(value), ""
        for s in ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"):
            if n % 1024:
                break
            n, suffix = n // 1024, s
        return f"{n}{suffix}"
    for scale, suffix in ((Fraction(1, 1000), "m"), (Fraction(1, 10**6), "u"),
                          (Fraction(1, 10**9), "n")):
        if value.denominator != 1 and (value / scale).denominator == 1:
            return f"{value / scale}{suffix}"
    n = math.ceil(value)
    for suffix in ("", "k", "M", "G", "T", "P", "E"):
        if n % 1000 or n == 0 or suffix == "E":
            return f"{n}{suffix}"
        n //= 1000
    raise AssertionError("unreachable")


def consumed(capacity: Obj, requested: Any) -> Fraction | None:
    """What a share of one capacity consumes for `requested` (None: not requested), or None
    when the request cannot be met (above validRange max or every validValues entry)."""
    value = parse_quantity(capacity["value"])
    policy = capacity.get("requestPolicy")
    if requested is None:
        default = (policy or {}).get("default")
        return parse_quantity(default) if default is not None else value
    want = parse_quantity(requested)
    if not policy:
        return want
    if policy.get("validValues"):
        fits = [v for v in map(parse_quantity, policy["validValues"]) if v >= want]
        return min(fits) if fits else None
    valid = policy.get("validRange")
    if valid:
        low = parse_quantity(valid["min"])
        step = parse_quantity(valid["step"]) if valid.get("step") else None
        if want < low:
            want = low
        elif step:
            want = low + math.ceil((want - low) / step) * step
        if valid.get("max") is not None and want > parse_quantity(valid["max"]):
            return None
    return want


@dataclass
class Usage:
    """What allocated claims hold: shares per device and capacity, and devices held whole."""

    shares: dict[tuple[str, str, str], dict[str, Fraction]]
    whole: set[tuple[str, str, str]]

    @classmethod
    def of(cls, claims: Iterable[Obj]) -> Usage:
        usage = cls(defaultdict(lambda: defaultdict(Fraction)), set())
        for claim in claims:
            for r in results(claim):
                key = (r["driver"], r["pool"], r["device"])
                if r.get("consumedCapacity") is None:
                    usage.whole.add(key)
                for name, q in (r.get("consumedCapacity") or {}).items():
                    usage.shares[key][name] += parse_quantity(q)
        return usage

    def add(self, device: Device, share: Mapping[str, Fraction] | None) -> None:
        if share is None:
            self.whole.add(device.key)
        for name, q in (share or {}).items():
            self.shares[device.key][name] += q

    def share_fits(self, device: Device, share: Mapping[str, Fraction]) -> bool:
        if device.key in self.whole:
            return False
        held = self.shares.get(device.key, {})
        return all(held.get(n, 0) + q <= parse_quantity(device.capacity[n]["value"])
                   for n, q in share.items())

    def free(self, device: Device) -> bool:
        return device.key not in self.whole and not any(self.shares.get(device.key, {}).values())


def results(claim: Obj) -> list[Obj]:
    return ((((claim.get("status") or {}).get("allocation") or {}).get("devices") or {})
            .get("results") or [])


def _class_driver(classes: Mapping[str, Obj], name: str, claim: str) -> str | None:
    cls = classes.get(name)
    if cls is None:
        raise AllocatorError(f"claim {claim}: DeviceClass {name!r} does not exist")
    drivers = set()
    for sel in (cls.get("spec") or {}).get("selectors") or []:
        cel = (sel.get("cel") or {}).get("expression", "")
        found = _DRIVER_CEL.match(cel)
        if not found:
            raise AllocatorError(f"DeviceClass {name}: the stand-in only reads "
                                 f'`device.driver == "..."`, not {cel!r}')
        drivers.add(found.group(1))
    if len(drivers) > 1:
        return None  # no device has two drivers
    return next(iter(drivers), "")


def _share(device: Device, requests: Mapping[str, Any]) -> dict[str, Fraction] | None:
    share = {}
    for name, cap in device.capacity.items():
        q = consumed(cap, requests.get(name))
        if q is None:
            return None
        share[name] = q
    return share


def _filter_only(device: Device, requests: Mapping[str, Any]) -> bool:
    return all(name in device.capacity and
               parse_quantity(device.capacity[name]["value"]) >= parse_quantity(q)
               for name, q in requests.items())


def _attribute(device: Device, name: str) -> Any:
    """A constraint's attribute: `<driver>/uuid` is the driver's own `uuid`."""
    domain, _, short = name.rpartition("/")
    attrs = device.obj.get("attributes") or {}
    value = attrs.get(name) or (attrs.get(short) if domain == device.driver else None)
    return None if value is None else tuple(sorted(value.items()))


def plan(claim: Obj, devices: list[Device], usage: Usage, classes: Mapping[str, Obj]
         ) -> Obj | None:
    """status.allocation for `claim`, or None when it does not fit on any one node. `usage` is
    updated with what the allocation holds."""
    ident = f"{claim['metadata'].get('namespace', '')}/{claim['metadata']['name']}"
    spec = (claim.get("spec") or {}).get("devices") or {}
    requests = []
    for req in spec.get("requests") or []:
        exact = req.get("exactly")
        if exact is None:
            raise AllocatorError(f"claim {ident}: request {req.get('name')!r} is not `exactly` "
                                 "(firstAvailable is not modelled by the stand-in)")
        driver = _class_driver(classes, exact["deviceClassName"], ident)
        requests.append((req["name"], driver, exact))
    for node in sorted({d.node for d in devices}):
        picked = _search(requests, [d for d in devices if d.node == node], usage,
                         spec.get("constraints") or [])
        if picked is None:
            continue
        out = []
        for request, device, share in picked:
            usage.add(device, share)
            result: Obj = {"request": request, "driver": device.driver, "pool": device.pool,
                           "device": device.name}
            if share is not None:
                result["consumedCapacity"] = {
                    n: format_quantity(q, bool(_BINARY.search(str(device.capacity[n]["value"]))))
                    for n, q in share.items()}
                result["shareID"] = str(uuid.uuid4())
            out.append(result)
        return {"allocationTimestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "devices": {"results": out},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}
    return None


Pick = tuple[str, Device, dict[str, Fraction] | None]


def _search(requests: list[tuple[str, str | None, Obj]], devices: list[Device], usage: Usage,
            constraints: list[Obj]) -> list[Pick] | None:
    """Depth-first over requests and their count, backtracking as the scheduler's allocator."""

    def request(at: int, picked: list[Pick]) -> list[Pick] | None:
        if at == len(requests):
            return picked
        name, driver, exact = requests[at]
        wanted = (exact.get("capacity") or {}).get("requests") or {}
        candidates = [d for d in devices if driver is not None and d.driver == (driver or
                                                                                 d.driver)]
        count = len(candidates) if exact.get("allocationMode") == "All" else int(
            exact.get("count", 1))
        return choose(at, name, wanted, candidates, count, 0, picked)

    def choose(at: int, name: str, wanted: Mapping[str, Any], candidates: list[Device],
               left: int, start: int, picked: list[Pick]) -> list[Pick] | None:
        if left == 0:
            return request(at + 1, picked)
        for i in range(start, len(candidates)):
            fits, share = _fits(candidates[i], wanted, usage, picked)
            trial = [*picked, (name, candidates[i], share)]
            if fits and _constraints_hold(constraints, trial):
                found = choose(at, name, wanted, candidates, left - 1, i + 1, trial)
                if found is not None:
                    return found
        return None

    return request(0, [])


def _fits(device: Device, wanted: Mapping[str, Any], usage: Usage, picked: list[Pick]
          ) -> tuple[bool, dict[str, Fraction] | None]:
    mine = [share for _, d, share in picked if d.key == device.key]
    if not device.shareable:
        return (not mine and usage.free(device) and _filter_only(device, wanted)), None
    share = _share(device, wanted)
    if share is None:
        return False, None
    total = {n: q + sum((s or {}).get(n, 0) for s in mine) for n, q in share.items()}
    return usage.share_fits(device, total), share


def _constraints_hold(constraints: list[Obj], picked: list[Pick]) -> bool:
    for c in constraints:
        names = set(c.get("requests") or [])
        values = [_attribute(d, c.get("distinctAttribute") or c.get("matchAttribute", ""))
                  for r, d, _ in picked if not names or r in names]
        if c.get("distinctAttribute") and len(set(values)) != len(values):
            return False
        if c.get("matchAttribute") and (None in values or len(set(values)) > 1):
            return False
    return True


class StandInAllocator:
    """Allocates every pending claim once per `allocate_pending()` call, over the API."""

    name = "stand-in (tests/kubeapi/dra_allocator.py)"

    def __init__(self, client: Any, *, nodes: Collection[str] | None = None,
                 namespace: str = "*") -> None:
        """`client`: a lightkube AsyncClient; `nodes`, `namespace`: allocate only claims of that
        namespace, on slices of those nodes (a real cluster shared with other tests)."""
        self.client = client
        self.nodes = None if nodes is None else set(nodes)
        self.namespace = namespace

    async def allocate_pending(self) -> tuple[int, int]:
        """(claims allocated now, claims left pending)."""
        from lightkube.resources.resource_v1 import DeviceClass, ResourceClaim, ResourceSlice
        from lightkube.types import PatchType

        from gpuslice.kube.client import dict_view

        claims_view = dict_view(ResourceClaim)
        slices = [dict(s) async for s in self.client.list(dict_view(ResourceSlice))
                  if self.nodes is None or s["spec"].get("nodeName") in self.nodes]
        classes = {c["metadata"]["name"]: dict(c)
                   async for c in self.client.list(dict_view(DeviceClass))}
        claims = [dict(c) async for c in self.client.list(claims_view, namespace="*")]
        usage, devices = Usage.of(claims), devices_of(slices)
        pending = sorted((c for c in claims if not (c.get("status") or {}).get("allocation")
                          and self.namespace in ("*", c["metadata"]["namespace"])),
                         key=lambda c: (c["metadata"].get("creationTimestamp", ""),
                                        int(c["metadata"].get("resourceVersion", 0))))
        done = 0
        for claim in pending:
            allocation = plan(claim, devices, usage, classes)
            if allocation is None:
                continue
            meta = claim["metadata"]
            finalizers = [f for f in meta.get("finalizers") or [] if f != DELETE_PROTECTION]
            await self.client.patch(
                claims_view, meta["name"], namespace=meta["namespace"],
                obj={"metadata": {"finalizers": [*finalizers, DELETE_PROTECTION]}},
                patch_type=PatchType.MERGE)
            await self.client.patch(
                ResourceClaim.Status, meta["name"], namespace=meta["namespace"],
                obj={"status": {"allocation": allocation}}, patch_type=PatchType.MERGE)
            done += 1
        return done, len(pending) - done

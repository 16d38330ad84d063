"""PURE: a GPU pod written for HAMi, Volcano or GPU Manager -> the same request as DRA
ResourceClaims, for node pools whose GPUs kube-scheduler allocates itself (docs/dra.md, "Pods
written for HAMi, Volcano or GPU Manager").

Owns: which path a pod takes (`route`: its nodeSelector `gpuslice.io/gpu-path`, else its
namespace's label of that name, else the configured default: the node label node/path.py reads,
so a pool and its workloads name the path alike); the claim spec of each GPU container
(`claim_spec`: count = that many distinct GPUs; memory in MiB, or a percent of each GPU's
published memory as one `firstAvailable` subrequest per memory size the cluster publishes;
cores; type and UUID filters as CEL selectors on the device attributes; priority as the
driver's opaque config, which the kubelet plugin reads); and the pod's patch (`translate`):
one pod claim per GPU container from a ResourceClaimTemplate named by the hash of its spec (so
kube-controller-manager makes a claim owned by the pod, deleted with it), the container's
`resources.claims`, the dialect resources moved out of `resources` (no device plugin is asked
for them, so nothing is counted twice) into the annotation REQUESTED (shown, never trusted),
the DRA scheduler's name, and the label TRANSLATED (explain.py watches those pods).
Does not: create templates or read slices (dra_cluster.py; `Inventory` is its input), or check
the request (dialects.parse_pod did).
Invariants: same pod, same inventory -> same patch and templates; a container's limits are
what its claim consumes (dra/claims.py reads consumedCapacity) and nothing else; a pod this
module translated is no GPU pod to a second admission pass (reinvocation changes nothing).
Failure: RequestError, one line per problem, `<where>: <what>; <how to fix>`.
Tests: tests/unit/webhook/test_dra_translate.py, tests/integration/dra/test_dialects_through_dra.py
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import msgspec

from gpuslice import dialects, model
from gpuslice.dra import DRIVER
from gpuslice.dra.claims import CONFIG_API_VERSION, CONFIG_KIND
from gpuslice.errors import RequestError, brief
from gpuslice.webhook.jsonpointer import pointer

__all__ = ["CONFIG_API_VERSION", "CONFIG_KIND", "DEVICE_PLUGIN", "DRA", "PATH_LABEL",
           "REQUESTED", "TEMPLATE_PREFIX", "TRANSLATED", "DraOptions", "Inventory",
           "Translation", "claim_spec", "route", "template_name", "translate"]

PATH_LABEL = "gpuslice.io/gpu-path"  # the node label of node/path.py, read here on pods too
DEVICE_PLUGIN, DRA = "device-plugin", "dra"
# outside gpuslice.io/: the webhook writes them, and nothing trusts them (display, a watch)
REQUESTED = "dra.gpuslice.io/requested"
TRANSLATED = "dra.gpuslice.io/translated"
TEMPLATE_PREFIX = "gpuslice-"
REQUEST = "gpu"  # the one request of every template
MAX_SUBREQUESTS = 8  # resource.k8s.io/v1: firstAvailable holds at most 8
_ATTRS = f'device.attributes["{DRIVER}"]'
_MODEL = f"{_ATTRS}.model.lowerAscii()"


class DraOptions(msgspec.Struct, frozen=True, kw_only=True):
    """The webhook's DRA settings (config.py builds them from its `dra` section)."""

    enabled: bool = False
    default_path: Literal["device-plugin", "dra"] = DEVICE_PLUGIN
    scheduler_name: str = "default-scheduler"
    device_class: str = DRIVER


class Inventory(msgspec.Struct, frozen=True, kw_only=True):
    """What the API server says about DRA (dra_cluster.SliceInventory keeps it current)."""

    served: bool  # resource.k8s.io/v1 ResourceSlices can be listed
    slices: int = 0  # ResourceSlices of our driver
    sharing: bool = False  # some device of them allows shares (DRAConsumableCapacity on)
    memory_mib: tuple[int, ...] = ()  # the distinct published memory capacities, MiB


class Translation(msgspec.Struct, frozen=True, kw_only=True):
    patch: tuple[dict[str, Any], ...]
    templates: tuple[dict[str, Any], ...]  # ResourceClaimTemplates the pod's claims come from
    claims: tuple[tuple[str, str], ...]  # (container, pod claim name)


def route(pod: Mapping[str, Any], namespace_labels: Mapping[str, str] | None,
          opts: DraOptions) -> str:
    """DRA or DEVICE_PLUGIN for a GPU pod; RequestError for a value that is neither."""
    if not opts.enabled:
        return DEVICE_PLUGIN
    spec = pod.get("spec")
    selector = spec.get("nodeSelector") if isinstance(spec, Mapping) else None
    for where, labels in (("pod: spec.nodeSelector", selector),
                          ("namespace label", namespace_labels)):
        value = labels.get(PATH_LABEL) if isinstance(labels, Mapping) else None
        if value is None:
            continue
        if value not in (DRA, DEVICE_PLUGIN):
            raise RequestError(f"{where} {PATH_LABEL}={brief(value)}: not a GPU path; use "
                               f"{DRA} or {DEVICE_PLUGIN}")
        return str(value)
    return opts.default_path


def _literal(text: str) -> str:
    return json.dumps(text)  # a CEL string literal: JSON's escapes are CEL's


def filter_selectors(f: model.GPUFilter) -> list[str]:
    """CEL expressions for the pod's GPU filters, as the extender applies them: a type matches
    a model that contains it (case-insensitive), a UUID matches exactly."""
    out = []
    if f.use_types:
        out.append(" || ".join(f"{_MODEL}.contains({_literal(t.lower())})"
                               for t in f.use_types))
    out.extend(f"!{_MODEL}.contains({_literal(t.lower())})" for t in f.nouse_types)
    if f.use_uuids:
        out.append(f"{_ATTRS}.uuid in [{', '.join(map(_literal, f.use_uuids))}]")
    if f.nouse_uuids:
        out.append(f"!({_ATTRS}.uuid in [{', '.join(map(_literal, f.nouse_uuids))}])")
    return out


def _memory_is(mib: int) -> str:
    return f'device.capacity["{DRIVER}"].memory.compareTo(quantity("{mib}Mi")) == 0'


def claim_spec(s: model.SliceRequest, f: model.GPUFilter, memory_sizes: Sequence[int],
               opts: DraOptions) -> dict[str, Any]:
    """The ResourceClaim spec of one container's slice request (RequestError if a percent
    cannot be translated for the GPUs the cluster publishes)."""
    exact: dict[str, Any] = {"deviceClassName": opts.device_class,
                             "allocationMode": "ExactCount", "count": s.count}
    cel = filter_selectors(f)
    capacity: dict[str, str] = {}
    if s.cores:
        capacity["cores"] = str(s.cores)
    if s.memory_mib is not None:
        capacity["memory"] = f"{s.memory_mib}Mi"
    pct = s.memory_percent
    if pct is not None and pct < 100:
        sizes = sorted(set(memory_sizes), reverse=True)
        where = f"container {json.dumps(s.container)}"
        if not sizes:
            raise RequestError(f"{where}: memory {pct}% of a GPU: no GPU of {DRIVER} is "
                               "published yet, so the percent has no size; give memory in MiB "
                               "(e.g. nvidia.com/gpumem) or wait until the DRA nodes publish "
                               "their ResourceSlices")
        if len(sizes) > MAX_SUBREQUESTS:
            raise RequestError(f"{where}: memory {pct}% of a GPU: the cluster publishes "
                               f"{len(sizes)} GPU memory sizes, a claim can name at most "
                               f"{MAX_SUBREQUESTS}; give memory in MiB (e.g. nvidia.com/gpumem)")
        subs = []
        for mib in sizes:  # each size its own amount: a percent of THAT GPU, as the extender
            sub = {**exact, "name": f"mem-{mib}",
                   "selectors": [{"cel": {"expression": e}} for e in (*cel, _memory_is(mib))],
                   "capacity": {"requests": {**capacity,
                                             "memory": f"{max(1, mib * pct // 100)}Mi"}}}
            subs.append(sub)
        request: dict[str, Any] = {"name": REQUEST, "firstAvailable": subs}
    else:  # 100%: the published default, the GPU's whole memory
        if cel:
            exact["selectors"] = [{"cel": {"expression": e}} for e in cel]
        if capacity:
            exact["capacity"] = {"requests": capacity}
        request = {"name": REQUEST, "exactly": exact}
    devices: dict[str, Any] = {"requests": [request]}
    if s.priority != model.Priority.HIGH:
        devices["config"] = [{"requests": [REQUEST], "opaque": {"driver": DRIVER, "parameters": {
            "apiVersion": CONFIG_API_VERSION, "kind": CONFIG_KIND,
            "priority": int(s.priority)}}}]
    return {"devices": devices}


def template_name(spec: Mapping[str, Any]) -> str:
    """The template of a claim spec: one per spec and namespace, whatever pods use it."""
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()
    return f"{TEMPLATE_PREFIX}{digest[:16]}"


def _claim_name(container: str, taken: set[str]) -> str:
    base = f"gpu-{container}"
    if len(base) > 63:  # a pod claim's name is a DNS label
        base = f"gpu-{container[:42]}-{hashlib.sha256(container.encode()).hexdigest()[:16]}"
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base[:60]}-{n}"
    taken.add(name)
    return name


def _check_inventory(inv: Inventory | None, pod_label: str) -> None:
    if inv is None or not inv.served:
        raise RequestError(
            f"{pod_label}: its GPUs come from DRA ({PATH_LABEL}={DRA}), but the API server does "
            "not serve resource.k8s.io/v1 ResourceSlices to the webhook; use Kubernetes 1.34 or "
            f"later with DRA, or set {PATH_LABEL}={DEVICE_PLUGIN} on the namespace")
    if inv.slices and not inv.sharing:
        raise RequestError(
            f"{pod_label}: its GPUs come from DRA, but no {DRIVER} device accepts shares "
            "(DRAConsumableCapacity is off on the API server): a slice would take a whole GPU; "
            f"enable the feature gate, or set {PATH_LABEL}={DEVICE_PLUGIN} on the namespace")


def _resource_ops(key: str, i: int, c: Mapping[str, Any], claim: str) -> tuple[
        list[dict[str, Any]], dict[str, str]]:
    """The container's claim in, its dialect resources out; (ops, what they were)."""
    resources = c.get("resources") or {}
    ops: list[dict[str, Any]] = []
    shown: dict[str, str] = {}
    for section in ("requests", "limits"):  # limits last: they win, as dialects reads them
        got = resources.get(section) or {}
        for name in sorted(set(got) & dialects.RESOURCE_NAMES):
            shown[name] = str(got[name])
            ops.append({"op": "remove", "path": pointer("spec", key, i, "resources", section,
                                                        name)})
    claims = resources.get("claims")
    entry = {"name": claim}
    if isinstance(claims, list):
        ops.append({"op": "add", "path": pointer("spec", key, i, "resources", "claims", "-"),
                    "value": entry})
    else:
        ops.append({"op": "add", "path": pointer("spec", key, i, "resources", "claims"),
                    "value": [entry]})
    return ops, shown


def translate(pod: Mapping[str, Any], parsed: model.PodRequest, inventory: Inventory | None,
              opts: DraOptions) -> Translation:
    """The patch that moves a parsed GPU pod onto DRA, and the templates its claims need."""
    meta = pod.get("metadata") or {}
    spec = pod["spec"]
    _check_inventory(inventory, f"pod {parsed.namespace}/{parsed.name}")
    if parsed.mig:
        raise RequestError(f"pod {parsed.namespace}/{parsed.name}: asks for MIG instances, which "
                           f"gpuslice serves on the device-plugin path only; set "
                           f"{PATH_LABEL}={DEVICE_PLUGIN} in its nodeSelector or on its namespace")
    sizes = inventory.memory_mib if inventory is not None else ()
    requests = {s.container: s for s in parsed.slices}
    pod_claims = spec.get("resourceClaims")
    taken = {str(c.get("name")) for c in pod_claims or () if isinstance(c, Mapping)}
    ops: list[dict[str, Any]] = []
    templates: dict[str, dict[str, Any]] = {}
    claims: list[tuple[str, str]] = []
    entries: list[dict[str, str]] = []
    shown: dict[str, dict[str, str]] = {}
    problems: list[str] = []
    for key in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(key) or ()):
            s = requests.get(c["name"])  # parse_pod checked: named mappings, names unique
            if s is None:
                continue
            try:
                claim_body = claim_spec(s, parsed.filter, sizes, opts)
            except RequestError as exc:
                problems.extend(exc.problems)
                continue
            name = template_name(claim_body)
            templates[name] = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                               "metadata": {"name": name, "namespace": parsed.namespace,
                                            "labels": {"app.kubernetes.io/managed-by":
                                                       "gpuslice-webhook"}},
                               "spec": {"spec": claim_body}}
            claim = _claim_name(c["name"], taken)
            claims.append((c["name"], claim))
            entries.append({"name": claim, "resourceClaimTemplateName": name})
            more, shown[c["name"]] = _resource_ops(key, i, c, claim)
            ops.extend(more)
    if problems:
        raise RequestError(problems)
    if isinstance(pod_claims, list):
        ops.extend({"op": "add", "path": "/spec/resourceClaims/-", "value": e} for e in entries)
    else:
        ops.append({"op": "add", "path": "/spec/resourceClaims", "value": entries})
    if spec.get("schedulerName") != opts.scheduler_name:
        ops.append({"op": "add", "path": "/spec/schedulerName", "value": opts.scheduler_name})
    ops.extend(_mark(meta, "annotations", REQUESTED,
                     json.dumps(shown, sort_keys=True, separators=(",", ":"))))
    ops.extend(_mark(meta, "labels", TRANSLATED, "true"))
    return Translation(patch=tuple(ops), templates=tuple(templates.values()),
                       claims=tuple(claims))


def _mark(meta: Mapping[str, Any], section: str, key: str, value: str) -> list[dict[str, Any]]:
    if isinstance(meta.get(section), Mapping):
        return [{"op": "add", "path": pointer("metadata", section, key), "value": value}]
    return [{"op": "add", "path": pointer("metadata", section), "value": {key: value}}]

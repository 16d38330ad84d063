"""The admission decision for one pod: pass, skip, deny with every problem, or patch (pure).

Owns: what the webhook changes on a GPU pod (docs/webhook.md "What it changes"): schedulerName
(only where the default scheduler was meant), the managed label, and resources normalised so
the kubelet allocates the dialect's device resource (handoff.missing_device_resources) and
Kubernetes accepts them. No env: what a container gets comes from the node agent, and every
byte added here is stored, watched and patched again for the pod's life.
Does not: decode HTTP or the envelope (review.py, app.py) or look up namespaces (namespaces.py).
Also guards (on any pod it sees, GPU or not): no gpuslice.io/* annotation or label but those a
tenant may set (TENANT_ANNOTATIONS, the opt-out label; the managed label only where the webhook
itself sets it), and no NVIDIA_VISIBLE_DEVICES in a container without a slice other than
`void`/`none` (the NVIDIA container toolkit would give it those GPUs uncapped). The chart's
ValidatingAdmissionPolicy (placement-policy.yaml) says the same in kube-apiserver, for pods that
never reach the webhook.
Invariants: a pod without slice requests, an UPDATE and an opted-out pod or namespace are never
changed; opt-out is checked here even though the MutatingWebhookConfiguration's selectors
should already keep those pods away, so a wrong selector cannot mutate them. Same answer for
dryRun (the webhook has no side effects).
Failure: never raises for any pod shape; an invalid pod is denied with every problem, one per
line (`<where>: <field>=<value>: <what is wrong>; <how to fix>`).
Tests: tests/unit/webhook/test_admit.py, test_admit_adversarial.py, test_admit_guards.py,
test_admit_wire_sample.py
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from typing import Any

import msgspec

from gpuslice import codec, dialects, handoff, model
from gpuslice.errors import RequestError, brief
from gpuslice.webhook import dra
from gpuslice.webhook.bypass import bypass_refused
from gpuslice.webhook.jsonpointer import pointer

__all__ = ["DEVICE_ENV", "DEVICE_ENV_HIDDEN", "PLACEMENT_ANNOTATIONS",
           "RESERVED_PREFIX", "TENANT_ANNOTATIONS", "Decision", "Options", "Result", "admit",
           "pointer"]

DEFAULT_SCHEDULER = "default-scheduler"
# Set by the node agent's Allocate; a value in the pod spec would override it in the container
# (the kubelet appends spec env after the device plugin's), so a tenant could lift its limits.
# The four identity names the webhook added until 2026-11-27 are let through: nothing reads
# them, and a pod copied from one admitted then still carries them.
_AGENT_ENV = re.compile(r"CUDA_DEVICE_MEMORY_LIMIT(_\d+)?|CUDA_DEVICE_MEMORY_SHARED_CACHE|"
                        r"CUDA_DEVICE_SM_LIMIT|CUDA_TASK_PRIORITY|NVIDIA_VISIBLE_DEVICES|"
                        r"GPUSLICE_(?!POD_UID$|POD_NAMESPACE$|POD_NAME$|CONTAINER_NAME$)\w*")
# Written by the extender at bind and the node agent at Allocate: the node agent trusts them, so
# a pod must not arrive with them (or with spec.nodeName, which skips the extender).
PLACEMENT_ANNOTATIONS = (codec.ASSIGNMENT_ANNOTATION, handoff.BOUND_AT, handoff.ALLOCATED)
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"  # a static pod: the kubelet runs it as written
# gpuslice's own keys: the extender and the node agent believe them, so no pod may arrive with
# one except those a tenant is meant to write (the per-pod policies; the opt-out label, which
# the configuration names; the managed label on the GPU pods the webhook labels itself).
RESERVED_PREFIX = "gpuslice.io/"
TENANT_ANNOTATIONS = (dialects.NODE_POLICY[0], dialects.GPU_POLICY[0], dialects.GANG_ANNOTATION,
                      dialects.GANG_SIZE_ANNOTATION)
_TENANT_KEYS = f"{', '.join(TENANT_ANNOTATIONS[:-1])} and {TENANT_ANNOTATIONS[-1]}"
# The NVIDIA container toolkit's device list: in a container without a slice, anything but these
# (e.g. `all`) gives that container GPUs of the node with no slice and no cap.
DEVICE_ENV = "NVIDIA_VISIBLE_DEVICES"
DEVICE_ENV_HIDDEN = ("void", "none")
_MAX_PROBLEMS, _MAX_LINE = 50, 300  # a denial stays readable however bad the pod is


class Result(enum.StrEnum):
    """What happened to a request (the `result` label of the webhook's request metric)."""

    ALLOWED = "allowed"  # passed untouched: no slice request, UPDATE, not a pod
    PATCHED = "patched"
    DENIED = "denied"
    SKIPPED = "skipped"  # opted out, or left to another scheduler
    ERROR = "error"  # the body was not an AdmissionReview (app.py)


class Options(msgspec.Struct, frozen=True, kw_only=True):
    """What a deployment configures (webhook/config.py builds it from the config file)."""

    scheduler_name: str = "gpuslice-scheduler"
    opt_out_key: str = "gpuslice.io/webhook"
    opt_out_value: str = "disabled"
    # namespaces whose GPU pods may skip gpuslice's placement (webhook/bypass.py)
    bypass_namespaces: frozenset[str] = frozenset()
    defaults: dialects.Defaults = dialects.Defaults()
    dra: dra.DraOptions = dra.DraOptions()  # which GPU pods become DRA claims (webhook/dra.py)


class Decision(msgspec.Struct, frozen=True, kw_only=True):
    """The answer: `patch` holds JSON Patch operations, `message` the denial (one problem a line),
    `why` a short reason for logs."""

    result: Result
    why: str
    patch: tuple[dict[str, Any], ...] = ()
    message: str = ""
    warnings: tuple[str, ...] = ()
    templates: tuple[dict[str, Any], ...] = ()  # ResourceClaimTemplates to create first (DRA)

    @property
    def allowed(self) -> bool:
        return self.result is not Result.DENIED


def _deny(lines: list[str]) -> Decision:
    lines = [line if len(line) <= _MAX_LINE else line[:_MAX_LINE - 3] + "..." for line in lines]
    if len(lines) > _MAX_PROBLEMS:
        lines = [*lines[:_MAX_PROBLEMS], f"... and {len(lines) - _MAX_PROBLEMS} more problems"]
    return Decision(result=Result.DENIED, why="invalid slice request", message="\n".join(lines))


def _labels(meta: Mapping[str, Any]) -> Mapping[str, Any] | None:
    labels = meta.get("labels")
    return labels if isinstance(labels, Mapping) else None


def admit(operation: str, pod: object, namespace_labels: Mapping[str, str] | None,
          options: Options, *, kind: str = "Pod", sub_resource: str = "",
          user: str | None = None, dra_inventory: dra.Inventory | None = None,
          namespace: str = "") -> Decision:
    """The decision for a pod admission request. `namespace_labels` None = not known (the
    MutatingWebhookConfiguration's namespaceSelector is then the only namespace opt-out);
    `user` is the request's userInfo.username (only a node may create a mirror pod);
    `namespace` the request's (else the pod's metadata.namespace), for bypassNamespaces;
    `dra_inventory`: the cluster's DRA devices, for pods on the DRA path (webhook/dra.py)."""
    if kind != "Pod" or sub_resource:
        return Decision(result=Result.ALLOWED, why=f"not a pod ({kind} {sub_resource})".strip())
    if operation != "CREATE":
        return Decision(result=Result.ALLOWED, why=f"{operation}: GPU resources are immutable")
    if not isinstance(pod, Mapping):
        return _deny([f"pod: {brief(pod)}: not a Pod object; send the pod as JSON"])
    meta = pod.get("metadata") or {}
    if not isinstance(meta, Mapping):
        return _deny([f"pod: metadata={brief(meta)}: not an object; give the pod metadata"])
    key, value = options.opt_out_key, options.opt_out_value
    if namespace_labels is not None and namespace_labels.get(key) == value:
        return Decision(result=Result.SKIPPED, why=f"namespace labelled {key}={value}")
    annotations = meta.get("annotations")
    if isinstance(annotations, Mapping) and MIRROR_ANNOTATION in annotations \
            and isinstance(user, str) and user.startswith("system:node:"):
        return Decision(result=Result.ALLOWED, why="mirror pod of a static pod")
    labels = _labels(meta)
    ns = namespace or str(meta.get("namespace") or "")
    if labels is not None and labels.get(key) == value:
        refused = bypass_refused("label", f"label {key}={value}", ns,
                                 options.bypass_namespaces) if dialects.is_gpu_pod(pod) else None
        if refused:
            return _deny([refused])
        return Decision(result=Result.SKIPPED, why=f"pod labelled {key}={value}")
    if not dialects.is_gpu_pod(pod):
        problems = _guard_problems(pod, meta, options, manages=False)
        return _deny(problems) if problems else Decision(result=Result.ALLOWED,
                                                         why="no slice request")
    spec = pod.get("spec")
    scheduler = spec.get("schedulerName") if isinstance(spec, Mapping) else None
    if scheduler not in (None, "", DEFAULT_SCHEDULER, options.scheduler_name):
        refused = bypass_refused("scheduler", f"spec.schedulerName={brief(scheduler)}", ns,
                                 options.bypass_namespaces)
        problems = [refused] if refused else []
        problems += _guard_problems(pod, meta, options, manages=False)
        if problems:
            return _deny(problems)
        return Decision(
            result=Result.SKIPPED, why=f"schedulerName {scheduler}",
            warnings=(f"spec.schedulerName={str(scheduler)[:30]}: gpuslice will not place or "
                      "cap this pod; remove it to use gpuslice",))
    if isinstance(spec, Mapping) and spec.get("nodeName") and ns in options.bypass_namespaces:
        problems = _guard_problems(pod, meta, options, manages=False)
        return _deny(problems) if problems else Decision(
            result=Result.SKIPPED, why="spec.nodeName in a bypass namespace")
    problems = _tenant_problems(pod, meta)
    try:
        parsed = dialects.parse_pod(pod, options.defaults)
        missing = handoff.missing_device_resources(pod, options.defaults, parsed=parsed)
    except RequestError as exc:
        return _deny(exc.problems + problems + _guard_problems(pod, meta, options, manages=True))
    problems += _guard_problems(pod, meta, options, manages=bool(parsed.slices))
    if problems:
        return _deny(problems)
    if not parsed.slices:  # e.g. nvidia.com/gpu: 0 everywhere
        return Decision(result=Result.ALLOWED, why="no slice request")
    gpu = {s.container for s in parsed.slices}
    try:
        if dra.route(pod, namespace_labels, options.dra) == dra.DRA:
            return _on_dra(pod, parsed, dra_inventory, options.dra)
    except RequestError as exc:
        return _deny(exc.problems)
    patch = _patch(pod, labels, scheduler, missing, gpu, options)
    if not patch:
        return Decision(result=Result.ALLOWED, why="GPU pod already as gpuslice needs it")
    return Decision(result=Result.PATCHED, why="GPU pod", patch=tuple(patch))


def _where(c: Mapping[str, Any]) -> str:
    name = c.get("name")
    return f"container {json.dumps(name) if isinstance(name, str) else brief(name)}"


def _key(k: str) -> str:
    return k if k.isprintable() else json.dumps(k)  # one problem per line, whatever the key


def _containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = pod.get("spec")
    out = []
    for key in ("initContainers", "containers", "ephemeralContainers"):
        got = spec.get(key) if isinstance(spec, Mapping) else None
        out.extend(c for c in (got if isinstance(got, list) else ()) if isinstance(c, Mapping))
    return out


def _guard_problems(pod: Mapping[str, Any], meta: Mapping[str, Any], options: Options, *,
                    manages: bool) -> list[str]:
    """What no pod may carry, GPU or not: gpuslice's own annotations and labels (the managed
    label only where `manages`: the webhook labels this pod itself), and a device list for the
    NVIDIA container toolkit in a container without a slice."""
    problems = []
    annotations = meta.get("annotations")
    for k in annotations if isinstance(annotations, Mapping) else ():
        if not isinstance(k, str) or not k.startswith(RESERVED_PREFIX) or \
                k in TENANT_ANNOTATIONS:
            continue
        if k in PLACEMENT_ANNOTATIONS:
            problems.append(f"pod: annotation {k}: written by gpuslice when it places the "
                            "pod; remove it")
        else:
            problems.append(f"pod: annotation {_key(k)}: {RESERVED_PREFIX} annotations are "
                            f"written by gpuslice only (a pod may set {_TENANT_KEYS}); "
                            "remove it")
    labels = meta.get("labels")
    for k, v in labels.items() if isinstance(labels, Mapping) else ():
        if not isinstance(k, str) or not k.startswith(RESERVED_PREFIX) or \
                k == options.opt_out_key or (k == handoff.MANAGED_LABEL and manages):
            continue
        if k == handoff.MANAGED_LABEL:
            problems.append(f"pod: label {k}={brief(v)}: set by gpuslice's webhook on the GPU "
                            "pods it admits for its scheduler, and this pod is not one; "
                            "remove it")
        else:
            mine = f" (a pod may set {options.opt_out_key})" \
                if options.opt_out_key.startswith(RESERVED_PREFIX) else ""
            problems.append(f"pod: label {_key(k)}: {RESERVED_PREFIX} labels are set by "
                            f"gpuslice only{mine}; remove it")
    for c in _containers(pod):
        if dialects.is_gpu_pod({"spec": {"containers": [c]}}):
            continue  # a slice container: _tenant_problems refuses any NVIDIA_VISIBLE_DEVICES
        env = c.get("env")
        for entry in env if isinstance(env, list) else ():
            if not isinstance(entry, Mapping) or entry.get("name") != DEVICE_ENV:
                continue
            got = entry.get("value")
            if entry.get("valueFrom") is not None or not isinstance(got, str):
                problems.append(
                    f"{_where(c)}: env {DEVICE_ENV} from valueFrom: the NVIDIA container "
                    "toolkit gives a container the GPUs this names, with no slice and no cap, "
                    "and its value is not known here; remove it (ask for a slice to use a GPU)")
            elif got not in DEVICE_ENV_HIDDEN:
                problems.append(
                    f"{_where(c)}: env {DEVICE_ENV}={brief(got)}: the NVIDIA container toolkit "
                    "would give this container the GPUs it names (all: every GPU of the node) "
                    "with no slice and no cap; remove it, or set void, or ask for a slice "
                    "(e.g. nvidia.com/gpumem) to use a GPU")
    return problems


def _tenant_problems(pod: Mapping[str, Any], meta: Mapping[str, Any]) -> list[str]:
    """What the dialect parser does not check on a GPU pod: a labels map; no spec.nodeName
    (a placement gpuslice did not make); a gang that names a directory (dialects.gang_of);
    env lists in slice containers that do not preset what the node agent sets."""
    problems = dialects.gang_problems(pod)
    if meta.get("labels") is not None and not isinstance(meta["labels"], Mapping):
        problems.append(f"pod: metadata.labels={brief(meta['labels'])}: not an object; map "
                        "label names to strings")
    spec = pod.get("spec")
    node = spec.get("nodeName") if isinstance(spec, Mapping) else None
    if node:
        problems.append(f"pod: spec.nodeName={brief(node)}: a GPU pod must be placed by the "
                        "gpuslice scheduler, which picks its GPUs; remove spec.nodeName (a "
                        "nodeSelector can choose the nodes)")
    for key in ("initContainers", "containers"):
        got = spec.get(key) if isinstance(spec, Mapping) else None
        for c in got if isinstance(got, list) else ():
            if not (isinstance(c, Mapping) and dialects.is_gpu_pod({"spec": {key: [c]}})):
                continue
            where = _where(c)
            env = c.get("env")
            if env is not None and not isinstance(env, list):
                problems.append(f"{where}: env={brief(env)}: not a list; give env as a list "
                                "of {name, value} entries")
            for entry in env if isinstance(env, list) else ():
                var = entry.get("name") if isinstance(entry, Mapping) else None
                if isinstance(var, str) and _AGENT_ENV.fullmatch(var):
                    problems.append(f"{where}: env {var}: set by gpuslice's node agent for the "
                                    "slice the pod is given; remove it from the pod")
    return problems


def _patch(pod: Mapping[str, Any], labels: Mapping[str, Any] | None, scheduler: object,
           missing: tuple[tuple[str, int, str, int], ...], gpu: set[str],
           options: Options) -> list[dict[str, Any]]:
    ops: list[dict[str, Any]] = []
    if scheduler != options.scheduler_name:
        ops.append({"op": "replace" if scheduler is not None else "add",
                    "path": "/spec/schedulerName", "value": options.scheduler_name})
    if labels is None:
        ops.append({"op": "add", "path": "/metadata/labels",
                    "value": {handoff.MANAGED_LABEL: "true"}})
    elif labels.get(handoff.MANAGED_LABEL) != "true":
        ops.append({"op": "add", "path": pointer("metadata", "labels", handoff.MANAGED_LABEL),
                    "value": "true"})
    device: dict[tuple[str, int], dict[str, int]] = {}
    for key, i, resource, quantity in missing:
        device.setdefault((key, i), {})[resource] = quantity
    for key in ("initContainers", "containers"):
        for i, c in enumerate(pod["spec"].get(key) or ()):
            if c["name"] in gpu:  # parse_pod checked every container is a named mapping
                ops.extend(_resource_ops(key, i, c, device.get((key, i), {})))
    return ops


def _on_dra(pod: Mapping[str, Any], parsed: model.PodRequest,
            inventory: dra.Inventory | None, options: dra.DraOptions) -> Decision:
    """The pod as DRA claims (dra.translate)."""
    t = dra.translate(pod, parsed, inventory, options)
    return Decision(result=Result.PATCHED, why="GPU pod on the DRA path", patch=t.patch,
                    templates=t.templates)


def _resource_ops(key: str, i: int, c: Mapping[str, Any],
                  device: Mapping[str, int]) -> list[dict[str, Any]]:
    """Limits name every slice resource (Kubernetes needs a limit for extended resources; copied
    from requests where only requests were written) plus the device resource the kubelet
    allocates; requests, where the user wrote them, get the same so they stay equal."""
    resources = c.get("resources")
    limits = resources.get("limits") if isinstance(resources, Mapping) else None
    requests = resources.get("requests") if isinstance(resources, Mapping) else None
    limits = limits if isinstance(limits, Mapping) else None
    requests = requests if isinstance(requests, Mapping) else None
    add_limits = {n: str(q) for n, q in device.items()}
    for n, q in (requests or {}).items():
        if n in dialects.RESOURCE_NAMES and (limits is None or n not in limits):
            add_limits[n] = q
    add_requests = {}
    if requests is not None and any(n in dialects.RESOURCE_NAMES for n in requests):
        add_requests = {n: str(q) for n, q in device.items() if n not in requests}
    ops: list[dict[str, Any]] = []
    base = ("spec", key, i, "resources")
    for section, current, add in (("limits", limits, add_limits),
                                  ("requests", requests, add_requests)):
        if not add:
            continue
        if current is None:
            ops.append({"op": "add", "path": pointer(*base, section), "value": add})
        else:
            ops.extend({"op": "add", "path": pointer(*base, section, n), "value": q}
                       for n, q in add.items())
    return ops

"""The test API server's state: objects, one global resourceVersion, history, watchers.
Owns: CRUD with preconditions (409 AlreadyExists / Conflict), graceful deletion and
finalizers, the pod binding subresource, list at a resourceVersion (limit/continue), watches
from a resourceVersion with selector-aware ADDED/MODIFIED/DELETED translation, and 410 Expired
once a resourceVersion has fallen out of the history window (`history` events).
Does not: speak HTTP (server.py) or validate kinds (objects.py).
Invariants: a stored dict is never mutated (every write stores a new one), so reads, list
results and queued watch events can share it; every stored object passed shapes.check, so a
patch checks only the parts it changed; every write takes the next resourceVersion;
all methods run on the server's event loop thread, so there are no locks.
Tests: tests/integration/kubeapi/test_resource_versions_and_conflicts.py, test_object_lifecycle.py,
test_watch_resumes_expires_and_bookmarks.py"""

from __future__ import annotations

import asyncio
import base64
import json
import random
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import errors, objects, shapes
from .objects import now_rfc3339
from .patches import PatchError, json_patch, merge_patch, strategic_merge_patch
from .resources import BY_PATH, ResourceType

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)
Matcher = Callable[[Obj], bool]

PATCH_TYPES = {
    "application/merge-patch+json": merge_patch,
    "application/strategic-merge-patch+json": strategic_merge_patch,
    "application/json-patch+json": json_patch,
}
NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_SUFFIX = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery's generateName alphabet


@dataclass
class Change:
    """One write, as the history and the watchers see it (`prev` is None for ADDED)."""

    rv: int
    rt: ResourceType
    type: str
    obj: Obj
    prev: Obj | None


@dataclass(eq=False)
class Watcher:
    rt: ResourceType
    namespace: str | None
    matches: Matcher
    queue: asyncio.Queue[tuple[str, Obj]] = field(default_factory=asyncio.Queue)
    present: Callable[[Obj], Obj] = lambda obj: obj  # how the stream shows an object
    plain: bool = True  # present() is the identity

    def translate(self, change: Change) -> tuple[str, Obj] | None:
        """The event this watcher sees: an object leaving its selector is DELETED for it."""
        now = self._sees(change.obj)
        before = change.prev is not None and self._sees(change.prev)
        if change.type == "DELETED":
            return ("DELETED", change.obj) if now or before else None
        if now:
            return ("MODIFIED" if before else "ADDED", change.obj)
        if not before:
            return None
        # the last state it matched, at the change's resourceVersion (as the watch cache does)
        prev = change.prev
        return ("DELETED", {**prev, "metadata": {**prev["metadata"], "resourceVersion": str(
            change.rv)}})

    def _sees(self, obj: Obj) -> bool:
        ns = obj["metadata"].get("namespace", "")
        return (self.namespace is None or ns == self.namespace) and self.matches(obj)


class Store:
    def __init__(self, history: int = 1000) -> None:
        self.rv = 0
        self.compacted = 0  # writes up to this resourceVersion are no longer in `history`
        self.history: deque[Change] = deque(maxlen=max(1, history))
        self.objects: dict[tuple[str, str], dict[Key, Obj]] = {
            rt.key: {} for rt in BY_PATH.values()}
        self.watchers: set[Watcher] = set()
        ns_type = BY_PATH[("", "v1", "namespaces")]
        for name in NAMESPACES:
            self.create(ns_type, None, {"metadata": {"name": name}})

    # ---- reads ----------------------------------------------------------------------------

    def get(self, rt: ResourceType, ns: str | None, name: str) -> Obj:
        obj = self.objects[rt.key].get((ns or "", name))
        if obj is None:
            raise errors.not_found(rt, name)
        return obj

    def list(
        self, rt: ResourceType, ns: str | None, matches: Matcher, *, rv: str | None = None,
        rv_match: str | None = None, limit: int = 0, token: str | None = None,
    ) -> tuple[list[Obj], str, str]:
        """(items, resourceVersion of the list, continue token or "")."""
        at, start = self.rv, ""
        if token:
            at, start = _decode_continue(token)
            if at < self.compacted:
                raise errors.expired("The provided continue parameter is too old to display a "
                                     "consistent list result. You can start a new list without "
                                     "the continue parameter.")
        elif rv and rv_match == "Exact":
            at = self._parse_rv(rv)
            if at < self.compacted:
                raise errors.expired(f"too old resource version: {at} ({self.compacted + 1})")
            if at > self.rv:
                raise errors.timeout(f"Too large resource version: {at}, current: {self.rv}")
        elif rv and rv != "0" and self._parse_rv(rv) > self.rv:
            raise errors.timeout(f"Too large resource version: {rv}, current: {self.rv}")
        state = self._state_at(rt, at)
        keys = sorted(k for k, o in state.items()
                      if (ns is None or k[0] == ns) and matches(o) and (k[0], k[1]) > _key(start))
        page = keys[:limit] if limit > 0 else keys
        more = limit > 0 and len(keys) > limit
        next_token = _encode_continue(at, page[-1]) if more else ""
        return [state[k] for k in page], str(at), next_token

    def _state_at(self, rt: ResourceType, at: int) -> dict[Key, Obj]:
        current = self.objects[rt.key]
        if at >= self.rv:
            return current
        state = dict(current)
        for change in reversed(self.history):
            if change.rv <= at:
                break
            if change.rt.key != rt.key:
                continue
            key = _obj_key(change.obj)
            if change.prev is None:
                state.pop(key, None)
            else:
                state[key] = change.prev
        return state

    def _parse_rv(self, rv: str) -> int:
        try:
            value = int(rv)
        except ValueError:
            raise errors.bad_request(f'invalid resource version "{rv}"') from None
        if value < 0:
            raise errors.bad_request(f'invalid resource version "{rv}"')
        return value

    # ---- watches --------------------------------------------------------------------------

    def watch(
        self, rt: ResourceType, ns: str | None, matches: Matcher, rv: str | None,
        initial_events: bool = False,
    ) -> tuple[Watcher, list[tuple[str, Obj]]]:
        """Register a watcher; return it with the events it must send before live ones.
        `rv` unset or "0" (or initial_events): synthetic ADDED for every matching object;
        otherwise every change after `rv`, or 410 Expired if those are no longer kept."""
        watcher = Watcher(rt, ns, matches)
        backlog: list[tuple[str, Obj]] = []
        if not rv or rv == "0" or initial_events:
            items, _, _ = self.list(rt, ns, matches)
            backlog = [("ADDED", o) for o in items]
        else:
            start = self._parse_rv(rv)
            if start < self.compacted:
                raise errors.expired(f"too old resource version: {start} ({self.compacted + 1})")
            for change in self.history:
                if change.rv > start and change.rt.key == rt.key:
                    event = watcher.translate(change)
                    if event:
                        backlog.append(event)
        self.watchers.add(watcher)
        return watcher, backlog

    def unwatch(self, watcher: Watcher) -> None:
        self.watchers.discard(watcher)

    def compact(self) -> None:
        """Forget all history (as etcd compaction does): older resourceVersions get 410."""
        self.compacted = self.rv
        self.history.clear()

    # ---- writes ---------------------------------------------------------------------------

    def admission_view(self, rt: ResourceType, ns: str | None, body: Obj, manager: str) -> Obj:
        """The new object as admission webhooks see it: defaulted and through built-in
        admission, no uid, resourceVersion or creationTimestamp yet."""
        shapes.check(rt, body)
        meta = dict(body.get("metadata") or {})
        if rt.namespaced:
            meta["namespace"] = ns
            if ("", ns) not in self.objects[("", "namespaces")]:
                raise errors.not_found(BY_PATH[("", "v1", "namespaces")], ns or "")
        else:
            meta.pop("namespace", None)
        for stale in ("resourceVersion", "uid", "creationTimestamp", "generation",
                      "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink",
                      "managedFields"):
            meta.pop(stale, None)
        obj = {**body, "apiVersion": rt.api_version, "kind": rt.kind, "metadata": meta}
        obj = objects.admit(rt, objects.default(rt, obj))
        if rt.kind == "Pod":
            obj.setdefault("status", {})
        obj["metadata"] = objects.with_managed_fields(meta, obj, manager, "Update")
        return obj

    def create(self, rt: ResourceType, ns: str | None, body: Obj, *, manager: str = "",
               dry_run: bool = False, admitted: Obj | None = None) -> Obj:
        """POST `body` as sent, or what webhooks made of `admitted`, an admission_view()."""
        if admitted is not None:
            shapes.check(rt, body, admitted)  # only what the webhooks' patches changed
        obj = body if admitted is not None else self.admission_view(rt, ns, body, manager)
        if not obj["metadata"].get("name") and obj["metadata"].get("generateName"):
            obj["metadata"]["name"] = self._generated_name(rt, ns, obj["metadata"][
                "generateName"])
        obj = objects.prepare_create(rt, objects.default(rt, obj))
        objects.validate(rt, obj)
        meta = {**obj["metadata"], "uid": str(uuid.uuid4()), "creationTimestamp": now_rfc3339()}
        if rt.kind in objects.GENERATION:
            meta["generation"] = 1
        obj["metadata"] = meta
        if (meta.get("namespace") or "", meta["name"]) in self.objects[rt.key]:
            raise errors.already_exists(rt, meta["name"])
        if dry_run:
            return obj
        return self._write(rt, "ADDED", obj, None)

    def update(self, rt: ResourceType, ns: str | None, name: str, body: Obj, *,
               subresource: str = "", manager: str = "", dry_run: bool = False) -> Obj:
        old = self.get(rt, ns, name)
        shapes.check(rt, body)
        meta = body.get("metadata") or {}
        if meta.get("uid") and meta["uid"] != old["metadata"]["uid"]:
            raise errors.conflict(rt, name, errors.storage_precondition(
                rt, ns, name, "UID", meta["uid"], old["metadata"]["uid"]))
        _preconditions(rt, name, old["metadata"], meta)
        return self._replace(rt, old, body, subresource, manager, dry_run)

    def patch(self, rt: ResourceType, ns: str | None, name: str, content_type: str, patch: Any,
              *, subresource: str = "", manager: str = "", dry_run: bool = False) -> Obj:
        old = self.get(rt, ns, name)
        apply = PATCH_TYPES.get(content_type)
        if apply is None:
            raise errors.unsupported_media_type(content_type)
        if apply is json_patch and not isinstance(patch, list):  # jsonpatch.DecodePatch
            raise errors.bad_request("json: cannot unmarshal object into Go value of type "
                                     "jsonpatch.Patch")
        try:
            new = apply(old, patch)
        except PatchError as e:
            raise errors.invalid(rt, name, [("patch", "FieldValueInvalid", str(e))]) from None
        shapes.check(rt, new, old)  # only what the patch changed: `old` passed when stored
        if not isinstance(new.get("metadata"), dict):
            raise errors.bad_request(f"the patch left {rt.kind} {name!r} without metadata")
        _preconditions(rt, name, old["metadata"], new["metadata"])
        sent = patch if isinstance(patch, dict) else new
        return self._replace(rt, old, new, subresource, manager, dry_run, sent)

    def delete(self, rt: ResourceType, ns: str | None, name: str, options: Obj) -> Obj:
        """DELETE as the generic registry does it: preconditions, graceful deletion of pods
        (deletionTimestamp and grace period written first, a MODIFIED event, then the object
        is removed at once when the grace period is 0), finalizers (the object stays,
        marked), the pod or DRA object itself as the reply, else a Status Success."""
        old = self.get(rt, ns, name)
        meta = old["metadata"]
        pre = options.get("preconditions") or {}
        if pre.get("uid") and pre["uid"] != meta["uid"]:
            raise errors.conflict_kind(rt, name, f"the UID in the precondition ({pre['uid']}) "
                                       f"does not match the UID in record ({meta['uid']}). The "
                                       "object might have been deleted and then recreated")
        if pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
            raise errors.conflict_kind(rt, name, "the ResourceVersion in the precondition "
                                       f"({pre['resourceVersion']}) does not match the "
                                       f"ResourceVersion in record ({meta['resourceVersion']}). "
                                       "The object might have been modified")
        if options.get("dryRun"):
            return old
        grace = options.get("gracePeriodSeconds")
        if grace is not None and grace < 0:
            grace = 1
        stamped = objects.graceful_deletion(rt, old, grace)
        if stamped is objects.PENDING:
            return self._deleted_reply(rt, old)
        if stamped is not None:
            written = self._write(rt, "MODIFIED", stamped, old)
            if meta.get("finalizers") or stamped["metadata"]["deletionGracePeriodSeconds"]:
                return written
            return self._deleted_reply(rt, self._remove(rt, written))
        if meta.get("finalizers"):  # marked as deleting; the finalizers' owners finish it
            marked = objects.mark_deleting(old)
            return old if marked is old else self._write(rt, "MODIFIED", marked, old)
        return self._deleted_reply(rt, self._remove(rt, old))

    @staticmethod
    def _deleted_reply(rt: ResourceType, obj: Obj) -> Obj:
        if rt.kind in objects.RETURN_DELETED:
            return obj
        details = {"name": obj["metadata"]["name"], **({"group": rt.group} if rt.group else {}),
                   "kind": rt.plural, "uid": obj["metadata"]["uid"]}
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": details}

    def delete_collection(self, rt: ResourceType, ns: str | None, matches: Matcher,
                          options: Obj) -> list[Obj]:
        items, _, _ = self.list(rt, ns, matches)
        for o in items:
            self.delete(rt, o["metadata"].get("namespace"), o["metadata"]["name"], options)
        return items

    def bind(self, ns: str, name: str, binding: Obj) -> None:
        """POST pods/NAME/binding: set spec.nodeName once and merge the Binding's annotations
        (409 if the pod is already bound, or its uid / resourceVersion differ from the
        Binding's metadata, kube-apiserver's preconditions)."""
        pods = BY_PATH[("", "v1", "pods")]
        meta = binding.get("metadata") or {}
        target = binding.get("target") or {}
        if not isinstance(meta, dict) or not isinstance(target, dict) or not all(
                isinstance(v, str) for v in (*target.values(), *(meta.get(k, "") for k in (
                    "name", "uid", "resourceVersion")))) or not isinstance(
                meta.get("annotations") or {}, dict) or not all(
                isinstance(v, str) for v in (meta.get("annotations") or {}).values()):
            raise errors.bad_request('Binding in version "v1" cannot be handled as a Binding: '
                                     "metadata and target must be objects of strings")
        if meta.get("name") and meta["name"] != name:
            raise errors.bad_request("name in URL does not match name in Binding object")
        if target.get("kind", "Node") not in ("", "Node"):
            raise errors.invalid(pods, name, [("target.kind", "FieldValueNotSupported",
                                               f'Unsupported value: "{target["kind"]}": '
                                               'supported values: "Node"')])
        if not target.get("name"):
            raise errors.invalid(pods, name, [("target.name", "FieldValueRequired",
                                               "Required value")])
        pod = self.get(pods, ns, name)
        if meta.get("uid") and meta["uid"] != pod["metadata"]["uid"]:
            raise errors.conflict(pods, name, errors.storage_precondition(
                pods, ns, name, "UID", meta["uid"], pod["metadata"]["uid"]))
        if meta.get("resourceVersion") and meta["resourceVersion"] != pod["metadata"][
                "resourceVersion"]:
            raise errors.conflict(pods, name, errors.storage_precondition(
                pods, ns, name, "ResourceVersion", meta["resourceVersion"],
                pod["metadata"]["resourceVersion"]))
        if pod["metadata"].get("deletionTimestamp"):
            raise errors.conflict(pods, name, f"pod {name} is being deleted, cannot be assigned "
                                              "to a host", "binding")
        if pod["spec"].get("nodeName"):
            raise errors.conflict(pods, name, f"pod {name} is already assigned to node "
                                              f"\"{pod['spec']['nodeName']}\"", "binding")
        new_meta = dict(pod["metadata"])
        if meta.get("annotations"):
            new_meta["annotations"] = {**(new_meta.get("annotations") or {}),
                                       **meta["annotations"]}
        status = dict(pod.get("status") or {})
        status["conditions"] = [c for c in status.get("conditions") or []
                                if c.get("type") != "PodScheduled"] + [{
            "type": "PodScheduled", "status": "True", "lastProbeTime": None,
            "lastTransitionTime": now_rfc3339()}]
        spec = {**pod["spec"], "nodeName": target["name"]}
        self._write(pods, "MODIFIED", {**pod, "metadata": new_meta, "spec": spec,
                                       "status": status}, pod)

    # ---- internals ------------------------------------------------------------------------

    def _replace(self, rt: ResourceType, old: Obj, body: Obj, subresource: str, manager: str,
                 dry_run: bool, sent: Obj | None = None) -> Obj:
        """Store `body` over `old`; `sent` is what the client sent, for managedFields."""
        old_meta = old["metadata"]
        new = objects.merge_subresource(rt, old, body, subresource)
        meta = dict(new.get("metadata") or {})
        for fixed in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp",
                      "deletionGracePeriodSeconds", "generation", "resourceVersion"):
            if fixed in old_meta:
                meta[fixed] = old_meta[fixed]
            else:
                meta.pop(fixed, None)
        new = objects.default(rt, {**new, "apiVersion": rt.api_version, "kind": rt.kind,
                                   "metadata": meta})
        same_spec = new.get("spec") == old.get("spec")  # most writes are metadata or status
        if not same_spec:
            objects.check_update(rt, old, new)
        objects.validate(rt, new, stored_spec=same_spec)
        if not same_spec and "generation" in meta:
            meta["generation"] += 1
        meta.pop("resourceVersion", None)
        comparable = {**old, "metadata": {k: v for k, v in old_meta.items()
                                          if k not in ("resourceVersion", "managedFields")}}
        if {**new, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}} == \
                comparable:
            return old  # a no-op write keeps its resourceVersion and sends no event, as etcd
        new["metadata"] = objects.with_managed_fields(meta, sent or new, manager, "Update",
                                                      subresource)
        if dry_run:
            return {**new, "metadata": {**new["metadata"], "resourceVersion": str(self.rv)}}
        if meta.get("deletionTimestamp") and not meta.get("finalizers") and \
                old_meta.get("finalizers") and meta.get("deletionGracePeriodSeconds") == 0:
            return self._remove(rt, new)  # the last finalizer gone: deleted now
        return self._write(rt, "MODIFIED", new, old)

    def _remove(self, rt: ResourceType, old: Obj) -> Obj:
        gone = self._write(rt, "DELETED", old, old)
        if rt.kind == "Namespace":  # what the namespace controller does, at once
            ns = old["metadata"]["name"]
            for other in BY_PATH.values():
                if other.namespaced:
                    for key in [k for k in self.objects[other.key] if k[0] == ns]:
                        self._write(other, "DELETED", self.objects[other.key][key],
                                    self.objects[other.key][key])
        return gone

    def _write(self, rt: ResourceType, kind: str, obj: Obj, prev: Obj | None) -> Obj:
        self.rv += 1
        obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self.rv)}}
        key = _obj_key(obj)
        if kind == "DELETED":
            del self.objects[rt.key][key]
        else:
            self.objects[rt.key][key] = obj
        change = Change(self.rv, rt, kind, obj, prev)
        if len(self.history) == self.history.maxlen:
            self.compacted = self.history[0].rv
        self.history.append(change)
        for watcher in list(self.watchers):
            if watcher.rt.key == rt.key:
                event = watcher.translate(change)
                if event:
                    watcher.queue.put_nowait(event)
        return obj

    def _generated_name(self, rt: ResourceType, ns: str | None, prefix: str) -> str:
        for _ in range(16):
            name = prefix[:58] + "".join(random.choice(_SUFFIX) for _ in range(5))
            if (ns or "", name) not in self.objects[rt.key]:
                return name
        raise errors.already_exists(rt, prefix)


def _preconditions(rt: ResourceType, name: str, old: Obj, new: Obj) -> None:
    """What an update or a patch result may not carry: another name (400), a stale
    resourceVersion or another UID (409)."""
    if new.get("name", name) != name:
        raise errors.bad_request(f"the name of the object ({new.get('name')}) does not match "
                                 f"the name on the URL ({name})")
    if new.get("resourceVersion") and new["resourceVersion"] != old["resourceVersion"]:
        raise errors.conflict(rt, name, errors.STALE)
    if new.get("uid") and new["uid"] != old["uid"]:  # ValidateObjectMetaUpdate, twice
        cause = ("metadata.uid", "FieldValueInvalid",
                 f'Invalid value: "{new["uid"]}": field is immutable')
        raise errors.invalid(rt, name, [cause, cause])


def _obj_key(obj: Obj) -> Key:
    return (obj["metadata"].get("namespace") or "", obj["metadata"]["name"])


def _key(start: str) -> Key:
    ns, _, name = start.partition("/")
    return (ns, name)


def _encode_continue(at: int, key: Key) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": at, "start": f"{key[0]}/{key[1]}"})
    return base64.urlsafe_b64encode(raw.encode()).decode()


def _decode_continue(token: str) -> tuple[int, str]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        return int(data["rv"]), str(data["start"])
    except (ValueError, KeyError, TypeError):
        raise errors.bad_request(f"invalid continue token {token!r}") from None


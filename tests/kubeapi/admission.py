"""Admission webhooks, called as kube-apiserver calls them, on CREATE.
Owns: matching Mutating- then ValidatingWebhookConfigurations (rules: operations, apiGroups,
apiVersions, resources, scope; namespaceSelector; objectSelector), the AdmissionReview v1
request (the object as a real server sends it: defaulted, no uid or creationTimestamp yet,
`status: {}`), `?timeout=Ns` and the caBundle for TLS, applying JSONPatch replies, warnings,
and failures worded like the real server's ("admission webhook "x" denied the request: ...",
failurePolicy Fail -> 500 "failed calling webhook", Ignore -> carry on; a validating
webhook that answers with a patch has failed: "validating webhook may not return
response.patch").
Does not: call webhooks on UPDATE/DELETE/CONNECT, evaluate matchConditions (CEL), or
reinvoke (reinvocationPolicy); a configuration that uses matchConditions is called anyway.
Tests: tests/integration/kubeapi/test_admission_webhooks_are_called_on_create.py"""

from __future__ import annotations

import asyncio
import base64
import ssl
import uuid
from collections.abc import Mapping
from typing import Any

import aiohttp
import msgspec

from . import errors
from .errors import ApiProblem
from .patches import PatchError, json_patch
from .resources import BY_PATH, ResourceType
from .store import Obj, Store

USER = {"username": "admin", "groups": ["system:masters", "system:authenticated"]}
CONFIGS = (("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations"),
           ("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations"))


class Admission:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._session: aiohttp.ClientSession | None = None
        self._tls: dict[str, ssl.SSLContext] = {}

    async def close(self) -> None:
        if self._session:
            await self._session.close()

    async def create(self, rt: ResourceType, ns: str | None, obj: Obj, *, manager: str,
                     dry_run: bool) -> tuple[Obj, list[str]]:
        """Run every matching webhook on `obj`; return it mutated, with the warnings."""
        warnings: list[str] = []
        for config_path, mutating in ((CONFIGS[0], True), (CONFIGS[1], False)):
            configs = self.store.objects[BY_PATH[config_path].key]  # as a list would order them
            for _, config in sorted(configs.items()):
                for hook in config.get("webhooks") or []:
                    if not self._matches(hook, rt, ns, obj):
                        continue
                    obj = await self._call(hook, rt, ns, obj, mutating, manager, dry_run,
                                           warnings)
        return obj, warnings

    # ---- matching -------------------------------------------------------------------------

    def _matches(self, hook: Obj, rt: ResourceType, ns: str | None, obj: Obj) -> bool:
        if not any(_rule_matches(rule, rt) for rule in hook.get("rules") or []):
            return False
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if not selector_matches(hook.get("objectSelector"), labels):
            return False
        if rt.namespaced and ns:
            namespace = self.store.objects[("", "namespaces")].get(("", ns)) or {}
            ns_labels = (namespace.get("metadata") or {}).get("labels") or {}
            return selector_matches(hook.get("namespaceSelector"), ns_labels)
        if rt.kind == "Namespace":
            return selector_matches(hook.get("namespaceSelector"), labels)
        return True

    # ---- calling --------------------------------------------------------------------------

    async def _call(self, hook: Obj, rt: ResourceType, ns: str | None, obj: Obj,
                    mutating: bool, manager: str, dry_run: bool, warnings: list[str]) -> Obj:
        name = hook.get("name", "")
        timeout = int(hook.get("timeoutSeconds") or 10)
        client = hook.get("clientConfig") or {}
        if not client.get("url"):
            return self._failed(hook, obj, "only clientConfig.url is supported by the "
                                           "in-process API server (no services here)")
        url = f"{client['url']}?timeout={timeout}s"
        uid = str(uuid.uuid4())
        review = {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
                  "request": _request(uid, rt, ns, obj, manager, dry_run)}
        try:
            reply = await self._post(url, review, client.get("caBundle"), timeout)
        except (aiohttp.ClientError, TimeoutError, ValueError, ssl.SSLError) as e:
            text = "context deadline exceeded" if isinstance(e, TimeoutError) else str(e)
            return self._failed(hook, obj, f'failed to call webhook: Post "{url}": {text}')
        response = reply.get("response")
        invalid = _invalid_response(response, uid, mutating)
        if invalid:
            return self._failed(hook, obj, f"received invalid webhook response: {invalid}")
        assert isinstance(response, dict)
        warnings.extend(str(w) for w in response.get("warnings") or [])
        if not response.get("allowed"):
            raise denied(name, response.get("status") or {})
        if not response.get("patch"):
            return obj
        try:
            return json_patch(obj, msgspec.json.decode(base64.b64decode(response["patch"])))
        except (PatchError, ValueError) as e:
            raise errors.internal(f'failed calling webhook "{name}": JSON patch: {e}') from None

    def _failed(self, hook: Obj, obj: Obj, why: str) -> Obj:
        if hook.get("failurePolicy", "Fail") == "Ignore":
            return obj
        raise errors.internal(f'failed calling webhook "{hook.get("name", "")}": {why}')

    async def _post(self, url: str, review: Obj, ca_bundle: str | None, timeout: int) -> Obj:
        if self._session is None:
            self._session = aiohttp.ClientSession(headers={
                "User-Agent": "kube-apiserver-admission", "Accept": "application/json, */*"})
        tls: ssl.SSLContext | bool = False if url.startswith("http:") else self._context(
            ca_bundle)
        async with asyncio.timeout(timeout), self._session.post(
                url, data=msgspec.json.encode(review), ssl=tls,
                headers={"Content-Type": "application/json"}) as reply:
            if reply.status != 200:
                raise ValueError(f"the server responded with status {reply.status}")
            try:
                return dict(msgspec.json.decode(await reply.read()))
            except (msgspec.DecodeError, TypeError, ValueError) as e:
                raise ValueError(f"the reply is not an AdmissionReview: {e}") from None

    def _context(self, ca_bundle: str | None) -> ssl.SSLContext:
        key = ca_bundle or ""
        if key not in self._tls:
            context = ssl.create_default_context()
            if ca_bundle:
                context.load_verify_locations(cadata=base64.b64decode(ca_bundle).decode())
            self._tls[key] = context
        return self._tls[key]


def _invalid_response(response: Any, uid: str, mutating: bool) -> str:
    """VerifyAdmissionResponse: why a reply is unusable, or ""."""
    if not isinstance(response, dict):
        return "webhook response was absent"
    if response.get("uid") != uid:
        return f'expected response.uid="{uid}", got "{response.get("uid") or ""}"'
    if response.get("patch"):
        if not mutating:
            return "validating webhook may not return response.patch"
        if response.get("patchType") != "JSONPatch":
            return ("mutating webhook returned unsupported patchType "
                    f'"{response.get("patchType") or ""}"')
    return ""


def _rule_matches(rule: Mapping[str, Any], rt: ResourceType) -> bool:
    def has(field: str, value: str) -> bool:
        values = rule.get(field) or ()
        return "*" in values or value in values

    scope = rule.get("scope", "*")
    return (has("operations", "CREATE") and has("apiGroups", rt.group)
            and has("apiVersions", rt.version) and has("resources", rt.plural)
            and scope in ("*", "Namespaced" if rt.namespaced else "Cluster"))


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector (matchLabels + matchExpressions); None or {} selects all."""
    if not selector:
        return True
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        ok = {"In": labels.get(key) in values, "NotIn": labels.get(key) not in values,
              "Exists": key in labels, "DoesNotExist": key not in labels}.get(op)
        if not ok:
            return False
    return True


def denied(name: str, status: Mapping[str, Any]) -> ApiProblem:
    """ToStatusErr of k8s.io/apiserver: code at least 400, message prefixed with who denied."""
    who = f'admission webhook "{name}" denied the request'
    if status.get("message"):
        message = f"{who}: {status['message']}"
    elif status.get("reason"):
        message = f"{who}: {status['reason']}"
    else:
        message = f"{who} without explanation"
    code = int(status.get("code") or 400)
    return ApiProblem(max(code, 400), status.get("reason", ""), message)


def _request(uid: str, rt: ResourceType, ns: str | None, obj: Obj, manager: str,
             dry_run: bool) -> Obj:
    gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
    gvr = {"group": rt.group, "version": rt.version, "resource": rt.plural}
    options: Obj = {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
    if manager:
        options["fieldManager"] = manager
    request: Obj = {"uid": uid, "kind": gvk, "resource": gvr, "requestKind": gvk,
                    "requestResource": gvr, "name": (obj.get("metadata") or {}).get("name", ""),
                    "operation": "CREATE", "userInfo": USER, "object": obj, "oldObject": None,
                    "dryRun": dry_run, "options": options}
    if ns:
        request["namespace"] = ns
    return request

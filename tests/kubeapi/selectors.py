"""Label and field selectors, parsed and matched the way kube-apiserver does.
Owns: `labelSelector` (=, ==, !=, in, notin, exists, !exists; comma = AND) and `fieldSelector`
(=, ==, != on the fields each type supports: metadata.name/namespace everywhere, plus
spec.nodeName, spec.schedulerName, status.phase... on pods, involvedObject.* on events,
spec.nodeName and spec.driver on resourceslices).
On bad input: ApiProblem 400 with the server's wording ("unable to parse requirement",
"field label not supported: x").
Tests: tests/integration/kubeapi/test_selectors_filter_lists_and_watches.py"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from .errors import ApiProblem, bad_request
from .resources import ResourceType

Matcher = Callable[[Mapping[str, Any]], bool]

_SET = re.compile(r"^\s*(!?)\s*([^\s!=(),]+)\s*(?:(in|notin)\s*\(([^)]*)\))?\s*$")
_CMP = re.compile(r"^\s*([^\s!=(),]+)\s*(==|=|!=)\s*([^\s!=(),]*)\s*$")
_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")

POD_FIELDS = (
    "spec.nodeName", "spec.schedulerName", "spec.restartPolicy", "spec.serviceAccountName",
    "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName",
)
EVENT_FIELDS = (
    "involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
    "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
    "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type",
)
EXTRA_FIELDS: dict[str, tuple[str, ...]] = {
    "Pod": POD_FIELDS, "Event": EVENT_FIELDS, "Node": ("spec.unschedulable",),
    "Namespace": ("status.phase",), "ResourceSlice": ("spec.nodeName", "spec.driver"),
}


def _split_top(text: str) -> list[str]:
    """Split at commas that are not inside parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in parts if p.strip()]


def _unparsable(term: str, why: str) -> ApiProblem:
    return bad_request(f"unable to parse requirement: {why}: {term.strip()!r}")


def label_matcher(selector: str | None) -> Matcher:
    if not selector or not selector.strip():
        return lambda _obj: True
    tests: list[Callable[[Mapping[str, str]], bool]] = []
    for term in _split_top(selector):
        tests.append(_label_term(term))

    def match(obj: Mapping[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(t(labels) for t in tests)

    return match


def _label_term(term: str) -> Callable[[Mapping[str, str]], bool]:
    cmp = _CMP.match(term)
    if cmp:
        key, op, value = cmp.groups()
        _check_key(key, term)
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    found = _SET.match(term)
    if not found:
        raise _unparsable(term, "found unexpected token")
    negate, key, op, values = found.groups()
    _check_key(key, term)
    if op:
        if negate:
            raise _unparsable(term, "'!' cannot be followed by in/notin")
        options = {v.strip() for v in values.split(",") if v.strip()}
        if not options:
            raise _unparsable(term, "for 'in', 'notin' operators, values set can't be empty")
        if op == "in":
            return lambda labels: labels.get(key) in options
        return lambda labels: labels.get(key) not in options
    if negate:
        return lambda labels: key not in labels
    return lambda labels: key in labels


def _check_key(key: str, term: str) -> None:
    if not _KEY.match(key) or len(key.split("/")[-1]) > 63:
        raise _unparsable(term, f"invalid label key {key!r}")


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    node: Any = obj
    for part in path.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    if path == "source" and isinstance(node, Mapping):  # core/v1 Event: source.component
        node = node.get("component")
    if isinstance(node, bool):
        return "true" if node else "false"
    return "" if node is None else str(node)


def field_matcher(rt: ResourceType, selector: str | None) -> Matcher:
    if not selector or not selector.strip():
        return lambda _obj: True
    allowed = ("metadata.name", "metadata.namespace", *EXTRA_FIELDS.get(rt.kind, ()))
    tests: list[Matcher] = []
    for term in selector.split(","):
        cmp = _CMP.match(term)
        if not cmp:
            raise bad_request(f"invalid selector: {selector!r}; can't understand {term!r}")
        path, op, value = cmp.groups()
        if path not in allowed:
            raise bad_request(f'field label not supported: {path}')
        if op == "!=":
            tests.append(lambda o, p=path, v=value: _field_value(o, p) != v)
        else:
            tests.append(lambda o, p=path, v=value: _field_value(o, p) == v)
    return lambda obj: all(t(obj) for t in tests)

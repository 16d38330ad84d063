"""Kubernetes RBAC, as much as the chart's tests need: a request as the authorizer sees it
(k8s.io/apiserver's RequestInfo: verb, API group, resource[/subresource], namespace, name) and
the rules a ServiceAccount gets from the rendered chart's own Roles and ClusterRoles.
Owns: `access()` (path + method + query -> Access, None for non-resource paths), `rules_for()`
(ServiceAccount -> Rule per rule of each bound role the chart defines, scoped as its binding
scopes it; bound roles the chart does not define are returned by name), `Rule.allows()` (the
RBAC match: verbs, apiGroups, resources, resourceNames, namespace).
Does not: aggregate ClusterRoles, match nonResourceURLs or wildcard subresources ("*/status"):
the chart uses none of them.
Tests: tests/deploy/test_rbac_covers_what_the_code_calls.py"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

# /api/v1/namespaces/NAME/status and /finalize are subresources of the namespace itself
_NAMESPACE_SUBRESOURCES = {"status", "finalize"}
_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


@dataclass(frozen=True)
class Access:
    """One request as RBAC judges it."""

    verb: str
    group: str
    resource: str  # "pods" or "pods/binding"
    namespace: str  # "" when cluster-scoped
    name: str  # "" for collections and creates

    def __str__(self) -> str:
        what = f"{self.resource}.{self.group}" if self.group else self.resource
        where = f" in namespace {self.namespace}" if self.namespace else ""
        return f"{self.verb} {what}{f' {self.name!r}' if self.name else ''}{where}"


def access(method: str, path: str, query: Mapping[str, str]) -> Access | None:
    """The RBAC attributes of a request (None: a non-resource URL such as /version)."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 3:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        group, rest = parts[1], parts[3:]
    else:
        return None
    watch = rest[0] == "watch" or query.get("watch") in ("true", "1")
    if rest[0] == "watch":
        rest = rest[1:]
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    resource, name = rest[0], rest[1] if len(rest) > 1 else ""
    if len(rest) > 2:
        resource = f"{resource}/{rest[2]}"
    if rest[0] == "namespaces":  # the Namespace object itself is cluster-scoped
        namespace = ""
    if method == "GET":
        verb = "watch" if watch else "get" if name else "list"
    elif method == "DELETE" and not name:
        verb = "deletecollection"
    else:
        verb = _VERBS[method]
    return Access(verb, group, resource, namespace, name)


@dataclass(frozen=True)
class Rule:
    """One PolicyRule of a chart role, as a binding grants it."""

    source: str  # "ClusterRole/x (ClusterRoleBinding/y)"
    namespace: str | None  # where it applies: None = every namespace and cluster-scoped
    groups: frozenset[str]
    resources: frozenset[str]
    verbs: frozenset[str]
    names: frozenset[str]  # resourceNames; empty = any

    def allows(self, a: Access) -> bool:
        if self.namespace is not None and a.namespace != self.namespace:
            return False
        return (_has(self.verbs, a.verb) and _has(self.groups, a.group)
                and _has(self.resources, a.resource)
                and (not self.names or a.name in self.names))  # a create has no name: denied

    def grants(self) -> Iterator[tuple[str, str, str]]:
        """(group, resource, verb) for each combination this rule names."""
        for group in sorted(self.groups):
            for resource in sorted(self.resources):
                for verb in sorted(self.verbs):
                    yield group, resource, verb

    def __str__(self) -> str:
        names = f" resourceNames={sorted(self.names)}" if self.names else ""
        where = f" in namespace {self.namespace}" if self.namespace else ""
        return (f"{self.source}: apiGroups={sorted(self.groups)} resources="
                f"{sorted(self.resources)} verbs={sorted(self.verbs)}{names}{where}")


def _has(values: frozenset[str], value: str) -> bool:
    return "*" in values or value in values


def rules_for(objs: list[dict[str, Any]], account: str,
              namespace: str) -> tuple[list[Rule], set[str]]:
    """The rules the chart's own roles grant ServiceAccount namespace/account, and the names
    of the roles bound to it that the chart does not define (system:kube-scheduler...)."""
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
             for o in objs if o["kind"] in ("Role", "ClusterRole")}
    rules: list[Rule] = []
    outside: set[str] = set()
    for binding in objs:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding") or not any(
                s["kind"] == "ServiceAccount" and s["name"] == account
                and s.get("namespace") == namespace for s in binding.get("subjects") or ()):
            continue
        scope = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" \
            else None
        ref = binding["roleRef"]
        role = roles.get((ref["kind"], scope if ref["kind"] == "Role" else None, ref["name"]))
        if role is None:
            outside.add(ref["name"])
            continue
        source = f"{ref['kind']}/{ref['name']} ({binding['kind']}/" \
                 f"{binding['metadata']['name']})"
        for r in role.get("rules") or ():
            rules.append(Rule(source, scope, frozenset(r.get("apiGroups") or ()),
                              frozenset(r.get("resources") or ()),
                              frozenset(r.get("verbs") or ()),
                              frozenset(r.get("resourceNames") or ())))
    return rules, outside

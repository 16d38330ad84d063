"""The rules kube-apiserver v1.36 applies to a ResourceSlice's consumable capacity, as recorded
in dra-samples/returned/validation-results.txt, with its wording: capacity names (a C
identifier, optionally domain-qualified), requestPolicy only with allowMultipleAllocations,
one of validRange / validValues, a default when validRange is set, max <= value, the default
on min + n*step. `slice_problems()` returns (field, message) pairs, empty when valid.
objects.validate applies it to every ResourceSlice the server stores (422 like the real one);
tests also call it on what slices.py builds.
Tests: tests/unit/dra/test_slices_pass_server_validation.py"""

from __future__ import annotations

import re
from typing import Any

from gpuslice.quantity import parse_quantity

_C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
Problem = tuple[str, str]


def _name_ok(name: str) -> bool:
    domain, _, ident = name.rpartition("/")
    return bool(_C_IDENTIFIER.match(ident)) and (not domain or bool(_DOMAIN.match(domain)))


def slice_problems(obj: dict[str, Any]) -> list[Problem]:
    out: list[Problem] = []
    for i, device in enumerate((obj.get("spec") or {}).get("devices") or []):
        where = f"spec.devices[{i}].capacity"
        for name, cap in (device.get("capacity") or {}).items():
            if not _name_ok(name):
                out.append((where, f'Invalid value: "{name}": a valid C identifier must start '
                                   "with alphabetic character or '_', followed by a string of "
                                   "alphanumeric characters or '_'"))
            policy = cap.get("requestPolicy")
            if policy is not None:
                out += _policy(policy, cap["value"], bool(device.get("allowMultipleAllocations")),
                               f"{where}[{name}].requestPolicy")
    return out


def _policy(policy: dict[str, Any], value: str, shared: bool, where: str) -> list[Problem]:
    if not shared:
        return [(where, "Forbidden: allowMultipleAllocations must be true")]
    valid, values = policy.get("validRange"), policy.get("validValues")
    if valid and values:
        return [(where, 'Forbidden: exactly one policy can be specified, cannot specify '
                        '"validValues" and "validRange" at the same time')]
    default = policy.get("default")
    if valid and default is None:
        return [(f"{where}.default", "Required value: required when validRange is defined")]
    out: list[Problem] = []
    if values:
        parsed = [parse_quantity(v) for v in values]
        if len(parsed) > 10 or parsed != sorted(set(parsed)):
            out.append((f"{where}.validValues", "Invalid value: at most 10, strictly ascending"))
        if default is not None and parse_quantity(default) not in parsed:
            out.append((f"{where}.default", "Invalid value: must be one of validValues"))
    if valid:
        low = parse_quantity(valid["min"])
        if valid.get("max") is not None and parse_quantity(valid["max"]) > parse_quantity(value):
            out.append((f"{where}.validRange.max", f'Invalid value: "{valid["max"]}": max is '
                                                   f"larger than capacity value: {value}"))
        step = valid.get("step")
        if step is not None and (parse_quantity(default) - low) % parse_quantity(step):
            out.append((f"{where}.validRange.step", f'Invalid value: "{default}": value is not '
                                                    f"a multiple of a given step ({step}) from "
                                                    f"({valid['min']})"))
    return out

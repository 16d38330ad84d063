"""The objects a real kube-apiserver and kube-scheduler v1.36 took and returned in the DRA
experiment (tests/golden/dra-samples/, README there), as dicts for golden tests.
Owns: loading (multi-document YAML and `kind: List` files flattened, validation/ cases left
out) and `sent()`: an object as a client would create it (server-set metadata removed).
Tests: tests/integration/kubeapi/test_dra_types_take_the_real_servers_objects.py"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

SAMPLES = Path(__file__).resolve().parents[1] / "golden" / "dra-samples"
DRA_KINDS = ("ResourceSlice", "ResourceClaim", "ResourceClaimTemplate", "DeviceClass")
_SERVER_SET = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields",
               "deletionTimestamp", "deletionGracePeriodSeconds")


def load(folder: str, kinds: tuple[str, ...] = DRA_KINDS) -> list[tuple[str, dict[str, Any]]]:
    """(file name, object) for every object of `kinds` in SAMPLES/<folder>/*.yaml."""
    found = []
    for path in sorted((SAMPLES / folder).glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            for obj in (doc or {}).get("items", [doc]) if doc else []:
                if obj.get("kind") in kinds:
                    found.append((path.name, obj))
    return found


def sent(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` without what the server sets, and without status (written through /status)."""
    meta = {k: v for k, v in obj["metadata"].items() if k not in _SERVER_SET}
    meta.pop("ownerReferences", None)  # the owners (pods) are not created in golden tests
    return {k: v for k, v in {**obj, "metadata": meta}.items() if k != "status"}

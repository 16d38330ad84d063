"""Swapping the assignments of two interchangeable pods so that the swap always completes.

Owns: the swap journal `<state-dir>/swaps.json` and `Swapper`: `start(a, b)` writes the intent
(each pod's uid, name, assignment before and after, and the inode of its region directory)
to the journal (files.write_atomic: durably) before any write, then `finish()` does the writes.
`finish()` runs every verify round and so at agent start (the journal is read back), and
completes every unfinished swap: each pod's annotation is set to its target with
kube.patch.update_metadata (fresh read, resourceVersion guard, retried on 409: a concurrent
status write does not fail it), then the region directories are exchanged unless their
inodes show that already happened, then the entry is dropped.
Invariant: a swap once journalled is rolled forward (each target is what PodResources showed
the pod really got), so an error or a kill between the two patches leaves at most one round
in which both annotations name the same GPU, never more; `settled` gives Allocate's
over-commit check the assignments as they are once the swap is done.
Does not: decide which pods to swap (verify.swaps) or emit events (the agent, on what
`finish` returns).
Failure: API errors leave the entry for the next round; a pod deleted or replaced meanwhile
counts as done; a pod whose assignment someone else rewrote is left alone (logged).
Tests: tests/unit/node/test_swap_journal.py, tests/integration/node/test_swap_completes.py
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from gpuslice import codec
from gpuslice.container import regions
from gpuslice.errors import CodecError
from gpuslice.files import write_atomic
from gpuslice.kube import errors
from gpuslice.kube.patch import update_metadata
from gpuslice.model import PodAssignment

__all__ = ["Swapper"]

log = logging.getLogger(__name__)
KEY = codec.ASSIGNMENT_ANNOTATION


class _Foreign(Exception):
    """The pod's assignment is neither the one swapped from nor the one swapped to."""


def _ino(path: Path) -> int | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_ino


class Swapper:
    def __init__(self, client: AsyncClient, regions_root: str | Path, journal: Path) -> None:
        self.client = client
        self.regions_root = Path(regions_root)
        self.journal = journal
        self.entries: list[list[dict[str, Any]]] = self._load()

    # ---- the journal
    def _load(self) -> list[list[dict[str, Any]]]:
        if not self.journal.exists():
            return []
        try:
            data = json.loads(self.journal.read_text())
            return [[{k: p[k] for k in ("uid", "namespace", "name", "from", "to", "ino")}
                     for p in e] for e in data if len(e) == 2]
        except (OSError, ValueError, TypeError, KeyError) as exc:
            log.warning("swap journal %s unreadable (%s); starting without it", self.journal, exc)
            return []

    def _save(self) -> None:
        write_atomic(self.journal, json.dumps(self.entries).encode(), 0o600)

    def pending(self) -> set[str]:
        """uids of pods whose swap is journalled but not finished."""
        return {p["uid"] for e in self.entries for p in e}

    def settled(self, assigned: Mapping[str, PodAssignment]) -> dict[str, PodAssignment]:
        """`assigned` (uid -> assignment, as the pods' annotations say now) with each pod of an
        unfinished swap at its target, which is what the kubelet gave it: between the two
        writes both pods name one GPU, and counting that GPU twice would refuse a new pod's
        Allocate for an over-commit that does not exist."""
        out = dict(assigned)
        for p in (p for e in self.entries for p in e if p["uid"] in out):
            try:
                out[p["uid"]] = codec.decode_assignment(p["to"])
            except CodecError as exc:  # journalled from an annotation that decoded then
                log.warning("swap journal: target of %s unreadable: %s", p["uid"], exc)
        return out

    # ---- swapping
    def start(self, a: Mapping[str, Any], b: Mapping[str, Any]) -> None:
        """Journal the swap of a's and b's assignments; `finish()` carries it out."""
        entry = []
        for x, y in ((a, b), (b, a)):
            mx, my = x["metadata"], y["metadata"]
            entry.append({"uid": str(mx["uid"]), "namespace": mx["namespace"],
                          "name": mx["name"], "from": mx["annotations"][KEY],
                          "to": my["annotations"][KEY],
                          "ino": _ino(self.regions_root / str(mx["uid"]))})
        self.entries.append(entry)
        self._save()

    async def finish(self) -> list[list[dict[str, Any]]]:
        """Complete every journalled swap that the API lets us; returns those completed (for
        events and metrics). Swaps that meet an API error stay journalled for the next round."""
        done = []
        for entry in list(self.entries):
            outcome = await self._complete(entry)
            if outcome is None:
                continue  # retried next round
            self.entries.remove(entry)
            self._save()
            if outcome:
                done.append(entry)
        return done

    async def _complete(self, entry: list[dict[str, Any]]) -> bool | None:
        """True: completed; False: abandoned (a foreign rewrite); None: try again later."""
        for p in entry:
            def change(obj: Mapping[str, Any], p: dict[str, Any] = p) -> Any:
                meta = obj.get("metadata") or {}
                if meta.get("uid") != p["uid"]:
                    return None  # a new pod with that name: ours is gone
                cur = (meta.get("annotations") or {}).get(KEY)
                if cur == p["to"]:
                    return None
                if cur != p["from"]:
                    raise _Foreign(cur)
                return {"annotations": {KEY: p["to"]}}

            try:
                await update_metadata(self.client, Pod, p["name"], change,
                                      namespace=p["namespace"])
            except errors.NotFound:
                continue  # deleted: nothing to correct on it
            except _Foreign:
                log.error("swap of %s abandoned: the assignment of %s/%s was rewritten by "
                          "someone else", ", ".join(f"{q['namespace']}/{q['name']}"
                                                    for q in entry), p["namespace"], p["name"])
                return False
            except errors.APIError as exc:
                log.warning("swapping assignments of two interchangeable pods: %s; "
                            "completing it next round", exc)
                return None
        self._swap_regions(entry)
        return True

    def _swap_regions(self, entry: list[dict[str, Any]]) -> None:
        """Exchange the two region directories, once: the inodes journalled at start say
        whether a run killed after this step already did it."""
        a, b = entry
        now = (_ino(self.regions_root / a["uid"]), _ino(self.regions_root / b["uid"]))
        if now == (b["ino"], a["ino"]) and now != (a["ino"], b["ino"]):
            return  # already exchanged
        if now != (a["ino"], b["ino"]):
            log.warning("region directories of %s and %s changed since the swap began; "
                        "left as they are", a["uid"], b["uid"])
            return
        try:
            regions.swap(self.regions_root, a["uid"], b["uid"])
        except OSError as exc:
            log.warning("exchanging region directories of %s and %s: %s", a["uid"], b["uid"],
                        exc)

"""The DRA plugin's memory across restarts: `<state-dir>/dra/prepared.json`, the claims this node
prepared (their shares, pods, gang and when; an entry written before gangs has none, and an
older agent ignores the field, so the version stays 1).

Owns: loading, adding and dropping entries; every change rewrites the whole file atomically
and durably (temporary file, fsync, rename, fsync of the folder), so a kill or a power loss at
any instant leaves the old or the new file, never a mix.
Does not: decide what a claim gets (claims.py) or touch regions and CDI specs (plugin.py).
Failure: a file that does not decode (edited by hand, another version) is moved aside to
`prepared.json.bad-<time>` with an error in the log and the plugin starts empty: the kubelet's
next prepare of each claim rebuilds its entry from the API server (regions are kept).
Tests: tests/unit/dra/test_plugin_prepare.py, test_plugin_gang.py
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import msgspec

from gpuslice.container.limits import ClaimShares
from gpuslice.files import write_atomic

__all__ = ["Checkpoint", "Entry"]

log = logging.getLogger(__name__)
VERSION = 1


class Entry(msgspec.Struct, frozen=True):
    claim: ClaimShares
    prepared_at: float  # unix seconds of the first prepare


class _File(msgspec.Struct):
    version: int
    claims: dict[str, Entry]  # by claim uid


class Checkpoint:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.entries: dict[str, Entry] = self._load()

    def _load(self) -> dict[str, Entry]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        try:
            f = msgspec.json.decode(data, type=_File)
            if f.version != VERSION:
                raise msgspec.ValidationError(f"version {f.version}, expected {VERSION}")
            return f.claims
        except msgspec.DecodeError as exc:
            bad = self.path.with_name(f"{self.path.name}.bad-{int(time.time())}")
            os.replace(self.path, bad)
            log.error("DRA checkpoint %s is unreadable (%s): moved to %s; starting empty, the "
                      "kubelet's next prepare of each claim rebuilds it", self.path, exc, bad)
            return {}

    def _save(self) -> None:
        write_atomic(self.path, msgspec.json.encode(_File(VERSION, self.entries)), 0o600)

    def get(self, uid: str) -> Entry | None:
        return self.entries.get(uid)

    def put(self, claim: ClaimShares) -> Entry:
        """Record the claim (keeping its first prepare time); saved before returning."""
        old = self.entries.get(claim.uid)
        entry = Entry(claim, old.prepared_at if old else time.time())
        if entry != old:
            self.entries[claim.uid] = entry
            self._save()
        return entry

    def drop(self, uid: str) -> bool:
        if self.entries.pop(uid, None) is None:
            return False
        self._save()
        return True

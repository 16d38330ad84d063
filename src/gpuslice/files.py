"""Files the node's daemons must never leave half-written: `write_atomic`, and `replacing`
for a file written piece by piece (a container's region, container/regions.py).

Used for the DRA checkpoint and CDI specs (dra/) and the node agent's journals (node/): a
kill at any instant leaves the old file or the new one, and `durable` ones also survive a
power loss. The temporary file has a unique name (O_EXCL, O_NOFOLLOW: never a link planted
in the folder) and is removed if the write fails.
Tests: tests/unit/test_files.py"""

from __future__ import annotations

import contextlib
import os
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path

__all__ = ["replacing", "write_atomic"]


@contextlib.contextmanager
def replacing(target: Path, mode: int = 0o644, *, durable: bool = True) -> Iterator[int]:
    """The descriptor of a new temporary file beside `target`, for the caller to fill; on a
    clean exit it replaces `target` (`durable`: fsync of the file, then of the folder), on an
    error it is removed and `target` is left as it was."""
    tmp = target.with_name(f".{target.name}.{uuidlib.uuid4().hex}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        try:
            yield fd
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        fd = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_atomic(target: Path, data: bytes, mode: int = 0o644, *, durable: bool = True) -> None:
    """Replace `target` with `data`: readers and a killed process see the old or the new file.
    `durable` also survives a power loss (fsync of the file, then of the folder); without it
    a crash of the machine may lose the write, for files that are rebuilt anyway."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with replacing(target, mode, durable=durable) as fd:
        os.write(fd, data)

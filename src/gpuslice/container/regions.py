"""Containers' regions on the host: made at Allocate, read safely, removed at the end.

Layout: `<state-dir>/regions/<pod-uid>/<container>/region` (device plugin) and
`<state-dir>/dra/regions/<claim-uid>/region` (DRA: one per claim, removed only by the DRA
plugin), directories the agent's (0755), and `<state-dir>/board` (root's, 1777 like /tmp):
the node's demand board, one file per GPU that the library of every container creates (0666)
and writes (docs/compute.md, the board); `<state-dir>/gangs/<namespace>/<gang>` (1777 below
the agent's 0755 ones): one pod gang's state, shared by the containers of its pods.
At Allocate the agent writes the region itself, complete, with the container's limits
(shim.RegionSpec), 0666 so that every uid of the container shares it: the library finds it at
its fixed path (shim.AGENT_REGION, where the container directory is mounted) and its limits win
over the container's env. Nobody in the container but its root can replace the file.
Owns: `prepare`, `prepare_board`, `prepare_gang`, `place`, `scan`, `scan_claims`, `remove`,
`remove_gangs`, `swap`.
Does not: interpret usage (exporter.py, watchdog.py) or decide which pods or claims are gone
(the watchdog asks the cluster view; the DRA plugin the API server).
Invariant: the files are the tenant's, so they are never trusted: directories are walked
without following symlinks, and files read with shim.Region.read (no symlink, no FIFO, a
bounded read); anything it refuses is a `problem` string, never a hang or a crash.
Tests: tests/unit/node/test_regions.py, tests/integration/node/test_exporter_reads_real_regions.py
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import stat
import time
import uuid as uuidlib
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from gpuslice import files
from gpuslice.container.edits import REGION_FILE
from gpuslice.dialects import DNS_LABEL
from gpuslice.errors import ShimError
from gpuslice.shim import SLOTS_OFFSET, Region, RegionSpec

__all__ = ["BOARD_DIR", "GANGS_DIR", "ContainerRegion", "place", "prepare", "prepare_board",
           "prepare_gang", "remove", "remove_gangs", "scan", "scan_claims", "swap"]

BOARD_DIR = "board"
GANGS_DIR = "gangs"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class ContainerRegion:
    pod_uid: str
    container: str
    dir: Path
    region: Region | None  # None: no region yet (no CUDA process ran) or a problem
    problem: str | None = None


def prepare(root: str | Path, *parts: str) -> Path:
    """Create (or keep) a region directory, `root/<pod-uid>/<container>` (device plugin) or
    `root/<claim-uid>` (DRA); refuses a symlink in the way."""
    dirs = [Path(root)]
    for part in parts:
        dirs.append(dirs[-1] / part)
    for p in dirs:
        with contextlib.suppress(FileExistsError):
            os.mkdir(p, 0o755)
        st = os.lstat(p)
        if not stat.S_ISDIR(st.st_mode):
            raise OSError(f"{p}: exists and is not a directory; remove it")
        os.chmod(p, 0o755)  # mkdir's mode is cut by the umask; older agents made 1777
    return dirs[-1]


def prepare_board(state_dir: str | Path) -> Path:
    """Create (or keep) the node's board directory, `<state-dir>/board`, mode 1777: every
    container's library (any uid) creates its GPU's board file there, and the sticky bit keeps
    a tenant from removing or renaming another's file. Refuses a symlink in the way."""
    d = Path(state_dir) / BOARD_DIR
    with contextlib.suppress(FileExistsError):
        os.mkdir(d, 0o755)
    if not stat.S_ISDIR(os.lstat(d).st_mode):
        raise OSError(f"{d}: exists and is not a directory; remove it")
    os.chmod(d, 0o1777)  # mkdir's mode is cut by the umask
    return d


def _open_dir(path: Path, mode: int, dir_fd: int | None = None) -> int:
    """Create (or keep) directory `path` (its last part, below `dir_fd` if given), and return a
    descriptor of it, mode `mode`: never through a symlink (O_NOFOLLOW), never a file."""
    name = path.name if dir_fd is not None else str(path)
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o755, dir_fd=dir_fd)
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # a symlink or a file in the way
            raise OSError(exc.errno, f"{path}: exists and is not a directory; remove it "
                                     "(the node agent makes it)") from None
        raise
    try:
        os.fchmod(fd, mode)  # mkdir's mode is cut by the umask
    except BaseException:
        os.close(fd)
        raise
    return fd


def prepare_gang(root: str | Path, namespace: str, gang: str) -> Path:
    """Create (or keep) the directory of gang `gang` of `namespace`, `root/<namespace>/<gang>`,
    mode 1777: every container of the gang's pods (any uid) creates and shares the gang file
    there; `root` and `root/<namespace>` are the agent's (0755), so a tenant can write only
    inside its gang's directory. Each level is opened below the last (O_NOFOLLOW): a symlink
    or file in the way is refused, never followed. Its mtime is set to now: the sweep
    (remove_gangs) counts its grace from the gang's last Allocate."""
    for part in (namespace, gang):
        if not DNS_LABEL.fullmatch(part):
            raise ValueError(f"gang {namespace}/{gang}: {part!r} is not a DNS label")
    d = Path(root)
    fd = _open_dir(d, 0o755)
    try:
        for part, mode in ((namespace, 0o755), (gang, 0o1777)):
            d = d / part
            below = _open_dir(d, mode, fd)
            os.close(fd)
            fd = below
        os.utime(fd)
    finally:
        os.close(fd)
    return d


def remove_gangs(root: str | Path, live: Collection[tuple[str, str]], grace_s: float,
                 now: float) -> list[str]:
    """Remove each gang directory `root/<namespace>/<gang>` that no live pod names (`live`:
    (namespace, gang) of every live pod of the node, from a fresh list) and that is older than
    `grace_s` (mtime), then namespace directories left empty; returns the removed
    `<namespace>/<gang>`. Walks without following symlinks (rmtree neither)."""
    removed = []
    for ns in _dirs(root):
        for g in _dirs(ns.path):
            if (ns.name, g.name) in live:
                continue
            try:
                if now - g.stat(follow_symlinks=False).st_mtime < grace_s:
                    continue
            except FileNotFoundError:
                continue
            shutil.rmtree(g.path, ignore_errors=True)
            removed.append(f"{ns.name}/{g.name}")
        with contextlib.suppress(OSError):  # not empty: a live gang's, or one in its grace
            os.rmdir(ns.path)
    return removed


def place(path: Path, spec: RegionSpec) -> str:
    """Make `path` the region of `spec`: "kept" if a region with exactly these limits is there
    (ours, 0666: a restarted container keeps its region and usage), else written complete under
    a temporary name and renamed into place ("created" or "replaced": a region the container's
    env made, or one it tampered with, never survives an Allocate). Never truncates a file."""
    existed = os.path.lexists(path)
    try:
        st = os.lstat(path)
        if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o666 and \
                spec.matches(Region.read(path, check_alive=False)):
            return "kept"
    except (OSError, ShimError):
        pass  # missing, unreadable or foreign: write ours
    data = spec.encode(created_unix_s=int(time.time()))
    # not durable: a region a crash leaves half-written matches nothing and is replaced
    with files.replacing(path, 0o600, durable=False) as fd:
        os.ftruncate(fd, len(data))  # the slots stay a hole of zeros, as the library has them
        os.pwrite(fd, data[8:SLOTS_OFFSET], 8)
        os.pwrite(fd, data[:8], 0)  # the magic last, as the library writes it
        os.fchmod(fd, 0o666)
    return "replaced" if existed else "created"


def _dirs(root: str | Path) -> list[os.DirEntry[str]]:
    with contextlib.suppress(FileNotFoundError), os.scandir(root) as entries:
        return [e for e in entries if e.is_dir(follow_symlinks=False)]
    return []


def _read(owner: str, container: str, d: Path) -> ContainerRegion:
    f = d / REGION_FILE
    if not os.path.lexists(f):
        return ContainerRegion(owner, container, d, None)
    try:
        return ContainerRegion(owner, container, d, Region.read(f, check_alive=False))
    except ShimError as exc:
        return ContainerRegion(owner, container, d, None, str(exc))


def scan(root: str | Path) -> list[ContainerRegion]:
    """Every container directory under `root`, with its region read (or why not)."""
    return [_read(pod.name, c.name, Path(c.path)) for pod in _dirs(root) for c in _dirs(pod.path)]


def scan_claims(root: str | Path) -> list[ContainerRegion]:
    """DRA: every claim directory `root/<claim-uid>` with its region (`pod_uid` holds the claim
    uid, `container` is empty: all containers of the claim share the region)."""
    return [_read(c.name, "", Path(c.path)) for c in _dirs(root) if not c.name.startswith(".")]


def remove(root: str | Path, pod_uid: str) -> None:
    """Remove a pod's region directories (rmtree never follows the tenant's symlinks)."""
    if "/" in pod_uid or pod_uid in ("", ".", ".."):
        raise ValueError(f"not a pod uid: {pod_uid!r}")
    shutil.rmtree(Path(root) / pod_uid, ignore_errors=True)


def swap(root: str | Path, a_uid: str, b_uid: str) -> None:
    """Exchange two pods' region directories (after their assignments were swapped). Bind
    mounts follow the directory, so each container keeps its own region under its new owner.
    A pod without a directory yet (no Allocate answered) simply takes the other's. Where the
    kernel can (renameat2 RENAME_EXCHANGE), both names swap at once, so a reader (exporter,
    watchdog, a check) never finds either missing."""
    r = Path(root)
    a, b = r / a_uid, r / b_uid
    if a.is_dir() and b.is_dir():
        if _exchange(a, b):
            return
        tmp = r / f".swap-{uuidlib.uuid4().hex}"  # a moment with no `a`: readers retry
        os.rename(a, tmp)
        os.rename(b, a)
        os.rename(tmp, b)
    elif a.is_dir():
        os.rename(a, b)
    elif b.is_dir():
        os.rename(b, a)


_RENAME_EXCHANGE, _AT_FDCWD = 2, -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux >= 3.15, glibc >= 2.28); False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):  # no such call, or not on this fs
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


"""Python side of libgpuslice: shared-region reader, library path, `gpuslice run/top/shim`.

Owns: `Region` (read-only view of the region file; mirrors native/include/gpuslice/region.h,
documented in docs/shim.md), `RegionSpec` (the bytes of a new region, as the library would
write them: what the node agent creates at Allocate), `library_path()`, and the three CLI
commands. Does not: place region files (container/regions.py does) or enforce anything itself.
Invariants: stdlib only at import time (runs with PYTHONPATH=src where msgspec is absent; click and
rich are imported inside the commands); totals are derived from live slots, as the library does.
Failure: ShimError (CLI exit 3) for a missing library or an unreadable/foreign region,
EnvironmentProblem (exit 3) for no NVIDIA driver, QuantityError (exit 1) for a bad --gpu-memory,
CommandNotFound (127) / CommandNotExecutable (126), as a shell. Tests: tests/unit/test_shim_py.py,
tests/unit/test_cli_run.py, tests/native/ (fake driver)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuslice.errors import (
    CommandNotExecutable,
    CommandNotFound,
    EnvironmentProblem,
    GpusliceError,
    ShimError,
    warn,
)

__all__ = ["AGENT_REGION", "DeviceView", "ProcessView", "Region", "RegionSpec", "driver_problem",
           "library_path", "run_command", "shim_command", "top_command"]

# ---- layout (native/include/gpuslice/region.h, GS_REGION_VERSION 2) ----
MAGIC = 0x4543494C53555047  # b"GPUSLICE" little-endian
VERSION = 2
HEADER_SIZE, DEVICE_SIZE, SLOT_SIZE = 4096, 512, 384
MAX_DEVICES, MAX_SLOTS = 16, 1024
DEVICES_OFFSET = HEADER_SIZE
SLOTS_OFFSET = DEVICES_OFFSET + MAX_DEVICES * DEVICE_SIZE
REGION_SIZE = SLOTS_OFFSET + MAX_SLOTS * SLOT_SIZE
# magic .. total_size (80 bytes), index_limit[16], pid_ns, default_limit, device_lock
_HEADER = struct.Struct(f"<QIIIIIIIiiIQQiIQ{MAX_DEVICES}QQQi")
_DEVICE = struct.Struct("<64sQQII")  # uuid, limit, context_bytes, state, index
DEVICE_READY = 1
REGION_UUID_LIST = 1  # header flag: devices fixed by GPUSLICE_DEVICE_UUIDS
REGION_PRIORITY, REGION_LOW_PRIORITY = 2, 4  # header flags: priority recorded; it is 1 (low)
# pid, state, start_time, used, pending, nvml_pid
_SLOT = struct.Struct(f"<iIQ{MAX_DEVICES}Q{MAX_DEVICES}QI")
_COMPUTE_PROC = struct.Struct("<QQQQqQ")  # busy, throttle, launches, throttled, inflight, last
SLOT_STATES = {0: "free", 1: "live", 2: "reclaiming"}  # low byte; a reclaimer's pid above it
SLOT_LIVE = 1
_COMPUTE_PROC_OFFSET = 288
LIBRARY_ENV = "GPUSLICE_LIBRARY"
# Where the library looks first for the node agent's region (GS_AGENT_REGION, native/src/config.h)
AGENT_REGION = "/var/run/gpuslice/region"
# Where, with the agent's region, the library finds the node-wide board (GS_AGENT_BOARD, ditto)
AGENT_BOARD = "/var/run/gpuslice-board"
# Where the node agent mounts a pod's gang directory (docs/node-agent.md, pods of one job), and
# the env that names it to the library: its processes keep their gang state in `<dir>/gang`,
# shared by every container handed the same directory, instead of in the region
AGENT_GANG = "/var/run/gpuslice-gang"
GANG_DIR_ENV = "GPUSLICE_GANG_DIR"
COMPUTE_MODES = {"hard": 0, "work-conserving": 1}


def default_region_path() -> Path:
    """The library's default: CUDA_DEVICE_MEMORY_SHARED_CACHE, else /tmp/gpuslice.region (no uid:
    every uid of a container shares one cap)."""
    env = os.environ.get("CUDA_DEVICE_MEMORY_SHARED_CACHE")
    return Path(env) if env else Path("/tmp/gpuslice.region")


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """State (field 3) and start time (field 22, clock ticks) of /proc/<pid>/stat, or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    try:
        fields = text[text.rindex(")") + 2:].split()
        return fields[0], int(fields[19])
    except (ValueError, IndexError):
        return None


def pid_alive(pid: int, start_time: int) -> bool:
    """Same rule as the library: the pid exists, is no zombie, and its start time is unchanged."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    stat = _proc_stat(pid)
    if stat is None:
        return True
    state, now = stat
    return state not in ("Z", "X") and (start_time == 0 or now == start_time)


@dataclass(frozen=True)
class DeviceView:
    """One device entry (a GPU, keyed by UUID): limit and the container's total (used + pending
    over live slots). `index` is the entry; `device_index` the container device index its limit
    came from (GPUSLICE_DEVICE_UUIDS order, or the ordinal of the first process that used it)."""

    index: int
    uuid: str
    limit: int
    context_bytes: int
    used: int = 0
    pending: int = 0
    device_index: int = 0


@dataclass(frozen=True)
class ProcessView:
    """One claimed slot. `alive` is None when liveness was not checked (other pid namespace).
    `used`/`pending` are indexed by device entry (DeviceView.index), not by CUDA ordinal."""

    slot: int
    pid: int
    state: str
    start_time: int
    alive: bool | None
    used: tuple[int, ...]
    pending: tuple[int, ...]
    gpu_busy_ns: int = 0
    throttle_ns: int = 0
    nvml_pid: int = 0  # the pid NVML lists it under, as the process sees it; 0 unknown


def _read_region_file(p: Path) -> bytes:
    """The region's bytes, for files a container controls: never follows a symlink, never opens
    a FIFO or device (O_PATH, then fstat), reads no more than the header-declared size."""
    try:
        handle = os.open(p, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ShimError(f"region {p}: no such file; start a process under libgpuslice first "
                        "(`gpuslice run ...`) or pass --region PATH") from None
    except OSError as exc:
        raise ShimError(f"region {p}: cannot open: {exc.strerror}; check the path") from None
    try:
        st = os.fstat(handle)
        if stat.S_ISLNK(st.st_mode):  # O_PATH | O_NOFOLLOW opens the link itself
            raise ShimError(f"region {p}: a symbolic link (never followed); pass the real path")
        if not stat.S_ISREG(st.st_mode):
            raise ShimError(f"region {p}: not a regular file (mode {st.st_mode:o}); a region is a "
                            "file the library creates; check the path")
        if st.st_size > REGION_SIZE:
            raise ShimError(f"region {p}: {st.st_size} bytes, more than a region ({REGION_SIZE}); "
                            "not a gpuslice region of this version")
        try:
            fd = os.open(f"/proc/self/fd/{handle}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise ShimError(f"region {p}: cannot read: {exc.strerror}; check permissions") from None
    finally:
        os.close(handle)
    try:
        head = os.pread(fd, HEADER_SIZE, 0)
        declared = _HEADER.unpack_from(head, 0)[15] if len(head) >= _HEADER.size else len(head)
        size = min(declared, REGION_SIZE)
        chunks, got = [head[:size]], min(len(head), size)
        while got < size:
            chunk = os.pread(fd, size - got, got)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Region:
    """Read-only snapshot of a region file. `Region.read(path)`; raises ShimError if unusable."""

    path: Path
    version: int
    device_count: int
    sm_limit: int
    compute_mode: int
    slot_hwm: int
    created_unix_s: int
    creator_pid: int
    devices: tuple[DeviceView, ...]
    processes: tuple[ProcessView, ...] = field(default=())
    index_limits: tuple[int, ...] = ()  # limit by container device index (0..15)
    uuid_list: bool = False  # devices fixed by GPUSLICE_DEVICE_UUIDS (others are refused)
    priority: int | None = None  # CUDA_TASK_PRIORITY the region records (None: not recorded)
    pid_ns: int = 0  # pid namespace inode of its users (0: not claimed yet)
    default_limit: int = 0  # limit of indexes >= 16

    @classmethod
    def read(cls, path: str | os.PathLike[str], *, check_alive: bool = True) -> Region:
        """Parse the file; `check_alive=False` when reading from another pid namespace (node agent):
        every live slot then counts, as the library would count it until it is reclaimed."""
        p = Path(path)
        return cls.parse(_read_region_file(p), path=p, check_alive=check_alive)

    @classmethod
    def parse(cls, data: bytes, *, path: Path, check_alive: bool = True) -> Region:
        """Decode region bytes (see docs/shim.md "Region layout")."""
        if len(data) < HEADER_SIZE:
            raise ShimError(f"region {path}: {len(data)} bytes, too short for a gpuslice region; "
                            "check the path")
        (magic, version, header_size, device_size, slot_size, max_devices, max_slots, device_count,
         sm_limit, compute_mode, slot_hwm, _last_reclaim, created, creator, flags,
         total_size, *rest) = _HEADER.unpack_from(data, 0)
        if magic != MAGIC:
            raise ShimError(f"region {path}: not a gpuslice region (magic {magic:#x}); "
                            "check the path")
        if (version, header_size, device_size, slot_size, max_devices, max_slots) != (
                VERSION, HEADER_SIZE, DEVICE_SIZE, SLOT_SIZE, MAX_DEVICES, MAX_SLOTS):
            raise ShimError(f"region {path}: layout version {version} (sizes {header_size}/"
                            f"{device_size}/{slot_size}), this gpuslice reads version {VERSION}; "
                            "use the gpuslice release that matches the library")
        if len(data) < REGION_SIZE or total_size != REGION_SIZE:
            raise ShimError(f"region {path}: {len(data)} bytes, expected {REGION_SIZE}; "
                            "the file is truncated or from another build")
        procs = cls._slots(data, min(slot_hwm, MAX_SLOTS), check_alive)
        live = [pr for pr in procs if pr.state == "live" and pr.alive is not False]
        devices = []
        for i in range(MAX_DEVICES):
            uuid, limit, ctx, state, index = _DEVICE.unpack_from(
                data, DEVICES_OFFSET + i * DEVICE_SIZE)
            ready = state == DEVICE_READY
            devices.append(DeviceView(
                index=i, uuid=uuid.split(b"\0", 1)[0].decode("ascii", "replace") if ready else "",
                limit=limit if ready else 0, context_bytes=ctx,
                used=sum(pr.used[i] for pr in live), pending=sum(pr.pending[i] for pr in live),
                device_index=index))
        return cls(path=path, version=version, device_count=device_count, sm_limit=sm_limit,
                   compute_mode=compute_mode, slot_hwm=slot_hwm, created_unix_s=created,
                   creator_pid=creator, devices=tuple(devices), processes=tuple(procs),
                   index_limits=tuple(rest[:MAX_DEVICES]),
                   uuid_list=bool(flags & REGION_UUID_LIST),
                   priority=int(bool(flags & REGION_LOW_PRIORITY))
                   if flags & REGION_PRIORITY else None,
                   pid_ns=rest[MAX_DEVICES], default_limit=rest[MAX_DEVICES + 1])

    @staticmethod
    def _slots(data: bytes, count: int, check_alive: bool) -> list[ProcessView]:
        out = []
        for i in range(count):
            off = SLOTS_OFFSET + i * SLOT_SIZE
            fields = _SLOT.unpack_from(data, off)
            pid, state, start = fields[:3]
            if pid == 0 and state & 0xFF != 2:
                continue
            busy, throttle, *_ = _COMPUTE_PROC.unpack_from(data, off + _COMPUTE_PROC_OFFSET)
            out.append(ProcessView(
                slot=i, pid=pid, state=SLOT_STATES.get(state & 0xFF, f"unknown({state})"),
                start_time=start, alive=pid_alive(pid, start) if check_alive else None,
                used=tuple(fields[3:3 + MAX_DEVICES]),
                pending=tuple(fields[3 + MAX_DEVICES:3 + 2 * MAX_DEVICES]),
                gpu_busy_ns=busy, throttle_ns=throttle, nvml_pid=fields[-1]))
        return out

    def by_uuid(self) -> dict[str, DeviceView]:
        """Device entries of GPUs seen so far, keyed by GPU UUID (what the node agent joins on)."""
        return {d.uuid: d for d in self.devices if d.uuid}

    def limited_devices(self) -> list[DeviceView]:
        """What `top` shows: GPUs that have an entry (UUID recorded) or usage; before any process
        ran, the configured limits by device index (no UUID yet)."""
        seen = [d for d in self.devices if d.uuid or d.used or d.pending]
        return seen or [DeviceView(index=i, uuid="", limit=lim, context_bytes=0, device_index=i)
                        for i, lim in enumerate(self.index_limits[:max(self.device_count, 1)])
                        if lim]

    def to_json(self) -> dict[str, Any]:
        """Plain dict for `gpuslice top --json` and the node agent's exporter."""
        return {
            "path": str(self.path), "version": self.version, "sm_limit": self.sm_limit,
            "compute_mode": "work-conserving" if self.compute_mode == 1 else "hard",
            "devices": [{"index": d.index, "uuid": d.uuid, "limit": d.limit, "used": d.used,
                         "pending": d.pending, "context_bytes": d.context_bytes,
                         "device_index": d.device_index}
                        for d in self.limited_devices()],
            "processes": [{"slot": p.slot, "pid": p.pid, "nvml_pid": p.nvml_pid,
                           "state": p.state, "alive": p.alive,
                           "used": {str(i): u for i, u in enumerate(p.used) if u},
                           "pending": {str(i): u for i, u in enumerate(p.pending) if u},
                           "gpu_busy_ns": p.gpu_busy_ns, "throttle_ns": p.throttle_ns}
                          for p in self.processes],
        }


@dataclass(frozen=True)
class RegionSpec:
    """A new region's limits, as the node agent gives a container at Allocate: its GPUs in
    GPUSLICE_DEVICE_UUIDS order with their byte limits (0 = none), the SM limit in percent,
    the compute mode and priority. `encode()` gives the bytes the library writes at creation
    for the same env, except that pid_ns is 0 (the container's first process claims it) and the
    creator pid is 0 (the agent). ShimError on values the library would refuse."""

    device_uuids: tuple[str, ...]
    limits: tuple[int, ...]
    sm_limit: int = 0
    compute_mode: str = "hard"
    priority: int = 0

    def __post_init__(self) -> None:
        bad = [u for u in self.device_uuids if not u.startswith("GPU-") or len(u) >= 64 or
               not u.isascii() or not all(c in "0123456789abcdefABCDEF-" for c in u[4:])]
        problems = [
            f"device UUIDs {bad}: use GPU-<hex> UUIDs as NVML gives them" if bad else "",
            f"{len(self.device_uuids)} GPUs: a region holds 1..{MAX_DEVICES}"
            if not 0 < len(self.device_uuids) <= MAX_DEVICES else "",
            f"{len(self.limits)} limits for {len(self.device_uuids)} GPUs: give one per GPU"
            if len(self.limits) != len(self.device_uuids) else "",
            f"limits {self.limits}: use bytes in 0..2^63-1"
            if any(not 0 <= x < 1 << 63 for x in self.limits) else "",
            f"sm_limit {self.sm_limit}: use a percentage 0..100" if not 0 <= self.sm_limit <= 100
            else "",
            f"compute_mode {self.compute_mode!r}: use one of {', '.join(COMPUTE_MODES)}"
            if self.compute_mode not in COMPUTE_MODES else "",
            f"priority {self.priority}: use 0 (high) or 1 (low)" if self.priority not in (0, 1)
            else "",
        ]
        if any(problems):
            raise ShimError("region spec: " + "; ".join(p for p in problems if p))

    def encode(self, *, created_unix_s: int = 0) -> bytes:
        """The complete region file, magic included (write bytes 8.. first, then the magic)."""
        buf = bytearray(REGION_SIZE)
        index_limits = list(self.limits) + [0] * (MAX_DEVICES - len(self.limits))
        device_count = max((i + 1 for i, x in enumerate(index_limits) if x), default=0)
        flags = REGION_UUID_LIST | REGION_PRIORITY | (REGION_LOW_PRIORITY if self.priority else 0)
        sm = 0 if self.sm_limit == 100 else self.sm_limit  # 100 = no limit, stored as 0
        _HEADER.pack_into(buf, 0, MAGIC, VERSION, HEADER_SIZE, DEVICE_SIZE, SLOT_SIZE,
                          MAX_DEVICES, MAX_SLOTS, device_count, sm,
                          COMPUTE_MODES[self.compute_mode], 0, 0, created_unix_s, 0, flags,
                          REGION_SIZE, *index_limits, 0, 0, 0)
        for i, (uuid, limit) in enumerate(zip(self.device_uuids, self.limits, strict=True)):
            _DEVICE.pack_into(buf, DEVICES_OFFSET + i * DEVICE_SIZE, uuid.encode(), limit, 0,
                              DEVICE_READY, i)
        return bytes(buf)

    def matches(self, region: Region) -> bool:
        """The region holds exactly these limits (slots, usage and pid namespace aside)."""
        return _limits(region) == _limits(Region.parse(self.encode(), path=region.path))


def _limits(r: Region) -> tuple[Any, ...]:
    """What a region caps: everything a tenant could gain by changing it."""
    return (r.uuid_list, r.sm_limit, r.compute_mode, r.priority, r.index_limits, r.default_limit,
            r.device_count, tuple((d.uuid, d.limit, d.device_index) for d in r.devices))


def library_path() -> Path:
    """Where libgpuslice.so is: $GPUSLICE_LIBRARY, the installed package's _native/, or the
    checkout's native/build/ (in that order). ShimError if none exists."""
    candidates = []
    env = os.environ.get(LIBRARY_ENV)
    if env:
        candidates.append(Path(env))
    here = Path(__file__).resolve().parent
    candidates += [here / "_native" / "libgpuslice.so",
                   here.parent.parent / "native" / "build" / "libgpuslice.so"]
    for c in candidates:
        if c.is_file():
            return c
    note = here / "_native" / "NOT-BUILT.txt"  # setup.py's reason, when it skipped the build
    what = (f"libgpuslice.so was not built when gpuslice was installed ({note.read_text().strip()})"
            if note.is_file() else "libgpuslice.so is not built or installed (looked in "
            + ", ".join(str(c) for c in candidates) + ")")
    raise ShimError(f"{what}; build it with `make -C native` (a C compiler; cuda.h from "
                    "$CUDA_HOME or `pip install nvidia-cuda-runtime`) in a checkout and reinstall, "
                    "or set GPUSLICE_LIBRARY to the built file")


SMALL_CAP = 64 << 20
"""Below this a --gpu-memory cap is almost surely a mistake: a CUDA context alone takes more."""


def _parse_memory(text: str) -> int:
    """Bytes from --gpu-memory (a bare number is MiB); warns when the cap is absurdly small."""
    from gpuslice.quantity import format_mib, parse_mib_or_size

    limit = parse_mib_or_size(text, field="--gpu-memory")
    if limit < SMALL_CAP:
        size = format_mib(limit >> 20) if limit % (1 << 20) == 0 else f"{limit} bytes"
        warn(f"--gpu-memory {text} caps each GPU at {size}, below {SMALL_CAP >> 20} MiB: a CUDA "
             "context alone takes about 300 MiB, so the command's first allocation will "
             "likely fail; give e.g. 4GiB")
    return limit


def driver_problem() -> str | None:
    """Why the NVIDIA driver (libcuda.so.1) cannot be loaded by this process, or None."""
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return str(exc)
    return None


def shim_env(*, library: Path, region: Path, gpu_memory: int | None, gpu_compute: int | None,
             compute_mode: str | None, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment `gpuslice run` gives its command (pure; exposed for tests)."""
    env = dict(os.environ if base is None else base)
    preload = env.get("LD_PRELOAD", "")
    env["LD_PRELOAD"] = str(library) + (":" + preload if preload else "")
    env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = str(region)
    if gpu_memory is not None:
        env["CUDA_DEVICE_MEMORY_LIMIT"] = str(gpu_memory)
    if gpu_compute is not None:
        env["CUDA_DEVICE_SM_LIMIT"] = str(gpu_compute)
    if compute_mode is not None:
        env["GPUSLICE_COMPUTE_MODE"] = compute_mode
    return env


def _check_region(region: Path) -> None:
    """A --region path is usable: its directory exists, and an existing file is a region."""
    if not region.parent.is_dir():
        raise GpusliceError(f"--region {region}: directory {region.parent} does not exist; "
                            "create it first or choose a path in an existing directory")
    if region.is_file() and region.stat().st_size:
        Region.read(region, check_alive=False)  # ShimError if it is another program's file


# Signals `gpuslice run` passes on to its command (it then exits with the command's status).
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
              signal.SIGUSR2)


def _terminal_sent(signum: int) -> bool:
    """True for a SIGINT/SIGQUIT that a terminal sends to its whole foreground process group,
    which the command (in our group) got already; forwarding would deliver it twice."""
    if signum not in (signal.SIGINT, signal.SIGQUIT):
        return False
    try:
        return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except (OSError, ValueError):  # no terminal on stdin
        return False


def _wait(command: list[str], env: dict[str, str]) -> int:
    """Start `command`, pass it the signals we get, and return its exit status (128 + signal
    number if a signal killed it). Handlers go in first: a SIGTERM that arrives while the
    command starts is delivered as soon as it runs, and never kills us before cleanup."""
    proc: subprocess.Popen[bytes] | None = None
    early: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        if _terminal_sent(signum):
            return
        if proc is None:
            early.append(signum)
        else:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signum)

    old = {s: signal.signal(s, forward) for s in _FORWARDED}
    try:
        try:
            proc = subprocess.Popen(command, env=env)
        except OSError as exc:
            raise CommandNotExecutable(f"cannot start {command[0]}: {exc.strerror}; check "
                                       "that it is an executable program") from None
        for signum in early:
            proc.send_signal(signum)
        rc = proc.wait()
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    return 128 - rc if rc < 0 else rc


def run_command(*, command: list[str], gpu_memory: str | None, gpu_compute: int | None,
                compute_mode: str | None, region: str | None, allow_uncapped: bool = False) -> int:
    """Run COMMAND under libgpuslice with the given limits; returns its exit status
    (128 + signal number if it was killed by a signal). Errors before it starts: bad input
    (exit 1), no driver or library (ShimError/EnvironmentProblem, exit 3), no such program
    (CommandNotFound, exit 127). The temporary region is removed however the command ends."""
    limit = _parse_memory(gpu_memory) if gpu_memory is not None else None
    if not command:
        raise GpusliceError("no command given; usage: gpuslice run --gpu-memory 4GiB -- CMD [ARGS]")
    if region is not None:
        _check_region(Path(region))
    if shutil.which(command[0]) is None:
        if "/" in command[0] and Path(command[0]).exists():
            raise CommandNotExecutable(f"{command[0]}: not an executable file; check the path, "
                                       f"or `chmod +x {command[0]}`")
        raise CommandNotFound(f"command not found: {command[0]}; check PATH or give a full path")
    no_driver = driver_problem()
    if no_driver is not None:
        if not allow_uncapped:
            raise EnvironmentProblem(
                f"no NVIDIA driver found (libcuda.so.1 not loadable: {no_driver}): nothing would "
                "be capped; run on a machine or in a container with the NVIDIA driver, or pass "
                "--allow-uncapped to run the command anyway")
        warn("no NVIDIA driver found (libcuda.so.1 not loadable): running the command "
             "uncapped, as --allow-uncapped asks")
        return _wait(command, dict(os.environ))
    lib = library_path()
    tmpdir = None
    if region is None:
        tmpdir = tempfile.mkdtemp(prefix="gpuslice-run-")
        region_path = Path(tmpdir) / "region"
    else:
        region_path = Path(region)
    env = shim_env(library=lib, region=region_path, gpu_memory=limit, gpu_compute=gpu_compute,
                   compute_mode=compute_mode)
    try:
        return _wait(command, env)
    finally:
        if tmpdir is not None:
            shutil.rmtree(tmpdir, ignore_errors=True)


def _fmt_bytes(n: int) -> str:
    if n >= 1 << 30:
        return f"{n / (1 << 30):.2f} GiB"
    return f"{n / (1 << 20):.0f} MiB"


def _render(region: Region) -> Any:
    from rich.console import Group
    from rich.table import Table

    devs = Table(title=f"gpuslice region {region.path}", title_justify="left")
    for col in ("GPU", "UUID", "used", "limit", "use %", "context"):
        devs.add_column(col, justify="left" if col == "UUID" else "right")
    for d in region.limited_devices():
        pct = f"{100 * (d.used + d.pending) / d.limit:.0f}%" if d.limit else "-"
        devs.add_row(str(d.index), d.uuid or "-", _fmt_bytes(d.used + d.pending),
                     _fmt_bytes(d.limit) if d.limit else "none", pct, _fmt_bytes(d.context_bytes))
    compute = f"{region.sm_limit}%" if region.sm_limit else "none"
    procs = Table(title=f"processes (compute limit: {compute})", title_justify="left")
    for col in ("slot", "pid", "NVML pid", "state", "alive", "used", "GPU busy s"):
        procs.add_column(col, justify="right")
    for p in region.processes:
        used = ", ".join(f"{i}:{_fmt_bytes(u)}" for i, u in enumerate(p.used) if u) or "0"
        procs.add_row(str(p.slot), str(p.pid), str(p.nvml_pid or "-"), p.state,
                      "-" if p.alive is None else str(p.alive), used, f"{p.gpu_busy_ns / 1e9:.1f}")
    return Group(devs, procs)


def top_command(*, region: str | None, once: bool, as_json: bool) -> None:
    """Usage against limits per device and per process; refreshes every second until Ctrl-C."""
    path = Path(region) if region else default_region_path()
    if not path.exists():
        raise ShimError(f"region {path} does not exist yet: a region appears at the first CUDA "
                        "call of a process under libgpuslice; start one (`gpuslice run --region "
                        f"{path} -- CMD`) or pass the --region PATH it uses")
    if as_json:
        while True:
            print(json.dumps(Region.read(path).to_json()), flush=True)
            if once:
                return
            time.sleep(1.0)
    from rich.console import Console
    from rich.live import Live

    console = Console()
    if once:
        console.print(_render(Region.read(path)))
        return
    with contextlib.suppress(KeyboardInterrupt), Live(_render(Region.read(path)), console=console,
                                                      refresh_per_second=2) as live:
        while True:
            time.sleep(1.0)
            live.update(_render(Region.read(path)))


def shim_command(*, show_path: bool) -> None:
    """`gpuslice shim --path`: the library path; without --path: path, size and exported hooks."""
    lib = library_path()
    if show_path:
        print(lib)
        return
    print(f"library: {lib} ({lib.stat().st_size} bytes)")
    print(f"default region: {default_region_path()}")
    print("env: CUDA_DEVICE_MEMORY_LIMIT[_<i>], CUDA_DEVICE_SM_LIMIT, "
          "CUDA_DEVICE_MEMORY_SHARED_CACHE, LIBCUDA_LOG_LEVEL, GPUSLICE_COMPUTE_MODE, "
          "CUDA_TASK_PRIORITY (docs/shim.md)")


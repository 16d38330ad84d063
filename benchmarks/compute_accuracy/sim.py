"""ctypes bridge to the compute controller simulator (simgpu.c + the library's own compute C).
Owns: building native/build/compute_sim/libgs_computesim.so from native/src/compute/{budget,
meter,board,clean,gang,spans,union}.c + simgpu.c with the system C compiler, the ctypes mirror
of gs_sim_cfg / gs_sim_result (sizes checked against the C side), `run(...)` returning plain
dicts, `Clean` (clean.c's time-slice correction called directly, for tests) and
`union_charges` (union.c called directly).
Does not: judge results (benchmarks/compute_accuracy.py and tests/native/compute/ do).
Failure: a missing compiler or a build error raises SimBuildError with the compiler output.
Used by: benchmarks/compute_accuracy.py --simulate, tests/native/compute/test_controller.py."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# GS_SIM_COMPUTE_SRC=DIR builds the simulator from another copy of native/src/compute (e.g. an
# older revision) so before/after tables come from the same fake GPU.
_ALT = os.environ.get("GS_SIM_COMPUTE_SRC", "")
COMPUTE_SRC = Path(_ALT).resolve() if _ALT else ROOT / "native" / "src" / "compute"
# clean.c (time-slice correction), gang.c, spans.c and union.c (issue 21) are absent from older
# copies of the sources
SOURCES = [
    COMPUTE_SRC / n
    for n in ("budget.c", "meter.c", "board.c", "clean.c", "gang.c", "spans.c", "union.c")
    if n in ("budget.c", "meter.c", "board.c") or (COMPUTE_SRC / n).exists()
] + [Path(__file__).with_name("simgpu.c")]
if (COMPUTE_SRC / "gang.c").exists():  # the collective simulator needs issue 21's controller
    SOURCES.append(Path(__file__).with_name("simcoll.c"))
BUILD_DIR = ROOT / "native" / "build" / ("compute_sim_alt" if _ALT else "compute_sim")
MS = 1_000_000
US = 1_000
PROCS = 8
BINS = 256


class SimBuildError(RuntimeError):
    """The simulator library could not be built."""


class ProcCfg(ctypes.Structure):
    _fields_ = [
        (n, ctypes.c_int64)
        for n in (
            "limit_pct",
            "tenant",
            "kernel_min_ns",
            "kernel_max_ns",
            "kernels_per_launch",
            "streams",
            "cpu_ns",
            "sync_every",
            "step_cpu_ns",
            "start_ns",
            "stop_ns",
            "priority",
            "work_conserving",
            "keys",
            "key_fixed",
            "jitter_pct",
            "hide_keys",
        )
    ]


# Case fields copied one to one into SimCfg (n_procs and use_board are derived in run()).
CASE_FIELDS = (
    "duration_ns",
    "warmup_ns",
    "bin_ns",
    "timeslice_ns",
    "seed",
    "launch_ns",
    "event_ns",
    "submit_ns",
    "sleep_slack_ns",
    "min_sleep_ns",
    "max_sleep_ns",
)


class SimCfg(ctypes.Structure):
    _fields_ = [
        *[(n, ctypes.c_int64) for n in ("n_procs", *CASE_FIELDS, "use_board", "switch_ns")],
        ("proc", ProcCfg * PROCS),
    ]


class SimResult(ctypes.Structure):
    _fields_ = [
        *[
            (n, ctypes.c_int64)
            for n in (
                "work_ns",
                "launches",
                "throttled",
                "throttle_ns",
                "measured_ns",
                "dropped",
                "steps",
                "step_p50_ns",
                "step_p99_ns",
                "max_queue_ns",
                "batches",
                "max_wait_ns",
            )
        ],
        ("bins", ctypes.c_int64 * BINS),
    ]


class Span(ctypes.Structure):
    _fields_ = [("s", ctypes.c_int64), ("e", ctypes.c_int64)]


@dataclass
class Proc:
    """One simulated process (a container's process when tenants differ)."""

    limit: int = 0
    tenant: int = 0
    kernel_ns: tuple[int, int] = (2 * MS, 5 * MS)
    kernels_per_launch: int = 1
    streams: int = 1
    cpu_ns: int = 0
    sync_every: int = 0
    step_cpu_ns: int = 0
    start_ns: int = 0
    stop_ns: int = 0
    priority: int = 0
    work_conserving: bool = False
    # launch keys (kernel function + dims): 0 = unknown (never corrected); n: n keys used
    # round-robin; key_fixed: each key has one duration drawn from kernel_ns, +- jitter_pct
    keys: int = 0
    key_fixed: bool = False
    jitter_pct: int = 0
    hide_keys: bool = False  # same launches, but the controller is told "key unknown"


@dataclass
class Case:
    """A simulation: processes on one fake GPU, virtual time."""

    procs: list[Proc] = field(default_factory=list)
    duration_ns: int = 4000 * MS
    warmup_ns: int = 1000 * MS
    bin_ns: int = 100 * MS
    timeslice_ns: int = 2 * MS
    seed: int = 1
    launch_ns: int = 3 * US
    event_ns: int = 1 * US
    # launch latency (command reaches the GPU this long after its submission); 0 = instant.
    # The benchmark uses 5 us (reproduces the H200's small-kernel numbers); with several
    # time-sliced contexts the fake GPU then switches context on a lone start event, which is
    # harsher than the hardware measured, so multi-process tests keep 0 unless they say so.
    submit_ns: int = 0
    sleep_slack_ns: int = 60 * US
    min_sleep_ns: int = 200 * US
    max_sleep_ns: int = 10 * MS
    use_board: bool = True
    # GPU time lost per switch between contexts (0 = free); the H200 pair run loses ~10 %
    switch_ns: int = 0


def _compiler() -> str:
    for cc in (os.environ.get("CC", ""), "cc", "gcc", "clang"):
        if cc and shutil.which(cc):
            return cc
    raise SimBuildError("no C compiler found (set CC=...); the simulator is built from C sources")


def build() -> Path:
    """Build (if any source is newer) and return the simulator shared object."""
    out = BUILD_DIR / "libgs_computesim.so"
    headers = [*list(COMPUTE_SRC.glob("*.h")), ROOT / "native/include/gpuslice/compute_shared.h"]
    newest = max(p.stat().st_mtime for p in SOURCES + headers)
    if out.exists() and out.stat().st_mtime >= newest:
        return out
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".{os.getpid()}.tmp")
    cmd = [
        _compiler(),
        "-std=c11",
        "-O2",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-shared",
        "-fPIC",
        f"-I{COMPUTE_SRC}",
        f"-I{ROOT / 'native' / 'include'}",
        "-o",
        str(tmp),
        *map(str, SOURCES),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SimBuildError(
            f"building the compute simulator failed:\n{' '.join(cmd)}\n{proc.stderr}"
        )
    tmp.replace(out)
    return out


_LIB: ctypes.CDLL | None = None


def lib() -> ctypes.CDLL:
    """The loaded simulator library (built on first use); struct sizes checked once."""
    global _LIB
    if _LIB is None:
        handle = ctypes.CDLL(str(build()))
        handle.gs_sim_run.argtypes = [ctypes.POINTER(SimCfg), ctypes.POINTER(SimResult)]
        handle.gs_sim_sizes.restype = ctypes.c_int64
        handle.gs_sim_spans_add.restype = ctypes.c_int64
        handle.gs_sim_spans_add.argtypes = [
            ctypes.POINTER(Span),
            ctypes.POINTER(ctypes.c_int),
            ctypes.c_int64,
            ctypes.c_int64,
        ]
        for which, struct in ((0, SimCfg), (1, SimResult)):
            if handle.gs_sim_sizes(which) != ctypes.sizeof(struct):
                raise SimBuildError(f"{struct.__name__}: ctypes mirror does not match simgpu.c")
        _LIB = handle
    return _LIB


def run(case: Case) -> list[dict]:
    """Run one case; one dict per process (work_ns, bins, step latencies, throttle stats)."""
    if not 1 <= len(case.procs) <= PROCS:
        raise ValueError(f"procs: {len(case.procs)} given; the simulator takes 1..{PROCS}")
    cfg = SimCfg()
    for name in (*CASE_FIELDS, "switch_ns"):
        setattr(cfg, name, getattr(case, name))
    cfg.n_procs = len(case.procs)
    cfg.use_board = int(case.use_board)
    for i, p in enumerate(case.procs):
        c = cfg.proc[i]
        c.limit_pct, c.tenant = p.limit, p.tenant
        c.kernel_min_ns, c.kernel_max_ns = p.kernel_ns
        c.kernels_per_launch, c.streams, c.cpu_ns = p.kernels_per_launch, p.streams, p.cpu_ns
        c.sync_every, c.step_cpu_ns = p.sync_every, p.step_cpu_ns
        c.start_ns, c.stop_ns = p.start_ns, p.stop_ns
        c.priority, c.work_conserving = p.priority, int(p.work_conserving)
        c.keys, c.key_fixed, c.jitter_pct = p.keys, int(p.key_fixed), p.jitter_pct
        c.hide_keys = int(p.hide_keys)
    results = (SimResult * PROCS)()
    if lib().gs_sim_run(ctypes.byref(cfg), results) != 0:
        raise ValueError("gs_sim_run rejected the case (n_procs or bin_ns out of range)")
    n_bins = min(BINS, (case.duration_ns - case.warmup_ns) // case.bin_ns)
    out = []
    for r in results[: len(case.procs)]:
        d = {f: getattr(r, f) for f, _ in SimResult._fields_ if f != "bins"}
        d["bins"] = list(r.bins[:n_bins])
        out.append(d)
    return out


class Clean:
    """The library's time-slice correction state (clean.c) for direct tests."""

    def __init__(self) -> None:
        size = lib().gs_sim_sizes(2)
        if size <= 0:
            raise SimBuildError("these compute sources have no clean.c (time-slice correction)")
        self.buf = ctypes.create_string_buffer(size)
        handle = lib()
        handle.gs_clean_charge.restype = ctypes.c_int64
        handle.gs_clean_charge.argtypes = [
            ctypes.c_void_p,
            ctypes.c_uint64,
            ctypes.c_uint32,
            ctypes.c_int64,
            ctypes.c_int64,
        ]
        handle.gs_clean_others.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64]

    def others(self, active: bool, busy_ns: int) -> None:
        """What the board shows: another tenant has demand; the GPU ns they published."""
        lib().gs_clean_others(self.buf, int(active), busy_ns)

    def charge(self, key: int, n: int, span_ns: int, now: int) -> int:
        """GPU ns charged for a homogeneous batch of `n` launches of `key` measured `span_ns`."""
        return lib().gs_clean_charge(self.buf, key, n, span_ns, now)


def spans_add(spans: list[tuple[int, int]], s: int, e: int) -> tuple[int, list[tuple[int, int]]]:
    """The library's span union: add [s, e) to disjoint sorted spans; (newly covered, spans)."""
    arr = (Span * 32)(*[Span(a, b) for a, b in spans])
    n = ctypes.c_int(len(spans))
    added = lib().gs_sim_spans_add(arr, ctypes.byref(n), s, e)
    return added, [(arr[i].s, arr[i].e) for i in range(n.value)]


def union_charges(batches: list[tuple[int, int, int, int, int]]) -> list[int]:
    """The library's union of one container's processes on one GPU (union.c): batches
    (process, ts, te on its timeline, recorded, seen on the host clock) in the order they are
    seen done; what each is charged."""
    handle = lib()
    if not hasattr(handle, "gs_sim_union"):
        raise SimBuildError("these compute sources have no union.c")
    flat = (ctypes.c_int64 * (5 * len(batches)))(*[w for b in batches for w in b])
    out = (ctypes.c_int64 * max(1, len(batches)))()
    if handle.gs_sim_union(len(batches), flat, out) != 0:
        raise ValueError("gs_sim_union rejected the batches")
    return list(out[: len(batches)])

"""ctypes bridge to the collective simulator (simcoll.c, built into the simulator library by
sim.py): the ranks of one job on separate fake GPUs, each step `kernels` compute kernels and a
collective whose kernel spins until every rank's kernel reached its GPU (issue 21).
Owns: the ctypes mirror of gs_coll_cfg / gs_coll_result and `run_collective`. Does not judge
(tests/native/compute/test_gang.py and benchmarks/compute_accuracy.py do)."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

from sim import MS, US, SimBuildError, lib

RANKS = 8


class CollCfg(ctypes.Structure):
    _fields_ = [
        *[(n, ctypes.c_int64) for n in (
            "ranks", "limit_pct", "phase", "duration_ns", "warmup_ns", "kernels", "kernel_ns",
            "coll_ns", "colls", "coll_first", "barrier_first", "launch_ns", "step_cpu_ns",
            "min_sleep_ns", "max_sleep_ns")],
        ("start_ns", ctypes.c_int64 * RANKS),
        ("kernel_scale_pct", ctypes.c_int64 * RANKS),
        ("cpu_skew_ns", ctypes.c_int64 * RANKS),
        ("launch_extra_ns", ctypes.c_int64 * RANKS),
    ]  # fmt: skip


class CollResult(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int64) for n in (
        "steps", "step_p50_ns", "step_max_ns", "step_mean_ns", "hold_max_ns", "over_debt_max_ns",
        "throttle_ns", "measured_ns", "spin_ns", "busy_ns")]  # fmt: skip


@dataclass
class CollCase:
    """One job: `ranks` processes of one container, one per fake GPU, in lockstep."""

    ranks: int = 2
    limit: int = 50  # 0: no limit (the controller is not called)
    phase: bool = True  # False: the controller as before issue 21 (no gang holds)
    duration_ns: int = 3000 * MS
    warmup_ns: int = 1000 * MS
    kernels: int = 8  # compute kernels per step
    kernel_ns: int = 250 * US
    coll_ns: int = 300 * US  # the collective's own work once every rank is there
    colls: int = 1  # collectives per step, back to back
    coll_first: bool = False  # True: the step opens with its collectives (then kernels)
    barrier_first: bool = False  # True: a first step of one collective + sync (dist.barrier())
    launch_ns: int = 5 * US
    step_cpu_ns: int = 50 * US
    min_sleep_ns: int = 200 * US  # launch.c's sleep bounds
    max_sleep_ns: int = 10 * MS
    start_ns: list[int] = field(default_factory=list)  # per rank (skew); default all 0
    kernel_scale_pct: list[int] = field(default_factory=list)  # per rank; default 100
    cpu_skew_ns: list[int] = field(default_factory=list)  # per rank, after each sync; default 0
    launch_extra_ns: list[int] = field(default_factory=list)  # per rank, per launch; default 0


def _lib() -> ctypes.CDLL:
    handle = lib()
    if not hasattr(handle, "gs_coll_run"):
        raise SimBuildError("these compute sources have no gang.c: no collective simulator")
    handle.gs_coll_run.argtypes = [ctypes.POINTER(CollCfg), ctypes.POINTER(CollResult)]
    handle.gs_coll_sizes.restype = ctypes.c_int64
    for which, struct in ((0, CollCfg), (1, CollResult)):
        if handle.gs_coll_sizes(which) != ctypes.sizeof(struct):
            raise SimBuildError(f"{struct.__name__}: ctypes mirror does not match simcoll.c")
    return handle


def run_collective(case: CollCase) -> list[dict[str, int]]:
    """One dict per rank: steps (after warm-up), step p50/max, hold statistics, spin, shares."""
    if not 1 <= case.ranks <= RANKS:
        raise ValueError(f"ranks: {case.ranks} given; the simulator takes 1..{RANKS}")
    cfg = CollCfg()
    for name, _ in CollCfg._fields_[:15]:
        setattr(cfg, name, int(getattr(case, name if name != "limit_pct" else "limit")))
    for i in range(case.ranks):
        cfg.start_ns[i] = case.start_ns[i] if i < len(case.start_ns) else 0
        cfg.kernel_scale_pct[i] = case.kernel_scale_pct[i] if i < len(case.kernel_scale_pct) else 0
        cfg.cpu_skew_ns[i] = case.cpu_skew_ns[i] if i < len(case.cpu_skew_ns) else 0
        cfg.launch_extra_ns[i] = case.launch_extra_ns[i] if i < len(case.launch_extra_ns) else 0
    results = (CollResult * RANKS)()
    if _lib().gs_coll_run(ctypes.byref(cfg), results) != 0:
        raise ValueError("gs_coll_run rejected the case")
    return [{f: getattr(r, f) for f, _ in CollResult._fields_} for r in results[: case.ranks]]

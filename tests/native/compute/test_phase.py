"""Issue 21: the ranks of one job, on different GPUs of one container, launch in phase
(native/src/compute/phase.c), so a collective kernel that spins until its peer's kernel runs
(NCCL, DDP, a kernel polling a peer's flag through IPC) is not charged while the peer's launch is
held back, and the ranks never take turns. The REAL controller (meter.c, budget.c, phase.c)
through the simulator library: phase.c directly, then the collective simulator (simcoll.c: one
fake GPU per rank, a collective ends `coll_ns` after the last rank's kernel reached its GPU, the
spin before that is GPU time the events measure). `phase=False` is the controller before
issue 21 (no device follows another): it stalls, as the 2x H100 run of the issue did."""

from __future__ import annotations

import ctypes
import struct
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks" / "compute_accuracy"))
from simcoll import CollCase, run_collective

MS, US, S = 10**6, 10**3, 10**9
NOW = 5000 * S
HORIZON_NS = 11 * S  # budget.h: GS_BUDGET_HORIZON_NS
HELD_UNTIL = 88  # compute_shared.h: held_until_ns in struct gs_compute_device


PARTNER = 112  # compute_shared.h: partner[16] (scores by device entry)


@pytest.fixture(scope="module")
def c(sim):
    lib = sim.lib()
    lib.gs_phase_self.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.gs_phase_add.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    lib.gs_phase_publish.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    lib.gs_phase_follow_ns.restype = ctypes.c_int64
    lib.gs_phase_follow_ns.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    lib.gs_meter_init.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int]
    lib.gs_meter_admit.restype = ctypes.c_int64
    lib.gs_meter_admit.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    lib.gs_meter_debt_ns.restype = ctypes.c_int64
    lib.gs_meter_debt_ns.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    lib.gs_sim_meter_phase.restype = ctypes.c_void_p
    lib.gs_sim_meter_phase.argtypes = [ctypes.c_void_p]
    return lib


def _device(tat: int = 0, held_until: int = 0, partners: tuple[int, ...] = ()) -> ctypes.Array:
    """A struct gs_compute_device; `partners`: entries it reached step boundaries with."""
    dev = ctypes.create_string_buffer(256)
    struct.pack_into("<Q", dev, 0, tat)
    struct.pack_into("<Q", dev, HELD_UNTIL, held_until)
    for e in partners:
        struct.pack_into("<Q", dev, PARTNER + 8 * e, 2)
    return dev


def _held_until(dev: ctypes.Array) -> int:
    return struct.unpack_from("<Q", dev, HELD_UNTIL)[0]


def _phase(c, self_entry: int, *others: tuple[ctypes.Array, int]) -> ctypes.Array:
    phase = ctypes.create_string_buffer(512)  # struct gs_phase
    c.gs_phase_self(phase, self_entry)
    for dev, entry in others:
        c.gs_phase_add(phase, dev, entry)
    return phase


def test_a_launch_waits_for_the_latest_hold_of_its_partners(c) -> None:
    a, b = _device(held_until=NOW + 3 * MS), _device(held_until=NOW + 7 * MS)
    me = _device(partners=(1, 2))
    phase = _phase(c, 0, (a, 1), (b, 2))
    assert c.gs_phase_follow_ns(phase, me, NOW) == 7 * MS
    assert c.gs_phase_follow_ns(phase, me, NOW + 8 * MS) == 0, "both holds are over"
    assert c.gs_phase_follow_ns(_phase(c, 0), me, NOW) == 0, "one device: nothing to follow"


def test_a_device_that_never_reached_a_step_boundary_with_ours_is_not_followed(c) -> None:
    """Independent processes of the container on other GPUs do not slow each other down."""
    held = _device(held_until=NOW + 7 * MS)
    assert c.gs_phase_follow_ns(_phase(c, 0, (held, 1)), _device(), NOW) == 0


def test_a_hold_of_another_clock_is_never_followed(c) -> None:
    """A region that outlived a reboot (or a tampered one) holds times far ahead: ignored, as
    budget.c ignores such a tat; within the horizon a hold is at most the longest debt."""
    me = _device(partners=(1,))
    far = _device(held_until=NOW + HORIZON_NS + 1)
    assert c.gs_phase_follow_ns(_phase(c, 0, (far, 1)), me, NOW) == 0
    near = _device(held_until=NOW + HORIZON_NS)
    assert c.gs_phase_follow_ns(_phase(c, 0, (near, 1)), me, NOW) == HORIZON_NS


def _meter(c, sim, dev: ctypes.Array, pct: int = 50) -> ctypes.Array:
    meter = ctypes.create_string_buffer(sim.lib().gs_sim_sizes(3))
    c.gs_meter_init(meter, None, None, dev, None, pct)
    return meter


def test_only_a_budget_hold_is_published_and_a_partner_with_budget_waits(c, sim) -> None:
    """Device 0 is in debt, device 1 (its partner) has a full bucket: the process on device 0
    publishes its hold; the one on device 1, which would launch at once alone, waits as long."""
    d0, d1 = _device(tat=NOW + 20 * MS, partners=(1,)), _device(tat=0, partners=(0,))
    m0, m1 = _meter(c, sim, d0), _meter(c, sim, d1)
    for meter, other, me, entry in ((m0, d1, 0, 1), (m1, d0, 1, 0)):
        c.gs_phase_self(c.gs_sim_meter_phase(meter), me)
        c.gs_phase_add(c.gs_sim_meter_phase(meter), other, entry)
    w0 = c.gs_meter_admit(m0, NOW)
    assert w0 > 20 * MS, f"device 0 owes 20 ms of wall time: held {w0 / MS:.2f} ms"
    assert _held_until(d0) == NOW + w0, "its hold is published for the other devices"
    assert _held_until(d1) == 0, "a full bucket holds nothing"
    w1 = c.gs_meter_admit(m1, NOW)
    assert w1 == w0, f"device 1 follows device 0's hold: {w1} vs {w0} ns"
    assert _held_until(d1) == 0, "a follow is never published: no cycle between devices"
    assert c.gs_meter_debt_ns(m1, NOW) == w0, "what the follower owes is the hold it follows"
    assert c.gs_meter_admit(m1, NOW + w0) == 0, "both go at the same moment"


def _steps(r: list[dict]) -> int:
    return min(x["steps"] for x in r)


def _step_ms(r: list[dict]) -> float:
    """The job's mean step (its slowest rank's): throughput, as the issue's target means it
    (held and free steps alternate, so a median picks one of the two)."""
    return max(x["step_mean_ns"] for x in r) / MS


# (name, case fields): a lockstep job with a small start skew or a slower rank; tiny kernels
SHAPES = {
    "skew": {"start_ns": [0, 200 * MS]},
    "slow-rank": {"kernel_scale_pct": [100, 130]},
    "tiny-kernels": {"kernels": 40, "kernel_ns": 20 * US, "coll_ns": 30 * US,
                     "start_ns": [0, 1 * MS]},
    "big-kernels": {"kernels": 4, "kernel_ns": 5 * MS, "coll_ns": 2 * MS, "start_ns": [0, MS]},
    "4-ranks": {"ranks": 4, "start_ns": [0, 3 * MS, 7 * MS, 50 * MS]},
    # the step opens with 3 collectives right after the sync, one rank's CPU 30 us later: the
    # rank released first used to launch the next collective before the other's hold showed
    "collectives-open-the-step": {"kernels": 6, "kernel_ns": 300 * US, "coll_ns": 100 * US,
                                  "colls": 3, "coll_first": True, "cpu_skew_ns": [0, 30 * US],
                                  "start_ns": [0, 2 * MS]},
    # 20 back-to-back 6.5 ms collectives a step (an all-reduce timing loop): holds in mid-step;
    # one rank's CPU is slower, so the other is launches ahead when a hold comes (catch-up)
    "long-steps-slow-cpu": {"kernels": 4, "kernel_ns": 5 * MS, "coll_ns": 6500 * US,
                            "colls": 20, "launch_extra_ns": [0, 200 * US],
                            "start_ns": [0, 2 * MS], "duration_ns": 20000 * MS,
                            "warmup_ns": 2000 * MS},
    # the same opening each step with its collectives, after a first barrier (dist.barrier())
    "long-steps-barrier-first": {"kernels": 4, "kernel_ns": 5 * MS, "coll_ns": 6500 * US,
                                 "colls": 20, "coll_first": True, "barrier_first": True,
                                 "launch_extra_ns": [200 * US, 0], "start_ns": [0, 2 * MS],
                                 "duration_ns": 20000 * MS, "warmup_ns": 2000 * MS},
}  # fmt: skip


@pytest.mark.parametrize("limit", [30, 50])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_job_under_a_compute_limit_runs_at_its_share_without_long_holds(
    sim, shape: str, limit: int
) -> None:
    """Issue 21's targets: step time within 1.25x of (step without a limit / share), no launch
    held longer than what it owes + 10 ms, and no GPU above its limit (spins included)."""
    kw = {"duration_ns": 5000 * MS, **SHAPES[shape]}
    free = run_collective(CollCase(limit=0, **kw))
    capped = run_collective(CollCase(limit=limit, **kw))  # type: ignore[arg-type]
    target = _step_ms(free) / (limit / 100)
    assert _steps(capped) > 0, f"{shape} at {limit} %: the job stalled"
    assert _step_ms(capped) <= 1.25 * target, (
        f"{shape} at {limit} %: step {_step_ms(capped):.2f} ms, target {target:.2f} ms")
    over = max(x["over_debt_max_ns"] for x in capped) / MS
    assert over <= 10, f"{shape} at {limit} %: a launch held {over:.1f} ms past what it owed"
    window = kw["duration_ns"] - kw.get("warmup_ns", CollCase().warmup_ns)
    for i, x in enumerate(capped):
        busy = x["busy_ns"] / window  # what the fake GPU ran: kernels, collectives and spins
        assert busy <= limit / 100 + 0.01, f"{shape}: rank {i}'s GPU busy {busy:.3f}"


@pytest.mark.parametrize("shape", ["tiny-kernels", "slow-rank", "4-ranks",
                                   "collectives-open-the-step"])
def test_without_phase_the_ranks_take_turns_and_the_job_crawls(sim, shape: str) -> None:
    """The failure of the issue, reproduced: each rank's budget charges the spin of its
    collective while the other's launch is held, so the holds grow each round (by 100/limit)."""
    kw = {"duration_ns": 5000 * MS, **SHAPES[shape]}
    free = run_collective(CollCase(limit=0, **kw))
    before = run_collective(CollCase(limit=30, phase=False, **kw))
    share_allows = _steps(free) * 0.3  # steps a job at 30 % of each GPU would make
    assert _steps(before) < share_allows / 5, (
        f"{shape}: without phase {_steps(before)} steps of the {share_allows:.0f} the share "
        "allows: it did not crawl")
    assert max(x["hold_max_ns"] for x in before) > 200 * MS
    after = run_collective(CollCase(limit=30, **kw))
    assert _steps(after) >= 0.8 * share_allows, f"{shape}: {_steps(after)} steps in phase"


def test_work_disguised_as_communication_gets_nothing_past_the_cap(sim) -> None:
    """The attack: a rank whose 'collective' is long compute (or spins by design) next to a
    rank with budget. Nothing is exempt from the charge, so each GPU stays at its limit; the
    in-phase wait only slows the honest rank down to the other's pace."""
    for limit in (30, 50):
        r = run_collective(CollCase(limit=limit, kernels=2, kernel_ns=200 * US, coll_ns=8 * MS,
                                    kernel_scale_pct=[100, 400], duration_ns=5000 * MS))
        window = 4000 * MS
        for i, x in enumerate(r):
            assert x["busy_ns"] / window <= limit / 100 + 0.01, (i, x)
            assert x["measured_ns"] / window <= limit / 100 + 0.01, (i, x)
            assert x["steps"] > 0

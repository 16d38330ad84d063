"""Issue 21: the processes of one container stop and go together (gang holds,
native/src/compute/gang.c), so a collective kernel that spins until its peer's kernel runs
(NCCL, DDP, a kernel polling a peer's flag through IPC) is not left spinning while the peer's
launch is held back, and the ranks never take turns. The REAL controller (meter.c, budget.c,
gang.c) through the collective simulator (simcoll.c: one fake GPU per rank, a collective ends
`coll_ns` after the last rank's kernel reached its GPU, the spin before that is GPU time the
events measure). `phase=False` is the controller without gang holds: it stalls, as the 2x H100
run of the issue did."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks" / "compute_accuracy"))
from simcoll import CollCase, run_collective

MS, US = 10**6, 10**3


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
    # an all-reduce timing loop: 12 back-to-back 2.7 ms collectives after a few tiny kernels, so
    # the per-launch estimate is far below what is queued; the stop's debts were paid long before
    # the queues drained, and the ranks waited for them anyway (19.8 ms past owed at 50 %)
    "all-reduce-sweep": {"kernels": 10, "kernel_ns": 20 * US, "coll_ns": 2700 * US, "colls": 12,
                         "launch_extra_ns": [0, 200 * US], "start_ns": [0, 2 * MS]},
    "all-reduce-sweep-4-ranks": {"ranks": 4, "kernels": 10, "kernel_ns": 20 * US,
                                 "coll_ns": 4500 * US, "colls": 4,
                                 "start_ns": [0, 3 * MS, 7 * MS, 50 * MS]},
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
def test_without_gang_holds_the_ranks_take_turns_and_the_job_crawls(sim, shape: str) -> None:
    """The failure of the issue, reproduced: each rank's budget charges the spin of its
    collective while the other's launch is held, so the holds grow each round (by 100/limit)."""
    kw = {"duration_ns": 5000 * MS, **SHAPES[shape]}
    free = run_collective(CollCase(limit=0, **kw))
    before = run_collective(CollCase(limit=30, phase=False, **kw))
    share_allows = _steps(free) * 0.3  # steps a job at 30 % of each GPU would make
    assert _steps(before) < share_allows / 5, (
        f"{shape}: without gang holds {_steps(before)} steps of the {share_allows:.0f} the share "
        "allows: it did not crawl")
    assert max(x["hold_max_ns"] for x in before) > 200 * MS
    after = run_collective(CollCase(limit=30, **kw))
    assert _steps(after) >= 0.8 * share_allows, f"{shape}: {_steps(after)} steps with gang holds"


def test_work_disguised_as_communication_gets_nothing_past_the_cap(sim) -> None:
    """The attack: a rank whose 'collective' is long compute (or spins by design) next to a
    rank with budget. Nothing is exempt from the charge, so each GPU stays at its limit; a gang
    hold only slows the honest rank down to the other's pace."""
    for limit in (30, 50):
        r = run_collective(CollCase(limit=limit, kernels=2, kernel_ns=200 * US, coll_ns=8 * MS,
                                    kernel_scale_pct=[100, 400], duration_ns=5000 * MS))
        window = 4000 * MS
        for i, x in enumerate(r):
            assert x["busy_ns"] / window <= limit / 100 + 0.01, (i, x)
            assert x["measured_ns"] / window <= limit / 100 + 0.01, (i, x)
            assert x["steps"] > 0

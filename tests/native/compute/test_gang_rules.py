"""gang.c's rules one by one (native/src/compute/gang.h), on hand-made process slots: who is in the
gang, when a process stops, catches up or holds, and what a forged or stale slot can do (a
process of the container controls its own slot, and any process of it can write the others').
The collective simulator (test_gang.py) shows the rules together; these pin each one."""

from __future__ import annotations

import ctypes
import struct

import pytest

MS, S = 10**6, 10**9
NOW = 5000 * S
# compute_shared.h, struct gs_compute_proc (88 bytes)
INFLIGHT, LAST_LAUNCH, STOP, BEAT, RELEASE = 32, 40, 64, 72, 80
OVERDRAFT = 1 * S  # gang.h GS_GANG_OVERDRAFT_NS
GRACE = 100 * MS  # gang.h GS_GANG_GRACE_NS
POLL = 50_000  # gang.h GS_GANG_POLL_NS
HORIZON = 11 * S  # budget.h GS_BUDGET_HORIZON_NS

COUNT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
AT = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)


class Gang(ctypes.Structure):
    _fields_ = [("self", ctypes.c_void_p), ("count", COUNT), ("at", AT), ("ctx", ctypes.c_void_p),
                ("on", ctypes.c_int), ("stopped", ctypes.c_int), ("stop_ns", ctypes.c_int64),
                ("gen_ns", ctypes.c_int64), ("own_release_ns", ctypes.c_int64),
                ("release_ns", ctypes.c_int64), ("catchup", ctypes.c_int),
                ("drained_ns", ctypes.c_int64)]  # fmt: skip


class Slots:
    """A container's process slots; slot 0 is the process under test."""

    def __init__(self, n: int) -> None:
        self.bufs = [ctypes.create_string_buffer(88) for _ in range(n)]
        self.count = COUNT(lambda _ctx: len(self.bufs))
        self.at = AT(lambda _ctx, i: ctypes.addressof(self.bufs[i]))
        self.gang = Gang(self=ctypes.addressof(self.bufs[0]), count=self.count, at=self.at,
                         on=1)  # fmt: skip

    def set(self, i: int, **words: int) -> None:
        at = {"inflight": INFLIGHT, "last": LAST_LAUNCH, "stop": STOP, "beat": BEAT,
              "release": RELEASE}  # fmt: skip
        for name, value in words.items():
            struct.pack_into("<q", self.bufs[i], at[name], value)

    def word(self, i: int, at: int) -> int:
        return struct.unpack_from("<q", self.bufs[i], at)[0]


@pytest.fixture(scope="module")
def admit(sim):
    fn = sim.lib().gs_gang_admit
    fn.restype = ctypes.c_int64
    fn.argtypes = [ctypes.POINTER(Gang), ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                   ctypes.c_int]  # fmt: skip
    return lambda slots, now, wait, release, drained: fn(ctypes.byref(slots.gang), now, wait,
                                                         release, drained)  # fmt: skip


def test_a_process_alone_uses_the_rule_of_a_process_alone(admit) -> None:
    s = Slots(2)
    s.set(1, last=NOW - 60 * MS)  # launched 60 ms ago: not in the gang
    assert admit(s, NOW, 5 * MS, NOW + 9 * MS, 1) == -1
    assert s.word(0, STOP) == 0, "nothing is published by a process alone"


def test_one_waiting_in_a_sync_on_queued_work_is_still_in_the_gang(admit) -> None:
    """Its kernel may spin until our next launch: holding alone would leave it spinning."""
    s = Slots(2)
    s.set(1, last=NOW - 2 * S, inflight=1 * MS)
    assert admit(s, NOW, 5 * MS, NOW + 9 * MS, 1) != -1
    assert s.word(0, STOP) == NOW, "we stop, and say so"


def test_a_debt_stops_the_process_and_a_stop_stops_the_others(admit) -> None:
    a, b = Slots(2), Slots(2)
    a.set(1, last=NOW - 10_000)  # still launching
    assert admit(a, NOW, 5 * MS, NOW + 9 * MS, 1) > 0, "held: the other still launches"
    assert a.word(0, STOP) == NOW and a.word(0, RELEASE) == NOW + 9 * MS
    b.set(1, stop=NOW - MS, beat=NOW - 100_000 | 1, release=NOW + 7 * MS)
    assert admit(b, NOW, 0, NOW, 1) == 7 * MS, "no debt of its own, it waits for the gang's"
    assert admit(b, NOW + 7 * MS, 0, NOW + 7 * MS, 1) == 0, "and goes with it"
    assert b.word(0, STOP) == 0


def test_a_stop_whose_debts_are_paid_ends_though_queues_still_drain(admit) -> None:
    """Nobody owes anything once every release published is past: no hold is left to place, so
    waiting for the queues would only hold us past what anyone owed (an all-reduce timing loop
    queues 11 ms in 0.4 ms of CPU: 10.7-13.5 ms past owed on 2x H100 and H200)."""
    s = Slots(2)
    s.set(1, stop=NOW - MS, beat=NOW - 100_000, release=NOW + 2 * MS)  # its queue still runs
    assert admit(s, NOW, 0, NOW, 0) > 0, "stopped with it: its debt is not paid yet"
    assert s.gang.release_ns == NOW + 2 * MS, "what we wait for counts as owed (launch.c's over)"
    s.set(1, beat=NOW + MS)  # it checked again: both queues still run
    assert admit(s, NOW + 2 * MS, 0, NOW + 2 * MS, 0) == 0, "paid: go, drained or not"
    assert s.word(0, STOP) == 0 and s.gang.stopped == 0


def test_one_still_launching_may_yet_stop_with_a_debt_so_it_gets_the_settle_time(admit) -> None:
    s = Slots(3)
    s.set(1, stop=NOW - MS, beat=NOW - 100_000, release=NOW + MS)
    s.set(2, last=NOW - 10_000)  # launching: it will see the stop at its next launch
    admit(s, NOW, 0, NOW, 0)
    s.set(2, last=NOW + 2 * MS - 10_000)  # still launching
    assert admit(s, NOW + 2 * MS, 0, NOW + 2 * MS, 0) > 0, "it may publish a later release"
    s.set(1, beat=NOW + 5 * MS)
    s.set(2, last=NOW + 5 * MS - 10_000)
    assert admit(s, NOW + 5 * MS, 0, NOW + 5 * MS, 0) == 0, "for at most GS_GANG_SETTLE_NS"


def test_an_empty_queue_catches_up_for_one_that_still_runs_one_launch_at_a_time(admit) -> None:
    s = Slots(2)
    s.set(1, stop=NOW - MS, beat=NOW - 500_000, release=NOW + 20 * MS)  # stale: before our drain
    assert admit(s, NOW, 3 * MS, NOW + 20 * MS, 1) > 0, "its last check came before our drain"
    s.set(1, beat=NOW + 100_000)  # it checked again, still running (bit 0 clear)
    assert admit(s, NOW + 200_000, 3 * MS, NOW + 20 * MS, 1) == 0, "catch up: one launch"
    assert admit(s, NOW + 210_000, 3 * MS, NOW + 20 * MS, 0) > 0, "then our own queue first"
    assert admit(s, NOW + 300_000, 3 * MS, NOW + 20 * MS, 1) > 0, "its beat is older than our drain"


def test_an_empty_queue_catches_up_at_once_for_one_that_waits_in_a_sync(admit) -> None:
    """One in a sync checks no more, so no check of it comes after our drain; what it queued is
    not done (a sync returns with its work published as done): it may spin until our next
    launch (one GPU: its spinning kernel keeps the GPU until ours is queued)."""
    s = Slots(2)
    s.set(1, stop=NOW - 5 * MS, beat=NOW - 3 * MS, release=NOW + 20 * MS)  # bit 0: not drained
    s.set(1, inflight=2 * MS)
    admit(s, NOW, 3 * MS, NOW + 20 * MS, 1)  # stops; marks our queue empty since now
    assert admit(s, NOW + 100_000, 3 * MS, NOW + 20 * MS, 1) == 0, "catch up: one launch"
    assert s.word(0, BEAT) & 1 == 0, "and our own queue is published as not empty before it"
    s.set(1, inflight=0)  # its sync returned: its queue is done (its beat is still old)
    assert admit(s, NOW + 200_000, 3 * MS, NOW + 20 * MS, 1) > 0, "nothing to catch up for"
    s.set(1, inflight=2 * MS, beat=NOW + 150_000)  # it checks (its gate): its own word counts
    assert admit(s, NOW + 300_000, 3 * MS, NOW + 20 * MS, 1) > 0, "its check was before our drain"


def test_catching_up_stops_at_the_overdraft(admit) -> None:
    """Catch-up launches are charged, but a process deep in debt holds instead: past 1 s of
    debt only for a queue that waits on it (past its estimate: 1 ms here), up to 1.1 s; past
    that it holds whatever waits (the other spins: no gang can help)."""
    s = Slots(2)
    s.set(1, stop=NOW - MS, beat=NOW + 1, release=NOW, inflight=MS, last=NOW - 2 * MS)
    admit(s, NOW, OVERDRAFT, NOW + 2 * S, 1)  # stops (first call marks our queue empty)
    s.set(1, beat=NOW + 2)
    assert admit(s, NOW + 3, OVERDRAFT, NOW + 2 * S, 1) > 0, "1 s of debt: it may yet drain"
    late = NOW + 1_300_000  # its queue is past its estimate: it waits on us
    s.set(1, beat=late)
    assert admit(s, late, OVERDRAFT, NOW + 2 * S, 1) == 0, "one more launch, not a spin"
    deep = OVERDRAFT + GRACE
    s.set(1, beat=late + 1)
    admit(s, late + 1, deep, NOW + 2 * S, 1)  # our queue is empty again
    later = late + 6 * MS  # past GS_GANG_SETTLE_NS and the brief wait
    s.set(1, beat=later)
    assert admit(s, later, deep, NOW + 2 * S, 1) == NOW + 2 * S - later, "never stuck"


def test_at_the_catch_up_limit_the_stop_ends_where_nobody_waits_on_us(admit) -> None:
    """Two processes that take turns catching up (one GPU: each one's queue still runs when the
    other's drains, waiting for its time slice) reach the stop's 256 catch-ups. A hold then,
    while the other's kernel waits on our next launch, left it spinning for the whole hold
    (traces: 0.58 s, then 1.16 s, then 2.5 s of holds). Past the limit we catch up only for a
    queue past its estimate, and otherwise wait briefly: it drains, and then we hold."""
    s = Slots(2)
    s.set(1, stop=NOW - MS, beat=NOW - 500_000, release=NOW + 20 * MS, inflight=MS,
          last=NOW - 100_000)
    s.gang.stopped, s.gang.stop_ns, s.gang.catchup = 1, NOW - S, 256
    s.gang.own_release_ns = NOW + 20 * MS
    admit(s, NOW, 3 * MS, NOW + 20 * MS, 1)  # our queue empty since now
    s.set(1, beat=NOW + 100_000)  # it still runs, within its estimate
    assert 0 < admit(s, NOW + 200_000, 3 * MS, NOW + 20 * MS, 1) <= POLL, \
        "no catch-up and no hold yet: let it drain"
    s.set(1, beat=NOW + 300_000 | 1)  # it drained on its own
    assert admit(s, NOW + 400_000, 3 * MS, NOW + 20 * MS, 1) == 20 * MS - 400_000, \
        "then we hold, and nobody spins"
    assert s.gang.catchup == 256
    s.set(1, beat=NOW + 500_000, last=NOW + 450_000)  # it launched again and its queue
    s.gang.drained_ns = NOW + 400_000                 # ran past its estimate: it waits on us
    s.set(1, beat=NOW + 1_700_000)
    assert admit(s, NOW + 1_800_000, 3 * MS, NOW + 20 * MS, 1) == 0, "catch up, once more"
    assert s.gang.catchup == 257


def test_a_dead_process_and_a_forged_release_hold_nobody(admit) -> None:
    dead = Slots(2)
    dead.set(1, stop=NOW - S, beat=(NOW - 30 * MS) | 1, release=NOW + 5 * S)
    assert admit(dead, NOW, 0, NOW, 1) == -1, "a beat older than 20 ms: gone"
    forged = Slots(3)
    forged.set(1, stop=NOW - MS, beat=NOW | 1, release=NOW + HORIZON + 1)
    forged.set(2, stop=NOW - MS, beat=NOW | 1, release=NOW + 4 * MS)
    assert admit(forged, NOW, 0, NOW, 1) == 4 * MS, "a release beyond the horizon is ignored"

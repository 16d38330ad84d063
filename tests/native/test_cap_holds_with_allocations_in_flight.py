"""Near the cap, an allocation in flight never lets another one past it (issue 7 item 5).

A background thread's allocation is held inside the (fake) driver by FAKE_CUDA_ALLOC_DELAY_MS
while the main thread re-reads the driver overhead (cuMemGetInfo) and allocates. Before the fix:
(a) the overhead reconcile subtracted the in-flight reservation from the driver overhead, so the
main thread passed the cap by that overhead; (b) a request of 2^64 - X bytes wrapped the pending
counter, so the main thread passed the cap by X. The fake driver's own accounting is the judge."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS, Binaries, Harness, MiB, build_prog

DELAY = {"FAKE_CUDA_ALLOC_DELAY_MS": "1000"}


@pytest.fixture(scope="module")
def race_cap(binaries: Binaries, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_prog(binaries, "race_cap.c", tmp_path_factory.mktemp("race_cap"))


def run(gs: Harness, exe: Path, *args: object, limit: str, **extra: str) -> dict[str, int]:
    res = gs.run([str(exe), *map(str, args)], timeout=30, limit=limit, extra={**DELAY, **extra})
    rcs = {ln.cmd: ln.rc for ln in res.lines}
    assert set(rcs) == {"bg", "fg"}, res.describe()
    return rcs


def test_an_allocation_in_flight_does_not_lower_the_driver_overhead(gs: Harness, race_cap) -> None:
    # 64 MiB of lazily loaded modules (overhead) + 128 MiB in flight + 384 MiB = 576 > 512 MiB
    rcs = run(gs, race_cap, 0, 128 * MiB, 384 * MiB, "launch", limit="512MiB",
              FAKE_CUDA_LAZY_MIB="64")  # fmt: skip
    assert rcs["bg"] == CUDA_SUCCESS, "the allocation in flight fits"
    assert rcs["fg"] == CUDA_ERROR_OUT_OF_MEMORY, (
        "64 MiB overhead + 128 MiB in flight + 384 MiB passes a 512 MiB cap"
    )
    assert gs.fake().used(live_only=False) <= 512 * MiB + 64 * MiB, "the fake saw the cap pass"


def test_a_size_that_cannot_be_represented_never_touches_the_counters(
    gs: Harness, race_cap
) -> None:
    huge = (1 << 64) - 128 * MiB  # added to a pending counter it hides 128 MiB of use
    rcs = run(gs, race_cap, 128 * MiB, huge, 256 * MiB, limit="256MiB")
    assert rcs["bg"] == CUDA_ERROR_OUT_OF_MEMORY, "2^64 - 128 MiB can never fit"
    assert rcs["fg"] == CUDA_ERROR_OUT_OF_MEMORY, "128 MiB used + 256 MiB passes a 256 MiB cap"
    assert gs.fake().oom[0] == 0, "the library refused the huge size before the driver saw it"

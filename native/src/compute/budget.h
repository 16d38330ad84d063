/* GPU-time budget of one container on one device: a token bucket kept as ONE shared word.
 * Owns: the arithmetic (GCRA form of a token bucket refilled at limit % of wall time,
 * capped to GS_BUDGET_WINDOW_NS of wall time, debited by measured GPU busy ns).
 * Does not: measure anything (meter.c), sleep, or touch CUDA. Pure; every function takes
 * `now` (CLOCK_MONOTONIC ns) so tests drive it with a fake clock.
 * Invariants: tat only moves by CAS; debt is capped at GS_BUDGET_MAX_STALL_NS of wall time
 * (a kernel longer than the window is paid back, but never stalls a process for ever); a stored
 * tat beyond now + GS_BUDGET_HORIZON_NS cannot come from this clock (another boot, a time
 * namespace, a restored checkpoint) and counts as a full bucket, overwritten at the next debit.
 * Tests: tests/native/compute/test_controller.py (via the simulator library). */
#ifndef GS_COMPUTE_BUDGET_H
#define GS_COMPUTE_BUDGET_H

#include <stdint.h>

#include "gpuslice/compute_shared.h"

#define GS_BUDGET_WINDOW_NS (50LL * 1000 * 1000)      /* burst allowance: 50 ms of wall time */
#define GS_BUDGET_MAX_STALL_NS (10LL * 1000 * 1000 * 1000) /* longest wait a debt can cause */
/* A stored tat further ahead than this was not written on this clock (1 s of slack: the writer
 * may have read its clock after ours). */
#define GS_BUDGET_HORIZON_NS (GS_BUDGET_MAX_STALL_NS + 1000LL * 1000 * 1000)

/* Wall-time cost of `gpu_ns` of GPU work at `pct` percent (pct in 1..99). */
static inline int64_t gs_budget_wall_cost(int64_t gpu_ns, int pct)
{
    return gpu_ns * 100 / pct;
}

/* How long a launch must wait (ns, 0 = go now) given this process's unmeasured in-flight
 * estimate `inflight_ns` (GPU ns it launched but that is not debited yet). */
int64_t gs_budget_wait_ns(struct gs_compute_device *d, int pct, int64_t now, int64_t inflight_ns);

/* Debit `busy_ns` of measured GPU time. `borrowing` (work-conserving, GPU otherwise idle):
 * the bucket is kept at "empty, no debt" so yielding later starts exactly at the limit. */
void gs_budget_debit(struct gs_compute_device *d, int pct, int64_t now, int64_t busy_ns,
                     int borrowing);

/* Tokens left (GPU ns, negative = debt) for display and tests. */
int64_t gs_budget_tokens_ns(struct gs_compute_device *d, int pct, int64_t now);

/* Work-conserving decision: may this container use GPU time above its limit now?
 * others_high / others_low: whether another tenant of priority 0 / 1 has demand. */
int gs_budget_may_borrow(int work_conserving, int priority, int others_high, int others_low);

#endif

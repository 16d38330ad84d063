/* The processes of one container on different GPUs launch in phase (issue 21).
 * Owns: the per-device `held_until_ns` word of the container's region. A process held back by
 * its device's budget publishes when it will launch again; a process of the same container on
 * another device launches no earlier than the latest such time ("follows"). The ranks of a job
 * (NCCL, DDP, any kernel that spins until a peer's kernel runs) then reach their collectives
 * together. Without it a collective kernel spun, charged, while its peer's launch was held by
 * the peer's budget; the spin put the spinning rank in debt, whose hold then made the other
 * rank's next collective spin: the ranks took turns and the debt grew by 100/limit each round
 * (2x H100, 50 %: launches held 11 s, the job never finished).
 * Never charges less: every kernel is still charged as measured, so work disguised as
 * "communication" gets nothing past the cap; following only waits, and the follower's bucket
 * fills meanwhile (up to its burst). Only holds by the budget are published (not "waiting for
 * the GPU"), and a follow is never published: two devices cannot hold each other in a cycle,
 * and a follow ends when the leader's own hold ends (its debt plus a quantum).
 * Bounds: a published time further ahead than GS_BUDGET_HORIZON_NS was not written on this
 * clock and is ignored; a dead leader's last hold lapses by itself. Processes on the SAME
 * device share its bucket (and the board's in-flight sum), so they are not followed here.
 * Does not: decide a hold (meter.c, budget.c), sleep, or read the region itself (compute.c hands
 * over the other devices' blocks). Pure given `now`.
 * Tests: tests/native/compute/test_phase.py (unit + the collective simulator), GPU:
 * benchmarks/multi_gpu/run.sh (NCCL, DDP, tests/gpu/progs/ipc_spin.cu). */
#ifndef GS_COMPUTE_PHASE_H
#define GS_COMPUTE_PHASE_H

#include <stdint.h>

#include "gpuslice/compute_shared.h"

#define GS_PHASE_DEVICES 16 /* GS_REGION_MAX_DEVICES: the other devices of one region */

struct gs_phase {
    struct gs_compute_device *others[GS_PHASE_DEVICES]; /* this container's other devices */
    int n;
};

/* Add another device's block (ignored when NULL or full). */
void gs_phase_add(struct gs_phase *p, struct gs_compute_device *other);
/* A process on `d` is held back by d's budget until `until`: publish it. */
void gs_phase_publish(struct gs_compute_device *d, int64_t until);
/* How long a launch must wait for the other devices' holds (ns, 0 = none). */
int64_t gs_phase_follow_ns(const struct gs_phase *p, int64_t now);

#endif

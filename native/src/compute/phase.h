/* The processes of one container on different GPUs launch in phase (issue 21). Opt-in,
 * experimental (GPUSLICE_COMPUTE_PHASE=1; compute.c hands over no other device otherwise): the
 * NCCL targets are not met on GPUs yet, see docs/compute.md.
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
 * A hold published in the middle of a step came too late on real NCCL (2x H100): the rank
 * that had spun discovered its debt only at its next launch, while the other, just released,
 * had already launched the next step's first collective (coin flip, every step: the same
 * growth). So, while another device of the container is active (launched in the last
 * GS_PHASE_ACTIVE_NS), holds are taken at STEP BOUNDARIES: a launch onto an idle GPU (every
 * stream of the process drained, after a sync; no collective of ours is in flight). There
 * (1) the process marks the boundary (idle_check_ns), decides its own hold and publishes it,
 * (2) waits until every active peer device has passed a boundary since this process's last
 * launch (at most GS_PHASE_BARRIER_NS; peers of one collective reach theirs within
 * microseconds), then (3) follows the holds it sees. In mid-step a debt below
 * GS_PHASE_OVERDRAFT_NS is carried to the next boundary (still charged in full: the budget
 * stays exact over time, a step's work comes in one burst); a larger one holds at once, so a
 * process that never syncs is still held to its limit. Such a mid-step hold (and the follow
 * of one) lets a rank that is BEHIND catch up first: while another active device launched more
 * since its last boundary than ours did since ours, up to GS_PHASE_CATCHUP launches go on, so
 * the ranks of an SPMD job stop at the same launch of their step (the boundaries, after the
 * same sync in every rank, align the counts) and no collective waits across the hold.
 * Only PARTNERS are followed: devices whose processes reach step boundaries together with ours
 * (within GS_PHASE_TOGETHER_NS: a collective ends on every rank at once, so its ranks' syncs
 * return together; whoever arrives second judges, for both): a score, +2 for a boundary
 * together, -1 for one apart (0..8), partners while >= GS_PHASE_PARTNER. Independent processes
 * of the container on other GPUs that never sync together never slow each other down
 * (tests/native/test_multi_gpu_compute_share.py); ones whose syncs often fall within 1 ms of
 * each other may be taken for partners (they then wait for each other's holds). Until a first
 * boundary together, ranks are on their own (a job's first collective, dist.barrier() or DDP's
 * broadcast, is followed by a sync: partners are known from the second launch on).
 * Bounds: a published time further ahead than GS_BUDGET_HORIZON_NS was not written on this
 * clock and is ignored; a dead leader's last hold lapses by itself. Processes on the SAME
 * device share its bucket (and the board's in-flight sum), and devices this process launches
 * on itself are in phase through its own threads: neither is followed here.
 * Does not: decide a hold (meter.c, budget.c), sleep, or read the region itself (compute.c hands
 * over the other devices' blocks). Pure given `now`.
 * Tests: tests/native/compute/test_phase.py (unit + the collective simulator),
 * test_phase_fake.py (fake driver), GPU: benchmarks/multi_gpu/run.sh (NCCL, DDP,
 * tests/gpu/progs/ipc_spin.cu). */
#ifndef GS_COMPUTE_PHASE_H
#define GS_COMPUTE_PHASE_H

#include <stdint.h>

#include "gpuslice/compute_shared.h"

#define GS_PHASE_DEVICES 16 /* GS_REGION_MAX_DEVICES: the other devices of one region */
#define GS_PHASE_ACTIVE_NS 50000000LL    /* a device that launched this recently is a peer */
#define GS_PHASE_BARRIER_NS 1000000LL    /* longest wait at a boundary for the peers' boundary */
#define GS_PHASE_POLL_NS 50000LL         /* re-check step while waiting for them */
#define GS_PHASE_OVERDRAFT_NS 50000000LL /* mid-step debt (wall) carried to the boundary */
#define GS_PHASE_CATCHUP 64              /* launches a rank behind may make to catch up */
#define GS_PHASE_TOGETHER_NS 1000000LL   /* boundaries this close belong to one collective */
#define GS_PHASE_PARTNER 1               /* partner score: +2 together, -1 apart, 0..8 */

struct gs_phase {
    struct gs_compute_device *others[GS_PHASE_DEVICES]; /* this container's other devices */
    int idx[GS_PHASE_DEVICES];  /* their region entries (partner_ns index) */
    int self;                   /* our device's region entry */
    int n;
    _Atomic uint32_t mine; /* bit i: this process launches on others[i] itself (not followed) */
};

/* Our device's region entry, then each other device's block and entry (NULL or full: ignored). */
void gs_phase_self(struct gs_phase *p, int entry);
void gs_phase_add(struct gs_phase *p, struct gs_compute_device *other, int entry);
/* This process launches on `d` too (another context): its holds are ours, never followed. */
void gs_phase_mine(struct gs_phase *p, const struct gs_compute_device *d);
/* 1 while a partner device (see above; not this process's own) launched recently. */
int gs_phase_coupled(const struct gs_phase *p, const struct gs_compute_device *d, int64_t now);
/* A process on `d` is at a step boundary (launches onto an idle GPU): first judge partners
 * (before the boundary is marked), then publish any hold, then mark it. */
void gs_phase_judge(struct gs_phase *p, struct gs_compute_device *d, int64_t now);
void gs_phase_mark_boundary(struct gs_compute_device *d, int64_t now);
/* 1 when an active partner launched more since its last boundary than `d` since its. */
int gs_phase_behind(const struct gs_phase *p, const struct gs_compute_device *d, int64_t now);
/* 1 when every active partner passed a boundary at or after `since`. */
int gs_phase_peers_at_boundary(const struct gs_phase *p, const struct gs_compute_device *d,
                               int64_t since, int64_t now);
/* A process on `d` is held back by d's budget until `until`: publish it. */
void gs_phase_publish(struct gs_compute_device *d, int64_t until);
/* How long a launch must wait for the partners' holds (ns, 0 = none). */
int64_t gs_phase_follow_ns(const struct gs_phase *p, const struct gs_compute_device *d,
                           int64_t now);

#endif

/* The processes of one container stop and go together: gang holds (issue 21). Opt-in
 * (GPUSLICE_COMPUTE_PHASE=1) while it is measured on GPUs, see docs/compute.md.
 * Why: ranks of one job (NCCL's collectives, a DDP step, any kernel that spins until a peer
 * process's kernel ran) wait for each other ON the GPU. A rank held back by its budget makes its
 * peer's collective kernel spin; the spin is GPU time and is charged (it must be: a tenant could
 * dress compute up as "waiting"); the spinner's next hold then makes the first rank spin. With
 * each rank held on its own, a difference of d between two ranks' holds comes back as d (1 - p)/p
 * at limit p: it dies out above 50 %, grows below (2x H100: 11 s holds at 30 %). And a hold
 * placed by one rank's clock splits a collective whose ranks' launches straddle it (traces of
 * the earlier in-phase design: one rank saw its drained GPU as a step boundary after every
 * all-reduce while the other queued twenty).
 * What: a process whose budget holds it back STOPS instead and says so in its slot of the
 * container's region; every process of the container that launched in the last
 * GS_GANG_ACTIVE_NS, or waits in a sync for work it queued (on any device, the same device
 * included), stops at its next launch too. Stopped processes let their GPU queues drain and say
 * at each check whether theirs is empty. One whose queue is empty, while another's still ran at a
 * check after that, CATCHES UP: one launch, then it drains and looks again (the other queue may
 * wait for a collective we have not launched; one launch at a time never runs past it, so ranks
 * whose queues all still drain cannot take turns running on). Once no stopped queue holds work,
 * they all wait for the LATEST release any of them published (each: when its own budget holds
 * GS_GANG_QUANTUM_NS more), then go together. So no hold falls inside a collective, whatever the
 * kernels are: no names, no launch counts. A stop whose latest release passes while queues still
 * drain ends there, drained or not: no hold is left to place, and waiting on would hold every
 * rank past what anyone owed (deep queues: an all-reduce timing loop).
 * Never charges less: every kernel is charged as measured, spins and catch-up launches included;
 * a gang hold only makes processes wait (their buckets fill meanwhile), so work dressed as
 * communication gets nothing past the cap.
 * Bounds: at most GS_GANG_CATCHUP catch-up launches per stop, and only below GS_GANG_OVERDRAFT_NS
 * of own debt (GS_GANG_GUESS_NS for a running process's queued work that is not past its
 * estimate: it may just be computing). Past those, GS_GANG_GRACE more launches and
 * GS_GANG_GRACE_NS more debt, only for a stopped queue past its estimate (it waits on us: a hold
 * now would leave it spinning for the whole hold, and its debt would hold us as long), after a
 * wait of at most GS_GANG_LATE_NS + GS_GANG_OVERDUE_NS for a draining one to drain or become
 * that; at most GS_GANG_SETTLE_NS waiting for processes that still launch; a stopped process
 * whose beat is older than GS_GANG_BEAT_NS is gone (killed: it holds nobody); a release further
 * ahead than GS_BUDGET_HORIZON_NS is another clock's and ignored.
 * Owns: the gang words of every process slot (compute_shared.h: gang_stop_ns, gang_beat_ns,
 * gang_release_ns) and their reading. Does not: decide a process's own hold (meter.c, budget.c),
 * sleep, or find the slots (the caller hands over a slot reader). Pure given `now`.
 * Tests: tests/native/compute/test_gang.py (the collective simulator), test_gang_fake.py (fake
 * driver), GPU: benchmarks/multi_gpu/run.sh (NCCL, DDP, tests/gpu/progs/ipc_spin.cu). */
#ifndef GS_COMPUTE_GANG_H
#define GS_COMPUTE_GANG_H

#include <stdatomic.h>
#include <stdint.h>

#include "gpuslice/compute_shared.h"

/* Relaxed access to the gang words of a slot (a region's or a gang file's, crew.h): plain times,
 * any value safe, so no ordering is needed. */
#define GS_LOAD(at) ((int64_t)atomic_load_explicit(&(at), memory_order_relaxed))
#define GS_STORE(at, v) atomic_store_explicit(&(at), (uint64_t)(v), memory_order_relaxed)

#define GS_GANG_ACTIVE_NS 50000000LL  /* a process that launched this recently is in the gang */
#define GS_GANG_IDLE_NS 1000000LL     /* ... and still launching (it will see a stop) if this */
#define GS_GANG_BEAT_NS 20000000LL    /* a stopped process checks at least this often */
#define GS_GANG_SETTLE_NS 5000000LL   /* longest wait for processes that still launch */
#define GS_GANG_OVERDUE_NS 200000LL   /* queued work this far past its estimate waits */
#define GS_GANG_LATE_NS 2000000LL     /* ... an estimate counts up to this much (a spin that was
                                       * charged must not lengthen the next wait much) */
#define GS_GANG_POLL_NS 50000LL       /* re-check step while the gang settles (launch.c sleeps
                                       * at least GS_THROTTLE_MIN_SLEEP_NS, 200 us) */
#define GS_GANG_CATCHUP 256           /* catch-up launches per stop */
#define GS_GANG_GRACE 64              /* ... and past these bounds, for a queue that waits on us */
#define GS_GANG_GRACE_NS 100000000LL
/* ... and only while the own debt (wall time) is below this: a stopped process's queue that still
 * runs most likely waits for us; a running process's queued work is a weaker sign (it may just be
 * computing), so catching up for it stops sooner */
#define GS_GANG_OVERDRAFT_NS 1000000000LL
#define GS_GANG_GUESS_NS 50000000LL
/* A stop costs a drained GPU queue, so each release lets this much GPU work go (at most half
 * the bucket), not the 0.5 ms quantum of a process alone. */
#define GS_GANG_QUANTUM_NS 5000000LL

struct gs_gang {
    struct gs_compute_proc *self;  /* this process's slot (NULL: no gang) */
    /* the container's slots: how many to scan, and slot i's compute block (NULL: none) */
    int (*count)(void *ctx);
    struct gs_compute_proc *(*at)(void *ctx, int i);
    void *ctx;
    int on;                        /* GPUSLICE_COMPUTE_PHASE=1, one context in this process */
    int stopped;
    int64_t stop_ns;               /* when this stop began */
    int64_t gen_ns;                /* our last release: stops begun before it were that hold's */
    int64_t own_release_ns;        /* when this stop's own debt and quantum are paid */
    int64_t release_ns;            /* the gang's release at the last check (0: none) */
    int catchup;                   /* catch-up launches in this stop */
    int64_t drained_ns;            /* since when our queue is empty (0: it is not) */
    char why;                      /* why the last admit waited: 'q' our queue first, 'o' others'
                                    * queues or launches, 'r' the release; 0: it did not */
};

/* A launch of this process: `own_wait` is what its budget alone makes it wait (0: nothing),
 * `own_release` when that budget holds GS_GANG_QUANTUM_NS more (now when it owes nothing),
 * `drained` 1 when every stream of it is idle. Returns ns to wait (0: launch now; -1: no
 * other process is in the gang, use the rule of a process alone). */
int64_t gs_gang_admit(struct gs_gang *g, int64_t now, int64_t own_wait, int64_t own_release,
                      int drained);
/* How long a stopped process still waits for the gang's release as of its last check (0: none). */
int64_t gs_gang_wait_ns(const struct gs_gang *g, int64_t now);

#endif

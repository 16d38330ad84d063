/* Measures one process's GPU busy time on one device and decides when a launch may go.
 * Owns: batches (one start/end event pair per run of launches on a stream, closed by
 * estimated size, age, or when the stream was seen idle), the pending queue, the per-launch
 * cost estimate (pre-debited while work is in flight), the union of busy spans (overlapping
 * streams of one process are counted once; the container's processes on one GPU too, union.h),
 * the work-conserving board decision, the wake-up quantum (larger next to other contexts), the
 * fairness between one container's processes, and their gang holds (gang.h).
 * Does not: call CUDA (events go through gs_meter_ops), sleep, lock (launch.c holds a mutex).
 * Pure and deterministic given the ops and `now`; the simulator drives it with a fake GPU.
 * Failure: an ops error drops that batch (under-counts, never blocks); see docs/compute.md.
 * Tests: tests/native/compute/test_controller.py, test_spans.py, test_clean.py,
 * test_forged_peers.py, test_union.py. */
#ifndef GS_COMPUTE_METER_H
#define GS_COMPUTE_METER_H

#include <stdint.h>

#include "clean.h"
#include "gpuslice/compute_shared.h"
#include "gang.h"
#include "spans.h"
#include "union.h"

#define GS_METER_STREAMS 16
#define GS_METER_PENDING 32
#define GS_METER_PENDING_MAX 12          /* more unmeasured batches than this: wait for the GPU */
#define GS_METER_BATCH_GPU_NS 1000000LL  /* close a batch at ~1 ms of estimated GPU work */
#define GS_METER_BATCH_AGE_NS 4000000LL  /* ... or 4 ms after it opened (CPU clock) */
#define GS_METER_BATCH_LAUNCHES 256
#define GS_METER_IDLE_PROBE_NS 20000LL   /* CPU gap after which we ask whether the stream idled */
#define GS_METER_POLL_NS 100000LL        /* wait step when the GPU is behind */
#define GS_METER_EVENT_NS 100000LL       /* re-record the end event every ~100 us of GPU work */
#define GS_METER_BORROW_INFLIGHT_NS 5000000LL /* queue bound while borrowing */
/* Once held back, a process sleeps until the bucket would also hold this much GPU time, so
 * each wake-up releases ~0.5 ms of work: the per-wake costs that events cannot separate from
 * work (the stream restarts idle: launch latency, the first kernel's submission) are paid once
 * per 0.5 ms of work instead of once per few kernels. At the wake-up the usual rule applies
 * (bucket - in flight >= 0), so processes sharing a bucket cannot starve each other. Never
 * more than a fifth of the bucket. */
#define GS_METER_QUANTUM_NS 500000LL
/* While another context has demand the GPU time-slices, and every burst costs switches: a
 * process whose batches the time-slice correction can fix (its keys are stable: >= 75 % of
 * recent batches, EMA) wakes for 2 ms of work instead (at most half the bucket). H100 pair
 * 30/70: the 70 % side +2-3 points for small kernels and graphs. Uncorrectable work keeps the
 * 0.5 ms quantum: its larger bursts would bracket the other's slices and be charged them. */
#define GS_METER_QUANTUM_SHARED_NS 2000000LL
/* Processes of one container share its bucket; whoever wakes first would take it. A process
 * that charged more than the average of its peers since the window opened waits for twice the
 * quantum, so the one behind wakes first (the window restarts every 200 ms). */
#define GS_METER_FAIR_NS 200000000LL

enum gs_launch_kind { GS_LAUNCH_KERNEL = 0, GS_LAUNCH_GRAPH = 1 };

/* Each recorded event costs the GPU ~1 us (timestamp write between kernels), so the end
 * event is re-recorded after a launch only when the work since its last record reaches
 * GS_METER_EVENT_NS, when launches are sparse, or when the cost is still unknown; launches
 * after the last record (the tail) are counted by their estimate.
 * Events of the device timeline. ctx is the ops' own state. Streams are opaque handles. */
struct gs_meter_ops {
    void *(*ev_record)(void *ctx, uintptr_t stream, void *ev); /* ev NULL: take a new one */
    int (*ev_done)(void *ctx, void *ev);                       /* 1 done, 0 not yet, <0 error */
    int (*ev_time_ns)(void *ctx, void *ev, int64_t *t);        /* 0 ok: GPU-timeline ns */
    void (*ev_release)(void *ctx, void *ev);
    int (*stream_busy)(void *ctx, uintptr_t stream);           /* 1 busy, 0 idle, <0 error;
                                                                 * NULL: not known */
};

struct gs_batch {
    uintptr_t stream;
    uint64_t key;             /* launch key of its first launch (clean.h) */
    uint8_t mixed;            /* a launch with another key (or none) followed */
    uint8_t covered_mixed;    /* `mixed` as of the end event's last record */
    void *start, *end;
    uint32_t launches[2];     /* by enum gs_launch_kind */
    uint32_t unknown;         /* launches made before any estimate existed */
    uint32_t covered;         /* launches before the end event's last record */
    int64_t tail_ns;          /* estimate of the launches after it (counted as estimated) */
    int64_t est_ns;           /* pre-debited estimate of this batch */
    int64_t opened_ns, last_ns;
};

/* Node-wide demand of other tenants, filled by the board (or by a test): whether a tenant of
 * priority 0 / 1 has demand, and the total GPU ns the other tenants' processes published;
 * `peers` / `peers_busy_ns`: the same for the other processes of this container (one budget, so
 * never a reason to yield, but their contexts time-slice with ours like another tenant's). */
struct gs_meter_others {
    int high, low, peers;            /* peers: how many */
    uint64_t busy_ns, peers_busy_ns;
    int64_t peers_inflight_ns;       /* GPU work the peers launched and have not yet debited */
};

/* gs_meter_after_key and the time-slice correction (clean.h) are available. */
#define GS_METER_HAS_KEYS 1

struct gs_meter {
    const struct gs_meter_ops *ops;
    void *ctx;
    struct gs_compute_device *dev;   /* shared by the container's processes */
    struct gs_compute_proc *proc;    /* this process's slot (may be NULL in tests) */
    int pct;                         /* 1..99 */
    int work_conserving, priority, borrowing;
    int64_t held_until;              /* held back: sleep until then (a quantum accrues) */
    struct gs_batch open[GS_METER_STREAMS];
    int n_open;
    struct gs_batch pending[GS_METER_PENDING];
    int n_pending;
    int64_t inflight_ns;             /* sum of est_ns of open + pending batches */
    int64_t peers_inflight_ns;       /* the same of this container's other processes (board) */
    int peers;                       /* this container's other processes with demand (board) */
    uint64_t peers_busy_ns;          /* their published charged GPU ns */
    int64_t fair_start;              /* fairness window between them (GS_METER_FAIR_NS) */
    uint64_t fair_mine0, fair_peers0;
    int unknown;                     /* launches in flight made before any estimate existed */
    int64_t est_ns[2];               /* per-launch GPU cost estimate by kind, 0 = unknown */
    struct gs_span spans[GS_SPANS_MAX];
    int n_spans;
    struct gs_union un;              /* the container's processes on this GPU counted once */
    struct gs_clean clean;           /* clean per-launch durations (time-slice correction) */
    struct gs_gang gang;             /* the container's processes stop and go together */
    int correctable;                 /* EMA of "the batch's key could be corrected", 0..256 */
    uint64_t busy_total;             /* GPU ns this meter charged (published on the board) */
    uint64_t batches;                /* batches measured */
    uint64_t dropped;                /* batches lost to ops errors */
    int gang_flags;                  /* the last admit's: 1 in a gang, 2 stopped */
    char hold_why;                   /* why the last admit held (trace.h): 'm' measure first,
                                      * 'l' borrowing, 'b' the budget, else the gang's why */
    int ordinal;                     /* CUDA device ordinal (for the trace) */
    /* The host clock (CLOCK_MONOTONIC ns, as `now`), read when a batch is seen done; NULL: use
     * the `now` of the call (a simulator whose GPU runs on its clock). */
    int64_t (*clock)(void);
    /* Called for every measured batch (trace.h), NULL = none. */
    void (*on_batch)(const struct gs_meter *m, const struct gs_batch *b, int64_t span,
                     int64_t charge, int64_t busy, int64_t now);
};

void gs_meter_init(struct gs_meter *m, const struct gs_meter_ops *ops, void *ctx,
                   struct gs_compute_device *dev, struct gs_compute_proc *proc, int pct);
/* Reconcile completed batches; returns ns to wait before launching (0 = launch now). */
int64_t gs_meter_admit(struct gs_meter *m, int64_t now);
/* Right before the real launch (after admit returned 0): close/open the stream's batch. */
void gs_meter_before(struct gs_meter *m, uintptr_t stream, int64_t now);
/* Right after a successful real launch. `key`: gs_clean_key of the kernel (function, grid,
 * block) or graph exec; 0 = unknown (its batch is always charged as measured). */
void gs_meter_after_key(struct gs_meter *m, uintptr_t stream, enum gs_launch_kind kind,
                        uint64_t key, int64_t now);
/* gs_meter_after_key with key 0. */
void gs_meter_after(struct gs_meter *m, uintptr_t stream, enum gs_launch_kind kind, int64_t now);
/* The app is about to wait for the GPU (a stream, event or context sync): a batch whose last
 * launches went after its end event's record (its tail, counted by estimate) and whose stream
 * is still busy gets its end event again, so what the sync waits for is measured, not
 * estimated (a collective that spins there, a kernel far longer than the estimate). */
void gs_meter_sync(struct gs_meter *m);
/* Close idle batches and reconcile whatever completed (also done inside admit). */
void gs_meter_poll(struct gs_meter *m, int64_t now);
/* Throttle accounting: the caller held one launch back for `ns` in total. */
void gs_meter_note_wait(struct gs_meter *m, int64_t ns);
/* What a launch held now owes, ns: the wall time this device's budget needs to pay what was
 * charged and is in flight (own work and the peers' share admit counts), or the gang's release
 * it waits for (gang.h), whichever is longer. */
int64_t gs_meter_debt_ns(struct gs_meter *m, int64_t now);
/* gs_meter_note_wait, and the hold's statistics: `over_ns` = how long it went on after what
 * it owed was paid (release time - the pay time gs_meter_debt_ns gave at its last check). */
void gs_meter_note_hold(struct gs_meter *m, int64_t ns, int64_t over_ns);
/* Record others' demand: decide borrowing (work-conserving mode) and feed the time-slice
 * correction (any mode). */
void gs_meter_set_others(struct gs_meter *m, struct gs_meter_others others);
/* Release every event (process exit / context destroyed). */
void gs_meter_drop_all(struct gs_meter *m);

#endif

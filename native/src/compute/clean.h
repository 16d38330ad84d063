/* Clean per-launch durations, used to take other contexts' time slices out of a batch.
 * Without MPS the GPU time-slices contexts: a batch whose events bracket another tenant's
 * slice is charged that slice too. Per launch key (kernel: function + grid/block dims;
 * graph: the exec) we keep the minimum per-launch duration of recent homogeneous batches
 * (two 100 ms periods) and the mean of the "clean" samples (within 5 % of that minimum).
 * A batch well above mean x launches is corrected to it, only while another tenant has
 * demand on the board, only for a key with a clean sample in the last 250 ms, and only up to
 * the GPU time the other tenants published (credit): we never remove more time than they
 * used. Keys without an estimate, mixed batches and tenants alone are charged as measured.
 * Does not: measure, touch CUDA or shared memory. Pure given `now`.
 * Tests: tests/native/compute/test_clean.py (through the simulator library). */
#ifndef GS_COMPUTE_CLEAN_H
#define GS_COMPUTE_CLEAN_H

#include <stdint.h>

#define GS_CLEAN_KEYS 32
#define GS_CLEAN_PERIOD_NS 100000000LL  /* the minimum covers the last 1-2 periods */
#define GS_CLEAN_FRESH_NS 250000000LL   /* estimate usable this long after its last clean sample */
#define GS_CLEAN_TOL_PCT 5              /* a sample within 5 % of the minimum is clean */
#define GS_CLEAN_SLACK_NS 20000LL       /* excess below this is never corrected */
#define GS_CLEAN_DRIFT_MAX_PCT 15       /* clean: at most this far above the mean (4 deviations) */
#define GS_CLEAN_CREDIT_MAX_NS 50000000LL /* others' GPU time kept as credit, at most 50 ms */
/* A key is "stable" (its estimate may correct) when at least this share of its recent samples
 * (two periods, >= GS_CLEAN_MIN_SAMPLES) were clean: a kernel whose durations spread
 * (data-dependent work, a collective waiting for peers) is never corrected. */
#define GS_CLEAN_STABLE_PCT 40
#define GS_CLEAN_MIN_SAMPLES 8

struct gs_clean_entry {
    uint64_t key;                       /* 0 = free */
    int64_t min_cur, min_prev;          /* per-launch minimum of this / the previous period */
    int64_t period_start;
    int64_t mean;                       /* mean per-launch ns of clean samples (EMA 1/8) */
    int64_t dev;                        /* their mean absolute deviation from it (EMA 1/4) */
    uint32_t n_cur, n_prev;             /* samples in this / the previous period */
    uint32_t clean_cur, clean_prev;     /* ... of which clean */
    int64_t last_clean, last_used;
};

struct gs_clean {
    struct gs_clean_entry e[GS_CLEAN_KEYS];
    int others;                         /* another tenant has demand (board) */
    int64_t credit_ns;                  /* others' published GPU time not yet used to correct */
    uint64_t others_seen;               /* their published total at the last update */
    int others_valid;
    uint64_t corrected_ns;              /* total removed from charges */
    int usable;                         /* the last charged batch's key is stable (correctable) */
};

/* Launch key of a kernel (function + dims) or a graph exec; never 0. */
uint64_t gs_clean_key(uint64_t a, uint64_t b, uint64_t c);

/* The board's view: whether another tenant has demand and the total GPU ns its processes
 * published (monotonic per process; a drop = a process left, re-based without credit). */
void gs_clean_others(struct gs_clean *c, int active, uint64_t others_busy_ns);

/* GPU ns to charge for a completed homogeneous batch: `span_ns` measured for `n` launches
 * of `key`. Learns from the sample, then corrects it if it is inflated (see above). */
int64_t gs_clean_charge(struct gs_clean *c, uint64_t key, uint32_t n, int64_t span_ns,
                        int64_t now);

#endif

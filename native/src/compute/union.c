/* The union of a container's busy spans on one GPU. See union.h. */
#include "union.h"

#include <stdatomic.h>

#define GS_RELAXED memory_order_relaxed

static int64_t gs_max(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t gs_min(int64_t a, int64_t b) { return a < b ? a : b; }

/* The offset bounds over both windows: 1 if there are any. */
static int gs_union_bounds(const struct gs_union *u, int64_t *lo, int64_t *hi)
{
    if (u->windows == 0)
        return 0;
    *lo = u->windows > 1 ? gs_max(u->lo[0], u->lo[1]) : u->lo[0];
    *hi = u->windows > 1 ? gs_min(u->hi[0], u->hi[1]) : u->hi[0];
    return *lo <= *hi;
}

/* Narrow the offset bounds with a batch timed [ts, te), recorded after `recorded`, seen done at
 * `seen` (host clock). */
static void gs_union_clock(struct gs_union *u, int64_t ts, int64_t te, int64_t recorded,
                           int64_t seen)
{
    int64_t lo = recorded - ts, hi = seen - te;
    if (lo > hi) { /* not one clock (cannot be): know nothing */
        u->windows = 0;
        return;
    }
    if (u->windows > 0 && seen - u->window_ns < GS_UNION_WINDOW_NS &&
        gs_max(lo, u->lo[0]) <= gs_min(hi, u->hi[0])) {
        lo = gs_max(lo, u->lo[0]);
        hi = gs_min(hi, u->hi[0]);
    } else if (u->windows > 0 && seen - u->window_ns >= GS_UNION_WINDOW_NS) { /* a new window */
        u->lo[1] = u->lo[0];
        u->hi[1] = u->hi[0];
        u->windows = 2;
        u->window_ns = seen;
    } else { /* the first batch, or a contradiction: a new timeline (timing.h), start over */
        u->windows = 1;
        u->window_ns = seen;
    }
    u->lo[0] = lo;
    u->hi[0] = hi;
    if (u->windows == 2 && gs_max(lo, u->lo[1]) > gs_min(hi, u->hi[1]))
        u->windows = 1; /* the previous window's bounds no longer hold: drop them */
}

/* The log's spans numbered below `mine` that ended by `now`, as a set (host clock). */
static int gs_union_read(const struct gs_compute_device *dev, uint32_t mine, int64_t now,
                         struct gs_span *set)
{
    int n = 0;
    for (int i = 0; i < GS_COMPUTE_SPAN_LOG; i++) {
        const struct gs_compute_span *p = &dev->spans[i];
        uint32_t seq = atomic_load_explicit(&p->seq, memory_order_acquire);
        int64_t s = atomic_load_explicit(&p->start_ns, GS_RELAXED);
        int64_t len = atomic_load_explicit(&p->len_ns, GS_RELAXED);
        atomic_thread_fence(memory_order_acquire);
        if (seq == 0 || atomic_load_explicit(&p->seq, GS_RELAXED) != seq)
            continue; /* being written */
        uint32_t before = mine - seq; /* how many numbers earlier (mod 2^32) */
        if (before == 0 || before > 0x80000000u || s + len > now)
            continue; /* ours or later, or not of this clock */
        gs_spans_add(set, &n, s, s + len);
    }
    return n;
}

static void gs_union_write(struct gs_compute_device *dev, uint64_t number, int64_t s, int64_t e)
{
    uint32_t seq = (uint32_t)(number + 1);
    if (seq == 0 || e <= s)
        return;
    struct gs_compute_span *p = &dev->spans[number % GS_COMPUTE_SPAN_LOG];
    atomic_store_explicit(&p->seq, 0, GS_RELAXED);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&p->start_ns, s, GS_RELAXED);
    atomic_store_explicit(&p->len_ns, (uint32_t)gs_min(e - s, UINT32_MAX), GS_RELAXED);
    atomic_store_explicit(&p->seq, seq, memory_order_release);
}

/* What of the parts `gaps` (timeline) of batch [ts, te) the log's earlier spans surely cover;
 * `publish`: add the batch to the log. */
static int64_t gs_union_shared(struct gs_union *u, const struct gs_span *gaps, int n_gaps,
                               int64_t ts, int64_t te, int publish, int64_t now)
{
    int64_t lo, hi;
    if (!u->dev || !gs_union_bounds(u, &lo, &hi))
        return 0;
    uint64_t number = atomic_fetch_add_explicit(&u->dev->span_seq, 1, GS_RELAXED);
    struct gs_span set[GS_COMPUTE_SPAN_LOG];
    int n = gs_union_read(u->dev, (uint32_t)(number + 1), now, set);
    int64_t shared = 0;
    /* on the host clock a timeline instant t lies in [t + lo, t + hi]: what a part surely
     * covers is [s + hi, e + lo) */
    for (int i = 0; i < n_gaps && n > 0; i++)
        shared += gs_spans_covered(set, n, gaps[i].s + hi, gaps[i].e + lo);
    if (publish)
        gs_union_write(u->dev, number, ts + hi, te + lo);
    return shared;
}

int64_t gs_union_add(struct gs_union *u, struct gs_span *own, int *n_own, int64_t ts, int64_t te,
                     int64_t recorded, int64_t seen, int measured)
{
    gs_union_clock(u, ts, te, recorded, seen);
    struct gs_span gaps[GS_SPANS_MAX + 1];
    int n_gaps = gs_spans_gaps(own, *n_own, ts, te, gaps);
    int64_t fresh = gs_spans_add(own, n_own, ts, te);
    /* a batch corrected for other contexts' time slices (clean.h) took them out already, and
     * one that overlaps our own earlier spans may cover time such a batch took out: neither is
     * published, so none is taken out twice */
    if (!measured)
        return fresh;
    return fresh - gs_union_shared(u, gaps, n_gaps, ts, te, fresh == te - ts, seen);
}

/* Per-process GPU-time meter: batches of launches timed by event pairs. See meter.h. */
#include "meter.h"

#include <stdatomic.h>
#include <string.h>

#include "budget.h"

#define GS_RELAXED memory_order_relaxed

void gs_meter_init(struct gs_meter *m, const struct gs_meter_ops *ops, void *ctx,
                   struct gs_compute_device *dev, struct gs_compute_proc *proc, int pct)
{
    memset(m, 0, sizeof(*m));
    m->ops = ops;
    m->ctx = ctx;
    m->dev = dev;
    m->proc = proc;
    m->pct = pct;
    m->un.dev = dev;
}

static void gs_meter_release(struct gs_meter *m, struct gs_batch *b)
{
    if (b->start)
        m->ops->ev_release(m->ctx, b->start);
    if (b->end)
        m->ops->ev_release(m->ctx, b->end);
    b->start = b->end = NULL;
}

static void gs_meter_forget(struct gs_meter *m, struct gs_batch *b)
{
    m->inflight_ns -= b->est_ns;
    m->unknown -= (int)b->unknown;
    b->est_ns = 0;
    b->unknown = 0;
    gs_meter_release(m, b);
}

static int gs_meter_find(struct gs_meter *m, uintptr_t stream)
{
    for (int i = 0; i < m->n_open; i++)
        if (m->open[i].stream == stream)
            return i;
    return -1;
}

/* Move open batch i to the pending queue (or drop it if it cannot be measured). */
static void gs_meter_close(struct gs_meter *m, int i)
{
    struct gs_batch b = m->open[i];
    m->open[i] = m->open[--m->n_open];
    if (!b.end || b.launches[0] + b.launches[1] == 0 || m->n_pending == GS_METER_PENDING) {
        if (b.end && m->n_pending == GS_METER_PENDING)
            m->dropped++;
        gs_meter_forget(m, &b);
        return;
    }
    m->pending[m->n_pending++] = b;
}

static int64_t gs_meter_ema(int64_t est, int64_t sample)
{
    return est == 0 ? sample : (3 * est + sample) / 4;
}

/* A completed batch: debit the part of its span not already counted, learn its cost. */
static void gs_meter_account(struct gs_meter *m, struct gs_batch *b, int64_t now, int64_t seen)
{
    int64_t ts, te;
    if (m->ops->ev_time_ns(m->ctx, b->start, &ts) != 0 ||
        m->ops->ev_time_ns(m->ctx, b->end, &te) != 0 || te < ts) {
        m->dropped++;
        return;
    }
    m->batches++;
    uint32_t k = b->launches[0], g = b->launches[1], n = b->covered;
    int64_t span = te - ts, charge = span;
    int usable = 0;
    if (n > 0 && !b->covered_mixed && b->key != 0) { /* take other contexts' slices out */
        charge = gs_clean_charge(&m->clean, b->key, n, span, now);
        usable = m->clean.usable;
    }
    m->correctable += (usable ? 32 : 0) - m->correctable / 8; /* EMA, 256 = always */
    /* not charged again: what our other streams or the container's other processes on this GPU
     * were charged (union.h) */
    int64_t busy = gs_union_add(&m->un, m->spans, &m->n_spans, ts, te, b->opened_ns, seen,
                                charge == span) - (span - charge);
    if (busy < 0)
        busy = 0;
    busy += b->tail_ns;
    if (span > charge)
        atomic_fetch_add_explicit(&m->dev->corrected_ns, (uint64_t)(span - charge), GS_RELAXED);
    if (n > 0 && g == 0)
        m->est_ns[GS_LAUNCH_KERNEL] = gs_meter_ema(m->est_ns[0], charge / n);
    else if (n > 0 && k == 0)
        m->est_ns[GS_LAUNCH_GRAPH] = gs_meter_ema(m->est_ns[1], charge / n);
    m->busy_total += (uint64_t)busy;
    if (m->on_batch)
        m->on_batch(m, b, span, charge, busy, now);
    gs_budget_debit(m->dev, m->pct, now, busy, m->borrowing);
    atomic_fetch_add_explicit(&m->dev->busy_ns, (uint64_t)busy, GS_RELAXED);
    if (m->borrowing)
        atomic_fetch_add_explicit(&m->dev->borrowed_ns, (uint64_t)busy, GS_RELAXED);
    if (m->proc)
        atomic_fetch_add_explicit(&m->proc->busy_ns, (uint64_t)busy, GS_RELAXED);
}

/* Re-record batch b's end event after its tail (the launches after the last record) while its
 * stream still runs them: 1 done. */
static int gs_meter_cover_tail(struct gs_meter *m, struct gs_batch *b)
{
    if (b->tail_ns == 0 || !b->end || !m->ops->stream_busy ||
        m->ops->stream_busy(m->ctx, b->stream) != 1)
        return 0;
    void *end = m->ops->ev_record(m->ctx, b->stream, b->end);
    if (!end)
        return 0;
    b->end = end;
    b->covered = b->launches[0] + b->launches[1];
    b->covered_mixed = b->mixed;
    b->tail_ns = 0;
    return 1;
}

void gs_meter_sync(struct gs_meter *m)
{
    for (int i = 0; i < m->n_open; i++)
        gs_meter_cover_tail(m, &m->open[i]);
}

/* Publish the work in flight in the region's slot and in the gang's, which is another one when
 * a gang file is used (crew.h). */
static void gs_meter_publish(struct gs_meter *m)
{
    if (m->proc)
        atomic_store_explicit(&m->proc->inflight_ns, m->inflight_ns, GS_RELAXED);
    if (m->gang.self && m->gang.self != m->proc)
        atomic_store_explicit(&m->gang.self->inflight_ns, m->inflight_ns, GS_RELAXED);
}

void gs_meter_poll(struct gs_meter *m, int64_t now)
{
    for (int i = m->n_open - 1; i >= 0; i--) { /* streams that went idle: close now */
        struct gs_batch *b = &m->open[i];
        if (b->end && now - b->last_ns >= GS_METER_IDLE_PROBE_NS &&
            m->ops->ev_done(m->ctx, b->end) != 0 && !gs_meter_cover_tail(m, b))
            gs_meter_close(m, i); /* (a tail the stream still runs is measured first) */
    }
    for (int i = 0; i < m->n_pending;) {
        struct gs_batch *b = &m->pending[i];
        int done = m->ops->ev_done(m->ctx, b->end);
        if (done == 0) {
            i++;
            continue;
        }
        if (done > 0) /* seen done: on the host clock no later than now (union.h) */
            gs_meter_account(m, b, now, m->clock ? m->clock() : now);
        else
            m->dropped++;
        gs_meter_forget(m, b);
        m->pending[i] = m->pending[--m->n_pending];
    }
    gs_meter_publish(m);
}

/* 1 if this process charged more than its peers' average in the current fairness window. */
static int gs_meter_ahead(struct gs_meter *m, int64_t now)
{
    if (m->peers == 0)
        return 0;
    if (now - m->fair_start >= GS_METER_FAIR_NS || m->peers_busy_ns < m->fair_peers0) {
        m->fair_start = now; /* new window (or a peer left: its total dropped out of the sum) */
        m->fair_mine0 = m->busy_total;
        m->fair_peers0 = m->peers_busy_ns;
    }
    return (m->busy_total - m->fair_mine0) * (uint64_t)m->peers > m->peers_busy_ns - m->fair_peers0;
}

/* GPU work this process owes the bucket before it may launch: its own in flight, and the work
 * its container's other processes on this device have in flight (the bucket is the
 * container's). Any tenant can write the board, so a "peer" counts for at most half the bucket:
 * a forged slot shrinks our burst, never our rate, and never blocks us. */
static int64_t gs_meter_owed(const struct gs_meter *m)
{
    int64_t peers = m->peers_inflight_ns, most = GS_BUDGET_WINDOW_NS * m->pct / 100 / 2;
    return m->inflight_ns + (peers < most ? peers : most);
}

int64_t gs_meter_debt_ns(struct gs_meter *m, int64_t now)
{
    int64_t own = gs_budget_wait_ns(m->dev, m->pct, now, gs_meter_owed(m));
    int64_t gang = gs_gang_wait_ns(&m->gang, now);
    return own > gang ? own : gang;
}

/* The wake-up quantum of a process held back alone (see meter.h). */
static int64_t gs_meter_quantum(struct gs_meter *m, int64_t now)
{
    int shared = m->clean.others && m->correctable >= 192;
    int64_t quantum = GS_BUDGET_WINDOW_NS * m->pct / 100 / (shared ? 2 : 5);
    int64_t qmax = shared ? GS_METER_QUANTUM_SHARED_NS : GS_METER_QUANTUM_NS;
    if (quantum > qmax)
        quantum = qmax;
    if (gs_meter_ahead(m, now))
        quantum *= 2;
    return quantum;
}

/* The container's other processes are active: stop and go with them (gang.h). -1: none is. */
static int64_t gs_meter_gang(struct gs_meter *m, int64_t now, int64_t inflight, int64_t wait)
{
    int64_t release = now;
    if (wait > 0) {
        int64_t quantum = GS_BUDGET_WINDOW_NS * m->pct / 100 / 2;
        if (quantum > GS_GANG_QUANTUM_NS)
            quantum = GS_GANG_QUANTUM_NS;
        release = now + gs_budget_wait_ns(m->dev, m->pct, now, inflight + quantum);
    }
    int drained = m->n_open == 0 && m->n_pending == 0;
    int64_t w = gs_gang_admit(&m->gang, now, wait, release, drained);
    m->gang_flags = (w >= 0) | m->gang.stopped << 1;
    return w;
}

/* Hold `ns` for the reason `why` (gs_meter.hold_why). */
static int64_t gs_meter_hold(struct gs_meter *m, char why, int64_t ns)
{
    m->hold_why = why;
    return ns;
}

int64_t gs_meter_admit(struct gs_meter *m, int64_t now)
{
    gs_meter_poll(m, now);
    if (m->n_pending >= GS_METER_PENDING_MAX || m->unknown > 0) /* GPU far behind, or cost */
        return gs_meter_hold(m, 'm', GS_METER_POLL_NS);        /* still unknown: measure */
    if (m->borrowing)
        return gs_meter_hold(m, 'l', m->inflight_ns > GS_METER_BORROW_INFLIGHT_NS ?
                                         GS_METER_POLL_NS : 0);
    int64_t inflight = gs_meter_owed(m);
    int64_t wait = gs_budget_wait_ns(m->dev, m->pct, now, inflight);
    if (m->gang.on) {
        int64_t w = gs_meter_gang(m, now, inflight, wait);
        if (w >= 0)
            return gs_meter_hold(m, m->gang.why, w);
    }
    m->hold_why = 'b';
    if (wait > 0) /* held back: sleep until a quantum more has accrued (re-planned each call) */
        m->held_until = now + gs_budget_wait_ns(m->dev, m->pct, now,
                                                inflight + gs_meter_quantum(m, now));
    return now < m->held_until ? m->held_until - now : 0;
}

static int gs_meter_full(const struct gs_batch *b, int64_t now)
{
    return b->unknown > 0 || b->est_ns >= GS_METER_BATCH_GPU_NS ||
           b->launches[0] + b->launches[1] >= GS_METER_BATCH_LAUNCHES ||
           now - b->opened_ns >= GS_METER_BATCH_AGE_NS;
}

void gs_meter_before(struct gs_meter *m, uintptr_t stream, int64_t now)
{
    int i = gs_meter_find(m, stream);
    if (i >= 0 && gs_meter_full(&m->open[i], now)) {
        struct gs_batch *b = &m->open[i];
        if (b->tail_ns > 0 && now - b->last_ns < GS_METER_IDLE_PROBE_NS) {
            /* launches are back to back, the stream is still busy: mark the end here */
            void *end = m->ops->ev_record(m->ctx, stream, b->end);
            if (end) {
                b->end = end;
                b->covered = b->launches[0] + b->launches[1];
                b->covered_mixed = b->mixed;
                b->tail_ns = 0;
            }
        }
        gs_meter_close(m, i), i = -1;
    }
    if (i >= 0)
        return;
    if (m->n_open == GS_METER_STREAMS) { /* evict the stream launched on least recently */
        int old = 0;
        for (int j = 1; j < m->n_open; j++)
            if (m->open[j].last_ns < m->open[old].last_ns)
                old = j;
        gs_meter_close(m, old);
    }
    void *start = m->ops->ev_record(m->ctx, stream, NULL);
    if (!start) {
        m->dropped++;
        return;
    }
    m->open[m->n_open++] = (struct gs_batch){
        .stream = stream, .start = start, .opened_ns = now, .last_ns = now};
}

void gs_meter_after(struct gs_meter *m, uintptr_t stream, enum gs_launch_kind kind, int64_t now)
{
    gs_meter_after_key(m, stream, kind, 0, now);
}

void gs_meter_after_key(struct gs_meter *m, uintptr_t stream, enum gs_launch_kind kind,
                        uint64_t key, int64_t now)
{
    atomic_fetch_add_explicit(&m->dev->launches, 1, GS_RELAXED);
    atomic_store_explicit(&m->dev->last_demand_ns, (uint64_t)now, GS_RELAXED);
    if (m->proc) {
        atomic_fetch_add_explicit(&m->proc->launches, 1, GS_RELAXED);
        atomic_store_explicit(&m->proc->last_launch_ns, (uint64_t)now, GS_RELAXED);
    }
    if (m->gang.self && m->gang.self != m->proc) /* a gang file's slot (crew.h) */
        atomic_store_explicit(&m->gang.self->last_launch_ns, (uint64_t)now, GS_RELAXED);
    int i = gs_meter_find(m, stream);
    if (i < 0)
        return; /* could not open a batch: this launch goes unmeasured (fail open) */
    struct gs_batch *b = &m->open[i];
    int64_t est = m->est_ns[kind];
    int first = b->launches[0] + b->launches[1] == 0;
    int sparse = !first && now - b->last_ns >= GS_METER_IDLE_PROBE_NS;
    if (first)
        b->key = key;
    else if (key != b->key || key == 0)
        b->mixed = 1;
    b->launches[kind]++;
    if (!b->end || est == 0 || sparse || b->tail_ns + est >= GS_METER_EVENT_NS) {
        void *end = m->ops->ev_record(m->ctx, stream, b->end); /* re-record: marks this launch */
        if (!end) {
            m->dropped++;
            gs_meter_forget(m, b);
            m->open[i] = m->open[--m->n_open];
            return;
        }
        b->end = end;
        b->covered = b->launches[0] + b->launches[1];
        b->covered_mixed = b->mixed;
        b->tail_ns = 0;
    } else {
        b->tail_ns += est;
    }
    b->last_ns = now;
    if (est == 0) {
        b->unknown++;
        m->unknown++;
    } else {
        b->est_ns += est;
        m->inflight_ns += est;
    }
    if (m->gang.on) /* the gang reads it: is this queue done, or waiting? (gang.h) */
        gs_meter_publish(m);
}

void gs_meter_note_wait(struct gs_meter *m, int64_t ns)
{
    atomic_fetch_add_explicit(&m->dev->throttle_ns, (uint64_t)ns, GS_RELAXED);
    atomic_fetch_add_explicit(&m->dev->throttled, 1, GS_RELAXED);
    if (m->proc) {
        atomic_fetch_add_explicit(&m->proc->throttle_ns, (uint64_t)ns, GS_RELAXED);
        atomic_fetch_add_explicit(&m->proc->throttled, 1, GS_RELAXED);
    }
}

static void gs_meter_max(_Atomic uint64_t *at, uint64_t v)
{
    uint64_t cur = atomic_load_explicit(at, GS_RELAXED);
    while (cur < v && !atomic_compare_exchange_weak_explicit(at, &cur, v, GS_RELAXED, GS_RELAXED))
        ;
}

void gs_meter_note_hold(struct gs_meter *m, int64_t ns, int64_t over)
{
    gs_meter_note_wait(m, ns);
    if (!m->proc)
        return;
    gs_meter_max(&m->proc->hold_max_ns, (uint64_t)ns);
    int64_t cur = atomic_load_explicit(&m->proc->hold_over_debt_ns, GS_RELAXED);
    while (cur < over && !atomic_compare_exchange_weak_explicit(&m->proc->hold_over_debt_ns, &cur,
                                                                over, GS_RELAXED, GS_RELAXED))
        ;
}

void gs_meter_set_others(struct gs_meter *m, struct gs_meter_others others)
{
    /* another context with work (another tenant, or a process of this one) slices the GPU */
    gs_clean_others(&m->clean, others.high || others.low || others.peers,
                    others.busy_ns + others.peers_busy_ns);
    m->peers_inflight_ns = others.peers_inflight_ns;
    m->peers = others.peers;
    m->peers_busy_ns = others.peers_busy_ns;
    int b = gs_budget_may_borrow(m->work_conserving, m->priority, others.high, others.low);
    if (b != m->borrowing) {
        m->borrowing = b;
        atomic_store_explicit(&m->dev->borrowing, (uint32_t)b, GS_RELAXED);
    }
}

void gs_meter_drop_all(struct gs_meter *m)
{
    for (int i = 0; i < m->n_open; i++)
        gs_meter_forget(m, &m->open[i]);
    for (int i = 0; i < m->n_pending; i++)
        gs_meter_forget(m, &m->pending[i]);
    m->n_open = m->n_pending = 0;
}

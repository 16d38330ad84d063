/* Launching in phase across one container's devices. See phase.h for the contract. */
#include "phase.h"

#include <stdatomic.h>

#include "budget.h"

void gs_phase_self(struct gs_phase *p, int entry)
{
    p->self = entry;
}

void gs_phase_add(struct gs_phase *p, struct gs_compute_device *other, int entry)
{
    if (other && p->n < GS_PHASE_DEVICES && entry >= 0 && entry < GS_PHASE_DEVICES) {
        p->idx[p->n] = entry;
        p->others[p->n++] = other;
    }
}

void gs_phase_publish(struct gs_compute_device *d, int64_t until)
{
    /* a plain store: the latest plan of the latest process held here (a process re-plans at
     * every check, so the word follows it; a stale future value lapses within one hold) */
    atomic_store_explicit(&d->held_until_ns, (uint64_t)until, memory_order_relaxed);
}

void gs_phase_mine(struct gs_phase *p, const struct gs_compute_device *d)
{
    for (int i = 0; i < p->n; i++)
        if (p->others[i] == d)
            atomic_fetch_or_explicit(&p->mine, 1u << i, memory_order_relaxed);
}

static int64_t gs_phase_load(const _Atomic uint64_t *at)
{
    return (int64_t)atomic_load_explicit(at, memory_order_relaxed);
}

/* Within `span` before now (a stamp in the future is another clock's: no). */
static int gs_phase_recent(int64_t stamp, int64_t span, int64_t now)
{
    return stamp > now - span && stamp <= now;
}

/* A device whose processes launched recently, or one of them is held back now. */
static int gs_phase_active(const struct gs_compute_device *o, int64_t now)
{
    int64_t held = gs_phase_load(&o->held_until_ns);
    return gs_phase_recent(gs_phase_load(&o->last_demand_ns), GS_PHASE_ACTIVE_NS, now) ||
           (held > now && held <= now + GS_BUDGET_HORIZON_NS);
}

/* Peer i is a partner: another process's active device that reaches its step boundaries
 * together with ours. */
static int gs_phase_peer(const struct gs_phase *p, const struct gs_compute_device *d, int i,
                         int64_t now)
{
    return !(atomic_load_explicit(&p->mine, memory_order_relaxed) & (1u << i)) &&
           gs_phase_active(p->others[i], now) &&
           gs_phase_load(&d->partner[p->idx[i]]) >= GS_PHASE_PARTNER;
}

int gs_phase_coupled(const struct gs_phase *p, const struct gs_compute_device *d, int64_t now)
{
    for (int i = 0; i < p->n; i++)
        if (gs_phase_peer(p, d, i, now))
            return 1;
    return 0;
}

static void gs_phase_score(struct gs_phase *p, struct gs_compute_device *d, int i, uint64_t v)
{
    atomic_store_explicit(&d->partner[p->idx[i]], v, memory_order_relaxed);
    if (p->self >= 0 && p->self < GS_PHASE_DEVICES)
        atomic_store_explicit(&p->others[i]->partner[p->self], v, memory_order_relaxed);
}

void gs_phase_mark_boundary(struct gs_compute_device *d, int64_t now)
{
    atomic_store_explicit(&d->boundary_launches,
                          atomic_load_explicit(&d->launches, memory_order_relaxed),
                          memory_order_relaxed);
    atomic_store_explicit(&d->idle_check_ns, (uint64_t)now, memory_order_relaxed);
}

void gs_phase_judge(struct gs_phase *p, struct gs_compute_device *d, int64_t now)
{
    int64_t prev = gs_phase_load(&d->idle_check_ns);
    for (int i = 0; i < p->n; i++) {
        struct gs_compute_device *o = p->others[i];
        if (atomic_load_explicit(&p->mine, memory_order_relaxed) & (1u << i) ||
            !gs_phase_active(o, now))
            continue;
        int64_t theirs = gs_phase_load(&o->idle_check_ns);
        uint64_t score = (uint64_t)gs_phase_load(&d->partner[p->idx[i]]);
        if (theirs > now - GS_PHASE_TOGETHER_NS && theirs <= now)
            gs_phase_score(p, d, i, score < 6 ? score + 2 : 8); /* together: we came second */
        else if (theirs > prev + GS_PHASE_TOGETHER_NS || theirs < prev - GS_PHASE_TOGETHER_NS)
            gs_phase_score(p, d, i, score > 0 ? score - 1 : 0); /* theirs apart, or none */
        /* else their last one was with our previous one: they may come now; they judge */
    }
}

static uint64_t gs_phase_in_step(const struct gs_compute_device *d)
{
    return atomic_load_explicit(&d->launches, memory_order_relaxed) -
           atomic_load_explicit(&d->boundary_launches, memory_order_relaxed);
}

int gs_phase_behind(const struct gs_phase *p, const struct gs_compute_device *d, int64_t now)
{
    uint64_t mine = gs_phase_in_step(d);
    for (int i = 0; i < p->n; i++)
        if (gs_phase_peer(p, d, i, now) && gs_phase_in_step(p->others[i]) > mine)
            return 1;
    return 0;
}

int gs_phase_peers_at_boundary(const struct gs_phase *p, const struct gs_compute_device *d,
                               int64_t since, int64_t now)
{
    for (int i = 0; i < p->n; i++)
        if (gs_phase_peer(p, d, i, now) && gs_phase_load(&p->others[i]->idle_check_ns) < since)
            return 0;
    return 1;
}

int64_t gs_phase_follow_ns(const struct gs_phase *p, const struct gs_compute_device *d,
                           int64_t now)
{
    int64_t wait = 0;
    for (int i = 0; i < p->n; i++) {
        if (!gs_phase_peer(p, d, i, now))
            continue;
        int64_t until =
            (int64_t)atomic_load_explicit(&p->others[i]->held_until_ns, memory_order_relaxed);
        int64_t w = until - now;
        if (w > wait && w <= GS_BUDGET_HORIZON_NS) /* beyond it: another clock's time */
            wait = w;
    }
    return wait;
}

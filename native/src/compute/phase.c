/* Launching in phase across one container's devices. See phase.h for the contract. */
#include "phase.h"

#include <stdatomic.h>

#include "budget.h"

void gs_phase_add(struct gs_phase *p, struct gs_compute_device *other)
{
    if (other && p->n < GS_PHASE_DEVICES)
        p->others[p->n++] = other;
}

void gs_phase_publish(struct gs_compute_device *d, int64_t until)
{
    /* a plain store: the latest plan of the latest process held here (a process re-plans at
     * every check, so the word follows it; a stale future value lapses within one hold) */
    atomic_store_explicit(&d->held_until_ns, (uint64_t)until, memory_order_relaxed);
}

int64_t gs_phase_follow_ns(const struct gs_phase *p, int64_t now)
{
    int64_t wait = 0;
    for (int i = 0; i < p->n; i++) {
        int64_t until =
            (int64_t)atomic_load_explicit(&p->others[i]->held_until_ns, memory_order_relaxed);
        int64_t w = until - now;
        if (w > wait && w <= GS_BUDGET_HORIZON_NS) /* beyond it: another clock's time */
            wait = w;
    }
    return wait;
}

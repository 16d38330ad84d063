/* GCRA token bucket on the shared compute block. See budget.h for the contract. */
#include "budget.h"

#include <stdatomic.h>

/* The stored tat as this clock may use it: one no debit could have written (beyond the
 * horizon) is another clock's, read as "bucket full". */
static int64_t gs_budget_tat(uint64_t tat, int64_t now)
{
    return (int64_t)tat > now + GS_BUDGET_HORIZON_NS ? 0 : (int64_t)tat;
}

static int64_t gs_budget_base(uint64_t tat, int64_t now)
{
    int64_t floor = now - GS_BUDGET_WINDOW_NS, t = gs_budget_tat(tat, now);
    return t > floor ? t : floor;
}

int64_t gs_budget_wait_ns(struct gs_compute_device *d, int pct, int64_t now, int64_t inflight_ns)
{
    int64_t base = gs_budget_base(atomic_load_explicit(&d->tat_ns, memory_order_acquire), now);
    int64_t ready = base + gs_budget_wall_cost(inflight_ns > 0 ? inflight_ns : 0, pct);
    return ready > now ? ready - now : 0;
}

void gs_budget_debit(struct gs_compute_device *d, int pct, int64_t now, int64_t busy_ns,
                     int borrowing)
{
    if (busy_ns <= 0)
        return;
    int64_t cost = gs_budget_wall_cost(busy_ns, pct);
    uint64_t old = atomic_load_explicit(&d->tat_ns, memory_order_acquire);
    for (;;) {
        int64_t next = gs_budget_base(old, now) + cost;
        if (next > now + GS_BUDGET_MAX_STALL_NS)
            next = now + GS_BUDGET_MAX_STALL_NS;
        if (borrowing && next > now)
            next = now;
        if (gs_budget_tat(old, now) >= next && borrowing)
            return; /* another process already moved it further; never move it back */
        if (atomic_compare_exchange_weak_explicit(&d->tat_ns, &old, (uint64_t)next,
                                                  memory_order_acq_rel, memory_order_acquire))
            return;
    }
}

int64_t gs_budget_tokens_ns(struct gs_compute_device *d, int pct, int64_t now)
{
    int64_t base = gs_budget_base(atomic_load_explicit(&d->tat_ns, memory_order_acquire), now);
    return (now - base) * pct / 100;
}

int gs_budget_may_borrow(int work_conserving, int priority, int others_high, int others_low)
{
    if (!work_conserving)
        return 0;
    if (others_high)
        return 0; /* a high-priority tenant with work: everybody yields to it */
    if (priority != 0 && others_low)
        return 0; /* low priority also yields to its peers; high priority keeps borrowing */
    return 1;
}

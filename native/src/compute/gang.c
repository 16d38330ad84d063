/* Gang holds of one container's processes. See gang.h for the contract. */
#include "gang.h"

#include <stdatomic.h>

#include "budget.h"

/* What the other processes of the gang are doing. */
struct gs_gang_view {
    int active;      /* processes in the gang, this one aside */
    int new_stop;    /* one stopped after our last release */
    int draining;    /* a stopped one's queue still runs */
    int pending;     /* ... and still ran after our queue drained: it may wait for a launch of
                      * ours */
    int queued;      /* a running one launches no more but has work queued: it may too */
    int overdue;     /* ... past its estimate: it most likely waits (in a sync, on a peer) */
    int late;        /* a pending one's queue is past its estimate: it waits on us */
    int busy;        /* one still launches: it will see a stop at its next launch */
    int64_t release; /* the latest release a stopped one published */
};

/* Within `span` before now (a stamp in the future is another clock's: no). */
static int gs_gang_recent(int64_t stamp, int64_t span, int64_t now)
{
    return stamp > now - span && stamp <= now;
}

static struct gs_gang_view gs_gang_scan(const struct gs_gang *g, int64_t now)
{
    struct gs_gang_view v = {0};
    int n = g->self ? g->count(g->ctx) : 0;
    for (int i = 0; i < n; i++) {
        struct gs_compute_proc *p = g->at(g->ctx, i);
        if (!p || p == g->self)
            continue;
        int64_t stop = GS_LOAD(p->gang_stop_ns), beat = GS_LOAD(p->gang_beat_ns);
        int64_t last = GS_LOAD(p->last_launch_ns), checked = beat & ~1LL;
        int64_t inflight = GS_LOAD(p->inflight_ns);
        int stopped = stop > 0 && gs_gang_recent(checked, GS_GANG_BEAT_NS, now);
        /* one that waits in a sync for work it queued long ago is still in the gang: its kernel
         * may spin until our next launch */
        if (!stopped && !gs_gang_recent(last, GS_GANG_ACTIVE_NS, now) &&
            !(inflight > 0 && gs_gang_recent(last, GS_BUDGET_HORIZON_NS, now)))
            continue; /* gone, or idle for long */
        v.active++;
        if (stopped) {
            v.new_stop |= stop > g->gen_ns;
            int64_t release = GS_LOAD(p->gang_release_ns);
            if (release > v.release && release <= now + GS_BUDGET_HORIZON_NS)
                v.release = release;
            v.draining |= !(beat & 1);
            /* pending: its queue still ran at a check after ours drained, or it checks no
             * more (it waits in a sync) while what it queued is not done: a sync returns
             * with its in-flight work published as done (launch.c); late: and past its
             * estimate (at most GS_GANG_LATE_NS) since ours drained or it last launched */
            int pending = !(beat & 1) && g->drained_ns &&
                          (checked >= g->drained_ns ||
                           (inflight > 0 && now - checked > GS_GANG_IDLE_NS));
            int64_t from = last > g->drained_ns ? last : g->drained_ns;
            int64_t expect = inflight < GS_GANG_LATE_NS ? inflight : GS_GANG_LATE_NS;
            v.pending |= pending;
            v.late |= pending && now - from > expect + GS_GANG_OVERDUE_NS;
        } else if (now - last < GS_GANG_IDLE_NS) {
            v.busy = 1;
        } else if (inflight > 0 && now - last > inflight + GS_GANG_OVERDUE_NS) {
            v.overdue = 1;
        } else {
            v.queued |= inflight > 0;
        }
    }
    return v;
}

/* Wait `ns`, for the reason `why` (gs_gang.why). */
static int64_t gs_gang_wait(struct gs_gang *g, char why, int64_t ns)
{
    g->why = why;
    return ns;
}

/* The stop ends: go, and stops begun before now were this one's. */
static int64_t gs_gang_go(struct gs_gang *g, int64_t now)
{
    g->stopped = 0;
    g->gen_ns = now;
    g->release_ns = 0;
    GS_STORE(g->self->gang_stop_ns, 0);
    return 0;
}

int64_t gs_gang_wait_ns(const struct gs_gang *g, int64_t now)
{
    return g->stopped && g->release_ns > now ? g->release_ns - now : 0;
}

int64_t gs_gang_admit(struct gs_gang *g, int64_t now, int64_t own_wait, int64_t own_release,
                      int drained)
{
    if (!g->on || !g->self)
        return -1;
    if (!drained)
        g->drained_ns = 0;
    else if (!g->drained_ns)
        g->drained_ns = now; /* first seen drained since our latest launch */
    struct gs_gang_view v = gs_gang_scan(g, now);
    if (!g->stopped) {
        if (v.active == 0)
            return -1;
        if (own_wait == 0 && !v.new_stop)
            return 0;
        g->stopped = 1;
        g->stop_ns = now;
        g->catchup = 0;
        g->own_release_ns = own_release;
        GS_STORE(g->self->gang_stop_ns, now);
    } else if (own_release > g->own_release_ns) {
        g->own_release_ns = own_release; /* catch-up launches added debt */
    }
    own_release = g->own_release_ns; /* a whole quantum, even once the debt itself is paid */
    GS_STORE(g->self->gang_release_ns, own_release);
    GS_STORE(g->self->gang_beat_ns, (now & ~1LL) | (drained != 0));
    int64_t release = own_release > v.release ? own_release : v.release;
    g->release_ns = release;
    /* Every debt of the stop is paid (and a whole quantum more) while queues still drain: no
     * hold is left to place, so waiting for them would only hold us past what anyone owes (an
     * all-reduce timing loop queues 11 ms in 0.4 ms of CPU). One still launching may yet stop
     * with a debt: it gets GS_GANG_SETTLE_NS, as below. */
    if (release <= now && !(v.busy && now - g->stop_ns < GS_GANG_SETTLE_NS))
        return gs_gang_go(g, now);
    if (!drained) /* our queue first (it may wait for someone who catches up) */
        return gs_gang_wait(g, 'q', GS_GANG_POLL_NS);
    /* Catch up: our queue is empty, another's still ran after that: it may wait for a launch of
     * ours (a collective we have not reached). One launch, then drain and look again, so we
     * never run past what it waits for. A running process's queued work is a weaker sign: it
     * may just be computing (a shorter overdraft). */
    int room = own_wait < GS_GANG_OVERDRAFT_NS && g->catchup < GS_GANG_CATCHUP;
    /* Past that, a hold while a stopped queue waits on us would leave it spinning for the whole
     * hold, charged (its debt then holds us as long: the cascade of holds without gang). So,
     * up to a hard bound, we still catch up for a queue past its estimate, and wait briefly
     * for a draining one to become that or to drain: the stop ends where nobody waits on us. */
    int grace = !room && own_wait < GS_GANG_OVERDRAFT_NS + GS_GANG_GRACE_NS &&
                g->catchup < GS_GANG_CATCHUP + GS_GANG_GRACE;
    if ((room && (v.pending || v.overdue || (v.queued && own_wait < GS_GANG_GUESS_NS))) ||
        (grace && v.late)) {
        g->catchup++;
        g->drained_ns = 0;
        /* our queue is empty no more: a peer that sees no check of ours after this (we may
         * wait in a sync next) must not take us for drained */
        GS_STORE(g->self->gang_beat_ns, now & ~1LL);
        return 0;
    }
    /* hold only once every stopped queue is empty: a hold while one still runs could leave it
     * spinning. Past the overdraft and the grace we cannot catch up for it, so it gets
     * GS_GANG_SETTLE_NS like the ones still launching, then we hold (it spins, charged: the
     * behaviour without gang) */
    if ((v.draining && (room || (grace && now - g->drained_ns <
                                          GS_GANG_LATE_NS + GS_GANG_OVERDUE_NS))) ||
        ((v.draining || v.busy || v.queued || v.overdue) && now - g->stop_ns < GS_GANG_SETTLE_NS))
        return gs_gang_wait(g, 'o', GS_GANG_POLL_NS);
    return gs_gang_wait(g, 'r', release - now);
}

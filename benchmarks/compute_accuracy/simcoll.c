/* Ranks of one job on separate fake GPUs, driving the REAL compute controller (meter.c,
 * budget.c, gang.c, compiled in unchanged) on a virtual clock: the collective case of issue 21.
 * Owns: one GPU per rank (one stream: kernels, events, collectives in launch order), a
 * collective model (the kernel of collective k starts spinning when it reaches its GPU and ends
 * `coll_ns` after the LAST rank's kernel k reached its GPU: the spin occupies the GPU and is
 * what events measure, as NCCL's kernels or a kernel polling a peer's flag through IPC do), the
 * ranks' step loop (`kernels` compute kernels, one collective, a full sync, CPU time), and the
 * results (steps, hold statistics as launch.c records them, spin, measured share).
 * `phase` 0 leaves each meter's gang off (the controller before issue 21), 1 gives it the other
 * ranks' process slots (one container's region: gang holds, gang.h). Does not: decide anything the library decides;
 * it calls gs_meter_admit/before/after_key and sleeps what admit says, like launch.c.
 * Loaded with ctypes by benchmarks/compute_accuracy/sim.py (run_collective). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "budget.h"
#include "meter.h"

#define SC_RANKS 8
#define SC_Q 4096
#define SC_EVENTS 256
#define SC_STEPS 32768
#define SC_INF INT64_MAX
#define SC_MAX_WAIT_NS GS_BUDGET_HORIZON_NS /* launch.c: fail open after this */

struct gs_coll_cfg {
    int64_t ranks, limit_pct, phase, duration_ns, warmup_ns;
    int64_t kernels, kernel_ns, coll_ns; /* per step: kernels of kernel_ns, `colls` collectives */
    int64_t colls, coll_first;           /* back-to-back collectives; 1: they open the step */
    int64_t barrier_first;               /* 1: a rank's first step is one collective and a sync
                                          * (dist.barrier() after init, DDP's broadcast) */
    int64_t launch_ns, step_cpu_ns;      /* CPU per launch; after each step's sync */
    int64_t min_sleep_ns, max_sleep_ns;
    int64_t start_ns[SC_RANKS];          /* when each rank starts (skew) */
    int64_t kernel_scale_pct[SC_RANKS];  /* a rank's kernels take this % of kernel_ns (0 = 100) */
    int64_t cpu_skew_ns[SC_RANKS];       /* a rank's extra CPU time after each sync */
    int64_t launch_extra_ns[SC_RANKS];   /* a rank's extra CPU time per launch (a slower CPU) */
};

struct gs_coll_result {
    int64_t steps, step_p50_ns, step_max_ns, step_mean_ns;
    int64_t hold_max_ns, over_debt_max_ns, throttle_ns;
    int64_t measured_ns;  /* GPU ns the meter charged within [warmup, duration) */
    int64_t spin_ns;      /* time collectives waited for another rank, after warmup */
    int64_t busy_ns;      /* time the GPU had work at its head, after warmup */
};

struct sc_event { uint32_t gen; int done, used; int64_t ts; };

enum { SC_KERNEL, SC_EVENT, SC_COLL };

struct sc_item {
    int type;
    int64_t work, pushed;  /* kernel ns; when it was launched */
    int64_t seq;           /* collective number */
    struct sc_event *ev;
    uint32_t gen;
};

struct sc_rank {
    struct sc_item q[SC_Q];
    int head, len;
    int64_t head_start;    /* when the head item reached the GPU */
    struct sc_event ev[SC_EVENTS];
    struct gs_meter meter;
    struct gs_compute_proc block;
    int64_t next, wait_acc, due, step_start, launched_in_step, colls_launched;
    int in_sync;
    int n_steps;
    int64_t steps[SC_STEPS];
    uint64_t measured0;    /* busy_ns at warmup */
};

struct sc {
    struct gs_coll_cfg c;
    struct gs_coll_result *out;
    struct sc_rank r[SC_RANKS];
    struct gs_compute_device dev[SC_RANKS];
    /* when collective `seq` reached each rank's GPU (a ring: ranks are never 64 apart) */
    int64_t arrived[SC_RANKS][64], arrived_seq[SC_RANKS][64];
    int64_t now;
};

static struct sc *g_sc; /* the simulation being run (the event ops reach the clock through it) */

static int sc_slots(void *ctx)
{
    return (int)((struct sc *)ctx)->c.ranks;
}

static struct gs_compute_proc *sc_slot(void *ctx, int i)
{
    return &((struct sc *)ctx)->r[i].block;
}

static struct sc_item *sc_push(struct sc_rank *r)
{
    return r->len < SC_Q ? &r->q[(r->head + r->len++) % SC_Q] : NULL;
}

static void sc_became_head(struct sc *S, struct sc_rank *r, int64_t at)
{
    struct sc_item *it = &r->q[r->head];
    r->head_start = at > it->pushed ? at : it->pushed;
    if (it->type == SC_COLL) {
        int i = (int)(r - S->r);
        S->arrived[i][it->seq % 64] = r->head_start;
        S->arrived_seq[i][it->seq % 64] = it->seq;
    }
}

static void *sc_ev_record(void *ctx, uintptr_t stream, void *evp)
{
    (void)stream;
    struct sc_rank *r = ctx;
    struct sc_event *ev = evp;
    if (!ev) {
        for (int i = 0; i < SC_EVENTS && !ev; i++)
            if (!r->ev[i].used)
                ev = &r->ev[i];
        if (!ev)
            return NULL;
        ev->used = 1;
    }
    struct sc_item *it = sc_push(r);
    if (!it)
        return NULL;
    ev->gen++;
    ev->done = 0;
    *it = (struct sc_item){.type = SC_EVENT, .pushed = g_sc->now, .ev = ev, .gen = ev->gen};
    if (r->len == 1)
        sc_became_head(g_sc, r, g_sc->now);
    return ev;
}

static int sc_ev_done(void *ctx, void *evp)
{
    (void)ctx;
    return ((struct sc_event *)evp)->done;
}

static int sc_ev_time(void *ctx, void *evp, int64_t *t)
{
    (void)ctx;
    struct sc_event *ev = evp;
    if (!ev->done)
        return -1;
    *t = ev->ts;
    return 0;
}

static void sc_ev_release(void *ctx, void *evp)
{
    (void)ctx;
    struct sc_event *ev = evp;
    ev->used = 0;
    ev->gen++;
}

static int sc_stream_busy(void *ctx, uintptr_t stream)
{
    (void)stream;
    return ((struct sc_rank *)ctx)->len > 0;
}

static const struct gs_meter_ops sc_ops = {sc_ev_record, sc_ev_done, sc_ev_time, sc_ev_release,
                                           sc_stream_busy};

/* When the head item of rank i completes (SC_INF: a collective still waiting for a rank). */
static int64_t sc_head_done(struct sc *S, int i)
{
    struct sc_rank *r = &S->r[i];
    if (!r->len)
        return SC_INF;
    struct sc_item *it = &r->q[r->head];
    if (it->type == SC_EVENT)
        return r->head_start;
    if (it->type == SC_KERNEL)
        return r->head_start + it->work;
    int64_t last = 0;
    for (int j = 0; j < (int)S->c.ranks; j++) {
        if (S->arrived_seq[j][it->seq % 64] != it->seq)
            return SC_INF; /* rank j's kernel of this collective has not reached its GPU */
        if (S->arrived[j][it->seq % 64] > last)
            last = S->arrived[j][it->seq % 64];
    }
    return last + S->c.coll_ns;
}

/* Complete every GPU item that ends by `t` (a collective's end may need another GPU's
 * progress: repeat until nothing changes). */
static void sc_settle(struct sc *S, int64_t t)
{
    for (int changed = 1; changed;) {
        changed = 0;
        for (int i = 0; i < (int)S->c.ranks; i++) {
            struct sc_rank *r = &S->r[i];
            int64_t done;
            while (r->len && (done = sc_head_done(S, i)) <= t) {
                struct sc_item *it = &r->q[r->head];
                int64_t lo = done > S->c.warmup_ns ? done : S->c.warmup_ns;
                int64_t from = r->head_start > S->c.warmup_ns ? r->head_start : S->c.warmup_ns;
                if (it->type != SC_EVENT && lo > from)
                    S->out[i].busy_ns += lo - from;
                if (it->type == SC_COLL) {
                    int64_t spin = done - S->c.coll_ns - r->head_start;
                    if (r->head_start >= S->c.warmup_ns && spin > 0)
                        S->out[i].spin_ns += spin;
                }
                if (it->type == SC_EVENT && it->ev->gen == it->gen) {
                    it->ev->done = 1;
                    it->ev->ts = done;
                }
                r->head = (r->head + 1) % SC_Q;
                r->len--;
                if (r->len)
                    sc_became_head(S, r, done);
                changed = 1;
            }
        }
    }
}

static void sc_rank_run(struct sc *S, int i)
{
    struct sc_rank *r = &S->r[i];
    struct gs_coll_cfg *c = &S->c;
    if (r->in_sync) {
        if (r->len) {
            r->next = SC_INF; /* woken when its GPU empties */
            return;
        }
        if (r->step_start >= c->warmup_ns && r->n_steps < SC_STEPS)
            r->steps[r->n_steps++] = S->now - r->step_start;
        r->in_sync = 0;
        if (c->limit_pct > 0 && r->meter.gang.on) /* launch.c's sync hook, after the wait */
            gs_meter_poll(&r->meter, S->now);
        r->launched_in_step = 0;
        r->next = S->now + c->step_cpu_ns + c->cpu_skew_ns[i];
        r->step_start = r->next;
        return;
    }
    int limited = c->limit_pct > 0;
    int64_t colls = c->colls > 0 ? c->colls : 1, k = r->launched_in_step, kernels = c->kernels;
    if (c->barrier_first && r->colls_launched == 0)
        colls = 1, kernels = 0; /* the barrier: one collective, then the sync */
    int coll = c->coll_first ? k < colls : k >= kernels;
    if (limited) {
        int64_t w = gs_meter_admit(&r->meter, S->now);
        if (w > 0 && r->wait_acc >= SC_MAX_WAIT_NS)
            w = 0; /* launch.c's fail-open */
        if (w > 0 || r->wait_acc > 0) { /* as launch.c: when what it owes is paid */
            int64_t owed = gs_meter_debt_ns(&r->meter, S->now);
            if (owed > 0 || r->wait_acc == 0)
                r->due = S->now + owed;
        }
        if (w > 0) {
            w = w < c->min_sleep_ns ? c->min_sleep_ns : w > c->max_sleep_ns ? c->max_sleep_ns : w;
            r->wait_acc += w;
            r->next = S->now + w;
            return;
        }
        if (r->wait_acc) {
            gs_meter_note_hold(&r->meter, r->wait_acc, S->now - r->due);
            r->wait_acc = 0;
        }
        gs_meter_before(&r->meter, 0, S->now);
    }
    struct sc_item *it = sc_push(r);
    if (!it) {
        r->next = S->now + c->launch_ns; /* queue full: retry */
        return;
    }
    int64_t scale = c->kernel_scale_pct[i] > 0 ? c->kernel_scale_pct[i] : 100;
    *it = (struct sc_item){.type = coll ? SC_COLL : SC_KERNEL, .pushed = S->now,
                           .work = c->kernel_ns * scale / 100, .seq = r->colls_launched};
    r->colls_launched += coll;
    if (r->len == 1)
        sc_became_head(S, r, S->now);
    if (limited)
        gs_meter_after_key(&r->meter, 0, GS_LAUNCH_KERNEL,
                           gs_clean_key((uint64_t)i + 1, coll ? 2 : 1, 0), S->now);
    r->launched_in_step++;
    r->next = S->now + c->launch_ns + c->launch_extra_ns[i];
    if (r->launched_in_step == kernels + colls) {
        r->in_sync = 1;
        if (limited) /* launch.c's sync hook: what the sync waits for is measured */
            gs_meter_sync(&r->meter);
    }
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int gs_coll_run(const struct gs_coll_cfg *cfg, struct gs_coll_result *out)
{
    if (cfg->ranks < 1 || cfg->ranks > SC_RANKS)
        return -1;
    struct sc *S = calloc(1, sizeof *S);
    if (!S)
        return -1;
    g_sc = S;
    S->c = *cfg;
    S->out = out;
    memset(out, 0, sizeof *out * (size_t)cfg->ranks);
    memset(S->arrived_seq, 0xff, sizeof S->arrived_seq); /* -1: none arrived */
    int n = (int)cfg->ranks;
    for (int i = 0; i < n; i++) {
        struct sc_rank *r = &S->r[i];
        r->next = r->step_start = cfg->start_ns[i];
        if (cfg->limit_pct > 0) {
            gs_meter_init(&r->meter, &sc_ops, r, &S->dev[i], &r->block, (int)cfg->limit_pct);
            r->meter.gang = (struct gs_gang){.self = &r->block, .count = sc_slots, .at = sc_slot,
                                             .ctx = S, .on = cfg->phase != 0};
        }
    }
    int warm = 0;
    for (;;) {
        int64_t t = SC_INF;
        for (int i = 0; i < n; i++) {
            if (S->r[i].next < t)
                t = S->r[i].next;
            int64_t d = sc_head_done(S, i);
            if (d < t)
                t = d;
        }
        if (t > cfg->duration_ns)
            t = cfg->duration_ns;
        if (!warm && t >= cfg->warmup_ns) {
            for (int i = 0; i < n; i++)
                S->r[i].measured0 = S->r[i].block.busy_ns;
            warm = 1;
        }
        S->now = t;
        sc_settle(S, t);
        if (t >= cfg->duration_ns)
            break;
        for (int i = 0; i < n; i++) {
            struct sc_rank *r = &S->r[i];
            if (r->in_sync && r->next == SC_INF && !r->len)
                r->next = S->now;
            if (r->next <= S->now)
                sc_rank_run(S, i);
        }
    }
    for (int i = 0; i < n; i++) {
        struct sc_rank *r = &S->r[i];
        struct gs_coll_result *o = &out[i];
        o->steps = r->n_steps;
        if (r->n_steps) {
            int64_t sum = 0;
            for (int k = 0; k < r->n_steps; k++)
                sum += r->steps[k];
            o->step_mean_ns = sum / r->n_steps;
            qsort(r->steps, (size_t)r->n_steps, sizeof(int64_t), cmp_i64);
            o->step_p50_ns = r->steps[r->n_steps / 2];
            o->step_max_ns = r->steps[r->n_steps - 1];
        }
        o->hold_max_ns = (int64_t)r->block.hold_max_ns;
        o->over_debt_max_ns = r->block.hold_over_debt_ns;
        o->throttle_ns = (int64_t)r->block.throttle_ns;
        o->measured_ns = (int64_t)(r->block.busy_ns - r->measured0);
    }
    g_sc = NULL;
    free(S);
    return 0;
}

int64_t gs_coll_sizes(int which)
{
    return which == 0 ? (int64_t)sizeof(struct gs_coll_cfg) : (int64_t)sizeof(struct gs_coll_result);
}

/* Fake GPU timeline + simulated processes driving the REAL compute controller
 * (native/src/compute/{budget,meter,board,clean,gang,spans,union}.c, compiled in unchanged) on a
 * virtual clock.
 * Owns: the GPU model (contexts time-sliced like a GPU without MPS: a context that gets work
 * waits for the end of the running context's current slice, a switch may cost GPU time;
 * streams of one context run concurrently, sharing the GPU equally; events complete when the
 * stream reaches them), launch keys (kernels of fixed or spread durations),
 * workload generators (kernels of a duration range, graph launches of k kernels, syncs,
 * CPU work), process start/kill, and the per-process results (work done, 100 ms bins,
 * step latencies). Does not: decide anything the library decides; it only calls
 * gs_meter_admit/before/after like launch.c does, and sleeps for what admit says.
 * Loaded with ctypes by benchmarks/compute_accuracy/sim.py (benchmark and tests). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "board.h"
#include "budget.h"
#include "meter.h"

#define SIM_PROCS 8
#define SIM_STREAMS 4
#define SIM_QCAP 1024
#define SIM_EVENTS 256
#define SIM_BINS 256
#define SIM_STEPS 8192
#define SIM_INF INT64_MAX

struct gs_sim_proc_cfg {
    int64_t limit_pct;          /* 0 = no limit: the controller is not called */
    int64_t tenant;             /* container index: processes of one tenant share a budget */
    int64_t kernel_min_ns, kernel_max_ns;
    int64_t kernels_per_launch; /* > 1: a graph launch of that many kernels */
    int64_t streams;            /* launches go round-robin over this many streams (1..4) */
    int64_t cpu_ns;             /* CPU time between launches (besides the launch cost) */
    int64_t sync_every;         /* launches per step; a step ends with a full sync (0 = never) */
    int64_t step_cpu_ns;        /* CPU time after each sync before the next step */
    int64_t start_ns, stop_ns;  /* lifetime; stop_ns > 0: SIGKILLed then (work dropped) */
    int64_t priority, work_conserving;
    int64_t keys;               /* distinct launch keys (round-robin); 0 = key unknown */
    int64_t key_fixed;          /* 1: each key has one duration from the range (+- jitter) */
    int64_t jitter_pct;         /* per-launch jitter of a fixed key's duration, percent */
    int64_t hide_keys;          /* 1: same launches, but the controller is told key 0 */
};

struct gs_sim_cfg {
    int64_t n_procs, duration_ns, warmup_ns, bin_ns, timeslice_ns, seed;
    int64_t launch_ns;    /* CPU cost of one launch (the GPU sees the kernel at its end) */
    int64_t event_ns;     /* extra CPU cost of the controller per launch (event record) */
    int64_t submit_ns;    /* latency from a command's submission to the GPU seeing it; 0 = the
                           * GPU sees every command at the instant of the call */
    int64_t sleep_slack_ns, min_sleep_ns, max_sleep_ns;
    int64_t use_board;
    int64_t switch_ns;    /* GPU time lost at each switch to another context (state save and
                           * restore): nothing runs, no event completes */
    struct gs_sim_proc_cfg proc[SIM_PROCS];
};

struct gs_sim_result {
    int64_t work_ns;            /* GPU work completed within [warmup, duration) */
    int64_t launches, throttled, throttle_ns, measured_ns, dropped;
    int64_t steps, step_p50_ns, step_p99_ns;
    int64_t max_queue_ns;       /* most unfinished launched work seen */
    int64_t batches;            /* event pairs measured */
    int64_t max_wait_ns;        /* longest hold-back of one launch */
    int64_t bins[SIM_BINS];     /* work completed per bin_ns after warmup */
};

struct sim_event {
    uint32_t gen;
    int done, used;
    int64_t ts;
};

struct sim_item {
    int64_t work, full;  /* remaining / total ns of service; 0 full = an event marker */
    int64_t ready;       /* GPU-timeline time the command reaches the GPU */
    struct sim_event *ev;
    uint32_t gen;
};

struct sim_stream {
    struct sim_item q[SIM_QCAP];
    int head, len;
};

struct sim_proc {
    struct gs_sim_proc_cfg c;
    struct sim_stream st[SIM_STREAMS];
    struct sim_event ev[SIM_EVENTS];
    struct gs_meter meter;
    struct gs_compute_proc block;
    struct gs_board_client board;
    int alive, started, in_sync, blocked, next_stream;
    int64_t timeline_ns;    /* its events' times: the GPU's clock less this (one per context) */
    int64_t next, wait_acc, step_start, queued_ns;
    int64_t submit_at;      /* when the commands being issued now reach the GPU */
    uint64_t rng;
    int64_t key_ns[64];     /* duration of each fixed key */
    int64_t launches;
    int n_steps;
    int64_t steps[SIM_STEPS];
};

struct sim {
    struct gs_sim_cfg c;
    struct gs_sim_result *out;
    struct sim_proc p[SIM_PROCS];
    struct gs_compute_device dev[SIM_PROCS];
    struct gs_board board;
    int64_t now;
    int any_blocked, popped; /* a blocked process wakes on GPU progress: stop advancing then */
    int active;
    int64_t slice_start;
    int last_ctx;            /* context whose state is on the GPU (-1: none yet) */
    int64_t switch_until;    /* a context switch occupies the GPU until then */
};

/* ---- event ops: the fake timeline behind gs_meter_ops ---- */

static struct sim_item *sim_push(struct sim_stream *s)
{
    struct sim_item *it = &s->q[(s->head + s->len) % SIM_QCAP];
    s->len++;
    return it;
}

static void *sim_ev_record(void *ctx, uintptr_t stream, void *evp)
{
    struct sim_proc *p = ctx;
    struct sim_stream *s = &p->st[stream];
    struct sim_event *ev = evp;
    if (s->len >= SIM_QCAP)
        return NULL;
    if (!ev) {
        for (int i = 0; i < SIM_EVENTS && !ev; i++)
            if (!p->ev[i].used)
                ev = &p->ev[i];
        if (!ev)
            return NULL;
        ev->used = 1;
    }
    ev->gen++;
    ev->done = 0;
    *sim_push(s) = (struct sim_item){.work = 0, .full = 0, .ev = ev, .gen = ev->gen,
                                     .ready = p->submit_at};
    return ev;
}

static int sim_ev_done(void *ctx, void *evp)
{
    (void)ctx;
    return ((struct sim_event *)evp)->done;
}

static int sim_ev_time(void *ctx, void *evp, int64_t *t)
{
    struct sim_event *ev = evp;
    if (!ev->done)
        return -1;
    *t = ev->ts - ((struct sim_proc *)ctx)->timeline_ns;
    return 0;
}

static void sim_ev_release(void *ctx, void *evp)
{
    (void)ctx;
    struct sim_event *ev = evp;
    ev->used = 0;
    ev->gen++;
}

static int sim_stream_busy(void *ctx, uintptr_t stream)
{
    return ((struct sim_proc *)ctx)->st[stream].len > 0;
}

static const struct gs_meter_ops sim_ops = {sim_ev_record, sim_ev_done, sim_ev_time, sim_ev_release,
                                            sim_stream_busy};

/* ---- GPU model ---- */

static int sim_has_work(struct sim_proc *p)
{
    for (int i = 0; i < SIM_STREAMS; i++)
        if (p->st[i].len)
            return 1;
    return 0;
}

static void sim_pop(struct sim *S, struct sim_proc *p, struct sim_stream *s)
{
    struct sim_item *it = &s->q[s->head];
    if (it->full == 0) {
        if (it->ev->gen == it->gen) {
            it->ev->done = 1;
            it->ev->ts = S->now;
        }
    } else {
        p->queued_ns -= it->full;
        if (S->now >= S->c.warmup_ns && S->now < S->c.duration_ns) {
            struct gs_sim_result *r = &S->out[p - S->p];
            r->work_ns += it->full;
            int64_t bin = (S->now - S->c.warmup_ns) / S->c.bin_ns;
            if (bin < SIM_BINS)
                r->bins[bin] += it->full;
        }
    }
    s->head = (s->head + 1) % SIM_QCAP;
    s->len--;
    S->popped = 1;
}

static int sim_head_ready(struct sim *S, struct sim_stream *st)
{
    return st->len && st->q[st->head].ready <= S->now;
}

/* Work the GPU can run now (commands still in flight to the GPU do not count). */
static int sim_ready_work(struct sim *S, struct sim_proc *p)
{
    for (int i = 0; i < SIM_STREAMS; i++)
        if (sim_head_ready(S, &p->st[i]))
            return 1;
    return 0;
}

/* Earliest time a queued command that has not reached the GPU yet arrives. */
static int64_t sim_next_arrival(struct sim *S)
{
    int64_t t = SIM_INF;
    for (int j = 0; j < (int)S->c.n_procs; j++)
        for (int i = 0; i < SIM_STREAMS; i++) {
            struct sim_stream *st = &S->p[j].st[i];
            if (st->len && st->q[st->head].ready > S->now && st->q[st->head].ready < t)
                t = st->q[st->head].ready;
        }
    return t;
}

/* Make context j active (-1: none); switching to another context than the last one costs
 * switch_ns of GPU time. */
static void sim_switch_to(struct sim *S, int j)
{
    S->active = j;
    S->slice_start = S->now;
    if (j >= 0 && j != S->last_ctx) {
        if (S->last_ctx >= 0)
            S->switch_until = S->now + S->c.switch_ns;
        S->last_ctx = j;
    }
}

/* Complete events at the heads of the active context; switch context when it runs dry. */
static void sim_settle(struct sim *S)
{
    for (int tries = 0; tries <= SIM_PROCS; tries++) {
        if (S->active >= 0 && S->now < S->switch_until)
            return; /* still switching in: nothing of it runs yet */
        if (S->active >= 0) {
            struct sim_proc *p = &S->p[S->active];
            for (int i = 0; i < SIM_STREAMS; i++)
                while (sim_head_ready(S, &p->st[i]) && p->st[i].q[p->st[i].head].full == 0)
                    sim_pop(S, p, &p->st[i]);
            if (sim_ready_work(S, p))
                return;
        }
        int from = S->active < 0 ? 0 : S->active + 1, next = -1;
        for (int k = 0; k < (int)S->c.n_procs && next < 0; k++) {
            int j = (from + k) % (int)S->c.n_procs;
            if (sim_ready_work(S, &S->p[j]))
                next = j;
        }
        if (next < 0) {
            S->active = -1;
            return;
        }
        sim_switch_to(S, next);
    }
}

static int sim_others_waiting(struct sim *S)
{
    for (int j = 0; j < (int)S->c.n_procs; j++)
        if (j != S->active && sim_ready_work(S, &S->p[j]))
            return 1;
    return 0;
}

static void sim_gpu_advance(struct sim *S, int64_t target)
{
    S->popped = 0;
    for (;;) {
        sim_settle(S);
        if (S->any_blocked && S->popped)
            return;
        int64_t t_arrive = sim_next_arrival(S);
        if (S->active < 0) {
            S->now = t_arrive < target ? t_arrive : target;
            if (S->now == target)
                return;
            continue;
        }
        if (S->now < S->switch_until) {
            S->now = S->switch_until < target ? S->switch_until : target;
            if (S->now == target)
                return;
            continue;
        }
        struct sim_proc *p = &S->p[S->active];
        int n = 0;
        int64_t min_work = SIM_INF;
        for (int i = 0; i < SIM_STREAMS; i++)
            if (sim_head_ready(S, &p->st[i])) {
                n++;
                if (p->st[i].q[p->st[i].head].work < min_work)
                    min_work = p->st[i].q[p->st[i].head].work;
            }
        int64_t t_done = S->now + min_work * n;
        int64_t t_slice = SIM_INF;
        if (sim_others_waiting(S)) {
            /* the running context's slice renews while nobody waits: a newcomer waits for
             * the end of the current slice (0..timeslice), not for a slice that expired */
            int64_t ran = S->now - S->slice_start, ts = S->c.timeslice_ns;
            t_slice = S->slice_start + (ran > 0 && ran % ts == 0 ? ran : (ran / ts + 1) * ts);
        }
        int64_t t_next = t_done < t_slice ? t_done : t_slice;
        if (t_arrive < t_next)
            t_next = t_arrive;
        int64_t until = t_next < target ? t_next : target;
        int64_t step = (until - S->now) / n;
        for (int i = 0; i < SIM_STREAMS; i++)
            if (sim_head_ready(S, &p->st[i]))
                p->st[i].q[p->st[i].head].work -= step;
        S->now = until;
        for (int i = 0; i < SIM_STREAMS; i++)
            if (p->st[i].len && p->st[i].q[p->st[i].head].full > 0 &&
                p->st[i].q[p->st[i].head].ready < until && p->st[i].q[p->st[i].head].work <= 0)
                sim_pop(S, p, &p->st[i]);
        if (until == t_slice && sim_others_waiting(S)) {
            int from = S->active, next = -1;
            for (int k = 1; k <= (int)S->c.n_procs && next < 0; k++) { /* round-robin */
                int j = (from + k) % (int)S->c.n_procs;
                if (sim_ready_work(S, &S->p[j]))
                    next = j;
            }
            sim_switch_to(S, next);
        }
        if (until == target || (S->any_blocked && S->popped))
            return;
    }
}

/* ---- processes ---- */

static uint64_t sim_rand(struct sim_proc *p)
{
    p->rng ^= p->rng << 13;
    p->rng ^= p->rng >> 7;
    p->rng ^= p->rng << 17;
    return p->rng;
}

static int64_t sim_range_ns(struct sim_proc *p, int64_t lo, int64_t hi)
{
    return hi > lo ? lo + (int64_t)(sim_rand(p) % (uint64_t)(hi - lo + 1)) : lo;
}

/* Duration of the next kernel; `key` is the launch's key index (0..keys-1). */
static int64_t sim_kernel_ns(struct sim_proc *p, int key)
{
    if (!p->c.key_fixed || p->c.keys < 1)
        return sim_range_ns(p, p->c.kernel_min_ns, p->c.kernel_max_ns);
    int64_t d = p->key_ns[key % 64], j = d * p->c.jitter_pct / 100;
    return sim_range_ns(p, d - j, d + j);
}

static void sim_kill(struct sim_proc *p)
{
    p->alive = 0;
    for (int i = 0; i < SIM_STREAMS; i++)
        p->st[i].len = 0; /* the driver tears the context down: queued work never runs */
    p->queued_ns = 0;
    p->next = SIM_INF;
}

static void sim_step_done(struct sim *S, struct sim_proc *p)
{
    if (p->step_start >= S->c.warmup_ns && p->n_steps < SIM_STEPS)
        p->steps[p->n_steps++] = S->now - p->step_start;
    p->step_start = S->now + p->c.step_cpu_ns;
    p->in_sync = 0;
    p->next = S->now + p->c.step_cpu_ns;
}

static void sim_proc_run(struct sim *S, struct sim_proc *p)
{
    struct gs_sim_cfg *c = &S->c;
    if (p->c.stop_ns > 0 && S->now >= p->c.stop_ns) {
        sim_kill(p);
        return;
    }
    if (!p->started) {
        p->started = 1;
        p->step_start = S->now;
    }
    if (p->in_sync) {
        if (sim_has_work(p))
            p->blocked = 1, p->next = SIM_INF;
        else
            sim_step_done(S, p);
        return;
    }
    int s = p->next_stream;
    int k = (int)(p->c.kernels_per_launch > 1 ? p->c.kernels_per_launch : 1);
    if (p->st[s].len + k + 2 > SIM_QCAP) { /* the driver's launch queue is full: block */
        p->blocked = 1;
        p->next = SIM_INF;
        return;
    }
    int limited = p->c.limit_pct > 0;
    if (limited) {
        if (c->use_board)
#ifdef GS_METER_HAS_KEYS
            gs_meter_set_others(&p->meter, gs_board_tick(&p->board, S->now, p->meter.busy_total));
#else
            gs_meter_set_others(&p->meter, gs_board_tick(&p->board, S->now));
#endif
        int64_t w = gs_meter_admit(&p->meter, S->now);
#ifdef GS_BOARD_HAS_INFLIGHT
        gs_board_set_inflight(&p->board, p->meter.inflight_ns);
#endif
        if (w > 0) {
            if (w < c->min_sleep_ns)
                w = c->min_sleep_ns;
            if (w > c->max_sleep_ns)
                w = c->max_sleep_ns;
            w += c->sleep_slack_ns;
            p->wait_acc += w;
            p->next = S->now + w;
            return;
        }
        if (p->wait_acc) {
            gs_meter_note_wait(&p->meter, p->wait_acc);
            if (p->wait_acc > S->out[p - S->p].max_wait_ns)
                S->out[p - S->p].max_wait_ns = p->wait_acc;
            p->wait_acc = 0;
        }
        p->submit_at = S->now + c->submit_ns;
        gs_meter_before(&p->meter, (uintptr_t)s, S->now);
    }
    /* with latency the kernel leaves at the end of its launch call; submit_ns 0 = instantly */
    int64_t issued = c->submit_ns ? S->now + (limited ? c->event_ns : 0) + c->launch_ns : S->now;
    int key = p->c.keys > 0 ? (int)(p->launches % p->c.keys) : 0;
    for (int i = 0; i < k; i++) {
        int64_t w = sim_kernel_ns(p, key);
        *sim_push(&p->st[s]) = (struct sim_item){.work = w, .full = w, .ready = issued + c->submit_ns};
        p->queued_ns += w;
    }
    p->submit_at = issued + c->submit_ns;
    if (limited) {
        enum gs_launch_kind kind = k > 1 ? GS_LAUNCH_GRAPH : GS_LAUNCH_KERNEL;
#ifdef GS_METER_HAS_KEYS
        uint64_t lkey = p->c.keys > 0 && !p->c.hide_keys
                            ? gs_clean_key((uint64_t)(p - S->p) + 1, (uint64_t)key, 0) : 0;
        gs_meter_after_key(&p->meter, (uintptr_t)s, kind, lkey, S->now);
#ifdef GS_BOARD_HAS_INFLIGHT
        gs_board_set_inflight(&p->board, p->meter.inflight_ns);
#endif
#else
        gs_meter_after(&p->meter, (uintptr_t)s, kind, S->now);
#endif
    }
    struct gs_sim_result *r = &S->out[p - S->p];
    if (p->queued_ns > r->max_queue_ns)
        r->max_queue_ns = p->queued_ns;
    p->launches++;
    p->next_stream = (s + 1) % (int)p->c.streams;
    p->next = S->now + c->launch_ns + (limited ? c->event_ns : 0) + p->c.cpu_ns;
    if (p->c.sync_every > 0 && p->launches % p->c.sync_every == 0)
        p->in_sync = 1;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void sim_init(struct sim *S)
{
    S->active = S->last_ctx = -1;
    gs_board_format(&S->board);
    for (int i = 0; i < (int)S->c.n_procs; i++) {
        struct sim_proc *p = &S->p[i];
        p->c = S->c.proc[i];
        if (p->c.streams < 1 || p->c.streams > SIM_STREAMS)
            p->c.streams = 1;
        p->alive = 1;
        p->timeline_ns = (int64_t)(i * 1370 - 2500) * 1000000; /* contexts' timelines differ */
        p->next = p->c.start_ns;
        p->rng = (uint64_t)S->c.seed * 0x9E3779B97F4A7C15ULL + (uint64_t)i + 1;
        for (int k = 0; p->c.key_fixed && k < 64; k++)
            p->key_ns[k] = sim_range_ns(p, p->c.kernel_min_ns, p->c.kernel_max_ns);
        int tenant = (int)(p->c.tenant % SIM_PROCS);
        if (p->c.limit_pct > 0) {
            gs_meter_init(&p->meter, &sim_ops, p, &S->dev[tenant], &p->block, (int)p->c.limit_pct);
            p->meter.work_conserving = (int)p->c.work_conserving;
            p->meter.priority = (int)p->c.priority;
            gs_board_client_init(&p->board, &S->board, (uint64_t)i + 1, (uint64_t)tenant + 1,
                                 (int)p->c.priority, (int)p->c.limit_pct,
                                 (int)p->c.work_conserving, 1000 + i);
        }
    }
}

int gs_sim_run(const struct gs_sim_cfg *cfg, struct gs_sim_result *out)
{
    if (cfg->n_procs < 1 || cfg->n_procs > SIM_PROCS || cfg->bin_ns <= 0)
        return -1;
    struct sim *S = calloc(1, sizeof(*S));
    if (!S)
        return -1;
    S->c = *cfg;
    S->out = out;
    memset(out, 0, sizeof(*out) * (size_t)cfg->n_procs);
    sim_init(S);
    for (;;) {
        int64_t t = SIM_INF;
        for (int i = 0; i < (int)S->c.n_procs; i++)
            if (S->p[i].alive && S->p[i].next < t)
                t = S->p[i].next;
        for (int i = 0; i < (int)S->c.n_procs; i++) /* kills happen on time, even when blocked */
            if (S->p[i].alive && S->p[i].c.stop_ns > 0 && S->p[i].c.stop_ns < t)
                t = S->p[i].c.stop_ns;
        if (t > cfg->duration_ns)
            t = cfg->duration_ns;
        S->any_blocked = 0;
        for (int i = 0; i < (int)S->c.n_procs; i++)
            S->any_blocked |= S->p[i].alive && S->p[i].blocked;
        sim_gpu_advance(S, t);
        if (S->now >= cfg->duration_ns)
            break;
        for (int i = 0; i < (int)S->c.n_procs; i++) {
            struct sim_proc *p = &S->p[i];
            if (!p->alive)
                continue;
            if (p->blocked && (!p->in_sync || !sim_has_work(p)) &&
                p->st[p->next_stream].len + 16 < SIM_QCAP) {
                p->blocked = 0;
                p->next = S->now;
            }
            if (p->c.stop_ns > 0 && S->now >= p->c.stop_ns)
                sim_kill(p);
            else if (p->next <= S->now)
                sim_proc_run(S, p);
        }
    }
    for (int i = 0; i < (int)S->c.n_procs; i++) {
        struct sim_proc *p = &S->p[i];
        struct gs_sim_result *r = &out[i];
        r->launches = p->launches;
        r->throttled = (int64_t)p->block.throttled;
        r->throttle_ns = (int64_t)p->block.throttle_ns;
        r->measured_ns = (int64_t)p->block.busy_ns;
        r->dropped = (int64_t)p->meter.dropped;
        r->batches = (int64_t)p->meter.batches;
        r->steps = p->n_steps;
        if (p->n_steps > 0) {
            qsort(p->steps, (size_t)p->n_steps, sizeof(int64_t), cmp_i64);
            r->step_p50_ns = p->steps[p->n_steps / 2];
            r->step_p99_ns = p->steps[(p->n_steps * 99) / 100];
        }
    }
    free(S);
    return 0;
}

/* Sizes for the ctypes mirror to check against. */
int64_t gs_sim_sizes(int which)
{
    switch (which) {
    case 0: return (int64_t)sizeof(struct gs_sim_cfg);
    case 1: return (int64_t)sizeof(struct gs_sim_result);
#ifdef GS_METER_HAS_KEYS
    case 2: return (int64_t)sizeof(struct gs_clean); /* for direct tests of clean.c */
    case 3: return (int64_t)sizeof(struct gs_meter);  /* for direct tests of meter.c */
#endif
    default: return -1;
    }
}

/* Direct access to the span union for property tests. */
int64_t gs_sim_spans_add(struct gs_span *spans, int *n, int64_t s, int64_t e)
{
    return gs_spans_add(spans, n, s, e);
}

#ifdef GS_UNION_WINDOW_NS
/* The union of one container's processes on one GPU driven directly (test_union.py): batches of
 * 5 words {process, ts, te (its timeline), recorded, seen (host clock)} in the order they are
 * seen done, each charged as measured; charges[i] is what batch i is charged. -1: bad input. */
int gs_sim_union(int n, const int64_t *batches, int64_t *charges)
{
    struct gs_compute_device dev = {0};
    struct { struct gs_union un; struct gs_span own[GS_SPANS_MAX]; int n; } p[SIM_PROCS];
    memset(p, 0, sizeof p);
    for (int i = 0; i < n; i++) {
        const int64_t *b = &batches[5 * i];
        if (b[0] < 0 || b[0] >= SIM_PROCS || b[2] < b[1])
            return -1;
        p[b[0]].un.dev = &dev;
        charges[i] = gs_union_add(&p[b[0]].un, p[b[0]].own, &p[b[0]].n, b[1], b[2], b[3], b[4], 1);
    }
    return 0;
}
#endif

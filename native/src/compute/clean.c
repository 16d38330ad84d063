/* Clean per-launch duration estimates and the time-slice correction. See clean.h. */
#include "clean.h"

#include <string.h>

#define GS_CLEAN_NONE INT64_MAX

uint64_t gs_clean_key(uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t h = a * 0x9E3779B97F4A7C15ULL;
    h = (h ^ (h >> 29) ^ b) * 0xBF58476D1CE4E5B9ULL;
    h = (h ^ (h >> 32) ^ c) * 0x94D049BB133111EBULL;
    h ^= h >> 31;
    return h ? h : 1;
}

void gs_clean_others(struct gs_clean *c, int active, uint64_t others_busy_ns)
{
    c->others = active;
    if (!active) { /* alone: nothing to correct, no credit kept for later */
        c->credit_ns = 0;
        c->others_valid = 0;
        return;
    }
    if (c->others_valid && others_busy_ns >= c->others_seen) {
        uint64_t d = others_busy_ns - c->others_seen;
        int64_t credit = c->credit_ns + (d > (uint64_t)GS_CLEAN_CREDIT_MAX_NS
                                             ? GS_CLEAN_CREDIT_MAX_NS : (int64_t)d);
        c->credit_ns = credit > GS_CLEAN_CREDIT_MAX_NS ? GS_CLEAN_CREDIT_MAX_NS : credit;
    }
    c->others_seen = others_busy_ns;
    c->others_valid = 1;
}

static struct gs_clean_entry *gs_clean_find(struct gs_clean *c, uint64_t key, int64_t now)
{
    int lru = 0;
    for (int i = 0; i < GS_CLEAN_KEYS; i++) {
        if (c->e[i].key == key)
            return &c->e[i];
        if (c->e[i].key == 0 || (c->e[lru].key != 0 && c->e[i].last_used < c->e[lru].last_used))
            lru = i;
    }
    struct gs_clean_entry *e = &c->e[lru];
    *e = (struct gs_clean_entry){.key = key, .min_cur = GS_CLEAN_NONE, .min_prev = GS_CLEAN_NONE,
                                 .period_start = now};
    return e;
}

int64_t gs_clean_charge(struct gs_clean *c, uint64_t key, uint32_t n, int64_t span_ns,
                        int64_t now)
{
    c->usable = 0;
    if (key == 0 || n == 0 || span_ns <= 0)
        return span_ns;
    struct gs_clean_entry *e = gs_clean_find(c, key, now);
    e->last_used = now;
    if (now - e->period_start >= GS_CLEAN_PERIOD_NS) { /* age the minimum out */
        e->min_prev = now - e->period_start >= 2 * GS_CLEAN_PERIOD_NS ? GS_CLEAN_NONE : e->min_cur;
        int recent = now - e->period_start < 2 * GS_CLEAN_PERIOD_NS;
        e->n_prev = recent ? e->n_cur : 0;
        e->clean_prev = recent ? e->clean_cur : 0;
        e->min_cur = GS_CLEAN_NONE;
        e->n_cur = e->clean_cur = 0;
        e->period_start = now;
    }
    int64_t per = span_ns / n;
    int64_t lo = e->min_cur < e->min_prev ? e->min_cur : e->min_prev;
    /* a kernel's duration drifts with the clock (a GPU at its power cap: +-5-10 %), a foreign
     * slice adds far more: within 4 mean deviations of the clean mean is clean too */
    int64_t drift = 4 * e->dev, cap = e->mean * GS_CLEAN_DRIFT_MAX_PCT / 100;
    int clean = lo == GS_CLEAN_NONE || per * 100 <= lo * (100 + GS_CLEAN_TOL_PCT) ||
                (e->mean > 0 && per <= e->mean + (drift < cap ? drift : cap));
    if (per < e->min_cur)
        e->min_cur = per;
    e->n_cur++;
    e->clean_cur += (uint32_t)clean;
    uint32_t n_all = e->n_cur + e->n_prev, n_clean = e->clean_cur + e->clean_prev;
    int stable = n_all >= GS_CLEAN_MIN_SAMPLES && n_clean * 100 >= n_all * GS_CLEAN_STABLE_PCT;
    c->usable = stable;
    if (clean) {
        int64_t d = per > e->mean ? per - e->mean : e->mean - per;
        e->dev = e->mean == 0 || lo == GS_CLEAN_NONE ? 0 : (3 * e->dev + d) / 4;
        e->mean = e->mean == 0 || lo == GS_CLEAN_NONE ? per : (7 * e->mean + per) / 8;
        e->last_clean = now;
        return span_ns;
    }
    if (!c->others || !stable || e->mean == 0 || now - e->last_clean > GS_CLEAN_FRESH_NS)
        return span_ns;
    /* interruptions pick the longer batches, so clean ones are a little short: one deviation
     * more per launch keeps a corrected batch from being charged less than its own work */
    int64_t expect = (e->mean + e->dev) * (int64_t)n;
    int64_t excess = span_ns - expect;
    if (excess <= GS_CLEAN_SLACK_NS)
        return span_ns;
    if (excess > c->credit_ns)
        excess = c->credit_ns;
    c->credit_ns -= excess;
    c->corrected_ns += (uint64_t)excess;
    return span_ns - excess;
}

/* Reserve/commit/release on the shared region (protocol in <gpuslice/region.h>) and the
 * per-process allocation table. Two racers near the limit may both fail and retry (with a short
 * back-off), but never both pass: each publishes its pending bytes (seq_cst) before summing.
 * `dev` is a CUDA ordinal of this process; the region counts per GPU (gs_region_entry). */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#include "account.h"
#include "region.h"

#define GS_RESERVE_TRIES 4

static uint64_t gs_slot_sum(struct gs_region_slot *s, int dev)
{
    return __atomic_load_n(&s->used[dev], __ATOMIC_SEQ_CST) + __atomic_load_n(&s->pending[dev], __ATOMIC_SEQ_CST);
}

/* a + b, at most INT64_MAX (a <= INT64_MAX): no count, however large, wraps a total to a small
 * one, and used + pending of two such totals cannot wrap either. */
static uint64_t gs_add_cap(uint64_t a, uint64_t b)
{
    return b > (uint64_t)INT64_MAX - a ? (uint64_t)INT64_MAX : a + b;
}

/* Sum used and pending over live slots. */
static void gs_account_sum(int dev, uint64_t *used, uint64_t *pending)
{
    uint64_t u = 0, p = 0;
    int n = gs_region_slot_count();
    for (int i = 0; i < n; i++) {
        struct gs_region_slot *s = gs_region_slot_at(i);
        if (__atomic_load_n(&s->state, __ATOMIC_SEQ_CST) != GS_SLOT_LIVE) continue;
        u = gs_add_cap(u, __atomic_load_n(&s->used[dev], __ATOMIC_SEQ_CST));
        p = gs_add_cap(p, __atomic_load_n(&s->pending[dev], __ATOMIC_SEQ_CST));
    }
    *used = u;
    *pending = p;
}

/* The region entry counting ordinal dev's GPU, or -1 (none, or a GPU the region cannot cap). */
static int gs_entry(int dev)
{
    int e = gs_region_entry(dev);
    return e < GS_REGION_MAX_DEVICES ? e : -1;
}

uint64_t gs_account_total_entry(int e)
{
    if (e < 0 || e >= GS_REGION_MAX_DEVICES) return 0;
    uint64_t u, p;
    gs_account_sum(e, &u, &p);
    return u + p;
}

uint64_t gs_account_total(int dev)
{
    return gs_account_total_entry(gs_entry(dev));
}

uint64_t gs_account_used(int dev)
{
    int e = gs_entry(dev);
    if (e < 0) return 0;
    uint64_t u, p;
    gs_account_sum(e, &u, &p);
    return u;
}

uint64_t gs_account_limit_entry(int e)
{
    struct gs_region_device *d = gs_region_device(e);
    return d ? d->limit : 0;
}

uint64_t gs_account_limit(int dev)
{
    return gs_account_limit_entry(gs_entry(dev));
}

uint64_t gs_account_self(int dev)
{
    struct gs_region_slot *s = gs_region_self();
    int e = gs_entry(dev);
    if (s == NULL || e < 0) return 0;
    return __atomic_load_n(&s->used[e], __ATOMIC_RELAXED);
}

uint64_t gs_account_self_total(int dev)
{
    struct gs_region_slot *s = gs_region_self();
    int e = gs_entry(dev);
    if (s == NULL || e < 0) return 0;
    return gs_slot_sum(s, e);
}

static void gs_backoff(int attempt)
{
    struct timespec ts = {0, 20000L << attempt}; /* 20, 40, 80 us */
    nanosleep(&ts, NULL);
}

int gs_account_reserve(int dev, uint64_t bytes)
{
    int e = gs_region_entry(dev);
    if (e < 0) return GS_PASS;
    if (e == GS_DEV_CLOSED || gs_region_broken()) return GS_OVER; /* cannot be capped: fail closed */
    struct gs_region_slot *s = gs_region_self();
    uint64_t limit = gs_account_limit_entry(e);
    if (s == NULL) return limit ? GS_OVER : GS_PASS; /* every slot taken: fail closed */
    /* a size that can never fit is refused before it touches a counter: 2^64 - X added to
     * pending would wrap the sums and let concurrent allocations pass the cap by X */
    if (limit && bytes > limit) return GS_OVER;
    if (bytes > (uint64_t)INT64_MAX) return GS_PASS; /* no limit here: the driver refuses it */
    for (int attempt = 0;; attempt++) {
        __atomic_fetch_add(&s->pending[e], bytes, __ATOMIC_SEQ_CST);
        if (limit == 0) return GS_OK;
        uint64_t used, pending;
        gs_account_sum(e, &used, &pending);
        if (used + pending <= limit) return GS_OK;
        __atomic_fetch_sub(&s->pending[e], bytes, __ATOMIC_SEQ_CST);
        if (attempt + 1 >= GS_RESERVE_TRIES) return GS_OVER;
        /* a dead process's slot (even one killed mid-reservation) may be what blocks us */
        gs_region_reclaim(0);
        gs_account_sum(e, &used, &pending);
        if (used > limit - bytes) return GS_OVER; /* committed usage alone leaves no room */
        gs_backoff(attempt);                      /* in-flight reservations may be cancelled */
    }
}

void gs_account_commit(int dev, uint64_t bytes)
{
    struct gs_region_slot *s = gs_region_self();
    int e = gs_entry(dev);
    if (s == NULL || e < 0) return;
    __atomic_fetch_add(&s->used[e], bytes, __ATOMIC_SEQ_CST);
    __atomic_fetch_sub(&s->pending[e], bytes, __ATOMIC_SEQ_CST);
}

void gs_account_cancel(int dev, uint64_t bytes)
{
    struct gs_region_slot *s = gs_region_self();
    int e = gs_entry(dev);
    if (s == NULL || e < 0) return;
    __atomic_fetch_sub(&s->pending[e], bytes, __ATOMIC_SEQ_CST);
}

void gs_account_charge(int dev, uint64_t bytes)
{
    struct gs_region_slot *s = gs_region_self();
    int e = gs_entry(dev);
    if (s == NULL || e < 0) return;
    __atomic_fetch_add(&s->used[e], bytes, __ATOMIC_SEQ_CST);
}

void gs_account_release(int dev, uint64_t bytes)
{
    struct gs_region_slot *s = gs_region_self();
    int e = gs_entry(dev);
    if (s == NULL || e < 0) return;
    uint64_t cur = __atomic_load_n(&s->used[e], __ATOMIC_RELAXED);
    uint64_t next;
    do {
        next = cur > bytes ? cur - bytes : 0; /* never wrap below zero */
    } while (!__atomic_compare_exchange_n(&s->used[e], &cur, next, 1, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
}

/* ---- per-process allocation table: chained hash, one mutex ---- */

#define GS_TRACK_BUCKETS 4096

struct gs_track_node {
    struct gs_track_node *next;
    uint64_t key;
    uint64_t bytes;
    int kind;
    int dev;
};

static struct gs_track_node *gs_track_table[GS_TRACK_BUCKETS];
static struct gs_track_node *gs_track_free_list;
static pthread_mutex_t gs_track_lock = PTHREAD_MUTEX_INITIALIZER;

/* A fork copies the lock as held if another thread held it; that thread does not exist in the
 * child, so the child starts with a fresh lock (the table keeps the parent's entries). */
static void gs_track_fork_child(void)
{
    gs_track_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
}

__attribute__((constructor)) static void gs_track_fork_register(void)
{
    pthread_atfork(NULL, NULL, gs_track_fork_child);
}

static unsigned gs_track_hash(int kind, uint64_t key)
{
    uint64_t h = (key ^ ((uint64_t)kind << 56)) * 0x9e3779b97f4a7c15ull;
    return (unsigned)(h >> 52) & (GS_TRACK_BUCKETS - 1);
}

static struct gs_track_node **gs_track_find(int kind, uint64_t key)
{
    struct gs_track_node **p = &gs_track_table[gs_track_hash(kind, key)];
    while (*p && ((*p)->key != key || (*p)->kind != kind)) p = &(*p)->next;
    return p;
}

int gs_track_put(int kind, uint64_t key, int dev, uint64_t bytes)
{
    pthread_mutex_lock(&gs_track_lock);
    struct gs_track_node **p = gs_track_find(kind, key);
    struct gs_track_node *n = *p;
    if (n == NULL) {
        n = gs_track_free_list;
        if (n) gs_track_free_list = n->next;
        else n = malloc(sizeof *n);
        if (n == NULL) {
            pthread_mutex_unlock(&gs_track_lock);
            return -1;
        }
        n->next = NULL;
        n->key = key;
        n->kind = kind;
        *p = n;
    }
    n->dev = dev;
    n->bytes = bytes;
    pthread_mutex_unlock(&gs_track_lock);
    return 0;
}

int gs_track_set(int kind, uint64_t key, int dev, uint64_t bytes)
{
    return gs_track_put(kind, key, dev, bytes);
}

int gs_track_get(int kind, uint64_t key, int *dev, uint64_t *bytes)
{
    pthread_mutex_lock(&gs_track_lock);
    struct gs_track_node *n = *gs_track_find(kind, key);
    if (n) {
        *dev = n->dev;
        *bytes = n->bytes;
    }
    pthread_mutex_unlock(&gs_track_lock);
    return n ? 0 : -1;
}

int gs_track_take(int kind, uint64_t key, int *dev, uint64_t *bytes)
{
    pthread_mutex_lock(&gs_track_lock);
    struct gs_track_node **p = gs_track_find(kind, key);
    struct gs_track_node *n = *p;
    if (n) {
        *p = n->next;
        *dev = n->dev;
        *bytes = n->bytes;
        n->next = gs_track_free_list;
        gs_track_free_list = n;
    }
    pthread_mutex_unlock(&gs_track_lock);
    return n ? 0 : -1;
}

void gs_track_each(int kind, void (*fn)(uint64_t key, int dev, uint64_t bytes, void *arg), void *arg)
{
    pthread_mutex_lock(&gs_track_lock);
    for (int b = 0; b < GS_TRACK_BUCKETS; b++)
        for (struct gs_track_node *n = gs_track_table[b]; n; n = n->next)
            if (n->kind == kind) fn(n->key, n->dev, n->bytes, arg);
    pthread_mutex_unlock(&gs_track_lock);
}

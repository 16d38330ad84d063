/* Per-process slots: claim (CAS pid 0 -> own pid), liveness (pid exists and /proc start time
 * unchanged, which defeats pid reuse), reclaim of dead owners (CAS state LIVE -> RECLAIMING by
 * this pid, rate-limited to one sweep per 250 ms through the header timestamp), release at exit.
 * A process killed while clearing a slot leaves it RECLAIMING under its dead pid: the next sweep
 * takes it over (CAS on the whole state word, so two clearers never run at once). A slot with
 * this pid and start time that this image did not claim is the pre-exec image's: exec frees the
 * driver memory, so it is released before claiming. With every slot taken, claims are retried at
 * most every 250 ms (a refusal must not re-scan /proc each time). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "region.h"

#define GS_RECLAIM_INTERVAL_NS 250000000ull

static int gs_self = -1;
static uint64_t gs_no_slot_since; /* gs_mono_ns of the last failed claim, 0 = none */
static pthread_mutex_t gs_claim_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t gs_atfork_once = PTHREAD_ONCE_INIT;

/* State (field 3) and start time (field 22, clock ticks since boot) from /proc/<pid>/stat.
 * 0 ok, -1 unreadable. */
static int gs_proc_stat(int pid, char *state, uint64_t *start)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* comm may contain spaces and parentheses */
    if (p == NULL) return -1;
    unsigned long long st = 0;
    char c = 0;
    if (sscanf(p + 2, "%c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu", &c,
               &st) != 2)
        return -1;
    *state = c;
    *start = st;
    return 0;
}

static uint64_t gs_proc_start_time(int pid)
{
    char state;
    uint64_t start;
    return gs_proc_stat(pid, &state, &start) == 0 ? start : 0;
}

int gs_region_slot_count(void)
{
    struct gs_region_header *h = gs_region();
    if (h == NULL) return 0;
    uint32_t n = __atomic_load_n(&h->slot_hwm, __ATOMIC_ACQUIRE);
    return n > GS_REGION_MAX_SLOTS ? GS_REGION_MAX_SLOTS : (int)n;
}

struct gs_region_slot *gs_region_slot_at(int index)
{
    struct gs_region_header *h = gs_region();
    if (h == NULL || index < 0 || index >= GS_REGION_MAX_SLOTS) return NULL;
    return (struct gs_region_slot *)((char *)h + GS_REGION_SLOTS_OFFSET) + index;
}

struct gs_compute_proc *gs_region_compute_proc_at(int index)
{
    struct gs_region_slot *s = gs_region_slot_at(index);
    return s ? &s->compute : NULL;
}

/* Dead: no such pid, a zombie (its GPU memory is already freed; containers often lack an init
 * that reaps), or a different process under a reused pid (start time changed). */
int gs_region_pid_dead(int pid, uint64_t start_time)
{
    if (pid <= 0) return 1;
    if (kill(pid, 0) != 0 && errno == ESRCH) return 1;
    char state;
    uint64_t now;
    if (gs_proc_stat(pid, &state, &now) != 0) return 0; /* cannot tell: keep counting it */
    if (state == 'Z' || state == 'X') return 1;
    return start_time != 0 && now != start_time;
}

int gs_region_slot_alive(int index)
{
    struct gs_region_slot *s = gs_region_slot_at(index);
    if (s == NULL || __atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != GS_SLOT_LIVE) return 0;
    return !gs_region_pid_dead(__atomic_load_n(&s->pid, __ATOMIC_ACQUIRE), s->start_time);
}

/* Clear a slot this process holds in state `mine` (RECLAIMING by us) and free it. */
static void gs_slot_finish(struct gs_region_slot *s, uint32_t mine)
{
    for (int d = 0; d < GS_REGION_MAX_DEVICES; d++) {
        __atomic_store_n(&s->used[d], 0, __ATOMIC_RELAXED);
        __atomic_store_n(&s->pending[d], 0, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&s->nvml_pid, 0, __ATOMIC_RELAXED);
    memset(&s->compute, 0, sizeof s->compute);
    __atomic_store_n(&s->pid, 0, __ATOMIC_RELEASE);
    __atomic_compare_exchange_n(&s->state, &mine, GS_SLOT_FREE, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED);
}

/* Move a slot from state `from` to RECLAIMING by this pid and clear it. 1 done. */
static int gs_slot_take(struct gs_region_slot *s, uint32_t from)
{
    uint32_t mine = GS_SLOT_RECLAIMING_BY(getpid());
    if (!__atomic_compare_exchange_n(&s->state, &from, mine, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) return 0;
    gs_slot_finish(s, mine);
    return 1;
}

static void gs_slot_reclaim_one(int index)
{
    struct gs_region_slot *s = gs_region_slot_at(index);
    uint32_t state = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
    int pid = __atomic_load_n(&s->pid, __ATOMIC_ACQUIRE);
    if (state == GS_SLOT_LIVE) {
        if (pid == getpid() || !gs_region_pid_dead(pid, s->start_time)) return;
        if (gs_slot_take(s, state)) GS_INFO("region: reclaimed slot %d of dead pid %d", index, pid);
    } else if ((state & 0xff) == GS_SLOT_RECLAIMING) {
        int by = (int)(state >> 8);
        if (by != getpid() && gs_region_pid_dead(by, 0) && gs_slot_take(s, state))
            GS_INFO("region: finished clearing slot %d (pid %d died while clearing it)", index, by);
    } else if (state == GS_SLOT_FREE && pid != 0) {
        /* owner died between claiming the pid and going LIVE: nothing was counted */
        if (gs_region_pid_dead(pid, 0)) __atomic_compare_exchange_n(&s->pid, &pid, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED);
    }
}

void gs_region_reclaim(int force)
{
    struct gs_region_header *h = gs_region();
    if (h == NULL) return;
    uint64_t now = gs_mono_ns();
    uint64_t last = __atomic_load_n(&h->last_reclaim_ns, __ATOMIC_ACQUIRE);
    if (!force && now - last < GS_RECLAIM_INTERVAL_NS && now >= last) return;
    if (!__atomic_compare_exchange_n(&h->last_reclaim_ns, &last, now, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
        return; /* someone else is sweeping */
    int n = gs_region_slot_count();
    for (int i = 0; i < n; i++) gs_slot_reclaim_one(i);
}

static void gs_atfork_child(void)
{
    /* the child has its own pid: it claims its own slot on first use */
    gs_self = -1;
    gs_no_slot_since = 0;
    pthread_mutex_init(&gs_claim_lock, NULL);
}

static void gs_atfork_register(void)
{
    pthread_atfork(NULL, NULL, gs_atfork_child);
}

/* Release slots left LIVE under this pid and start time by the image before exec(). */
static void gs_slot_drop_pre_exec(int pid, uint64_t start)
{
    int n = gs_region_slot_count();
    for (int i = 0; i < n; i++) {
        struct gs_region_slot *s = gs_region_slot_at(i);
        if (__atomic_load_n(&s->pid, __ATOMIC_ACQUIRE) == pid && s->start_time == start &&
            gs_slot_take(s, GS_SLOT_LIVE))
            GS_INFO("region: released slot %d held by this process before exec()", i);
    }
}

static int gs_slot_try_claim(struct gs_region_header *h, int pid, uint64_t start)
{
    for (int i = 0; i < GS_REGION_MAX_SLOTS; i++) {
        struct gs_region_slot *s = gs_region_slot_at(i);
        int32_t expect = 0;
        if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != GS_SLOT_FREE) continue;
        if (!__atomic_compare_exchange_n(&s->pid, &expect, pid, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) continue;
        if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != GS_SLOT_FREE) { /* lost a race with a reclaimer */
            __atomic_store_n(&s->pid, 0, __ATOMIC_RELEASE);
            continue;
        }
        memset(s->used, 0, sizeof s->used);
        memset(s->pending, 0, sizeof s->pending);
        s->nvml_pid = 0;
        memset(&s->compute, 0, sizeof s->compute);
        s->start_time = start;
        __atomic_store_n(&s->state, GS_SLOT_LIVE, __ATOMIC_SEQ_CST);
        uint32_t hwm = __atomic_load_n(&h->slot_hwm, __ATOMIC_ACQUIRE);
        while (hwm < (uint32_t)i + 1 &&
               !__atomic_compare_exchange_n(&h->slot_hwm, &hwm, (uint32_t)i + 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_ACQUIRE)) {
        }
        return i;
    }
    return -1;
}

static int gs_slot_claim(struct gs_region_header *h)
{
    uint64_t now = gs_mono_ns(), since = gs_no_slot_since;
    if (since && now - since < GS_RECLAIM_INTERVAL_NS) return -1; /* all taken a moment ago */
    int pid = (int)getpid();
    uint64_t start = gs_proc_start_time(pid);
    if (start) gs_slot_drop_pre_exec(pid, start);
    int idx = gs_slot_try_claim(h, pid, start);
    if (idx < 0) {
        gs_region_reclaim(since == 0); /* forced once; later retries ride the shared 250 ms sweep */
        idx = gs_slot_try_claim(h, pid, start);
    }
    if (idx < 0)
        GS_LOG_ONCE(GS_LOG_ERROR,
                    "region: all %d process slots are in use; this process's allocations on limited devices "
                    "fail (OUT_OF_MEMORY) until a slot frees: too many CUDA processes share this region",
                    GS_REGION_MAX_SLOTS);
    gs_no_slot_since = idx < 0 ? (now ? now : 1) : 0;
    return idx;
}

struct gs_region_slot *gs_region_self(void)
{
    int idx = __atomic_load_n(&gs_self, __ATOMIC_ACQUIRE);
    if (idx >= 0) return gs_region_slot_at(idx);
    struct gs_region_header *h = gs_region();
    if (h == NULL) return NULL;
    pthread_once(&gs_atfork_once, gs_atfork_register);
    pthread_mutex_lock(&gs_claim_lock);
    idx = gs_self;
    if (idx < 0) {
        idx = gs_slot_claim(h);
        __atomic_store_n(&gs_self, idx, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&gs_claim_lock);
    return idx >= 0 ? gs_region_slot_at(idx) : NULL;
}

int gs_region_no_slot(void)
{
    return gs_region() != NULL && gs_region_self() == NULL;
}

struct gs_compute_proc *gs_region_compute_proc(void)
{
    struct gs_region_slot *s = gs_region_self();
    return s ? &s->compute : NULL;
}

void gs_region_release_self(void)
{
    int idx = __atomic_exchange_n(&gs_self, -1, __ATOMIC_ACQ_REL);
    struct gs_region_slot *s = gs_region_slot_at(idx);
    if (s == NULL || __atomic_load_n(&s->pid, __ATOMIC_ACQUIRE) != (int)getpid()) return;
    gs_slot_take(s, GS_SLOT_LIVE);
}

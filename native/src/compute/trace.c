/* Per-launch trace file of the compute controller. See trace.h for the format. */
#define _GNU_SOURCE
#include "trace.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "log.h"
#include "meter.h"

#define GS_TRACE_KEYS 4096 /* distinct keys named; later ones go unnamed */

static struct {
    FILE *f;
    int on;
    long lines;
    pthread_mutex_t mu;
    uint64_t keys[GS_TRACE_KEYS]; /* open addressing, 0 = empty */
} gs_t = {.mu = PTHREAD_MUTEX_INITIALIZER};

void gs_trace_open(const char *dir)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/compute-trace.%d.tsv", dir, (int)getpid());
    FILE *f = fopen(path, "we");
    if (!f) {
        GS_WARN("compute: GPUSLICE_COMPUTE_TRACE: cannot create %s; no trace", path);
        return;
    }
    setvbuf(f, NULL, _IOLBF, 0); /* a stalled run is killed at its limit: lose no line */
    gs_t.f = f;
    __atomic_store_n(&gs_t.on, 1, __ATOMIC_RELEASE);
    GS_INFO("compute: tracing launches to %s", path);
}

int gs_trace_on(void)
{
    return __atomic_load_n(&gs_t.on, __ATOMIC_RELAXED);
}

/* Room for one more line (the lock held): stops at the cap with a last "X" line. */
static int gs_trace_room(void)
{
    if (!gs_t.f)
        return 0;
    if (++gs_t.lines < GS_TRACE_MAX_LINES)
        return 1;
    fputs("X\n", gs_t.f);
    fflush(gs_t.f);
    gs_t.f = NULL;
    __atomic_store_n(&gs_t.on, 0, __ATOMIC_RELAXED);
    return 0;
}

int gs_trace_new_key(uint64_t key)
{
    if (key == 0)
        return 0;
    pthread_mutex_lock(&gs_t.mu);
    int fresh = 0;
    for (unsigned i = 0, h = (unsigned)(key ^ key >> 29); i < GS_TRACE_KEYS; i++) {
        uint64_t *at = &gs_t.keys[(h + i) % GS_TRACE_KEYS];
        if (*at == key)
            break;
        if (*at == 0) {
            *at = key;
            fresh = 1;
            break;
        }
    }
    pthread_mutex_unlock(&gs_t.mu);
    return fresh;
}

void gs_trace_launch(int device, int64_t enter, int64_t admit, uintptr_t stream, uint64_t key,
                     int kind, int64_t owed, int64_t gang, int64_t over, char why, int catchup,
                     int flags, const char *name)
{
    pthread_mutex_lock(&gs_t.mu);
    if (name && gs_trace_room())
        fprintf(gs_t.f, "N\t%llx\t%s\n", (unsigned long long)key, name);
    if (gs_trace_room())
        fprintf(gs_t.f, "L\t%lld\t%lld\t%d\t%llx\t%llx\t%d\t%lld\t%lld\t%d\t%d\t%lld\t%c\n",
                (long long)enter, (long long)admit, device, (unsigned long long)stream,
                (unsigned long long)key, kind, (long long)owed, (long long)gang, catchup, flags,
                (long long)over, why ? why : '-');
    pthread_mutex_unlock(&gs_t.mu);
}

void gs_trace_batch(const struct gs_meter *m, const struct gs_batch *b, int64_t span,
                    int64_t charge, int64_t busy, int64_t now)
{
    pthread_mutex_lock(&gs_t.mu);
    if (gs_trace_room())
        fprintf(gs_t.f, "B\t%lld\t%d\t%llx\t%lld\t%lld\t%lld\t%u\t%llx\t%d\n", (long long)now,
                m->ordinal, (unsigned long long)b->stream, (long long)span, (long long)charge,
                (long long)busy, b->launches[0] + b->launches[1], (unsigned long long)b->key,
                b->mixed);
    pthread_mutex_unlock(&gs_t.mu);
}

__attribute__((destructor)) static void gs_trace_close(void)
{
    pthread_mutex_lock(&gs_t.mu);
    if (gs_t.f)
        fflush(gs_t.f); /* not closed: a thread of a dying process may still launch */
    pthread_mutex_unlock(&gs_t.mu);
}

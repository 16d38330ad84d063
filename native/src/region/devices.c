/* Region device entries keyed by GPU UUID. A process maps its CUDA ordinal to the GPU's UUID
 * (gs_device_uuid, CUDA side) and the UUID to the entry, once per ordinal (cached). Entries are
 * fixed at creation when the node agent set GPUSLICE_DEVICE_UUIDS (a GPU outside that list is
 * refused: fail closed); otherwise the first process using a GPU adds its entry under the
 * region's device_lock (a thread id), taking the limit of the index it sees the GPU at
 * (index_limit[ordinal], default_limit from index 16 on), preferring the entry of the same index.
 * The lock makes two processes adding the same GPU at once end with one entry, so a GPU never
 * gets two caps.
 * Tests: tests/native/unit/test_region.c, tests/native/test_cap_follows_the_physical_gpu.py. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "region.h"

#define GS_LOCK_WAIT_NS 2000000000ull /* a live holder adds one entry in microseconds */

static int gs_entry_cache[GS_MAX_ORDINALS]; /* entry + 1 per ordinal, 0 = not resolved yet */

int gs_region_entry_of_uuid(const char *uuid)
{
    for (int e = 0; e < GS_REGION_MAX_DEVICES; e++) {
        struct gs_region_device *d = gs_region_device(e);
        if (d == NULL) return -1;
        if (__atomic_load_n(&d->state, __ATOMIC_ACQUIRE) == GS_DEVICE_READY &&
            strncmp(d->uuid, uuid, sizeof d->uuid) == 0)
            return e;
    }
    return -1;
}

/* The lock holder is a thread id (the main thread's is the pid), so two threads of one process
 * exclude each other too; a holder that is gone (killed, or a thread of the image before exec)
 * is taken over. */
static int gs_device_lock(struct gs_region_header *h)
{
    int me = (int)syscall(SYS_gettid);
    struct timespec pause = {0, 100000};
    for (uint64_t waited = 0; waited < GS_LOCK_WAIT_NS; waited += (uint64_t)pause.tv_nsec) {
        int owner = 0;
        if (__atomic_compare_exchange_n(&h->device_lock, &owner, me, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) return 0;
        if (owner == me || gs_region_pid_dead(owner, 0)) { /* a dead (or pre-exec) holder */
            if (__atomic_compare_exchange_n(&h->device_lock, &owner, me, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
                return 0;
            continue;
        }
        nanosleep(&pause, NULL);
    }
    return -1;
}

/* Add the entry of uuid, seen as ordinal by this process (device_lock held). */
static int gs_device_add(struct gs_region_header *h, const char *uuid, int ordinal)
{
    int e = gs_region_entry_of_uuid(uuid);
    if (e >= 0) return e;
    struct gs_region_device *pick = NULL;
    if (ordinal < GS_REGION_MAX_DEVICES && gs_region_device(ordinal)->state == GS_DEVICE_FREE)
        pick = gs_region_device(ordinal);
    for (int i = 0; pick == NULL && i < GS_REGION_MAX_DEVICES; i++)
        if (gs_region_device(i)->state == GS_DEVICE_FREE) pick = gs_region_device(i);
    if (pick == NULL) return GS_DEV_CLOSED;
    snprintf(pick->uuid, sizeof pick->uuid, "%s", uuid);
    pick->limit = ordinal < GS_REGION_MAX_DEVICES ? h->index_limit[ordinal] : h->default_limit;
    pick->index = (uint32_t)ordinal;
    __atomic_store_n(&pick->state, GS_DEVICE_READY, __ATOMIC_RELEASE);
    return (int)(pick - gs_region_device(0));
}

/* Entry of uuid, seen as ordinal here, added if missing: entry, GS_DEV_CLOSED, or -2 (retry). */
static int gs_entry_resolve(struct gs_region_header *h, const char *uuid, int ordinal)
{
    int e = gs_region_entry_of_uuid(uuid);
    if (e >= 0) return e;
    if (h->flags & GS_REGION_UUID_LIST) {
        GS_LOG_ONCE(GS_LOG_ERROR, "device %d (%s) is not one of this container's GPUs (GPUSLICE_DEVICE_UUIDS); "
                    "allocations on it are refused (OUT_OF_MEMORY)", ordinal, uuid);
        return GS_DEV_CLOSED;
    }
    if (gs_device_lock(h) != 0) {
        GS_ERROR("region: device_lock held by live thread %d for 2 s; allocations on device %d are refused for now",
                 __atomic_load_n(&h->device_lock, __ATOMIC_RELAXED), ordinal);
        return -2;
    }
    e = gs_device_add(h, uuid, ordinal);
    __atomic_store_n(&h->device_lock, 0, __ATOMIC_RELEASE);
    if (e == GS_DEV_CLOSED)
        GS_ERROR("region: all %d device entries are taken; allocations on device %d (%s) are refused (OUT_OF_MEMORY)",
                 GS_REGION_MAX_DEVICES, ordinal, uuid);
    return e;
}

int gs_region_entry_for(const char *uuid, int ordinal)
{
    struct gs_region_header *h = gs_region();
    if (h == NULL || ordinal < 0) return -1;
    int e = gs_entry_resolve(h, uuid, ordinal);
    return e == -2 ? GS_DEV_CLOSED : e;
}

int gs_region_entry(int ordinal)
{
    struct gs_region_header *h = gs_region();
    if (h == NULL || ordinal < 0) return -1;
    if (ordinal < GS_MAX_ORDINALS) {
        int c = __atomic_load_n(&gs_entry_cache[ordinal], __ATOMIC_ACQUIRE);
        if (c) return c - 1;
    }
    char uuid[GS_REGION_UUID_LEN];
    int e = -2;
    if (gs_device_uuid(ordinal, uuid, sizeof uuid) == 0) e = gs_entry_resolve(h, uuid, ordinal);
    else GS_LOG_ONCE(GS_LOG_ERROR, "device %d: cannot read its UUID, so its cap cannot be found; allocations on it "
                     "are refused (OUT_OF_MEMORY)", ordinal);
    if (e == -2) return GS_DEV_CLOSED; /* not cached: may work on the next call */
    if (ordinal < GS_MAX_ORDINALS) __atomic_store_n(&gs_entry_cache[ordinal], e + 1, __ATOMIC_RELEASE);
    return e;
}

/* Opening the shared region: region/file.c opens or creates the file (no symlinks, checked
 * owner, mode and size, created complete); here the header is checked (magic, version, sizes, pid
 * namespace) and the region's limits kept (a later process with different env limits gets one
 * log line). The mapping is guarded against truncation (region/guard.c). A region that cannot be
 * used is an error the caller turns into a refusal: never a private cap per process.
 * Pid namespace: slots hold pids, which mean something in one namespace only. A region made by
 * the node agent (pid_ns 0) is claimed by its first user (CAS 0 -> own namespace). Every user
 * holds an OFD read lock on the region's first byte while it lives (the kernel drops it when the
 * process dies, in whatever namespace), so a process of another namespace that can take the
 * write lock knows nobody uses the region any more: a restarted container (new pid namespace)
 * takes over its previous instance's region, clearing its dead slots, while a second live
 * container on the same path is still refused. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "region.h"

static struct gs_region_header *gs_hdr;
static int gs_broken;

struct gs_region_header *gs_region(void)
{
    return __atomic_load_n(&gs_hdr, __ATOMIC_ACQUIRE);
}

int gs_region_broken(void)
{
    return __atomic_load_n(&gs_broken, __ATOMIC_RELAXED);
}

/* Inode of this process's pid namespace: pids in a region mean something only inside one. */
static uint64_t gs_pid_ns(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

static void gs_region_fill(void *map, const void *arg)
{
    const struct gs_config *cfg = arg;
    struct gs_region_header *h = map;
    memset(h, 0, sizeof *h);
    h->version = GS_REGION_VERSION;
    h->header_size = sizeof(struct gs_region_header);
    h->device_size = sizeof(struct gs_region_device);
    h->slot_size = sizeof(struct gs_region_slot);
    h->max_devices = GS_REGION_MAX_DEVICES;
    h->max_slots = GS_REGION_MAX_SLOTS;
    h->sm_limit = cfg->sm_limit;
    h->compute_mode = (int32_t)cfg->compute_mode;
    h->created_unix_s = (uint64_t)time(NULL);
    h->creator_pid = (int32_t)getpid();
    h->total_size = GS_REGION_SIZE;
    h->pid_ns = gs_pid_ns();
    h->default_limit = cfg->mem_limit_default;
    for (int i = 0; i < GS_REGION_MAX_DEVICES && i < GS_MAX_DEVICES; i++) {
        h->index_limit[i] = cfg->mem_limit[i];
        if (cfg->mem_limit[i]) h->device_count = (uint32_t)i + 1;
    }
    /* the node agent named the container's GPUs: their entries are fixed now, others refused */
    struct gs_region_device *d = (struct gs_region_device *)((char *)h + GS_REGION_DEVICES_OFFSET);
    for (int i = 0; i < cfg->device_uuid_count && i < GS_REGION_MAX_DEVICES; i++) {
        snprintf(d[i].uuid, sizeof d[i].uuid, "%s", cfg->device_uuids[i]);
        d[i].limit = cfg->mem_limit[i];
        d[i].index = (uint32_t)i;
        d[i].state = GS_DEVICE_READY;
    }
    if (cfg->device_uuid_count) h->flags |= GS_REGION_UUID_LIST;
    h->flags |= GS_REGION_PRIORITY | (cfg->priority ? GS_REGION_LOW_PRIORITY : 0);
    __atomic_store_n(&h->magic, GS_REGION_MAGIC, __ATOMIC_RELEASE);
}

static int gs_header_priority(const struct gs_region_header *h, int fallback)
{
    if (h == NULL || !(h->flags & GS_REGION_PRIORITY)) return fallback; /* a region of an older library */
    return (h->flags & GS_REGION_LOW_PRIORITY) ? 1 : 0;
}

int gs_region_priority(int fallback)
{
    return gs_header_priority(gs_region(), fallback);
}

static int gs_region_check(const struct gs_region_header *h, const char *path)
{
    if (h->magic != GS_REGION_MAGIC || h->version != GS_REGION_VERSION ||
        h->header_size != sizeof(struct gs_region_header) || h->slot_size != sizeof(struct gs_region_slot) ||
        h->device_size != sizeof(struct gs_region_device) || h->max_slots != GS_REGION_MAX_SLOTS ||
        h->max_devices != GS_REGION_MAX_DEVICES || h->total_size != GS_REGION_SIZE) {
        GS_ERROR("region %s: not a gpuslice region of layout version %u (magic %#llx, version %u); CUDA is "
                 "refused in this process; remove the file or set CUDA_DEVICE_MEMORY_SHARED_CACHE to another path",
                 path, GS_REGION_VERSION, (unsigned long long)h->magic, h->version);
        return -1;
    }
    return 0;
}

/* OFD lock on the region's first byte: 0 taken, 1 held by another user, -1 no locks here. */
static int gs_region_lock(int fd, short type)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    if (fcntl(fd, F_OFD_SETLK, &fl) == 0) return 0;
    return errno == EAGAIN || errno == EACCES ? 1 : -1;
}

/* Nobody else has the region open (we hold the write lock): every slot is a dead process's of
 * the namespace that used it before. Start afresh in ours; limits and device entries stay. */
static void gs_region_take_over(struct gs_region_header *h, uint64_t ns)
{
    memset((char *)h + GS_REGION_SLOTS_OFFSET, 0, (size_t)GS_REGION_MAX_SLOTS * sizeof(struct gs_region_slot));
    __atomic_store_n(&h->slot_hwm, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&h->device_lock, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&h->pid_ns, ns, __ATOMIC_RELEASE);
}

#define GS_ATTACH_WAIT_NS 500000000ull /* a racing take-over or claim settles in microseconds */

/* Make the region this namespace's (claim, or take over from a namespace nobody uses any more)
 * and hold the read lock that says we use it. 0 ok, -1 refused (logged). */
static int gs_region_attach(struct gs_region_header *h, int fd, const char *path)
{
    uint64_t ns = gs_pid_ns(), cur = 0;
    struct timespec pause = {0, 1000000};
    for (uint64_t waited = 0; waited < GS_ATTACH_WAIT_NS; waited += (uint64_t)pause.tv_nsec) {
        cur = __atomic_load_n(&h->pid_ns, __ATOMIC_ACQUIRE);
        if (cur == 0 && ns) {
            __atomic_compare_exchange_n(&h->pid_ns, &cur, ns, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
            continue; /* ours now, or a racer's: look again */
        }
        int got = gs_region_lock(fd, cur == ns || ns == 0 ? F_RDLCK : F_WRLCK);
        if (got < 0) break; /* no locks on this file system: only an equal namespace passes */
        if (got == 0 && (cur == ns || ns == 0)) {
            if (__atomic_load_n(&h->pid_ns, __ATOMIC_ACQUIRE) == cur) return 0;
            gs_region_lock(fd, F_UNLCK); /* taken over meanwhile */
            continue;
        }
        if (got == 0) { /* the write lock: nobody else has the region open */
            if (__atomic_load_n(&h->pid_ns, __ATOMIC_ACQUIRE) == cur) {
                gs_region_take_over(h, ns);
                GS_WARN("region %s: taken over from pid namespace pid:[%llu], where no process uses it any more "
                        "(a restarted container); its slots were cleared", path, (unsigned long long)cur);
            }
            gs_region_lock(fd, F_RDLCK); /* downgrade, atomically */
            continue;
        }
        nanosleep(&pause, NULL);
    }
    if (cur == ns || ns == 0) return 0; /* a process of our own namespace holds a write lock: it only hurts itself */
    GS_ERROR("region %s: used by live processes of another pid namespace (pid:[%llu], this is pid:[%llu]); its slots' "
             "pids mean nothing here, so CUDA is refused in this process; give each container its own region",
             path, (unsigned long long)cur, (unsigned long long)ns);
    return -1;
}

static void gs_region_compare(const struct gs_region_header *h, const struct gs_config *cfg, const char *path)
{
    for (int i = 0; i < GS_MAX_DEVICES && i < GS_REGION_MAX_DEVICES; i++) {
        if (h->index_limit[i] != cfg->mem_limit[i]) {
            GS_WARN("region %s: device %d limit is %llu bytes but this process's env says %llu; the region's "
                    "limits win (all processes sharing a region share one cap)", path, i,
                    (unsigned long long)h->index_limit[i], (unsigned long long)cfg->mem_limit[i]);
            return;
        }
    }
    if (h->sm_limit != cfg->sm_limit)
        GS_WARN("region %s: CUDA_DEVICE_SM_LIMIT is %d in the region but %d in this process's env; the region's wins",
                path, h->sm_limit, cfg->sm_limit);
    if (h->compute_mode != (int32_t)cfg->compute_mode)
        GS_WARN("region %s: GPUSLICE_COMPUTE_MODE is %s in the region but not in this process's env; the region's "
                "wins", path, h->compute_mode == GS_COMPUTE_WORK_CONSERVING ? "work-conserving" : "hard");
    if (gs_header_priority(h, cfg->priority) != cfg->priority)
        GS_WARN("region %s: CUDA_TASK_PRIORITY is %d in the region but %d in this process's env; the region's wins",
                path, !cfg->priority, cfg->priority);
}

int gs_region_open(const struct gs_config *cfg)
{
    const char *path = cfg->region_path;
    char why[320];
    int created = 0, fd = -1;
    struct gs_region_header *h =
        gs_shared_file_map_fd(path, GS_REGION_SIZE, 1, gs_region_fill, cfg, why, sizeof why, &created, &fd);
    if (h == NULL) {
        GS_ERROR("region %s: %s; CUDA is refused in this process (the cap must be shared, never private); fix or "
                 "remove the file, or set CUDA_DEVICE_MEMORY_SHARED_CACHE to a path in a directory of this container",
                 path, why);
        return -1;
    }
    if (gs_region_check(h, path) != 0 || gs_region_attach(h, fd, path) != 0) {
        munmap(h, GS_REGION_SIZE);
        close(fd);
        return -1;
    }
    /* fd stays open for the process's life: it carries the read lock that says we use the region */
    if (!created) gs_region_compare(h, cfg, path);
    gs_guard_add(h, GS_REGION_SIZE, &gs_broken);
    __atomic_store_n(&gs_hdr, h, __ATOMIC_RELEASE);
    return 0;
}

struct gs_region_device *gs_region_device(int e)
{
    struct gs_region_header *h = gs_region();
    if (h == NULL || e < 0 || e >= GS_REGION_MAX_DEVICES) return NULL;
    return (struct gs_region_device *)((char *)h + GS_REGION_DEVICES_OFFSET) + e;
}

struct gs_compute_device *gs_region_compute_device(int e)
{
    struct gs_region_device *d = gs_region_device(e);
    return d ? &d->compute : NULL;
}

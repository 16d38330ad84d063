/* Opening the shared region: region/file.c opens or creates the file (no symlinks, checked
 * owner, mode and size, created complete); here the header is checked (magic, version, sizes, pid
 * namespace) and the region's limits kept (a later process with different env limits gets one
 * log line). The mapping is guarded against truncation (region/guard.c). A region that cannot be
 * used is an error the caller turns into a refusal: never a private cap per process. */
#define _GNU_SOURCE
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
    __atomic_store_n(&h->magic, GS_REGION_MAGIC, __ATOMIC_RELEASE);
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
    uint64_t ns = gs_pid_ns();
    if (h->pid_ns && ns && h->pid_ns != ns) {
        GS_ERROR("region %s: created in another pid namespace (pid:[%llu], this is pid:[%llu]); its slots' pids mean "
                 "nothing here, so CUDA is refused in this process; give each pid namespace its own "
                 "CUDA_DEVICE_MEMORY_SHARED_CACHE", path, (unsigned long long)h->pid_ns, (unsigned long long)ns);
        return -1;
    }
    return 0;
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
}

int gs_region_open(const struct gs_config *cfg)
{
    const char *path = cfg->region_path;
    char why[320];
    int created = 0;
    struct gs_region_header *h =
        gs_shared_file_map(path, GS_REGION_SIZE, 1, gs_region_fill, cfg, why, sizeof why, &created);
    if (h == NULL) {
        GS_ERROR("region %s: %s; CUDA is refused in this process (the cap must be shared, never private); fix or "
                 "remove the file, or set CUDA_DEVICE_MEMORY_SHARED_CACHE to a path in a directory of this container",
                 path, why);
        return -1;
    }
    if (gs_region_check(h, path) != 0) {
        munmap(h, GS_REGION_SIZE);
        return -1;
    }
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

/* Opening the shared region: create + initialise under flock (held only for that; the kernel
 * drops the flock of a dead process), otherwise check magic/version/sizes and keep the
 * region's limits (a later process with different env limits gets one log line). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "region.h"

static struct gs_region_header *gs_hdr;

struct gs_region_header *gs_region(void)
{
    return __atomic_load_n(&gs_hdr, __ATOMIC_ACQUIRE);
}

static void gs_region_fill(struct gs_region_header *h, const struct gs_config *cfg)
{
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
    struct gs_region_device *d = (struct gs_region_device *)((char *)h + GS_REGION_DEVICES_OFFSET);
    for (int i = 0; i < GS_REGION_MAX_DEVICES && i < GS_MAX_DEVICES; i++) {
        d[i].limit = cfg->mem_limit[i];
        if (cfg->mem_limit[i]) h->device_count = (uint32_t)i + 1;
    }
    __atomic_store_n(&h->magic, GS_REGION_MAGIC, __ATOMIC_RELEASE);
}

static int gs_region_check(const struct gs_region_header *h, const char *path)
{
    if (h->magic != GS_REGION_MAGIC || h->version != GS_REGION_VERSION ||
        h->header_size != sizeof(struct gs_region_header) || h->slot_size != sizeof(struct gs_region_slot) ||
        h->device_size != sizeof(struct gs_region_device) || h->max_slots != GS_REGION_MAX_SLOTS) {
        GS_ERROR("region %s: not a gpuslice region of layout version %u (magic %#llx, version %u); "
                 "remove the file or set CUDA_DEVICE_MEMORY_SHARED_CACHE to another path",
                 path, GS_REGION_VERSION, (unsigned long long)h->magic, h->version);
        return -1;
    }
    return 0;
}

static void gs_region_compare(const struct gs_region_header *h, const struct gs_config *cfg, const char *path)
{
    const struct gs_region_device *d =
        (const struct gs_region_device *)((const char *)h + GS_REGION_DEVICES_OFFSET);
    for (int i = 0; i < GS_MAX_DEVICES; i++) {
        if (d[i].limit != cfg->mem_limit[i]) {
            GS_WARN("region %s: device %d limit is %llu bytes but this process's env says %llu; the region's "
                    "limits win (all processes sharing a region share one cap)", path, i,
                    (unsigned long long)d[i].limit, (unsigned long long)cfg->mem_limit[i]);
            return;
        }
    }
    if (h->sm_limit != cfg->sm_limit)
        GS_WARN("region %s: CUDA_DEVICE_SM_LIMIT is %d in the region but %d in this process's env; the region's wins",
                path, h->sm_limit, cfg->sm_limit);
}

int gs_region_open_private(const struct gs_config *cfg)
{
    void *map = mmap(NULL, GS_REGION_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) {
        GS_ERROR("private region: mmap: %s", strerror(errno));
        return -1;
    }
    gs_region_fill(map, cfg);
    __atomic_store_n(&gs_hdr, (struct gs_region_header *)map, __ATOMIC_RELEASE);
    return 0;
}

int gs_region_open(const struct gs_config *cfg)
{
    const char *path = cfg->region_path;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) {
        GS_ERROR("region %s: open: %s; check the directory exists and is writable",
                 path, strerror(errno));
        return -1;
    }
    void *map = MAP_FAILED;
    int rc = -1;
    if (flock(fd, LOCK_EX) != 0) {
        GS_ERROR("region %s: flock: %s", path, strerror(errno));
        goto out;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        GS_ERROR("region %s: fstat: %s", path, strerror(errno));
        goto out;
    }
    int fresh = st.st_size == 0;
    if (fresh && ftruncate(fd, GS_REGION_SIZE) != 0) {
        GS_ERROR("region %s: ftruncate to %u bytes: %s", path, GS_REGION_SIZE, strerror(errno));
        goto out;
    }
    if (!fresh && st.st_size != GS_REGION_SIZE) {
        GS_ERROR("region %s: size %lld, expected %u; remove the file or set CUDA_DEVICE_MEMORY_SHARED_CACHE to "
                 "another path", path, (long long)st.st_size, GS_REGION_SIZE);
        goto out;
    }
    map = mmap(NULL, GS_REGION_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        GS_ERROR("region %s: mmap: %s", path, strerror(errno));
        goto out;
    }
    struct gs_region_header *h = map;
    if (fresh || h->magic == 0) {
        gs_region_fill(h, cfg);
    } else if (gs_region_check(h, path) != 0) {
        goto out;
    } else {
        gs_region_compare(h, cfg, path);
    }
    __atomic_store_n(&gs_hdr, h, __ATOMIC_RELEASE);
    map = MAP_FAILED;
    rc = 0;
out:
    if (map != MAP_FAILED) munmap(map, GS_REGION_SIZE);
    flock(fd, LOCK_UN);
    close(fd);
    return rc;
}

int gs_region_device_count(void)
{
    struct gs_region_header *h = gs_region();
    return h ? (int)h->device_count : 0;
}

struct gs_region_device *gs_region_device(int dev)
{
    struct gs_region_header *h = gs_region();
    if (h == NULL || dev < 0 || dev >= GS_REGION_MAX_DEVICES) return NULL;
    return (struct gs_region_device *)((char *)h + GS_REGION_DEVICES_OFFSET) + dev;
}

struct gs_compute_device *gs_region_compute_device(int dev)
{
    struct gs_region_device *d = gs_region_device(dev);
    return d ? &d->compute : NULL;
}

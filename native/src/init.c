/* Initialisation order: config (env, once) -> real driver pointers -> region (only when a limit
 * is set) -> compute (gs_compute_init, if built). cuInit is hooked always: with an invalid env
 * it returns CUDA_ERROR_INVALID_VALUE (never runs unlimited); after a successful real cuInit
 * the device UUIDs are recorded in the region for NVML mapping and for the node agent. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "hooks.h"
#include "init.h"
#include "log.h"
#include "mem/account.h"
#include "region.h"

#if defined(__has_include)
#if __has_include("compute/compute.h")
#include "compute/compute.h"
#define GS_HAVE_COMPUTE 1
#endif
#endif

static pthread_once_t gs_init_once = PTHREAD_ONCE_INIT;
static int gs_ready_flag;

static void gs_init_run(void)
{
    const struct gs_config *cfg = gs_config_get();
    if (!cfg->valid) return;
    if (!cfg->mem_limited && cfg->sm_limit == 0) return;
    if (gs_region_open(cfg) != 0) {
        /* Never run unlimited because of a missing or foreign file: cap this process alone. */
        if (gs_region_open_private(cfg) != 0) return;
        GS_ERROR("region %s unusable (see above): enforcing the limits for this process alone, "
                 "so processes of this container do not share one cap; fix the path to share it",
                 cfg->region_path);
    }
#ifdef GS_HAVE_COMPUTE
    if (gs_compute_init() != 0) GS_WARN("compute: initialisation failed; kernels run without a compute limit");
#endif
    __atomic_store_n(&gs_ready_flag, cfg->mem_limited, __ATOMIC_RELEASE);
}

int gs_init(void)
{
    pthread_once(&gs_init_once, gs_init_run);
    return __atomic_load_n(&gs_ready_flag, __ATOMIC_ACQUIRE);
}

int gs_ready(void)
{
    if (__builtin_expect(__atomic_load_n(&gs_ready_flag, __ATOMIC_ACQUIRE), 1)) return 1;
    return gs_init();
}

static void gs_init_record_uuids(void)
{
    PFN_cuDeviceGetCount_v2000 count_fn = gs_real_cuDeviceGetCount;
    PFN_cuDeviceGet_v2000 get_fn = gs_real_cuDeviceGet;
    PFN_cuDeviceGetUuid_v11040 uuid_fn = gs_real_cuDeviceGetUuid_v2;
    int n = 0;
    if (count_fn == NULL || get_fn == NULL || uuid_fn == NULL || count_fn(&n) != CUDA_SUCCESS) return;
    for (int i = 0; i < n && i < GS_REGION_MAX_DEVICES; i++) {
        struct gs_region_device *d = gs_region_device(i);
        CUdevice dev;
        CUuuid u;
        if (d == NULL || get_fn(&dev, i) != CUDA_SUCCESS || uuid_fn(&u, dev) != CUDA_SUCCESS) continue;
        const unsigned char *b = (const unsigned char *)u.bytes;
        char text[GS_REGION_UUID_LEN];
        snprintf(text, sizeof text,
                 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
                 b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
        if (d->uuid[0] == '\0') memcpy(d->uuid, text, sizeof text); /* same container, same UUIDs */
    }
}

CUresult gs_init_cuInit(unsigned int flags)
{
    const struct gs_config *cfg = gs_config_get();
    if (!cfg->valid) return CUDA_ERROR_INVALID_VALUE; /* the one log line came from config.c */
    PFN_cuInit_v2000 real = GS_REAL(cuInit);
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    CUresult rc = real(flags);
    if (rc == CUDA_SUCCESS && gs_init() && gs_region() != NULL) gs_init_record_uuids();
    return rc;
}

__attribute__((destructor)) static void gs_fini(void)
{
    gs_region_release_self();
}

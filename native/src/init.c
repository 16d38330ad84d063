/* Initialisation order: config (env, once) -> real driver pointers -> region (only when a limit
 * is set) -> compute (gs_compute_init, if built). cuInit is hooked always: with an invalid env
 * it returns CUDA_ERROR_INVALID_VALUE, and with a region that cannot be opened or shared
 * CUDA_ERROR_OPERATING_SYSTEM (never runs unlimited, never with a cap of its own: the reason was
 * logged by region/). After a successful real cuInit every visible GPU gets its region entry
 * (UUID and limit), for NVML mapping and for the node agent. */
#define _GNU_SOURCE
#include <pthread.h>

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
static int gs_region_refused; /* limits are set but the region cannot be used: CUDA is refused */

static void gs_init_run(void)
{
    const struct gs_config *cfg = gs_config_get();
    if (!cfg->valid) return;
    if (!cfg->mem_limited && cfg->sm_limit == 0) return;
    if (gs_region_open(cfg) != 0) {
        __atomic_store_n(&gs_region_refused, 1, __ATOMIC_RELEASE);
        return;
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

/* Give every GPU this process sees its region entry now, so the node agent and `gpuslice top`
 * see UUIDs before the first allocation. */
static void gs_init_record_devices(void)
{
    PFN_cuDeviceGetCount_v2000 count_fn = gs_real_cuDeviceGetCount;
    int n = 0;
    if (count_fn == NULL || count_fn(&n) != CUDA_SUCCESS) return;
    for (int i = 0; i < n; i++) gs_region_entry(i);
}

CUresult gs_init_cuInit(unsigned int flags)
{
    const struct gs_config *cfg = gs_config_get();
    if (!cfg->valid) return CUDA_ERROR_INVALID_VALUE; /* the one log line came from config.c */
    PFN_cuInit_v2000 real = GS_REAL(cuInit);
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    gs_init();
    if (__atomic_load_n(&gs_region_refused, __ATOMIC_ACQUIRE)) return CUDA_ERROR_OPERATING_SYSTEM;
    CUresult rc = real(flags);
    if (rc == CUDA_SUCCESS && gs_region() != NULL) gs_init_record_devices();
    return rc;
}

__attribute__((destructor)) static void gs_fini(void)
{
    gs_region_release_self();
}

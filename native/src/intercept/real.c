/* The real driver: libcuda.so.1 / libnvidia-ml.so.1 found with dlopen at first use (never
 * linked), every pointer of hooks.def + real.def resolved once with glibc's dlsym.
 * Missing library or symbol: the pointer stays NULL (callers return an error code). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>

#include "intercept.h"
#include "log.h"
#include "real.h"

#define HOOK_EACH(name, handler, pfn) pfn gs_real_##name;
#include "hooks_each.h"
#define REAL(name, pfn) pfn gs_real_##name;
#define REAL_NVML REAL
#include "../real.def"
#undef REAL
#undef REAL_NVML

static pthread_once_t gs_cuda_once = PTHREAD_ONCE_INIT;
static pthread_once_t gs_nvml_once = PTHREAD_ONCE_INIT;
static void *gs_cuda_handle;
static void *gs_nvml_handle;

static void *gs_open(const char *soname)
{
    void *h = dlopen(soname, RTLD_NOW | RTLD_GLOBAL);
    if (h == NULL) {
        const char *e = dlerror();
        GS_WARN("dlopen %s: %s; calls pass through without limits or fail with NOT_FOUND", soname,
                e ? e : "not found");
    }
    return h;
}

static void gs_cuda_resolve(void)
{
    gs_intercept_enter();
    gs_cuda_handle = gs_open("libcuda.so.1");
    if (gs_cuda_handle != NULL) {
#define HOOK(name, handler, pfn) gs_real_##name = (pfn)gs_real_dlsym(gs_cuda_handle, #name);
#define HOOK_ALWAYS HOOK
#define HOOK_COMPUTE HOOK
#define HOOK_SYNC HOOK
#define HOOK_NVML(name, handler, pfn)
#include "../hooks.def"
#undef HOOK
#undef HOOK_ALWAYS
#undef HOOK_COMPUTE
#undef HOOK_SYNC
#undef HOOK_NVML
#define REAL(name, pfn) gs_real_##name = (pfn)gs_real_dlsym(gs_cuda_handle, #name);
#define REAL_NVML(name, pfn)
#include "../real.def"
#undef REAL
#undef REAL_NVML
    }
    gs_intercept_leave();
}

static void gs_nvml_resolve(void)
{
    gs_intercept_enter();
    gs_nvml_handle = gs_open("libnvidia-ml.so.1");
    if (gs_nvml_handle != NULL) {
#define HOOK(name, handler, pfn)
#define HOOK_ALWAYS HOOK
#define HOOK_COMPUTE HOOK
#define HOOK_SYNC HOOK
#define HOOK_NVML(name, handler, pfn) gs_real_##name = (pfn)gs_real_dlsym(gs_nvml_handle, #name);
#include "../hooks.def"
#undef HOOK
#undef HOOK_ALWAYS
#undef HOOK_COMPUTE
#undef HOOK_SYNC
#undef HOOK_NVML
#define REAL(name, pfn)
#define REAL_NVML(name, pfn) gs_real_##name = (pfn)gs_real_dlsym(gs_nvml_handle, #name);
#include "../real.def"
#undef REAL
#undef REAL_NVML
    }
    gs_intercept_leave();
}

int gs_real_cuda_load(void)
{
    pthread_once(&gs_cuda_once, gs_cuda_resolve);
    return gs_cuda_handle ? 0 : -1;
}

int gs_real_nvml_load(void)
{
    pthread_once(&gs_nvml_once, gs_nvml_resolve);
    return gs_nvml_handle ? 0 : -1;
}

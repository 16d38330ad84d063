/* Typed pointers to the real driver and NVML functions: gs_real_<symbol> (PFN_<name>_v<N>).
 * Hooked symbols come from hooks.def, the others from real.def. libcuda.so.1 is dlopen'ed and
 * all CUDA pointers resolved once (gs_real_cuda_load, pthread_once); NVML separately, only when
 * an NVML entry point is used. Never call a pointer without checking it: a missing symbol stays
 * NULL and the caller returns CUDA_ERROR_NOT_FOUND / NVML_ERROR_FUNCTION_NOT_FOUND. */
#ifndef GS_REAL_H
#define GS_REAL_H

#include <cuda.h>
#include <cudaTypedefs.h>

#include "nvml_types.h"

#define HOOK_EACH(name, handler, pfn) extern pfn gs_real_##name;
#include "hooks_each.h"

#define REAL(name, pfn) extern pfn gs_real_##name;
#define REAL_NVML REAL
#include "../real.def"
#undef REAL
#undef REAL_NVML

/* Load libcuda.so.1 and resolve every CUDA pointer once. 0 ok, -1 if the library is missing. */
int gs_real_cuda_load(void);
/* Same for libnvidia-ml.so.1. */
int gs_real_nvml_load(void);
/* glibc's dlsym (never our interposed one). */
void *gs_real_dlsym(void *handle, const char *name);

/* Make sure the CUDA pointers are loaded; evaluates to the pointer (possibly NULL). */
#define GS_REAL(name) (gs_real_cuda_load(), gs_real_##name)

#endif

/* cuGetProcAddress / cuGetProcAddress_v2: ask the driver first (it honours the requested CUDA
 * version and the per-thread-stream flag), then swap the answer for our handler only if it is
 * the real address of an exported ABI variant we hook (and that hook's kind is active).
 * LIBCUDA_LOG_LEVEL=4 logs every substitution (troubleshooting, docs/shim.md). */
#include <string.h>

#include "hooks.h"
#include "intercept.h"
#include "log.h"

static void *gs_procaddr_swap(const char *symbol, void *fn, int version, cuuint64_t flags)
{
    void *out = gs_hook_substitute_cuda(fn);
    if (gs_log_enabled(GS_LOG_DEBUG) && symbol != NULL) {
        if (out != fn) GS_DEBUG("cuGetProcAddress(%s, %d, %llu): gpuslice handler", symbol, version,
                                (unsigned long long)flags);
        else if (gs_hook_by_name(symbol) != NULL || strncmp(symbol, "cuMem", 5) == 0)
            GS_DEBUG("cuGetProcAddress(%s, %d, %llu): driver's own function", symbol, version,
                     (unsigned long long)flags);
    }
    return out;
}

CUresult gs_procaddr_v1(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    PFN_cuGetProcAddress_v11030 real = GS_REAL(cuGetProcAddress);
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    CUresult rc = real(symbol, pfn, cudaVersion, flags);
    if (rc == CUDA_SUCCESS && pfn != NULL) *pfn = gs_procaddr_swap(symbol, *pfn, cudaVersion, flags);
    return rc;
}

CUresult gs_procaddr_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                        CUdriverProcAddressQueryResult *symbolStatus)
{
    PFN_cuGetProcAddress_v12000 real = GS_REAL(cuGetProcAddress_v2);
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    CUresult rc = real(symbol, pfn, cudaVersion, flags, symbolStatus);
    if (rc == CUDA_SUCCESS && pfn != NULL) *pfn = gs_procaddr_swap(symbol, *pfn, cudaVersion, flags);
    return rc;
}

/* Virtual memory management: cuMemCreate charges the physical size rounded to the device's
 * minimum allocation granularity (queried once per device); cuMemRelease releases it. Host
 * locations (not device memory) pass through. */
#include "init.h"
#include "mem/account.h"
#include "mem/mem.h"
#include "region.h"

static uint64_t gs_vmm_gran[GS_MAX_ORDINALS];

static uint64_t gs_vmm_granularity(int dev, const CUmemAllocationProp *prop)
{
    uint64_t g = dev < GS_MAX_ORDINALS ? __atomic_load_n(&gs_vmm_gran[dev], __ATOMIC_RELAXED) : 0;
    if (g) return g;
    PFN_cuMemGetAllocationGranularity_v10020 q = gs_real_cuMemGetAllocationGranularity;
    size_t out = 0;
    if (q == NULL || q(&out, prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || out == 0) return GS_ALLOC_GRANULARITY;
    if (dev < GS_MAX_ORDINALS) __atomic_store_n(&gs_vmm_gran[dev], (uint64_t)out, __ATOMIC_RELAXED);
    return out;
}

CUresult gs_vmm_create(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                       unsigned long long flags)
{
    PFN_cuMemCreate_v10020 real = GS_REAL(cuMemCreate);
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    if (prop == NULL || size == 0 || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || !gs_ready() ||
        prop->location.id < 0)
        return real(handle, size, prop, flags);
    int dev = prop->location.id;
    uint64_t charge = gs_round_up(size, gs_vmm_granularity(dev, prop));
    int r = gs_mem_reserve("cuMemCreate", dev, charge);
    if (r < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = real(handle, size, prop, flags);
    if (r == 0) return rc;
    if (rc != CUDA_SUCCESS) {
        gs_account_cancel(dev, charge);
        return rc;
    }
    gs_account_commit(dev, charge);
    gs_track_put(GS_TRACK_VMM, (uint64_t)*handle, dev, charge);
    return rc;
}

CUresult gs_vmm_release(CUmemGenericAllocationHandle handle)
{
    PFN_cuMemRelease_v10020 real = GS_REAL(cuMemRelease);
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    int dev;
    uint64_t bytes;
    if (!gs_ready() || gs_track_take(GS_TRACK_VMM, (uint64_t)handle, &dev, &bytes) != 0) return real(handle);
    CUresult rc = real(handle);
    if (rc == CUDA_SUCCESS) gs_account_release(dev, bytes);
    else gs_track_put(GS_TRACK_VMM, (uint64_t)handle, dev, bytes);
    return rc;
}

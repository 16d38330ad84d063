/* Virtual totals: cuMemGetInfo_v2, cuDeviceTotalMem_v2 and NVML memory info report the slice
 * (total = limit, used = the container's accounted use, free = limit - used, never more than the
 * real free; 0 when this process cannot allocate: no free slot, truncated region). NVML devices
 * are matched by UUID. Dead processes' slots are swept (at most every 250 ms) before reading.
 * Devices without a limit report the real numbers. */
#include "init.h"
#include "mem/account.h"
#include "mem/mem.h"
#include "mem/nvml_util.h"
#include "mem/pools.h"
#include "region.h"

CUresult gs_info_mem_get_info(size_t *free_bytes, size_t *total_bytes)
{
    PFN_cuMemGetInfo_v3020 real = GS_REAL(cuMemGetInfo_v2);
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    CUresult rc = real(free_bytes, total_bytes);
    int dev = rc == CUDA_SUCCESS ? gs_mem_current_device() : -1;
    uint64_t limit = dev >= 0 ? gs_account_limit(dev) : 0;
    if (limit == 0) return rc;
    gs_pool_refresh_all();
    gs_ctx_reconcile(dev, 1);
    gs_region_reclaim(0); /* a killed process's bytes leave the numbers within 250 ms */
    uint64_t used = gs_account_total(dev);
    uint64_t free_virtual = used < limit ? limit - used : 0;
    if (gs_region_no_slot() || gs_region_broken()) free_virtual = 0; /* this process cannot allocate */
    if (free_bytes && free_virtual < *free_bytes) *free_bytes = (size_t)free_virtual;
    if (total_bytes && limit < *total_bytes) *total_bytes = (size_t)limit;
    return rc;
}

CUresult gs_info_device_total_mem(size_t *bytes, CUdevice dev)
{
    PFN_cuDeviceTotalMem_v3020 real = GS_REAL(cuDeviceTotalMem_v2);
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    CUresult rc = real(bytes, dev);
    if (rc != CUDA_SUCCESS || bytes == NULL || !gs_ready()) return rc;
    uint64_t limit = gs_account_limit(dev);
    if (limit && limit < *bytes) *bytes = (size_t)limit;
    return rc;
}

/* The region entry of an NVML device, by its UUID (any GPU of the container, even one this
 * process does not see); a GPU without an entry yet gets the one of the CUDA ordinal it would
 * have here (nvidia-smi in a fresh container calls no CUDA at all); -1 if none. */
static int gs_nvml_entry(nvmlDevice_t device)
{
    char uuid[96];
    if (gs_real_nvmlDeviceGetUUID == NULL || gs_real_nvmlDeviceGetUUID(device, uuid, sizeof uuid) != NVML_SUCCESS)
        return -1;
    int e = gs_region_entry_of_uuid(uuid);
    if (e < 0) e = gs_region_entry_for(uuid, gs_nvml_to_cuda(device)); /* nvidia-smi: no CUDA call */
    return e < GS_REGION_MAX_DEVICES ? e : -1;
}

/* Slice numbers for an NVML device: 0 and fills total/used/free, -1 to report the real ones. */
static int gs_nvml_slice(nvmlDevice_t device, unsigned long long real_free, unsigned long long *total,
                         unsigned long long *used, unsigned long long *free_out)
{
    if (!gs_ready()) return -1;
    int e = gs_nvml_entry(device);
    uint64_t limit = gs_account_limit_entry(e);
    if (limit == 0) return -1;
    gs_region_reclaim(0);
    uint64_t u = gs_account_total_entry(e);
    uint64_t f = u < limit ? limit - u : 0;
    *total = limit;
    *used = u;
    *free_out = f < real_free ? f : real_free;
    return 0;
}

nvmlReturn_t gs_nvml_memory_info(nvmlDevice_t device, nvmlMemory_t *memory)
{
    gs_real_nvml_load();
    PFN_nvmlDeviceGetMemoryInfo real = gs_real_nvmlDeviceGetMemoryInfo;
    if (real == NULL) return NVML_ERROR_FUNCTION_NOT_FOUND;
    nvmlReturn_t rc = real(device, memory);
    if (rc == NVML_SUCCESS && memory) gs_nvml_slice(device, memory->free, &memory->total, &memory->used, &memory->free);
    return rc;
}

nvmlReturn_t gs_nvml_memory_info_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    gs_real_nvml_load();
    PFN_nvmlDeviceGetMemoryInfo_v2 real = gs_real_nvmlDeviceGetMemoryInfo_v2;
    if (real == NULL) return NVML_ERROR_FUNCTION_NOT_FOUND;
    nvmlReturn_t rc = real(device, memory);
    if (rc == NVML_SUCCESS && memory &&
        gs_nvml_slice(device, memory->free, &memory->total, &memory->used, &memory->free) == 0)
        memory->reserved = 0; /* the slice's used already includes what the container holds */
    return rc;
}

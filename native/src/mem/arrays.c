/* CUDA arrays and mipmapped arrays: reserve an estimate from the descriptor, create, then
 * settle on the driver's real size (cuArrayGetMemoryRequirements / cuMipmappedArray...),
 * rounded to 2 MiB; destroy releases the charge. */
#include "init.h"
#include "mem/account.h"
#include "mem/mem.h"

static uint64_t gs_format_bytes(CUarray_format f)
{
    switch ((int)f) {
    case CU_AD_FORMAT_UNSIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_HALF: return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32: case CU_AD_FORMAT_SIGNED_INT32: case CU_AD_FORMAT_FLOAT: return 4;
    default: return 4; /* estimate only: the real size is settled after creation */
    }
}

static uint64_t gs_dim(size_t x) { return x ? (uint64_t)x : 1; }

/* Move a reservation of `guess` to `actual` bytes. 0 ok (actual pending), -1 over (nothing pending). */
static int gs_resettle(const char *fn, int dev, uint64_t guess, uint64_t actual)
{
    if (actual > guess && gs_mem_reserve(fn, dev, actual - guess) < 0) {
        gs_account_cancel(dev, guess);
        return -1;
    }
    if (actual < guess) gs_account_cancel(dev, guess - actual);
    return 0;
}

static uint64_t gs_array_real_size(CUarray a, int dev, uint64_t guess)
{
    PFN_cuArrayGetMemoryRequirements_v11060 q = gs_real_cuArrayGetMemoryRequirements;
    CUDA_ARRAY_MEMORY_REQUIREMENTS req;
    if (q == NULL || q(&req, a, (CUdevice)dev) != CUDA_SUCCESS || req.size == 0) return guess;
    return gs_round_up(req.size, GS_ALLOC_GRANULARITY);
}

static CUresult gs_array_finish(const char *fn, CUresult rc, CUarray *arr, int dev, uint64_t guess)
{
    if (rc != CUDA_SUCCESS) {
        gs_account_cancel(dev, guess);
        return rc;
    }
    uint64_t actual = gs_array_real_size(*arr, dev, guess);
    if (gs_resettle(fn, dev, guess, actual) != 0) {
        PFN_cuArrayDestroy_v2000 destroy = gs_real_cuArrayDestroy;
        if (destroy) destroy(*arr);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    gs_account_commit(dev, actual);
    gs_track_put(GS_TRACK_ARRAY, (uint64_t)(uintptr_t)*arr, dev, actual);
    return rc;
}

CUresult gs_array_create(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *d)
{
    PFN_cuArrayCreate_v3020 real = GS_REAL(cuArrayCreate_v2);
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    int dev = d ? gs_mem_current_device() : -1;
    if (dev < 0) return real(pHandle, d);
    uint64_t guess = gs_round_up(gs_dim(d->Width) * gs_dim(d->Height) * gs_format_bytes(d->Format) *
                                 gs_dim(d->NumChannels), GS_ALLOC_GRANULARITY);
    int r = gs_mem_reserve("cuArrayCreate_v2", dev, guess);
    if (r < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = real(pHandle, d);
    return r ? gs_array_finish("cuArrayCreate_v2", rc, pHandle, dev, guess) : rc;
}

CUresult gs_array3d_create(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    PFN_cuArray3DCreate_v3020 real = GS_REAL(cuArray3DCreate_v2);
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    int dev = d ? gs_mem_current_device() : -1;
    if (dev < 0) return real(pHandle, d);
    uint64_t guess = gs_round_up(gs_dim(d->Width) * gs_dim(d->Height) * gs_dim(d->Depth) *
                                 gs_format_bytes(d->Format) * gs_dim(d->NumChannels), GS_ALLOC_GRANULARITY);
    int r = gs_mem_reserve("cuArray3DCreate_v2", dev, guess);
    if (r < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = real(pHandle, d);
    return r ? gs_array_finish("cuArray3DCreate_v2", rc, pHandle, dev, guess) : rc;
}

CUresult gs_array_destroy(CUarray hArray)
{
    PFN_cuArrayDestroy_v2000 real = GS_REAL(cuArrayDestroy);
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    int dev;
    uint64_t bytes;
    if (!gs_ready() || gs_track_take(GS_TRACK_ARRAY, (uint64_t)(uintptr_t)hArray, &dev, &bytes) != 0) return real(hArray);
    CUresult rc = real(hArray);
    if (rc == CUDA_SUCCESS) gs_account_release(dev, bytes);
    else gs_track_put(GS_TRACK_ARRAY, (uint64_t)(uintptr_t)hArray, dev, bytes);
    return rc;
}

CUresult gs_mipmap_create(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned int numLevels)
{
    PFN_cuMipmappedArrayCreate_v5000 real = GS_REAL(cuMipmappedArrayCreate);
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    int dev = d ? gs_mem_current_device() : -1;
    if (dev < 0) return real(pHandle, d, numLevels);
    /* all levels together are at most twice the base level */
    uint64_t base = gs_dim(d->Width) * gs_dim(d->Height) * gs_dim(d->Depth) * gs_format_bytes(d->Format) *
                    gs_dim(d->NumChannels);
    uint64_t guess = gs_round_up(numLevels > 1 ? 2 * base : base, GS_ALLOC_GRANULARITY);
    int r = gs_mem_reserve("cuMipmappedArrayCreate", dev, guess);
    if (r < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = real(pHandle, d, numLevels);
    if (r == 0) return rc;
    if (rc != CUDA_SUCCESS) {
        gs_account_cancel(dev, guess);
        return rc;
    }
    uint64_t actual = guess;
    PFN_cuMipmappedArrayGetMemoryRequirements_v11060 q = gs_real_cuMipmappedArrayGetMemoryRequirements;
    CUDA_ARRAY_MEMORY_REQUIREMENTS req;
    if (q != NULL && q(&req, *pHandle, (CUdevice)dev) == CUDA_SUCCESS && req.size)
        actual = gs_round_up(req.size, GS_ALLOC_GRANULARITY);
    if (gs_resettle("cuMipmappedArrayCreate", dev, guess, actual) != 0) {
        PFN_cuMipmappedArrayDestroy_v5000 destroy = gs_real_cuMipmappedArrayDestroy;
        if (destroy) destroy(*pHandle);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    gs_account_commit(dev, actual);
    gs_track_put(GS_TRACK_MIPMAP, (uint64_t)(uintptr_t)*pHandle, dev, actual);
    return rc;
}

CUresult gs_mipmap_destroy(CUmipmappedArray h)
{
    PFN_cuMipmappedArrayDestroy_v5000 real = GS_REAL(cuMipmappedArrayDestroy);
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    int dev;
    uint64_t bytes;
    if (!gs_ready() || gs_track_take(GS_TRACK_MIPMAP, (uint64_t)(uintptr_t)h, &dev, &bytes) != 0) return real(h);
    CUresult rc = real(h);
    if (rc == CUDA_SUCCESS) gs_account_release(dev, bytes);
    else gs_track_put(GS_TRACK_MIPMAP, (uint64_t)(uintptr_t)h, dev, bytes);
    return rc;
}

/* Plain, pitched and managed allocations and cuMemFree: reserve the rounded size, call the
 * driver, commit or cancel, remember the pointer so the free releases exactly that charge. */
#include "init.h"
#include "log.h"
#include "mem/account.h"
#include "mem/mem.h"
#include "mem/pools.h"
#include "region.h"

int gs_mem_current_device(void)
{
    if (!gs_ready()) return -1;
    PFN_cuCtxGetDevice_v2000 get = gs_real_cuCtxGetDevice;
    CUdevice dev;
    if (get == NULL || get(&dev) != CUDA_SUCCESS) return -1;
    return (int)dev;
}

int gs_mem_stream_device(CUstream stream, int ptsz)
{
    if (!gs_ready()) return -1;
    if (stream == NULL || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD) return gs_mem_current_device();
    PFN_cuStreamGetCtx_v9020 getctx = ptsz ? gs_real_cuStreamGetCtx_ptsz : gs_real_cuStreamGetCtx;
    CUcontext ctx;
    if (getctx == NULL || getctx(stream, &ctx) != CUDA_SUCCESS) return gs_mem_current_device();
    PFN_cuCtxPushCurrent_v4000 push = gs_real_cuCtxPushCurrent_v2;
    PFN_cuCtxPopCurrent_v4000 pop = gs_real_cuCtxPopCurrent_v2;
    if (push == NULL || pop == NULL || push(ctx) != CUDA_SUCCESS) return gs_mem_current_device();
    int dev = gs_mem_current_device();
    CUcontext popped;
    pop(&popped);
    return dev;
}

/* Refusals are logged in full for the first GS_REFUSALS_LOGGED of a process, then only at
 * debug level (an application probing for the cap must not flood stderr). */
#define GS_REFUSALS_LOGGED 3

void gs_mem_refuse(const char *fn, const char *file, int line, int dev, uint64_t bytes)
{
    static unsigned refusals;
    unsigned n = __atomic_fetch_add(&refusals, 1, __ATOMIC_RELAXED);
    int level = n < GS_REFUSALS_LOGGED ? GS_LOG_WARN : GS_LOG_DEBUG;
    if (!gs_log_enabled(level)) return;
    double mib = 1024.0 * 1024.0, gib = mib * 1024.0;
    const char *more = n + 1 == GS_REFUSALS_LOGGED ? "; further refusals are logged at LIBCUDA_LOG_LEVEL=4" : "";
    const char *why = gs_region_broken() ? "the region file was truncated (see above)"
                      : gs_region_entry(dev) == GS_DEV_CLOSED ? "this GPU cannot be capped here (see above)"
                      : gs_region_no_slot() ? "every process slot of the region is taken (see above)"
                                            : NULL;
    if (why != NULL)
        gs_log_write(level, file, line, "%s: %.0f MiB on device %d refused: %s -> OUT_OF_MEMORY%s", fn,
                     (double)bytes / mib, dev, why, more);
    else
        gs_log_write(level, file, line, "%s: %.0f MiB over limit (%.2f/%.2f GiB used on device %d) -> OUT_OF_MEMORY%s",
                     fn, (double)bytes / mib, (double)gs_account_total(dev) / gib, (double)gs_account_limit(dev) / gib,
                     dev, more);
}

/* Within this much of the cap, driver memory outside allocations (lazily loaded modules) is
 * re-read before every check instead of every 100 ms, so it cannot push the process over. */
#define GS_NEAR_LIMIT_BYTES (256ull << 20)

int gs_mem_reserve(const char *fn, int dev, uint64_t bytes)
{
    uint64_t limit = gs_account_limit(dev);
    gs_ctx_reconcile(dev, limit != 0 && gs_account_total(dev) + bytes + GS_NEAR_LIMIT_BYTES > limit);
    int v = gs_account_reserve(dev, bytes);
    if (v == GS_OVER) { /* pools may have given memory back since they were last read */
        gs_pool_refresh_all();
        v = gs_account_reserve(dev, bytes);
    }
    if (v == GS_OVER) {
        gs_mem_refuse(fn, GS_FILE, __LINE__, dev, bytes);
        return -1;
    }
    return v == GS_OK ? 1 : 0;
}

/* Commit a reserved charge for key (or cancel it if the driver failed). */
static void gs_mem_settle(CUresult rc, int kind, uint64_t key, int dev, uint64_t charge)
{
    if (rc != CUDA_SUCCESS) {
        gs_account_cancel(dev, charge);
        return;
    }
    gs_account_commit(dev, charge);
    if (gs_track_put(kind, key, dev, charge) != 0) {
        GS_LOG_ONCE(GS_LOG_ERROR, "out of host memory tracking allocations; frees of untracked pointers stay charged");
    }
}

CUresult gs_mem_alloc(CUdeviceptr *dptr, size_t bytesize)
{
    PFN_cuMemAlloc_v3020 real = GS_REAL(cuMemAlloc_v2);
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    int dev = bytesize ? gs_mem_current_device() : -1;
    if (dev < 0) return real(dptr, bytesize);
    uint64_t charge = gs_round_up(bytesize, GS_ALLOC_GRANULARITY);
    int r = gs_mem_reserve("cuMemAlloc_v2", dev, charge);
    if (r < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = real(dptr, bytesize);
    if (r > 0) gs_mem_settle(rc, GS_TRACK_PTR, rc == CUDA_SUCCESS ? (uint64_t)*dptr : 0, dev, charge);
    return rc;
}

CUresult gs_mem_alloc_managed(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    PFN_cuMemAllocManaged_v6000 real = GS_REAL(cuMemAllocManaged);
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    int dev = bytesize ? gs_mem_current_device() : -1;
    if (dev < 0) return real(dptr, bytesize, flags);
    uint64_t charge = gs_round_up(bytesize, GS_ALLOC_GRANULARITY);
    int r = gs_mem_reserve("cuMemAllocManaged", dev, charge);
    if (r < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = real(dptr, bytesize, flags);
    if (r > 0) gs_mem_settle(rc, GS_TRACK_PTR, rc == CUDA_SUCCESS ? (uint64_t)*dptr : 0, dev, charge);
    return rc;
}

CUresult gs_mem_alloc_pitch(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                            unsigned int ElementSizeBytes)
{
    PFN_cuMemAllocPitch_v3020 real = GS_REAL(cuMemAllocPitch_v2);
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    int dev = WidthInBytes && Height ? gs_mem_current_device() : -1;
    if (dev < 0) return real(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    /* reserve an estimate (pitch aligned to 512 bytes), then settle on the driver's real pitch */
    uint64_t guess = gs_round_up(gs_round_up(WidthInBytes, 512) * (uint64_t)Height, GS_ALLOC_GRANULARITY);
    int r = gs_mem_reserve("cuMemAllocPitch_v2", dev, guess);
    if (r < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = real(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    if (r == 0) return rc;
    if (rc != CUDA_SUCCESS) {
        gs_account_cancel(dev, guess);
        return rc;
    }
    uint64_t charge = gs_round_up((uint64_t)*pPitch * Height, GS_ALLOC_GRANULARITY);
    if (charge > guess && gs_mem_reserve("cuMemAllocPitch_v2", dev, charge - guess) < 0) {
        PFN_cuMemFree_v3020 real_free = gs_real_cuMemFree_v2;
        if (real_free) real_free(*dptr);
        gs_account_cancel(dev, guess);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (charge < guess) gs_account_cancel(dev, guess - charge);
    gs_mem_settle(CUDA_SUCCESS, GS_TRACK_PTR, (uint64_t)*dptr, dev, charge);
    return rc;
}

CUresult gs_mem_free(CUdeviceptr dptr)
{
    PFN_cuMemFree_v3020 real = GS_REAL(cuMemFree_v2);
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    int dev;
    uint64_t bytes;
    if (dptr == 0 || !gs_ready() || gs_track_take(GS_TRACK_PTR, (uint64_t)dptr, &dev, &bytes) != 0) return real(dptr);
    CUresult rc = real(dptr);
    if (rc == CUDA_SUCCESS) gs_account_release(dev, bytes);
    else gs_track_put(GS_TRACK_PTR, (uint64_t)dptr, dev, bytes);
    return rc;
}

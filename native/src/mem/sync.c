/* Synchronisation points. Before the wait, the compute meter measures what it waits for (the
 * launches counted by estimate so far, compute/meter.h gs_meter_sync), and after it reconciles
 * what completed. A pool whose reserve is
 * above its release threshold gives unused memory
 * back to the driver at the next stream, event or context synchronisation; these handlers re-read
 * the pools right after the real call, but only when a pool may have shrunk (a flag set by pool
 * allocations and frees, src/mem/pools.c): otherwise they cost one relaxed load. They also
 * re-read NVML's per-process memory at most every 100 ms (lazily loaded modules appear after the
 * first launches; src/mem/ctx.c). Substituted when a memory or a compute limit is set. */
#include "compute/compute.h"
#include "hooks.h"
#include "intercept/intercept.h"
#include "mem/mem.h"
#include "mem/pools.h"

static CUresult gs_sync_after(CUresult rc)
{
    if (rc == CUDA_SUCCESS)
        gs_compute_sync(1);
    if (rc == CUDA_SUCCESS && gs_hook_kind_active(GS_HOOK_MEM)) { /* not for compute alone */
        gs_pool_sync_point();
        gs_ctx_reconcile_active();
    }
    return rc;
}

CUresult gs_sync_stream(CUstream hStream)
{
    PFN_cuStreamSynchronize_v2000 real = GS_REAL(cuStreamSynchronize);
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    gs_compute_sync(0);
    return gs_sync_after(real(hStream));
}

CUresult gs_sync_stream_ptsz(CUstream hStream)
{
    PFN_cuStreamSynchronize_v7000_ptsz real = GS_REAL(cuStreamSynchronize_ptsz);
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    gs_compute_sync(0);
    return gs_sync_after(real(hStream));
}

CUresult gs_sync_ctx(void)
{
    PFN_cuCtxSynchronize_v2000 real = GS_REAL(cuCtxSynchronize);
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    gs_compute_sync(0);
    return gs_sync_after(real());
}

CUresult gs_sync_ctx_v2(CUcontext ctx)
{
    PFN_cuCtxSynchronize_v13000 real = GS_REAL(cuCtxSynchronize_v2);
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    gs_compute_sync(0);
    return gs_sync_after(real(ctx));
}

CUresult gs_sync_event(CUevent hEvent)
{
    PFN_cuEventSynchronize_v2000 real = GS_REAL(cuEventSynchronize);
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    gs_compute_sync(0);
    return gs_sync_after(real(hEvent));
}

/* CUDA event operations for the meter. See timing.h. */
#include "timing.h"

#include "real.h"

#define GS_TIMING_REBASE_MS 1000.0f

static CUevent gs_timing_take(struct gs_timing *t)
{
    if (t->n_pool > 0)
        return t->pool[--t->n_pool];
    PFN_cuEventCreate_v2000 create = gs_real_cuEventCreate;
    CUevent e = NULL;
    if (!create || create(&e, CU_EVENT_DEFAULT) != CUDA_SUCCESS)
        return NULL;
    return e;
}

static void gs_timing_destroy(CUevent e)
{
    PFN_cuEventDestroy_v4000 destroy = gs_real_cuEventDestroy_v2;
    if (destroy)
        destroy(e);
}

static void gs_timing_put(struct gs_timing *t, CUevent e)
{
    if (t->n_pool < GS_TIMING_POOL)
        t->pool[t->n_pool++] = e;
    else
        gs_timing_destroy(e);
}

static void *gs_timing_record(void *ctx, uintptr_t stream, void *ev)
{
    struct gs_timing *t = ctx;
    PFN_cuEventRecord_v2000 record = gs_real_cuEventRecord;
    int pooled = !ev && t->n_pool > 0;
    CUevent e = ev ? (CUevent)ev : gs_timing_take(t);
    if (!e || !record)
        return NULL;
    if (record(e, (CUstream)stream) == CUDA_SUCCESS)
        return e;
    if (ev)
        return NULL;
    gs_timing_destroy(e);
    if (!pooled)
        return NULL;
    /* the pool's events may have died with an earlier context at this address: start afresh */
    gs_timing_clear(t);
    e = gs_timing_take(t);
    if (e && record(e, (CUstream)stream) == CUDA_SUCCESS)
        return e;
    if (e)
        gs_timing_destroy(e);
    return NULL;
}

static int gs_timing_done(void *ctx, void *ev)
{
    (void)ctx;
    PFN_cuEventQuery_v2000 query = gs_real_cuEventQuery;
    if (!query)
        return -1;
    CUresult r = query((CUevent)ev);
    return r == CUDA_SUCCESS ? 1 : r == CUDA_ERROR_NOT_READY ? 0 : -1;
}

static int gs_timing_time(void *ctx, void *ev, int64_t *out)
{
    struct gs_timing *t = ctx;
    PFN_cuEventElapsedTime_v2000 elapsed = gs_real_cuEventElapsedTime;
    if (!elapsed)
        return -1;
    float ms = 0;
    if (t->ref && elapsed(&ms, t->ref, (CUevent)ev) != CUDA_SUCCESS) {
        /* the origin may have died with an earlier context at this address: ev starts a new
         * timeline after every time handed out, and this batch is dropped (under-counted once,
         * never charged a gap between two timelines) */
        if (t->ref_released)
            gs_timing_destroy(t->ref);
        t->ref = (CUevent)ev;
        t->ref_released = 0;
        t->ref_base_ns = t->last_ns += 1000000000LL;
        return -1;
    }
    if (!t->ref) {
        t->ref = (CUevent)ev;
        t->ref_released = 0;
        t->ref_base_ns = t->last_ns;
        *out = t->last_ns;
        return 0;
    }
    *out = t->ref_base_ns + (int64_t)((double)ms * 1e6);
    if (*out > t->last_ns)
        t->last_ns = *out;
    if (ms > GS_TIMING_REBASE_MS) { /* keep the float offsets small: ev becomes the origin */
        if (t->ref_released)
            gs_timing_put(t, t->ref);
        t->ref = (CUevent)ev;
        t->ref_released = 0;
        t->ref_base_ns = *out;
    }
    return 0;
}

static void gs_timing_release(void *ctx, void *ev)
{
    struct gs_timing *t = ctx;
    if ((CUevent)ev == t->ref)
        t->ref_released = 1; /* still the origin: recycled at the next re-base */
    else
        gs_timing_put(t, (CUevent)ev);
}

static int gs_timing_stream_busy(void *ctx, uintptr_t stream)
{
    (void)ctx;
    PFN_cuStreamQuery_v2000 query = gs_real_cuStreamQuery;
    CUresult r = query ? query((CUstream)stream) : CUDA_ERROR_NOT_FOUND;
    return r == CUDA_ERROR_NOT_READY ? 1 : r == CUDA_SUCCESS ? 0 : -1;
}

const struct gs_meter_ops gs_timing_ops = {
    gs_timing_record, gs_timing_done, gs_timing_time, gs_timing_release, gs_timing_stream_busy,
};

void gs_timing_clear(struct gs_timing *t)
{
    for (int i = 0; i < t->n_pool; i++)
        gs_timing_destroy(t->pool[i]);
    t->n_pool = 0;
}

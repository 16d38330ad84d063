/* timing.c against a stub driver whose events die with their context (test_timing_heals.py).
 * The meter is found by context address, and a new context may get a destroyed one's address:
 * then every pooled event and the timeline origin belong to a dead context. Before the fix no
 * event could be recorded or timed again (the compute limit was off for that context for ever).
 * Prints "timing_heals: <n> failure(s)". */
#include <stdio.h>
#include <stdlib.h>

#include "compute/timing.h"
#include "real.h"

static int gen = 1;   /* the live context's generation */
static double now_ms; /* the GPU timeline */
struct stub_event { int gen; double t_ms; };

static CUresult stub_create(CUevent *e, unsigned int flags)
{
    (void)flags;
    struct stub_event *x = calloc(1, sizeof *x);
    x->gen = gen;
    *e = (CUevent)x;
    return CUDA_SUCCESS;
}

static CUresult stub_destroy(CUevent e)
{
    (void)e; /* kept: a dead handle must fail, not crash */
    return CUDA_SUCCESS;
}

static int alive(CUevent e) { return ((struct stub_event *)e)->gen == gen; }

static CUresult stub_record(CUevent e, CUstream s)
{
    (void)s;
    if (!alive(e))
        return CUDA_ERROR_INVALID_HANDLE;
    ((struct stub_event *)e)->t_ms = now_ms;
    return CUDA_SUCCESS;
}

static CUresult stub_query(CUevent e) { return alive(e) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; }

static CUresult stub_elapsed(float *ms, CUevent a, CUevent b)
{
    if (!alive(a) || !alive(b))
        return CUDA_ERROR_INVALID_HANDLE;
    *ms = (float)(((struct stub_event *)b)->t_ms - ((struct stub_event *)a)->t_ms);
    return CUDA_SUCCESS;
}

PFN_cuEventCreate_v2000 gs_real_cuEventCreate = stub_create;
PFN_cuEventDestroy_v4000 gs_real_cuEventDestroy_v2 = stub_destroy;
PFN_cuEventRecord_v2000 gs_real_cuEventRecord = stub_record;
PFN_cuEventQuery_v2000 gs_real_cuEventQuery = stub_query;
PFN_cuEventElapsedTime_v2000 gs_real_cuEventElapsedTime = stub_elapsed;
PFN_cuStreamQuery_v2000 gs_real_cuStreamQuery = NULL; /* "not known": timing.c answers -1 */

static int failures;
#define EXPECT(cond, msg)                                                          \
    do {                                                                           \
        if (!(cond)) {                                                             \
            failures++;                                                            \
            printf("FAIL line %d: %s\n", __LINE__, msg);                           \
        }                                                                          \
    } while (0)

/* One batch as the meter runs it: start, 1 ms of work, end; both timed, both released.
 * Returns the measured span in ns, or -1 if the batch could not be recorded or timed. */
static int64_t batch(struct gs_timing *t)
{
    const struct gs_meter_ops *ops = &gs_timing_ops;
    void *s = ops->ev_record(t, 0, NULL);
    now_ms += 1.0;
    void *e = ops->ev_record(t, 0, NULL);
    int64_t ts = 0, te = 0;
    int ok = s && e && ops->ev_done(t, e) > 0 && ops->ev_time_ns(t, s, &ts) == 0 &&
             ops->ev_time_ns(t, e, &te) == 0;
    if (s)
        ops->ev_release(t, s);
    if (e)
        ops->ev_release(t, e);
    return ok ? te - ts : -1;
}

int main(void)
{
    static struct gs_timing t;
    EXPECT(batch(&t) == 1000000, "a batch of 1 ms is timed as 1 ms");
    EXPECT(batch(&t) == 1000000, "the pooled events are reused");
    gen++; /* the context dies; a new one gets its address, and so this meter and its events */
    int64_t first = batch(&t);
    EXPECT(first == -1 || first == 1000000, "the first batch after is dropped (origin dead) or right");
    EXPECT(batch(&t) == 1000000, "then batches are timed again: new events, a new origin");
    EXPECT(batch(&t) == 1000000, "and stay timed");
    printf("timing_heals: %d failure(s)\n", failures);
    return failures != 0;
}

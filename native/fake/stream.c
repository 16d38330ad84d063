/* Fake driver: streams, events, modules, kernel and graph launches on a virtual GPU timeline.
 * A launch occupies its device for gridDimX*gridDimY*gridDimZ * FAKE_CUDA_NS_PER_BLOCK ns, starting
 * when the device (shared by every process of the state file) is free; events take the position
 * of their stream's tail; synchronisation sleeps until the virtual timeline passes that point.
 * Stream capture is modelled only as far as its rules go: while a global capture runs (any
 * thread), or a thread-local one on this thread, a "potentially unsafe" call made in a
 * non-relaxed mode (cuThreadExchangeStreamCaptureMode) fails with STREAM_CAPTURE_UNSUPPORTED and
 * invalidates the captures (fake_capture_unsafe: pools.c uses it for cuMemPoolGetAttribute). */
#include "fake.h"

#include <pthread.h>
#include <stdlib.h>

struct fake_stream {
    struct fake_ctx *ctx;
    _Atomic int64_t tail_ns;
    unsigned flags;
    int alive;
    int capture;     /* 0 none, else 1 + CUstreamCaptureMode */
    int invalidated;
};

/* ---- capture rules ---- */
#define FAKE_MAX_CAPTURES 16
static pthread_mutex_t g_capture_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fake_stream *g_capturing[FAKE_MAX_CAPTURES];
static _Atomic int g_global_captures;
static __thread int t_strict_captures; /* global or thread-local captures begun by this thread */
static __thread CUstreamCaptureMode t_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

int fake_capture_unsafe(void) {
    if (t_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
        return 0;
    if (t_strict_captures == 0 && !(t_mode == CU_STREAM_CAPTURE_MODE_GLOBAL && atomic_load(&g_global_captures) > 0))
        return 0;
    pthread_mutex_lock(&g_capture_lock);
    for (int i = 0; i < FAKE_MAX_CAPTURES; i++)
        if (g_capturing[i] != NULL)
            g_capturing[i]->invalidated = 1;
    pthread_mutex_unlock(&g_capture_lock);
    return 1;
}

struct fake_event {
    int64_t ts_ns;
    int recorded;
    int timing;
    int alive;
};

struct fake_graph {
    uint64_t blocks;
    int alive;
};

static int g_function_token;

struct fake_stream *fake_stream_new(struct fake_ctx *ctx, unsigned flags) {
    struct fake_stream *s = calloc(1, sizeof *s);
    if (s != NULL) {
        s->ctx = ctx;
        s->flags = flags;
        s->alive = 1;
    }
    return s;
}

int fake_stream_ordinal(struct fake_stream *s) { return s->ctx->ordinal; }

struct fake_stream *fake_stream_resolve(CUstream hs, CUresult *rc) {
    if (!fake_initialized()) {
        *rc = CUDA_ERROR_NOT_INITIALIZED;
        return NULL;
    }
    if (hs == NULL || hs == CU_STREAM_LEGACY || hs == CU_STREAM_PER_THREAD) {
        struct fake_ctx *c;
        *rc = fake_need_ctx(&c);
        return *rc == CUDA_SUCCESS ? c->null_stream : NULL;
    }
    struct fake_stream *s = (struct fake_stream *)hs;
    if (!s->alive || !s->ctx->alive) {
        *rc = CUDA_ERROR_INVALID_HANDLE;
        return NULL;
    }
    *rc = CUDA_SUCCESS;
    return s;
}

static int64_t stream_tail(struct fake_stream *s) { return atomic_load(&s->tail_ns); }

/* Puts `blocks` worth of work at the end of the device timeline; returns CUDA_SUCCESS. */
static CUresult enqueue(struct fake_stream *s, uint64_t blocks) {
    int phys = fake_phys(s->ctx->ordinal);
    _Atomic int64_t *busy = &fake_state()->busy_until_ns[phys];
    int64_t dur = (int64_t)blocks * fake_cfg()->ns_per_block;
    int64_t now = fake_now_ns(), cur = atomic_load(busy), end;
    do {
        int64_t start = cur > now ? cur : now;
        int64_t tail = stream_tail(s);
        start = start > tail ? start : tail;
        end = start + dur;
    } while (!atomic_compare_exchange_weak(busy, &cur, end));
    atomic_store(&s->tail_ns, end);
    return CUDA_SUCCESS;
}

static CUresult launch(CUstream hs, unsigned gx, unsigned gy, unsigned gz) {
    CUresult rc;
    struct fake_stream *s = fake_stream_resolve(hs, &rc);
    if (s == NULL)
        return rc;
    if (gx == 0 || gy == 0 || gz == 0)
        return CUDA_ERROR_INVALID_VALUE;
    rc = fake_ctx_first_launch(s->ctx);
    if (rc != CUDA_SUCCESS)
        return rc;
    return enqueue(s, (uint64_t)gx * gy * gz);
}

static CUresult stream_sync(CUstream hs) {
    CUresult rc;
    struct fake_stream *s = fake_stream_resolve(hs, &rc);
    if (s == NULL)
        return rc;
    fake_sleep_until(stream_tail(s));
    fake_pools_release_at_sync();
    return CUDA_SUCCESS;
}

static CUresult stream_query(CUstream hs) {
    CUresult rc;
    struct fake_stream *s = fake_stream_resolve(hs, &rc);
    if (s == NULL)
        return rc;
    return stream_tail(s) <= fake_now_ns() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

FAKE_EXPORT CUresult cuStreamCreate(CUstream *out, unsigned int flags) {
    struct fake_ctx *c;
    CUresult rc = fake_need_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (out == NULL || flags > CU_STREAM_NON_BLOCKING)
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_stream *s = fake_stream_new(c, flags);
    if (s == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *out = (CUstream)s;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuStreamCreateWithPriority(CUstream *out, unsigned int flags, int prio) {
    (void)prio;
    return cuStreamCreate(out, flags);
}

FAKE_EXPORT CUresult cuStreamDestroy_v2(CUstream hs) {
    FAKE_NEED_INIT();
    struct fake_stream *s = (struct fake_stream *)hs;
    if (s == NULL || hs == CU_STREAM_LEGACY || hs == CU_STREAM_PER_THREAD || !s->alive)
        return CUDA_ERROR_INVALID_HANDLE;
    s->alive = 0; /* kept: a stale handle fails cleanly */
    return CUDA_SUCCESS;
}

static CUresult begin_capture(CUstream hs, CUstreamCaptureMode mode) {
    CUresult rc;
    struct fake_stream *s = fake_stream_resolve(hs, &rc);
    if (s == NULL)
        return rc;
    if (hs == NULL || hs == CU_STREAM_LEGACY || s->capture || mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return hs == NULL || hs == CU_STREAM_LEGACY ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_ERROR_ILLEGAL_STATE;
    pthread_mutex_lock(&g_capture_lock);
    int slot = -1;
    for (int i = 0; i < FAKE_MAX_CAPTURES && slot < 0; i++)
        if (g_capturing[i] == NULL)
            slot = i;
    if (slot >= 0)
        g_capturing[slot] = s;
    pthread_mutex_unlock(&g_capture_lock);
    if (slot < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    s->capture = 1 + (int)mode;
    s->invalidated = 0;
    if (mode != CU_STREAM_CAPTURE_MODE_RELAXED)
        t_strict_captures++;
    if (mode == CU_STREAM_CAPTURE_MODE_GLOBAL)
        atomic_fetch_add(&g_global_captures, 1);
    return CUDA_SUCCESS;
}

static CUresult end_capture(CUstream hs, CUgraph *graph) {
    CUresult rc;
    struct fake_stream *s = fake_stream_resolve(hs, &rc);
    if (s == NULL)
        return rc;
    if (graph == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!s->capture)
        return CUDA_ERROR_ILLEGAL_STATE;
    CUstreamCaptureMode mode = (CUstreamCaptureMode)(s->capture - 1);
    pthread_mutex_lock(&g_capture_lock);
    for (int i = 0; i < FAKE_MAX_CAPTURES; i++)
        if (g_capturing[i] == s)
            g_capturing[i] = NULL;
    pthread_mutex_unlock(&g_capture_lock);
    s->capture = 0;
    if (mode != CU_STREAM_CAPTURE_MODE_RELAXED && t_strict_captures > 0)
        t_strict_captures--;
    if (mode == CU_STREAM_CAPTURE_MODE_GLOBAL)
        atomic_fetch_sub(&g_global_captures, 1);
    *graph = NULL;
    if (s->invalidated)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    return cuGraphCreate(graph, 0);
}

static CUresult is_capturing(CUstream hs, CUstreamCaptureStatus *st) {
    CUresult rc;
    struct fake_stream *s = fake_stream_resolve(hs, &rc);
    if (s == NULL)
        return rc;
    if (st == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *st = !s->capture ? CU_STREAM_CAPTURE_STATUS_NONE
                      : s->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    return CUDA_SUCCESS;
}

FAKE_VARIANTS(cuStreamBeginCapture_v2, cuStreamBeginCapture_v2_ptsz, (CUstream s, CUstreamCaptureMode m),
              begin_capture, (s, m))
FAKE_VARIANTS(cuStreamEndCapture, cuStreamEndCapture_ptsz, (CUstream s, CUgraph *g), end_capture, (s, g))
FAKE_VARIANTS(cuStreamIsCapturing, cuStreamIsCapturing_ptsz, (CUstream s, CUstreamCaptureStatus *st),
              is_capturing, (s, st))

FAKE_EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode) {
    FAKE_NEED_INIT();
    if (mode == NULL || *mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode old = t_mode;
    t_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}

FAKE_VARIANTS(cuStreamSynchronize, cuStreamSynchronize_ptsz, (CUstream s), stream_sync, (s))
FAKE_VARIANTS(cuStreamQuery, cuStreamQuery_ptsz, (CUstream s), stream_query, (s))

/* The stream and the live event a wait or a record names. */
static CUresult stream_and_event(CUstream hs, CUevent he, struct fake_stream **s, struct fake_event **e) {
    CUresult rc;
    *s = fake_stream_resolve(hs, &rc);
    *e = (struct fake_event *)he;
    if (*s == NULL)
        return rc;
    return *e == NULL || !(*e)->alive ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
}

static CUresult wait_event(CUstream hs, CUevent he) {
    struct fake_stream *s;
    struct fake_event *e;
    CUresult rc = stream_and_event(hs, he, &s, &e);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (e->recorded && e->ts_ns > stream_tail(s))
        atomic_store(&s->tail_ns, e->ts_ns);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int f) {
    (void)f;
    return wait_event(s, e);
}

FAKE_EXPORT CUresult cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned int f) {
    (void)f;
    return wait_event(s, e);
}

FAKE_EXPORT CUresult cuEventCreate(CUevent *out, unsigned int flags) {
    struct fake_ctx *c;
    CUresult rc = fake_need_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (out == NULL || flags > 0xf)
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_event *e = calloc(1, sizeof *e);
    if (e == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e->alive = 1;
    e->timing = !(flags & CU_EVENT_DISABLE_TIMING);
    *out = (CUevent)e;
    return CUDA_SUCCESS;
}

static CUresult event_record(CUevent he, CUstream hs) {
    struct fake_stream *s;
    struct fake_event *e;
    CUresult rc = stream_and_event(hs, he, &s, &e);
    if (rc != CUDA_SUCCESS)
        return rc;
    int64_t now = fake_now_ns(), tail = stream_tail(s);
    e->ts_ns = tail > now ? tail : now;
    e->recorded = 1;
    return CUDA_SUCCESS;
}

FAKE_VARIANTS(cuEventRecord, cuEventRecord_ptsz, (CUevent e, CUstream s), event_record, (e, s))

FAKE_EXPORT CUresult cuEventRecordWithFlags(CUevent e, CUstream s, unsigned int f) {
    (void)f;
    return event_record(e, s);
}

FAKE_EXPORT CUresult cuEventRecordWithFlags_ptsz(CUevent e, CUstream s, unsigned int f) {
    (void)f;
    return event_record(e, s);
}

FAKE_EXPORT CUresult cuEventQuery(CUevent he) {
    struct fake_event *e = (struct fake_event *)he;
    FAKE_NEED_INIT();
    if (e == NULL || !e->alive)
        return CUDA_ERROR_INVALID_HANDLE;
    return !e->recorded || e->ts_ns <= fake_now_ns() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

FAKE_EXPORT CUresult cuEventSynchronize(CUevent he) {
    struct fake_event *e = (struct fake_event *)he;
    FAKE_NEED_INIT();
    if (e == NULL || !e->alive)
        return CUDA_ERROR_INVALID_HANDLE;
    if (e->recorded)
        fake_sleep_until(e->ts_ns);
    fake_pools_release_at_sync();
    return CUDA_SUCCESS;
}

static CUresult elapsed(float *ms, CUevent hs, CUevent he) {
    struct fake_event *a = (struct fake_event *)hs, *b = (struct fake_event *)he;
    FAKE_NEED_INIT();
    if (ms == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (a == NULL || b == NULL || !a->alive || !b->alive || !a->recorded || !b->recorded || !a->timing ||
        !b->timing)
        return CUDA_ERROR_INVALID_HANDLE;
    int64_t now = fake_now_ns();
    if (a->ts_ns > now || b->ts_ns > now)
        return CUDA_ERROR_NOT_READY;
    *ms = (float)((double)(b->ts_ns - a->ts_ns) / 1e6);
    return CUDA_SUCCESS;
}

FAKE_VARIANTS(cuEventElapsedTime, cuEventElapsedTime_v2, (float *ms, CUevent a, CUevent b), elapsed, (ms, a, b))

FAKE_EXPORT CUresult cuEventDestroy_v2(CUevent he) {
    struct fake_event *e = (struct fake_event *)he;
    FAKE_NEED_INIT();
    if (e == NULL || !e->alive)
        return CUDA_ERROR_INVALID_HANDLE;
    e->alive = 0;
    return CUDA_SUCCESS;
}

/* ---- modules: no code is loaded; any image gives a module whose functions are all one token ---- */
FAKE_EXPORT CUresult cuModuleLoadData(CUmodule *m, const void *image) {
    struct fake_ctx *c;
    CUresult rc = fake_need_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (m == NULL || image == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *m = (CUmodule)&g_function_token;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
    FAKE_NEED_INIT();
    if (f == NULL || m == NULL || name == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *f = (CUfunction)&g_function_token;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuModuleUnload(CUmodule m) {
    return m == NULL ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
}

/* ---- launches ---- */
static CUresult launch_kernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                              unsigned bz, unsigned shm, CUstream s, void **params, void **extra) {
    (void)f, (void)bx, (void)by, (void)bz, (void)shm, (void)params, (void)extra;
    return launch(s, gx, gy, gz);
}

static CUresult launch_ex(const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra) {
    (void)f, (void)params, (void)extra;
    return cfg == NULL ? CUDA_ERROR_INVALID_VALUE : launch(cfg->hStream, cfg->gridDimX, cfg->gridDimY, cfg->gridDimZ);
}

FAKE_VARIANTS(cuLaunchKernel, cuLaunchKernel_ptsz,
              (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
               unsigned shm, CUstream s, void **params, void **extra),
              launch_kernel, (f, gx, gy, gz, bx, by, bz, shm, s, params, extra))
FAKE_VARIANTS(cuLaunchKernelEx, cuLaunchKernelEx_ptsz,
              (const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra), launch_ex,
              (cfg, f, params, extra))
FAKE_VARIANTS(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_ptsz,
              (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
               unsigned shm, CUstream s, void **params),
              launch_kernel, (f, gx, gy, gz, bx, by, bz, shm, s, params, NULL))

/* ---- graphs: a graph is the sum of its kernel nodes' blocks, launched as one piece of work ---- */
FAKE_EXPORT CUresult cuGraphCreate(CUgraph *g, unsigned int flags) {
    FAKE_NEED_INIT();
    if (g == NULL || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_graph *fg = calloc(1, sizeof *fg);
    if (fg == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    fg->alive = 1;
    *g = (CUgraph)fg;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGraphAddKernelNode_v2(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n,
                                             const CUDA_KERNEL_NODE_PARAMS *p) {
    (void)deps, (void)n;
    struct fake_graph *fg = (struct fake_graph *)g;
    if (node == NULL || fg == NULL || p == NULL || p->gridDimX == 0 || p->gridDimY == 0 || p->gridDimZ == 0)
        return CUDA_ERROR_INVALID_VALUE;
    fg->blocks += (uint64_t)p->gridDimX * p->gridDimY * p->gridDimZ;
    *node = (CUgraphNode)&g_function_token;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph g, unsigned long long flags) {
    (void)flags;
    struct fake_graph *fg = (struct fake_graph *)g, *e;
    if (exec == NULL || fg == NULL || !fg->alive)
        return CUDA_ERROR_INVALID_VALUE;
    if ((e = calloc(1, sizeof *e)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *e = *fg;
    *exec = (CUgraphExec)e;
    return CUDA_SUCCESS;
}

static CUresult graph_launch(CUgraphExec exec, CUstream hs) {
    struct fake_graph *e = (struct fake_graph *)exec;
    CUresult rc;
    struct fake_stream *s = fake_stream_resolve(hs, &rc);
    if (s == NULL)
        return rc;
    if (e == NULL || !e->alive)
        return CUDA_ERROR_INVALID_HANDLE;
    return enqueue(s, e->blocks);
}

FAKE_VARIANTS(cuGraphLaunch, cuGraphLaunch_ptsz, (CUgraphExec e, CUstream s), graph_launch, (e, s))

FAKE_EXPORT CUresult cuGraphExecDestroy(CUgraphExec exec) {
    struct fake_graph *e = (struct fake_graph *)exec;
    if (e == NULL || !e->alive)
        return CUDA_ERROR_INVALID_VALUE;
    e->alive = 0;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGraphDestroy(CUgraph g) { return cuGraphExecDestroy((CUgraphExec)g); }

/* Launch handlers (hooks.def compute section): hold a launch back until the container's
 * GPU-time budget allows it, then launch and extend the stream's timing batch.
 * Owns: cuLaunchKernel, cuLaunchKernelEx, cuLaunchCooperativeKernel, cuGraphLaunch (+ _ptsz).
 * Without a compute limit each handler is one relaxed load and a call to the real driver
 * (and procaddr.c does not even hand these out then). Streams being captured into a graph
 * pass straight through (their work is counted when the graph is launched). The meter's
 * event queries run in "relaxed" stream-capture mode so another thread's capture is never
 * invalidated. Any internal failure -> the launch goes through unthrottled (fail open).
 * Tests: tests/native/compute/test_launch_fake.py; GPU: benchmarks/compute_accuracy.py. */
#define _GNU_SOURCE
#include <time.h>

#include "compute.h"
#include "hooks.h"
#include "log.h"
#include "real.h"
#include "state.h"
#include "trace.h"

struct gs_gate {
    struct gs_cmeter *cm;
    uintptr_t stream;
    uint64_t key;     /* gs_clean_key: what was launched (clean durations per key) */
    /* for the trace (trace.h) */
    int64_t enter, admit, owed, gang, over;
    char why;
};

static void gs_gate_sleep(int64_t ns)
{
    if (ns < GS_THROTTLE_MIN_SLEEP_NS)
        ns = GS_THROTTLE_MIN_SLEEP_NS;
    if (ns > GS_THROTTLE_MAX_SLEEP_NS)
        ns = GS_THROTTLE_MAX_SLEEP_NS;
    struct timespec ts = {ns / 1000000000LL, ns % 1000000000LL};
    nanosleep(&ts, NULL);
}

/* 1: measure this launch (call gs_gate_close after it); 0: pass it through untouched. */
static int gs_gate_open(struct gs_gate *g, CUstream s, int ptsz)
{
    if (__builtin_expect(!__atomic_load_n(&gs_compute_enabled, __ATOMIC_RELAXED), 1))
        return 0;
    uintptr_t st = (uintptr_t)s;
    if (ptsz && st == 0)
        st = (uintptr_t)CU_STREAM_PER_THREAD;
    PFN_cuStreamIsCapturing_v10000 capturing = gs_real_cuStreamIsCapturing;
    CUstreamCaptureStatus status;
    if (capturing && (capturing((CUstream)st, &status) != CUDA_SUCCESS ||
                      status != CU_STREAM_CAPTURE_STATUS_NONE))
        return 0; /* being captured (or cannot tell): the graph is charged when launched */
    struct gs_cmeter *cm = gs_compute_current();
    if (!cm)
        return 0;
    PFN_cuThreadExchangeStreamCaptureMode_v10010 exchange = gs_real_cuThreadExchangeStreamCaptureMode;
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    int swapped = exchange && exchange(&mode) == CUDA_SUCCESS;
    int64_t waited = 0, due = 0; /* due: when what this launch owes is paid (last check) */
    g->enter = g->owed = g->gang = g->over = 0;
    g->why = 0;
    for (;;) {
        int64_t now = gs_compute_now_ns();
        if (!g->enter)
            g->enter = now;
        pthread_mutex_lock(&cm->mu);
        if (cm->board.board)
            gs_meter_set_others(&cm->meter, gs_board_tick(&cm->board, now, cm->meter.busy_total));
        int64_t w = gs_meter_admit(&cm->meter, now);
        gs_board_set_inflight(&cm->board, cm->meter.inflight_ns);
        if (w > 0 && waited >= GS_THROTTLE_MAX_WAIT_NS) {
            GS_LOG_ONCE(GS_LOG_WARN, "compute: a launch was held back %lld ms, longer than any "
                        "budget debt; letting it go (budget times from another clock?)",
                        (long long)(waited / 1000000));
            w = 0;
        }
        if (w > 0)
            g->why = cm->meter.hold_why;
        if (w > 0 || waited > 0) {
            int64_t owed = gs_meter_debt_ns(&cm->meter, now);
            if (owed > 0 || waited == 0)
                due = now + owed;
            if (waited == 0)
                g->owed = owed;
            g->gang = gs_gang_wait_ns(&cm->meter.gang, now);
        }
        if (w <= 0) {
            g->admit = now;
            if (waited > 0) {
                g->over = now - due;
                gs_meter_note_hold(&cm->meter, waited, g->over);
            }
            gs_meter_before(&cm->meter, st, now);
            pthread_mutex_unlock(&cm->mu);
            break;
        }
        pthread_mutex_unlock(&cm->mu);
        gs_gate_sleep(w);
        waited += gs_compute_now_ns() - now;
    }
    if (swapped)
        exchange(&mode);
    g->cm = cm;
    g->stream = st;
    return 1;
}

void gs_compute_sync(int done)
{
    if (__builtin_expect(!__atomic_load_n(&gs_compute_enabled, __ATOMIC_RELAXED), 1))
        return;
    struct gs_cmeter *cm = gs_compute_current();
    if (!cm || (done && !cm->meter.gang.on))
        return; /* (only the gang reads a queue published empty at once) */
    pthread_mutex_lock(&cm->mu);
    if (done) /* what the wait was for is complete: publish it (gang.h reads inflight_ns) */
        gs_meter_poll(&cm->meter, gs_compute_now_ns());
    else
        gs_meter_sync(&cm->meter);
    pthread_mutex_unlock(&cm->mu);
}

/* One launch's trace line (trace.h), named the first time its key is seen. */
static void gs_gate_trace(struct gs_gate *g, enum gs_launch_kind kind, CUfunction f)
{
    struct gs_meter *m = &g->cm->meter;
    const char *name = NULL;
    if (gs_trace_new_key(g->key)) {
        PFN_cuFuncGetName_v12030 get_name = gs_real_cuFuncGetName;
        if (kind == GS_LAUNCH_GRAPH)
            name = "graph";
        else if (!f || !get_name || get_name(&name, f) != CUDA_SUCCESS || !name)
            name = "?";
    }
    gs_trace_launch(g->cm->device, g->enter, g->admit, g->stream, g->key, kind, g->owed, g->gang,
                    g->over, g->why, m->gang.catchup, m->gang_flags, name);
}

static void gs_gate_close(struct gs_gate *g, enum gs_launch_kind kind, CUresult r, CUfunction f)
{
    if (r != CUDA_SUCCESS)
        return; /* the batch's end event still marks its last successful launch */
    pthread_mutex_lock(&g->cm->mu);
    gs_meter_after_key(&g->cm->meter, g->stream, kind, g->key, gs_compute_now_ns());
    gs_board_set_inflight(&g->cm->board, g->cm->meter.inflight_ns);
    if (gs_trace_on())
        gs_gate_trace(g, kind, f);
    pthread_mutex_unlock(&g->cm->mu);
}

#define GS_GATED(realname, stream, ptsz, kind, keyexpr, fn, call)                       \
    do {                                                                               \
        __typeof__(gs_real_##realname) real = GS_REAL(realname);                       \
        if (!real)                                                                     \
            return CUDA_ERROR_NOT_FOUND;                                               \
        struct gs_gate g;                                                              \
        if (!gs_gate_open(&g, (stream), (ptsz)))                                       \
            return real call;                                                          \
        g.key = (keyexpr);                                                             \
        CUresult r = real call;                                                        \
        gs_gate_close(&g, (kind), r, (fn));                                            \
        return r;                                                                      \
    } while (0)

#define GS_KERNEL_ARGS f, gx, gy, gz, bx, by, bz, shmem, s, params, extra
#define GS_DIMS(x, y, z) ((uint64_t)(x) | ((uint64_t)(y) << 32) | ((uint64_t)(z) << 48))
#define GS_KERNEL_KEY gs_clean_key((uintptr_t)f, GS_DIMS(gx, gy, gz), GS_DIMS(bx, by, bz) ^ shmem)
#define GS_EX_KEY                                                                      \
    (config ? gs_clean_key((uintptr_t)f,                                               \
                           GS_DIMS(config->gridDimX, config->gridDimY, config->gridDimZ), \
                           GS_DIMS(config->blockDimX, config->blockDimY, config->blockDimZ) ^ \
                               config->sharedMemBytes)                                 \
            : 0)
#define GS_GRAPH_KEY gs_clean_key((uintptr_t)exec, 0x6772617068ULL, 0)
#define GS_COOP_ARGS f, gx, gy, gz, bx, by, bz, shmem, s, params

CUresult gs_launch_kernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                          unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                          CUstream s, void **params, void **extra)
{
    GS_GATED(cuLaunchKernel, s, 0, GS_LAUNCH_KERNEL, GS_KERNEL_KEY, f, (GS_KERNEL_ARGS));
}

CUresult gs_launch_kernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                               unsigned int bx, unsigned int by, unsigned int bz,
                               unsigned int shmem, CUstream s, void **params, void **extra)
{
    GS_GATED(cuLaunchKernel_ptsz, s, 1, GS_LAUNCH_KERNEL, GS_KERNEL_KEY, f, (GS_KERNEL_ARGS));
}

CUresult gs_launch_kernel_ex(const CUlaunchConfig *config, CUfunction f, void **params,
                             void **extra)
{
    GS_GATED(cuLaunchKernelEx, config ? config->hStream : NULL, 0, GS_LAUNCH_KERNEL, GS_EX_KEY,
             f, (config, f, params, extra));
}

CUresult gs_launch_kernel_ex_ptsz(const CUlaunchConfig *config, CUfunction f, void **params,
                                  void **extra)
{
    GS_GATED(cuLaunchKernelEx_ptsz, config ? config->hStream : NULL, 1, GS_LAUNCH_KERNEL,
             GS_EX_KEY, f, (config, f, params, extra));
}

CUresult gs_launch_cooperative(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                               unsigned int bx, unsigned int by, unsigned int bz,
                               unsigned int shmem, CUstream s, void **params)
{
    GS_GATED(cuLaunchCooperativeKernel, s, 0, GS_LAUNCH_KERNEL, GS_KERNEL_KEY, f, (GS_COOP_ARGS));
}

CUresult gs_launch_cooperative_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                    unsigned int gz, unsigned int bx, unsigned int by,
                                    unsigned int bz, unsigned int shmem, CUstream s,
                                    void **params)
{
    GS_GATED(cuLaunchCooperativeKernel_ptsz, s, 1, GS_LAUNCH_KERNEL, GS_KERNEL_KEY, f,
             (GS_COOP_ARGS));
}

CUresult gs_launch_graph(CUgraphExec exec, CUstream s)
{
    GS_GATED(cuGraphLaunch, s, 0, GS_LAUNCH_GRAPH, GS_GRAPH_KEY, NULL, (exec, s));
}

CUresult gs_launch_graph_ptsz(CUgraphExec exec, CUstream s)
{
    GS_GATED(cuGraphLaunch_ptsz, s, 1, GS_LAUNCH_GRAPH, GS_GRAPH_KEY, NULL, (exec, s));
}

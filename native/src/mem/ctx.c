/* Contexts: their own device footprint is charged to the slice. Measured, not assumed, with NVML
 * right before and right after the real creation (a context has no cuMemGetInfo before it
 * exists): this process's per-process used memory where NVML lists it (the device-wide delta
 * also counts ~6 MiB NVML attributes to no process, H200 / driver 580). Driver 580 lists a
 * process of a pid namespace under its own pid; where a driver lists host pids, the first
 * creation finds ours (gs_ctx_find_self). Until then, the device-wide used delta less what the
 * region's processes allocated or freed in that window (processes of one slice starting together
 * must not charge each other's allocations to their contexts; another slice's tenant allocating
 * in that window still skews it, docs/shim.md). Rounded up to 2 MiB, recorded in the region
 * device block. Without NVML nothing is charged (logged once). */
#include <pthread.h>
#include <string.h>

#include "init.h"
#include "clock.h"
#include "log.h"
#include "mem/account.h"
#include "mem/mem.h"
#include "mem/nvml_util.h"
#include "region.h"

static int gs_primary_refs[GS_MAX_ORDINALS];
static uint64_t gs_primary_charge[GS_MAX_ORDINALS];
static pthread_mutex_t gs_ctx_lock = PTHREAD_MUTEX_INITIALIZER;

/* Held across context creation, the slowest driver call: a fork child gets a fresh lock, not one
 * its parent's other thread held at fork() (that thread does not exist in the child). */
static void gs_ctx_fork_child(void)
{
    gs_ctx_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
}

__attribute__((constructor)) static void gs_ctx_fork_register(void)
{
    pthread_atfork(NULL, NULL, gs_ctx_fork_child);
}

static void gs_ctx_reconcile_resume(void); /* driver overhead, below */

static int gs_ctx_dev_ok(CUdevice dev)
{
    return gs_ready() && dev >= 0 && dev < GS_MAX_ORDINALS;
}

/* What NVML and the region say about one device at one moment. */
struct gs_ctx_sample {
    uint64_t device; /* device used bytes, UINT64_MAX if NVML cannot tell */
    uint64_t self;   /* this process's used bytes (0 while not listed) */
    int listed;      /* NVML lists this process on the device */
    uint64_t region; /* the region's charges, committed + pending */
    int nprocs;      /* processes NVML lists, -1 if it cannot */
    unsigned pids[GS_NVML_MAX_PROCS];
    uint64_t procs_used[GS_NVML_MAX_PROCS];
};

/* A region charge is published (pending) before its driver call and the device shows it after, so
 * reading the region right after the device before the creation and right ahead of it after
 * counts, both times, every allocation the device shows. Only one still pending across a read can
 * make the context look bigger (the cap keeps holding). Committed charges alone, read after the
 * slow process list, charged a peer's whole allocation in that window to this context. */
static void gs_ctx_sample(int dev, int after, struct gs_ctx_sample *s)
{
    uint64_t v;
    if (after) s->region = gs_account_total(dev);
    s->device = gs_nvml_cuda_device_used(dev, &v) == 0 ? v : UINT64_MAX;
    if (!after) s->region = gs_account_total(dev);
    s->nprocs = gs_nvml_processes(dev, s->pids, s->procs_used, GS_NVML_MAX_PROCS);
    int i = gs_nvml_find_self(s->pids, s->nprocs);
    s->listed = i >= 0;
    s->self = i >= 0 ? s->procs_used[i] : 0;
}

static void gs_ctx_no_sample(struct gs_ctx_sample *s)
{
    s->device = UINT64_MAX;
    s->nprocs = -1;
    s->self = 0;
    s->listed = 0;
    s->region = 0;
}

/* Where NVML lists host pids to a container, the one process that appeared while our context was
 * created, holding no more than the device total grew by beyond the region's own charges, is us:
 * adopt its pid so that NVML's per-process memory (this footprint, the driver overhead below, the
 * node agent's watchdog) works as it does outside containers. Two processes appearing at once →
 * not adopted; this context is charged the device delta and the next creation tries again. A
 * peer of the slice that shows up with only what it allocated (a context NVML lists no memory for
 * never shows us) is not us: the region's charges account for it. */
static void gs_ctx_find_self(const struct gs_ctx_sample *before, struct gs_ctx_sample *after)
{
    if (before->nprocs < 0 || after->nprocs < 0 || before->device == UINT64_MAX || after->device == UINT64_MAX)
        return;
    int64_t grew = (int64_t)(after->device - before->device) - (int64_t)(after->region - before->region);
    if (grew <= 0) return;
    int found = -1;
    for (int i = 0; i < after->nprocs; i++) {
        int seen = 0;
        for (int j = 0; j < before->nprocs && !seen; j++) seen = before->pids[j] == after->pids[i];
        if (seen) continue;
        if (found >= 0) return;
        found = i;
    }
    if (found < 0 || after->procs_used[found] > (uint64_t)grew) return;
    gs_nvml_adopt_pid(after->pids[found]);
    GS_INFO("NVML lists this process as pid %u (another pid namespace)", after->pids[found]);
    gs_ctx_reconcile_resume();
    after->self = after->procs_used[found];
    after->listed = 1;
}

static uint64_t gs_ctx_footprint(int dev, const struct gs_ctx_sample *before)
{
    struct gs_ctx_sample after;
    gs_ctx_sample(dev, 1, &after);
    if (!after.listed) gs_ctx_find_self(before, &after);
    struct gs_region_slot *slot = gs_region_self();
    if (slot && after.listed) __atomic_store_n(&slot->nvml_pid, gs_nvml_self_pid(), __ATOMIC_RELAXED);
    uint64_t delta;
    if (after.listed) { /* per-process: what NVML (and the node agent's watchdog) holds us to */
        delta = after.self > before->self ? after.self - before->self : 0;
    } else if (before->device != UINT64_MAX && after.device != UINT64_MAX) {
        int64_t d = (int64_t)(after.device - before->device) - (int64_t)(after.region - before->region);
        delta = d > 0 ? (uint64_t)d : 0;
    } else {
        GS_LOG_ONCE(GS_LOG_WARN, "context footprint: NVML device memory info unavailable; contexts are not charged");
        return 0;
    }
    uint64_t bytes = gs_round_up(delta, GS_ALLOC_GRANULARITY);
    struct gs_region_device *d = gs_region_device(gs_region_entry(dev));
    if (d) __atomic_store_n(&d->context_bytes, bytes, __ATOMIC_RELAXED);
    GS_DEBUG("context footprint on device %d: %llu MiB (%s)", dev, (unsigned long long)(bytes >> 20),
             after.listed ? "NVML per-process used" : "NVML device used delta");
    return bytes;
}

CUresult gs_ctx_primary_retain(CUcontext *pctx, CUdevice dev)
{
    PFN_cuDevicePrimaryCtxRetain_v7000 real = GS_REAL(cuDevicePrimaryCtxRetain);
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    if (!gs_ctx_dev_ok(dev)) return real(pctx, dev);
    pthread_mutex_lock(&gs_ctx_lock);
    int first = gs_primary_refs[dev] == 0;
    struct gs_ctx_sample before;
    if (first) gs_ctx_sample(dev, 0, &before);
    CUresult rc = real(pctx, dev);
    if (rc == CUDA_SUCCESS) {
        if (first) {
            gs_primary_charge[dev] = gs_ctx_footprint(dev, &before);
            gs_account_charge(dev, gs_primary_charge[dev]);
        }
        gs_primary_refs[dev]++;
    }
    pthread_mutex_unlock(&gs_ctx_lock);
    return rc;
}

static void gs_ctx_primary_drop(CUdevice dev, int all)
{
    pthread_mutex_lock(&gs_ctx_lock);
    if (gs_primary_refs[dev] > 0) gs_primary_refs[dev] = all ? 0 : gs_primary_refs[dev] - 1;
    if (gs_primary_refs[dev] == 0 && gs_primary_charge[dev]) {
        gs_account_release(dev, gs_primary_charge[dev]);
        gs_primary_charge[dev] = 0;
    }
    pthread_mutex_unlock(&gs_ctx_lock);
}

CUresult gs_ctx_primary_release(CUdevice dev)
{
    PFN_cuDevicePrimaryCtxRelease_v11000 real = GS_REAL(cuDevicePrimaryCtxRelease_v2);
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    CUresult rc = real(dev);
    if (rc == CUDA_SUCCESS && gs_ctx_dev_ok(dev)) gs_ctx_primary_drop(dev, 0);
    return rc;
}

CUresult gs_ctx_primary_reset(CUdevice dev)
{
    PFN_cuDevicePrimaryCtxReset_v11000 real = GS_REAL(cuDevicePrimaryCtxReset_v2);
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    CUresult rc = real(dev);
    if (rc == CUDA_SUCCESS && gs_ctx_dev_ok(dev)) {
        /* reset destroys the primary context but keeps the retain count */
        pthread_mutex_lock(&gs_ctx_lock);
        if (gs_primary_charge[dev]) gs_account_release(dev, gs_primary_charge[dev]);
        gs_primary_charge[dev] = 0;
        pthread_mutex_unlock(&gs_ctx_lock);
    }
    return rc;
}

static void gs_ctx_before(CUdevice dev, struct gs_ctx_sample *before)
{
    if (gs_ctx_dev_ok(dev)) gs_ctx_sample(dev, 0, before);
    else gs_ctx_no_sample(before);
}

static void gs_ctx_created(CUresult rc, CUcontext *pctx, CUdevice dev, const struct gs_ctx_sample *before)
{
    if (rc != CUDA_SUCCESS || !gs_ctx_dev_ok(dev)) return;
    uint64_t bytes = gs_ctx_footprint(dev, before);
    gs_account_charge(dev, bytes);
    gs_track_put(GS_TRACK_CTX, (uint64_t)(uintptr_t)*pctx, dev, bytes);
}

CUresult gs_ctx_create_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    PFN_cuCtxCreate_v3020 real = GS_REAL(cuCtxCreate_v2);
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    pthread_mutex_lock(&gs_ctx_lock);
    struct gs_ctx_sample before;
    gs_ctx_before(dev, &before);
    CUresult rc = real(pctx, flags, dev);
    gs_ctx_created(rc, pctx, dev, &before);
    pthread_mutex_unlock(&gs_ctx_lock);
    return rc;
}

CUresult gs_ctx_create_v3(CUcontext *pctx, CUexecAffinityParam *params, int n, unsigned int flags, CUdevice dev)
{
    PFN_cuCtxCreate_v11040 real = GS_REAL(cuCtxCreate_v3);
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    pthread_mutex_lock(&gs_ctx_lock);
    struct gs_ctx_sample before;
    gs_ctx_before(dev, &before);
    CUresult rc = real(pctx, params, n, flags, dev);
    gs_ctx_created(rc, pctx, dev, &before);
    pthread_mutex_unlock(&gs_ctx_lock);
    return rc;
}

CUresult gs_ctx_create_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev)
{
    PFN_cuCtxCreate_v12050 real = GS_REAL(cuCtxCreate_v4);
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    pthread_mutex_lock(&gs_ctx_lock);
    struct gs_ctx_sample before;
    gs_ctx_before(dev, &before);
    CUresult rc = real(pctx, params, flags, dev);
    gs_ctx_created(rc, pctx, dev, &before);
    pthread_mutex_unlock(&gs_ctx_lock);
    return rc;
}

CUresult gs_ctx_destroy(CUcontext ctx)
{
    PFN_cuCtxDestroy_v4000 real = GS_REAL(cuCtxDestroy_v2);
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    int dev;
    uint64_t bytes;
    if (!gs_ready() || gs_track_take(GS_TRACK_CTX, (uint64_t)(uintptr_t)ctx, &dev, &bytes) != 0) return real(ctx);
    CUresult rc = real(ctx);
    if (rc == CUDA_SUCCESS) gs_account_release(dev, bytes);
    else gs_track_put(GS_TRACK_CTX, (uint64_t)(uintptr_t)ctx, dev, bytes);
    return rc;
}

/* ---- driver memory outside allocations ----
 * After the context exists the driver keeps taking device memory on its own (lazily loaded
 * modules: ~84 MiB once PyTorch's first cuBLAS matmul ran on an H200). Where NVML lists this
 * process (its own pid, or the host pid found at context creation), its per-process used memory
 * is the ground truth: the part not covered by our charges is charged as overhead, re-read at
 * most every 100 ms from the allocation and synchronisation paths and on every cuMemGetInfo.
 * Where NVML cannot be matched to this process, this is skipped. */

#define GS_RECONCILE_NS 100000000ull

static uint64_t gs_overhead[GS_MAX_ORDINALS];
static uint64_t gs_reconcile_last[GS_MAX_ORDINALS];
enum { GS_RECONCILE_ON, GS_RECONCILE_NO_NVML, GS_RECONCILE_UNLISTED /* until a host pid is found */ };
static int gs_reconcile_off;

static void gs_ctx_reconcile_resume(void)
{
    int unlisted = GS_RECONCILE_UNLISTED;
    __atomic_compare_exchange_n(&gs_reconcile_off, &unlisted, GS_RECONCILE_ON, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

void gs_ctx_reconcile(int dev, int force)
{
    if (dev < 0 || dev >= GS_MAX_ORDINALS || __atomic_load_n(&gs_reconcile_off, __ATOMIC_RELAXED)) return;
    uint64_t now = gs_mono_ns();
    uint64_t last = __atomic_load_n(&gs_reconcile_last[dev], __ATOMIC_RELAXED);
    if (!force && now - last < GS_RECONCILE_NS) return;
    if (!__atomic_compare_exchange_n(&gs_reconcile_last[dev], &last, now, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
        return; /* another thread is doing it */
    if (pthread_mutex_trylock(&gs_ctx_lock) != 0) return;
    uint64_t nv = 0;
    int r = gs_nvml_self_used(dev, &nv);
    if (r != 0) {
        if (r < 0 || gs_primary_refs[dev] > 0) { /* NVML missing, or it lists no pid of ours */
            __atomic_store_n(&gs_reconcile_off, r < 0 ? GS_RECONCILE_NO_NVML : GS_RECONCILE_UNLISTED,
                             __ATOMIC_RELAXED);
            GS_DEBUG("reconcile: NVML per-process memory unavailable for this process; driver overhead beyond "
                     "the context footprint is not charged");
        }
        pthread_mutex_unlock(&gs_ctx_lock);
        return;
    }
    /* NVML holds our committed charges plus the part of our reservations in flight the driver
     * already allocated, so the overhead lies in [hi - pending, hi]: move it only into that
     * range, never down by another thread's reservation (two allocations would pass the cap). */
    uint64_t used = gs_account_self(dev), total = gs_account_self_total(dev);
    uint64_t pending = total > used ? total - used : 0, cur = gs_overhead[dev];
    uint64_t base = used > cur ? used - cur : 0;
    uint64_t hi = nv > base ? nv - base : 0, lo = hi > pending ? hi - pending : 0;
    uint64_t target = cur > hi ? hi : cur < lo ? lo : cur;
    if (target > gs_overhead[dev]) gs_account_charge(dev, target - gs_overhead[dev]);
    else if (target < gs_overhead[dev]) gs_account_release(dev, gs_overhead[dev] - target);
    if (target != gs_overhead[dev])
        GS_DEBUG("reconcile: driver overhead on device %d now %llu KiB (NVML says this process uses %llu MiB)", dev,
                 (unsigned long long)(target >> 10), (unsigned long long)(nv >> 20));
    gs_overhead[dev] = target;
    pthread_mutex_unlock(&gs_ctx_lock);
}

void gs_ctx_reconcile_active(void)
{
    if (__atomic_load_n(&gs_reconcile_off, __ATOMIC_RELAXED)) return;
    for (int dev = 0; dev < GS_MAX_ORDINALS; dev++)
        if (__atomic_load_n(&gs_primary_refs[dev], __ATOMIC_RELAXED) > 0) gs_ctx_reconcile(dev, 0);
}

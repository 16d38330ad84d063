/* Stream-ordered allocator. Pools keep memory after cuMemFreeAsync, so what is charged is the
 * pool's RESERVED memory (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), not the allocations. Before an
 * allocation that may grow the pool we reserve the part the pool cannot serve from its free
 * reserve; after it, the pool's real reserved size is charged, and if that growth (a pool grows
 * in chunks, and fragmentation defeats the spare) passes the cap, the block is freed on its
 * stream, the stream synchronised, the pool trimmed back and CUDA_ERROR_OUT_OF_MEMORY returned
 * (the only slow path). Pools are re-read on alloc, trim, destroy, cuMemGetInfo, before any
 * refusal, and at synchronisations (src/mem/sync.c) when a pool may have released memory there.
 * A pool is charged to its own device (recorded at cuMemPoolCreate), not to its stream's. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>

#include "init.h"
#include "log.h"
#include "mem/account.h"
#include "mem/mem.h"
#include "mem/pools.h"

static pthread_mutex_t gs_pool_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP; /* refusals re-read pools */

/* Held across pool allocations: a fork child gets a fresh lock, not one its parent's other thread
 * held at fork() (that thread does not exist in the child). */
static void gs_pool_fork_child(void)
{
    gs_pool_lock = (pthread_mutex_t)PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
}

__attribute__((constructor)) static void gs_pool_fork_register(void)
{
    pthread_atfork(NULL, NULL, gs_pool_fork_child);
}

/* Pools this process allocated from, with the bytes charged for each (under gs_pool_lock). */
struct gs_pool_entry {
    CUmemoryPool pool;
    int dev;
    uint64_t charged;
};
static struct gs_pool_entry *gs_pools;
static int gs_npools, gs_pools_cap;

/* Set when a synchronisation may make a pool release memory (some pool holds more than it uses
 * and more than its release threshold, or a free went into a pool above its threshold). The
 * synchronisation handlers read only this flag on their common path. */
static int gs_pool_dirty;
/* Some pool reserves more than its release threshold: a cuMemFreeAsync may let it shrink at sync. */
static int gs_pool_armed;

/* Pool attribute reads are "potentially unsafe" calls under stream capture: in global mode (PyTorch's
 * torch.cuda.graph) they would fail and invalidate the application's capture. The library's own
 * bookkeeping runs in relaxed mode; the application's calls keep its mode. */
static CUstreamCaptureMode gs_capture_relax(void)
{
    PFN_cuThreadExchangeStreamCaptureMode_v10010 exchange = gs_real_cuThreadExchangeStreamCaptureMode;
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (exchange == NULL || exchange(&mode) != CUDA_SUCCESS) return CU_STREAM_CAPTURE_MODE_RELAXED;
    return mode;
}

static void gs_capture_restore(CUstreamCaptureMode mode)
{
    PFN_cuThreadExchangeStreamCaptureMode_v10010 exchange = gs_real_cuThreadExchangeStreamCaptureMode;
    if (mode != CU_STREAM_CAPTURE_MODE_RELAXED && exchange) exchange(&mode);
}

static int gs_pool_attr(CUmemoryPool pool, CUmemPool_attribute attr, uint64_t *out)
{
    PFN_cuMemPoolGetAttribute_v11020 get = gs_real_cuMemPoolGetAttribute;
    cuuint64_t v = 0;
    if (get == NULL || get(pool, attr, &v) != CUDA_SUCCESS) return -1;
    *out = (uint64_t)v;
    return 0;
}

static struct gs_pool_entry *gs_pool_find(CUmemoryPool pool)
{
    for (int i = 0; i < gs_npools; i++)
        if (gs_pools[i].pool == pool) return &gs_pools[i];
    return NULL;
}

/* The entry of pool, added (charged 0) if new; NULL only when out of host memory (lock held). */
static struct gs_pool_entry *gs_pool_entry(CUmemoryPool pool, int dev)
{
    struct gs_pool_entry *e = gs_pool_find(pool);
    if (e != NULL) return e;
    if (gs_npools == gs_pools_cap) {
        int cap = gs_pools_cap ? 2 * gs_pools_cap : 8;
        struct gs_pool_entry *grown = realloc(gs_pools, (size_t)cap * sizeof *grown);
        if (grown == NULL) return NULL;
        gs_pools = grown;
        gs_pools_cap = cap;
    }
    e = &gs_pools[gs_npools];
    e->pool = pool;
    e->dev = dev;
    e->charged = 0;
    __atomic_store_n(&gs_npools, gs_npools + 1, __ATOMIC_RELEASE);
    return e;
}

/* Bring the charge of one pool to its current reserved size, and note whether a synchronisation
 * may shrink it (lock held). Returns the reserved size (the old charge if it cannot be read);
 * *used_out (if given) gets the pool's used bytes. */
static uint64_t gs_pool_read_locked(struct gs_pool_entry *e, uint64_t *used_out)
{
    uint64_t reserved, used = 0, threshold = 0;
    if (gs_pool_attr(e->pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved) != 0) return e->charged;
    if (reserved > e->charged) gs_account_charge(e->dev, reserved - e->charged);
    else if (reserved < e->charged) gs_account_release(e->dev, e->charged - reserved);
    e->charged = reserved;
    gs_pool_attr(e->pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used);
    gs_pool_attr(e->pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold);
    if (reserved > threshold) {
        __atomic_store_n(&gs_pool_armed, 1, __ATOMIC_RELAXED);
        if (reserved > used) __atomic_store_n(&gs_pool_dirty, 1, __ATOMIC_RELAXED);
    }
    if (used_out) *used_out = used;
    return reserved;
}

static uint64_t gs_pool_sync_locked(struct gs_pool_entry *e)
{
    return gs_pool_read_locked(e, NULL);
}

void gs_pool_refresh_all(void)
{
    if (__atomic_load_n(&gs_npools, __ATOMIC_RELAXED) == 0) return;
    CUstreamCaptureMode mode = gs_capture_relax();
    pthread_mutex_lock(&gs_pool_lock);
    __atomic_store_n(&gs_pool_dirty, 0, __ATOMIC_RELAXED); /* set again below where still due */
    __atomic_store_n(&gs_pool_armed, 0, __ATOMIC_RELAXED);
    for (int i = 0; i < gs_npools; i++) gs_pool_sync_locked(&gs_pools[i]);
    pthread_mutex_unlock(&gs_pool_lock);
    gs_capture_restore(mode);
}

void gs_pool_sync_point(void)
{
    if (__atomic_load_n(&gs_pool_dirty, __ATOMIC_RELAXED)) gs_pool_refresh_all();
}

struct gs_async_args {
    void *real;
    CUdeviceptr *dptr;
    size_t bytesize;
    CUmemoryPool pool;
    CUstream stream;
    int ptsz;
};

typedef CUresult (*gs_pool_call)(struct gs_async_args *a);

/* The block just allocated grew its pool past the cap: free it on its stream, wait for that
 * stream (a pool can only release a free that completed), trim the pool back to what it held
 * before. 0 done, -1 not possible (the caller then leaves the growth charged). */
static int gs_pool_undo(struct gs_async_args *a, uint64_t keep)
{
    PFN_cuMemFreeAsync_v11020 free_async = a->ptsz ? gs_real_cuMemFreeAsync_ptsz : gs_real_cuMemFreeAsync;
    PFN_cuStreamSynchronize_v2000 sync = a->ptsz ? gs_real_cuStreamSynchronize_ptsz : gs_real_cuStreamSynchronize;
    PFN_cuStreamIsCapturing_v10000 capturing = gs_real_cuStreamIsCapturing;
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    if (free_async == NULL || sync == NULL || gs_real_cuMemPoolTrimTo == NULL) return -1;
    if (capturing && capturing(a->stream, &st) == CUDA_SUCCESS && st != CU_STREAM_CAPTURE_STATUS_NONE)
        return -1; /* synchronising would invalidate the capture */
    if (free_async(*a->dptr, a->stream) != CUDA_SUCCESS) return -1;
    *a->dptr = 0;
    sync(a->stream);
    gs_real_cuMemPoolTrimTo(a->pool, keep);
    return 0;
}

/* Shared path of the four allocation entry points: call(a) performs the real allocation. */
static CUresult gs_pool_alloc(const char *fn, struct gs_async_args *a, int dev, gs_pool_call call)
{
    if (a->pool == NULL || dev < 0 || a->bytesize == 0) return call(a);
    CUstreamCaptureMode mode = gs_capture_relax();
    pthread_mutex_lock(&gs_pool_lock);
    struct gs_pool_entry *e = gs_pool_entry(a->pool, dev);
    if (e == NULL) {
        pthread_mutex_unlock(&gs_pool_lock);
        gs_capture_restore(mode);
        GS_LOG_ONCE(GS_LOG_ERROR, "%s: out of host memory tracking pools; refusing pool allocations", fn);
        return CUDA_ERROR_OUT_OF_MEMORY; /* fail closed: an untracked pool would bypass the cap */
    }
    int pdev = e->dev;
    uint64_t used = 0, before = gs_pool_read_locked(e, &used);
    uint64_t spare = before > used ? before - used : 0;
    uint64_t need = a->bytesize > spare ? gs_round_up(a->bytesize - spare, GS_ALLOC_GRANULARITY) : 0;
    int r = need ? gs_mem_reserve(fn, pdev, need) : 0;
    if (r < 0) {
        pthread_mutex_unlock(&gs_pool_lock);
        gs_capture_restore(mode);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    gs_capture_restore(mode); /* the real call runs in the application's capture mode */
    CUresult rc = call(a);
    mode = gs_capture_relax();
    uint64_t after = gs_pool_sync_locked(e);       /* charge the real growth first, */
    if (r > 0) gs_account_cancel(pdev, need);      /* then drop the estimate: never under-counted */
    uint64_t limit = gs_account_limit(pdev);
    if (rc == CUDA_SUCCESS && after > before && limit && gs_account_total(pdev) > limit) {
        gs_pool_refresh_all(); /* other pools may have given memory back since they were read */
        if (gs_account_total(pdev) > limit) {
            if (gs_pool_undo(a, before) == 0) {
                gs_pool_sync_locked(e);
                if (gs_account_total(pdev) > limit) { /* the trim kept other chunks: drop all spare */
                    gs_real_cuMemPoolTrimTo(a->pool, 0);
                    gs_pool_sync_locked(e);
                }
                GS_REFUSE(fn, pdev, after - before);
                rc = CUDA_ERROR_OUT_OF_MEMORY;
            } else {
                GS_LOG_ONCE(GS_LOG_WARN, "%s: pool grew past the limit during stream capture; left charged", fn);
            }
        }
    }
    pthread_mutex_unlock(&gs_pool_lock);
    gs_capture_restore(mode);
    return rc;
}

static CUmemoryPool gs_pool_of_device(int dev)
{
    PFN_cuDeviceGetMemPool_v11020 get = gs_real_cuDeviceGetMemPool;
    CUmemoryPool pool = NULL;
    if (dev < 0 || get == NULL || get(&pool, (CUdevice)dev) != CUDA_SUCCESS) return NULL;
    return pool;
}

static CUresult gs_call_async(struct gs_async_args *a)
{
    return ((PFN_cuMemAllocAsync_v11020)a->real)(a->dptr, a->bytesize, a->stream);
}

static CUresult gs_call_from_pool(struct gs_async_args *a)
{
    return ((PFN_cuMemAllocFromPoolAsync_v11020)a->real)(a->dptr, a->bytesize, a->pool, a->stream);
}

static CUresult gs_alloc_async(const char *fn, void *real, CUdeviceptr *dptr, size_t bytesize, CUstream s, int ptsz)
{
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    struct gs_async_args a = {real, dptr, bytesize, NULL, s, ptsz};
    CUstreamCaptureMode mode = gs_capture_relax();
    int dev = gs_mem_stream_device(s, ptsz);
    a.pool = gs_pool_of_device(dev);
    gs_capture_restore(mode);
    return gs_pool_alloc(fn, &a, dev, gs_call_async);
}

/* The device a pool allocates on (its memory is charged there, whichever device the stream is
 * on): recorded at cuMemPoolCreate, else the device whose default or current pool it is. */
static int gs_pool_device(CUmemoryPool pool, int stream_dev)
{
    pthread_mutex_lock(&gs_pool_lock);
    struct gs_pool_entry *e = gs_pool_find(pool);
    int dev = e ? e->dev : -1;
    pthread_mutex_unlock(&gs_pool_lock);
    PFN_cuDeviceGetCount_v2000 count = gs_real_cuDeviceGetCount;
    int n = 0;
    if (dev >= 0 || count == NULL || count(&n) != CUDA_SUCCESS) return dev >= 0 ? dev : stream_dev;
    for (int d = 0; d < n; d++) {
        CUmemoryPool p = NULL;
        if (gs_pool_of_device(d) == pool ||
            (gs_real_cuDeviceGetDefaultMemPool && gs_real_cuDeviceGetDefaultMemPool(&p, d) == CUDA_SUCCESS && p == pool))
            return d;
    }
    return stream_dev;
}

static CUresult gs_alloc_from_pool(const char *fn, void *real, CUdeviceptr *dptr, size_t bytesize,
                                   CUmemoryPool pool, CUstream s, int ptsz)
{
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    struct gs_async_args a = {real, dptr, bytesize, pool, s, ptsz};
    CUstreamCaptureMode mode = gs_capture_relax();
    int dev = gs_mem_stream_device(s, ptsz);
    if (dev >= 0) dev = gs_pool_device(pool, dev);
    gs_capture_restore(mode);
    return gs_pool_alloc(fn, &a, dev, gs_call_from_pool);
}

CUresult gs_pool_alloc_async(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return gs_alloc_async("cuMemAllocAsync", (void *)GS_REAL(cuMemAllocAsync), dptr, bytesize, hStream, 0);
}

CUresult gs_pool_alloc_async_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return gs_alloc_async("cuMemAllocAsync_ptsz", (void *)GS_REAL(cuMemAllocAsync_ptsz), dptr, bytesize, hStream, 1);
}

CUresult gs_pool_alloc_from_pool(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
    return gs_alloc_from_pool("cuMemAllocFromPoolAsync", (void *)GS_REAL(cuMemAllocFromPoolAsync), dptr, bytesize,
                              pool, hStream, 0);
}

CUresult gs_pool_alloc_from_pool_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
    return gs_alloc_from_pool("cuMemAllocFromPoolAsync_ptsz", (void *)GS_REAL(cuMemAllocFromPoolAsync_ptsz), dptr,
                              bytesize, pool, hStream, 1);
}

/* Frees return memory to the pool, not to the driver: nothing to release here. If some pool
 * holds more than its release threshold, the next synchronisation may shrink it: flag it. */
static CUresult gs_pool_freed(CUresult rc)
{
    if (__atomic_load_n(&gs_pool_armed, __ATOMIC_RELAXED)) __atomic_store_n(&gs_pool_dirty, 1, __ATOMIC_RELAXED);
    return rc;
}

CUresult gs_pool_free_async(CUdeviceptr dptr, CUstream hStream)
{
    PFN_cuMemFreeAsync_v11020 real = GS_REAL(cuMemFreeAsync);
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    return gs_pool_freed(real(dptr, hStream));
}

CUresult gs_pool_free_async_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    PFN_cuMemFreeAsync_v11020_ptsz real = GS_REAL(cuMemFreeAsync_ptsz);
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    return gs_pool_freed(real(dptr, hStream));
}

CUresult gs_pool_create(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    PFN_cuMemPoolCreate_v11020 real = GS_REAL(cuMemPoolCreate);
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    CUresult rc = real(pool, props);
    if (rc == CUDA_SUCCESS && gs_ready() && props && props->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
        pthread_mutex_lock(&gs_pool_lock);
        gs_pool_entry(*pool, props->location.id); /* remember its device; charged at its first read */
        pthread_mutex_unlock(&gs_pool_lock);
    }
    return rc;
}

CUresult gs_pool_trim(CUmemoryPool pool, size_t minBytesToKeep)
{
    PFN_cuMemPoolTrimTo_v11020 real = GS_REAL(cuMemPoolTrimTo);
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    CUresult rc = real(pool, minBytesToKeep);
    if (rc == CUDA_SUCCESS && gs_ready()) {
        CUstreamCaptureMode mode = gs_capture_relax();
        pthread_mutex_lock(&gs_pool_lock);
        struct gs_pool_entry *e = gs_pool_find(pool);
        if (e != NULL) gs_pool_sync_locked(e);
        pthread_mutex_unlock(&gs_pool_lock);
        gs_capture_restore(mode);
    }
    return rc;
}

CUresult gs_pool_destroy(CUmemoryPool pool)
{
    PFN_cuMemPoolDestroy_v11020 real = GS_REAL(cuMemPoolDestroy);
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    CUresult rc = real(pool);
    if (rc == CUDA_SUCCESS && gs_ready()) {
        pthread_mutex_lock(&gs_pool_lock);
        struct gs_pool_entry *e = gs_pool_find(pool);
        if (e != NULL) {
            gs_account_release(e->dev, e->charged);
            *e = gs_pools[gs_npools - 1];
            __atomic_store_n(&gs_npools, gs_npools - 1, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&gs_pool_lock);
    }
    return rc;
}

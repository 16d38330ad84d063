/* Stream-ordered allocator. Pools keep memory after cuMemFreeAsync, so what is charged is the
 * pool's RESERVED memory (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), not the allocations: before an
 * allocation that may grow the pool we reserve the part the pool cannot serve from its free
 * reserve, then settle on the real reserved delta. Pools are re-read on alloc, trim, destroy,
 * cuMemGetInfo and before any refusal (their memory goes back to the driver at sync points). */
#define _GNU_SOURCE
#include <pthread.h>

#include "init.h"
#include "log.h"
#include "mem/account.h"
#include "mem/mem.h"
#include "mem/pools.h"

static pthread_mutex_t gs_pool_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP; /* refusals re-read pools */

static int gs_pool_attr(CUmemoryPool pool, CUmemPool_attribute attr, uint64_t *out)
{
    PFN_cuMemPoolGetAttribute_v11020 get = gs_real_cuMemPoolGetAttribute;
    cuuint64_t v = 0;
    if (get == NULL || get(pool, attr, &v) != CUDA_SUCCESS) return -1;
    *out = (uint64_t)v;
    return 0;
}

/* Bring the charge of one pool to its current reserved size (lock held). */
static void gs_pool_sync_locked(CUmemoryPool pool, int dev)
{
    uint64_t reserved, charged = 0;
    int tdev = dev;
    if (gs_pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved) != 0) return;
    gs_track_get(GS_TRACK_POOL, (uint64_t)(uintptr_t)pool, &tdev, &charged);
    if (tdev < 0) return;
    if (reserved > charged) gs_account_charge(tdev, reserved - charged);
    else if (reserved < charged) gs_account_release(tdev, charged - reserved);
    gs_track_set(GS_TRACK_POOL, (uint64_t)(uintptr_t)pool, tdev, reserved);
}

#define GS_MAX_POOLS 64
struct gs_pool_list {
    int n;
    uint64_t keys[GS_MAX_POOLS];
    int devs[GS_MAX_POOLS];
};

static void gs_pool_collect(uint64_t key, int dev, uint64_t bytes, void *arg)
{
    struct gs_pool_list *l = arg;
    (void)bytes;
    if (l->n < GS_MAX_POOLS) {
        l->keys[l->n] = key;
        l->devs[l->n++] = dev;
    }
}

void gs_pool_refresh_all(void)
{
    struct gs_pool_list l = {0};
    gs_track_each(GS_TRACK_POOL, gs_pool_collect, &l);
    if (l.n == 0) return;
    pthread_mutex_lock(&gs_pool_lock);
    for (int i = 0; i < l.n; i++) gs_pool_sync_locked((CUmemoryPool)(uintptr_t)l.keys[i], l.devs[i]);
    pthread_mutex_unlock(&gs_pool_lock);
}

typedef CUresult (*gs_pool_call)(void *ctx);

/* Shared path of the four allocation entry points: call(ctx) performs the real allocation. */
static CUresult gs_pool_alloc(const char *fn, CUmemoryPool pool, int dev, size_t bytesize, gs_pool_call call,
                              void *ctx)
{
    if (pool == NULL || dev < 0 || bytesize == 0) return call(ctx);
    pthread_mutex_lock(&gs_pool_lock);
    uint64_t reserved = 0, used = 0, charged = 0;
    int tdev = dev;
    if (gs_track_get(GS_TRACK_POOL, (uint64_t)(uintptr_t)pool, &tdev, &charged) != 0)
        gs_track_put(GS_TRACK_POOL, (uint64_t)(uintptr_t)pool, dev, 0);
    gs_pool_sync_locked(pool, dev);
    gs_pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved);
    gs_pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used);
    uint64_t spare = reserved > used ? reserved - used : 0;
    uint64_t need = bytesize > spare ? gs_round_up(bytesize - spare, GS_ALLOC_GRANULARITY) : 0;
    int r = need ? gs_mem_reserve(fn, dev, need) : 0;
    if (r < 0) {
        pthread_mutex_unlock(&gs_pool_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUresult rc = call(ctx);
    if (r > 0) gs_account_cancel(dev, need); /* the real growth is charged by the sync below */
    gs_pool_sync_locked(pool, dev);
    pthread_mutex_unlock(&gs_pool_lock);
    return rc;
}

static CUmemoryPool gs_pool_of_device(int dev)
{
    PFN_cuDeviceGetMemPool_v11020 get = gs_real_cuDeviceGetMemPool;
    CUmemoryPool pool = NULL;
    if (dev < 0 || get == NULL || get(&pool, (CUdevice)dev) != CUDA_SUCCESS) return NULL;
    return pool;
}

struct gs_async_args {
    void *real;
    CUdeviceptr *dptr;
    size_t bytesize;
    CUmemoryPool pool;
    CUstream stream;
};

static CUresult gs_call_async(void *p)
{
    struct gs_async_args *a = p;
    return ((PFN_cuMemAllocAsync_v11020)a->real)(a->dptr, a->bytesize, a->stream);
}

static CUresult gs_call_from_pool(void *p)
{
    struct gs_async_args *a = p;
    return ((PFN_cuMemAllocFromPoolAsync_v11020)a->real)(a->dptr, a->bytesize, a->pool, a->stream);
}

static CUresult gs_alloc_async(const char *fn, void *real, CUdeviceptr *dptr, size_t bytesize, CUstream s, int ptsz)
{
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    struct gs_async_args a = {real, dptr, bytesize, NULL, s};
    int dev = gs_mem_stream_device(s, ptsz);
    a.pool = gs_pool_of_device(dev);
    return gs_pool_alloc(fn, a.pool, dev, bytesize, gs_call_async, &a);
}

static CUresult gs_alloc_from_pool(const char *fn, void *real, CUdeviceptr *dptr, size_t bytesize,
                                   CUmemoryPool pool, CUstream s, int ptsz)
{
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    struct gs_async_args a = {real, dptr, bytesize, pool, s};
    int dev = gs_mem_stream_device(s, ptsz);
    return gs_pool_alloc(fn, pool, dev, bytesize, gs_call_from_pool, &a);
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

/* Frees return memory to the pool, not to the driver: nothing to release here (the pool's
 * reserved size is re-read on the next allocation, trim, cuMemGetInfo or refusal). */
CUresult gs_pool_free_async(CUdeviceptr dptr, CUstream hStream)
{
    PFN_cuMemFreeAsync_v11020 real = GS_REAL(cuMemFreeAsync);
    return real ? real(dptr, hStream) : CUDA_ERROR_NOT_FOUND;
}

CUresult gs_pool_free_async_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    PFN_cuMemFreeAsync_v11020_ptsz real = GS_REAL(cuMemFreeAsync_ptsz);
    return real ? real(dptr, hStream) : CUDA_ERROR_NOT_FOUND;
}

CUresult gs_pool_trim(CUmemoryPool pool, size_t minBytesToKeep)
{
    PFN_cuMemPoolTrimTo_v11020 real = GS_REAL(cuMemPoolTrimTo);
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    CUresult rc = real(pool, minBytesToKeep);
    int dev;
    uint64_t charged;
    if (rc == CUDA_SUCCESS && gs_ready() && gs_track_get(GS_TRACK_POOL, (uint64_t)(uintptr_t)pool, &dev, &charged) == 0) {
        pthread_mutex_lock(&gs_pool_lock);
        gs_pool_sync_locked(pool, dev);
        pthread_mutex_unlock(&gs_pool_lock);
    }
    return rc;
}

CUresult gs_pool_destroy(CUmemoryPool pool)
{
    PFN_cuMemPoolDestroy_v11020 real = GS_REAL(cuMemPoolDestroy);
    if (real == NULL) return CUDA_ERROR_NOT_FOUND;
    CUresult rc = real(pool);
    int dev;
    uint64_t charged;
    if (rc == CUDA_SUCCESS && gs_ready()) {
        pthread_mutex_lock(&gs_pool_lock);
        if (gs_track_take(GS_TRACK_POOL, (uint64_t)(uintptr_t)pool, &dev, &charged) == 0)
            gs_account_release(dev, charged);
        pthread_mutex_unlock(&gs_pool_lock);
    }
    return rc;
}

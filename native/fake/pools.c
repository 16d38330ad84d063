/* Fake driver: stream-ordered allocation and memory pools. A pool keeps freed memory reserved (as
 * the real one does) until cuMemPoolTrimTo, or until a synchronisation (stream/event/context) finds
 * it above CU_MEMPOOL_ATTR_RELEASE_THRESHOLD (default 0). It grows in FAKE_CUDA_POOL_CHUNK_MIB steps;
 * suballocations are rounded to 512 bytes. RESERVED_MEM_CURRENT is what the device is charged. */
#include "fake.h"

#include <pthread.h>
#include <stdlib.h>

struct fake_pool {
    int ordinal;
    int alive;
    uint64_t reserved, used, reserved_high, used_high, threshold;
    int reuse[3];
    struct fake_pool *next;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fake_pool *g_pools;
static struct fake_pool *g_default[FAKE_MAX_DEV], *g_current[FAKE_MAX_DEV];

static struct fake_pool *pool_new(int ordinal) {
    struct fake_pool *p = calloc(1, sizeof *p);
    if (p == NULL)
        return NULL;
    p->ordinal = ordinal;
    p->alive = 1;
    p->reuse[0] = p->reuse[1] = p->reuse[2] = 1;
    p->next = g_pools;
    g_pools = p;
    return p;
}

static struct fake_pool *default_pool_locked(int ordinal) {
    if (g_default[ordinal] == NULL)
        g_default[ordinal] = pool_new(ordinal);
    if (g_current[ordinal] == NULL)
        g_current[ordinal] = g_default[ordinal];
    return g_default[ordinal];
}

/* Caller holds g_lock. Shrinks reserved to max(used, keep) rounded to 2 MiB. */
static void shrink_locked(struct fake_pool *p, uint64_t keep) {
    uint64_t floor = p->used > keep ? p->used : keep;
    uint64_t target = floor >= p->reserved ? p->reserved : fake_round_up(floor, FAKE_GRANULE);
    if (target > p->reserved)
        target = p->reserved;
    fake_uncharge(fake_phys(p->ordinal), p->reserved - target);
    p->reserved = target;
}

void fake_pools_release_at_sync(void) {
    pthread_mutex_lock(&g_lock);
    for (struct fake_pool *p = g_pools; p != NULL; p = p->next)
        if (p->alive && p->reserved > p->threshold)
            shrink_locked(p, p->threshold);
    pthread_mutex_unlock(&g_lock);
}

void fake_pool_return(void *pool, uint64_t size) {
    struct fake_pool *p = pool;
    pthread_mutex_lock(&g_lock);
    p->used = p->used >= size ? p->used - size : 0;
    pthread_mutex_unlock(&g_lock);
}

static CUresult pool_alloc(CUdeviceptr *dptr, size_t bytes, struct fake_pool *p, CUstream hs) {
    FAKE_NEED_INIT();
    CUresult rc;
    struct fake_stream *s = fake_stream_resolve(hs, &rc);
    if (s == NULL)
        return rc;
    if (dptr == NULL || bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    if (p == NULL)
        p = g_current[fake_stream_ordinal(s)] ? g_current[fake_stream_ordinal(s)]
                                               : default_pool_locked(fake_stream_ordinal(s));
    if (p == NULL || !p->alive) {
        pthread_mutex_unlock(&g_lock);
        return p == NULL ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
    }
    uint64_t sub = fake_round_up(bytes, 512);
    uint64_t spare = p->reserved - p->used;
    if (spare < sub) {
        uint64_t grow = fake_round_up(sub - spare, fake_cfg()->pool_chunk);
        rc = fake_charge(fake_phys(p->ordinal), grow);
        if (rc != CUDA_SUCCESS) {
            pthread_mutex_unlock(&g_lock);
            return rc;
        }
        p->reserved += grow;
        if (p->reserved > p->reserved_high)
            p->reserved_high = p->reserved;
    }
    p->used += sub;
    if (p->used > p->used_high)
        p->used_high = p->used;
    pthread_mutex_unlock(&g_lock);
    struct fake_ctx *c = fake_current_ctx();
    struct fake_ctx tmp = {.ordinal = p->ordinal, .alive = 1};
    rc = fake_alloc_record(c ? c : &tmp, FK_POOL, 0, sub, p, dptr);
    if (rc != CUDA_SUCCESS)
        fake_pool_return(p, sub);
    return rc;
}

static CUresult alloc_from_pool(CUdeviceptr *d, size_t n, CUmemoryPool pool, CUstream s) {
    return pool == NULL ? CUDA_ERROR_INVALID_VALUE : pool_alloc(d, n, (struct fake_pool *)pool, s);
}

static CUresult free_async(CUdeviceptr ptr, CUstream hs) {
    FAKE_NEED_INIT();
    CUresult rc;
    if (fake_stream_resolve(hs, &rc) == NULL)
        return rc;
    return fake_alloc_free(ptr);
}

FAKE_VARIANTS(cuMemAllocAsync, cuMemAllocAsync_ptsz, (CUdeviceptr *d, size_t n, CUstream s), pool_alloc,
              (d, n, NULL, s))
FAKE_VARIANTS(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz,
              (CUdeviceptr *d, size_t n, CUmemoryPool pool, CUstream s), alloc_from_pool, (d, n, pool, s))
FAKE_VARIANTS(cuMemFreeAsync, cuMemFreeAsync_ptsz, (CUdeviceptr p, CUstream s), free_async, (p, s))

FAKE_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *out, CUdevice d) {
    FAKE_NEED_INIT();
    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (fake_phys(d) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&g_lock);
    *out = (CUmemoryPool)default_pool_locked(d);
    pthread_mutex_unlock(&g_lock);
    return *out ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

FAKE_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *out, CUdevice d) {
    CUresult rc = cuDeviceGetDefaultMemPool(out, d);
    if (rc == CUDA_SUCCESS)
        *out = (CUmemoryPool)g_current[d];
    return rc;
}

FAKE_EXPORT CUresult cuDeviceSetMemPool(CUdevice d, CUmemoryPool pool) {
    FAKE_NEED_INIT();
    struct fake_pool *p = (struct fake_pool *)pool;
    if (fake_phys(d) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    if (p == NULL || !p->alive || p->ordinal != d)
        return CUDA_ERROR_INVALID_VALUE;
    g_current[d] = p;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *out, const CUmemPoolProps *props) {
    FAKE_NEED_INIT();
    if (out == NULL || props == NULL || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (fake_phys(props->location.id) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&g_lock);
    struct fake_pool *p = pool_new(props->location.id);
    pthread_mutex_unlock(&g_lock);
    if (p == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *out = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) {
    FAKE_NEED_INIT();
    struct fake_pool *p = (struct fake_pool *)pool;
    if (p == NULL || !p->alive || p == g_default[p->ordinal])
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    p->alive = 0; /* kept in the list: outstanding pointers may still be freed into it */
    fake_uncharge(fake_phys(p->ordinal), p->reserved);
    p->reserved = p->used = 0;
    if (g_current[p->ordinal] == p)
        g_current[p->ordinal] = g_default[p->ordinal];
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
    fake_note(__func__);
    FAKE_NEED_INIT();
    struct fake_pool *p = (struct fake_pool *)pool;
    if (p == NULL || !p->alive)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    shrink_locked(p, keep);
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute a, void *v) {
    FAKE_NEED_INIT();
    if (fake_capture_unsafe()) /* as the real driver: refused, and the capture is invalidated */
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    struct fake_pool *p = (struct fake_pool *)pool;
    if (p == NULL || !p->alive || v == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_lock);
    switch (a) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: *(int *)v = p->reuse[a - 1]; break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *(cuuint64_t *)v = p->threshold; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *(cuuint64_t *)v = p->reserved; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *(cuuint64_t *)v = p->reserved_high; break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *(cuuint64_t *)v = p->used; break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *(cuuint64_t *)v = p->used_high; break;
    default: rc = CUDA_ERROR_INVALID_VALUE; break;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

FAKE_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute a, void *v) {
    FAKE_NEED_INIT();
    struct fake_pool *p = (struct fake_pool *)pool;
    if (p == NULL || !p->alive || v == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_lock);
    switch (a) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: p->reuse[a - 1] = *(int *)v; break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: p->threshold = *(cuuint64_t *)v; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        if (*(cuuint64_t *)v != 0)
            rc = CUDA_ERROR_INVALID_VALUE;
        else
            p->reserved_high = p->reserved;
        break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        if (*(cuuint64_t *)v != 0)
            rc = CUDA_ERROR_INVALID_VALUE;
        else
            p->used_high = p->used;
        break;
    default: rc = CUDA_ERROR_INVALID_VALUE; break;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

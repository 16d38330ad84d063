/* Fake driver: device allocations (plain, pitch, managed, pool-backed), memory info, arrays.
 * Every allocation is charged in 2 MiB granules (cuMemAlloc's granularity on current GPUs); pitch
 * = width rounded up to 512 bytes; arrays take rows of 512-byte pitch, rounded to 2 MiB. */
#include "fake.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct rec {
    CUdeviceptr ptr;
    uint64_t charged, size;
    enum fake_kind kind;
    struct fake_ctx *ctx;
    void *pool;
    int ordinal;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rec *g_recs;
static size_t g_nrecs, g_cap;
static _Atomic uint64_t g_va_next[FAKE_MAX_DEV];

uint64_t fake_next_va(int ordinal, uint64_t bytes) {
    uint64_t off = atomic_fetch_add(&g_va_next[ordinal], fake_round_up(bytes, FAKE_GRANULE) + FAKE_GRANULE);
    return 0x7f0000000000ull + ((uint64_t)ordinal << 40) + off + FAKE_GRANULE;
}

CUresult fake_alloc_record(struct fake_ctx *ctx, enum fake_kind kind, uint64_t charged, uint64_t size, void *pool,
                           CUdeviceptr *out) {
    pthread_mutex_lock(&g_lock);
    if (g_nrecs == g_cap) {
        size_t cap = g_cap ? g_cap * 2 : 256;
        struct rec *r = realloc(g_recs, cap * sizeof *r);
        if (r == NULL) {
            pthread_mutex_unlock(&g_lock);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        g_recs = r;
        g_cap = cap;
    }
    struct rec *r = &g_recs[g_nrecs++];
    r->ptr = (CUdeviceptr)fake_next_va(ctx->ordinal, size);
    r->charged = charged;
    r->size = size;
    r->kind = kind;
    r->ctx = ctx;
    r->pool = pool;
    r->ordinal = ctx->ordinal;
    *out = r->ptr;
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
}

/* Gives a record's bytes back: to its pool (still reserved there) or to the device. */
static void release(const struct rec *r) {
    if (r->kind == FK_POOL)
        fake_pool_return(r->pool, r->size);
    else
        fake_uncharge(fake_phys(r->ordinal), r->charged);
}

CUresult fake_alloc_free(CUdeviceptr ptr) {
    struct rec r = {0};
    pthread_mutex_lock(&g_lock);
    for (size_t i = 0; i < g_nrecs; i++) {
        if (g_recs[i].ptr == ptr) {
            r = g_recs[i];
            g_recs[i] = g_recs[--g_nrecs];
            break;
        }
    }
    pthread_mutex_unlock(&g_lock);
    if (r.kind == 0)
        return CUDA_ERROR_INVALID_VALUE;
    release(&r);
    return CUDA_SUCCESS;
}

void fake_ctx_free_all(struct fake_ctx *ctx) {
    pthread_mutex_lock(&g_lock);
    for (size_t i = 0; i < g_nrecs;) {
        struct rec r = g_recs[i];
        if (r.ctx != ctx) {
            i++;
            continue;
        }
        g_recs[i] = g_recs[--g_nrecs];
        release(&r);
    }
    pthread_mutex_unlock(&g_lock);
}

static CUresult alloc_kind(CUdeviceptr *dptr, uint64_t bytes, enum fake_kind kind) {
    struct fake_ctx *c;
    CUresult rc = fake_need_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (dptr == NULL || bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    long delay = fake_cfg()->alloc_delay_ms;
    struct timespec ts = {delay / 1000, (delay % 1000) * 1000000L};
    if (delay > 0) /* FAKE_CUDA_ALLOC_DELAY_MS: the allocation is in flight meanwhile */
        nanosleep(&ts, NULL);
    uint64_t charged = fake_round_up(bytes, FAKE_GRANULE);
    if (charged < bytes)
        return CUDA_ERROR_OUT_OF_MEMORY;
    rc = fake_charge(fake_phys(c->ordinal), charged);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = fake_alloc_record(c, kind, charged, bytes, NULL, dptr);
    if (rc != CUDA_SUCCESS)
        fake_uncharge(fake_phys(c->ordinal), charged);
    return rc;
}

FAKE_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes) {
    fake_note(__func__);
    return alloc_kind(dptr, bytes, FK_PLAIN);
}

FAKE_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                        unsigned int elem) {
    fake_note(__func__);
    FAKE_NEED_INIT();
    if (pitch == NULL || width == 0 || height == 0 || (elem != 4 && elem != 8 && elem != 16))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t p = fake_round_up(width, FAKE_PITCH_ALIGN);
    if (height > UINT64_MAX / p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = alloc_kind(dptr, p * height, FK_PITCH);
    if (rc == CUDA_SUCCESS)
        *pitch = p;
    return rc;
}

FAKE_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, unsigned int flags) {
    fake_note(__func__);
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
        return CUDA_ERROR_INVALID_VALUE;
    return alloc_kind(dptr, bytes, FK_MANAGED);
}

FAKE_EXPORT CUresult cuMemFree_v2(CUdeviceptr ptr) {
    fake_note(__func__);
    struct fake_ctx *c;
    CUresult rc = fake_need_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    /* cuMemFree on pool memory: a synchronous free back to its pool */
    return ptr == 0 ? CUDA_SUCCESS : fake_alloc_free(ptr);
}

FAKE_EXPORT CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total) {
    fake_note(__func__);
    struct fake_ctx *c;
    CUresult rc = fake_need_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (free_b == NULL || total == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    int phys = fake_phys(c->ordinal);
    uint64_t t = fake_state()->total[phys], u = fake_device_used(phys);
    *total = t;
    *free_b = u >= t ? 0 : t - u;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr ptr) {
    struct fake_ctx *c;
    CUresult rc = fake_need_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = CUDA_ERROR_NOT_FOUND;
    pthread_mutex_lock(&g_lock);
    for (size_t i = 0; i < g_nrecs; i++)
        if (ptr >= g_recs[i].ptr && ptr < g_recs[i].ptr + g_recs[i].size) {
            if (base)
                *base = g_recs[i].ptr;
            if (size)
                *size = g_recs[i].size;
            rc = CUDA_SUCCESS;
            break;
        }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* Copies and sets: the fake holds no data; they only validate and return. */
FAKE_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
    struct fake_ctx *c;
    (void)dst;
    (void)src;
    (void)n;
    return fake_need_ctx(&c);
}

FAKE_EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
    struct fake_ctx *c;
    CUresult rc = fake_need_ctx(&c);
    if (rc == CUDA_SUCCESS && dst != NULL)
        memset(dst, 0, n);
    (void)src;
    return rc;
}

FAKE_EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n) {
    struct fake_ctx *c;
    (void)dst;
    (void)v;
    (void)n;
    return fake_need_ctx(&c);
}

/* ---- arrays ---- */
struct fake_array {
    uint64_t charged;
    int ordinal;
    int alive;
};

static unsigned format_bytes(CUarray_format f) {
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF: return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT: return 4;
    default: return 0;
    }
}

static CUresult array_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned level, uint64_t *out) {
    unsigned eb = format_bytes(d->Format);
    if (eb == 0 || d->Width == 0 || (d->NumChannels != 1 && d->NumChannels != 2 && d->NumChannels != 4))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t w = d->Width >> level, h = d->Height >> level, z = d->Depth >> level;
    w = w ? w : 1;
    h = d->Height ? (h ? h : 1) : 1;
    z = d->Depth ? (z ? z : 1) : 1;
    *out = fake_round_up(w * eb * d->NumChannels, FAKE_PITCH_ALIGN) * h * z;
    return CUDA_SUCCESS;
}

static CUresult array_new(const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned levels, void **out) {
    struct fake_ctx *c;
    CUresult rc = fake_need_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (d == NULL || out == NULL || levels == 0)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t total = 0;
    for (unsigned l = 0; l < levels; l++) {
        uint64_t b;
        if ((rc = array_bytes(d, l, &b)) != CUDA_SUCCESS)
            return rc;
        total += b;
    }
    uint64_t charged = fake_round_up(total, FAKE_GRANULE);
    if ((rc = fake_charge(fake_phys(c->ordinal), charged)) != CUDA_SUCCESS)
        return rc;
    struct fake_array *a = calloc(1, sizeof *a);
    if (a == NULL) {
        fake_uncharge(fake_phys(c->ordinal), charged);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->charged = charged;
    a->ordinal = c->ordinal;
    a->alive = 1;
    *out = a;
    return CUDA_SUCCESS;
}

static CUresult array_free(void *h) {
    FAKE_NEED_INIT();
    struct fake_array *a = h;
    if (a == NULL || !a->alive)
        return CUDA_ERROR_INVALID_HANDLE;
    a->alive = 0;
    fake_uncharge(fake_phys(a->ordinal), a->charged); /* struct kept: a stale handle fails cleanly */
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuArrayCreate_v2(CUarray *h, const CUDA_ARRAY_DESCRIPTOR *d) {
    fake_note(__func__);
    if (d == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_ARRAY3D_DESCRIPTOR d3 = {.Width = d->Width, .Height = d->Height, .Depth = 0, .Format = d->Format,
                                  .NumChannels = d->NumChannels, .Flags = 0};
    return array_new(&d3, 1, (void **)h);
}

FAKE_EXPORT CUresult cuArray3DCreate_v2(CUarray *h, const CUDA_ARRAY3D_DESCRIPTOR *d) {
    fake_note(__func__);
    return array_new(d, 1, (void **)h);
}

FAKE_EXPORT CUresult cuArrayDestroy(CUarray h) { return array_free(h); }

FAKE_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *h, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                            unsigned int levels) {
    fake_note(__func__);
    return array_new(d, levels, (void **)h);
}

FAKE_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray h) { return array_free(h); }

/* Like the real driver: only arrays made with CUDA_ARRAY3D_DEFERRED_MAPPING have requirements. */
FAKE_EXPORT CUresult cuArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS *r, CUarray a, CUdevice d) {
    (void)r;
    (void)a;
    (void)d;
    return fake_initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
}

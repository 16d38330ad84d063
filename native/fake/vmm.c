/* Fake driver: virtual memory management (cuMemCreate & co.). Sizes must be multiples of the
 * 2 MiB granularity (as on the real driver); physical bytes are freed once the handle is released
 * AND no mapping of it remains. */
#include "fake.h"

#include <pthread.h>
#include <stdlib.h>

struct vmm_handle {
    uint64_t size;
    int ordinal;
    int released;
    int maps;
};

struct vmm_map {
    CUdeviceptr ptr;
    uint64_t size;
    struct vmm_handle *h;
    struct vmm_map *next;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct vmm_map *g_maps;

static CUresult check_prop(const CUmemAllocationProp *p) {
    if (p == NULL || p->type != CU_MEM_ALLOCATION_TYPE_PINNED || p->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    return fake_phys(p->location.id) < 0 ? CUDA_ERROR_INVALID_DEVICE : CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *p,
                                                   CUmemAllocationGranularity_flags opt) {
    FAKE_NEED_INIT();
    if (g == NULL || (opt != CU_MEM_ALLOC_GRANULARITY_MINIMUM && opt != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = check_prop(p);
    if (rc == CUDA_SUCCESS)
        *g = FAKE_GRANULE;
    return rc;
}

static void maybe_free(struct vmm_handle *h) {
    if (h->released && h->maps == 0) {
        fake_uncharge(fake_phys(h->ordinal), h->size);
        free(h);
    }
}

FAKE_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *out, size_t size, const CUmemAllocationProp *p,
                                 unsigned long long flags) {
    fake_note(__func__);
    struct fake_ctx *c;
    CUresult rc = fake_need_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (out == NULL || size == 0 || size % FAKE_GRANULE != 0 || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if ((rc = check_prop(p)) != CUDA_SUCCESS)
        return rc;
    struct vmm_handle *h = calloc(1, sizeof *h);
    if (h == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if ((rc = fake_charge(fake_phys(p->location.id), size)) != CUDA_SUCCESS) {
        free(h);
        return rc;
    }
    h->size = size;
    h->ordinal = p->location.id;
    *out = (CUmemGenericAllocationHandle)(uintptr_t)h;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
    FAKE_NEED_INIT();
    struct vmm_handle *h = (struct vmm_handle *)(uintptr_t)handle;
    if (h == NULL || h->released)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    h->released = 1;
    maybe_free(h);
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr,
                                         unsigned long long flags) {
    (void)align;
    (void)addr;
    FAKE_NEED_INIT();
    if (ptr == NULL || size == 0 || size % FAKE_GRANULE != 0 || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    *ptr = (CUdeviceptr)fake_next_va(FAKE_MAX_DEV - 1, size); /* VA only: no device bytes */
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
    FAKE_NEED_INIT();
    return ptr == 0 || size == 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                              unsigned long long flags) {
    FAKE_NEED_INIT();
    struct vmm_handle *h = (struct vmm_handle *)(uintptr_t)handle;
    if (h == NULL || h->released || ptr == 0 || flags != 0 || offset + size > h->size || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct vmm_map *m = calloc(1, sizeof *m);
    if (m == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    m->ptr = ptr;
    m->size = size;
    m->h = h;
    pthread_mutex_lock(&g_lock);
    h->maps++;
    m->next = g_maps;
    g_maps = m;
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
    FAKE_NEED_INIT();
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    for (struct vmm_map **pp = &g_maps; *pp != NULL; pp = &(*pp)->next) {
        struct vmm_map *m = *pp;
        if (m->ptr == ptr && m->size == size) {
            *pp = m->next;
            m->h->maps--;
            maybe_free(m->h);
            free(m);
            rc = CUDA_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

FAKE_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count) {
    FAKE_NEED_INIT();
    if (desc == NULL || count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    for (struct vmm_map *m = g_maps; m != NULL; m = m->next)
        if (ptr >= m->ptr && ptr + size <= m->ptr + m->size)
            rc = CUDA_SUCCESS;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

FAKE_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *p,
                                                            CUmemGenericAllocationHandle handle) {
    struct vmm_handle *h = (struct vmm_handle *)(uintptr_t)handle;
    if (p == NULL || h == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *p = (CUmemAllocationProp){.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                               .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = h->ordinal}};
    return CUDA_SUCCESS;
}

/* Fake driver: initialisation, devices (CUDA_VISIBLE_DEVICES honoured), contexts and their footprint
 * (FAKE_CUDA_CONTEXT_MIB charged per primary context while retained and per created context, plus
 * FAKE_CUDA_CONTEXT_UNLISTED_MIB that only the device total shows, not NVML's per-process list;
 * FAKE_CUDA_CONTEXT_DELAY_MS stretches a creation so that tests can race it; FAKE_CUDA_LAZY_MIB is
 * taken at a context's first launch, like the driver's lazily loaded modules). */
#include "fake.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static atomic_int g_inited;
static pthread_mutex_t g_ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fake_ctx g_primary[FAKE_MAX_DEV];
static __thread struct fake_ctx *t_stack[32];
static __thread int t_depth;

int fake_initialized(void) { return atomic_load(&g_inited); }

struct fake_ctx *fake_current_ctx(void) { return t_depth > 0 ? t_stack[t_depth - 1] : NULL; }

CUresult fake_need_ctx(struct fake_ctx **out) {
    FAKE_NEED_INIT();
    struct fake_ctx *c = fake_current_ctx();
    if (c == NULL || !c->alive)
        return CUDA_ERROR_INVALID_CONTEXT;
    *out = c;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuInit(unsigned int flags) {
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    fake_state();
    if (fake_cfg()->nvisible == 0)
        return CUDA_ERROR_NO_DEVICE;
    atomic_store(&g_inited, 1);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDriverGetVersion(int *v) {
    if (v == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *v = 13000;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetCount(int *n) {
    FAKE_NEED_INIT();
    if (n == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *n = fake_cfg()->nvisible;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal) {
    FAKE_NEED_INIT();
    if (d == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (fake_phys(ordinal) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
    FAKE_NEED_INIT();
    if (name == NULL || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (fake_phys(d) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "%s", fake_cfg()->name);
    return CUDA_SUCCESS;
}

static CUresult get_uuid(CUuuid *u, CUdevice d) {
    FAKE_NEED_INIT();
    if (u == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    int phys = fake_phys(d);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    fake_uuid_bytes(phys, (unsigned char *)u->bytes);
    return CUDA_SUCCESS;
}

FAKE_VARIANTS(cuDeviceGetUuid, cuDeviceGetUuid_v2, (CUuuid *u, CUdevice d), get_uuid, (u, d))

FAKE_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) {
    fake_note(__func__);
    FAKE_NEED_INIT();
    if (bytes == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    int phys = fake_phys(d);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *bytes = fake_state()->total[phys];
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetPCIBusId(char *bus, int len, CUdevice d) {
    FAKE_NEED_INIT();
    int phys = fake_phys(d);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    if (bus == NULL || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(bus, (size_t)len, "0000:%02x:00.0", phys + 0x10);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) {
    FAKE_NEED_INIT();
    if (v == NULL || (int)a <= 0 || a >= CU_DEVICE_ATTRIBUTE_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    int phys = fake_phys(d);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    switch (a) {
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = fake_cfg()->sm_count; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *v = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: *v = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: *v = 512; break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT: *v = 32; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *v = phys + 0x10; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: *v = 2048; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *v = 1980000; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: *v = 1; break;
    default: *v = 0; break;
    }
    return CUDA_SUCCESS;
}

static CUresult ctx_start(struct fake_ctx *c, int ordinal, int primary) {
    if (fake_cfg()->ctx_bytes > 0) {
        CUresult rc = fake_charge(fake_phys(ordinal), fake_cfg()->ctx_bytes);
        if (rc != CUDA_SUCCESS)
            return rc;
    }
    if (fake_cfg()->ctx_unlisted > 0) {
        CUresult rc = fake_charge_unlisted(fake_phys(ordinal), fake_cfg()->ctx_unlisted);
        if (rc != CUDA_SUCCESS) {
            fake_uncharge(fake_phys(ordinal), fake_cfg()->ctx_bytes);
            return rc;
        }
    }
    if (fake_cfg()->ctx_delay_ms > 0) {
        struct timespec ts = {fake_cfg()->ctx_delay_ms / 1000, (fake_cfg()->ctx_delay_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    c->ordinal = ordinal;
    c->primary = primary;
    c->alive = 1;
    if (c->null_stream == NULL)
        c->null_stream = fake_stream_new(c, 0);
    return CUDA_SUCCESS;
}

CUresult fake_ctx_first_launch(struct fake_ctx *c) {
    if (fake_cfg()->lazy_bytes == 0 || __atomic_exchange_n(&c->lazy_loaded, 1, __ATOMIC_ACQ_REL))
        return CUDA_SUCCESS;
    CUresult rc = fake_charge(fake_phys(c->ordinal), fake_cfg()->lazy_bytes);
    if (rc != CUDA_SUCCESS)
        __atomic_store_n(&c->lazy_loaded, 0, __ATOMIC_RELEASE);
    return rc;
}

static void ctx_stop(struct fake_ctx *c) {
    fake_ctx_free_all(c);
    if (c->alive) {
        fake_uncharge(fake_phys(c->ordinal), fake_cfg()->ctx_bytes);
        fake_uncharge_unlisted(fake_phys(c->ordinal), fake_cfg()->ctx_unlisted);
        if (c->lazy_loaded)
            fake_uncharge(fake_phys(c->ordinal), fake_cfg()->lazy_bytes);
    }
    c->alive = 0;
    c->lazy_loaded = 0;
}

FAKE_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice d) {
    FAKE_NEED_INIT();
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (fake_phys(d) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_ctx_lock);
    struct fake_ctx *c = &g_primary[d];
    if (!c->alive)
        rc = ctx_start(c, d, 1);
    if (rc == CUDA_SUCCESS) {
        c->refcount++;
        *pctx = (CUcontext)c;
    }
    pthread_mutex_unlock(&g_ctx_lock);
    return rc;
}

static CUresult primary_release(CUdevice d) {
    FAKE_NEED_INIT();
    if (fake_phys(d) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_ctx_lock);
    struct fake_ctx *c = &g_primary[d];
    if (c->refcount <= 0)
        rc = CUDA_ERROR_INVALID_CONTEXT;
    else if (--c->refcount == 0)
        ctx_stop(c);
    pthread_mutex_unlock(&g_ctx_lock);
    return rc;
}

FAKE_VARIANTS(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2, (CUdevice d), primary_release, (d))

static CUresult primary_reset(CUdevice d) {
    FAKE_NEED_INIT();
    if (fake_phys(d) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&g_ctx_lock);
    fake_ctx_free_all(&g_primary[d]);
    pthread_mutex_unlock(&g_ctx_lock);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice d) { return primary_reset(d); }
FAKE_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice d) { return primary_reset(d); }

FAKE_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned int *flags, int *active) {
    FAKE_NEED_INIT();
    if (fake_phys(d) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    if (flags)
        *flags = 0;
    if (active)
        *active = g_primary[d].alive;
    return CUDA_SUCCESS;
}

static CUresult ctx_create(CUcontext *pctx, CUdevice d) {
    FAKE_NEED_INIT();
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (fake_phys(d) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    struct fake_ctx *c = calloc(1, sizeof *c);
    if (c == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = ctx_start(c, d, 0);
    if (rc != CUDA_SUCCESS) {
        free(c);
        return rc;
    }
    c->refcount = 1;
    if (t_depth < 32)
        t_stack[t_depth++] = c;
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice d) {
    fake_note(__func__);
    (void)flags;
    return ctx_create(pctx, d);
}

FAKE_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *p, int n, unsigned int flags, CUdevice d) {
    fake_note(__func__);
    (void)p;
    (void)n;
    (void)flags;
    return ctx_create(pctx, d);
}

FAKE_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *p, unsigned int flags, CUdevice d) {
    fake_note(__func__);
    (void)p;
    (void)flags;
    return ctx_create(pctx, d);
}

FAKE_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
    FAKE_NEED_INIT();
    struct fake_ctx *c = (struct fake_ctx *)ctx;
    if (c == NULL || c->primary || !c->alive)
        return CUDA_ERROR_INVALID_CONTEXT;
    for (int i = 0; i < t_depth; i++)
        if (t_stack[i] == c) {
            memmove(&t_stack[i], &t_stack[i + 1], (size_t)(t_depth - i - 1) * sizeof t_stack[0]);
            t_depth--;
            i--;
        }
    ctx_stop(c); /* the struct is kept: stale handles must fail, not crash */
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx) {
    FAKE_NEED_INIT();
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = (CUcontext)fake_current_ctx();
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
    FAKE_NEED_INIT();
    struct fake_ctx *c = (struct fake_ctx *)ctx;
    if (c != NULL && !c->alive)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (c == NULL) {
        if (t_depth > 0)
            t_depth--;
    } else if (t_depth == 0) {
        t_stack[t_depth++] = c;
    } else {
        t_stack[t_depth - 1] = c;
    }
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
    FAKE_NEED_INIT();
    struct fake_ctx *c = (struct fake_ctx *)ctx;
    if (c == NULL || !c->alive || t_depth >= 32)
        return CUDA_ERROR_INVALID_CONTEXT;
    t_stack[t_depth++] = c;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pctx) {
    FAKE_NEED_INIT();
    if (t_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct fake_ctx *c = t_stack[--t_depth];
    if (pctx)
        *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxGetDevice(CUdevice *d) {
    struct fake_ctx *c;
    CUresult rc = fake_need_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (d == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *d = c->ordinal;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *v) {
    (void)ctx;
    FAKE_NEED_INIT();
    if (v == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *v = 3020;
    return CUDA_SUCCESS;
}

static CUresult ctx_sync(struct fake_ctx *c) {
    int phys = fake_phys(c->ordinal);
    fake_sleep_until(atomic_load(&fake_state()->busy_until_ns[phys]));
    fake_pools_release_at_sync();
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxSynchronize(void) {
    fake_note(__func__);
    struct fake_ctx *c;
    CUresult rc = fake_need_ctx(&c);
    return rc != CUDA_SUCCESS ? rc : ctx_sync(c);
}

/* CUDA 13: the context to wait for is named (NULL = the current one). */
FAKE_EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx) {
    fake_note(__func__);
    struct fake_ctx *c = (struct fake_ctx *)ctx;
    if (c == NULL) {
        CUresult rc = fake_need_ctx(&c);
        if (rc != CUDA_SUCCESS)
            return rc;
    }
    FAKE_NEED_INIT();
    return c->alive ? ctx_sync(c) : CUDA_ERROR_INVALID_CONTEXT;
}

static const struct {
    CUresult rc;
    const char *name, *text;
} g_errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
};

/* The name (0) or text (1) of a result code the fake returns. */
static CUresult error_field(CUresult rc, const char **s, int text) {
    if (s == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof g_errors / sizeof g_errors[0]; i++)
        if (g_errors[i].rc == rc) {
            *s = text ? g_errors[i].text : g_errors[i].name;
            return CUDA_SUCCESS;
        }
    *s = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

FAKE_EXPORT CUresult cuGetErrorName(CUresult rc, const char **s) { return error_field(rc, s, 0); }
FAKE_EXPORT CUresult cuGetErrorString(CUresult rc, const char **s) { return error_field(rc, s, 1); }

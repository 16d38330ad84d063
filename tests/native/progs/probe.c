/* gs_probe: a scriptable CUDA driver client for tests/native. Each argument is one command; each
 * command prints one line "<cmd> [args] rc=<CUresult> [key=value...]" so pytest can check it.
 * --via selects how driver functions are found, the ways applications do it:
 *   link (only in the binary linked with -lcuda; with -DCUDA_API_PER_THREAD_DEFAULT_STREAM the
 *   linked names are the _ptsz variants), dlopen[:ptsz] (dlopen libcuda.so.1 + dlsym of ABI names),
 *   procaddr[:VERSION[:ptsz]] (cuGetProcAddress_v2 fetched with dlsym, as CUDA >= 12 runtimes do),
 *   procaddr_v1[:VERSION[:ptsz]] (cuGetProcAddress, CUDA 11.3 - 12.4 runtimes).
 * Commands: see usage(). Exit status 0 once all commands ran (CUDA errors are reported, not fatal). */
#define _GNU_SOURCE
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct api {
    PFN_cuInit_v2000 init;
    PFN_cuDeviceGet_v2000 device_get;
    PFN_cuDeviceTotalMem_v3020 total_mem;
    PFN_cuDeviceGetUuid_v11040 get_uuid;
    PFN_cuDevicePrimaryCtxRetain_v7000 retain;
    PFN_cuDevicePrimaryCtxRelease_v11000 release;
    PFN_cuCtxSetCurrent_v4000 set_current;
    void *ctx_create; /* signature depends on the ABI version: see ctx_create() */
    int ctx_create_abi; /* 2, 3 or 4 */
    PFN_cuCtxDestroy_v4000 ctx_destroy;
    PFN_cuMemAlloc_v3020 alloc;
    PFN_cuMemFree_v3020 free;
    PFN_cuMemAllocPitch_v3020 pitch;
    PFN_cuMemAllocManaged_v6000 managed;
    PFN_cuMemGetInfo_v3020 info;
    PFN_cuMemGetAllocationGranularity_v10020 granularity;
    PFN_cuMemCreate_v10020 vmm_create;
    PFN_cuMemRelease_v10020 vmm_release;
    PFN_cuMemAddressReserve_v10020 va_reserve;
    PFN_cuMemAddressFree_v10020 va_free;
    PFN_cuMemMap_v10020 map;
    PFN_cuMemUnmap_v10020 unmap;
    PFN_cuMemSetAccess_v10020 set_access;
    PFN_cuMemAllocAsync_v11020 alloc_async;
    PFN_cuMemFreeAsync_v11020 free_async;
    PFN_cuMemAllocFromPoolAsync_v11020 alloc_from_pool;
    PFN_cuMemPoolCreate_v11020 pool_create;
    PFN_cuMemPoolDestroy_v11020 pool_destroy;
    PFN_cuMemPoolTrimTo_v11020 pool_trim;
    PFN_cuMemPoolGetAttribute_v11020 pool_get;
    PFN_cuMemPoolSetAttribute_v11020 pool_set;
    PFN_cuDeviceGetDefaultMemPool_v11020 default_pool;
    PFN_cuStreamSynchronize_v2000 stream_sync;
    PFN_cuCtxSynchronize_v2000 ctx_sync;
    PFN_cuEventCreate_v2000 event_create;
    PFN_cuEventRecord_v2000 event_record;
    PFN_cuEventSynchronize_v2000 event_sync;
    PFN_cuStreamCreate_v2000 stream_create;
    PFN_cuStreamBeginCapture_v10010 begin_capture;
    PFN_cuStreamEndCapture_v10000 end_capture;
    PFN_cuArrayCreate_v3020 array_create;
    PFN_cuArray3DCreate_v3020 array3d_create;
    PFN_cuArrayDestroy_v2000 array_destroy;
    PFN_cuMipmappedArrayCreate_v5000 mipmap_create;
    PFN_cuMipmappedArrayDestroy_v5000 mipmap_destroy;
    PFN_cuLaunchKernel_v4000 launch;
};

static struct api A;
static void *g_lib;
static PFN_cuGetProcAddress_v12000 g_gpa2;
static PFN_cuGetProcAddress_v11030 g_gpa1;
static int g_version = 13000;
static int g_ptsz;

/* ---------- loaders ---------- */
#ifdef GS_PROBE_LINKED
static void load_linked(void) {
    A.init = cuInit;
    A.device_get = cuDeviceGet;
    A.total_mem = cuDeviceTotalMem;
    A.get_uuid = cuDeviceGetUuid;
    A.retain = cuDevicePrimaryCtxRetain;
    A.release = cuDevicePrimaryCtxRelease;
    A.set_current = cuCtxSetCurrent;
    A.ctx_create = (void *)cuCtxCreate;
    A.ctx_create_abi = 4;
    A.ctx_destroy = cuCtxDestroy;
    A.alloc = cuMemAlloc;
    A.free = cuMemFree;
    A.pitch = cuMemAllocPitch;
    A.managed = cuMemAllocManaged;
    A.info = cuMemGetInfo;
    A.granularity = cuMemGetAllocationGranularity;
    A.vmm_create = cuMemCreate;
    A.vmm_release = cuMemRelease;
    A.va_reserve = cuMemAddressReserve;
    A.va_free = cuMemAddressFree;
    A.map = cuMemMap;
    A.unmap = cuMemUnmap;
    A.set_access = cuMemSetAccess;
    A.alloc_async = cuMemAllocAsync;
    A.free_async = cuMemFreeAsync;
    A.alloc_from_pool = cuMemAllocFromPoolAsync;
    A.pool_create = cuMemPoolCreate;
    A.pool_destroy = cuMemPoolDestroy;
    A.pool_trim = cuMemPoolTrimTo;
    A.pool_get = cuMemPoolGetAttribute;
    A.pool_set = cuMemPoolSetAttribute;
    A.default_pool = cuDeviceGetDefaultMemPool;
    A.stream_sync = cuStreamSynchronize;
    A.ctx_sync = cuCtxSynchronize;
    A.event_create = cuEventCreate;
    A.event_record = cuEventRecord;
    A.event_sync = cuEventSynchronize;
    A.array_create = cuArrayCreate;
    A.array3d_create = cuArray3DCreate;
    A.array_destroy = cuArrayDestroy;
    A.mipmap_create = cuMipmappedArrayCreate;
    A.mipmap_destroy = cuMipmappedArrayDestroy;
    A.launch = cuLaunchKernel;
}
#endif

static void *open_libcuda(void) {
    if (g_lib == NULL)
        g_lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (g_lib == NULL) {
        printf("load rc=-1 error=%s\n", dlerror());
        exit(2);
    }
    return g_lib;
}

/* dlsym of the exact ABI name; with ptsz, the _ptsz twin where the driver has one. */
static void *sym(const char *abi, int has_ptsz) {
    char name[128];
    snprintf(name, sizeof name, "%s%s", abi, has_ptsz && g_ptsz ? "_ptsz" : "");
    return dlsym(open_libcuda(), name);
}

static void load_dlopen(void) {
#define S(field, abi, ptsz) *(void **)&A.field = sym(abi, ptsz)
    S(init, "cuInit", 0); S(device_get, "cuDeviceGet", 0); S(total_mem, "cuDeviceTotalMem_v2", 0);
    S(get_uuid, "cuDeviceGetUuid_v2", 0); S(retain, "cuDevicePrimaryCtxRetain", 0);
    S(release, "cuDevicePrimaryCtxRelease_v2", 0); S(set_current, "cuCtxSetCurrent", 0);
    A.ctx_create = sym("cuCtxCreate_v4", 0);
    A.ctx_create_abi = 4;
    S(ctx_destroy, "cuCtxDestroy_v2", 0); S(alloc, "cuMemAlloc_v2", 0); S(free, "cuMemFree_v2", 0);
    S(pitch, "cuMemAllocPitch_v2", 0); S(managed, "cuMemAllocManaged", 0); S(info, "cuMemGetInfo_v2", 0);
    S(granularity, "cuMemGetAllocationGranularity", 0); S(vmm_create, "cuMemCreate", 0);
    S(vmm_release, "cuMemRelease", 0); S(va_reserve, "cuMemAddressReserve", 0);
    S(va_free, "cuMemAddressFree", 0); S(map, "cuMemMap", 0); S(unmap, "cuMemUnmap", 0);
    S(set_access, "cuMemSetAccess", 0); S(alloc_async, "cuMemAllocAsync", 1);
    S(free_async, "cuMemFreeAsync", 1); S(alloc_from_pool, "cuMemAllocFromPoolAsync", 1);
    S(pool_create, "cuMemPoolCreate", 0); S(pool_destroy, "cuMemPoolDestroy", 0);
    S(pool_trim, "cuMemPoolTrimTo", 0); S(pool_get, "cuMemPoolGetAttribute", 0);
    S(pool_set, "cuMemPoolSetAttribute", 0); S(default_pool, "cuDeviceGetDefaultMemPool", 0);
    S(stream_sync, "cuStreamSynchronize", 1); S(ctx_sync, "cuCtxSynchronize", 0);
    S(event_create, "cuEventCreate", 0); S(event_record, "cuEventRecord", 1);
    S(event_sync, "cuEventSynchronize", 0); S(stream_create, "cuStreamCreate", 0);
    S(begin_capture, "cuStreamBeginCapture_v2", 1); S(end_capture, "cuStreamEndCapture", 1);
    S(array_create, "cuArrayCreate_v2", 0);
    S(array3d_create, "cuArray3DCreate_v2", 0); S(array_destroy, "cuArrayDestroy", 0);
    S(mipmap_create, "cuMipmappedArrayCreate", 0); S(mipmap_destroy, "cuMipmappedArrayDestroy", 0);
    S(launch, "cuLaunchKernel", 1);
#undef S
}

static CUresult gpa(const char *name, void **fn, int *status) {
    cuuint64_t flags = g_ptsz ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_DEFAULT;
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
    CUresult rc = g_gpa2 ? g_gpa2(name, fn, g_version, flags, &st) : g_gpa1(name, fn, g_version, flags);
    if (status)
        *status = (int)st;
    return rc;
}

static void *proc(const char *base) {
    void *fn = NULL;
    if (gpa(base, &fn, NULL) != CUDA_SUCCESS)
        fn = NULL;
    return fn;
}

static void load_procaddr(int v2) {
    if (v2)
        *(void **)&g_gpa2 = dlsym(open_libcuda(), "cuGetProcAddress_v2");
    else
        *(void **)&g_gpa1 = dlsym(open_libcuda(), "cuGetProcAddress");
    if (g_gpa1 == NULL && g_gpa2 == NULL) {
        printf("load rc=-1 error=no cuGetProcAddress%s\n", v2 ? "_v2" : "");
        exit(2);
    }
#define P(field, base) *(void **)&A.field = proc(base)
    P(init, "cuInit"); P(device_get, "cuDeviceGet"); P(total_mem, "cuDeviceTotalMem");
    P(get_uuid, "cuDeviceGetUuid"); P(retain, "cuDevicePrimaryCtxRetain");
    P(release, "cuDevicePrimaryCtxRelease"); P(set_current, "cuCtxSetCurrent");
    A.ctx_create = proc("cuCtxCreate");
    A.ctx_create_abi = g_version >= 12050 ? 4 : g_version >= 11040 ? 3 : 2;
    P(ctx_destroy, "cuCtxDestroy"); P(alloc, "cuMemAlloc"); P(free, "cuMemFree");
    P(pitch, "cuMemAllocPitch"); P(managed, "cuMemAllocManaged"); P(info, "cuMemGetInfo");
    P(granularity, "cuMemGetAllocationGranularity"); P(vmm_create, "cuMemCreate");
    P(vmm_release, "cuMemRelease"); P(va_reserve, "cuMemAddressReserve"); P(va_free, "cuMemAddressFree");
    P(map, "cuMemMap"); P(unmap, "cuMemUnmap"); P(set_access, "cuMemSetAccess");
    P(alloc_async, "cuMemAllocAsync"); P(free_async, "cuMemFreeAsync");
    P(alloc_from_pool, "cuMemAllocFromPoolAsync"); P(pool_create, "cuMemPoolCreate");
    P(pool_destroy, "cuMemPoolDestroy"); P(pool_trim, "cuMemPoolTrimTo");
    P(pool_get, "cuMemPoolGetAttribute"); P(pool_set, "cuMemPoolSetAttribute");
    P(default_pool, "cuDeviceGetDefaultMemPool"); P(stream_sync, "cuStreamSynchronize");
    P(ctx_sync, "cuCtxSynchronize"); P(event_create, "cuEventCreate"); P(event_record, "cuEventRecord");
    P(event_sync, "cuEventSynchronize");
    P(array_create, "cuArrayCreate"); P(array3d_create, "cuArray3DCreate"); P(array_destroy, "cuArrayDestroy");
    P(mipmap_create, "cuMipmappedArrayCreate"); P(mipmap_destroy, "cuMipmappedArrayDestroy");
    P(launch, "cuLaunchKernel");
#undef P
}

/* ---------- helpers ---------- */
enum kind { K_PLAIN = 1, K_PITCH, K_MANAGED, K_VMM, K_ASYNC, K_POOL, K_ARRAY, K_MIPMAP, K_CTX };
struct item {
    enum kind kind;
    CUdeviceptr ptr;
    size_t size;
    CUmemGenericAllocationHandle handle;
    void *obj;
};
static struct item g_items[65536];
static int g_nitems;
static CUmemoryPool g_own_pool;
static CUdevice g_dev;

static void push(struct item it) {
    if (g_nitems < (int)(sizeof g_items / sizeof g_items[0]))
        g_items[g_nitems++] = it;
}

static const char *last_variant(void) {
    const char *(*f)(void);
    *(void **)&f = dlsym(g_lib ? g_lib : RTLD_DEFAULT, "fakecuda_last_variant");
    return f ? f() : "?";
}

static CUresult ctx_create(CUcontext *c) {
    if (A.ctx_create == NULL)
        return CUDA_ERROR_NOT_FOUND;
    if (A.ctx_create_abi == 4)
        return ((PFN_cuCtxCreate_v12050)A.ctx_create)(c, NULL, 0, g_dev);
    if (A.ctx_create_abi == 3)
        return ((PFN_cuCtxCreate_v11040)A.ctx_create)(c, NULL, 0, 0, g_dev);
    return ((PFN_cuCtxCreate_v3020)A.ctx_create)(c, 0, g_dev);
}

static CUresult release(struct item *it) {
    switch (it->kind) {
    case K_PLAIN:
    case K_PITCH:
    case K_MANAGED: return A.free(it->ptr);
    case K_ASYNC:
    case K_POOL: return A.free_async(it->ptr, NULL);
    case K_VMM: {
        CUresult rc = A.unmap(it->ptr, it->size);
        CUresult rc2 = A.vmm_release(it->handle);
        CUresult rc3 = A.va_free(it->ptr, it->size);
        return rc ? rc : rc2 ? rc2 : rc3;
    }
    case K_ARRAY: return A.array_destroy((CUarray)it->obj);
    case K_MIPMAP: return A.mipmap_destroy((CUmipmappedArray)it->obj);
    case K_CTX: return A.ctx_destroy((CUcontext)it->obj);
    }
    return CUDA_ERROR_INVALID_VALUE;
}

static CUmemAllocationProp vmm_prop(void) {
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = g_dev;
    return p;
}

static CUresult vmm_alloc(size_t size, struct item *it, size_t *gran) {
    CUmemAllocationProp prop = vmm_prop();
    CUresult rc = A.granularity(gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (rc != CUDA_SUCCESS)
        return rc;
    size = (size + *gran - 1) / *gran * *gran;
    if ((rc = A.vmm_create(&it->handle, size, &prop, 0)) != CUDA_SUCCESS)
        return rc;
    if ((rc = A.va_reserve(&it->ptr, size, 0, 0, 0)) != CUDA_SUCCESS ||
        (rc = A.map(it->ptr, size, 0, it->handle, 0)) != CUDA_SUCCESS) {
        A.vmm_release(it->handle);
        return rc;
    }
    CUmemAccessDesc acc = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    rc = A.set_access(it->ptr, size, &acc, 1);
    it->size = size;
    it->kind = K_VMM;
    return rc;
}

static CUresult pool_attr(CUmemoryPool pool, CUmemPool_attribute a, unsigned long long *v) {
    cuuint64_t x = 0;
    CUresult rc = A.pool_get(pool, a, &x);
    *v = x;
    return rc;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static unsigned long long arg_u(char **argv, int *i, int argc, unsigned long long dflt) {
    if (*i + 1 < argc && argv[*i + 1][0] >= '0' && argv[*i + 1][0] <= '9')
        return strtoull(argv[++*i], NULL, 0);
    return dflt;
}

/* The probe's own pool (poolalloc, ownpoolattr, owntrim, destroypool), on the current device. */
static CUresult own_pool_create(void) {
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = g_dev;
    return A.pool_create(&g_own_pool, &props);
}

static void usage(void) {
    fputs("usage: gs_probe [--via link|dlopen[:ptsz]|procaddr[:VER[:ptsz]]|procaddr_v1[:VER[:ptsz]]] CMD...\n"
          "  init | ctx [DEV] | ctxrelease | ctxcreate | info | total | uuid | variant | sync | ctxsync | eventsync\n"
          "  capture N (global-mode capture on a new stream of cuMemAllocAsync N + cuMemFreeAsync; dlopen only)\n"
          "  alloc N | pitch W H [ELEM] | managed N | vmm N | async N | poolalloc N | array W H |\n"
          "  array3d W H D | mipmap W H LEVELS | free | freeall | ctxdestroy(=free of a ctxcreate)\n"
          "  poolattr | ownpoolattr | trim KEEP | owntrim KEEP | threshold V | destroypool | poolcreate\n"
          "  fill N (alloc N until failure, keep) | race TRIES N | loop COUNT N | hold | sleep MS |\n"
          "  waitfile PATH | resolve NAME [VER [ptsz]] | retry N MS (alloc N every 5 ms until it works)\n"
          "  exec CMD... (replace this image, same pid, with a probe running CMD...)\n"
          "  launch BLOCKS COUNT (COUNT launches on the null stream, then sync; prints wall ms)\n",
          stderr);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    int i = 1;
    const char *via = NULL;
    if (argc > 2 && strcmp(argv[1], "--via") == 0) {
        via = argv[2];
        i = 3;
    }
#ifdef GS_PROBE_LINKED
    if (via == NULL || strcmp(via, "link") == 0)
        load_linked();
    else
#else
    if (via == NULL)
        via = "dlopen";
#endif
    {
        char mode[64] = "";
        int ver = 13000;
        char extra[16] = "";
        sscanf(via, "%63[^:]:%d:%15s", mode, &ver, extra);
        if (strncmp(via, "dlopen:ptsz", 11) == 0)
            g_ptsz = 1;
        if (strcmp(extra, "ptsz") == 0)
            g_ptsz = 1;
        g_version = ver;
        if (strcmp(mode, "dlopen") == 0)
            load_dlopen();
        else if (strcmp(mode, "procaddr") == 0)
            load_procaddr(1);
        else if (strcmp(mode, "procaddr_v1") == 0)
            load_procaddr(0);
        else {
            usage();
            return 2;
        }
    }
    if (i >= argc) {
        usage();
        return 2;
    }
    for (; i < argc; i++) {
        const char *c = argv[i];
        CUresult rc = CUDA_SUCCESS;
        struct item it;
        memset(&it, 0, sizeof it);
        if (strcmp(c, "init") == 0) {
            rc = A.init ? A.init(0) : CUDA_ERROR_NOT_FOUND;
            printf("init rc=%d\n", rc);
        } else if (strcmp(c, "ctx") == 0) {
            int ord = (int)arg_u(argv, &i, argc, 0);
            CUcontext ctx = NULL;
            rc = A.device_get(&g_dev, ord);
            if (rc == CUDA_SUCCESS)
                rc = A.retain(&ctx, g_dev);
            if (rc == CUDA_SUCCESS)
                rc = A.set_current(ctx);
            printf("ctx %d rc=%d\n", ord, rc);
        } else if (strcmp(c, "ctxrelease") == 0) {
            rc = A.release(g_dev);
            printf("ctxrelease rc=%d\n", rc);
        } else if (strcmp(c, "ctxcreate") == 0) {
            CUcontext ctx = NULL;
            rc = ctx_create(&ctx);
            if (rc == CUDA_SUCCESS)
                push((struct item){.kind = K_CTX, .obj = ctx});
            printf("ctxcreate rc=%d abi=%d variant=%s\n", rc, A.ctx_create_abi, last_variant());
        } else if (strcmp(c, "info") == 0) {
            size_t f = 0, t = 0;
            rc = A.info(&f, &t);
            printf("info rc=%d free=%zu total=%zu\n", rc, f, t);
        } else if (strcmp(c, "total") == 0) {
            size_t t = 0;
            rc = A.total_mem(&t, g_dev);
            printf("total rc=%d total=%zu\n", rc, t);
        } else if (strcmp(c, "uuid") == 0) {
            CUuuid u;
            memset(&u, 0, sizeof u);
            rc = A.get_uuid(&u, g_dev);
            printf("uuid rc=%d bytes=", rc);
            for (int k = 0; k < 16; k++)
                printf("%02x", (unsigned char)u.bytes[k]);
            printf(" variant=%s\n", last_variant());
        } else if (strcmp(c, "variant") == 0) {
            printf("variant rc=0 variant=%s\n", last_variant());
        } else if (strcmp(c, "sync") == 0) {
            rc = A.stream_sync(NULL);
            printf("sync rc=%d variant=%s\n", rc, last_variant());
        } else if (strcmp(c, "ctxsync") == 0) {
            rc = A.ctx_sync ? A.ctx_sync() : CUDA_ERROR_NOT_FOUND;
            printf("ctxsync rc=%d variant=%s\n", rc, last_variant());
        } else if (strcmp(c, "eventsync") == 0) { /* record an event on the null stream, wait for it */
            CUevent ev = NULL;
            rc = A.event_create ? A.event_create(&ev, 0) : CUDA_ERROR_NOT_FOUND;
            if (rc == CUDA_SUCCESS)
                rc = A.event_record(ev, NULL);
            if (rc == CUDA_SUCCESS)
                rc = A.event_sync(ev);
            printf("eventsync rc=%d variant=%s\n", rc, last_variant());
        } else if (strcmp(c, "capture") == 0) {
            size_t n = arg_u(argv, &i, argc, 1);
            CUstream st = NULL;
            CUgraph graph = NULL;
            CUresult arc = CUDA_ERROR_NOT_FOUND, frc = CUDA_ERROR_NOT_FOUND;
            rc = A.stream_create && A.begin_capture && A.end_capture ? A.stream_create(&st, 1) : CUDA_ERROR_NOT_FOUND;
            if (rc == CUDA_SUCCESS)
                rc = A.begin_capture(st, CU_STREAM_CAPTURE_MODE_GLOBAL);
            if (rc == CUDA_SUCCESS) {
                arc = A.alloc_async(&it.ptr, n, st);
                if (arc == CUDA_SUCCESS)
                    frc = A.free_async(it.ptr, st);
                rc = A.end_capture(st, &graph);
            }
            printf("capture %zu rc=%d alloc=%d free=%d\n", n, rc, arc, frc);
        } else if (strcmp(c, "alloc") == 0 || strcmp(c, "managed") == 0 || strcmp(c, "async") == 0 ||
                   strcmp(c, "poolalloc") == 0) {
            size_t n = arg_u(argv, &i, argc, 1);
            if (c[0] == 'a' && c[1] == 'l') {
                rc = A.alloc(&it.ptr, n);
                it.kind = K_PLAIN;
            } else if (c[0] == 'm') {
                rc = A.managed(&it.ptr, n, CU_MEM_ATTACH_GLOBAL);
                it.kind = K_MANAGED;
            } else if (c[0] == 'a') {
                rc = A.alloc_async(&it.ptr, n, NULL);
                it.kind = K_ASYNC;
            } else {
                if (g_own_pool == NULL)
                    rc = own_pool_create();
                if (rc == CUDA_SUCCESS)
                    rc = A.alloc_from_pool(&it.ptr, n, g_own_pool, NULL);
                it.kind = K_POOL;
            }
            it.size = n;
            if (rc == CUDA_SUCCESS)
                push(it);
            printf("%s %zu rc=%d variant=%s\n", c, n, rc, last_variant());
        } else if (strcmp(c, "poolcreate") == 0) {
            rc = g_own_pool == NULL ? own_pool_create() : CUDA_ERROR_INVALID_VALUE;
            printf("poolcreate rc=%d\n", rc);
        } else if (strcmp(c, "pitch") == 0) {
            size_t w = arg_u(argv, &i, argc, 1), h = arg_u(argv, &i, argc, 1);
            unsigned elem = (unsigned)arg_u(argv, &i, argc, 4);
            size_t p = 0;
            rc = A.pitch(&it.ptr, &p, w, h, elem);
            it.kind = K_PITCH;
            if (rc == CUDA_SUCCESS)
                push(it);
            printf("pitch %zu %zu rc=%d pitch=%zu\n", w, h, rc, p);
        } else if (strcmp(c, "vmm") == 0) {
            size_t n = arg_u(argv, &i, argc, 1), gran = 0;
            rc = vmm_alloc(n, &it, &gran);
            if (rc == CUDA_SUCCESS)
                push(it);
            printf("vmm %zu rc=%d granularity=%zu\n", n, rc, gran);
        } else if (strcmp(c, "array") == 0 || strcmp(c, "array3d") == 0 || strcmp(c, "mipmap") == 0) {
            unsigned w = (unsigned)arg_u(argv, &i, argc, 1), h = (unsigned)arg_u(argv, &i, argc, 1);
            unsigned d = c[0] == 'a' && c[5] == '\0' ? 0 : (unsigned)arg_u(argv, &i, argc, 1);
            if (c[0] == 'a' && c[5] == '\0') {
                CUDA_ARRAY_DESCRIPTOR desc = {.Width = w, .Height = h, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
                rc = A.array_create((CUarray *)&it.obj, &desc);
                it.kind = K_ARRAY;
            } else {
                CUDA_ARRAY3D_DESCRIPTOR desc = {.Width = w, .Height = h, .Depth = c[0] == 'm' ? 0 : d,
                                                .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
                if (c[0] == 'm') {
                    rc = A.mipmap_create((CUmipmappedArray *)&it.obj, &desc, d);
                    it.kind = K_MIPMAP;
                } else {
                    rc = A.array3d_create((CUarray *)&it.obj, &desc);
                    it.kind = K_ARRAY;
                }
            }
            if (rc == CUDA_SUCCESS)
                push(it);
            printf("%s %u %u %u rc=%d\n", c, w, h, d, rc);
        } else if (strcmp(c, "free") == 0 || strcmp(c, "ctxdestroy") == 0) {
            rc = g_nitems > 0 ? release(&g_items[--g_nitems]) : CUDA_ERROR_INVALID_VALUE;
            printf("%s rc=%d variant=%s\n", c, rc, last_variant());
        } else if (strcmp(c, "freeall") == 0) {
            int n = 0;
            while (g_nitems > 0) {
                CUresult r = release(&g_items[--g_nitems]);
                if (r != CUDA_SUCCESS)
                    rc = r;
                n++;
            }
            printf("freeall rc=%d count=%d\n", rc, n);
        } else if (strcmp(c, "poolattr") == 0 || strcmp(c, "ownpoolattr") == 0) {
            CUmemoryPool pool = g_own_pool;
            if (c[0] == 'p')
                rc = A.default_pool(&pool, g_dev);
            unsigned long long res = 0, used = 0;
            if (rc == CUDA_SUCCESS)
                rc = pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &res);
            if (rc == CUDA_SUCCESS)
                rc = pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used);
            printf("%s rc=%d reserved=%llu used=%llu\n", c, rc, res, used);
        } else if (strcmp(c, "trim") == 0 || strcmp(c, "owntrim") == 0) {
            size_t keep = arg_u(argv, &i, argc, 0);
            CUmemoryPool pool = g_own_pool;
            if (c[0] == 't')
                rc = A.default_pool(&pool, g_dev);
            if (rc == CUDA_SUCCESS)
                rc = A.pool_trim(pool, keep);
            printf("%s %zu rc=%d\n", c, keep, rc);
        } else if (strcmp(c, "threshold") == 0) {
            cuuint64_t v = arg_u(argv, &i, argc, 0);
            CUmemoryPool pool = NULL;
            rc = A.default_pool(&pool, g_dev);
            if (rc == CUDA_SUCCESS)
                rc = A.pool_set(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v);
            printf("threshold rc=%d\n", rc);
        } else if (strcmp(c, "destroypool") == 0) {
            rc = g_own_pool ? A.pool_destroy(g_own_pool) : CUDA_ERROR_INVALID_VALUE;
            g_own_pool = NULL;
            printf("destroypool rc=%d\n", rc);
        } else if (strcmp(c, "fill") == 0) {
            size_t n = arg_u(argv, &i, argc, 2 << 20);
            int count = 0;
            while ((rc = A.alloc(&it.ptr, n)) == CUDA_SUCCESS) {
                it.kind = K_PLAIN;
                push(it);
                count++;
            }
            printf("fill %zu rc=%d count=%d bytes=%zu\n", n, rc, count, (size_t)count * n);
        } else if (strcmp(c, "race") == 0) {
            int tries = (int)arg_u(argv, &i, argc, 1);
            size_t n = arg_u(argv, &i, argc, 2 << 20);
            int granted = 0, oom = 0, other = 0;
            for (int k = 0; k < tries; k++) {
                CUresult r = A.alloc(&it.ptr, n);
                if (r == CUDA_SUCCESS) {
                    it.kind = K_PLAIN;
                    push(it);
                    granted++;
                } else if (r == CUDA_ERROR_OUT_OF_MEMORY) {
                    oom++;
                } else {
                    other++;
                    rc = r;
                }
            }
            printf("race %d %zu rc=%d granted=%d oom=%d other=%d\n", tries, n, rc, granted, oom, other);
        } else if (strcmp(c, "loop") == 0) {
            int count = (int)arg_u(argv, &i, argc, 1);
            size_t n = arg_u(argv, &i, argc, 2 << 20);
            int ok = 0, fail = 0;
            for (int k = 0; k < count || count == 0; k++) {
                if (A.alloc(&it.ptr, n) == CUDA_SUCCESS) {
                    ok++;
                    A.free(it.ptr);
                } else {
                    fail++;
                }
            }
            printf("loop %d %zu rc=0 ok=%d fail=%d\n", count, n, ok, fail);
        } else if (strcmp(c, "retry") == 0) {
            size_t n = arg_u(argv, &i, argc, 2 << 20);
            double limit = (double)arg_u(argv, &i, argc, 1000), t0 = now_ms(), t = 0;
            int tries = 0;
            struct timespec ts = {.tv_sec = 0, .tv_nsec = 5000000L};
            do {
                tries++;
                rc = A.alloc(&it.ptr, n);
                t = now_ms() - t0;
                if (rc == CUDA_SUCCESS) {
                    it.kind = K_PLAIN;
                    push(it);
                    break;
                }
                nanosleep(&ts, NULL);
            } while (t < limit);
            printf("retry %zu rc=%d tries=%d ms=%.1f\n", n, rc, tries, t);
        } else if (strcmp(c, "launch") == 0) {
            unsigned blocks = (unsigned)arg_u(argv, &i, argc, 1);
            int count = (int)arg_u(argv, &i, argc, 1);
            static int kernel_token;
            double t0 = now_ms();
            for (int k = 0; k < count && rc == CUDA_SUCCESS; k++)
                rc = A.launch((CUfunction)&kernel_token, blocks, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
            const char *v = last_variant();
            if (rc == CUDA_SUCCESS)
                rc = A.stream_sync(NULL);
            printf("launch %u %d rc=%d ms=%.2f variant=%s\n", blocks, count, rc, now_ms() - t0, v);
        } else if (strcmp(c, "hold") == 0) {
            printf("hold rc=0 pid=%d\n", (int)getpid());
            for (;;)
                pause();
        } else if (strcmp(c, "sleep") == 0) {
            unsigned long long ms = arg_u(argv, &i, argc, 0);
            struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
            nanosleep(&ts, NULL);
            printf("sleep %llu rc=0\n", ms);
        } else if (strcmp(c, "exec") == 0) { /* a new image in this process: the rest of argv */
            printf("exec rc=0 pid=%d\n", (int)getpid());
            fflush(stdout);
            argv[i] = argv[0];
            execv(argv[0], argv + i);
            printf("exec rc=-1\n");
            return 1;
        } else if (strcmp(c, "waitfile") == 0 && i + 1 < argc) {
            const char *path = argv[++i];
            struct timespec ts = {.tv_sec = 0, .tv_nsec = 1000000L};
            for (int k = 0; k < 20000 && access(path, F_OK) != 0; k++)
                nanosleep(&ts, NULL);
            printf("waitfile rc=%d\n", access(path, F_OK) == 0 ? 0 : -1);
        } else if (strcmp(c, "resolve") == 0 && i + 1 < argc) {
            const char *name = argv[++i];
            int saved_v = g_version, saved_p = g_ptsz;
            g_version = (int)arg_u(argv, &i, argc, (unsigned long long)g_version);
            if (i + 1 < argc && strcmp(argv[i + 1], "ptsz") == 0) {
                g_ptsz = 1;
                i++;
            }
            if (g_gpa1 == NULL && g_gpa2 == NULL)
                *(void **)&g_gpa2 = dlsym(open_libcuda(), "cuGetProcAddress_v2");
            void *fn = NULL;
            int st = -1;
            rc = g_gpa1 || g_gpa2 ? gpa(name, &fn, &st) : CUDA_ERROR_NOT_FOUND;
            Dl_info di;
            memset(&di, 0, sizeof di);
            const char *obj = "-";
            if (fn != NULL && dladdr(fn, &di) && di.dli_fname != NULL) {
                obj = strrchr(di.dli_fname, '/') ? strrchr(di.dli_fname, '/') + 1 : di.dli_fname;
            }
            printf("resolve %s %d%s rc=%d status=%d obj=%s\n", name, g_version, g_ptsz ? " ptsz" : "", rc, st, obj);
            g_version = saved_v;
            g_ptsz = saved_p;
        } else {
            usage();
            return 2;
        }
    }
    return 0;
}

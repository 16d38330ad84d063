/* Real-GPU probe for libgpuslice (run by native/tools/gpu_check.sh on the device machine):
 *   gran   real allocation granularity (cuMemGetInfo deltas), pitch, VMM granularity, pool reserve
 *   ctx    primary context footprint (NVML device used before/after, cuMemGetInfo after)
 *   cap    allocate until refused through every path we hook; prints counts and return codes
 *   bench  N x (cuMemAlloc 1 MiB + cuMemFree), microseconds per pair
 *   dlsym  dlsym(RTLD_NEXT, ...) resolves relative to the caller; dlopen'ed libcuda gets our hooks
 * Prints one `key=value` line per fact. Not part of the library or of CI. */
#define _GNU_SOURCE
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MiB (1024ull * 1024ull)
#define CK(x) do { CUresult r_ = (x); if (r_) { printf("error %s = %d\n", #x, r_); exit(1); } } while (0)

static CUcontext setup(void)
{
    CUdevice d;
    CUcontext c;
    CK(cuInit(0));
    CK(cuDeviceGet(&d, 0));
    CK(cuDevicePrimaryCtxRetain(&c, d));
    CK(cuCtxSetCurrent(c));
    return c;
}

static size_t freemem(void)
{
    size_t f, t;
    cuCtxSynchronize();
    CK(cuMemGetInfo(&f, &t));
    return f;
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void gran(void)
{
    setup();
    size_t sizes[] = {1, 4096, 1 * MiB, 2 * MiB, 2 * MiB + 1, 3 * MiB, 64 * MiB, 64 * MiB + 1};
    for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        CUdeviceptr p[4];
        size_t before = freemem();
        for (int k = 0; k < 4; k++) CK(cuMemAlloc(&p[k], sizes[i]));
        size_t after = freemem();
        printf("gran alloc_size=%zu x4 free_delta_total=%zu per_alloc=%.3f MiB\n", sizes[i], before - after,
               (before - after) / 4.0 / MiB);
        for (int k = 0; k < 4; k++) cuMemFree(p[k]);
    }
    CUdeviceptr pp;
    size_t pitch, before = freemem();
    CK(cuMemAllocPitch(&pp, &pitch, 1000, 1000, 4));
    printf("pitch width=1000 height=1000 pitch=%zu free_delta=%zu\n", pitch, before - freemem());
    cuMemFree(pp);
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t gmin = 0, grec = 0;
    cuMemGetAllocationGranularity(&gmin, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    cuMemGetAllocationGranularity(&grec, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
    printf("vmm granularity_min=%zu recommended=%zu\n", gmin, grec);
    CUdeviceptr m;
    before = freemem();
    CK(cuMemAllocManaged(&m, 64 * MiB, CU_MEM_ATTACH_GLOBAL));
    printf("managed 64MiB untouched free_delta=%zu\n", before - freemem());
    cuMemFree(m);
    CUmemoryPool pool;
    CUdevice d0 = 0;
    CK(cuDeviceGetMemPool(&pool, d0));
    CUdeviceptr a;
    before = freemem();
    CK(cuMemAllocAsync(&a, 1 * MiB, NULL));
    cuuint64_t res = 0;
    cuStreamSynchronize(NULL);
    cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &res);
    printf("pool alloc 1MiB reserved=%llu free_delta=%zu\n", (unsigned long long)res, before - freemem());
    CK(cuMemFreeAsync(a, NULL));
    cuStreamSynchronize(NULL);
    cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &res);
    printf("pool after free+sync reserved=%llu\n", (unsigned long long)res);
}

typedef int (*nvml_init_t)(void);
typedef int (*nvml_h_t)(unsigned, void **);
typedef int (*nvml_mem_t)(void *, unsigned long long *);

static unsigned long long nvml_used(void)
{
    static nvml_h_t geth;
    static nvml_mem_t getmem;
    if (!geth) {
        void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
        if (!h) return 0;
        ((nvml_init_t)dlsym(h, "nvmlInit_v2"))();
        geth = (nvml_h_t)dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
        getmem = (nvml_mem_t)dlsym(h, "nvmlDeviceGetMemoryInfo");
    }
    void *dev;
    unsigned long long m[3];
    if (geth(0, &dev) || getmem(dev, m)) return 0;
    return m[2];
}

static void ctx(void)
{
    unsigned long long before = nvml_used();
    setup();
    unsigned long long after = nvml_used();
    size_t f, t;
    cuMemGetInfo(&f, &t);
    printf("ctx nvml_used_before=%llu after=%llu delta_MiB=%.1f cuMemGetInfo_used_MiB=%.1f total_MiB=%.1f\n", before,
           after, (after - before) / (double)MiB, (t - f) / (double)MiB, t / (double)MiB);
}

static void cap(void)
{
    setup();
    CUdeviceptr p[4096];
    int n = 0;
    CUresult r = CUDA_SUCCESS;
    while (n < 4096 && (r = cuMemAlloc(&p[n], 256 * MiB)) == CUDA_SUCCESS) n++;
    size_t f, t;
    cuMemGetInfo(&f, &t);
    printf("cap cuMemAlloc 256MiB chunks=%d last_rc=%d reported_total_MiB=%llu free_MiB=%llu\n", n, r, t / MiB, f / MiB);
    for (int i = 0; i < n; i++) cuMemFree(p[i]);
    /* VMM */
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    CUmemGenericAllocationHandle hs[4096];
    int m = 0;
    while (m < 4096 && (r = cuMemCreate(&hs[m], 256 * MiB, &prop, 0)) == CUDA_SUCCESS) m++;
    printf("cap cuMemCreate 256MiB chunks=%d last_rc=%d\n", m, r);
    for (int i = 0; i < m; i++) cuMemRelease(hs[i]);
    /* stream-ordered */
    int k = 0;
    while (k < 4096 && (r = cuMemAllocAsync(&p[k], 256 * MiB, NULL)) == CUDA_SUCCESS) k++;
    printf("cap cuMemAllocAsync 256MiB chunks=%d last_rc=%d\n", k, r);
    for (int i = 0; i < k; i++) cuMemFreeAsync(p[i], NULL);
    cuStreamSynchronize(NULL);
    CUmemoryPool pool;
    cuDeviceGetMemPool(&pool, 0);
    cuMemPoolTrimTo(pool, 0);
    cuMemGetInfo(&f, &t);
    printf("cap after trim free_MiB=%llu\n", f / MiB);
    /* managed */
    int j = 0;
    while (j < 4096 && (r = cuMemAllocManaged(&p[j], 256 * MiB, CU_MEM_ATTACH_GLOBAL)) == CUDA_SUCCESS) j++;
    printf("cap cuMemAllocManaged 256MiB chunks=%d last_rc=%d\n", j, r);
    for (int i = 0; i < j; i++) cuMemFree(p[i]);
    /* pitched and arrays */
    size_t pitch;
    int q2 = 0;
    while (q2 < 4096 && (r = cuMemAllocPitch(&p[q2], &pitch, 16384, 16384, 4)) == CUDA_SUCCESS) q2++;
    printf("cap cuMemAllocPitch 16384x16384 chunks=%d last_rc=%d pitch=%zu\n", q2, r, pitch);
    for (int i = 0; i < q2; i++) cuMemFree(p[i]);
    CUarray arr[4096];
    CUDA_ARRAY_DESCRIPTOR ad = {8192, 8192, CU_AD_FORMAT_FLOAT, 1};
    int a2 = 0;
    while (a2 < 4096 && (r = cuArrayCreate(&arr[a2], &ad)) == CUDA_SUCCESS) a2++;
    printf("cap cuArrayCreate 8192x8192 float chunks=%d last_rc=%d\n", a2, r);
    for (int i = 0; i < a2; i++) cuArrayDestroy(arr[i]);
    cuMemGetInfo(&f, &t);
    printf("cap after all frees free_MiB=%llu\n", f / MiB);
    /* through cuGetProcAddress as the runtime does */
    void *fn = NULL;
    CUdriverProcAddressQueryResult q;
    CK(cuGetProcAddress("cuMemAlloc", &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &q));
    int g = 0;
    while (g < 4096 && (r = ((PFN_cuMemAlloc_v3020)fn)(&p[g], 256 * MiB)) == CUDA_SUCCESS) g++;
    printf("cap procaddr(cuMemAlloc) 256MiB chunks=%d last_rc=%d\n", g, r);
    for (int i = 0; i < g; i++) cuMemFree(p[i]);
}

static void bench(int iters)
{
    setup();
    CUdeviceptr p;
    for (int i = 0; i < 100; i++) { cuMemAlloc(&p, MiB); cuMemFree(p); }
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now_us();
        for (int i = 0; i < iters; i++) {
            CK(cuMemAlloc(&p, MiB));
            CK(cuMemFree(p));
        }
        double per = (now_us() - t0) / iters;
        if (per < best) best = per;
    }
    printf("bench alloc+free 1MiB best_of_5 us_per_pair=%.3f iters=%d\n", best, iters);
}

static void dlsym_check(void)
{
    /* RTLD_NEXT from the executable: must find libc's getpid, not fail */
    void *gp = dlsym(RTLD_NEXT, "getpid");
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    void *ours = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
    void *viah = dlsym(h, "cuMemAlloc_v2");
    void *other = dlsym(h, "cuDeviceGetName");
    Dl_info info;
    dladdr(other, &info);
    printf("dlsym rtld_next_getpid=%s handle_cuMemAlloc_v2_is_preloaded=%d unhooked_from=%s\n", gp ? "found" : "NULL",
           viah == ours, info.dli_fname ? info.dli_fname : "?");
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "gran")) gran();
    else if (!strcmp(mode, "ctx")) ctx();
    else if (!strcmp(mode, "cap")) cap();
    else if (!strcmp(mode, "bench")) bench(argc > 2 ? atoi(argv[2]) : 2000);
    else if (!strcmp(mode, "dlsym")) dlsym_check();
    else { fprintf(stderr, "usage: gpu_probe gran|ctx|cap|bench [N]|dlsym\n"); return 2; }
    return 0;
}

// shim_bench: per-call cost of the CUDA paths libgpuslice sits on, for the overhead benchmark.
//
// Owns: three timed loops in one process, each run as B batches of N calls after a warm-up, and
// the median batch reported as microseconds per call:
//   launch     empty kernel <<<1,1>>> through the runtime (cudart gets cuLaunchKernel from
//              cuGetProcAddress, the path a launch hook would sit on), cudaDeviceSynchronize per batch
//   malloc_rt  cudaMalloc(1 MiB) + cudaFree through the runtime
//   malloc_drv cuMemAlloc_v2(1 MiB) + cuMemFree_v2 resolved with dlopen+dlsym on libcuda.so.1
// `--startup` only creates the context (cudaFree(0)) and exits: the runner times the process.
// Output: one JSON object on stdout. Any CUDA error: message on stderr, exit 1 (never a number).
// Built by benchmarks/gpu_suite.sh with nvcc; driven by benchmarks/shim_overhead/run.py.
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <vector>

#define CHECK_RT(call)                                                                    \
    do {                                                                                  \
        cudaError_t err_ = (call);                                                        \
        if (err_ != cudaSuccess) {                                                        \
            fprintf(stderr, "shim_bench: %s:%d %s: %s\n", __FILE__, __LINE__, #call,      \
                    cudaGetErrorString(err_));                                            \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

#define CHECK_DRV(call)                                                                   \
    do {                                                                                  \
        CUresult err_ = (call);                                                           \
        if (err_ != CUDA_SUCCESS) {                                                       \
            fprintf(stderr, "shim_bench: %s:%d %s: CUresult %d\n", __FILE__, __LINE__,    \
                    #call, (int)err_);                                                    \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

__global__ void gs_empty_kernel(void) {}

static double gs_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static double gs_median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void gs_print_series(const char *name, const std::vector<double> &v, bool last) {
    printf("\"%s_us\": %.4f, \"%s_batches_us\": [", name, gs_median(v), name);
    for (size_t i = 0; i < v.size(); i++) printf("%s%.4f", i ? ", " : "", v[i]);
    printf("]%s", last ? "" : ", ");
}

static std::vector<double> gs_time_launch(int n, int batches) {
    std::vector<double> out;
    for (int i = 0; i < 2000; i++) gs_empty_kernel<<<1, 1>>>();
    CHECK_RT(cudaGetLastError());
    CHECK_RT(cudaDeviceSynchronize());
    for (int b = 0; b < batches; b++) {
        double t0 = gs_now_us();
        for (int i = 0; i < n; i++) gs_empty_kernel<<<1, 1>>>();
        CHECK_RT(cudaGetLastError());
        CHECK_RT(cudaDeviceSynchronize());
        out.push_back((gs_now_us() - t0) / n);
    }
    return out;
}

static std::vector<double> gs_time_malloc_rt(int n, int batches, size_t bytes) {
    std::vector<double> out;
    void *p = NULL;
    for (int i = 0; i < 200; i++) {
        CHECK_RT(cudaMalloc(&p, bytes));
        CHECK_RT(cudaFree(p));
    }
    for (int b = 0; b < batches; b++) {
        double t0 = gs_now_us();
        for (int i = 0; i < n; i++) {
            CHECK_RT(cudaMalloc(&p, bytes));
            CHECK_RT(cudaFree(p));
        }
        out.push_back((gs_now_us() - t0) / n);
    }
    return out;
}

typedef CUresult (*gs_alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*gs_free_fn)(CUdeviceptr);

static std::vector<double> gs_time_malloc_drv(int n, int batches, size_t bytes) {
    std::vector<double> out;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
        fprintf(stderr, "shim_bench: dlopen libcuda.so.1: %s\n", dlerror());
        exit(1);
    }
    gs_alloc_fn alloc = (gs_alloc_fn)dlsym(lib, "cuMemAlloc_v2");
    gs_free_fn dfree = (gs_free_fn)dlsym(lib, "cuMemFree_v2");
    if (!alloc || !dfree) {
        fprintf(stderr, "shim_bench: dlsym cuMemAlloc_v2/cuMemFree_v2: %s\n", dlerror());
        exit(1);
    }
    CUdeviceptr p = 0;
    for (int i = 0; i < 200; i++) {
        CHECK_DRV(alloc(&p, bytes));
        CHECK_DRV(dfree(p));
    }
    for (int b = 0; b < batches; b++) {
        double t0 = gs_now_us();
        for (int i = 0; i < n; i++) {
            CHECK_DRV(alloc(&p, bytes));
            CHECK_DRV(dfree(p));
        }
        out.push_back((gs_now_us() - t0) / n);
    }
    return out;
}

int main(int argc, char **argv) {
    int launches = 50000, mallocs = 3000, batches = 5;
    size_t bytes = 1 << 20;
    bool startup = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--startup")) {
            startup = true;
        } else if (i + 1 < argc && !strcmp(argv[i], "--launches")) {
            launches = atoi(argv[++i]);
        } else if (i + 1 < argc && !strcmp(argv[i], "--mallocs")) {
            mallocs = atoi(argv[++i]);
        } else if (i + 1 < argc && !strcmp(argv[i], "--batches")) {
            batches = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s [--startup] [--launches N] [--mallocs N] [--batches B]\n",
                    argv[0]);
            return 2;
        }
    }
    if (launches <= 0 || mallocs <= 0 || batches <= 0) {
        fprintf(stderr, "shim_bench: --launches, --mallocs and --batches must be > 0\n");
        return 2;
    }
    CHECK_RT(cudaFree(0));  // creates the primary context
    if (startup) {
        printf("{\"startup\": true}\n");
        return 0;
    }
    std::vector<double> launch = gs_time_launch(launches, batches);
    std::vector<double> malloc_rt = gs_time_malloc_rt(mallocs, batches, bytes);
    std::vector<double> malloc_drv = gs_time_malloc_drv(mallocs, batches, bytes);
    printf("{");
    gs_print_series("launch", launch, false);
    gs_print_series("malloc_rt", malloc_rt, false);
    gs_print_series("malloc_drv", malloc_drv, true);
    printf("}\n");
    return 0;
}

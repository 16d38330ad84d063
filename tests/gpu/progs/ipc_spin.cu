// Kernels that wait on another process through CUDA IPC (issue 21: the general case of NCCL's
// collectives, which spin until the peer rank's kernel runs), and the "disguised" attack.
//
//   ipc_spin pair RANK DIR STEPS COMPUTE_US
//     Two processes (RANK 0 and 1, each on its current device: one GPU or two). Rank 0 allocates
//     two flags, exports them (cudaIpcGetMemHandle) to DIR/handle; rank 1 opens them. Each step:
//     a compute kernel of COMPUTE_US (every SM busy), then a one-thread barrier kernel that sets
//     its flag to the step and SPINS until the peer's flag reaches it, then a stream sync. The
//     barrier cannot end before the peer's barrier kernel ran: a kernel blocked on a peer.
//     Both ranks meet on the host (DIR/ready.RANK) before their first launch.
//   ipc_spin disguised SECONDS SPIN_US
//     One process launching, for SECONDS, a kernel named like NCCL's all-reduce kernel
//     ("ncclDevKernel_AllReduce_Sum_f32_RING_LL") that "waits for a peer" that never comes: it
//     spins SPIN_US on every SM, i.e. computes. Prints how many it finished: under a compute
//     limit the rate must be the limit's share of the unlimited rate (nothing is exempt).
// Output: one JSON line: steps, step times (median/p90/max ms), wall, and this process's hold
// statistics from the gpuslice region (hold_max_ms, hold_over_debt_ms; -1 without a region).
// A barrier that waits more than 30 s gives up (flag -1) so a broken run never hangs the GPU.
// Build: nvcc -O2 -o ipc_spin ipc_spin.cu (tests/gpu/test_collectives_under_compute_caps.py).
#include <cuda_runtime.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#define CHECK(x)                                                                          \
    do {                                                                                  \
        cudaError_t e_ = (x);                                                             \
        if (e_ != cudaSuccess) {                                                          \
            fprintf(stderr, "ipc_spin: %s: %s (line %d)\n", #x, cudaGetErrorString(e_),   \
                    __LINE__);                                                            \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// the GPU's nanosecond timer (no clock rate to convert: SM clocks move under power caps)
__device__ __forceinline__ long long gtime(void)
{
    long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void compute_kernel(float *sink, long long ns)
{
    long long t0 = gtime();
    float v = threadIdx.x;
    while (gtime() - t0 < ns)
        v = v * 0.999f + 1.0f;
    if (v == -1.0f)
        sink[blockIdx.x] = v; // never true: keeps the loop
}

// flags[0] and flags[32]: rank 0's and rank 1's (separate 128-byte lines)
__global__ void peer_barrier(volatile int *flags, int rank, int step, long long give_up)
{
    flags[rank * 32] = step;
    __threadfence_system();
    long long t0 = gtime();
    while (flags[(1 - rank) * 32] < step && flags[(1 - rank) * 32] >= 0) {
        if (gtime() - t0 > give_up) {
            flags[rank * 32] = -1; // tell the peer too
            break;
        }
    }
}

extern "C" __global__ void ncclDevKernel_AllReduce_Sum_f32_RING_LL(float *sink, long long ns)
{
    long long t0 = gtime();
    float v = threadIdx.x;
    while (gtime() - t0 < ns)
        v = v * 0.999f + 1.0f;
    if (v == -1.0f)
        sink[blockIdx.x] = v;
}

// This process's hold statistics in the region (native/include/gpuslice/region.h: slots at
// 4096 + 16 * 512, 384 bytes each, pid first, compute block at 288: hold_max_ns @48,
// hold_over_debt_ns @56). -1 when no region is configured.
static void hold_stats(double *hold_max_ms, double *over_ms)
{
    *hold_max_ms = *over_ms = -1;
    const char *path = getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE");
    int fd = path ? open(path, O_RDONLY) : -1;
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (fd >= 0)
            close(fd);
        return;
    }
    const unsigned char *m =
        (const unsigned char *)mmap(NULL, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return;
    const size_t slots = 4096 + 16 * 512, slot = 384;
    for (size_t off = slots; off + slot <= (size_t)st.st_size; off += slot) {
        int32_t pid;
        memcpy(&pid, m + off, sizeof pid);
        if (pid == getpid()) {
            uint64_t hold;
            int64_t over;
            memcpy(&hold, m + off + 288 + 48, 8);
            memcpy(&over, m + off + 288 + 56, 8);
            *hold_max_ms = hold / 1e6;
            *over_ms = over / 1e6;
            break;
        }
    }
    munmap((void *)m, st.st_size);
}

static int sm_count(void)
{
    int dev, n;
    CHECK(cudaGetDevice(&dev));
    CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    return n;
}

// Both ranks set up before either launches (as torch.distributed's rendezvous over TCP comes
// before any collective): without it rank 0's first barrier spins, on the GPU and charged, for
// as long as rank 1 takes to start, and the job pays that back in holds.
static int rendezvous(const char *dir, int rank)
{
    char mine[4096], theirs[4096];
    snprintf(mine, sizeof mine, "%s/ready.%d", dir, rank);
    snprintf(theirs, sizeof theirs, "%s/ready.%d", dir, 1 - rank);
    FILE *f = fopen(mine, "w");
    if (!f || fclose(f) != 0) {
        perror("ipc_spin: writing the ready mark");
        return 1;
    }
    for (int i = 0; i < 30000; i++) { // 30 s
        if (access(theirs, F_OK) == 0)
            return 0;
        usleep(1000);
    }
    fprintf(stderr, "ipc_spin: rank %d never became ready (%s)\n", 1 - rank, theirs);
    return 1;
}

static int pair(int rank, const char *dir, int steps, double compute_us)
{
    char path[4096], tmp[4096];
    snprintf(path, sizeof path, "%s/handle", dir);
    int *flags = NULL;
    cudaIpcMemHandle_t h;
    if (rank == 0) {
        CHECK(cudaMalloc(&flags, 256));
        CHECK(cudaMemset(flags, 0, 256));
        CHECK(cudaDeviceSynchronize());
        CHECK(cudaIpcGetMemHandle(&h, flags));
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        FILE *f = fopen(tmp, "wb");
        if (!f || fwrite(&h, sizeof h, 1, f) != 1 || fclose(f) != 0 || rename(tmp, path) != 0) {
            perror("ipc_spin: writing the handle");
            return 1;
        }
    } else {
        FILE *f = NULL;
        for (int i = 0; i < 3000 && !(f = fopen(path, "rb")); i++)
            usleep(10000);
        if (!f || fread(&h, sizeof h, 1, f) != 1) {
            fprintf(stderr, "ipc_spin: no handle from rank 0 in %s\n", path);
            return 1;
        }
        fclose(f);
        CHECK(cudaIpcOpenMemHandle((void **)&flags, h, cudaIpcMemLazyEnablePeerAccess));
    }
    float *sink;
    CHECK(cudaMalloc(&sink, 4096 * sizeof(float)));
    CHECK(cudaDeviceSynchronize());
    if (rendezvous(dir, rank) != 0)
        return 1;
    long long ns = (long long)(compute_us * 1e3), give_up = 30LL * 1000 * 1000 * 1000;
    int blocks = sm_count();
    std::vector<double> t;
    double start = now_s();
    int failed = 0;
    for (int s = 1; s <= steps && !failed; s++) {
        double t0 = now_s();
        compute_kernel<<<blocks, 128>>>(sink, ns);
        peer_barrier<<<1, 1>>>(flags, rank, s, give_up);
        CHECK(cudaStreamSynchronize(0));
        t.push_back((now_s() - t0) * 1e3);
        int seen[33]; // both flags: either rank may have given up
        CHECK(cudaMemcpy(seen, flags, sizeof seen, cudaMemcpyDeviceToHost));
        failed = seen[0] < 0 || seen[32] < 0;
    }
    double wall = now_s() - start;
    std::vector<double> sorted = t;
    std::sort(sorted.begin(), sorted.end());
    double hold, over;
    hold_stats(&hold, &over);
    size_t n = sorted.size();
    printf("{\"mode\": \"pair\", \"rank\": %d, \"steps\": %zu, \"gave_up\": %d, \"wall_s\": %.3f, "
           "\"step_ms_median\": %.4f, \"step_ms_p90\": %.4f, \"step_ms_max\": %.3f, "
           "\"hold_max_ms\": %.3f, \"hold_over_debt_ms\": %.3f}\n",
           rank, n, failed, wall, n ? sorted[n / 2] : -1.0, n ? sorted[n * 9 / 10] : -1.0,
           n ? sorted[n - 1] : -1.0, hold, over);
    fflush(stdout);
    if (rank == 1)
        CHECK(cudaIpcCloseMemHandle(flags));
    else
        usleep(200000); // the peer closes its mapping before the memory goes
    return failed;
}

static int disguised(double seconds, double spin_us)
{
    float *sink;
    CHECK(cudaMalloc(&sink, 4096 * sizeof(float)));
    long long ns = (long long)(spin_us * 1e3);
    int blocks = sm_count();
    long long done = 0;
    double start = now_s();
    while (now_s() - start < seconds) {
        for (int i = 0; i < 8; i++)
            ncclDevKernel_AllReduce_Sum_f32_RING_LL<<<blocks, 128>>>(sink, ns);
        CHECK(cudaStreamSynchronize(0));
        done += 8;
    }
    double wall = now_s() - start, hold, over;
    hold_stats(&hold, &over);
    printf("{\"mode\": \"disguised\", \"kernels\": %lld, \"wall_s\": %.3f, \"per_s\": %.2f, "
           "\"spin_us\": %.1f, \"hold_max_ms\": %.3f, \"hold_over_debt_ms\": %.3f}\n",
           done, wall, done / wall, spin_us, hold, over);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 6 && strcmp(argv[1], "pair") == 0)
        return pair(atoi(argv[2]), argv[3], atoi(argv[4]), atof(argv[5]));
    if (argc == 4 && strcmp(argv[1], "disguised") == 0)
        return disguised(atof(argv[2]), atof(argv[3]));
    fprintf(stderr, "usage: %s pair RANK DIR STEPS COMPUTE_US | disguised SECONDS SPIN_US\n",
            argv[0]);
    return 2;
}

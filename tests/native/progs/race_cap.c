/* race_cap: one allocation held in flight by a background thread while the main thread asks for
 * memory, to check that near the cap two allocations never both pass (tests/native/
 * test_cap_holds_with_allocations_in_flight.py). Linked against libcuda (the fake; the driver's
 * FAKE_CUDA_ALLOC_DELAY_MS keeps the background allocation in flight).
 *   race_cap PRE BG FG [launch]
 * launch: run one kernel first (the fake then takes FAKE_CUDA_LAZY_MIB, driver memory the library
 * charges as overhead); PRE: allocated before; BG: allocated by the thread; FG: allocated by the
 * main thread 300 ms after the thread started, after a cuMemGetInfo (which re-reads the overhead).
 * Prints "bg rc=<CUresult>" and "fg rc=<CUresult>". */
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static CUcontext g_ctx;
static unsigned long long g_bg;
static CUresult g_bg_rc;

static void *background(void *arg)
{
    (void)arg;
    CUdeviceptr p;
    cuCtxSetCurrent(g_ctx);
    g_bg_rc = cuMemAlloc(&p, (size_t)g_bg);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: race_cap PRE BG FG [launch]\n");
        return 2;
    }
    unsigned long long pre = strtoull(argv[1], NULL, 0), fg = strtoull(argv[3], NULL, 0);
    g_bg = strtoull(argv[2], NULL, 0);
    CUdevice dev;
    CUdeviceptr p;
    size_t free_b, total_b;
    static int kernel_token;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&g_ctx, dev) || cuCtxSetCurrent(g_ctx)) {
        printf("setup rc=-1\n");
        return 1;
    }
    if (argc > 4 && strcmp(argv[4], "launch") == 0) {
        cuLaunchKernel((CUfunction)&kernel_token, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
        cuCtxSynchronize();
    }
    if (pre && cuMemAlloc(&p, (size_t)pre) != CUDA_SUCCESS) {
        printf("pre rc=-1\n");
        return 1;
    }
    cuMemGetInfo(&free_b, &total_b);
    pthread_t t;
    pthread_create(&t, NULL, background, NULL);
    struct timespec ts = {0, 300 * 1000000L};
    nanosleep(&ts, NULL);
    cuMemGetInfo(&free_b, &total_b);
    CUresult fg_rc = cuMemAlloc(&p, (size_t)fg);
    pthread_join(t, NULL);
    printf("bg rc=%d\nfg rc=%d\n", (int)g_bg_rc, (int)fg_rc);
    return 0;
}

/* fork_child: fork while another thread of the parent is inside libgpuslice holding one of its
 * locks, then call CUDA in the child (tests/native/test_fork_child_never_deadlocks.py).
 * A background thread creates a context, which the fake driver makes slow
 * (FAKE_CUDA_CONTEXT_DELAY_MS): the library holds its context lock meanwhile. 300 ms later (or
 * argv[1] ms: a real driver's creation is shorter) the main thread forks; the child creates a
 * context and allocates. The parent waits up to 10 s.
 * Prints "child rc=<ctx create> alloc=<alloc>" (from the child) and "wait rc=0" (child exited)
 * or "wait rc=-1" (the child hung and was killed). */
#include <cuda.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static CUdevice g_dev;

static void *creator(void *arg)
{
    CUcontext c;
    *(CUresult *)arg = cuCtxCreate(&c, NULL, 0, g_dev);
    return NULL;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
    long fork_after_ms = argc > 1 ? atol(argv[1]) : 300;
    setvbuf(stdout, NULL, _IOLBF, 0);
    CUcontext ctx;
    if (cuInit(0) || cuDeviceGet(&g_dev, 0) || cuDevicePrimaryCtxRetain(&ctx, g_dev) || cuCtxSetCurrent(ctx)) {
        printf("setup rc=-1\n");
        return 1;
    }
    CUresult bg = CUDA_SUCCESS;
    pthread_t t;
    pthread_create(&t, NULL, creator, &bg);
    sleep_ms(fork_after_ms); /* the creator is inside the slow creation now */
    pid_t pid = fork();
    if (pid == 0) {
        CUcontext c;
        CUdeviceptr p;
        CUresult rc = cuCtxCreate(&c, NULL, 0, g_dev);
        CUresult arc = cuMemAlloc(&p, 2 << 20);
        printf("child rc=%d alloc=%d\n", (int)rc, (int)arc);
        _exit(0);
    }
    int status = 0, waited = 0;
    for (int i = 0; i < 1000 && waited == 0; i++) {
        waited = (int)waitpid(pid, &status, WNOHANG);
        if (waited == 0)
            sleep_ms(10);
    }
    if (waited == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    pthread_join(t, NULL);
    printf("wait rc=%d bg=%d\n", waited == pid ? 0 : -1, (int)bg);
    return 0;
}

/* fake_smi: the part of nvidia-smi the tests need. It resolves NVML the way nvidia-smi and pynvml do
 * (dlopen("libnvidia-ml.so.1") + dlsym), or, built with -DGS_SMI_LINKED, by linking -lnvidia-ml.
 * Prints per device: "gpu <i> uuid=<u> name=<n> v1_total= v1_used= v1_free= v2_rc= v2_total= v2_used=
 * v2_free=" and per process "proc <i> pid=<p> used=<bytes>". Exit 1 if NVML fails to initialise. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "gpuslice/nvml_abi.h"

#ifdef GS_SMI_LINKED
nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int, nvmlDevice_t *);
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t, char *, unsigned int);
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t, char *, unsigned int);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t, nvmlMemory_t *);
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t, nvmlMemory_v2_t *);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t, unsigned int *, nvmlProcessInfo_v2_t *);
nvmlReturn_t nvmlShutdown(void);
#define LOAD(name) 1
#else
static nvmlReturn_t (*nvmlInit_v2)(void);
static nvmlReturn_t (*nvmlDeviceGetCount_v2)(unsigned int *);
static nvmlReturn_t (*nvmlDeviceGetHandleByIndex_v2)(unsigned int, nvmlDevice_t *);
static nvmlReturn_t (*nvmlDeviceGetUUID)(nvmlDevice_t, char *, unsigned int);
static nvmlReturn_t (*nvmlDeviceGetName)(nvmlDevice_t, char *, unsigned int);
static nvmlReturn_t (*nvmlDeviceGetMemoryInfo)(nvmlDevice_t, nvmlMemory_t *);
static nvmlReturn_t (*nvmlDeviceGetMemoryInfo_v2)(nvmlDevice_t, nvmlMemory_v2_t *);
static nvmlReturn_t (*nvmlDeviceGetComputeRunningProcesses_v3)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_v2_t *);
static nvmlReturn_t (*nvmlShutdown)(void);
static void *g_lib;
#define LOAD(name) ((*(void **)&name = dlsym(g_lib, #name)) != NULL)
#endif

int main(void) {
#ifndef GS_SMI_LINKED
    g_lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (g_lib == NULL) {
        printf("error dlopen: %s\n", dlerror());
        return 1;
    }
#endif
    if (!(LOAD(nvmlInit_v2) && LOAD(nvmlDeviceGetCount_v2) && LOAD(nvmlDeviceGetHandleByIndex_v2) &&
          LOAD(nvmlDeviceGetUUID) && LOAD(nvmlDeviceGetName) && LOAD(nvmlDeviceGetMemoryInfo) &&
          LOAD(nvmlDeviceGetMemoryInfo_v2) && LOAD(nvmlDeviceGetComputeRunningProcesses_v3) && LOAD(nvmlShutdown))) {
        printf("error missing NVML symbol\n");
        return 1;
    }
    if (nvmlInit_v2() != 0) {
        printf("error nvmlInit_v2\n");
        return 1;
    }
    unsigned int n = 0;
    nvmlDeviceGetCount_v2(&n);
    for (unsigned int i = 0; i < n; i++) {
        nvmlDevice_t d;
        char uuid[96] = "", name[96] = "";
        nvmlMemory_t m1;
        nvmlMemory_v2_t m2;
        memset(&m1, 0, sizeof m1);
        memset(&m2, 0, sizeof m2);
        m2.version = NVML_MEMORY_V2;
        nvmlDeviceGetHandleByIndex_v2(i, &d);
        nvmlDeviceGetUUID(d, uuid, sizeof uuid);
        nvmlDeviceGetName(d, name, sizeof name);
        int r1 = nvmlDeviceGetMemoryInfo(d, &m1);
        int r2 = nvmlDeviceGetMemoryInfo_v2(d, &m2);
        printf("gpu %u uuid=%s v1_rc=%d v1_total=%llu v1_used=%llu v1_free=%llu v2_rc=%d v2_total=%llu "
               "v2_reserved=%llu v2_used=%llu v2_free=%llu\n",
               i, uuid, r1, m1.total, m1.used, m1.free, r2, m2.total, m2.reserved, m2.used, m2.free);
        nvmlProcessInfo_v2_t procs[64];
        unsigned int np = 64;
        if (nvmlDeviceGetComputeRunningProcesses_v3(d, &np, procs) == 0)
            for (unsigned int k = 0; k < np; k++)
                printf("proc %u pid=%u used=%llu\n", i, procs[k].pid, procs[k].usedGpuMemory);
    }
    nvmlShutdown();
    return 0;
}

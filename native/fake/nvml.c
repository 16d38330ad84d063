/* Fake NVML (libnvidia-ml.so.1): device list, UUIDs, memory info v1/v2 and per-process used memory,
 * all read from the fake driver's state (this library links the fake libcuda.so.1). NVML lists every
 * physical device: CUDA_VISIBLE_DEVICES does not apply to it, as with the real one. FAKE_NVML_PID_OFFSET
 * (0) is added to the pids it lists: a container's process sees host pids, not its own. NVML types and
 * codes come from native/include/gpuslice/nvml_abi.h (no nvml.h on these machines). */
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpuslice/nvml_abi.h"

#define NVML_EXPORT __attribute__((visibility("default")))

struct nvmlDevice_st {
    int phys;
};

/* from the fake libcuda.so.1 (state.c) */
int fakecuda_processes(int phys, unsigned int *pids, unsigned long long *used, int cap);
int fakecuda_device_info(int phys, unsigned long long *total, unsigned long long *used);
int fakecuda_physical_count(void);
const char *fakecuda_device_name(void);
void fakecuda_uuid_string(int phys, char *out, size_t len);

#define MAX_DEV 8
static struct nvmlDevice_st g_devs[MAX_DEV] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};
static atomic_int g_refs;

static nvmlReturn_t check(nvmlDevice_t d) {
    if (atomic_load(&g_refs) <= 0)
        return NVML_ERROR_UNINITIALIZED;
    if (d == NULL || d < &g_devs[0] || d >= &g_devs[MAX_DEV] || d->phys >= fakecuda_physical_count())
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlInit_v2(void) {
    atomic_fetch_add(&g_refs, 1);
    return NVML_SUCCESS;
}
NVML_EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }
NVML_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    return nvmlInit_v2();
}

NVML_EXPORT nvmlReturn_t nvmlShutdown(void) {
    if (atomic_load(&g_refs) <= 0)
        return NVML_ERROR_UNINITIALIZED;
    atomic_fetch_sub(&g_refs, 1);
    return NVML_SUCCESS;
}

NVML_EXPORT const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument Version Mismatch";
    default: return "Unknown Error";
    }
}

NVML_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned int len) {
    if (atomic_load(&g_refs) <= 0)
        return NVML_ERROR_UNINITIALIZED;
    if (v == NULL || len < 12)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    snprintf(v, len, "580.00.fake");
    return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) {
    if (atomic_load(&g_refs) <= 0)
        return NVML_ERROR_UNINITIALIZED;
    if (n == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *n = (unsigned int)fakecuda_physical_count();
    return NVML_SUCCESS;
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *n) { return nvmlDeviceGetCount_v2(n); }

NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d) {
    if (atomic_load(&g_refs) <= 0)
        return NVML_ERROR_UNINITIALIZED;
    if (d == NULL || i >= (unsigned int)fakecuda_physical_count())
        return NVML_ERROR_INVALID_ARGUMENT;
    *d = &g_devs[i];
    return NVML_SUCCESS;
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *d) {
    return nvmlDeviceGetHandleByIndex_v2(i, d);
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *d) {
    if (atomic_load(&g_refs) <= 0)
        return NVML_ERROR_UNINITIALIZED;
    if (uuid == NULL || d == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < fakecuda_physical_count(); i++) {
        char u[96];
        fakecuda_uuid_string(i, u, sizeof u);
        if (strcmp(u, uuid) == 0) {
            *d = &g_devs[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *i) {
    nvmlReturn_t r = check(d);
    if (r == NVML_SUCCESS && i == NULL)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        *i = (unsigned int)d->phys;
    return r;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int len) {
    nvmlReturn_t r = check(d);
    if (r != NVML_SUCCESS)
        return r;
    if (uuid == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    char u[96];
    fakecuda_uuid_string(d->phys, u, sizeof u);
    if (strlen(u) + 1 > len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(uuid, u, strlen(u) + 1);
    return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int len) {
    nvmlReturn_t r = check(d);
    if (r != NVML_SUCCESS)
        return r;
    if (name == NULL || len == 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(fakecuda_device_name()) + 1 > len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    snprintf(name, len, "%s", fakecuda_device_name());
    return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
    nvmlReturn_t r = check(d);
    if (r != NVML_SUCCESS)
        return r;
    if (m == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long total, used;
    fakecuda_device_info(d->phys, &total, &used);
    m->total = total;
    m->used = used;
    m->free = used >= total ? 0 : total - used;
    return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m) {
    nvmlReturn_t r = check(d);
    if (r != NVML_SUCCESS)
        return r;
    if (m == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (m->version != NVML_MEMORY_V2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    unsigned long long total, used;
    fakecuda_device_info(d->phys, &total, &used);
    m->total = total;
    m->reserved = 0;
    m->used = used;
    m->free = used >= total ? 0 : total - used;
    return NVML_SUCCESS;
}

static nvmlReturn_t processes(nvmlDevice_t d, unsigned int *count, void *infos, size_t stride, int v1) {
    nvmlReturn_t r = check(d);
    if (r != NVML_SUCCESS)
        return r;
    if (count == NULL || (*count > 0 && infos == NULL))
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int pids[128];
    unsigned long long used[128];
    int n = fakecuda_processes(d->phys, pids, used, 128);
    if (n > 128)
        n = 128;
    const char *off = getenv("FAKE_NVML_PID_OFFSET");
    unsigned int shift = off ? (unsigned int)strtoul(off, NULL, 10) : 0;
    if ((unsigned int)n > *count) {
        *count = (unsigned int)n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (int i = 0; i < n; i++) {
        char *slot = (char *)infos + (size_t)i * stride;
        if (v1) {
            nvmlProcessInfo_v1_t p = {.pid = pids[i] + shift, .usedGpuMemory = used[i]};
            memcpy(slot, &p, sizeof p);
        } else {
            nvmlProcessInfo_v2_t p = {.pid = pids[i] + shift, .usedGpuMemory = used[i], .gpuInstanceId = 0xffffffffu,
                                   .computeInstanceId = 0xffffffffu};
            memcpy(slot, &p, sizeof p);
        }
    }
    *count = (unsigned int)n;
    return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *n,
                                                                 nvmlProcessInfo_v2_t *p) {
    return processes(d, n, p, sizeof *p, 0);
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *n,
                                                                 nvmlProcessInfo_v2_t *p) {
    return processes(d, n, p, sizeof *p, 0);
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned int *n,
                                                              nvmlProcessInfo_v1_t *p) {
    return processes(d, n, p, sizeof *p, 1);
}

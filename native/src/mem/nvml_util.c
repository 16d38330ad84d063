/* NVML access for the library's own needs: loading + nvmlInit once, the UUID of a CUDA ordinal
 * (gs_device_uuid, what region entries are keyed by), and the NVML-device -> CUDA-ordinal
 * mapping (CUDA_VISIBLE_DEVICES entries given as UUIDs or NVML indexes, else NVML index). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hooks.h"
#include "mem/nvml_util.h"
#include "region.h"

static pthread_once_t gs_nvml_once = PTHREAD_ONCE_INIT;
static int gs_nvml_ok;

static void gs_nvml_start(void)
{
    if (gs_real_nvml_load() != 0 || gs_real_nvmlInit_v2 == NULL) return;
    gs_nvml_ok = gs_real_nvmlInit_v2() == NVML_SUCCESS;
}

int gs_device_uuid(int ordinal, char *out, size_t len)
{
    static char cache[GS_MAX_ORDINALS][GS_REGION_UUID_LEN];
    static int cached[GS_MAX_ORDINALS];
    if (ordinal >= 0 && ordinal < GS_MAX_ORDINALS && __atomic_load_n(&cached[ordinal], __ATOMIC_ACQUIRE)) {
        snprintf(out, len, "%s", cache[ordinal]);
        return 0;
    }
    PFN_cuDeviceGet_v2000 get = GS_REAL(cuDeviceGet);
    PFN_cuDeviceGetUuid_v11040 uuid = gs_real_cuDeviceGetUuid_v2;
    CUdevice dev;
    CUuuid u;
    if (get == NULL || uuid == NULL || get(&dev, ordinal) != CUDA_SUCCESS || uuid(&u, dev) != CUDA_SUCCESS) return -1;
    const unsigned char *b = (const unsigned char *)u.bytes;
    char text[GS_REGION_UUID_LEN];
    snprintf(text, sizeof text, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    snprintf(out, len, "%s", text);
    if (ordinal >= 0 && ordinal < GS_MAX_ORDINALS) {
        memcpy(cache[ordinal], text, sizeof text); /* the same for every thread that races here */
        __atomic_store_n(&cached[ordinal], 1, __ATOMIC_RELEASE);
    }
    return 0;
}

static nvmlDevice_t gs_nvml_handles[GS_MAX_ORDINALS];

/* NVML handle of a CUDA ordinal (cached), or NULL. */
static nvmlDevice_t gs_nvml_handle(int cuda_dev)
{
    pthread_once(&gs_nvml_once, gs_nvml_start);
    if (!gs_nvml_ok || cuda_dev < 0 || cuda_dev >= GS_MAX_ORDINALS) return NULL;
    nvmlDevice_t h = __atomic_load_n(&gs_nvml_handles[cuda_dev], __ATOMIC_ACQUIRE);
    if (h != NULL) return h;
    char uuid[GS_REGION_UUID_LEN];
    if (gs_real_nvmlDeviceGetHandleByUUID == NULL || gs_device_uuid(cuda_dev, uuid, sizeof uuid) != 0 ||
        gs_real_nvmlDeviceGetHandleByUUID(uuid, &h) != NVML_SUCCESS)
        return NULL;
    __atomic_store_n(&gs_nvml_handles[cuda_dev], h, __ATOMIC_RELEASE);
    return h;
}

int gs_nvml_cuda_device_used(int cuda_dev, uint64_t *used)
{
    nvmlDevice_t h = gs_nvml_handle(cuda_dev);
    nvmlMemory_t m;
    if (h == NULL || gs_real_nvmlDeviceGetMemoryInfo == NULL || gs_real_nvmlDeviceGetMemoryInfo(h, &m) != NVML_SUCCESS)
        return -1;
    *used = m.used;
    return 0;
}

int gs_nvml_processes(int cuda_dev, unsigned *pids, uint64_t *used, int max)
{
    nvmlDevice_t h = gs_nvml_handle(cuda_dev);
    PFN_nvmlDeviceGetComputeRunningProcesses_v3 list = gs_real_nvmlDeviceGetComputeRunningProcesses_v3;
    nvmlProcessInfo_v2_t infos[GS_NVML_MAX_PROCS];
    unsigned int n = sizeof infos / sizeof infos[0];
    if (h == NULL || list == NULL || list(h, &n, infos) != NVML_SUCCESS) return -1;
    int count = (int)(n < GS_NVML_MAX_PROCS ? n : GS_NVML_MAX_PROCS);
    if (count > max) count = max;
    for (int i = 0; i < count; i++) {
        pids[i] = infos[i].pid;
        used[i] = infos[i].usedGpuMemory;
    }
    return count;
}

/* Adopted NVML pid and the getpid() it belongs to (a forked child must not inherit it). */
static unsigned gs_adopted_pid;
static pid_t gs_adopted_for;

unsigned gs_nvml_self_pid(void)
{
    pid_t me = getpid();
    if (__atomic_load_n(&gs_adopted_for, __ATOMIC_ACQUIRE) == me) return __atomic_load_n(&gs_adopted_pid, __ATOMIC_RELAXED);
    return (unsigned)me;
}

void gs_nvml_adopt_pid(unsigned pid)
{
    __atomic_store_n(&gs_adopted_pid, pid, __ATOMIC_RELAXED);
    __atomic_store_n(&gs_adopted_for, getpid(), __ATOMIC_RELEASE);
}

int gs_nvml_find_self(const unsigned *pids, int n)
{
    unsigned me = gs_nvml_self_pid();
    for (int i = 0; i < n; i++)
        if (pids[i] == me) return i;
    return -1;
}

int gs_nvml_self_used(int cuda_dev, uint64_t *used)
{
    unsigned pids[GS_NVML_MAX_PROCS];
    uint64_t bytes[GS_NVML_MAX_PROCS];
    int n = gs_nvml_processes(cuda_dev, pids, bytes, GS_NVML_MAX_PROCS);
    if (n < 0) return -1;
    int i = gs_nvml_find_self(pids, n);
    if (i < 0) return 1;
    *used = bytes[i];
    return 0;
}

int gs_visible_index(const char *cvd, const char *uuid, unsigned nvml_index)
{
    if (cvd == NULL) return -2;
    int idx = 0;
    const char *p = cvd;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        while (n && *p == ' ') { p++; n--; }
        while (n && p[n - 1] == ' ') n--;
        if (n >= 4 && strncmp(p, "GPU-", 4) == 0) {
            if (uuid && strncmp(uuid, p, n) == 0) return idx; /* prefixes are allowed */
        } else if (n > 0) {
            char buf[16];
            char *e;
            if (n >= sizeof buf) return -1;
            memcpy(buf, p, n);
            buf[n] = '\0';
            long v = strtol(buf, &e, 10);
            if (*e != '\0' || v < 0) return -1; /* CUDA stops at the first invalid entry */
            if ((unsigned long)v == nvml_index) return idx;
        }
        idx++;
        if (!end) break;
        p = end + 1;
    }
    return -1;
}

int gs_nvml_to_cuda(nvmlDevice_t device)
{
    char uuid[96] = "";
    unsigned index = 0;
    int have_uuid = gs_real_nvmlDeviceGetUUID && gs_real_nvmlDeviceGetUUID(device, uuid, sizeof uuid) == NVML_SUCCESS;
    int have_index = gs_real_nvmlDeviceGetIndex && gs_real_nvmlDeviceGetIndex(device, &index) == NVML_SUCCESS;
    int v = gs_visible_index(getenv("CUDA_VISIBLE_DEVICES"), have_uuid ? uuid : NULL, have_index ? index : ~0u);
    if (v != -2) return v;
    return have_index ? (int)index : -1;
}

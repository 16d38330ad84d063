/* NVML helpers (internal): CUDA ordinal <-> NVML device by UUID (region, CUDA_VISIBLE_DEVICES). */
#ifndef GS_NVML_UTIL_H
#define GS_NVML_UTIL_H

#include <stdint.h>

#include "nvml_types.h"

#define GS_NVML_MAX_PROCS 128 /* processes read per device */

/* Real NVML device used bytes for a CUDA ordinal. 0 ok, -1 unavailable. */
int gs_nvml_cuda_device_used(int cuda_dev, uint64_t *used);
/* This process's used bytes per NVML on a CUDA ordinal: 0 found, 1 not listed (no context
 * yet, or NVML reports pids of another pid namespace), -1 NVML unavailable. */
int gs_nvml_self_used(int cuda_dev, uint64_t *used);
/* The pids NVML lists on a CUDA ordinal with their used bytes (at most max): count, -1 unavailable. */
int gs_nvml_processes(int cuda_dev, unsigned *pids, uint64_t *used, int max);
/* The pid NVML lists this process under: getpid(), or the one adopted for this process (in a
 * pid namespace some drivers list host pids; src/mem/ctx.c finds ours when a context appears). */
unsigned gs_nvml_self_pid(void);
/* Index of this process (gs_nvml_self_pid) in a list from gs_nvml_processes, or -1. */
int gs_nvml_find_self(const unsigned *pids, int n);
void gs_nvml_adopt_pid(unsigned pid);
/* CUDA ordinal of an NVML device as this container sees it, or -1 (not visible / unknown). */
int gs_nvml_to_cuda(nvmlDevice_t device);
/* Parse CUDA_VISIBLE_DEVICES-style text: index of the entry matching uuid or nvml_index, -1 if
 * none, -2 if the variable is unset (pure; unit-tested). */
int gs_visible_index(const char *cvd, const char *uuid, unsigned nvml_index);

#endif

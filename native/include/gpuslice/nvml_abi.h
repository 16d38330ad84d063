/* The NVML ABI subset gpuslice speaks, declared once for everything that calls or implements NVML:
 * libgpuslice (native/src/nvml_types.h adds its function-pointer types), the fake libnvidia-ml
 * (native/fake/nvml.c) and the test programs (tests/native/progs/fake_smi.c). There is no nvml.h on
 * the build machines; values and layouts follow NVML's public documentation (NVML 12/13):
 * nvmlReturn_t is an int, a device handle points to an opaque struct, and a versioned struct's
 * `version` is its size | (version << 24). Declarations only: no gpuslice type or behaviour here. */
#ifndef GPUSLICE_NVML_ABI_H
#define GPUSLICE_NVML_ABI_H

typedef int nvmlReturn_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_FUNCTION_NOT_FOUND 13
#define NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25
#define NVML_ERROR_UNKNOWN 999

typedef struct nvmlDevice_st *nvmlDevice_t;

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
#define NVML_MEMORY_V2 ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2u << 24)))

/* As taken by nvmlDeviceGetComputeRunningProcesses (16 bytes). */
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

/* As taken by nvmlDeviceGetComputeRunningProcesses_v2 and _v3 (24 bytes). */
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_v2_t;

#endif

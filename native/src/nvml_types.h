/* The few NVML types libgpuslice needs (there is no nvml.h on the build machines). ABI taken
 * from NVML's public documentation: nvmlReturn_t is an int enum, handles are opaque pointers. */
#ifndef GS_NVML_TYPES_H
#define GS_NVML_TYPES_H

typedef int nvmlReturn_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_FUNCTION_NOT_FOUND 13
#define NVML_ERROR_UNKNOWN 999

typedef struct nvmlDevice_st *nvmlDevice_t;

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

/* nvmlProcessInfo_t as taken by nvmlDeviceGetComputeRunningProcesses_v3 (the "v2" layout, 24 bytes). */
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_v2_t;
#define NVML_ERROR_INSUFFICIENT_SIZE 7

typedef nvmlReturn_t (*PFN_nvmlInit_v2)(void);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetComputeRunningProcesses_v3)(nvmlDevice_t device, unsigned int *count,
                                                                     nvmlProcessInfo_v2_t *infos);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetMemoryInfo)(nvmlDevice_t device, nvmlMemory_t *memory);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetMemoryInfo_v2)(nvmlDevice_t device, nvmlMemory_v2_t *memory);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetUUID)(nvmlDevice_t device, char *uuid, unsigned int length);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetIndex)(nvmlDevice_t device, unsigned int *index);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetHandleByUUID)(const char *uuid, nvmlDevice_t *device);

#endif

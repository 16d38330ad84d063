/* The NVML function-pointer types libgpuslice loads (PFN_<name>, as cudaTypedefs.h does for CUDA);
 * the NVML types and codes themselves are in native/include/gpuslice/nvml_abi.h, shared with the
 * fake NVML and the test programs. */
#ifndef GS_NVML_TYPES_H
#define GS_NVML_TYPES_H

#include "gpuslice/nvml_abi.h"

typedef nvmlReturn_t (*PFN_nvmlInit_v2)(void);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetComputeRunningProcesses_v3)(nvmlDevice_t device, unsigned int *count,
                                                                     nvmlProcessInfo_v2_t *infos);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetMemoryInfo)(nvmlDevice_t device, nvmlMemory_t *memory);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetMemoryInfo_v2)(nvmlDevice_t device, nvmlMemory_v2_t *memory);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetUUID)(nvmlDevice_t device, char *uuid, unsigned int length);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetIndex)(nvmlDevice_t device, unsigned int *index);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetHandleByUUID)(const char *uuid, nvmlDevice_t *device);

#endif

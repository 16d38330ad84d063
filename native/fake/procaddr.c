/* Fake driver: cuGetProcAddress / cuGetProcAddress_v2. Like the real driver, a base name maps to
 * the ABI variant introduced at or below the requested CUDA version, and the per-thread-stream
 * flag selects the _ptsz variant where one exists. Unknown name: CUDA_ERROR_NOT_FOUND +
 * SYMBOL_NOT_FOUND; known but newer than requested: CUDA_ERROR_NOT_FOUND + VERSION_NOT_SUFFICIENT. */
#include "fake.h"

#include <string.h>

struct entry {
    const char *name;
    int since;
    void *fn;
    void *ptsz;
};

#define E(n, v, f) {#n, v, (void *)(f), NULL}
#define P(n, v, f, p) {#n, v, (void *)(f), (void *)(p)}

static const struct entry g_table[] = {
    E(cuInit, 2000, cuInit),
    E(cuDriverGetVersion, 2020, cuDriverGetVersion),
    E(cuGetErrorName, 6000, cuGetErrorName),
    E(cuGetErrorString, 6000, cuGetErrorString),
    E(cuGetProcAddress, 11030, cuGetProcAddress),
    E(cuGetProcAddress, 12050, cuGetProcAddress_v2),
    E(cuDeviceGet, 2000, cuDeviceGet),
    E(cuDeviceGetCount, 2000, cuDeviceGetCount),
    E(cuDeviceGetName, 2000, cuDeviceGetName),
    E(cuDeviceGetUuid, 9020, cuDeviceGetUuid),
    E(cuDeviceGetUuid, 11040, cuDeviceGetUuid_v2),
    E(cuDeviceTotalMem, 3020, cuDeviceTotalMem_v2),
    E(cuDeviceGetAttribute, 2000, cuDeviceGetAttribute),
    E(cuDeviceGetPCIBusId, 4010, cuDeviceGetPCIBusId),
    E(cuDevicePrimaryCtxRetain, 7000, cuDevicePrimaryCtxRetain),
    E(cuDevicePrimaryCtxRelease, 7000, cuDevicePrimaryCtxRelease),
    E(cuDevicePrimaryCtxRelease, 11000, cuDevicePrimaryCtxRelease_v2),
    E(cuDevicePrimaryCtxReset, 7000, cuDevicePrimaryCtxReset),
    E(cuDevicePrimaryCtxReset, 11000, cuDevicePrimaryCtxReset_v2),
    E(cuDevicePrimaryCtxGetState, 7000, cuDevicePrimaryCtxGetState),
    E(cuCtxCreate, 3020, cuCtxCreate_v2),
    E(cuCtxCreate, 11040, cuCtxCreate_v3),
    E(cuCtxCreate, 12050, cuCtxCreate_v4),
    E(cuCtxDestroy, 4000, cuCtxDestroy_v2),
    E(cuCtxGetCurrent, 4000, cuCtxGetCurrent),
    E(cuCtxSetCurrent, 4000, cuCtxSetCurrent),
    E(cuCtxPushCurrent, 4000, cuCtxPushCurrent_v2),
    E(cuCtxPopCurrent, 4000, cuCtxPopCurrent_v2),
    E(cuCtxGetDevice, 2000, cuCtxGetDevice),
    E(cuCtxGetApiVersion, 3020, cuCtxGetApiVersion),
    E(cuCtxSynchronize, 2000, cuCtxSynchronize),
    E(cuMemAlloc, 3020, cuMemAlloc_v2),
    E(cuMemAllocPitch, 3020, cuMemAllocPitch_v2),
    E(cuMemAllocManaged, 6000, cuMemAllocManaged),
    E(cuMemFree, 3020, cuMemFree_v2),
    E(cuMemGetInfo, 3020, cuMemGetInfo_v2),
    E(cuMemGetAddressRange, 3020, cuMemGetAddressRange_v2),
    E(cuMemcpyHtoD, 3020, cuMemcpyHtoD_v2),
    E(cuMemcpyDtoH, 3020, cuMemcpyDtoH_v2),
    E(cuMemsetD8, 3020, cuMemsetD8_v2),
    E(cuMemGetAllocationGranularity, 10020, cuMemGetAllocationGranularity),
    E(cuMemCreate, 10020, cuMemCreate),
    E(cuMemRelease, 10020, cuMemRelease),
    E(cuMemAddressReserve, 10020, cuMemAddressReserve),
    E(cuMemAddressFree, 10020, cuMemAddressFree),
    E(cuMemMap, 10020, cuMemMap),
    E(cuMemUnmap, 10020, cuMemUnmap),
    E(cuMemSetAccess, 10020, cuMemSetAccess),
    E(cuMemGetAllocationPropertiesFromHandle, 10020, cuMemGetAllocationPropertiesFromHandle),
    P(cuMemAllocAsync, 11020, cuMemAllocAsync, cuMemAllocAsync_ptsz),
    P(cuMemFreeAsync, 11020, cuMemFreeAsync, cuMemFreeAsync_ptsz),
    P(cuMemAllocFromPoolAsync, 11020, cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz),
    E(cuMemPoolCreate, 11020, cuMemPoolCreate),
    E(cuMemPoolDestroy, 11020, cuMemPoolDestroy),
    E(cuMemPoolTrimTo, 11020, cuMemPoolTrimTo),
    E(cuMemPoolGetAttribute, 11020, cuMemPoolGetAttribute),
    E(cuMemPoolSetAttribute, 11020, cuMemPoolSetAttribute),
    E(cuDeviceGetDefaultMemPool, 11020, cuDeviceGetDefaultMemPool),
    E(cuDeviceGetMemPool, 11020, cuDeviceGetMemPool),
    E(cuDeviceSetMemPool, 11020, cuDeviceSetMemPool),
    E(cuArrayCreate, 3020, cuArrayCreate_v2),
    E(cuArray3DCreate, 3020, cuArray3DCreate_v2),
    E(cuArrayDestroy, 2000, cuArrayDestroy),
    E(cuArrayGetMemoryRequirements, 11060, cuArrayGetMemoryRequirements),
    E(cuMipmappedArrayCreate, 5000, cuMipmappedArrayCreate),
    E(cuMipmappedArrayDestroy, 5000, cuMipmappedArrayDestroy),
    E(cuStreamCreate, 2000, cuStreamCreate),
    E(cuStreamCreateWithPriority, 5050, cuStreamCreateWithPriority),
    E(cuStreamDestroy, 4000, cuStreamDestroy_v2),
    P(cuStreamSynchronize, 2000, cuStreamSynchronize, cuStreamSynchronize_ptsz),
    P(cuStreamQuery, 2000, cuStreamQuery, cuStreamQuery_ptsz),
    P(cuStreamWaitEvent, 3020, cuStreamWaitEvent, cuStreamWaitEvent_ptsz),
    E(cuEventCreate, 2000, cuEventCreate),
    P(cuEventRecord, 2000, cuEventRecord, cuEventRecord_ptsz),
    P(cuEventRecordWithFlags, 11010, cuEventRecordWithFlags, cuEventRecordWithFlags_ptsz),
    E(cuEventQuery, 2000, cuEventQuery),
    E(cuEventSynchronize, 2000, cuEventSynchronize),
    E(cuEventElapsedTime, 2000, cuEventElapsedTime),
    E(cuEventElapsedTime, 12080, cuEventElapsedTime_v2),
    E(cuEventDestroy, 4000, cuEventDestroy_v2),
    E(cuModuleLoadData, 2000, cuModuleLoadData),
    E(cuModuleGetFunction, 2000, cuModuleGetFunction),
    E(cuModuleUnload, 2000, cuModuleUnload),
    P(cuLaunchKernel, 4000, cuLaunchKernel, cuLaunchKernel_ptsz),
    P(cuLaunchKernelEx, 11060, cuLaunchKernelEx, cuLaunchKernelEx_ptsz),
    P(cuLaunchCooperativeKernel, 9000, cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_ptsz),
    E(cuGraphCreate, 10000, cuGraphCreate),
    E(cuGraphAddKernelNode, 12000, cuGraphAddKernelNode_v2),
    E(cuGraphInstantiate, 11040, cuGraphInstantiateWithFlags),
    E(cuGraphInstantiateWithFlags, 11040, cuGraphInstantiateWithFlags),
    P(cuGraphLaunch, 10000, cuGraphLaunch, cuGraphLaunch_ptsz),
    E(cuGraphExecDestroy, 10000, cuGraphExecDestroy),
    E(cuGraphDestroy, 10000, cuGraphDestroy),
};

static CUresult lookup(const char *symbol, void **pfn, int version, cuuint64_t flags,
                       CUdriverProcAddressQueryResult *status) {
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    const struct entry *best = NULL;
    if (symbol == NULL || pfn == NULL ||
        (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)))
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    for (size_t i = 0; i < sizeof g_table / sizeof g_table[0]; i++) {
        if (strcmp(g_table[i].name, symbol) != 0)
            continue;
        if (g_table[i].since > version) {
            if (best == NULL)
                st = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
            continue;
        }
        if (best == NULL || g_table[i].since > best->since)
            best = &g_table[i];
    }
    if (best != NULL) {
        int ptds = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
        *pfn = ptds && best->ptsz ? best->ptsz : best->fn;
        st = CU_GET_PROC_ADDRESS_SUCCESS;
    }
    if (status != NULL)
        *status = st;
    return best != NULL ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

FAKE_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags) {
    return lookup(symbol, pfn, version, flags, NULL);
}

FAKE_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                         CUdriverProcAddressQueryResult *status) {
    return lookup(symbol, pfn, version, flags, status);
}

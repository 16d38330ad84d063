/* Compute-budget state kept in the shared region (one block per device, one per process slot).
 * Owned by native/src/compute/; region.h embeds these blocks at fixed sizes so the
 * region layout does not move when the compute fields change. Fixed-width fields only,
 * updated with C11 atomics; a process killed mid-update must leave them usable. */
#ifndef GPUSLICE_COMPUTE_SHARED_H
#define GPUSLICE_COMPUTE_SHARED_H

#include <stdint.h>

#define GS_COMPUTE_DEVICE_BYTES 256
#define GS_COMPUTE_PROC_BYTES 64

/* Per device: the container's GPU-time budget (filled in by native/src/compute/). */
struct gs_compute_device {
    uint8_t reserved[GS_COMPUTE_DEVICE_BYTES];
};

/* Per process slot: what this process consumed/waited (for metrics and reclaim). */
struct gs_compute_proc {
    uint8_t reserved[GS_COMPUTE_PROC_BYTES];
};

_Static_assert(sizeof(struct gs_compute_device) == GS_COMPUTE_DEVICE_BYTES, "region layout");
_Static_assert(sizeof(struct gs_compute_proc) == GS_COMPUTE_PROC_BYTES, "region layout");

#endif

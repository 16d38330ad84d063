/* libgpuslice compute share: what the rest of the library calls (see docs/compute.md).
 * gs_compute_init() is called once by src/init.c after the config and the region are up;
 * with CUDA_DEVICE_SM_LIMIT unset/0/100 it does nothing and every launch handler is a
 * straight tail call to the real driver. */
#ifndef GS_COMPUTE_H
#define GS_COMPUTE_H

/* 0 ok (or nothing to do), -1 if the compute limit cannot be enforced (logged). */
int gs_compute_init(void);
/* The app is about to wait for the GPU (src/mem/sync.c): the meter of the current context
 * measures what the wait is for (meter.h gs_meter_sync). One relaxed load without a limit. */
void gs_compute_sync(void);

#endif

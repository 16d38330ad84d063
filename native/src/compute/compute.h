/* libgpuslice compute share: what the rest of the library calls (see docs/compute.md).
 * gs_compute_init() is called once by src/init.c after the config and the region are up;
 * with CUDA_DEVICE_SM_LIMIT unset/0/100 it does nothing and every launch handler is a
 * straight tail call to the real driver. */
#ifndef GS_COMPUTE_H
#define GS_COMPUTE_H

/* 0 ok (or nothing to do), -1 if the compute limit cannot be enforced (logged). */
int gs_compute_init(void);
/* The app is about to wait for the GPU (src/mem/sync.c, done 0): the meter of the current
 * context measures what the wait is for (meter.h gs_meter_sync); the wait is over (done 1): it
 * reconciles what completed, so the container's other processes see its queue empty (gang.h;
 * nothing to do without gang holds).
 * One relaxed load without a limit. */
void gs_compute_sync(int done);

#endif

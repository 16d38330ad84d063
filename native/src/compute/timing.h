/* GPU-side timing with CUDA events for one context: the gs_meter_ops behind meter.c.
 * Owns: an event pool (created with timing enabled, reused), and the context's timeline
 * origin: event timestamps are cuEventElapsedTime from a reference event, re-based every
 * ~1 s so float milliseconds keep sub-microsecond precision.
 * Does not: decide anything (meter.c) or pick the context (launch.c calls it with the
 * context current). Errors from the driver are returned to the meter, which drops the
 * batch (under-counts) — never blocks. Tests: GPU run of benchmarks/compute_accuracy.py;
 * tests/native/compute/test_launch_fake.py through the fake driver. */
#ifndef GS_COMPUTE_TIMING_H
#define GS_COMPUTE_TIMING_H

#include <cuda.h>
#include <stdint.h>

#include "meter.h"

#define GS_TIMING_POOL 64

struct gs_timing {
    CUevent pool[GS_TIMING_POOL];
    int n_pool;
    CUevent ref;          /* timeline origin (completed event), NULL until the first timing */
    int ref_released;     /* the meter let go of ref: recycle it when re-basing */
    int64_t ref_base_ns;  /* timeline time of ref */
};

extern const struct gs_meter_ops gs_timing_ops;

/* Destroy every pooled event (context going away). */
void gs_timing_clear(struct gs_timing *t);

#endif

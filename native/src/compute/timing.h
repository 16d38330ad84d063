/* GPU-side timing with CUDA events for one context: the gs_meter_ops behind meter.c.
 * Owns: an event pool (created with timing enabled, reused), and the context's timeline
 * origin: event timestamps are cuEventElapsedTime from a reference event, re-based every
 * ~1 s so float milliseconds keep sub-microsecond precision.
 * Does not: decide anything (meter.c) or pick the context (launch.c calls it with the
 * context current). Errors from the driver are returned to the meter, which drops the
 * batch (under-counts) — never blocks. Heals itself when its events died with a destroyed
 * context whose address a new context got (the meter is found by address): a pooled event that
 * cannot record empties the pool, an origin that cannot be timed against starts a new timeline.
 * Tests: tests/native/compute/test_timing_heals.py (C, stub driver); GPU run of
 * benchmarks/compute_accuracy.py; tests/native/compute/test_launch_fake.py (fake driver). */
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
    int64_t last_ns;      /* latest time handed out: a new timeline starts after it */
};

extern const struct gs_meter_ops gs_timing_ops;

/* Destroy every pooled event (context going away). */
void gs_timing_clear(struct gs_timing *t);

#endif

/* One container's processes on one GPU are charged the UNION of their busy spans (issue 21).
 * Why: each process is its own CUDA context, and a GPU without MPS time-slices contexts, so when
 * two processes of a container both have work queued, each batch's events bracket the other's
 * time slices and both were charged them. The time-slice correction (clean.h) takes them out
 * for kernels of stable durations only; a kernel that waits on a peer (an IPC flag, a
 * collective) has none, so two ranks on one H100 ran at 1.34-1.36x their uncapped step / share
 * (1.18-1.20x with this).
 * What: a process publishes each span it was charged in its device's span log (the region's
 * device block, compute_shared.h), on the host clock; a span later charged subtracts the part
 * that spans published before it already cover, so every instant is charged once.
 * The clock: event times are a per-context timeline, so each process bounds its offset to the
 * host clock from its own batches: a start event ran no earlier than the host time before its
 * record, an end event no later than the host time its completion was seen. Only the part of a
 * span that lies inside its peer's span for EVERY offset within both bounds is subtracted, so a
 * loose clock (a start recorded on a busy stream, a completion seen late) subtracts less, never
 * more: a tenant cannot shape its launches to be charged less than the union.
 * Order: a span takes a number from the log before it reads it and subtracts only spans of lower
 * numbers; the lower one never subtracts the higher. A span still being written, or overwritten
 * (the log keeps 10), is not seen: charged twice, as before, never zero times.
 * Published: spans charged as measured and not overlapping the process's own earlier spans
 * (those may hold time the time-slice correction took out, clean.h, which must not be taken
 * out twice). Spans further ahead than the reader's clock are not from this clock: ignored.
 * The log is the tenant's, like its budget word: a process that writes it by hand can lower its
 * own container's charge, as it could by writing tat_ns (docs/shim.md, Threat model).
 * Does not: sleep, call CUDA, lock (the log is lock-free). Pure given its arguments.
 * Tests: tests/native/compute/test_union.py (simulator: per-process timelines, clock attacks). */
#ifndef GS_COMPUTE_UNION_H
#define GS_COMPUTE_UNION_H

#include <stdint.h>

#include "gpuslice/compute_shared.h"
#include "spans.h"

/* The offset bounds are those of the current and the previous window of this length: long
 * enough to meet batches whose events were timed promptly, short enough that the GPU timer's
 * drift against the host clock (ppm) stays within a few microseconds. */
#define GS_UNION_WINDOW_NS 250000000LL

struct gs_union {
    struct gs_compute_device *dev; /* the device block holding the log (NULL: off) */
    int windows;                   /* windows with bounds: 0, 1 or 2 */
    int64_t window_ns;             /* when the current one began (host clock) */
    int64_t lo[2], hi[2];          /* host = timeline + offset, offset in [lo, hi]; [0] current */
};

/* A batch ran [ts, te) on this process's timeline; its start was recorded after host time
 * `recorded`, its end seen done at host time `seen`. Adds it to the process's own spans `own`
 * (spans.h) and returns the part of it that neither those nor, if it is charged as measured
 * (`measured`), the container's other processes' published spans cover. */
int64_t gs_union_add(struct gs_union *u, struct gs_span *own, int *n_own, int64_t ts, int64_t te,
                     int64_t recorded, int64_t seen, int measured);

#endif

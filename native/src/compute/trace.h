/* A per-launch trace of the compute controller, for diagnosing holds on real GPUs
 * (GPUSLICE_COMPUTE_TRACE=DIR; off by default). One tab-separated file per process,
 * DIR/compute-trace.<pid>.tsv, line-buffered (a run killed at its limit loses nothing), at most
 * GS_TRACE_MAX_LINES lines (then a last line "X"). Times are gs_compute_now_ns (the host's
 * CLOCK_MONOTONIC), so the files of one node's processes merge on one timeline. Lines:
 *   L enter admit device stream key kind owed gang catchup flags over why
 *       one launch: when it reached the gate and when it went, what it owed at its first check
 *       (ns of wall time; 0 = went at once), how long the gang's release was ahead at its last
 *       check, catch-up launches in the current stop (gang.h); flags: 1 in a gang, 2 stopped;
 *       over: how long it was held past what it owed (gs_meter_note_hold's over_ns; issue 21's
 *       bound is 10 ms); why: what held it last ('-' nothing; 'm' measure first, 'l' borrowing,
 *       'b' its budget alone; in a gang 'q' its own queue first, 'o' the others' queues or
 *       launches, 'r' the gang's release)
 *   B now device stream span charge busy launches key mixed
 *       one measured batch: when it was found complete, its event span, what the time-slice
 *       correction charged of it, what was debited (busy, after other streams' overlap)
 *   N key name      the first launch of a key: the kernel's name (cuFuncGetName) or "graph"
 * Does not: decide anything. Costs a formatted line per launch under a process-wide lock, so it
 * is for benchmarks and bug reports, not production. Tests: tests/native/compute/test_trace.py. */
#ifndef GS_COMPUTE_TRACE_H
#define GS_COMPUTE_TRACE_H

#include <stdint.h>

#define GS_TRACE_MAX_LINES 4000000

struct gs_meter;
struct gs_batch;

/* Open DIR/compute-trace.<pid>.tsv (logged and left off on error). */
void gs_trace_open(const char *dir);
/* 1 while tracing (one relaxed load). */
int gs_trace_on(void);
void gs_trace_launch(int device, int64_t enter, int64_t admit, uintptr_t stream, uint64_t key,
                     int kind, int64_t owed, int64_t gang, int64_t over, char why, int catchup,
                     int flags, const char *name);
/* gs_meter's on_batch hook (meter.h). */
void gs_trace_batch(const struct gs_meter *m, const struct gs_batch *b, int64_t span,
                    int64_t charge, int64_t busy, int64_t now);
/* 1 the first time `key` is seen (the caller then passes its name). */
int gs_trace_new_key(uint64_t key);

#endif

/* Sets of busy spans: sorted, disjoint half-open intervals [s, e) of one clock.
 * Owns: adding a span (merging what it overlaps or touches), the parts of a span a set does
 * not cover, and how much of a span a set covers. Pure, no allocation; callers own the arrays.
 * Used by meter.c (one process's streams counted once) and union.c (a container's processes on
 * one GPU counted once). Tests: tests/native/compute/test_spans.py. */
#ifndef GS_COMPUTE_SPANS_H
#define GS_COMPUTE_SPANS_H

#include <stdint.h>

#define GS_SPANS_MAX 32 /* a set keeps at most this many spans, forgetting the oldest */

struct gs_span { int64_t s, e; };

/* Add [s,e) to the set; returns the length not already covered. */
int64_t gs_spans_add(struct gs_span *spans, int *n, int64_t s, int64_t e);
/* The parts of [s,e) the set does not cover, in order, into out (room for n + 1); their count. */
int gs_spans_gaps(const struct gs_span *spans, int n, int64_t s, int64_t e, struct gs_span *out);
/* The length of [s,e) the set covers. */
int64_t gs_spans_covered(const struct gs_span *spans, int n, int64_t s, int64_t e);

#endif

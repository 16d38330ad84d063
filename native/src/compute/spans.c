/* Sets of busy spans. See spans.h. */
#include "spans.h"

#include <string.h>

int64_t gs_spans_covered(const struct gs_span *spans, int n, int64_t s, int64_t e)
{
    int64_t covered = 0;
    for (int i = 0; i < n; i++) {
        int64_t lo = spans[i].s > s ? spans[i].s : s;
        int64_t hi = spans[i].e < e ? spans[i].e : e;
        if (hi > lo)
            covered += hi - lo;
    }
    return covered;
}

int64_t gs_spans_add(struct gs_span *spans, int *n, int64_t s, int64_t e)
{
    if (e <= s)
        return 0;
    int64_t covered = gs_spans_covered(spans, *n, s, e), ns = s, ne = e;
    int first = -1, last = -1;
    for (int i = 0; i < *n; i++) {
        if (spans[i].e >= s && spans[i].s <= e) { /* overlaps or touches: merge */
            if (first < 0)
                first = i;
            last = i;
            if (spans[i].s < ns)
                ns = spans[i].s;
            if (spans[i].e > ne)
                ne = spans[i].e;
        }
    }
    if (first >= 0) {
        spans[first] = (struct gs_span){ns, ne};
        memmove(&spans[first + 1], &spans[last + 1], sizeof(spans[0]) * (size_t)(*n - last - 1));
        *n -= last - first;
    } else {
        int at = 0;
        while (at < *n && spans[at].s < s)
            at++;
        if (*n == GS_SPANS_MAX) { /* forget the oldest span */
            if (at == 0)
                return e - s;
            memmove(&spans[0], &spans[1], sizeof(spans[0]) * (size_t)(*n - 1));
            (*n)--;
            at--;
        }
        memmove(&spans[at + 1], &spans[at], sizeof(spans[0]) * (size_t)(*n - at));
        spans[at] = (struct gs_span){s, e};
        (*n)++;
    }
    return (e - s) - covered;
}

int gs_spans_gaps(const struct gs_span *spans, int n, int64_t s, int64_t e, struct gs_span *out)
{
    int k = 0;
    for (int i = 0; i < n && s < e; i++) {
        if (spans[i].e <= s)
            continue;
        if (spans[i].s >= e)
            break;
        if (spans[i].s > s)
            out[k++] = (struct gs_span){s, spans[i].s};
        s = spans[i].e;
    }
    if (s < e)
        out[k++] = (struct gs_span){s, e};
    return k;
}

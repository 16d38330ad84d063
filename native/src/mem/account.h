/* Memory accounting on the shared region: reserve (publish pending, check the derived total
 * against the limit), commit (pending -> used), cancel, release; plus this process's table of
 * live allocations (key -> device, charged bytes) so frees release exactly what was charged.
 * `dev` is a CUDA ordinal of this process, counted on its GPU's region entry (a GPU the region
 * cannot cap is refused). No CUDA types here (unit-tested: tests/native/unit/test_region.c). */
#ifndef GS_ACCOUNT_H
#define GS_ACCOUNT_H

#include <stdint.h>

enum gs_verdict {
    GS_PASS = 0, /* no region, or no limit and no slot: pass through unaccounted */
    GS_OK = 1,   /* bytes are now pending in this process's slot */
    GS_OVER = 2, /* would exceed the limit: nothing changed */
};

int gs_account_reserve(int dev, uint64_t bytes);
void gs_account_commit(int dev, uint64_t bytes);   /* after GS_OK and a successful allocation */
void gs_account_cancel(int dev, uint64_t bytes);   /* after GS_OK and a failed allocation */
void gs_account_release(int dev, uint64_t bytes);  /* a committed allocation was freed */
void gs_account_charge(int dev, uint64_t bytes);   /* add to used without a check (context footprint) */
uint64_t gs_account_total(int dev);                /* used + pending over live slots */
uint64_t gs_account_used(int dev);                 /* used over live slots */
uint64_t gs_account_self(int dev);                 /* this process's used bytes */
uint64_t gs_account_self_total(int dev);           /* this process's used + pending bytes */
uint64_t gs_account_limit(int dev);                /* the region's limit, 0 = none */
/* The same, by region entry (a GPU by UUID, whichever ordinal this process gives it). */
uint64_t gs_account_total_entry(int e);
uint64_t gs_account_limit_entry(int e);

/* Rounded up to a multiple of gran; a size too close to 2^64 to round stays UINT64_MAX (never
 * wraps to a small charge), which no limit admits. */
static inline uint64_t gs_round_up(uint64_t bytes, uint64_t gran)
{
    if (!gran) return bytes;
    return bytes > UINT64_MAX - (gran - 1) ? UINT64_MAX : (bytes + gran - 1) / gran * gran;
}

enum gs_track_kind { GS_TRACK_PTR = 1, GS_TRACK_VMM, GS_TRACK_ARRAY, GS_TRACK_MIPMAP, GS_TRACK_CTX, GS_TRACK_POOL };

/* Remember what key (pointer, handle) was charged; take it back at free (0 found, -1 unknown). */
int gs_track_put(int kind, uint64_t key, int dev, uint64_t bytes);
int gs_track_take(int kind, uint64_t key, int *dev, uint64_t *bytes);
int gs_track_get(int kind, uint64_t key, int *dev, uint64_t *bytes);
/* Update the bytes of a tracked key (pools: reserved size changes). */
int gs_track_set(int kind, uint64_t key, int dev, uint64_t bytes);
/* Call fn for every tracked key of a kind (under the table lock: fn must not call gs_track_*). */
void gs_track_each(int kind, void (*fn)(uint64_t key, int dev, uint64_t bytes, void *arg), void *arg);

#endif

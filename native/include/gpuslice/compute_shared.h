/* Compute-budget state kept in the shared region (one block per device, one per process slot).
 * Owned by native/src/compute/; region.h embeds these blocks at fixed sizes so the
 * region layout does not move when the compute fields change. Fixed-width fields only,
 * updated with C11 atomics; a process killed mid-update must leave them usable: the
 * budget is ONE word (tat_ns, a GCRA "theoretical arrival time") changed by CAS, so there
 * is no lock and nothing a dead process can hold. A span log entry a process died writing
 * stays at seq 0 (ignored) until the log comes round to it. The gang words of a process slot are plain
 * times (any value is safe: a stale one lapses, a future one is bounded, compute/gang.h). The rest
 * are statistics.
 * A zero-filled block is a valid initial state (full bucket). Docs: docs/compute.md. */
#ifndef GPUSLICE_COMPUTE_SHARED_H
#define GPUSLICE_COMPUTE_SHARED_H

#include <stddef.h>
#include <stdint.h>

#define GS_COMPUTE_DEVICE_BYTES 256
#define GS_COMPUTE_PROC_BYTES 88
#define GS_COMPUTE_SPAN_LOG 10

/* A busy span one process of the container was charged on this device (host clock), in the
 * device block's span log: the container's processes are charged the union of their spans
 * (compute/union.h). Written like a seqlock: seq 0 while it changes. */
struct gs_compute_span {
    _Atomic uint32_t seq;             /* 0: being written; else its number + 1 (low 32 bits) */
    _Atomic uint32_t len_ns;          /* its length (a longer span is published shortened) */
    _Atomic int64_t start_ns;
};

/* Per device: the container's GPU-time budget, shared by all its processes.
 * Times are CLOCK_MONOTONIC nanoseconds of the host (a time namespace's offset taken out), GPU
 * time in nanoseconds. Times from another boot (boot_id differs) or further ahead than any debt
 * can reach are treated as reset (compute/budget.h), so a region that outlives a reboot or a
 * restore never stalls launches. */
struct gs_compute_device {
    _Atomic uint64_t tat_ns;          /* 0: budget: time at which the bucket is empty again */
    _Atomic uint32_t limit_pct;       /* 8: limit the bucket runs at (informational) */
    _Atomic uint32_t borrowing;       /* 12: 1 while work-conserving mode uses idle GPU time */
    _Atomic uint64_t busy_ns;         /* 16: measured GPU busy time, all processes */
    _Atomic uint64_t throttle_ns;     /* 24: time launches were held back, all processes */
    _Atomic uint64_t launches;        /* 32: launches seen with a limit set */
    _Atomic uint64_t throttled;       /* 40: launches that had to wait */
    _Atomic uint64_t borrowed_ns;     /* 48: GPU time used while borrowing (work-conserving) */
    _Atomic uint64_t tenant_id;       /* 56: random id naming this container on the node board */
    _Atomic uint64_t last_demand_ns;  /* 64: last launch or throttle of any process */
    _Atomic uint64_t corrected_ns;    /* 72: other contexts' time slices taken out of batches */
    _Atomic uint64_t boot_id;         /* 80: boot the stored times belong to (hash, 0 = none yet) */
    _Atomic uint64_t span_seq;        /* 88: spans ever published in the log (union.h) */
    struct gs_compute_span spans[GS_COMPUTE_SPAN_LOG]; /* 96: the latest, span n at n % 10 */
};

/* Per process slot: what this process consumed and waited (metrics; nothing to reclaim). */
struct gs_compute_proc {
    _Atomic uint64_t busy_ns;         /* 0: measured GPU busy time of this process */
    _Atomic uint64_t throttle_ns;     /* 8: time this process's launches were held back */
    _Atomic uint64_t launches;        /* 16 */
    _Atomic uint64_t throttled;       /* 24 */
    _Atomic int64_t inflight_ns;      /* 32: estimated GPU work launched but not yet measured */
    _Atomic uint64_t last_launch_ns;  /* 40 */
    _Atomic uint64_t hold_max_ns;     /* 48: longest time one launch was held back */
    _Atomic int64_t hold_over_debt_ns; /* 56: most one hold exceeded what it owed when it began:
                                        * its device's debt, or the gang's release (gang.h) */
    _Atomic uint64_t gang_stop_ns;    /* 64: 0 running; else when it stopped for a gang hold */
    _Atomic uint64_t gang_beat_ns;    /* 72: stopped: its latest check; bit 0: its GPU queue drained */
    _Atomic uint64_t gang_release_ns; /* 80: stopped: when its own budget lets it go */
};

/* The gang file, $GPUSLICE_GANG_DIR/gang: the gang words of the processes of several
 * containers (the pods of one job on a node) that stop and go together (compute/crew.h). Created
 * complete by its first process; 0666. */
#define GS_GANG_FILE_MAGIC 0x31474e4147534755ull /* "UGSGANG1" little-endian */
#define GS_GANG_FILE_SLOTS 64

struct gs_gang_slot {                 /* 128 bytes */
    _Atomic uint64_t token;           /* 0: free; else its owner's random token (CAS-claimed) */
    _Atomic uint64_t claimed_ns;      /* 8: when its owner claimed it (host clock) */
    struct gs_compute_proc proc;      /* 16: its owner's gang words, last launch, in flight */
    _Atomic uint32_t locked;          /* 104: 1: its owner holds an open file description lock
                                       * on the slot's bytes while it lives (crew.h); 0: an
                                       * owner of an earlier library, alive by its stamps */
    uint8_t reserved[128 - 16 - GS_COMPUTE_PROC_BYTES - 4];
};

struct gs_gang_file {
    uint64_t magic;                   /* GS_GANG_FILE_MAGIC */
    uint32_t version;                 /* 1 */
    uint32_t slots;                   /* GS_GANG_FILE_SLOTS */
    uint8_t reserved[128 - 16];
    struct gs_gang_slot slot[GS_GANG_FILE_SLOTS];
};

_Static_assert(sizeof(struct gs_compute_device) == GS_COMPUTE_DEVICE_BYTES, "region layout");
_Static_assert(sizeof(struct gs_gang_slot) == 128, "gang file layout");
_Static_assert(offsetof(struct gs_gang_slot, locked) == 104, "gang file layout");
_Static_assert(sizeof(struct gs_gang_file) == 128 + 128 * GS_GANG_FILE_SLOTS, "gang file layout");
_Static_assert(sizeof(struct gs_compute_proc) == GS_COMPUTE_PROC_BYTES, "region layout");
_Static_assert(offsetof(struct gs_compute_device, busy_ns) == 16, "region layout");
_Static_assert(offsetof(struct gs_compute_device, last_demand_ns) == 64, "region layout");
_Static_assert(offsetof(struct gs_compute_device, corrected_ns) == 72, "region layout");
_Static_assert(offsetof(struct gs_compute_device, boot_id) == 80, "region layout");
_Static_assert(offsetof(struct gs_compute_device, spans) == 96, "region layout");
_Static_assert(sizeof(struct gs_compute_span) == 16, "region layout");
_Static_assert(offsetof(struct gs_compute_proc, inflight_ns) == 32, "region layout");
_Static_assert(offsetof(struct gs_compute_proc, last_launch_ns) == 40, "region layout");
_Static_assert(offsetof(struct gs_compute_proc, hold_over_debt_ns) == 56, "region layout");
_Static_assert(offsetof(struct gs_compute_proc, gang_stop_ns) == 64, "region layout");
_Static_assert(offsetof(struct gs_compute_proc, gang_release_ns) == 80, "region layout");

#endif

/* Layout of the shared region: one mmap'd file per container (DESIGN §3), read by every
 * process of the container (native/src/region/) and by Python (gpuslice.shim.Region,
 * docs/shim.md "Region layout"). Fixed-width little-endian fields; offsets are pinned by
 * _Static_assert below, so any change must bump GS_REGION_VERSION and update the mirrors.
 *
 *   [0, 4096)                      struct gs_region_header
 *   [4096, 4096 + 16*512)          struct gs_region_device[GS_REGION_MAX_DEVICES]
 *   [12288, 12288 + 1024*384)      struct gs_region_slot[GS_REGION_MAX_SLOTS]
 *
 * Created complete by the first process that opens it, or by the node agent at Allocate
 * (gpuslice.shim.RegionSpec, pid_ns 0: the container's first process claims it).
 * Protocol (no locks a dead process can hold): a process owns one slot (CAS pid 0 -> own pid),
 * publishes pending bytes before allocating, then moves them to used. Totals are derived by
 * summing live slots, so nothing drifts; dead slots are reclaimed by CAS on `state`.
 * Devices are keyed by GPU UUID, never by CUDA ordinal: a device entry is written at creation
 * from GPUSLICE_DEVICE_UUIDS, or by the first process that uses that GPU while it holds
 * `device_lock` (its thread id; a dead holder's lock is taken over); slot counters are indexed
 * by entry. */
#ifndef GPUSLICE_REGION_H
#define GPUSLICE_REGION_H

#include <stddef.h>
#include <stdint.h>

#include "compute_shared.h"

#define GS_REGION_MAGIC 0x4543494c53555047ull /* "GPUSLICE" little-endian */
#define GS_REGION_VERSION 2u
#define GS_REGION_MAX_DEVICES 16
#define GS_REGION_MAX_SLOTS 1024
#define GS_REGION_UUID_LEN 64

enum gs_slot_state {
    GS_SLOT_FREE = 0,       /* unused (pid may be set while its owner is claiming it) */
    GS_SLOT_LIVE = 1,       /* counted: pid + start_time identify the owner */
    GS_SLOT_RECLAIMING = 2, /* low byte; bits 8.. hold the clearing process's pid (taken over if it died) */
};
#define GS_SLOT_RECLAIMING_BY(pid) ((uint32_t)GS_SLOT_RECLAIMING | (uint32_t)(pid) << 8)

enum gs_device_state {
    GS_DEVICE_FREE = 0,  /* no GPU yet (uuid may hold a dead claimer's partial write) */
    GS_DEVICE_READY = 1, /* uuid and limit are final */
};

/* header flags */
#define GS_REGION_UUID_LIST 1u /* entries fixed at creation (GPUSLICE_DEVICE_UUIDS): others refused */
#define GS_REGION_PRIORITY 2u  /* the creator's CUDA_TASK_PRIORITY is recorded (next bit) and wins */
#define GS_REGION_LOW_PRIORITY 4u /* with GS_REGION_PRIORITY: priority 1 (low), else 0 (high) */

struct gs_region_header {               /* 4096 bytes */
    uint64_t magic;                     /*   0 GS_REGION_MAGIC, written last at creation */
    uint32_t version;                   /*   8 GS_REGION_VERSION */
    uint32_t header_size;               /*  12 sizeof(struct gs_region_header) */
    uint32_t device_size;               /*  16 sizeof(struct gs_region_device) */
    uint32_t slot_size;                 /*  20 sizeof(struct gs_region_slot) */
    uint32_t max_devices;               /*  24 GS_REGION_MAX_DEVICES */
    uint32_t max_slots;                 /*  28 GS_REGION_MAX_SLOTS */
    uint32_t device_count;              /*  32 index_limit entries set (highest index + 1) */
    int32_t sm_limit;                   /*  36 percent, 0 = unlimited */
    int32_t compute_mode;               /*  40 enum gs_compute_mode */
    uint32_t slot_hwm;                  /*  44 slots ever claimed (scan bound), atomic max */
    uint64_t last_reclaim_ns;           /*  48 CLOCK_MONOTONIC of the last dead-slot sweep */
    uint64_t created_unix_s;            /*  56 creation time (seconds since the epoch) */
    int32_t creator_pid;                /*  64 0 = the node agent */
    uint32_t flags;                     /*  68 GS_REGION_UUID_LIST, GS_REGION_PRIORITY, GS_REGION_LOW_PRIORITY */
    uint64_t total_size;                /*  72 file size */
    uint64_t index_limit[GS_REGION_MAX_DEVICES]; /* 80 limit by the container's device index */
    uint64_t pid_ns;                    /* 208 pid namespace inode of its users (0: the first claims it) */
    uint64_t default_limit;             /* 216 limit of indexes >= 16 (CUDA_DEVICE_MEMORY_LIMIT) */
    int32_t device_lock;                /* 224 thread id adding a device entry, 0 = none */
    uint8_t reserved[4096 - 228];       /* 228 zero */
};

struct gs_region_device {               /* 512 bytes */
    char uuid[GS_REGION_UUID_LEN];      /*   0 "GPU-..." NUL-terminated, valid once READY */
    uint64_t limit;                     /*  64 bytes, 0 = no limit */
    uint64_t context_bytes;             /*  72 measured footprint of one context (info) */
    uint32_t state;                     /*  80 enum gs_device_state */
    uint32_t index;                     /*  84 container device index the limit came from */
    uint8_t reserved[256 - 88];         /*  88 zero */
    struct gs_compute_device compute;   /* 256 owned by native/src/compute */
};

struct gs_region_slot {                 /* 384 bytes */
    int32_t pid;                        /*   0 owner pid (0 = none), CAS-claimed */
    uint32_t state;                     /*   4 enum gs_slot_state (| reclaimer pid << 8) */
    uint64_t start_time;                /*   8 owner's /proc/<pid>/stat starttime (clock ticks) */
    uint64_t used[GS_REGION_MAX_DEVICES];    /*  16 committed bytes per device entry */
    uint64_t pending[GS_REGION_MAX_DEVICES]; /* 144 reserved, allocation in flight */
    uint32_t nvml_pid;                  /* 272 pid NVML lists this process under, 0 unknown */
    uint8_t reserved[288 - 276];        /* 276 zero */
    struct gs_compute_proc compute;     /* 288 owned by native/src/compute */
    uint8_t reserved2[384 - 288 - GS_COMPUTE_PROC_BYTES];
};

#define GS_REGION_DEVICES_OFFSET 4096u
#define GS_REGION_SLOTS_OFFSET (GS_REGION_DEVICES_OFFSET + GS_REGION_MAX_DEVICES * 512u)
#define GS_REGION_SIZE (GS_REGION_SLOTS_OFFSET + GS_REGION_MAX_SLOTS * 384u)

_Static_assert(sizeof(struct gs_region_header) == 4096, "region header size");
_Static_assert(offsetof(struct gs_region_header, slot_hwm) == 44, "region header layout");
_Static_assert(offsetof(struct gs_region_header, last_reclaim_ns) == 48, "region header layout");
_Static_assert(offsetof(struct gs_region_header, total_size) == 72, "region header layout");
_Static_assert(offsetof(struct gs_region_header, index_limit) == 80, "region header layout");
_Static_assert(offsetof(struct gs_region_header, pid_ns) == 208, "region header layout");
_Static_assert(offsetof(struct gs_region_header, device_lock) == 224, "region header layout");
_Static_assert(sizeof(struct gs_region_device) == 512, "region device size");
_Static_assert(offsetof(struct gs_region_device, limit) == 64, "region device layout");
_Static_assert(offsetof(struct gs_region_device, state) == 80, "region device layout");
_Static_assert(offsetof(struct gs_region_device, compute) == 256, "region device layout");
_Static_assert(sizeof(struct gs_region_slot) == 384, "region slot size");
_Static_assert(offsetof(struct gs_region_slot, used) == 16, "region slot layout");
_Static_assert(offsetof(struct gs_region_slot, pending) == 144, "region slot layout");
_Static_assert(offsetof(struct gs_region_slot, nvml_pid) == 272, "region slot layout");
_Static_assert(offsetof(struct gs_region_slot, compute) == 288, "region slot layout");
_Static_assert(GS_REGION_SIZE == 405504, "region size");

#endif

/* Fake CUDA driver + NVML for gpuslice's CI tests: internal declarations shared by the native/fake sources.
 * Owns: a pretend GPU per FAKE_CUDA_DEVICES with FAKE_CUDA_MEMORY_MIB of memory, whose used bytes
 * live in a state file (FAKE_CUDA_STATE) shared by every process that names it, or in-process.
 * Does not: run kernels or hold data (copies are no-ops, launches only advance a virtual timeline).
 * Invariants: a process's bytes count only while it is alive (dead pids are dropped, as the kernel
 * driver frees a dead process's memory); charge/uncharge happen under one lock (flock on the file,
 * which the kernel drops when a holder dies), so the fake's own accounting is exact.
 * Env: FAKE_CUDA_DEVICES (1), FAKE_CUDA_MEMORY_MIB (16384), FAKE_CUDA_CONTEXT_MIB (0: footprint of
 * each context), FAKE_CUDA_CONTEXT_UNLISTED_MIB (0: device memory each context also takes that NVML's
 * per-process list does not show, as on a real GPU), FAKE_CUDA_CONTEXT_DELAY_MS (0: how long a
 * context creation takes), FAKE_CUDA_ALLOC_DELAY_MS (0: how long a cuMemAlloc/Pitch/Managed call
 * waits before the device is charged, so tests can hold an allocation in flight), FAKE_CUDA_LAZY_MIB (0: taken at a context's first launch, like lazily
 * loaded modules), FAKE_NVML_PID_OFFSET (0: NVML lists pid + offset, as a driver that reports host
 * pids to a container), FAKE_CUDA_STATE (path), FAKE_CUDA_SM_COUNT (132), FAKE_CUDA_NS_PER_BLOCK
 * (1000), FAKE_CUDA_POOL_CHUNK_MIB (2), FAKE_CUDA_NAME, CUDA_VISIBLE_DEVICES (indices or UUIDs;
 * NVML ignores it).
 * Tests: tests/native/ (they drive libgpuslice against this driver). */
#ifndef GS_FAKE_H
#define GS_FAKE_H

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#define FAKE_EXPORT __attribute__((visibility("default")))
/* First statement of a driver call that needs cuInit. */
#define FAKE_NEED_INIT()                                                                           \
    do {                                                                                           \
        if (!fake_initialized())                                                                   \
            return CUDA_ERROR_NOT_INITIALIZED;                                                     \
    } while (0)
/* Two exported ABI variants of one call (base + _ptsz, or _vN + _vM) over one implementation: each
 * records its own name first (fake_note), so tests can tell which one a caller reached. */
#define FAKE_VARIANTS(a, b, params, impl, args)                                                    \
    FAKE_EXPORT CUresult a params {                                                                \
        fake_note(#a);                                                                             \
        return impl args;                                                                          \
    }                                                                                              \
    FAKE_EXPORT CUresult b params {                                                                \
        fake_note(#b);                                                                             \
        return impl args;                                                                          \
    }

#define FAKE_MAX_DEV 8
#define FAKE_MAX_PROCS 128
#define FAKE_MIB (1024ull * 1024ull)
#define FAKE_GRANULE (2 * FAKE_MIB)
#define FAKE_PITCH_ALIGN 512u
#define FAKE_STATE_MAGIC 0x4b41464541445543ull /* "CUDAEFAK" little-endian-ish tag */
#define FAKE_STATE_VERSION 1u

/* Layout of the state file (mirrored by tests/native/fakestate.py; fixed-width fields only). */
struct fake_proc {
    _Atomic int32_t pid;          /* 0 = free slot */
    uint32_t pad;
    uint64_t start_time;          /* /proc/<pid>/stat field 22, defeats pid reuse */
    _Atomic uint64_t used[FAKE_MAX_DEV]; /* bytes this process holds on each device */
};

struct fake_shared {
    uint64_t magic;
    uint32_t version;
    uint32_t ndev;                /* physical devices (NVML view) */
    uint64_t total[FAKE_MAX_DEV];
    _Atomic uint64_t peak[FAKE_MAX_DEV];          /* high-water mark of the device's used bytes */
    _Atomic int64_t busy_until_ns[FAKE_MAX_DEV];  /* virtual timeline: device busy until (CLOCK_MONOTONIC) */
    _Atomic uint64_t oom_count[FAKE_MAX_DEV];     /* allocations the fake refused for lack of memory */
    struct fake_proc procs[FAKE_MAX_PROCS];
    /* per slot of procs[]: bytes in the device's used total but not in NVML's per-process list */
    _Atomic uint64_t unlisted[FAKE_MAX_PROCS][FAKE_MAX_DEV];
};

_Static_assert(sizeof(struct fake_proc) == 16 + 8 * FAKE_MAX_DEV, "state layout");
_Static_assert(sizeof(struct fake_shared) ==
                   16 + 32 * FAKE_MAX_DEV + FAKE_MAX_PROCS * (16 + 8 * FAKE_MAX_DEV) + FAKE_MAX_PROCS * 8 * FAKE_MAX_DEV,
               "state layout");

/* state.c */
struct fake_cfg {
    int ndev;                     /* physical */
    int nvisible;                 /* after CUDA_VISIBLE_DEVICES */
    int visible[FAKE_MAX_DEV];    /* CUDA ordinal -> physical index */
    uint64_t ctx_bytes;
    uint64_t ctx_unlisted;
    long ctx_delay_ms;
    long alloc_delay_ms;
    uint64_t lazy_bytes;
    uint64_t pool_chunk;
    int sm_count;
    int64_t ns_per_block;
    char name[96];
};
const struct fake_cfg *fake_cfg(void);
struct fake_shared *fake_state(void);
void fake_uuid_bytes(int phys, unsigned char out[16]);
void fake_uuid_string(int phys, char *out, size_t len);
int fake_phys(int ordinal);                    /* -1 if ordinal is not visible */
CUresult fake_charge(int phys, uint64_t bytes); /* CUDA_ERROR_OUT_OF_MEMORY if the device is full */
void fake_uncharge(int phys, uint64_t bytes);
/* Same, for bytes the device's used total includes but NVML's per-process list does not. */
CUresult fake_charge_unlisted(int phys, uint64_t bytes);
void fake_uncharge_unlisted(int phys, uint64_t bytes);
uint64_t fake_device_used(int phys);           /* all live processes */
int64_t fake_now_ns(void);
void fake_sleep_until(int64_t t_ns);
uint64_t fake_round_up(uint64_t v, uint64_t to);

/* state.c: the exported ABI variant this thread called last (tests ask fakecuda_last_variant()) */
void fake_note(const char *variant);

/* device.c: contexts */
struct fake_stream;
struct fake_ctx {
    int ordinal;
    int primary;
    int refcount;
    int alive;
    int lazy_loaded; /* FAKE_CUDA_LAZY_MIB charged (at the first launch) */
    struct fake_stream *null_stream;
};
int fake_initialized(void);
struct fake_ctx *fake_current_ctx(void);
CUresult fake_need_ctx(struct fake_ctx **out);
CUresult fake_ctx_first_launch(struct fake_ctx *c);

/* memory.c: table of everything that holds device bytes */
enum fake_kind { FK_PLAIN = 1, FK_PITCH, FK_MANAGED, FK_POOL };
CUresult fake_alloc_record(struct fake_ctx *ctx, enum fake_kind kind, uint64_t charged, uint64_t size,
                           void *pool, CUdeviceptr *out);
CUresult fake_alloc_free(CUdeviceptr ptr); /* back to its pool, or uncharged; INVALID_VALUE if unknown */
void fake_ctx_free_all(struct fake_ctx *ctx);
uint64_t fake_next_va(int ordinal, uint64_t bytes);

/* pools.c */
void fake_pools_release_at_sync(void);
void fake_pool_return(void *pool, uint64_t size);

/* stream.c */
struct fake_stream *fake_stream_resolve(CUstream s, CUresult *rc);
struct fake_stream *fake_stream_new(struct fake_ctx *ctx, unsigned flags);
int fake_stream_ordinal(struct fake_stream *s);
/* A "potentially unsafe" call under the capture rules: 1 (and the captures are invalidated) if
 * this thread may not make it now; the caller then returns CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED. */
int fake_capture_unsafe(void);

#endif

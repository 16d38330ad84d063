/* Helpers shared by the memory handlers (internal). */
#ifndef GS_MEM_H
#define GS_MEM_H

#include <stdint.h>

#include "hooks.h"

/* cuMemAlloc's real granularity (measured on H100/H200 with driver 580: see docs/shim.md). */
#define GS_ALLOC_GRANULARITY (2ull << 20)

/* Device ordinal of the current context if this process accounts memory, else -1. */
int gs_mem_current_device(void);
/* Device ordinal of a stream's context (NULL stream = current context), else -1. */
int gs_mem_stream_device(CUstream stream, int ptsz);
/* Log one over-limit refusal with the numbers (not a hot path). */
void gs_mem_refuse(const char *fn, const char *file, int line, int dev, uint64_t bytes);
#define GS_REFUSE(fn, dev, bytes) gs_mem_refuse(fn, GS_FILE, __LINE__, dev, bytes)
/* Charge this process's driver memory beyond its allocations (NVML per-process, rate-limited). */
void gs_ctx_reconcile(int dev, int force);
/* gs_ctx_reconcile (rate-limited) on every device where this process holds a primary context. */
void gs_ctx_reconcile_active(void);
/* Reserve bytes on dev: 1 reserved, 0 pass through unaccounted, -1 over the limit (logged). */
int gs_mem_reserve(const char *fn, int dev, uint64_t bytes);

#endif

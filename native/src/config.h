/* Environment -> struct gs_config, read once (HAMi-core compatible names, DESIGN §3).
 * Owns: the strict size grammar and every env name; no CUDA, no region (unit-tested alone:
 * tests/native/unit/test_config.c). Invalid values are never defaulted: `valid` is 0, the
 * first error is logged once and cuInit returns CUDA_ERROR_INVALID_VALUE. */
#ifndef GS_CONFIG_H
#define GS_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#define GS_MAX_DEVICES 16
#define GS_PATH_MAX 512

enum gs_compute_mode {
    GS_COMPUTE_HARD = 0,            /* never exceed sm_limit (default) */
    GS_COMPUTE_WORK_CONSERVING = 1, /* may exceed it while the GPU is otherwise idle */
};

struct gs_config {
    uint64_t mem_limit[GS_MAX_DEVICES]; /* bytes per visible CUDA ordinal, 0 = no limit */
    int mem_limited;                    /* 1 if any mem_limit[i] != 0 */
    int sm_limit;                       /* percent 1..99; 0 = unlimited (100 is stored as 0) */
    enum gs_compute_mode compute_mode;  /* GPUSLICE_COMPUTE_MODE=hard|work-conserving */
    int priority;                       /* CUDA_TASK_PRIORITY 0 (high, default) | 1 (low) */
    int log_level;                      /* LIBCUDA_LOG_LEVEL 0 error .. 4 debug; default 2 (warn) */
    char region_path[GS_PATH_MAX];      /* CUDA_DEVICE_MEMORY_SHARED_CACHE or /tmp/gpuslice-<uid>.region */
    int valid;                          /* 0: some variable was invalid, see error */
    char error[512];                    /* first problem: `NAME="value": what; fix` */
};

/* Env lookup used by gs_config_parse (getenv in the library, a table in unit tests). */
typedef const char *(*gs_getenv_fn)(const char *name);

/* Fill *out from the environment. Returns 0 if valid, -1 otherwise (out->error says why). */
int gs_config_parse(struct gs_config *out, gs_getenv_fn get);

/* Strict size grammar: [ws] DIGITS [k|K|Ki|KiB|m|M|Mi|MiB|g|G|Gi|GiB|t|T|Ti|TiB] [ws], binary
 * multiples; 0, overflow, signs, decimals and other suffixes are errors. Returns 0 or -1 with
 * a message in err ("unknown suffix \"GB\"; use 4G or 4GiB"). */
int gs_parse_size(const char *text, uint64_t *out, char *err, size_t errlen);

/* The process-wide configuration, parsed on first call (thread-safe, never NULL). */
const struct gs_config *gs_config_get(void);

#endif

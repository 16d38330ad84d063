/* Environment -> struct gs_config, read once (HAMi-core compatible names, DESIGN §3).
 * Owns: the strict size grammar and every env name; no CUDA, no region (unit-tested alone:
 * tests/native/unit/test_config.c). Invalid values and unrecognised names are never ignored:
 * `valid` is 0, the first error is logged once and cuInit returns CUDA_ERROR_INVALID_VALUE. */
#ifndef GS_CONFIG_H
#define GS_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#define GS_MAX_DEVICES 16
#define GS_PATH_MAX 512
#define GS_UUID_LEN 64
/* The region the node agent creates and mounts into a container (docs/shim.md "Threat model"):
 * when this file exists it is the region, whatever the env says. Set at build only
 * (make EXTRA_CFLAGS='-DGS_AGENT_REGION=\"/path\"'), never by env: a tenant controls its env. */
#ifndef GS_AGENT_REGION
#define GS_AGENT_REGION "/var/run/gpuslice/region"
#endif
/* The node-wide board directory the node agent mounts into every container (docs/compute.md
 * "Work-conserving mode and priority: the board"): with the agent's region, the board is here if
 * it exists and GPUSLICE_BOARD_DIR is ignored (a private board would let a tenant always borrow).
 * Set at build only, like GS_AGENT_REGION. */
#ifndef GS_AGENT_BOARD
#define GS_AGENT_BOARD "/var/run/gpuslice-board"
#endif

enum gs_compute_mode {
    GS_COMPUTE_HARD = 0,            /* never exceed sm_limit (default) */
    GS_COMPUTE_WORK_CONSERVING = 1, /* may exceed it while the GPU is otherwise idle */
};

struct gs_config {
    uint64_t mem_limit[GS_MAX_DEVICES]; /* bytes per visible CUDA ordinal, 0 = no limit */
    int mem_limited;                    /* 1 if memory is capped: a mem_limit[i] != 0, or agent_region */
    int sm_limit;                       /* percent 1..99; 0 = unlimited (100 is stored as 0) */
    enum gs_compute_mode compute_mode;  /* GPUSLICE_COMPUTE_MODE=hard|work-conserving */
    int priority;                       /* CUDA_TASK_PRIORITY 0 (high, default) | 1 (low) */
    int compute_phase;                  /* GPUSLICE_COMPUTE_PHASE=1: the container's processes
                                           hold together (compute/gang.h; experimental,
                                           default 0) */
    int log_level;                      /* LIBCUDA_LOG_LEVEL 0 error .. 4 debug; default 2 (warn) */
    uint64_t mem_limit_default;         /* CUDA_DEVICE_MEMORY_LIMIT: indexes without their own limit */
    char device_uuids[GS_MAX_DEVICES][GS_UUID_LEN]; /* GPUSLICE_DEVICE_UUIDS: container index -> GPU */
    int device_uuid_count;              /* 0: not set (index i = the i-th device a process sees) */
    char region_path[GS_PATH_MAX];      /* GS_AGENT_REGION, CUDA_DEVICE_MEMORY_SHARED_CACHE or
                                           /tmp/gpuslice.region */
    int agent_region;                   /* 1: region_path is the node agent's (its limits apply) */
    int valid;                          /* 0: some variable was invalid, see error */
    char error[512];                    /* first problem: `NAME="value": what; fix` */
};

/* Env lookup used by gs_config_parse (getenv in the library, a table in unit tests). */
typedef const char *(*gs_getenv_fn)(const char *name);

/* Fill *out from the environment. Returns 0 if valid, -1 otherwise (out->error says why). */
int gs_config_parse(struct gs_config *out, gs_getenv_fn get);

/* Check the names of an environ-style list ("NAME=value"): a CUDA_DEVICE_MEMORY_LIMIT_<i> whose
 * <i> is not a device index the library reads (_00, _O, _16 with 16 devices) and an unknown
 * GPUSLICE_* name make the config invalid (the first problem goes to out->error). */
void gs_config_check_names(struct gs_config *out, char *const *envp);

/* Use the node agent's region at `path` if a file (of any kind: a bad one is refused later, never
 * skipped) is there: region_path = path, agent_region = mem_limited = 1, so the region opens
 * whatever the env limits say and its limits apply. Returns 1 if used, 0 if nothing is there. */
int gs_config_agent_region(struct gs_config *out, const char *path);

/* Strict size grammar: [ws] DIGITS [k|K|Ki|KiB|m|M|Mi|MiB|g|G|Gi|GiB|t|T|Ti|TiB] [ws], binary
 * multiples; 0, overflow, signs, decimals and other suffixes are errors. Returns 0 or -1 with
 * a message in err ("unknown suffix \"GB\"; use 4G or 4GiB"). */
int gs_parse_size(const char *text, uint64_t *out, char *err, size_t errlen);

/* The process-wide configuration, parsed on first call (thread-safe, never NULL). */
const struct gs_config *gs_config_get(void);

#endif

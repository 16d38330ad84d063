/* Environment -> struct gs_config (see config.h). Pure: takes an env lookup function and an
 * environ-style list, so tests/native/unit/test_config.c drives it with tables; the one look at
 * the file system is whether the node agent's region is there (gs_config_agent_region), which
 * outranks the env's region path. Error text names the variable, the value, what is wrong and
 * the fix. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "log.h"

static int gs_is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

struct gs_suffix {
    const char *text;
    unsigned shift;
};

static const struct gs_suffix gs_suffixes[] = {
    {"", 0},     {"k", 10},   {"K", 10},   {"Ki", 10},  {"KiB", 10}, {"m", 20},
    {"M", 20},   {"Mi", 20},  {"MiB", 20}, {"g", 30},   {"G", 30},   {"Gi", 30},
    {"GiB", 30}, {"t", 40},   {"T", 40},   {"Ti", 40},  {"TiB", 40},
};

int gs_parse_size(const char *text, uint64_t *out, char *err, size_t errlen)
{
    const char *p = text;
    while (gs_is_space(*p)) p++;
    if (*p < '0' || *p > '9') {
        snprintf(err, errlen, "not a size; use digits with an optional suffix, e.g. 4GiB or 512Mi");
        return -1;
    }
    uint64_t value = 0;
    int overflow = 0;
    while (*p >= '0' && *p <= '9') {
        unsigned d = (unsigned)(*p - '0');
        if (value > (UINT64_MAX - d) / 10) overflow = 1;
        else value = value * 10 + d;
        p++;
    }
    const char *suf = p;
    while (*p && !gs_is_space(*p)) p++;
    size_t suflen = (size_t)(p - suf);
    while (gs_is_space(*p)) p++;
    if (*p != '\0') {
        snprintf(err, errlen, "unexpected text after the size; use one value, e.g. 4GiB");
        return -1;
    }
    int shift = -1;
    for (size_t i = 0; i < sizeof gs_suffixes / sizeof gs_suffixes[0]; i++) {
        if (strlen(gs_suffixes[i].text) == suflen && strncmp(gs_suffixes[i].text, suf, suflen) == 0) {
            shift = (int)gs_suffixes[i].shift;
            break;
        }
    }
    if (shift < 0) {
        /* value may have overflowed: print the digits as written */
        int digits = (int)(suf - text);
        while (digits > 0 && gs_is_space(*text)) { text++; digits--; }
        snprintf(err, errlen, "unknown suffix \"%.*s\"; use %.*sG or %.*sGiB", (int)suflen, suf, digits, text, digits, text);
        return -1;
    }
    if (overflow || value > ((uint64_t)INT64_MAX >> shift)) {
        snprintf(err, errlen, "too large; the most is 2^63-1 bytes (8 EiB)");
        return -1;
    }
    if (value == 0) {
        snprintf(err, errlen, "zero is not a limit; unset the variable for no limit");
        return -1;
    }
    *out = value << shift;
    return 0;
}

static int gs_fail(struct gs_config *c, const char *name, const char *value, const char *why)
{
    if (c->valid) {
        snprintf(c->error, sizeof c->error, "%.48s=\"%.120s\": %.300s", name, value, why);
        c->valid = 0;
    }
    return -1;
}

static int gs_parse_int(const char *v, long lo, long hi, long *out)
{
    char *end;
    while (gs_is_space(*v)) v++;
    if (*v < '0' || *v > '9') return -1;
    long x = strtol(v, &end, 10);
    while (gs_is_space(*end)) end++;
    if (*end != '\0' || x < lo || x > hi) return -1;
    *out = x;
    return 0;
}

static void gs_parse_memory(struct gs_config *c, gs_getenv_fn get)
{
    char err[200], name[48];
    uint64_t all = 0;
    const char *v = get("CUDA_DEVICE_MEMORY_LIMIT");
    if (v != NULL && *v != '\0') {
        if (gs_parse_size(v, &all, err, sizeof err) != 0) gs_fail(c, "CUDA_DEVICE_MEMORY_LIMIT", v, err);
    }
    c->mem_limit_default = all;
    for (int i = 0; i < GS_MAX_DEVICES; i++) {
        uint64_t one = 0;
        snprintf(name, sizeof name, "CUDA_DEVICE_MEMORY_LIMIT_%d", i);
        v = get(name);
        if (v != NULL && *v != '\0') {
            if (gs_parse_size(v, &one, err, sizeof err) != 0) gs_fail(c, name, v, err);
        }
        c->mem_limit[i] = one ? one : all;
        if (c->mem_limit[i]) c->mem_limited = 1;
    }
}

/* GPUSLICE_DEVICE_UUIDS=GPU-a,GPU-b,...: the container's GPUs in the node agent's order (as in
 * NVIDIA_VISIBLE_DEVICES); CUDA_DEVICE_MEMORY_LIMIT_<i> then means the i-th of them. */
static void gs_parse_device_uuids(struct gs_config *c, gs_getenv_fn get)
{
    const char *v = get("GPUSLICE_DEVICE_UUIDS");
    if (v == NULL || *v == '\0') return;
    const char *p = v;
    for (int i = 0;; i++) {
        size_t n = strcspn(p, ",");
        int hex = n > 4 && strspn(p + 4, "0123456789abcdefABCDEF-") == n - 4;
        if (i == GS_MAX_DEVICES || strncmp(p, "GPU-", 4) != 0 || !hex || n >= GS_UUID_LEN) {
            gs_fail(c, "GPUSLICE_DEVICE_UUIDS", v, i == GS_MAX_DEVICES ? "more than 16 GPUs; the library caps at most 16"
                    : "not a comma-separated list of GPU UUIDs (GPU-xxxxxxxx-...); it is set by the node agent");
            c->device_uuid_count = 0;
            return;
        }
        snprintf(c->device_uuids[i], GS_UUID_LEN, "%.*s", (int)n, p);
        c->device_uuid_count = i + 1;
        if (p[n] == '\0') return;
        p += n + 1;
    }
}

static void gs_parse_compute(struct gs_config *c, gs_getenv_fn get)
{
    long x;
    const char *v = get("CUDA_DEVICE_SM_LIMIT");
    if (v != NULL && *v != '\0') {
        if (gs_parse_int(v, 0, 100, &x) != 0)
            gs_fail(c, "CUDA_DEVICE_SM_LIMIT", v, "not a percentage; use an integer 0..100 (0 or 100 = no limit)");
        else c->sm_limit = x == 100 ? 0 : (int)x;
    }
    v = get("GPUSLICE_COMPUTE_MODE");
    if (v != NULL && *v != '\0') {
        if (strcmp(v, "hard") == 0) c->compute_mode = GS_COMPUTE_HARD;
        else if (strcmp(v, "work-conserving") == 0) c->compute_mode = GS_COMPUTE_WORK_CONSERVING;
        else gs_fail(c, "GPUSLICE_COMPUTE_MODE", v, "unknown mode; use hard or work-conserving");
    }
    v = get("CUDA_TASK_PRIORITY");
    if (v != NULL && *v != '\0') {
        if (gs_parse_int(v, 0, 1, &x) != 0)
            gs_fail(c, "CUDA_TASK_PRIORITY", v, "unknown priority; use 0 (high) or 1 (low)");
        else c->priority = (int)x;
    }
    v = get("GPUSLICE_COMPUTE_PHASE");
    if (v != NULL && *v != '\0') {
        if (gs_parse_int(v, 0, 1, &x) != 0)
            gs_fail(c, "GPUSLICE_COMPUTE_PHASE", v, "use 1 (ranks on several GPUs launch in phase) or 0");
        else c->compute_phase = (int)x;
    }
}

int gs_config_parse(struct gs_config *c, gs_getenv_fn get)
{
    long x;
    memset(c, 0, sizeof *c);
    c->valid = 1;
    c->log_level = 1;
    const char *v = get("LIBCUDA_LOG_LEVEL");
    if (v != NULL && *v != '\0') {
        if (gs_parse_int(v, 0, 4, &x) != 0)
            gs_fail(c, "LIBCUDA_LOG_LEVEL", v, "unknown level; use 0 (error) .. 4 (debug)");
        else c->log_level = (int)x;
    }
    gs_parse_memory(c, get);
    gs_parse_device_uuids(c, get);
    gs_parse_compute(c, get);
    v = get("CUDA_DEVICE_MEMORY_SHARED_CACHE");
    if (v != NULL && *v != '\0') {
        if (strlen(v) >= sizeof c->region_path)
            gs_fail(c, "CUDA_DEVICE_MEMORY_SHARED_CACHE", v, "path too long; use a path under 512 bytes");
        else snprintf(c->region_path, sizeof c->region_path, "%s", v);
    } else {
        snprintf(c->region_path, sizeof c->region_path, "/tmp/gpuslice.region"); /* one cap, whatever the uid */
    }
    return c->valid ? 0 : -1;
}

int gs_config_agent_region(struct gs_config *c, const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0 && (errno == ENOENT || errno == ENOTDIR)) return 0;
    snprintf(c->region_path, sizeof c->region_path, "%s", path);
    c->agent_region = 1;
    c->mem_limited = 1;
    return 1;
}

/* Every GPUSLICE_* name of the project: the library's own, and those other gpuslice parts set or
 * read (they reach CUDA processes through injected or inherited environments); an entry ending
 * in "_" covers a whole prefix (a service's settings, checked by that service). Anything else
 * with the prefix is a typo or a stale setting, and an error: a misspelt GPUSLICE_COMPUTE_MODE
 * must not run in the default mode without a word. tests/native/unit/test_config_names.py keeps
 * this list complete. */
static const char *const gs_known_names[] = {
    "GPUSLICE_COMPUTE_MODE", "GPUSLICE_BOARD_DIR", "GPUSLICE_DEVICE_UUIDS", /* the library */
    "GPUSLICE_COMPUTE_PHASE", "GPUSLICE_COMPUTE_TRACE", "GPUSLICE_GANG_DIR", /* the library */
    "GPUSLICE_POD_UID", "GPUSLICE_POD_NAMESPACE", "GPUSLICE_POD_NAME",    /* older webhooks */
    "GPUSLICE_CONTAINER_NAME", "GPUSLICE_MIG_DEVICES",                     /* node agent (MIG) */
    "GPUSLICE_NODE_", "GPUSLICE_WEBHOOK_", "GPUSLICE_SCHEDULER_",          /* services */
    "GPUSLICE_LIBRARY", "GPUSLICE_RELEASE",                               /* CLI, setup.py */
    "GPUSLICE_GPU_RESULTS", "GPUSLICE_UPDATE_GOLDEN", "GPUSLICE_HYPOTHESIS_EXAMPLES", /* tests */
    "GPUSLICE_SANITIZE", "GPUSLICE_KUBE_BACKENDS", "GPUSLICE_REAL_NODE_",
};

static int gs_known_name(const char *name)
{
    for (size_t i = 0; i < sizeof gs_known_names / sizeof gs_known_names[0]; i++) {
        const char *k = gs_known_names[i];
        size_t n = strlen(k);
        if (k[n - 1] == '_' ? strncmp(name, k, n) == 0 : strcmp(name, k) == 0)
            return 1;
    }
    return 0;
}

#define GS_LIMIT_PREFIX "CUDA_DEVICE_MEMORY_LIMIT_"

/* "CUDA_DEVICE_MEMORY_LIMIT_<i>": i must be written as gs_parse_memory looks it up (decimal, no
 * sign, no leading zero) and name a device the library can cap. */
static void gs_check_limit_name(struct gs_config *c, const char *name, const char *value)
{
    const char *idx = name + strlen(GS_LIMIT_PREFIX);
    char why[200];
    size_t n = strspn(idx, "0123456789");
    if (n == 0 || idx[n] != '\0' || (idx[0] == '0' && n > 1)) {
        snprintf(why, sizeof why, "not a device index; use CUDA_DEVICE_MEMORY_LIMIT_<i> with i = 0..%d "
                 "written without leading zeros, or CUDA_DEVICE_MEMORY_LIMIT for every device",
                 GS_MAX_DEVICES - 1);
        gs_fail(c, name, value, why);
    } else if (n > 3 || atoi(idx) >= GS_MAX_DEVICES) {
        snprintf(why, sizeof why, "device %.8s%s is beyond the %d devices the library caps; use an index "
                 "0..%d", idx, n > 8 ? "..." : "", GS_MAX_DEVICES, GS_MAX_DEVICES - 1);
        gs_fail(c, name, value, why);
    }
}

void gs_config_check_names(struct gs_config *c, char *const *envp)
{
    for (; envp && *envp; envp++) {
        const char *eq = strchr(*envp, '=');
        char name[128];
        if (eq == NULL) continue;
        snprintf(name, sizeof name, "%.*s", (int)(eq - *envp), *envp);
        if (strncmp(name, GS_LIMIT_PREFIX, strlen(GS_LIMIT_PREFIX)) == 0) {
            gs_check_limit_name(c, name, eq + 1);
        } else if (strncmp(name, "GPUSLICE_", 9) == 0 && !gs_known_name(name)) {
            gs_fail(c, name, eq + 1, "unknown gpuslice variable (a typo?); the library reads "
                    "GPUSLICE_COMPUTE_MODE, GPUSLICE_COMPUTE_PHASE, GPUSLICE_COMPUTE_TRACE, GPUSLICE_GANG_DIR, "
                    "GPUSLICE_BOARD_DIR and GPUSLICE_DEVICE_UUIDS: fix the "
                    "name or unset it");
        }
    }
}

static struct gs_config gs_cfg;
static pthread_once_t gs_cfg_once = PTHREAD_ONCE_INIT;

static const char *gs_getenv(const char *name)
{
    return getenv(name);
}

static void gs_config_load(void)
{
    gs_config_parse(&gs_cfg, gs_getenv);
    gs_config_check_names(&gs_cfg, environ);
    if (!gs_cfg.valid) {
        GS_ERROR("%s", gs_cfg.error);
        return;
    }
    gs_log_set_level(gs_cfg.log_level);
    const char *env = getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE");
    if (gs_config_agent_region(&gs_cfg, GS_AGENT_REGION) && env && *env && strcmp(env, GS_AGENT_REGION) != 0)
        GS_WARN("CUDA_DEVICE_MEMORY_SHARED_CACHE=%s is ignored: the node agent's region %s is this "
                "container's, with the limits it was given", env, GS_AGENT_REGION);
}

const struct gs_config *gs_config_get(void)
{
    pthread_once(&gs_cfg_once, gs_config_load);
    return &gs_cfg;
}

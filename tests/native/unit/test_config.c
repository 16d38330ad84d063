/* Unit tests for native/src/config.c: the strict size grammar and env -> struct gs_config.
 * Built and run by test_native_unit.py (links config.c + log.c only; no CUDA). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "config.h"

struct row { const char *text; unsigned long long bytes; const char *err; };

static const struct row sizes[] = {
    {"1", 1, NULL},
    {"1073741824", 1073741824ull, NULL},
    {" 4GiB ", 4ull << 30, NULL},
    {"4g", 4ull << 30, NULL},
    {"4G", 4ull << 30, NULL},
    {"4Gi", 4ull << 30, NULL},
    {"512Mi", 512ull << 20, NULL},
    {"512m", 512ull << 20, NULL},
    {"7k", 7ull << 10, NULL},
    {"7KiB", 7ull << 10, NULL},
    {"2T", 2ull << 40, NULL},
    {"2TiB", 2ull << 40, NULL},
    {"4GB", 0, "unknown suffix \"GB\"; use 4G or 4GiB"},
    {"4gb", 0, "unknown suffix \"gb\""},
    {"4 GiB", 0, "unexpected text"},
    {"1.5G", 0, "unknown suffix \".5G\""},
    {"-1", 0, "not a size"},
    {"+1", 0, "not a size"},
    {"", 0, "not a size"},
    {"G", 0, "not a size"},
    {"0", 0, "zero is not a limit"},
    {"0GiB", 0, "zero is not a limit"},
    {"8388608T", 0, "too large"},
    {"99999999999999999999999", 0, "too large"},
    {"9223372036854775807", 9223372036854775807ull, NULL},
    {"9223372036854775808", 0, "too large"},
    {"4P", 0, "unknown suffix \"P\""},
};

static void test_sizes_follow_the_shared_grammar(void)
{
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        unsigned long long v = 0;
        char err[256] = "";
        uint64_t out = 0;
        int rc = gs_parse_size(sizes[i].text, &out, err, sizeof err);
        v = out;
        if (sizes[i].err == NULL) {
            EXPECT(rc == 0 && v == sizes[i].bytes, "\"%s\" should parse to %llu bytes, got rc=%d %llu (%s)",
                   sizes[i].text, sizes[i].bytes, rc, v, err);
        } else {
            EXPECT(rc != 0, "\"%s\" must be rejected (never a silent default)", sizes[i].text);
            EXPECT(strstr(err, sizes[i].err) != NULL, "error for \"%s\" should say '%s', got '%s'", sizes[i].text,
                   sizes[i].err, err);
        }
    }
}

/* A tiny fake environment for gs_config_parse. */
static const char *env_keys[32], *env_vals[32];
static int env_n;
static void env_set(const char *k, const char *v) { env_keys[env_n] = k; env_vals[env_n++] = v; }
static const char *env_get(const char *k)
{
    for (int i = 0; i < env_n; i++)
        if (strcmp(env_keys[i], k) == 0) return env_vals[i];
    return NULL;
}

static void test_no_env_means_no_limits_and_the_default_region(void)
{
    struct gs_config c;
    env_n = 0;
    EXPECT(gs_config_parse(&c, env_get) == 0, "an empty environment is valid");
    EXPECT(!c.mem_limited && c.sm_limit == 0 && c.priority == 0, "nothing set means nothing limited");
    EXPECT(c.compute_mode == GS_COMPUTE_HARD, "hard is the default compute mode");
    EXPECT(strcmp(c.region_path, "/tmp/gpuslice.region") == 0, "default region has no uid in it (one cap for "
           "every uid of a container), got %s",
           c.region_path);
}

static void test_per_device_limit_overrides_the_all_devices_limit(void)
{
    struct gs_config c;
    env_n = 0;
    env_set("CUDA_DEVICE_MEMORY_LIMIT", "4GiB");
    env_set("CUDA_DEVICE_MEMORY_LIMIT_1", "1g");
    env_set("CUDA_DEVICE_MEMORY_SHARED_CACHE", "/x/r");
    EXPECT(gs_config_parse(&c, env_get) == 0, "valid env");
    EXPECT(c.mem_limit[0] == 4ull << 30 && c.mem_limit[1] == 1ull << 30 && c.mem_limit[2] == 4ull << 30,
           "device 1 has its own limit, others the common one");
    EXPECT(c.mem_limited == 1, "a limit is set");
    EXPECT(strcmp(c.region_path, "/x/r") == 0, "region path from CUDA_DEVICE_MEMORY_SHARED_CACHE");
}

static void test_device_uuids_list_the_containers_gpus_in_order(void)
{
    struct gs_config c;
    env_n = 0;
    env_set("CUDA_DEVICE_MEMORY_LIMIT", "4GiB");
    env_set("GPUSLICE_DEVICE_UUIDS", "GPU-0a1b,GPU-ffff-0000");
    EXPECT(gs_config_parse(&c, env_get) == 0, "a list of UUIDs is valid");
    EXPECT(c.device_uuid_count == 2 && strcmp(c.device_uuids[0], "GPU-0a1b") == 0 &&
           strcmp(c.device_uuids[1], "GPU-ffff-0000") == 0, "index i is the i-th UUID");
    EXPECT(c.mem_limit_default == 4ull << 30, "CUDA_DEVICE_MEMORY_LIMIT is kept for indexes past 15");
    const char *bad[] = {"0,1", "GPU-0a1b,,GPU-2", "GPU-xyz", "GPU-0a1b GPU-2", "GPU-"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        env_n = 0;
        env_set("GPUSLICE_DEVICE_UUIDS", bad[i]);
        EXPECT(gs_config_parse(&c, env_get) != 0 && strstr(c.error, "GPUSLICE_DEVICE_UUIDS") != NULL,
               "GPUSLICE_DEVICE_UUIDS=\"%s\" is refused with its name", bad[i]);
    }
}

static void test_compute_settings_parse_and_100_percent_means_unlimited(void)
{
    struct gs_config c;
    env_n = 0;
    env_set("CUDA_DEVICE_SM_LIMIT", "100");
    env_set("GPUSLICE_COMPUTE_MODE", "work-conserving");
    env_set("CUDA_TASK_PRIORITY", "1");
    EXPECT(gs_config_parse(&c, env_get) == 0, "valid env");
    EXPECT(c.sm_limit == 0, "100%% is the whole GPU, stored as 0 (unlimited)");
    EXPECT(c.compute_mode == GS_COMPUTE_WORK_CONSERVING && c.priority == 1, "mode and priority read");
    env_n = 0;
    env_set("CUDA_DEVICE_SM_LIMIT", "30");
    EXPECT(gs_config_parse(&c, env_get) == 0 && c.sm_limit == 30, "30 stays 30");
}

static void test_invalid_values_make_the_config_invalid_with_the_name_and_fix(void)
{
    static const char *bad[][3] = {
        {"CUDA_DEVICE_MEMORY_LIMIT", "4GB", "CUDA_DEVICE_MEMORY_LIMIT=\"4GB\": unknown suffix \"GB\"; use 4G or 4GiB"},
        {"CUDA_DEVICE_MEMORY_LIMIT_3", "0", "CUDA_DEVICE_MEMORY_LIMIT_3=\"0\": zero"},
        {"CUDA_DEVICE_SM_LIMIT", "150", "CUDA_DEVICE_SM_LIMIT=\"150\": not a percentage"},
        {"CUDA_DEVICE_SM_LIMIT", "30%", "CUDA_DEVICE_SM_LIMIT=\"30%\""},
        {"GPUSLICE_COMPUTE_MODE", "soft", "use hard or work-conserving"},
        {"CUDA_TASK_PRIORITY", "2", "use 0 (high) or 1 (low)"},
        {"LIBCUDA_LOG_LEVEL", "9", "LIBCUDA_LOG_LEVEL=\"9\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct gs_config c;
        env_n = 0;
        env_set(bad[i][0], bad[i][1]);
        EXPECT(gs_config_parse(&c, env_get) != 0 && !c.valid, "%s=%s must be invalid", bad[i][0], bad[i][1]);
        EXPECT(strstr(c.error, bad[i][2]) != NULL, "error should contain '%s', got '%s'", bad[i][2], c.error);
    }
}

static void test_unrecognised_limit_and_gpuslice_names_are_errors_naming_the_variable(void)
{
    static const char *bad[][2] = {
        {"CUDA_DEVICE_MEMORY_LIMIT_00=1G", "CUDA_DEVICE_MEMORY_LIMIT_00=\"1G\": not a device index"},
        {"CUDA_DEVICE_MEMORY_LIMIT_O=1G", "CUDA_DEVICE_MEMORY_LIMIT_O=\"1G\": not a device index"},
        {"CUDA_DEVICE_MEMORY_LIMIT_=1G", "not a device index"},
        {"CUDA_DEVICE_MEMORY_LIMIT_-1=1G", "not a device index"},
        {"CUDA_DEVICE_MEMORY_LIMIT_1x=1G", "not a device index"},
        {"CUDA_DEVICE_MEMORY_LIMIT_99999999999999999999=1G", "beyond the"},
        {"GPUSLICE_COMPUTE_MOD=hard", "GPUSLICE_COMPUTE_MOD=\"hard\": unknown gpuslice variable"},
        {"GPUSLICE_=x", "unknown gpuslice variable"},
        {"GPUSLICE_NODE=x", "unknown gpuslice variable"}, /* a prefix entry covers names under it */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct gs_config c;
        char *envp[] = {"PATH=/bin", (char *)bad[i][0], NULL};
        env_n = 0;
        gs_config_parse(&c, env_get);
        gs_config_check_names(&c, envp);
        EXPECT(!c.valid, "%s must make the config invalid (never ignored)", bad[i][0]);
        EXPECT(strstr(c.error, bad[i][1]) != NULL, "error should contain '%s', got '%s'", bad[i][1], c.error);
    }
    char beyond[64];
    snprintf(beyond, sizeof beyond, "CUDA_DEVICE_MEMORY_LIMIT_%d=1G", GS_MAX_DEVICES);
    struct gs_config c;
    char *envp[] = {beyond, NULL};
    gs_config_parse(&c, env_get);
    gs_config_check_names(&c, envp);
    EXPECT(!c.valid && strstr(c.error, "beyond the") != NULL, "%s is past the last device: %s", beyond, c.error);
}

static void test_known_names_and_other_prefixes_pass_the_name_check(void)
{
    char last[64];
    snprintf(last, sizeof last, "CUDA_DEVICE_MEMORY_LIMIT_%d=1G", GS_MAX_DEVICES - 1);
    char *envp[] = {"CUDA_DEVICE_MEMORY_LIMIT=1G", "CUDA_DEVICE_MEMORY_LIMIT_0=1G", last,
                    "GPUSLICE_COMPUTE_MODE=hard", "GPUSLICE_BOARD_DIR=/b", "GPUSLICE_LIBRARY=/l",
                    "GPUSLICE_POD_UID=u", "GPUSLICE_NODE_WATCHDOG__KILL=1",
                    "CUDA_VISIBLE_DEVICES=0", "CUDA_DEVICE_MEMORY_LIMITS=x", "MY_GPUSLICE_X=1",
                    "NO_EQUALS_SIGN", NULL};
    struct gs_config c;
    env_n = 0;
    gs_config_parse(&c, env_get);
    gs_config_check_names(&c, envp);
    EXPECT(c.valid, "known names and names of other prefixes are fine, got '%s'", c.error);
}

static void test_the_agents_region_outranks_the_env_path_and_env_limits(void)
{
    struct gs_config c;
    env_n = 0;
    env_set("CUDA_DEVICE_MEMORY_SHARED_CACHE", "/tmp/mine");
    gs_config_parse(&c, env_get);
    EXPECT(gs_config_agent_region(&c, "/nonexistent/gpuslice/region") == 0 && !c.agent_region &&
           !c.mem_limited && strcmp(c.region_path, "/tmp/mine") == 0,
           "without the agent's region the env's path and (no) limits stay");
    char path[] = "/tmp/gs-agent-region-XXXXXX";
    int fd = mkstemp(path);
    EXPECT(fd >= 0 && gs_config_agent_region(&c, path) == 1 && c.agent_region && c.mem_limited &&
           strcmp(c.region_path, path) == 0,
           "the agent's region is the region, and memory is capped (its limits) though env sets none");
    if (fd >= 0) {
        close(fd);
        unlink(path);
    }
}

int main(void)
{
    test_sizes_follow_the_shared_grammar();
    test_no_env_means_no_limits_and_the_default_region();
    test_per_device_limit_overrides_the_all_devices_limit();
    test_device_uuids_list_the_containers_gpus_in_order();
    test_compute_settings_parse_and_100_percent_means_unlimited();
    test_invalid_values_make_the_config_invalid_with_the_name_and_fix();
    test_unrecognised_limit_and_gpuslice_names_are_errors_naming_the_variable();
    test_known_names_and_other_prefixes_pass_the_name_check();
    test_the_agents_region_outranks_the_env_path_and_env_limits();
    return check_report(__FILE__);
}

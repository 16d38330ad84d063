/* Helper for test_native_unit.py: the C library's region code writes a known state (limit
 * 64 MiB on device 0, 3 MiB used on device 0, 5 MiB used + 1 MiB pending on device 1, UUIDs
 * GPU-...440 and GPU-...441 from the stub below), prints
 * "ready", and keeps its slot until stdin closes, so the Python mirror can be checked against it. */
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "mem/account.h"
#include "region.h"

/* The CUDA side's UUID of an ordinal (here: ordinal n is GPU-...44n). */
int gs_device_uuid(int ordinal, char *out, size_t len)
{
    snprintf(out, len, "GPU-00000000-1111-2222-3333-44444444444%d", ordinal);
    return 0;
}

int main(int argc, char **argv)
{
    struct gs_config c;
    memset(&c, 0, sizeof c);
    c.valid = 1;
    c.mem_limited = 1;
    c.mem_limit[0] = 64ull << 20;
    c.sm_limit = 30;
    snprintf(c.region_path, sizeof c.region_path, "%s", argc > 1 ? argv[1] : "/tmp/r");
    if (gs_region_open(&c) != 0) return 1;
    if (gs_account_reserve(0, 3ull << 20) != GS_OK) return 2;
    gs_account_commit(0, 3ull << 20);
    if (gs_account_reserve(1, 6ull << 20) != GS_OK) return 3;
    gs_account_commit(1, 5ull << 20);
    printf("ready\n");
    fflush(stdout);
    while (getchar() != EOF) {
    }
    gs_region_release_self();
    return 0;
}

/* Logging: level read once from LIBCUDA_LOG_LEVEL (0 error .. 4 debug, default 1 warn), one
 * write(2) per line so lines from many processes do not interleave. Never allocates. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "log.h"

static int gs_level = -1;

static int gs_log_level_from_env(void)
{
    const char *v = getenv("LIBCUDA_LOG_LEVEL");
    if (v == NULL || v[0] < '0' || v[0] > '4' || v[1] != '\0') return GS_LOG_WARN;
    return v[0] - '0';
}

int gs_log_enabled(int level)
{
    int cur = __atomic_load_n(&gs_level, __ATOMIC_RELAXED);
    if (cur < 0) {
        cur = gs_log_level_from_env();
        __atomic_store_n(&gs_level, cur, __ATOMIC_RELAXED);
    }
    return level <= cur;
}

void gs_log_set_level(int level)
{
    __atomic_store_n(&gs_level, level, __ATOMIC_RELAXED);
}

void gs_log_write(int level, const char *file, int line, const char *fmt, ...)
{
    static const char letters[] = "EWIND";
    char buf[1024];
    int n = snprintf(buf, sizeof buf, "gpuslice[%d:%ld] %c %s:%d ", (int)getpid(),
                     (long)syscall(SYS_gettid), letters[level < 0 || level > 4 ? 0 : level], file, line);
    if (n < 0) return;
    if ((size_t)n < sizeof buf) {
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
        va_end(ap);
        if (m > 0) n += m;
    }
    if ((size_t)n >= sizeof buf - 1) n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    ssize_t w = write(2, buf, (size_t)n);
    (void)w;
}

/* One log line shape (STYLE.md): `gpuslice[pid:tid] W mem/alloc.c:88 cuMemAlloc_v2: ...` on stderr.
 * The level comes from LIBCUDA_LOG_LEVEL, read once. GS_LOG_ONCE logs a call site at most once
 * (internal faults: log once, then pass calls through). Never call from a hot path's success case. */
#ifndef GS_LOG_H
#define GS_LOG_H

enum gs_log_level { GS_LOG_ERROR = 0, GS_LOG_WARN = 1, GS_LOG_INFO = 2, GS_LOG_NOTICE = 3, GS_LOG_DEBUG = 4 };

void gs_log_write(int level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int gs_log_enabled(int level);
void gs_log_set_level(int level);

#define GS_LOG(level, ...)                                                  \
    do {                                                                    \
        if (gs_log_enabled(level)) gs_log_write(level, GS_FILE, __LINE__, __VA_ARGS__); \
    } while (0)
#define GS_ERROR(...) GS_LOG(GS_LOG_ERROR, __VA_ARGS__)
#define GS_WARN(...) GS_LOG(GS_LOG_WARN, __VA_ARGS__)
#define GS_INFO(...) GS_LOG(GS_LOG_INFO, __VA_ARGS__)
#define GS_DEBUG(...) GS_LOG(GS_LOG_DEBUG, __VA_ARGS__)
#define GS_LOG_ONCE(level, ...)                                             \
    do {                                                                    \
        static int gs_once_;                                                \
        if (!__atomic_exchange_n(&gs_once_, 1, __ATOMIC_RELAXED)) GS_LOG(level, __VA_ARGS__); \
    } while (0)

/* File path relative to native/src (set by the Makefile with -DGS_FILE=...). */
#ifndef GS_FILE
#define GS_FILE __FILE__
#endif

#endif

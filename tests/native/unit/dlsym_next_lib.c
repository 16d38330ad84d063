/* Two copies of this file are built as libnexta.so (GS_WHICH=1) and libnextb.so (GS_WHICH=2).
 * libnexta's gs_next_value() wraps the next definition via dlsym(RTLD_NEXT, ...), the classic
 * interposer pattern: RTLD_NEXT must be resolved relative to libnexta (the caller), so it must
 * find libnextb's, never libnexta's own (which a dlsym that resolves relative to itself would). */
#define _GNU_SOURCE
#include <dlfcn.h>

__attribute__((visibility("default"))) int gs_next_value(void)
{
#if GS_WHICH == 1
    int (*next)(void) = (int (*)(void))dlsym(RTLD_NEXT, "gs_next_value");
    if (next == (int (*)(void))gs_next_value) return -1; /* resolved relative to the wrong object */
    return next ? 100 + next() : -2;
#else
    return GS_WHICH;
#endif
}

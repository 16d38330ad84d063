/* Built three times (-DGS_WHICH='"a"', "b", "c") into libgs_next_{a,b,c}.so, linked in that order
 * by rtld_next_main: each defines gs_which(); b (-DGS_ASK_NEXT) also asks dlsym(RTLD_NEXT, "gs_which"), which must
 * mean "the next object after b" (c), whatever library is preloaded. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

const char *gs_which(void) { return GS_WHICH; }

#ifdef GS_ASK_NEXT
const char *gs_next_which_from(void) {
    const char *(*f)(void);
    *(void **)&f = dlsym(RTLD_NEXT, "gs_which");
    return f ? f() : "none";
}
#endif

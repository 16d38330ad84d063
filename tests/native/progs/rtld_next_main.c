/* rtld_next_main: prints what dlsym(RTLD_NEXT, ...) resolves to from the main program and from a
 * library in the middle of the search order, plus dlsym(RTLD_DEFAULT) and a handle lookup. The
 * output must be identical with and without libgpuslice preloaded (its dlsym hook must keep
 * RTLD_NEXT relative to the caller). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

const char *gs_next_which_from(void); /* libgs_next_b.so */

int main(void) {
    const char *(*f)(void);
    *(void **)&f = dlsym(RTLD_NEXT, "gs_which");
    printf("main_next=%s\n", f ? f() : "none");
    printf("b_next=%s\n", gs_next_which_from());
    *(void **)&f = dlsym(RTLD_DEFAULT, "gs_which");
    printf("default=%s\n", f ? f() : "none");
    void *h = dlopen("libgs_next_c.so", RTLD_NOW | RTLD_NOLOAD);
    *(void **)&f = h ? dlsym(h, "gs_which") : NULL;
    printf("handle_c=%s\n", f ? f() : "none");
    void *p = dlsym(RTLD_NEXT, "puts");
    Dl_info di;
    printf("next_puts_in_libc=%d\n", p != NULL && dladdr(p, &di) && strstr(di.dli_fname, "libc") != NULL);
    printf("missing=%s\n", dlsym(RTLD_NEXT, "gs_no_such_symbol") == NULL ? "null" : "found");
    return 0;
}

/* The interposed dlsym keeps glibc's meaning for everything it does not override:
 * RTLD_NEXT relative to the caller (libnexta -> libnextb), RTLD_DEFAULT, explicit handles,
 * unknown names (NULL + dlerror), and hooked names on the libcuda handle -> our export.
 * Run with LD_PRELOAD=libgpuslice.so by test_native_unit.py; exits non-zero on failure. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int gs_next_value(void);

int main(int argc, char **argv)
{
    int failures = 0;
    int v = gs_next_value();
    if (v != 102) {
        printf("FAIL: libnexta's dlsym(RTLD_NEXT) should find libnextb (102), got %d\n", v);
        failures++;
    }
    void *gp = dlsym(RTLD_NEXT, "getpid");
    if (gp == NULL || ((pid_t(*)(void))gp)() != getpid()) {
        printf("FAIL: dlsym(RTLD_NEXT, getpid) from the executable should find libc's getpid\n");
        failures++;
    }
    if (dlsym(RTLD_DEFAULT, "gs_no_such_symbol_xyz") != NULL || dlerror() == NULL) {
        printf("FAIL: an unknown name gives NULL and a dlerror message\n");
        failures++;
    }
    if (argc > 1) { /* argv[1]: path of a libcuda.so.1 to check the hooked-name override */
        void *h = dlopen(argv[1], RTLD_NOW);
        void *viah = h ? dlsym(h, "cuMemAlloc_v2") : NULL;
        void *preloaded = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
        Dl_info a, b;
        if (!viah || !dladdr(viah, &a) || !dladdr(preloaded, &b) || strstr(a.dli_fname, "libgpuslice") == NULL) {
            printf("FAIL: dlsym(libcuda handle, cuMemAlloc_v2) should return libgpuslice's export\n");
            failures++;
        }
        void *other = h ? dlsym(h, "cuDeviceGetName") : NULL;
        if (!other || !dladdr(other, &a) || strstr(a.dli_fname, "libgpuslice") != NULL) {
            printf("FAIL: a name we do not hook comes from the driver itself\n");
            failures++;
        }
    }
    printf("test_dlsym_next: %d failure(s)\n", failures);
    return failures != 0;
}

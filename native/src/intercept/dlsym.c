/* Interposed dlsym: a dlopen'ed libcuda/libnvidia-ml handle bypasses LD_PRELOAD, so lookups of
 * hooked names ON THOSE HANDLES return our handler. Everything else is glibc's dlsym, reached by
 * a tail jump from an assembly trampoline so the return address glibc sees (and RTLD_NEXT's
 * meaning) stays the original caller's. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

#include "intercept.h"
#include "log.h"
#include "real.h"

typedef void *(*gs_dlsym_fn)(void *, const char *);

static void *gs_dlsym_missing(void *handle, const char *name)
{
    (void)handle;
    (void)name;
    return NULL;
}

/* Read by the trampoline: glibc's dlsym (hidden, set once). */
__attribute__((used)) gs_dlsym_fn gs_dlsym_next;

static gs_dlsym_fn gs_dlsym_resolve(void)
{
    gs_dlsym_fn f = __atomic_load_n(&gs_dlsym_next, __ATOMIC_ACQUIRE);
    if (f != NULL) return f;
    f = (gs_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (f == NULL) f = (gs_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    if (f == NULL) {
        GS_ERROR("dlsym: cannot find glibc's dlsym (GLIBC_2.34 or GLIBC_2.2.5); every dlsym returns NULL");
        f = gs_dlsym_missing;
    }
    __atomic_store_n(&gs_dlsym_next, f, __ATOMIC_RELEASE);
    return f;
}

void *gs_real_dlsym(void *handle, const char *name)
{
    return gs_dlsym_resolve()(handle, name);
}

/* Called by the trampoline: our handler for (handle, name), or NULL to forward to glibc. */
__attribute__((used)) void *gs_dlsym_override(void *handle, const char *name)
{
    gs_dlsym_resolve();
    if (handle == RTLD_NEXT || handle == RTLD_DEFAULT || name == NULL || gs_intercept_busy()) return NULL;
    const struct gs_hook *h = gs_hook_by_name(name);
    if (h == NULL) return NULL;
    gs_intercept_enter();
    void *out = NULL;
    if (gs_hook_kind_active(h->kind)) {
        int loaded = h->kind == GS_HOOK_NVML ? gs_real_nvml_load() : gs_real_cuda_load();
        void *p = gs_dlsym_next(handle, name);
        if (loaded == 0 && p != NULL && p == *h->real) out = h->handler;
    }
    if (out != NULL) GS_DEBUG("dlsym(%p, %s): gpuslice handler", handle, name);
    gs_intercept_leave();
    return out;
}

/* dlsym(handle, name): save the arguments, ask gs_dlsym_override, return its answer if any,
 * else restore and tail-jump to glibc's dlsym with the caller's return address on the stack. */
__asm__(".pushsection .text\n"
        "\t.globl dlsym\n"
        "\t.type dlsym, @function\n"
        "\t.p2align 4\n"
        "dlsym:\n"
        "\t.cfi_startproc\n"
        "\tpushq %rdi\n"
        "\t.cfi_adjust_cfa_offset 8\n"
        "\tpushq %rsi\n"
        "\t.cfi_adjust_cfa_offset 8\n"
        "\tsubq $8, %rsp\n"
        "\t.cfi_adjust_cfa_offset 8\n"
        "\tcall gs_dlsym_override\n"
        "\taddq $8, %rsp\n"
        "\t.cfi_adjust_cfa_offset -8\n"
        "\tpopq %rsi\n"
        "\t.cfi_adjust_cfa_offset -8\n"
        "\tpopq %rdi\n"
        "\t.cfi_adjust_cfa_offset -8\n"
        "\ttestq %rax, %rax\n"
        "\tjz 1f\n"
        "\tret\n"
        "1:\n"
        "\tjmp *gs_dlsym_next(%rip)\n"
        "\t.cfi_endproc\n"
        "\t.size dlsym, .-dlsym\n"
        "\t.popsection\n");

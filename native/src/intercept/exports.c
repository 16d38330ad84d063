/* hooks.def expanded twice: (1) one exported trampoline per hooked ABI symbol (`jmp handler`,
 * so the handler keeps the exact driver prototype and stays hidden), (2) the table used by
 * cuGetProcAddress and dlsym. The version script (build/exports.map) comes from the same list. */
#include <stddef.h>
#include <string.h>

#include "config.h"
#include "hooks.h"
#include "init.h"
#include "intercept.h"
#include "region.h"

/* (name is only stringified or pasted: cuda.h maps e.g. cuGetProcAddress to cuGetProcAddress_v2).
 * gs_export_<name> is a hidden alias of the exported entry, so cuGetProcAddress and dlsym hand
 * out the same address the dynamic linker gives the application for <name>. */
#define HOOK_EACH(name, handler, pfn)                                       \
    __asm__(".pushsection .text\n\t.globl " #name "\n\t.type " #name ", @function\n"     \
            "\t.globl gs_export_" #name "\n\t.hidden gs_export_" #name "\n\t.p2align 4\n"  \
            #name ":\ngs_export_" #name ":\n\tjmp " #handler "\n\t.size " #name ", .-" #name \
            "\n\t.popsection");                                              \
    extern char gs_export_##name[];
#include "hooks_each.h"

const struct gs_hook gs_hooks[] = {
#define HOOK(name, handler, pfn) {#name, (void *)gs_export_##name, (void **)&gs_real_##name, GS_HOOK_MEM},
#define HOOK_ALWAYS(name, handler, pfn) {#name, (void *)gs_export_##name, (void **)&gs_real_##name, GS_HOOK_ALWAYS},
#define HOOK_COMPUTE(name, handler, pfn) {#name, (void *)gs_export_##name, (void **)&gs_real_##name, GS_HOOK_COMPUTE},
#define HOOK_SYNC(name, handler, pfn) {#name, (void *)gs_export_##name, (void **)&gs_real_##name, GS_HOOK_SYNC},
#define HOOK_NVML(name, handler, pfn) {#name, (void *)gs_export_##name, (void **)&gs_real_##name, GS_HOOK_NVML},
#include "../hooks.def"
#undef HOOK
#undef HOOK_ALWAYS
#undef HOOK_COMPUTE
#undef HOOK_SYNC
#undef HOOK_NVML
};
const int gs_hook_count = (int)(sizeof gs_hooks / sizeof gs_hooks[0]);

int gs_hook_kind_active(int kind)
{
    const struct gs_config *c = gs_config_get();
    switch (kind) {
    case GS_HOOK_ALWAYS: return 1;
    case GS_HOOK_COMPUTE: { /* the region's limit wins over this process's env */
        gs_init(); /* opens the region if a limit is set (idempotent) */
        const struct gs_region_header *h = gs_region();
        return (h ? h->sm_limit : c->sm_limit) > 0;
    }
    case GS_HOOK_SYNC: return gs_hook_kind_active(GS_HOOK_MEM) || gs_hook_kind_active(GS_HOOK_COMPUTE);
    default: return c->mem_limited || !c->valid;
    }
}

const struct gs_hook *gs_hook_by_name(const char *name)
{
    if (name == NULL || (name[0] != 'c' && name[0] != 'n')) return NULL;
    for (int i = 0; i < gs_hook_count; i++)
        if (strcmp(gs_hooks[i].name, name) == 0) return &gs_hooks[i];
    return NULL;
}

void *gs_hook_substitute_cuda(void *fn)
{
    if (fn == NULL || gs_real_cuda_load() != 0) return fn;
    for (int i = 0; i < gs_hook_count; i++) {
        const struct gs_hook *h = &gs_hooks[i];
        if (h->kind != GS_HOOK_NVML && *h->real == fn)
            return gs_hook_kind_active(h->kind) ? h->handler : fn;
    }
    return fn;
}

/* initial-exec: the library is preloaded, and this keeps ld-linux out of NEEDED (no __tls_get_addr) */
static __thread int gs_guard __attribute__((tls_model("initial-exec")));

void gs_intercept_enter(void) { gs_guard++; }
void gs_intercept_leave(void) { gs_guard--; }
int gs_intercept_busy(void) { return gs_guard > 0; }

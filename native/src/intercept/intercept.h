/* The hook table built from hooks.def and the guards around interception (internal). */
#ifndef GS_INTERCEPT_H
#define GS_INTERCEPT_H

/* SYNC: active when a memory or a compute limit is (pools release memory there; the meter
 * measures the launches a sync waits for, compute/meter.h) */
enum gs_hook_kind { GS_HOOK_MEM = 0, GS_HOOK_ALWAYS = 1, GS_HOOK_COMPUTE = 2, GS_HOOK_NVML = 3, GS_HOOK_SYNC = 4 };

struct gs_hook {
    const char *name;  /* exported ABI symbol */
    void *handler;     /* our exported entry (a jmp to the gs_ handler) */
    void **real;       /* &gs_real_<name> */
    int kind;          /* enum gs_hook_kind */
};

extern const struct gs_hook gs_hooks[];
extern const int gs_hook_count;

/* Is this kind of hook substituted in this process (limits from the config)? */
int gs_hook_kind_active(int kind);
/* The hook with this exported name, or NULL. */
const struct gs_hook *gs_hook_by_name(const char *name);
/* If fn is the real address of a hooked CUDA ABI variant whose kind is active, its handler;
 * else fn unchanged. */
void *gs_hook_substitute_cuda(void *fn);

/* Per-thread guard: while set (library init, dlopen of the driver), dlsym is never overridden. */
void gs_intercept_enter(void);
void gs_intercept_leave(void);
int gs_intercept_busy(void);

#endif

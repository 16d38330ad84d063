/* Expands hooks.def with one macro for every kind: define HOOK_EACH(name, handler, pfn), then
 * include this file; HOOK_EACH is undefined again at the end. For expansions that treat the
 * kinds differently, define HOOK, HOOK_ALWAYS, HOOK_COMPUTE, HOOK_SYNC and HOOK_NVML yourself.
 * No include guard: meant to be included once per expansion. */
#define HOOK HOOK_EACH
#define HOOK_ALWAYS HOOK_EACH
#define HOOK_COMPUTE HOOK_EACH
#define HOOK_SYNC HOOK_EACH
#define HOOK_NVML HOOK_EACH
#include "../hooks.def"
#undef HOOK
#undef HOOK_ALWAYS
#undef HOOK_COMPUTE
#undef HOOK_SYNC
#undef HOOK_NVML
#undef HOOK_EACH

/* Declarations of every handler listed in hooks.def, typed from its PFN type: a handler whose
 * definition does not match the driver's prototype fails to compile. Include it in every file
 * that defines a handler. */
#ifndef GS_HOOKS_H
#define GS_HOOKS_H

#include "real.h"

#define HOOK(name, handler, pfn) extern __typeof__(*(pfn)0) handler;
#define HOOK_ALWAYS HOOK
#define HOOK_COMPUTE HOOK
#define HOOK_NVML HOOK
#include "../hooks.def"
#undef HOOK
#undef HOOK_ALWAYS
#undef HOOK_COMPUTE
#undef HOOK_NVML

#endif

/* Declarations of every handler listed in hooks.def, typed from its PFN type: a handler whose
 * definition does not match the driver's prototype fails to compile. Include it in every file
 * that defines a handler. */
#ifndef GS_HOOKS_H
#define GS_HOOKS_H

#include "real.h"

#define HOOK_EACH(name, handler, pfn) extern __typeof__(*(pfn)0) handler;
#include "hooks_each.h"

#endif

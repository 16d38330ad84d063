/* Per-process compute state shared by compute.c (setup) and launch.c (hot path).
 * One gs_cmeter per CUDA context seen launching, in a list without a bound (~8 KB each, never
 * freed: a destroyed context's meter just stops being used), so no context ever launches
 * without a limit. Its mutex guards meter + timing + board client; nobody sleeps holding it. */
#ifndef GS_COMPUTE_STATE_H
#define GS_COMPUTE_STATE_H

#include <cuda.h>
#include <pthread.h>
#include <stdint.h>

#include "board.h"
#include "budget.h"
#include "meter.h"
#include "timing.h"

#define GS_THROTTLE_MIN_SLEEP_NS 200000LL    /* sleep at least this long when held back */
#define GS_THROTTLE_MAX_SLEEP_NS 10000000LL  /* re-check (poll, heartbeat) at least this often */
/* No launch is held back longer than the longest debt the budget can hold: past it something is
 * inconsistent (a clock, a tampered region) and the launch goes (fail open, logged once). */
#define GS_THROTTLE_MAX_WAIT_NS GS_BUDGET_HORIZON_NS

struct gs_cmeter {
    struct gs_cmeter *next;   /* immutable once published */
    CUcontext ctx;
    int device;
    pthread_mutex_t mu;
    struct gs_meter meter;
    struct gs_timing timing;
    struct gs_board_client board;
};

/* 1 when a compute limit is enforced in this process (one relaxed load). */
extern int gs_compute_enabled;

/* The meter of the current context (created on first use), or NULL: pass the launch through. */
struct gs_cmeter *gs_compute_current(void);
int64_t gs_compute_now_ns(void);

#endif

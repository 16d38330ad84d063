/* The node-wide demand board of one GPU: lets work-conserving containers see other tenants.
 * Owns: the board file layout (64 slots of 64 bytes after a 64-byte header, one slot per
 * process that has a compute limit) and the claim / heartbeat / read protocol on it.
 * A slot's heartbeat is refreshed (at most every GS_BOARD_BEAT_NS) while its process
 * launches or waits to launch; "another tenant has work" = a slot of another tenant_id
 * with a heartbeat younger than GS_BOARD_FRESH_NS; a slot of the same tenant_id but another
 * owner is a "peer" (another process of this container). A slot also publishes its process's
 * charged GPU ns (compute/clean.h bounds its time-slice correction by what the others used) and
 * its in-flight estimate (peers admit against their sum). Stale slots (GS_BOARD_STALE_NS) are
 * taken over by CAS, so dead processes (any pid namespace) vanish without cleanup; so are slots
 * whose heartbeat lies in the future (another boot's or clock's), which never count as demand.
 * Does not: open files (board_file.c) or decide borrowing (budget.c). Pure given `now`.
 * Tests: tests/native/compute/test_controller.py (work-conserving cases, one container's
 * processes), test_forged_peers.py (a forged peer slot). */
#ifndef GS_COMPUTE_BOARD_H
#define GS_COMPUTE_BOARD_H

#include <stdint.h>

#include "meter.h"

#define GS_BOARD_MAGIC "GSBOARD1"
#define GS_BOARD_SLOTS 64
#define GS_BOARD_BEAT_NS 5000000LL      /* heartbeat refresh, 5 ms */
#define GS_BOARD_READ_NS 2000000LL      /* re-read others at most every 2 ms */
#define GS_BOARD_FRESH_NS 60000000LL    /* demand seen within 60 ms counts as "has work" */
#define GS_BOARD_STALE_NS 2000000000LL  /* slot may be taken over after 2 s of silence */

struct gs_board_slot {
    _Atomic uint64_t owner;        /* random token of the owning process, 0 = free */
    _Atomic uint64_t tenant_id;    /* container (region) the process belongs to */
    _Atomic uint64_t heartbeat_ns; /* CLOCK_MONOTONIC of the last demand */
    _Atomic uint32_t priority;     /* 0 high, 1 low */
    _Atomic uint32_t limit_pct;
    _Atomic uint32_t mode;         /* 0 hard, 1 work-conserving */
    _Atomic uint32_t pid;          /* informational (pid in its own namespace) */
    _Atomic uint64_t busy_ns;      /* GPU ns the process charged so far (refreshed with the beat;
                                    * others bound their time-slice correction by it) */
    _Atomic int64_t inflight_ns;   /* GPU ns it launched and has not debited yet (every tick:
                                    * processes of one container admit against their sum) */
    uint8_t reserved[8];
};

struct gs_board {
    char magic[8];
    uint32_t version, slots;
    uint8_t reserved[48];
    struct gs_board_slot slot[GS_BOARD_SLOTS];
};

_Static_assert(sizeof(struct gs_board_slot) == 64, "board layout");
_Static_assert(sizeof(struct gs_board) == 64 + 64 * GS_BOARD_SLOTS, "board layout");

/* One process's view of the board. */
struct gs_board_client {
    struct gs_board *board;        /* NULL: no board (work-conserving acts as hard) */
    uint64_t token, tenant_id;
    int priority, pct, mode, pid;
    int slot;                      /* -1 = none claimed yet */
    int64_t last_beat, last_read;
    struct gs_meter_others others;
};

void gs_board_client_init(struct gs_board_client *c, struct gs_board *board, uint64_t token,
                          uint64_t tenant_id, int priority, int pct, int mode, int pid);
/* Call at every launch/wait (demand = 1) with this process's charged GPU ns so far.
 * Returns the cached view of others' demand. */
struct gs_meter_others gs_board_tick(struct gs_board_client *c, int64_t now, uint64_t busy_ns);
#define GS_BOARD_HAS_INFLIGHT 1
/* Publish this process's in-flight estimate (after each admit/launch; one relaxed store). */
void gs_board_set_inflight(struct gs_board_client *c, int64_t inflight_ns);
/* In a fork child: another process, with its own token and pid; it claims a slot of its own
 * (the parent keeps the one it holds). */
void gs_board_client_forked(struct gs_board_client *c, uint64_t token, int pid);
/* Process exit: free the slot. */
void gs_board_leave(struct gs_board_client *c);
/* Initialise a zero-filled board (idempotent); returns 0, or -1 if it holds something else. */
int gs_board_format(struct gs_board *b);

#endif

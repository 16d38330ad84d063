/* The gang file: gang holds across containers (issue 21: ranks in different pods of one job).
 * Why: gang holds (gang.h) couple the processes of one container through its region; the ranks
 * of a job split over pods are different containers, so their holds fell independently and a
 * collective between them stalled, as within one container before gang holds.
 * What: with GPUSLICE_GANG_DIR (the node agent sets it, with one host directory, for the GPU
 * containers of the pods on its node that carry the same gpuslice.io/gang annotation), a process
 * keeps its gang words in a slot of $GPUSLICE_GANG_DIR/gang instead of its region's slot, and
 * scans that file's slots: every process handed the directory stops and goes with the others,
 * exactly like the processes of one container (their budgets stay their own).
 * Owns: the file (created complete by the first process, mode 0666; region/file.c refuses
 * symlinks, FIFOs, other sizes and modes; its owner is not checked: the containers run as any
 * uid; a truncation turns it into zero pages, region/guard.c), claiming a slot (its open file
 * description lock first, then CAS on a random token), its release at exit, and the slot
 * reader gang.c scans.
 * Liveness: another container's pids cannot be checked (a region reclaims a dead process's slot
 * by its pid), so each owner holds an F_OFD_SETLK write lock on its slot's bytes while it lives
 * (slot.locked says so); the kernel drops it with the owner's last descriptor (exit, SIGKILL,
 * crash; a fork child closes its copy). A slot whose owner took the lock and no longer holds it
 * is free at once, and the reader hides it from the gang scan (asked again at most every
 * GS_CREW_LIVE_NS). A slot of an earlier library (no lock) is alive by its stamps: taken over
 * after GS_CREW_STALE_NS without a sign of life; a process killed with work queued then looks
 * like one waiting in a sync until GS_BUDGET_HORIZON_NS lapses (gang.c).
 * Does not: decide holds (gang.c) or publish the words (meter.c, gang.c).
 * Trust: anyone handed the directory can write the file and lock its bytes. A forged slot, or
 * a lock held on a dead or free slot, can make the gang wait (bounded like any gang hold: a
 * release beyond the budget's horizon is ignored) or keep slots from new members (they then hold
 * with their own container only), and never lowers anybody's charge: every kernel is still
 * charged to its own container's budget. A live owner's lock cannot be taken from it.
 * Tests: tests/native/compute/test_gang_fake.py (two containers, one gang directory; a killed
 * member). */
#ifndef GS_COMPUTE_CREW_H
#define GS_COMPUTE_CREW_H

#include <stdint.h>

#include "gpuslice/compute_shared.h"

#define GS_CREW_STALE_NS (60LL * 1000 * 1000 * 1000)

/* Map `dir`/gang and claim a slot with `token` (random, not 0): 0, or -1 (logged once; the process
 * then holds with its own container only, as without the directory). */
int gs_crew_open(const char *dir, uint64_t token, int64_t now);
/* This process's slot's words (NULL: no gang file). */
struct gs_compute_proc *gs_crew_self(void);
/* gang.h's slot reader over the file: how many slots, slot i's words (NULL: free). */
int gs_crew_count(void *ctx);
struct gs_compute_proc *gs_crew_at(void *ctx, int i);
/* Free this process's slot (exit). */
void gs_crew_leave(void);
/* In a fork child: the slot is the parent's (the child's gang is off, compute.c). */
void gs_crew_forked(void);

#endif

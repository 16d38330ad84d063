/* Access to this process's view of the shared region (layout: <gpuslice/region.h>).
 * The region exists only when some limit is set; every accessor returns NULL / 0 otherwise.
 * Opened once by gs_init (src/init.c) after the config; this process claims its slot lazily on
 * first use. Slots of dead processes (pid gone or start time changed) are reclaimed by any
 * process, at most every 250 ms. Tests: tests/native/unit/test_region.c. */
#ifndef GS_REGION_ACCESS_H
#define GS_REGION_ACCESS_H

#include <stdint.h>
#include <gpuslice/region.h>

#include "config.h"

/* Open (create + initialise under flock if needed) the region for cfg. 0 ok, -1 error (logged). */
int gs_region_open(const struct gs_config *cfg);
/* Fallback when the shared file cannot be used: the limits still hold, for this process alone. */
int gs_region_open_private(const struct gs_config *cfg);
/* The mapped region, or NULL when none is open. */
struct gs_region_header *gs_region(void);
/* Number of device blocks in use (header device_count), 0 without a region. */
int gs_region_device_count(void);
struct gs_region_device *gs_region_device(int dev);
/* Device dev's compute block (NULL if no region or dev out of range). */
struct gs_compute_device *gs_region_compute_device(int dev);
/* This process's slot (claimed on first call; NULL if no region or all slots taken). */
struct gs_region_slot *gs_region_self(void);
/* This process's compute block inside its slot. */
struct gs_compute_proc *gs_region_compute_proc(void);
/* Slots to scan: every slot index < this may be in use. */
int gs_region_slot_count(void);
struct gs_region_slot *gs_region_slot_at(int index);
struct gs_compute_proc *gs_region_compute_proc_at(int index);
/* 1 if slot index is LIVE and its owner still runs (pid exists, same start time). */
int gs_region_slot_alive(int index);
/* Reclaim dead slots now if the last sweep is older than 250 ms (any process may call it). */
void gs_region_reclaim(int force);
/* Release this process's slot (at exit). */
void gs_region_release_self(void);

#endif

/* Access to this process's view of the shared region (layout: <gpuslice/region.h>).
 * The region exists only when some limit is set; every accessor returns NULL / 0 otherwise.
 * Opened once by gs_init (src/init.c) after the config; this process claims its slot lazily on
 * first use. Slots of dead processes (pid gone or start time changed) are reclaimed by any
 * process, at most every 250 ms. Devices are region entries keyed by GPU UUID (region/devices.c);
 * callers pass CUDA ordinals to gs_region_entry and use the entry everywhere else.
 * Tests: tests/native/unit/test_region.c, tests/native/test_region_*.py. */
#ifndef GS_REGION_ACCESS_H
#define GS_REGION_ACCESS_H

#include <stddef.h>
#include <stdint.h>
#include <gpuslice/region.h>

#include "config.h"

/* Per-process tables indexed by CUDA ordinal hold this many; higher ordinals are still capped
 * (looked up each time) but their contexts' footprints are not charged. */
#define GS_MAX_ORDINALS 64
/* Entry "no GPU can be capped here": every reservation on it is refused (fail closed). */
#define GS_DEV_CLOSED GS_REGION_MAX_DEVICES

/* Open (or create, complete, with mode 0666) the region for cfg, after checking that the file
 * is a regular file (no symlink, FIFO or device) owned by root, this user or the directory's
 * owner, of mode 0666 and the exact size, used in this pid namespace (a region with pid_ns 0 is
 * claimed; one whose namespace's processes all closed it is taken over). 0 ok, -1 refused
 * (one log line says why and how to fix it; the caller fails closed). */
int gs_region_open(const struct gs_config *cfg);
/* CUDA_TASK_PRIORITY of the region (0 high, 1 low) when it records one, else fallback (the
 * process's env): like its limits, the region's priority wins. */
int gs_region_priority(int fallback);
/* The mapped region, or NULL when none is open. */
struct gs_region_header *gs_region(void);
/* 1 once the region file was truncated under this process (region/guard.c): fail closed. */
int gs_region_broken(void);
/* Entry of a CUDA ordinal of this process (claimed for its GPU UUID on first use, cached):
 * 0..15, -1 without a region (pass through), GS_DEV_CLOSED if the GPU cannot be capped (not in
 * GPUSLICE_DEVICE_UUIDS, table full, UUID unreadable). */
int gs_region_entry(int ordinal);
/* Entry holding a GPU UUID ("GPU-..."), -1 if none. */
int gs_region_entry_of_uuid(const char *uuid);
/* Entry of a GPU known by its UUID (NVML) that this process sees as ordinal, added if missing. */
int gs_region_entry_for(const char *uuid, int ordinal);
/* Implemented by the CUDA side (mem/nvml_util.c; unit tests provide their own): the UUID text of
 * a CUDA ordinal of this process. 0 ok, -1 unknown. */
int gs_device_uuid(int ordinal, char *out, size_t len);
/* Device entry e (0..15), or NULL. */
struct gs_region_device *gs_region_device(int e);
/* Device entry e's compute block (NULL if no region or e out of range). */
struct gs_compute_device *gs_region_compute_device(int e);
/* This process's slot (claimed on first call; NULL if no region or all slots taken). */
struct gs_region_slot *gs_region_self(void);
/* 1 when this process has no slot because every slot is taken (retried at most every 250 ms). */
int gs_region_no_slot(void);
/* This process's compute block inside its slot. */
struct gs_compute_proc *gs_region_compute_proc(void);
/* Slots to scan: every slot index < this may be in use. */
int gs_region_slot_count(void);
struct gs_region_slot *gs_region_slot_at(int index);
struct gs_compute_proc *gs_region_compute_proc_at(int index);
/* 1 if pid is gone, a zombie, or (start_time != 0) another process under a reused pid. */
int gs_region_pid_dead(int pid, uint64_t start_time);
/* 1 if slot index is LIVE and its owner still runs (pid exists, same start time). */
int gs_region_slot_alive(int index);
/* Reclaim dead slots now if the last sweep is older than 250 ms (any process may call it). */
void gs_region_reclaim(int force);
/* Release this process's slot (at exit). */
void gs_region_release_self(void);

/* region/file.c: map a shared file of exactly `size` bytes at path, creating it complete (written
 * by init(map, arg) under a temporary name, then linked into place) if missing. Refuses symlinks,
 * non-regular files, other sizes, modes other than 0666 and, when owner_checked, owners other
 * than root, this user or the directory's owner. Returns the MAP_SHARED mapping, or NULL with the
 * reason in why. *created: 1 if this call created it. */
void *gs_shared_file_map(const char *path, size_t size, int owner_checked, void (*init)(void *, const void *),
                         const void *arg, char *why, size_t len, int *created);
/* The same, also handing back the open descriptor (O_CLOEXEC) in *fd_out on success. */
void *gs_shared_file_map_fd(const char *path, size_t size, int owner_checked, void (*init)(void *, const void *),
                            const void *arg, char *why, size_t len, int *created, int *fd_out);
/* region/guard.c: a SIGBUS inside [map, map + size) (the file was truncated) swaps the mapping
 * for private zero pages and sets *broken to 1. */
void gs_guard_add(void *map, size_t size, int *broken);

#endif

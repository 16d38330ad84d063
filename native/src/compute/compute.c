/* Compute share setup: limit/mode/priority from the region (its values win) or the config,
 * one meter per CUDA context (created at its first launch; as many as the process has
 * contexts), the node board file.
 * Owns: gs_compute_init, the list of meters, the board directory (GPUSLICE_BOARD_DIR, or
 *   GS_AGENT_BOARD with the node agent's region).
 * Does not: launch or measure (launch.c, meter.c, timing.c).
 * Failure: no region / no device block / board file errors -> logged once; launches then pass
 * through unthrottled (no region) or run in hard mode (no board). Never blocks the app. */
#define _GNU_SOURCE
#include "compute.h"

#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "config.h"
#include "crew.h"
#include "log.h"
#include "real.h"
#include "region.h"
#include "state.h"
#include "trace.h"

int gs_compute_enabled;

static struct {
    int pct, work_conserving, priority;
    int phase;                     /* GPUSLICE_COMPUTE_PHASE: gang holds (gang.h) */
    char board_dir[GS_PATH_MAX];
    pthread_mutex_t mu;            /* creation of meters */
    struct gs_cmeter *meters;      /* every context seen launching, newest first; never freed */
    struct gs_board *boards[GS_MAX_DEVICES];
    int board_broken[GS_MAX_DEVICES]; /* set by the truncation guard */
    uint64_t token, boot_id;
    int64_t timens_ns;             /* subtracted from CLOCK_MONOTONIC: the host's clock */
} gs_c = {.mu = PTHREAD_MUTEX_INITIALIZER};

int64_t gs_compute_now_ns(void)
{
    return (int64_t)gs_mono_ns() - gs_c.timens_ns;
}

/* This time namespace's CLOCK_MONOTONIC offset (ns; 0 outside one or where the file is
 * missing): taken out of every stored time, so containers of one host compare their budget and
 * board times on the host's clock whatever namespace they run in. */
static int64_t gs_compute_timens_offset(void)
{
    FILE *f = fopen("/proc/self/timens_offsets", "re");
    char clock[32];
    long long sec, nsec;
    int64_t off = 0;
    while (f && fscanf(f, "%31s %lld %lld", clock, &sec, &nsec) == 3)
        if (strcmp(clock, "monotonic") == 0 || strcmp(clock, "1") == 0) /* name, or clock id */
            off = (int64_t)sec * 1000000000LL + nsec;
    if (f)
        fclose(f);
    return off;
}

/* A hash of this boot's id (never 0; 1 if unreadable): stored times of another boot are void. */
static uint64_t gs_compute_boot_id(void)
{
    char text[64] = "";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
    if (f) {
        if (!fgets(text, sizeof text, f))
            text[0] = '\0';
        fclose(f);
    }
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a */
    for (const char *p = text; *p && *p != '\n'; p++)
        h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
    return h > 1 ? h : 1;
}

/* A budget whose times belong to another boot (a region file that outlived a reboot) starts
 * full; the first process of this boot to attach resets it, later ones see the new id. */
static void gs_compute_adopt_boot(struct gs_compute_device *blk)
{
    uint64_t seen = atomic_load(&blk->boot_id);
    if (seen == gs_c.boot_id || !atomic_compare_exchange_strong(&blk->boot_id, &seen, gs_c.boot_id))
        return;
    atomic_store(&blk->tat_ns, 0);
    atomic_store(&blk->span_seq, 0);
    for (int i = 0; i < GS_COMPUTE_SPAN_LOG; i++)
        atomic_store(&blk->spans[i].seq, 0); /* spans of another boot's clock */
    if (seen != 0)
        GS_INFO("compute: budget state from another boot reset");
}

static uint64_t gs_compute_random(void)
{
    uint64_t v = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (read(fd, &v, sizeof v) != (ssize_t)sizeof v)
            v = 0;
        close(fd);
    }
    if (v == 0)
        v = (uint64_t)gs_compute_now_ns() ^ ((uint64_t)getpid() << 32) ^ 0x9E3779B97F4A7C15ULL;
    return v;
}

int gs_compute_init(void)
{
    const struct gs_config *cfg = gs_config_get();
    struct gs_region_header *h = gs_region();
    /* The region's limit wins, "none" included: the same rule as gs_hook_kind_active, so a
     * launch is limited alike whether its entry point came from the export table or from
     * cuGetProcAddress (region.c logs a process whose env disagrees). */
    int pct = h ? h->sm_limit : cfg->sm_limit;
    int mode = h ? h->compute_mode : (int)cfg->compute_mode;
    if (pct <= 0 || pct >= 100)
        return 0;
    if (!h) {
        GS_ERROR("compute: CUDA_DEVICE_SM_LIMIT=%d: no shared region to keep the budget in; "
                 "kernels run without a compute limit", pct);
        return -1;
    }
    gs_c.pct = pct;
    gs_c.work_conserving = mode == GS_COMPUTE_WORK_CONSERVING;
    gs_c.priority = gs_region_priority(cfg->priority); /* the region's wins, as its limit does */
    gs_c.phase = cfg->compute_phase;
    gs_c.token = gs_compute_random();
    gs_c.boot_id = gs_compute_boot_id();
    gs_c.timens_ns = gs_compute_timens_offset();
    const char *dir = getenv("GPUSLICE_BOARD_DIR");
    if (cfg->agent_region) { /* a private board would let a tenant borrow always */
        if (dir && *dir)
            GS_WARN("compute: GPUSLICE_BOARD_DIR=%s is ignored: the node agent's region is used, and "
                    "with it only the agent's board (" GS_AGENT_BOARD ")", dir);
        struct stat st;
        dir = stat(GS_AGENT_BOARD, &st) == 0 && S_ISDIR(st.st_mode) ? GS_AGENT_BOARD : NULL;
        GS_DEBUG("compute: agent region: board %s", dir ? dir : "(none: " GS_AGENT_BOARD " is not a directory)");
    }
    if (dir && *dir)
        snprintf(gs_c.board_dir, sizeof gs_c.board_dir, "%s", dir);
    else if (gs_c.work_conserving)
        GS_WARN("compute: GPUSLICE_COMPUTE_MODE=work-conserving without a board: other tenants are "
                "invisible, running in hard mode; %s", cfg->agent_region
                ? "the node agent mounts its board at " GS_AGENT_BOARD ": check its Allocate mounts"
                : "mount a shared directory and set GPUSLICE_BOARD_DIR to it");
    const char *gang_dir = getenv("GPUSLICE_GANG_DIR"); /* pods of one job (crew.h) */
    if (gs_c.phase && gang_dir && *gang_dir)
        gs_crew_open(gang_dir, gs_c.token, gs_compute_now_ns());
    const char *trace = getenv("GPUSLICE_COMPUTE_TRACE");
    if (trace && *trace)
        gs_trace_open(trace);
    __atomic_store_n(&gs_compute_enabled, 1, __ATOMIC_RELEASE);
    GS_INFO("compute: limit %d%% of GPU time, %s mode, priority %d, board %s%s", pct,
            gs_c.work_conserving ? "work-conserving" : "hard", gs_c.priority,
            gs_c.board_dir[0] ? gs_c.board_dir : "(none)",
            gs_c.phase ? ", the container's processes hold together (experimental)" : "");
    return 0;
}

static void gs_board_init(void *map, const void *arg)
{
    (void)arg;
    gs_board_format(map);
}

/* Map <board_dir>/<uuid>.board for device `dev` (NULL when not configured or on error). */
static struct gs_board *gs_compute_board(int dev)
{
    if (!gs_c.board_dir[0] || dev < 0 || dev >= GS_MAX_DEVICES)
        return NULL;
    if (gs_c.boards[dev])
        return gs_c.boards[dev];
    PFN_cuDeviceGetUuid_v11040 get_uuid = gs_real_cuDeviceGetUuid_v2;
    CUuuid u;
    if (!get_uuid || get_uuid(&u, (CUdevice)dev) != CUDA_SUCCESS) {
        GS_LOG_ONCE(GS_LOG_WARN, "compute: board: cannot read the UUID of device %d; hard mode", dev);
        return NULL;
    }
    const unsigned char *b = (const unsigned char *)u.bytes;
    char path[GS_PATH_MAX + 64];
    snprintf(path, sizeof path,
             "%s/GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x.board",
             gs_c.board_dir, b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10],
             b[11], b[12], b[13], b[14], b[15]);
    /* the board is node-wide (every tenant's processes share it, whatever their uid): its owner
     * is not checked, but symlinks, FIFOs, other sizes and modes are refused (region/file.c) and a
     * truncation cannot kill us (region/guard.c) */
    char why[320];
    int created;
    struct gs_board *map = gs_shared_file_map(path, sizeof(struct gs_board), 0, gs_board_init, NULL, why,
                                              sizeof why, &created);
    if (map == NULL || gs_board_format(map) != 0) {
        GS_LOG_ONCE(GS_LOG_WARN, "compute: board %s: %s; check %s is a writable shared directory; "
                    "hard mode", path, map ? "not a gpuslice board" : why, gs_c.board_dir);
        if (map != NULL)
            munmap(map, sizeof(struct gs_board));
        return NULL;
    }
    gs_guard_add(map, sizeof(struct gs_board), &gs_c.board_broken[dev]);
    gs_c.boards[dev] = map;
    return map;
}

static int gs_compute_slots(void *ctx)
{
    (void)ctx;
    return gs_region_slot_count();
}

static struct gs_compute_proc *gs_compute_slot(void *ctx, int i)
{
    (void)ctx;
    return gs_region_compute_proc_at(i);
}

static struct gs_cmeter *gs_compute_create(CUcontext ctx)
{
    PFN_cuCtxGetDevice_v2000 get_dev = gs_real_cuCtxGetDevice;
    CUdevice dev;
    if (!get_dev || get_dev(&dev) != CUDA_SUCCESS)
        return NULL;
    struct gs_compute_device *blk = gs_region_compute_device(gs_region_entry((int)dev));
    if (!blk) {
        GS_LOG_ONCE(GS_LOG_WARN, "compute: device %d has no block in the shared region; its kernels "
                    "run without a compute limit", (int)dev);
        return NULL;
    }
    struct gs_cmeter *cm = calloc(1, sizeof *cm);
    if (!cm)
        return NULL;
    cm->ctx = ctx;
    cm->device = (int)dev;
    pthread_mutex_init(&cm->mu, NULL);
    gs_meter_init(&cm->meter, &gs_timing_ops, &cm->timing, blk, gs_region_compute_proc(), gs_c.pct);
    cm->meter.clock = gs_compute_now_ns;
    /* gang holds with the container's other processes (gang.h); a process of several contexts
     * publishes one state for all of them, so it holds on its own, as before issue 21 */
    struct gs_compute_proc *crew = gs_crew_self(); /* pods of one job: their gang file */
    cm->meter.gang = (struct gs_gang){.self = crew ? crew : gs_region_compute_proc(),
                                      .count = crew ? gs_crew_count : gs_compute_slots,
                                      .at = crew ? gs_crew_at : gs_compute_slot,
                                      .on = gs_c.phase && !gs_c.meters};
    for (struct gs_cmeter *o = gs_c.meters; o; o = o->next)
        o->meter.gang.on = 0;
    cm->meter.ordinal = (int)dev;
    if (gs_trace_on())
        cm->meter.on_batch = gs_trace_batch;
    cm->meter.work_conserving = gs_c.work_conserving;
    cm->meter.priority = gs_c.priority;
    gs_compute_adopt_boot(blk);
    atomic_store(&blk->limit_pct, (uint32_t)gs_c.pct);
    uint64_t zero = 0;
    atomic_compare_exchange_strong(&blk->tenant_id, &zero, gs_compute_random());
    gs_board_client_init(&cm->board, gs_compute_board((int)dev), gs_c.token,
                         atomic_load(&blk->tenant_id), gs_c.priority, gs_c.pct,
                         gs_c.work_conserving, (int)getpid());
    return cm;
}

static struct gs_cmeter *gs_compute_find(CUcontext ctx)
{
    for (struct gs_cmeter *cm = __atomic_load_n(&gs_c.meters, __ATOMIC_ACQUIRE); cm; cm = cm->next)
        if (cm->ctx == ctx)
            return cm;
    return NULL;
}

struct gs_cmeter *gs_compute_current(void)
{
    /* the meter this thread used last: one compare on the launch path */
    static __thread struct gs_cmeter *last __attribute__((tls_model("initial-exec")));
    PFN_cuCtxGetCurrent_v4000 get_ctx = gs_real_cuCtxGetCurrent;
    CUcontext ctx = NULL;
    if (!get_ctx || get_ctx(&ctx) != CUDA_SUCCESS || !ctx)
        return NULL;
    if (last && last->ctx == ctx)
        return last;
    struct gs_cmeter *found = gs_compute_find(ctx);
    if (!found) {
        pthread_mutex_lock(&gs_c.mu);
        found = gs_compute_find(ctx);
        if (!found && (found = gs_compute_create(ctx)) != NULL) {
            found->next = gs_c.meters;
            __atomic_store_n(&gs_c.meters, found, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&gs_c.mu);
    }
    last = found;
    return found;
}

/* A fork child has fresh locks (a thread of the parent may have held one at fork() and does not
 * exist in the child) and a board identity of its own. Async-signal-safe calls only. */
static void gs_compute_fork_child(void)
{
    gs_c.mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    if (gs_c.token)
        gs_c.token = gs_compute_random();
    for (struct gs_cmeter *cm = gs_c.meters; cm; cm = cm->next) {
        cm->mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
        gs_board_client_forked(&cm->board, gs_c.token, (int)getpid());
        cm->meter.gang.on = 0; /* its words are the parent's slot */
    }
    gs_crew_forked();
}

__attribute__((constructor)) static void gs_compute_fork_register(void)
{
    pthread_atfork(NULL, NULL, gs_compute_fork_child);
}

__attribute__((destructor)) static void gs_compute_fini(void)
{
    for (struct gs_cmeter *cm = __atomic_load_n(&gs_c.meters, __ATOMIC_ACQUIRE); cm; cm = cm->next)
        gs_board_leave(&cm->board);
    gs_crew_leave();
}

/* The gang file shared by containers. See crew.h. */
#define _GNU_SOURCE /* F_OFD_* */
#include "crew.h"

#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "budget.h"
#include "gang.h"
#include "log.h"
#include "region.h"
#include "state.h"

/* How long a peer's liveness (its slot's lock) is believed before it is asked again: the gang
 * scan reads every slot at every gang check, one fcntl per live slot at most this often. */
#define GS_CREW_LIVE_NS (10LL * 1000 * 1000)

static struct {
    struct gs_gang_file *file;
    struct gs_gang_slot *self;
    uint64_t token;
    int fd;     /* the file's open description: the owner's lock lives and dies with it */
    int broken; /* set by the truncation guard */
    struct {    /* slot i's owner, as its lock last said (threads of two devices scan at once:
                 * relaxed atomics, at worst a check repeated or 10 ms late) */
        _Atomic uint64_t token;
        _Atomic int64_t at;
        _Atomic int dead;
    } seen[GS_GANG_FILE_SLOTS];
} gs_crew = {.fd = -1};

/* An open file description lock on slot i's bytes: F_OFD_SETLK (type F_WRLCK or F_UNLCK: 0 or
 * -1), or F_OFD_GETLK: 1 if another description holds one, 0 if none, -1 if it cannot tell. */
static int gs_crew_lock(int i, int cmd, short type)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET,
                       .l_start = (off_t)offsetof(struct gs_gang_file, slot[i]),
                       .l_len = (off_t)sizeof(struct gs_gang_slot)};
    if (gs_crew.fd < 0 || fcntl(gs_crew.fd, cmd, &fl) != 0)
        return -1;
    return cmd == F_OFD_GETLK ? fl.l_type != F_UNLCK : 0;
}

/* Slot i's owner is gone for sure: it took the slot's lock (`locked`), and no description holds
 * it now (the kernel drops it when the owner's last descriptor closes: exit, kill, crash). */
static int gs_crew_gone(struct gs_gang_slot *s, int i)
{
    return atomic_load_explicit(&s->locked, memory_order_relaxed) && gs_crew_lock(i, F_OFD_GETLK,
                                                                                   F_WRLCK) == 0;
}

static void gs_crew_format(void *map, const void *arg)
{
    (void)arg;
    struct gs_gang_file *f = map;
    f->magic = GS_GANG_FILE_MAGIC;
    f->version = 1;
    f->slots = GS_GANG_FILE_SLOTS;
}

/* The owner's last sign of life: its claim, launch or gang check. */
static int64_t gs_crew_life(struct gs_gang_slot *s)
{
    int64_t t = GS_LOAD(s->claimed_ns), l = GS_LOAD(s->proc.last_launch_ns);
    int64_t b = GS_LOAD(s->proc.gang_beat_ns) & ~3LL;
    return t > l ? (t > b ? t : b) : (l > b ? l : b);
}

static struct gs_gang_slot *gs_crew_claim(struct gs_gang_file *f, uint64_t token, int64_t now)
{
    for (int i = 0; i < GS_GANG_FILE_SLOTS; i++) {
        struct gs_gang_slot *s = &f->slot[i];
        uint64_t cur = atomic_load(&s->token);
        int64_t life = gs_crew_life(s);
        if (cur != 0 && !gs_crew_gone(s, i) && now - life < GS_CREW_STALE_NS &&
            life <= now + GS_BUDGET_HORIZON_NS)
            continue; /* taken, its owner alive (a time ahead of any clock of ours: stale) */
        /* the lock first: of two processes taking one slot, one gets it */
        int locked = gs_crew_lock(i, F_OFD_SETLK, F_WRLCK) == 0;
        if (!locked && gs_crew.fd >= 0 && gs_crew_lock(i, F_OFD_GETLK, F_WRLCK) != -1)
            continue; /* someone else holds the slot's lock: taking it, or alive */
        if (!atomic_compare_exchange_strong(&s->token, &cur, token)) {
            if (locked)
                gs_crew_lock(i, F_OFD_SETLK, F_UNLCK);
            continue;
        }
        atomic_store_explicit(&s->locked, (uint32_t)locked, memory_order_relaxed);
        GS_STORE(s->claimed_ns, (uint64_t)now);
        GS_STORE(s->proc.gang_stop_ns, 0); /* a former owner's words mean nothing now */
        GS_STORE(s->proc.gang_beat_ns, 0);
        GS_STORE(s->proc.gang_release_ns, 0);
        GS_STORE(s->proc.last_launch_ns, 0);
        GS_STORE(s->proc.inflight_ns, 0);
        return s;
    }
    return NULL;
}

int gs_crew_open(const char *dir, uint64_t token, int64_t now)
{
    char path[PATH_MAX], why[320];
    int created;
    if (snprintf(path, sizeof path, "%s/gang", dir) >= (int)sizeof path) {
        GS_LOG_ONCE(GS_LOG_WARN, "compute: GPUSLICE_GANG_DIR=%s: path too long; the process holds "
                    "with its own container only", dir);
        return -1;
    }
    struct gs_gang_file *f = gs_shared_file_map_fd(path, sizeof *f, 0, gs_crew_format, NULL, why,
                                                   sizeof why, &created, &gs_crew.fd);
    if (f != NULL && (f->magic != GS_GANG_FILE_MAGIC || f->version != 1 ||
                      f->slots != GS_GANG_FILE_SLOTS)) {
        munmap(f, sizeof *f);
        f = NULL;
        snprintf(why, sizeof why, "not a gpuslice gang file (or of another version)");
    }
    struct gs_gang_slot *self = f ? gs_crew_claim(f, token, now) : NULL;
    if (f != NULL && self == NULL) {
        munmap(f, sizeof *f);
        f = NULL;
        snprintf(why, sizeof why, "all %d slots are taken by live processes", GS_GANG_FILE_SLOTS);
    }
    if (f == NULL && gs_crew.fd >= 0) {
        close(gs_crew.fd);
        gs_crew.fd = -1;
    }
    if (f == NULL) {
        GS_LOG_ONCE(GS_LOG_WARN, "compute: gang file %s: %s; the process holds with its own "
                    "container only (check that GPUSLICE_GANG_DIR is the directory the node agent "
                    "mounted)", path, why);
        return -1;
    }
    gs_guard_add(f, sizeof *f, &gs_crew.broken);
    gs_crew.file = f;
    gs_crew.self = self;
    gs_crew.token = token;
    GS_DEBUG("compute: gang file %s%s, slot %d", path, created ? " (created)" : "",
             (int)(self - f->slot));
    return 0;
}

struct gs_compute_proc *gs_crew_self(void)
{
    return gs_crew.self ? &gs_crew.self->proc : NULL;
}

int gs_crew_count(void *ctx)
{
    (void)ctx;
    return gs_crew.file ? GS_GANG_FILE_SLOTS : 0;
}

struct gs_compute_proc *gs_crew_at(void *ctx, int i)
{
    (void)ctx;
    if (!gs_crew.file || i < 0 || i >= GS_GANG_FILE_SLOTS)
        return NULL;
    struct gs_gang_slot *s = &gs_crew.file->slot[i];
    uint64_t token = atomic_load_explicit(&s->token, memory_order_relaxed);
    if (token == 0)
        return NULL;
    if (s != gs_crew.self) { /* a killed owner is gone at once, not when its stamps lapse */
        int64_t now = gs_compute_now_ns();
        if ((uint64_t)GS_LOAD(gs_crew.seen[i].token) != token ||
            now - GS_LOAD(gs_crew.seen[i].at) > GS_CREW_LIVE_NS) {
            GS_STORE(gs_crew.seen[i].dead, gs_crew_gone(s, i));
            GS_STORE(gs_crew.seen[i].at, now);
            GS_STORE(gs_crew.seen[i].token, token);
        }
        if (GS_LOAD(gs_crew.seen[i].dead))
            return NULL;
    }
    return &s->proc;
}

void gs_crew_leave(void)
{
    uint64_t mine = gs_crew.token;
    if (gs_crew.self && atomic_compare_exchange_strong(&gs_crew.self->token, &mine, 0))
        gs_crew_lock((int)(gs_crew.self - gs_crew.file->slot), F_OFD_SETLK, F_UNLCK);
}

void gs_crew_forked(void)
{
    gs_crew.self = NULL;
    gs_crew.token = 0;
    if (gs_crew.fd >= 0) { /* the parent's description: its lock must not outlive the parent */
        close(gs_crew.fd);
        gs_crew.fd = -1;
    }
}

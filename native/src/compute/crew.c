/* The gang file shared by containers. See crew.h. */
#include "crew.h"

#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/mman.h>

#include "budget.h"
#include "gang.h"
#include "log.h"
#include "region.h"

static struct {
    struct gs_gang_file *file;
    struct gs_gang_slot *self;
    uint64_t token;
    int broken; /* set by the truncation guard */
} gs_crew;

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
        if (cur != 0 && now - life < GS_CREW_STALE_NS && life <= now + GS_BUDGET_HORIZON_NS)
            continue; /* taken, its owner alive (a time ahead of any clock of ours: stale) */
        if (!atomic_compare_exchange_strong(&s->token, &cur, token))
            continue;
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
    struct gs_gang_file *f = gs_shared_file_map(path, sizeof *f, 0, gs_crew_format, NULL, why,
                                                sizeof why, &created);
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
    if (!gs_crew.file || i < 0 || i >= GS_GANG_FILE_SLOTS ||
        atomic_load_explicit(&gs_crew.file->slot[i].token, memory_order_relaxed) == 0)
        return NULL;
    return &gs_crew.file->slot[i].proc;
}

void gs_crew_leave(void)
{
    uint64_t mine = gs_crew.token;
    if (gs_crew.self)
        atomic_compare_exchange_strong(&gs_crew.self->token, &mine, 0);
}

void gs_crew_forked(void)
{
    gs_crew.self = NULL;
    gs_crew.token = 0;
}

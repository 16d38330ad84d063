/* Demand board protocol (claim, heartbeat, read). See board.h. */
#include "board.h"

#include <stdatomic.h>
#include <string.h>

int gs_board_format(struct gs_board *b)
{
    static const char zero[8];
    if (memcmp(b->magic, zero, 8) == 0) {
        b->version = 1;
        b->slots = GS_BOARD_SLOTS;
        memcpy(b->magic, GS_BOARD_MAGIC, 8);
    }
    return memcmp(b->magic, GS_BOARD_MAGIC, 8) == 0 && b->version == 1 ? 0 : -1;
}

/* How long ago a slot beat. A beat further in the future than GS_BOARD_FRESH_NS was written on
 * another clock (a board from before a reboot, a restored checkpoint): infinitely old, so it
 * neither counts as demand nor keeps its slot. */
static int64_t gs_board_age(int64_t now, int64_t beat)
{
    return beat - now > GS_BOARD_FRESH_NS ? INT64_MAX : now - beat;
}

void gs_board_client_init(struct gs_board_client *c, struct gs_board *board, uint64_t token,
                          uint64_t tenant_id, int priority, int pct, int mode, int pid)
{
    memset(c, 0, sizeof(*c));
    c->board = board;
    c->token = token;
    c->tenant_id = tenant_id;
    c->priority = priority;
    c->pct = pct;
    c->mode = mode;
    c->pid = pid;
    c->slot = -1;
    c->last_beat = c->last_read = INT64_MIN / 2;
}

static int gs_board_claim(struct gs_board_client *c, int64_t now)
{
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < GS_BOARD_SLOTS; i++) {
            struct gs_board_slot *s = &c->board->slot[i];
            uint64_t owner = atomic_load(&s->owner);
            int64_t beat = (int64_t)atomic_load(&s->heartbeat_ns);
            int usable = pass == 0 ? owner == 0 : gs_board_age(now, beat) > GS_BOARD_STALE_NS;
            if (!usable || !atomic_compare_exchange_strong(&s->owner, &owner, c->token))
                continue;
            atomic_store(&s->tenant_id, c->tenant_id);
            atomic_store(&s->priority, (uint32_t)c->priority);
            atomic_store(&s->limit_pct, (uint32_t)c->pct);
            atomic_store(&s->mode, (uint32_t)c->mode);
            atomic_store(&s->pid, (uint32_t)c->pid);
            atomic_store(&s->busy_ns, 0);
            atomic_store(&s->inflight_ns, 0);
            atomic_store(&s->heartbeat_ns, (uint64_t)now);
            return i;
        }
    }
    return -1;
}

static void gs_board_read(struct gs_board_client *c, int64_t now)
{
    struct gs_meter_others o = {0};
    for (int i = 0; i < GS_BOARD_SLOTS; i++) {
        struct gs_board_slot *s = &c->board->slot[i];
        uint64_t owner = atomic_load_explicit(&s->owner, memory_order_relaxed);
        if (owner == 0 || owner == c->token)
            continue;
        int64_t beat = (int64_t)atomic_load_explicit(&s->heartbeat_ns, memory_order_relaxed);
        if (gs_board_age(now, beat) >= GS_BOARD_FRESH_NS)
            continue;
        uint64_t busy = atomic_load_explicit(&s->busy_ns, memory_order_relaxed);
        if (atomic_load_explicit(&s->tenant_id, memory_order_relaxed) == c->tenant_id) {
            o.peers++; /* a process of this container: shares our budget, never yielded to */
            o.peers_busy_ns += busy;
            int64_t fl = atomic_load_explicit(&s->inflight_ns, memory_order_relaxed);
            o.peers_inflight_ns += fl > 0 ? fl : 0;
            continue;
        }
        o.busy_ns += busy;
        if (atomic_load_explicit(&s->priority, memory_order_relaxed) == 0)
            o.high = 1;
        else
            o.low = 1;
    }
    c->others = o;
}

struct gs_meter_others gs_board_tick(struct gs_board_client *c, int64_t now, uint64_t busy_ns)
{
    if (!c->board)
        return c->others;
    if (now - c->last_beat >= GS_BOARD_BEAT_NS) {
        if (c->slot >= 0 && atomic_load(&c->board->slot[c->slot].owner) != c->token)
            c->slot = -1; /* taken over while we were silent: claim again */
        if (c->slot < 0)
            c->slot = gs_board_claim(c, now);
        if (c->slot >= 0) {
            atomic_store(&c->board->slot[c->slot].busy_ns, busy_ns);
            atomic_store(&c->board->slot[c->slot].heartbeat_ns, (uint64_t)now);
        }
        c->last_beat = now;
    }
    if (now - c->last_read >= GS_BOARD_READ_NS) {
        gs_board_read(c, now);
        c->last_read = now;
    }
    return c->others;
}

void gs_board_set_inflight(struct gs_board_client *c, int64_t inflight_ns)
{
    if (c->board && c->slot >= 0)
        atomic_store_explicit(&c->board->slot[c->slot].inflight_ns, inflight_ns,
                              memory_order_relaxed);
}

void gs_board_client_forked(struct gs_board_client *c, uint64_t token, int pid)
{
    c->token = token;
    c->pid = pid;
    c->slot = -1;
    c->last_beat = c->last_read = INT64_MIN / 2;
}

void gs_board_leave(struct gs_board_client *c)
{
    if (c->board && c->slot >= 0) {
        uint64_t mine = c->token;
        atomic_compare_exchange_strong(&c->board->slot[c->slot].owner, &mine, 0);
    }
    c->slot = -1;
}

/* Unit tests for the shared region and accounting (native/src/region/, native/src/mem/account.c):
 * creation and header checks, slot claim/release, reserve/commit/cancel/release against the
 * limit, no over-commit under concurrent processes, reclaim of dead and reused pids and of slots
 * whose clearer died, GPUs counted by UUID whatever the ordinal (16+ included), the pid namespace
 * check, and refusals with every slot taken that do not sweep /proc each time.
 * Built and run by test_native_unit.py (no CUDA). argv[1]: a scratch directory. */
#define _GNU_SOURCE
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "config.h"
#include "mem/account.h"
#include "region.h"

#define MiB (1ull << 20)

/* The CUDA side's ordinal -> UUID, as a table the tests rewire (default: ordinal n is GPU-n). */
static const char *uuid_of[64];

int gs_device_uuid(int ordinal, char *out, size_t len)
{
    if (ordinal < 0 || ordinal >= 64) return -1;
    if (uuid_of[ordinal]) snprintf(out, len, "%s", uuid_of[ordinal]);
    else snprintf(out, len, "GPU-%d", ordinal);
    return 0;
}

static struct gs_config cfg_with(const char *path, uint64_t limit0)
{
    struct gs_config c;
    memset(&c, 0, sizeof c);
    c.valid = 1;
    c.mem_limit[0] = limit0;
    c.mem_limit_default = 50 * MiB; /* indexes >= 16 only: 1..15 stay unlimited in these tests */
    c.mem_limited = 1;
    snprintf(c.region_path, sizeof c.region_path, "%s", path);
    return c;
}

static void test_a_fresh_region_has_the_header_and_limits_of_its_creator(const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/fresh.region", dir);
    struct gs_config c = cfg_with(path, 100 * MiB);
    EXPECT(gs_region_open(&c) == 0, "creating a region in a writable directory works");
    struct gs_region_header *h = gs_region();
    EXPECT(h && h->magic == GS_REGION_MAGIC && h->version == GS_REGION_VERSION, "magic and version written");
    EXPECT(h && h->total_size == GS_REGION_SIZE && h->device_count == 1, "size and device count recorded");
    EXPECT(gs_account_limit(0) == 100 * MiB && gs_account_limit(1) == 0, "limits come from the creator's config");
}

static void test_reserve_commit_release_respect_the_limit(void)
{
    EXPECT(gs_account_reserve(0, 60 * MiB) == GS_OK, "60 of 100 MiB fits");
    gs_account_commit(0, 60 * MiB);
    EXPECT(gs_account_total(0) == 60 * MiB, "committed bytes count as used");
    EXPECT(gs_account_reserve(0, 50 * MiB) == GS_OVER, "60 + 50 > 100 must be refused");
    EXPECT(gs_account_total(0) == 60 * MiB, "a refusal leaves nothing pending");
    EXPECT(gs_account_reserve(0, 40 * MiB) == GS_OK, "60 + 40 == 100 exactly fits");
    EXPECT(gs_account_total(0) == 100 * MiB, "pending bytes count while the allocation is in flight");
    gs_account_cancel(0, 40 * MiB);
    gs_account_release(0, 60 * MiB);
    EXPECT(gs_account_total(0) == 0, "cancel and release bring the total back to zero");
    gs_account_release(0, 1);
    EXPECT(gs_account_total(0) == 0, "releasing more than used clamps at zero, never wraps");
    EXPECT(gs_account_reserve(1, 1ull << 40) == GS_OK, "a device without a limit accepts anything");
    gs_account_cancel(1, 1ull << 40);
}

static void test_concurrent_processes_never_overcommit(void)
{
    enum { KIDS = 4, TRIES = 200 };
    int pipefd[2];
    pid_t kids[KIDS];
    if (pipe(pipefd) != 0) return;
    for (int k = 0; k < KIDS; k++) {
        if ((kids[k] = fork()) == 0) {
            int ok = 0;
            for (int i = 0; i < TRIES; i++) {
                if (gs_account_reserve(0, 1 * MiB) == GS_OK) {
                    gs_account_commit(0, 1 * MiB);
                    ok++;
                }
            }
            if (write(pipefd[1], &ok, sizeof ok) != sizeof ok) _exit(2);
            pause(); /* stay alive: our slot must keep counting */
            _exit(0);
        }
    }
    int total_ok = 0;
    for (int k = 0; k < KIDS; k++) {
        int ok = 0;
        if (read(pipefd[0], &ok, sizeof ok) == sizeof ok) total_ok += ok;
    }
    EXPECT(total_ok == 100, "4 processes racing for 800 x 1 MiB under a 100 MiB cap get exactly 100, got %d",
           total_ok);
    EXPECT(gs_account_total(0) == 100 * MiB, "the derived total equals what was granted");
    /* kill them all (no exit handlers run): their usage must be reclaimed */
    for (int k = 0; k < KIDS; k++) kill(kids[k], SIGKILL);
}

static void test_dead_processes_are_reclaimed(void)
{
    int status;
    while (wait(&status) > 0) {
    }
    EXPECT(gs_account_total(0) == 100 * MiB, "dead slots still count until a sweep");
    gs_region_reclaim(1);
    EXPECT(gs_account_total(0) == 0, "a sweep frees the usage of killed processes, got %llu",
           (unsigned long long)gs_account_total(0));
}

/* Forge a live slot in the first free one, owned by pid with this start time and device-0 usage,
 * as a process that died or was replaced would have left it. Returns the slot index. */
static int forge_live_slot(pid_t pid, uint64_t start_time, uint64_t used0)
{
    int idx = -1;
    for (int i = 0; i < GS_REGION_MAX_SLOTS && idx < 0; i++) {
        struct gs_region_slot *s = gs_region_slot_at(i);
        if (s->pid == 0 && s->state == GS_SLOT_FREE) idx = i;
    }
    struct gs_region_slot *s = gs_region_slot_at(idx);
    s->pid = pid;
    s->start_time = start_time;
    s->used[0] = used0;
    s->state = GS_SLOT_LIVE;
    struct gs_region_header *h = gs_region();
    if (h->slot_hwm < (uint32_t)idx + 1) h->slot_hwm = (uint32_t)idx + 1;
    return idx;
}

static void test_with_every_slot_taken_a_new_process_cannot_allocate(void)
{
    pid_t kid = fork();
    if (kid == 0) { /* a new process: no slot of its own yet; the parent is alive and stays so */
        static int forged[GS_REGION_MAX_SLOTS];
        int n = 0;
        for (int i = 0; i < GS_REGION_MAX_SLOTS; i++) {
            struct gs_region_slot *s = gs_region_slot_at(i);
            if (s->pid == 0 && s->state == GS_SLOT_FREE) forged[n++] = forge_live_slot(getppid(), 0, 0);
        }
        int verdict = gs_account_reserve(0, 1 * MiB);
        for (int k = 0; k < n; k++) { /* give the parent's later tests their slots back */
            gs_region_slot_at(forged[k])->state = GS_SLOT_FREE;
            gs_region_slot_at(forged[k])->pid = 0;
        }
        _exit(verdict == GS_OVER ? 0 : 1);
    }
    int status = 0;
    waitpid(kid, &status, 0);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0,
           "with all slots taken an allocation is refused, never passed through unaccounted");
}

static void test_a_reused_pid_with_another_start_time_is_dead(void)
{
    pid_t kid = fork();
    if (kid == 0) {
        pause();
        _exit(0);
    }
    usleep(20000);
    /* a live pid but a start time that is not its own (boot tick 1: certainly not this process) */
    int idx = forge_live_slot(kid, 1, 5 * MiB);
    struct gs_region_slot *s = gs_region_slot_at(idx);
    EXPECT(!gs_region_slot_alive(idx), "same pid, different start time: another process");
    gs_region_reclaim(1);
    EXPECT(s->pid == 0 && s->state == GS_SLOT_FREE && s->used[0] == 0, "the forged slot was reclaimed");
    kill(kid, SIGKILL);
    waitpid(kid, NULL, 0);
}

static void test_a_zombie_is_dead_because_its_memory_is_already_freed(void)
{
    pid_t kid = fork();
    if (kid == 0) _exit(0);
    usleep(50000); /* not reaped: a zombie, as under a container init that never waits */
    int idx = forge_live_slot(kid, 0, 7 * MiB);
    struct gs_region_slot *s = gs_region_slot_at(idx);
    EXPECT(!gs_region_slot_alive(idx), "an unreaped zombie still answers kill(pid, 0) but must count as dead");
    gs_region_reclaim(1);
    EXPECT(s->pid == 0 && s->used[0] == 0, "the zombie's slot was reclaimed");
    waitpid(kid, NULL, 0);
}

static void test_a_foreign_file_is_refused(const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/foreign.region", dir);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs("not a region", f);
        fclose(f);
    }
    struct gs_config c = cfg_with(path, 1 * MiB);
    EXPECT(gs_region_open(&c) != 0, "a file of the wrong size is not used as a region");
}

static void test_a_slot_whose_clearer_died_is_taken_over(void)
{
    pid_t kid = fork();
    if (kid == 0) _exit(0);
    waitpid(kid, NULL, 0); /* a dead pid: the clearer that was SIGKILLed half-way */
    int idx = forge_live_slot(kid, 0, 9 * MiB);
    struct gs_region_slot *s = gs_region_slot_at(idx);
    s->state = GS_SLOT_RECLAIMING_BY(kid);
    EXPECT(gs_account_total(0) == 0, "a slot being cleared is not counted");
    gs_region_reclaim(1);
    EXPECT(s->state == GS_SLOT_FREE && s->pid == 0 && s->used[0] == 0,
           "a sweep finishes what the dead clearer started (state %#x)", s->state);
    idx = forge_live_slot(kid, 0, 0);
    s = gs_region_slot_at(idx);
    s->state = GS_SLOT_RECLAIMING; /* the v1 encoding: nobody named as clearer */
    gs_region_reclaim(1);
    EXPECT(s->state == GS_SLOT_FREE, "a RECLAIMING slot without a live clearer is freed too");
}

static void test_gpus_are_counted_by_uuid_whatever_the_ordinal(void)
{
    uuid_of[2] = "GPU-same";
    uuid_of[7] = "GPU-same"; /* the same GPU under another ordinal (another CUDA_VISIBLE_DEVICES) */
    EXPECT(gs_region_entry(2) == gs_region_entry(7) && gs_region_entry(2) >= 0, "one entry per GPU");
    EXPECT(gs_account_reserve(2, 3 * MiB) == GS_OK, "reserve through ordinal 2");
    gs_account_commit(2, 3 * MiB);
    EXPECT(gs_account_used(7) == 3 * MiB, "seen through ordinal 7 too");
    gs_account_release(7, 3 * MiB);
    EXPECT(gs_account_used(2) == 0, "released through either ordinal");
}

static void test_processes_adding_one_gpu_at_once_make_one_entry(void)
{
    enum { KIDS = 6 };
    int go[2];
    if (pipe(go) != 0) return;
    uuid_of[60] = "GPU-raced";
    pid_t kids[KIDS];
    for (int k = 0; k < KIDS; k++) {
        if ((kids[k] = fork()) == 0) {
            char c;
            if (read(go[0], &c, 1) != 1) _exit(2);
            _exit(gs_region_entry(60) >= 0 && gs_region_entry(60) < GS_REGION_MAX_DEVICES ? 0 : 1);
        }
    }
    if (write(go[1], "gggggg", KIDS) != KIDS) return;
    int ok = 0, status;
    for (int k = 0; k < KIDS; k++) ok += waitpid(kids[k], &status, 0) == kids[k] && WIFEXITED(status) &&
                                          WEXITSTATUS(status) == 0;
    int entries = 0;
    for (int e = 0; e < GS_REGION_MAX_DEVICES; e++)
        entries += gs_region_device(e)->state == GS_DEVICE_READY && strcmp(gs_region_device(e)->uuid, "GPU-raced") == 0;
    EXPECT(ok == KIDS && entries == 1, "%d processes adding the same GPU at once found it, in one entry (got %d)",
           ok, entries);
}

static void test_ordinals_past_16_are_capped_and_a_full_table_fails_closed(void)
{
    EXPECT(gs_account_limit(20) == 50 * MiB, "ordinal 20 gets CUDA_DEVICE_MEMORY_LIMIT like the others, got %llu",
           (unsigned long long)gs_account_limit(20));
    EXPECT(gs_account_reserve(20, 51 * MiB) == GS_OVER, "and is held to it");
    for (int ord = 21; ord < 40; ord++) gs_region_entry(ord); /* more GPUs than entries */
    EXPECT(gs_region_entry(39) == GS_DEV_CLOSED, "no entry left for the 17th GPU");
    EXPECT(gs_account_reserve(39, 1) == GS_OVER, "a GPU without an entry is refused, never passed through");
}

static void test_with_a_uuid_list_other_gpus_are_refused(const char *dir)
{
    pid_t kid = fork();
    if (kid == 0) {
        char path[512];
        snprintf(path, sizeof path, "%s/listed.region", dir);
        struct gs_config c = cfg_with(path, 8 * MiB);
        snprintf(c.device_uuids[0], sizeof c.device_uuids[0], "GPU-listed");
        c.device_uuid_count = 1;
        uuid_of[50] = "GPU-other";
        uuid_of[51] = "GPU-listed";
        if (gs_region_open(&c) != 0) _exit(1);
        int ok = gs_account_reserve(50, 1) == GS_OVER      /* not the container's GPU */
                 && gs_account_limit(51) == 8 * MiB          /* index 0 of the list, whatever ordinal */
                 && gs_account_reserve(51, 9 * MiB) == GS_OVER;
        _exit(ok ? 0 : 2);
    }
    int status = 0;
    waitpid(kid, &status, 0);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0,
           "GPUSLICE_DEVICE_UUIDS fixes the GPUs and their limits; another GPU is refused (exit %d)",
           WEXITSTATUS(status));
}

static void test_a_region_of_another_pid_namespace_is_refused_while_used_then_taken_over(const char *dir)
{
    char path[512], b = 0;
    snprintf(path, sizeof path, "%s/otherns.region", dir);
    int ready[2], done[2];
    if (pipe(ready) != 0 || pipe(done) != 0) return;
    pid_t holder = fork();
    if (holder == 0) { /* a live process of "another pid namespace": it has the region open */
        struct gs_config c = cfg_with(path, 1 * MiB);
        b = gs_region_open(&c) == 0 && gs_region_self() != NULL ? 'y' : 'n';
        __atomic_store_n(&gs_region()->pid_ns, 12345, __ATOMIC_RELEASE);
        if (write(ready[1], &b, 1) != 1 || read(done[0], &b, 1) != 1) _exit(1);
        _exit(0);
    }
    if (read(ready[0], &b, 1) != 1) b = 0;
    struct gs_region_header *before = gs_region();
    struct gs_config c = cfg_with(path, 1 * MiB);
    EXPECT(b == 'y' && gs_region_open(&c) != 0, "a region live processes of another namespace use is not used");
    EXPECT(gs_region() == before, "the open region is kept");
    if (write(done[1], "x", 1) != 1) return;
    waitpid(holder, NULL, 0);
    pid_t kid = fork();
    if (kid == 0) { /* nobody uses it any more: a restarted container's first process */
        int ok = gs_region_open(&c) == 0 && gs_region()->pid_ns != 12345 && gs_region()->slot_hwm == 0 &&
                 gs_region_slot_at(0)->pid == 0;
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    waitpid(kid, &status, 0);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0,
           "once its processes are gone, the region is taken over by this namespace with its slots cleared");
    close(ready[0]);
    close(ready[1]);
    close(done[0]);
    close(done[1]);
}

static void test_refusals_with_every_slot_taken_do_not_sweep_each_time(void)
{
    pid_t kid = fork();
    if (kid == 0) {
        for (int i = 0; i < GS_REGION_MAX_SLOTS; i++) {
            struct gs_region_slot *s = gs_region_slot_at(i);
            if (s->pid == 0 && s->state == GS_SLOT_FREE) forge_live_slot(getppid(), 0, 0);
        }
        struct gs_region_header *h = gs_region();
        int first = gs_account_reserve(0, 1 * MiB);
        uint64_t swept = h->last_reclaim_ns;
        int more = 0;
        for (int k = 0; k < 50; k++) more += gs_account_reserve(0, 1 * MiB) == GS_OVER;
        _exit(first == GS_OVER && more == 50 && gs_region_no_slot() && h->last_reclaim_ns == swept ? 0 : 1);
    }
    int status = 0;
    waitpid(kid, &status, 0);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0,
           "50 refusals right after a failed claim neither pass nor sweep /proc again");
    for (int i = 0; i < GS_REGION_MAX_SLOTS; i++) { /* the parent's forged slots: give them back */
        struct gs_region_slot *s = gs_region_slot_at(i);
        if (s->pid == getpid() && s->start_time == 0) {
            s->state = GS_SLOT_FREE;
            s->pid = 0;
        }
    }
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "/tmp";
    test_a_fresh_region_has_the_header_and_limits_of_its_creator(dir);
    test_reserve_commit_release_respect_the_limit();
    test_concurrent_processes_never_overcommit();
    test_dead_processes_are_reclaimed();
    test_with_every_slot_taken_a_new_process_cannot_allocate();
    test_a_reused_pid_with_another_start_time_is_dead();
    test_a_zombie_is_dead_because_its_memory_is_already_freed();
    test_a_foreign_file_is_refused(dir);
    test_a_slot_whose_clearer_died_is_taken_over();
    test_gpus_are_counted_by_uuid_whatever_the_ordinal();
    test_processes_adding_one_gpu_at_once_make_one_entry();
    test_ordinals_past_16_are_capped_and_a_full_table_fails_closed();
    test_with_a_uuid_list_other_gpus_are_refused(dir);
    test_a_region_of_another_pid_namespace_is_refused_while_used_then_taken_over(dir);
    test_refusals_with_every_slot_taken_do_not_sweep_each_time();
    return check_report(__FILE__);
}

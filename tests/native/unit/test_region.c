/* Unit tests for the shared region and accounting (native/src/region/, native/src/mem/account.c):
 * creation and header checks, slot claim/release, reserve/commit/cancel/release against the
 * limit, no over-commit under concurrent processes, reclaim of dead and reused pids.
 * Built and run by test_native_unit.py (no CUDA). argv[1]: a scratch directory. */
#define _GNU_SOURCE
#include <signal.h>
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

static struct gs_config cfg_with(const char *path, uint64_t limit0)
{
    struct gs_config c;
    memset(&c, 0, sizeof c);
    c.valid = 1;
    c.mem_limit[0] = limit0;
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
    return check_report(__FILE__);
}

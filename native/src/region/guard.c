/* Truncation guard for the shared files this library maps (the region, the compute boards).
 * Any process that can write such a file can also truncate it, and a MAP_SHARED page past the
 * new end raises SIGBUS in every process that touches it. Checking the size with fstat before
 * each use cannot close the race (the file may shrink right after the check) and would put a
 * system call on every kernel launch; instead a SIGBUS handler scoped to the mapped ranges
 * replaces the vanished mapping with private zero pages (the faulting access then completes),
 * sets the range's broken flag (the region then refuses every allocation: fail closed) and
 * writes one line to stderr. A SIGBUS anywhere else goes to the handler that was installed
 * before (or the default action), so the application's own faults behave as without us.
 * Limit: an application that installs its own SIGBUS handler later replaces this one.
 * Tests: tests/native/test_region_cannot_be_taken_over.py (truncated while running). */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "log.h"
#include "region.h"

#define GS_GUARD_RANGES 24 /* the region + one board per device, with room */

struct gs_guard_range {
    uintptr_t lo, hi;
    int *broken;
};

static struct gs_guard_range gs_ranges[GS_GUARD_RANGES];
static int gs_nranges;
static struct sigaction gs_old_bus;
static pthread_mutex_t gs_guard_lock = PTHREAD_MUTEX_INITIALIZER;

/* a fork child gets a fresh lock, not one its parent's other thread held at fork() */
static void gs_guard_fork_child(void)
{
    gs_guard_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
}

__attribute__((constructor)) static void gs_guard_fork_register(void)
{
    pthread_atfork(NULL, NULL, gs_guard_fork_child);
}

static const char gs_guard_msg[] =
    "gpuslice: a shared file (region or compute board) was truncated by another process; this "
    "process no longer shares its cap and refuses further allocations; recreate the file\n";

static void gs_guard_chain(int sig, siginfo_t *si, void *uc)
{
    if (gs_old_bus.sa_flags & SA_SIGINFO) {
        gs_old_bus.sa_sigaction(sig, si, uc);
    } else if (gs_old_bus.sa_handler == SIG_DFL || gs_old_bus.sa_handler == SIG_IGN) {
        /* a fault cannot be ignored: restore the default so the re-executed access kills us
         * exactly as it would have without this library */
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigaction(SIGBUS, &dfl, NULL);
    } else {
        gs_old_bus.sa_handler(sig);
    }
}

static void gs_guard_handler(int sig, siginfo_t *si, void *uc)
{
    uintptr_t a = (uintptr_t)si->si_addr;
    int n = __atomic_load_n(&gs_nranges, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++) {
        struct gs_guard_range *r = &gs_ranges[i];
        if (a < r->lo || a >= r->hi) continue;
        if (mmap((void *)r->lo, r->hi - r->lo, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
                 0) == MAP_FAILED)
            break; /* cannot recover: behave as without the guard */
        if (!__atomic_exchange_n(r->broken, 1, __ATOMIC_SEQ_CST)) {
            ssize_t w = write(STDERR_FILENO, gs_guard_msg, sizeof gs_guard_msg - 1);
            (void)w;
        }
        return;
    }
    gs_guard_chain(sig, si, uc);
}

void gs_guard_add(void *map, size_t size, int *broken)
{
    pthread_mutex_lock(&gs_guard_lock);
    if (gs_nranges == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = gs_guard_handler;
        sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGBUS, &sa, &gs_old_bus) != 0)
            GS_WARN("shared files: cannot install the SIGBUS guard; a truncated region would kill this process");
    }
    if (gs_nranges < GS_GUARD_RANGES) {
        gs_ranges[gs_nranges] = (struct gs_guard_range){(uintptr_t)map, (uintptr_t)map + size, broken};
        __atomic_store_n(&gs_nranges, gs_nranges + 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&gs_guard_lock);
}

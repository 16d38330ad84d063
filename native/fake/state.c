/* Fake driver state: env config, the (optionally shared) state file, per-process slots, charging.
 * Charging takes a process mutex plus flock on the state file; the kernel drops the flock of a
 * killed process, and a dead pid's bytes are dropped on the next charge (like the real driver),
 * as are the bytes of this pid's image before exec(). */
#include "fake.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static struct fake_cfg g_cfg;
static struct fake_shared *g_state;
static int g_fd = -1;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_slot = -1;
static pid_t g_slot_pid;

static long env_long(const char *name, long dflt, long lo, long hi) {
    const char *v = getenv(name);
    if (v == NULL || *v == '\0')
        return dflt;
    char *end = NULL;
    long n = strtol(v, &end, 10);
    if (*end != '\0' || n < lo || n > hi) {
        fprintf(stderr, "fakecuda: %s=\"%s\": not an integer in [%ld, %ld]; using %ld\n", name, v, lo, hi, dflt);
        return dflt;
    }
    return n;
}

uint64_t fake_round_up(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

void fake_uuid_bytes(int phys, unsigned char out[16]) {
    memset(out, 0, 16);
    out[0] = 0xfa;
    out[1] = 0xce;
    out[15] = (unsigned char)phys;
}

void fake_uuid_string(int phys, char *out, size_t len) {
    unsigned char b[16];
    fake_uuid_bytes(phys, b);
    snprintf(out, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
             b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

static void parse_visible(void) {
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    g_cfg.nvisible = 0;
    if (v == NULL) {
        for (int i = 0; i < g_cfg.ndev; i++)
            g_cfg.visible[g_cfg.nvisible++] = i;
        return;
    }
    char buf[512];
    snprintf(buf, sizeof buf, "%s", v);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ')
            tok++;
        int phys = -1;
        if (strncmp(tok, "GPU-", 4) == 0) {
            for (int i = 0; i < g_cfg.ndev; i++) {
                char u[64];
                fake_uuid_string(i, u, sizeof u);
                if (strncmp(u, tok, strlen(tok)) == 0)
                    phys = i;
            }
        } else {
            char *end = NULL;
            long n = strtol(tok, &end, 10);
            if (end != tok && *end == '\0' && n >= 0 && n < g_cfg.ndev)
                phys = (int)n;
        }
        if (phys < 0 || g_cfg.nvisible == FAKE_MAX_DEV)
            break; /* the real driver ignores everything from the first invalid entry on */
        g_cfg.visible[g_cfg.nvisible++] = phys;
    }
}

static void init_layout(struct fake_shared *s) {
    long mib = env_long("FAKE_CUDA_MEMORY_MIB", 16384, 64, 1L << 24);
    s->ndev = (uint32_t)g_cfg.ndev;
    for (int i = 0; i < g_cfg.ndev; i++)
        s->total[i] = (uint64_t)mib * FAKE_MIB;
    s->version = FAKE_STATE_VERSION;
    atomic_thread_fence(memory_order_seq_cst);
    s->magic = FAKE_STATE_MAGIC;
}

static void lock_all(void);
static void unlock_all(void);
static uint64_t start_time_of(pid_t pid);

/* This pid's slot from the image before exec(): exec frees a process's device memory. */
static void drop_pre_exec(void) {
    uint64_t start = start_time_of(getpid());
    lock_all();
    for (int i = 0; i < FAKE_MAX_PROCS; i++) {
        struct fake_proc *p = &g_state->procs[i];
        if (atomic_load(&p->pid) == getpid() && p->start_time == start)
            atomic_store(&p->pid, 0);
    }
    unlock_all();
}

static void init_once(void) {
    g_cfg.ndev = (int)env_long("FAKE_CUDA_DEVICES", 1, 0, FAKE_MAX_DEV);
    g_cfg.ctx_bytes = (uint64_t)env_long("FAKE_CUDA_CONTEXT_MIB", 0, 0, 1 << 20) * FAKE_MIB;
    g_cfg.ctx_unlisted = (uint64_t)env_long("FAKE_CUDA_CONTEXT_UNLISTED_MIB", 0, 0, 1 << 20) * FAKE_MIB;
    g_cfg.ctx_delay_ms = env_long("FAKE_CUDA_CONTEXT_DELAY_MS", 0, 0, 60000);
    g_cfg.alloc_delay_ms = env_long("FAKE_CUDA_ALLOC_DELAY_MS", 0, 0, 60000);
    g_cfg.lazy_bytes = (uint64_t)env_long("FAKE_CUDA_LAZY_MIB", 0, 0, 1 << 20) * FAKE_MIB;
    g_cfg.pool_chunk = (uint64_t)env_long("FAKE_CUDA_POOL_CHUNK_MIB", 2, 2, 1 << 20) * FAKE_MIB;
    g_cfg.sm_count = (int)env_long("FAKE_CUDA_SM_COUNT", 132, 1, 100000);
    g_cfg.ns_per_block = env_long("FAKE_CUDA_NS_PER_BLOCK", 1000, 0, 1000000000L);
    const char *name = getenv("FAKE_CUDA_NAME");
    snprintf(g_cfg.name, sizeof g_cfg.name, "%s", name ? name : "NVIDIA Fake GPU");
    parse_visible();

    const char *path = getenv("FAKE_CUDA_STATE");
    size_t size = sizeof(struct fake_shared);
    if (path != NULL && *path != '\0') {
        g_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (g_fd >= 0 && flock(g_fd, LOCK_EX) == 0) {
            struct stat st;
            if (fstat(g_fd, &st) == 0 && (size_t)st.st_size < size && ftruncate(g_fd, (off_t)size) != 0)
                perror("fakecuda: ftruncate");
            void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, g_fd, 0);
            if (m != MAP_FAILED) {
                g_state = m;
                if (g_state->magic != FAKE_STATE_MAGIC)
                    init_layout(g_state);
            }
            flock(g_fd, LOCK_UN);
        }
        if (g_state == NULL) {
            fprintf(stderr, "fakecuda: FAKE_CUDA_STATE=%s: %s; using in-process state\n", path, strerror(errno));
            if (g_fd >= 0)
                close(g_fd);
            g_fd = -1;
        }
    }
    if (g_state == NULL) {
        void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
            abort();
        g_state = m;
        init_layout(g_state);
    }
    if ((int)g_state->ndev < g_cfg.ndev)
        g_cfg.ndev = (int)g_state->ndev; /* the file's creator decided; keep one view */
    drop_pre_exec();
}

const struct fake_cfg *fake_cfg(void) {
    pthread_once(&g_once, init_once);
    return &g_cfg;
}

struct fake_shared *fake_state(void) {
    pthread_once(&g_once, init_once);
    return g_state;
}

int fake_phys(int ordinal) {
    const struct fake_cfg *c = fake_cfg();
    return ordinal >= 0 && ordinal < c->nvisible ? c->visible[ordinal] : -1;
}

/* Start time (field 22) of pid; 0 if it is gone or a zombie (a dead process's memory is freed
 * by the kernel driver before its parent reaps it). */
static uint64_t start_time_of(pid_t pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (p == NULL || p[1] != ' ' || p[2] == 'Z' || p[2] == 'X')
        return 0;
    unsigned long long st = 0;
    /* after ") " come fields 3..; start time is field 22 */
    int field = 2;
    for (char *q = p + 1; *q != '\0'; q++) {
        if (*q == ' ') {
            field++;
            if (field == 22) {
                st = strtoull(q + 1, NULL, 10);
                break;
            }
        }
    }
    return st;
}

static int slot_alive(struct fake_proc *p) {
    pid_t pid = atomic_load(&p->pid);
    if (pid == 0)
        return 0;
    if (pid == getpid())
        return 1;
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return 0;
    return start_time_of(pid) == p->start_time;
}

static void lock_all(void) {
    pthread_mutex_lock(&g_lock);
    if (g_fd >= 0)
        while (flock(g_fd, LOCK_EX) != 0 && errno == EINTR) {
        }
}

static void unlock_all(void) {
    if (g_fd >= 0)
        flock(g_fd, LOCK_UN);
    pthread_mutex_unlock(&g_lock);
}

/* Caller holds the lock. Drops dead slots and returns this process's slot. */
static struct fake_proc *my_slot_locked(void) {
    struct fake_shared *s = g_state;
    for (int i = 0; i < FAKE_MAX_PROCS; i++) {
        struct fake_proc *p = &s->procs[i];
        if (atomic_load(&p->pid) != 0 && !slot_alive(p)) {
            for (int d = 0; d < FAKE_MAX_DEV; d++) {
                atomic_store(&p->used[d], 0);
                atomic_store(&s->unlisted[i][d], 0);
            }
            atomic_store(&p->pid, 0);
        }
    }
    if (g_slot >= 0 && g_slot_pid == getpid())
        return &s->procs[g_slot];
    uint64_t start = start_time_of(getpid());
    for (int i = 0; i < FAKE_MAX_PROCS; i++) {
        struct fake_proc *p = &s->procs[i];
        if (atomic_load(&p->pid) == 0) {
            for (int d = 0; d < FAKE_MAX_DEV; d++) {
                atomic_store(&p->used[d], 0);
                atomic_store(&s->unlisted[i][d], 0);
            }
            p->start_time = start;
            atomic_store(&p->pid, getpid());
            g_slot = i;
            g_slot_pid = getpid();
            return p;
        }
    }
    return NULL;
}

static uint64_t used_locked(int phys) {
    uint64_t sum = 0;
    for (int i = 0; i < FAKE_MAX_PROCS; i++) {
        struct fake_proc *p = &g_state->procs[i];
        if (atomic_load(&p->pid) != 0 && slot_alive(p))
            sum += atomic_load(&p->used[phys]) + atomic_load(&g_state->unlisted[i][phys]);
    }
    return sum;
}

static CUresult charge(int phys, uint64_t bytes, int unlisted) {
    struct fake_shared *s = fake_state();
    if (phys < 0 || phys >= (int)s->ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    CUresult rc = CUDA_SUCCESS;
    lock_all();
    struct fake_proc *me = my_slot_locked();
    uint64_t used = used_locked(phys);
    if (me == NULL) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else if (used + bytes > s->total[phys] || used + bytes < used) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        atomic_fetch_add(&s->oom_count[phys], 1);
    } else {
        atomic_fetch_add(unlisted ? &s->unlisted[me - s->procs][phys] : &me->used[phys], bytes);
        if (used + bytes > atomic_load(&s->peak[phys]))
            atomic_store(&s->peak[phys], used + bytes);
    }
    unlock_all();
    return rc;
}

static void uncharge(int phys, uint64_t bytes, int unlisted) {
    if (phys < 0 || phys >= FAKE_MAX_DEV || bytes == 0)
        return;
    fake_state();
    lock_all();
    struct fake_proc *me = my_slot_locked();
    if (me != NULL) {
        _Atomic uint64_t *v = unlisted ? &g_state->unlisted[me - g_state->procs][phys] : &me->used[phys];
        uint64_t cur = atomic_load(v);
        atomic_store(v, cur >= bytes ? cur - bytes : 0);
    }
    unlock_all();
}

CUresult fake_charge(int phys, uint64_t bytes) { return charge(phys, bytes, 0); }
void fake_uncharge(int phys, uint64_t bytes) { uncharge(phys, bytes, 0); }
CUresult fake_charge_unlisted(int phys, uint64_t bytes) { return charge(phys, bytes, 1); }
void fake_uncharge_unlisted(int phys, uint64_t bytes) { uncharge(phys, bytes, 1); }

uint64_t fake_device_used(int phys) {
    fake_state();
    if (phys < 0 || phys >= FAKE_MAX_DEV)
        return 0;
    lock_all();
    uint64_t used = used_locked(phys);
    unlock_all();
    return used;
}

/* For NVML's per-process list (nvml.c). Returns the number of live processes with bytes on phys. */
FAKE_EXPORT int fakecuda_processes(int phys, unsigned int *pids, unsigned long long *used, int cap) {
    fake_state();
    int n = 0;
    if (phys < 0 || phys >= FAKE_MAX_DEV)
        return 0;
    lock_all();
    for (int i = 0; i < FAKE_MAX_PROCS; i++) {
        struct fake_proc *p = &g_state->procs[i];
        if (atomic_load(&p->pid) == 0 || !slot_alive(p) || atomic_load(&p->used[phys]) == 0)
            continue;
        if (n < cap) {
            pids[n] = (unsigned int)atomic_load(&p->pid);
            used[n] = atomic_load(&p->used[phys]);
        }
        n++;
    }
    unlock_all();
    return n;
}

FAKE_EXPORT int fakecuda_device_info(int phys, unsigned long long *total, unsigned long long *used) {
    struct fake_shared *s = fake_state();
    if (phys < 0 || phys >= (int)s->ndev)
        return -1;
    *total = s->total[phys];
    *used = fake_device_used(phys);
    return 0;
}

FAKE_EXPORT int fakecuda_physical_count(void) { return fake_cfg()->ndev; }

FAKE_EXPORT const char *fakecuda_device_name(void) { return fake_cfg()->name; }

int64_t fake_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void fake_sleep_until(int64_t t_ns) {
    if (t_ns <= fake_now_ns())
        return;
    struct timespec ts = {.tv_sec = t_ns / 1000000000LL, .tv_nsec = t_ns % 1000000000LL};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

FAKE_EXPORT void fakecuda_uuid_string(int phys, char *out, size_t len) { fake_uuid_string(phys, out, len); }

static __thread const char *t_last_variant = "";

void fake_note(const char *variant) { t_last_variant = variant; }

/* Which exported ABI variant (e.g. "cuMemAllocAsync_ptsz") this thread entered last: lets tests
 * check that a pointer from cuGetProcAddress or dlsym is the variant they asked for. */
FAKE_EXPORT const char *fakecuda_last_variant(void) { return t_last_variant; }

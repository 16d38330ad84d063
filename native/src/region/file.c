/* Opening a shared file (the region, a compute board) that other users' processes may have
 * prepared for us. Existing files are opened without following symlinks and without blocking
 * (a FIFO never stalls us), then checked: regular file, mode exactly 0666 (what we create: every
 * uid of the container must write it), the exact size, and, where the caller asks, an owner that
 * is root, this user or the directory's owner (the directory's owner can replace any file in it
 * anyway). A missing file is created complete: written under a temporary O_EXCL name, then
 * hard-linked into place (link never replaces), so nobody ever sees it half-initialised and a
 * racing creator simply loses and opens the winner's file. Tests: tests/native/unit/test_region.c,
 * tests/native/test_region_cannot_be_taken_over.py. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "region.h"

#define GS_OPEN_FLAGS (O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)

static uid_t gs_dir_owner(const char *path)
{
    char copy[GS_PATH_MAX + 64];
    snprintf(copy, sizeof copy, "%s", path);
    struct stat st;
    return stat(dirname(copy), &st) == 0 ? st.st_uid : (uid_t)-1;
}

/* 0 if fd is a file we may share, else -1 with the reason in why. */
static int gs_file_check(int fd, const char *path, size_t size, int owner_checked, char *why, size_t len)
{
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(why, len, "fstat: %s", strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(why, len, "not a regular file (a FIFO, device or directory is never used)");
        return -1;
    }
    if ((st.st_mode & 07777) != 0666) {
        snprintf(why, len, "mode %04o, expected 0666 (changed after creation?)", (unsigned)(st.st_mode & 07777));
        return -1;
    }
    if (owner_checked && st.st_uid != 0 && st.st_uid != geteuid() && st.st_uid != gs_dir_owner(path)) {
        snprintf(why, len, "owned by uid %u, not by root, uid %u or the directory's owner: another user may "
                 "have planted it", (unsigned)st.st_uid, (unsigned)geteuid());
        return -1;
    }
    if ((uint64_t)st.st_size != size) {
        snprintf(why, len, "size %lld bytes, expected %zu (truncated, or from another gpuslice version)",
                 (long long)st.st_size, size);
        return -1;
    }
    return 0;
}

/* Create the complete file under a temporary name and link it to path. 1 created, 0 path
 * appeared meanwhile (open it instead), -1 error. */
static int gs_file_create(const char *path, size_t size, void (*init)(void *, const void *), const void *arg,
                          char *why, size_t len)
{
    char tmp[GS_PATH_MAX + 64];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    unlink(tmp); /* ours from a crashed attempt (same pid), or a symlink someone planted: never followed */
    int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(why, len, "cannot create %s: %s; check the directory exists and is writable", tmp, strerror(errno));
        return -1;
    }
    int rc = -1;
    void *map = MAP_FAILED;
    if (fchmod(fd, 0666) != 0 || ftruncate(fd, (off_t)size) != 0) {
        snprintf(why, len, "preparing %s: %s", tmp, strerror(errno));
        goto out;
    }
    map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        snprintf(why, len, "mmap %s: %s", tmp, strerror(errno));
        goto out;
    }
    init(map, arg);
    if (link(tmp, path) == 0) rc = 1;
    else if (errno == EEXIST) rc = 0;
    else snprintf(why, len, "link %s -> %s: %s", tmp, path, strerror(errno));
out:
    if (map != MAP_FAILED) munmap(map, size);
    close(fd);
    unlink(tmp);
    return rc;
}

void *gs_shared_file_map_fd(const char *path, size_t size, int owner_checked, void (*init)(void *, const void *),
                            const void *arg, char *why, size_t len, int *created, int *fd_out)
{
    *created = 0;
    for (int attempt = 0; attempt < 3; attempt++) {
        int fd = open(path, GS_OPEN_FLAGS);
        if (fd < 0 && errno == ENOENT) {
            int c = gs_file_create(path, size, init, arg, why, len);
            if (c < 0) return NULL;
            *created = c;
            continue; /* open what is now there (ours, or a racing creator's) and check it */
        }
        if (fd < 0) {
            snprintf(why, len, "%s", errno == ELOOP ? "is a symbolic link; refusing to follow it" : strerror(errno));
            return NULL;
        }
        void *map = MAP_FAILED;
        if (gs_file_check(fd, path, size, owner_checked, why, len) == 0) {
            map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (map == MAP_FAILED) snprintf(why, len, "mmap: %s", strerror(errno));
        }
        if (fd_out != NULL && map != MAP_FAILED) *fd_out = fd;
        else close(fd); /* the mapping keeps the file */
        return map == MAP_FAILED ? NULL : map;
    }
    snprintf(why, len, "the file keeps disappearing while it is opened");
    return NULL;
}

void *gs_shared_file_map(const char *path, size_t size, int owner_checked, void (*init)(void *, const void *),
                         const void *arg, char *why, size_t len, int *created)
{
    return gs_shared_file_map_fd(path, size, owner_checked, init, arg, why, len, created, NULL);
}

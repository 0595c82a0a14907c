/* tt_fsutil: tmp + fsync + rename + directory fsync, and whole-file reads. */
#include "tt_fsutil.h"
#include "tt_status.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define FSET_ERR(err, errlen, ...)                                                                 \
    do {                                                                                           \
        if ((err) != NULL && (errlen) > 0)                                                         \
            snprintf((err), (errlen), __VA_ARGS__);                                                \
    } while (0)

static int write_all(int fd, const uint8_t *p, size_t len) {
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

static int fsync_dir_of(const char *path) {
    char copy[4096];
    snprintf(copy, sizeof(copy), "%s", path);
    int dfd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
    if (dfd < 0)
        return -1;
    int rc = fsync(dfd);
    close(dfd);
    return rc;
}

/* Why the temporary is named after the thread, not the process: two
 * writers of one path in a process (the coordinator's background save
 * and its shutdown save) once shared "<path>.tmp.<pid>", and one
 * truncated, or wrote into, the file the other was renaming into place.
 * A thread id is unique among live threads, so each writer now renames a
 * whole file of its own and the last rename wins; a file left by a dead
 * writer under a reused id is truncated. Not mkostemp: its 0600 would
 * need a chmod that ignores the umask (0027 under our systemd units). */
int tt_fs_write_atomic(const char *path, const void *data, size_t len, char *err, size_t errlen) {
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)syscall(SYS_gettid));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, TT_FS_FILE_MODE);
    if (fd < 0) {
        FSET_ERR(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
        return TT_ESYS;
    }
    const char *step = NULL;
    if (write_all(fd, data, len) != 0)
        step = "write";
    else if (fsync(fd) != 0)
        step = "fsync";
    int saved = errno;
    close(fd);
    if (step == NULL && rename(tmp, path) != 0) {
        step = "rename";
        saved = errno;
    }
    if (step != NULL) {
        unlink(tmp);
        FSET_ERR(err, errlen, "%s of %s failed: %s", step, path, strerror(saved));
        errno = saved;
        return TT_ESYS;
    }
    if (fsync_dir_of(path) != 0) {
        FSET_ERR(err, errlen, "fsync of the directory of %s failed: %s", path, strerror(errno));
        return TT_ESYS;
    }
    return TT_OK;
}

int tt_fs_read_all(const char *path, size_t max, uint8_t **out, size_t *len, char *err,
                   size_t errlen) {
    *out = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        FSET_ERR(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return errno == ENOENT ? TT_ENOTFOUND : TT_ESYS;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || (size_t)st.st_size > max) {
        FSET_ERR(err, errlen, "%s: size %lld exceeds %zu bytes", path, (long long)st.st_size, max);
        close(fd);
        return TT_ETOOBIG;
    }
    uint8_t *buf = malloc((size_t)st.st_size + 1);
    if (buf == NULL) {
        close(fd);
        return TT_ENOMEM;
    }
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    *out = buf;
    *len = got;
    return TT_OK;
}

int tt_fs_mkdirs(const char *path, char *err, size_t errlen) {
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *p = buf + 1; *p != '\0'; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, TT_FS_DIR_MODE) != 0 && errno != EEXIST) {
            FSET_ERR(err, errlen, "mkdir %s: %s", buf, strerror(errno));
            return TT_ESYS;
        }
        *p = '/';
    }
    if (mkdir(buf, TT_FS_DIR_MODE) != 0 && errno != EEXIST) {
        FSET_ERR(err, errlen, "mkdir %s: %s", buf, strerror(errno));
        return TT_ESYS;
    }
    return TT_OK;
}

int tt_fs_check_writable_dir(const char *path, char *err, size_t errlen) {
    int rc = tt_fs_mkdirs(path, err, errlen);
    if (rc != TT_OK)
        return rc;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        FSET_ERR(err, errlen, "stat %s: %s", path, strerror(errno));
        return TT_ESYS;
    }
    if (!S_ISDIR(sb.st_mode)) { /* mkdir said EEXIST: a file of that name */
        errno = ENOTDIR;
        FSET_ERR(err, errlen, "%s: not a directory", path);
        return TT_ESYS;
    }
    char probe[4200];
    snprintf(probe, sizeof(probe), "%s/.tether-write-probe.%ld", path, (long)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, TT_FS_FILE_MODE);
    if (fd < 0 && errno == EEXIST) /* left by a process of this pid that was killed */
        fd = (unlink(probe) == 0)
                 ? open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, TT_FS_FILE_MODE)
                 : -1;
    if (fd < 0) {
        FSET_ERR(err, errlen, "cannot create a file in %s: %s", path, strerror(errno));
        return TT_ESYS;
    }
    close(fd);
    unlink(probe);
    return TT_OK;
}

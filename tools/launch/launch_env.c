/* launch_env: environment blocks, executable lookup, free ports, rmtree. */
#include "launch_env.h"
#include "tt_clock.h"
#include "tt_rng.h"
#include "tt_status.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ftw.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static size_t key_len(const char *kv) {
    const char *eq = strchr(kv, '=');
    return eq ? (size_t)(eq - kv) : strlen(kv);
}

/* 1 when `kv` has the same KEY as some entry of sets[from..]. */
static int overridden(const char *kv, const char *const *sets, size_t from, size_t nsets) {
    size_t k = key_len(kv);
    for (size_t i = from; i < nsets; i++) {
        if (key_len(sets[i]) == k && strncmp(sets[i], kv, k) == 0)
            return 1;
    }
    return 0;
}

int tt_launch_env_build(char ***out, char *const *base, const char *const *sets, size_t nsets) {
    size_t nbase = 0, used = 0;
    *out = NULL;
    for (size_t i = 0; i < nsets; i++) {
        if (key_len(sets[i]) == 0)
            return TT_EINVAL;
    }
    while (base != NULL && base[nbase] != NULL)
        nbase++;
    char **env = calloc(nbase + nsets + 1, sizeof(*env));
    if (env == NULL)
        return TT_ENOMEM;
    for (size_t i = 0; i < nbase + nsets; i++) {
        const char *kv = i < nbase ? base[i] : sets[i - nbase];
        size_t from = i < nbase ? 0 : i - nbase + 1;
        if (overridden(kv, sets, from, nsets) || strchr(kv, '=') == NULL)
            continue; /* replaced later, or a bare KEY: removed */
        if ((env[used++] = strdup(kv)) == NULL) {
            tt_launch_env_free(&env);
            return TT_ENOMEM;
        }
    }
    *out = env;
    return TT_OK;
}

void tt_launch_env_free(char ***env) {
    if (env == NULL || *env == NULL)
        return;
    for (char **e = *env; *e != NULL; e++)
        free(*e);
    free(*env);
    *env = NULL;
}

static int is_exe(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

static int try_dir(char *out, size_t n, const char *dir, size_t dlen, const char *name) {
    if (dlen == 0) {
        dir = ".";
        dlen = 1;
    }
    int w = snprintf(out, n, "%.*s/%s", (int)dlen, dir, name);
    return w > 0 && (size_t)w < n && is_exe(out);
}

int tt_launch_find_exe(char *out, size_t n, const char *name, const char *const *dirs, size_t ndirs,
                       const char *path_env) {
    if (strchr(name, '/') != NULL) {
        if (strlen(name) >= n)
            return TT_EINVAL;
        snprintf(out, n, "%s", name);
        return is_exe(out) ? TT_OK : TT_ENOTFOUND;
    }
    for (size_t i = 0; i < ndirs; i++) {
        if (dirs[i] != NULL && try_dir(out, n, dirs[i], strlen(dirs[i]), name))
            return TT_OK;
    }
    for (const char *p = path_env; p != NULL && *p != '\0';) {
        const char *colon = strchr(p, ':');
        size_t len = colon ? (size_t)(colon - p) : strlen(p);
        if (try_dir(out, n, p, len, name))
            return TT_OK;
        p = colon ? colon + 1 : NULL;
    }
    return TT_ENOTFOUND;
}

void tt_launch_dirname(char *out, size_t n, const char *path) {
    const char *slash = strrchr(path, '/');
    if (slash == NULL)
        snprintf(out, n, ".");
    else if (slash == path)
        snprintf(out, n, "/");
    else
        snprintf(out, n, "%.*s", (int)(slash - path), path);
}

/* Low end of the kernel's ephemeral (auto-bound) port range. */
static int ephemeral_low(void) {
    int lo = 32768, hi = 0;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "re");
    if (f != NULL) {
        if (fscanf(f, "%d %d", &lo, &hi) != 2 || lo < 1024)
            lo = 32768;
        fclose(f);
    }
    return lo;
}

static int try_bind(int fd, struct sockaddr_in *sa, int port) {
    sa->sin_port = htons((uint16_t)port);
    return bind(fd, (struct sockaddr *)sa, sizeof(*sa));
}

/* Why a claim: two launchers on one host (two jobs, tests run in
 * parallel) pick from the same range, and both may find one port free
 * before either child binds it; one child then cannot bind its ring, or
 * worse, a rank of the other job connects to it. The claim is an flock on
 * <TMPDIR or /tmp>/tether-ports/<port>: the kernel drops it when the
 * launcher exits, however it exits. The holder removes the file when it
 * gives the port up (tt_launch_release_port), so the directory holds only
 * live claims and those of processes that died. Removing a lock file
 * races with a process that opened it just before: that one may then lock
 * the removed file while a third locks a new one under the same name. So
 * a lock counts only if the name still leads to the locked file; else
 * the port counts as held. Returns the held descriptor, -1 when another
 * launcher holds the port, -2 when no claim can be made here (no writable
 * directory): the port is then taken unclaimed, as before. */
static void claim_path(char *path, size_t n, int port) {
    const char *tmp = getenv("TMPDIR");
    snprintf(path, n, "%s/tether-ports/%d", tmp != NULL && tmp[0] == '/' ? tmp : "/tmp", port);
}

static int claim_port(int port) {
    char path[600];
    claim_path(path, sizeof(path), port);
    char *slash = strrchr(path, '/');
    *slash = '\0';
    if (mkdir(path, 0777) == 0)
        chmod(path, 01777); /* every user's launchers share it; umask trimmed it */
    *slash = '/';
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd < 0)
        return -2;
    struct stat mine, named;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
        if (fstat(fd, &mine) == 0 && stat(path, &named) == 0 && mine.st_ino == named.st_ino &&
            mine.st_dev == named.st_dev)
            return fd;
        close(fd); /* locked a file its holder had just removed */
        return -1;
    }
    int held = errno == EWOULDBLOCK;
    close(fd);
    return held ? -1 : -2;
}

void tt_launch_release_port(int port, int claim) {
    if (claim < 0)
        return;
    char path[600];
    claim_path(path, sizeof(path), port);
    unlink(path); /* before the unlock: nobody can lock it in between */
    close(claim);
}

/* Why below the ephemeral range: a worker binds its ring port again at
 * every generation, and between two binds the kernel may hand a port of
 * that range to any process's outgoing connection (a ZeroMQ reconnect, a
 * tetherctl query), after which the bind fails with EADDRINUSE. Ports
 * below the range are never auto-assigned. Falls back to port 0. */
int tt_launch_free_port(const char *host, int *port, int *claim, char *err, size_t errlen) {
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t len = sizeof(sa);
    int rc = TT_ESYS;
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        snprintf(err, errlen, "host '%s' is not an IPv4 address", host);
        return TT_EINVAL;
    }
    int hi = ephemeral_low() - 1, lo = hi - 8191 < 10000 ? 10000 : hi - 8191, found = 0, held = -1;
    uint64_t st = tt_rng_derive((uint64_t)getpid(), tt_clock_mono_ns());
    for (int i = 0; i < 64 && hi > lo && !found; i++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int p = lo + (int)(tt_rng_next(&st) % (uint64_t)(hi - lo + 1));
        found = fd >= 0 && try_bind(fd, &sa, p) == 0 ? p : 0;
        if (fd >= 0)
            close(fd);
        if (found && (held = claim_port(p)) == -1)
            found = 0; /* another launcher's: its child may not have bound it yet */
    }
    if (claim != NULL)
        *claim = held >= 0 ? held : -1;
    else
        tt_launch_release_port(found, held);
    int fd = found ? -1 : socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (found) {
        *port = found;
        rc = TT_OK;
    } else if (fd >= 0 && try_bind(fd, &sa, 0) == 0 &&
               getsockname(fd, (struct sockaddr *)&sa, &len) == 0) {
        *port = ntohs(sa.sin_port);
        rc = TT_OK;
    } else {
        snprintf(err, errlen, "cannot find a free port on %s: %s", host, strerror(errno));
    }
    if (fd >= 0)
        close(fd);
    return rc;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path) == 0 || errno == ENOENT ? 0 : -1;
}

int tt_launch_rmtree(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? TT_OK : TT_EIO;
    return nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS) == 0 ? TT_OK : TT_EIO;
}

/* tt_ckpt_dir: latest pointer, listing, retention and verification over a
 * checkpoint root. Why `latest` is only a hint for listing: the manifests
 * are the truth (a crash between the manifest rename and the pointer
 * rename leaves `latest` one behind), so listing scans the directories and
 * `latest` only protects its target from retention. */
#include "tt_ckpt_dir.h"
#include "tt_ckpt.h"
#include "tt_reshard.h"
#include "tt_fsutil.h"
#include "tt_log.h"
#include "tt_status.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DSET_ERR(err, errlen, ...)                                                                 \
    do {                                                                                           \
        if ((err) != NULL && (errlen) > 0)                                                         \
            snprintf((err), (errlen), __VA_ARGS__);                                                \
    } while (0)

static int id_ok(const char *id) {
    return id != NULL && strlen(id) < TT_MF_ID_MAX && tt_ckpt_name_ok(id) &&
           strcmp(id, TT_CKPT_LATEST_FILE) != 0;
}

static int fsync_path(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

int tt_ckpt_dir_create(const char *root, const char *id, char *path, char *err, size_t errlen) {
    char buf[TT_CKPT_PATH_MAX];
    if (!id_ok(id)) {
        DSET_ERR(err, errlen, "checkpoint id '%.64s' is not 1..%u characters of [A-Za-z0-9._-]",
                 id ? id : "", TT_MF_ID_MAX - 1);
        return TT_EINVAL;
    }
    int rc = tt_fs_mkdirs(root, err, errlen);
    if (rc != TT_OK)
        return rc;
    snprintf(buf, sizeof(buf), "%s/%s", root, id);
    if (mkdir(buf, TT_FS_DIR_MODE) != 0) {
        DSET_ERR(err, errlen, "mkdir %s: %s", buf, strerror(errno));
        return errno == EEXIST ? TT_EEXIST : TT_ESYS;
    }
    if (fsync_path(root) != 0) {
        DSET_ERR(err, errlen, "fsync of %s failed: %s", root, strerror(errno));
        return TT_ESYS;
    }
    if (path != NULL)
        snprintf(path, TT_CKPT_PATH_MAX, "%s", buf);
    return TT_OK;
}

int tt_ckpt_latest_write(const char *root, const char *id, char *err, size_t errlen) {
    char path[TT_CKPT_PATH_MAX], line[TT_MF_ID_MAX + 1];
    if (!id_ok(id)) {
        DSET_ERR(err, errlen, "checkpoint id '%.64s' is not valid", id ? id : "");
        return TT_EINVAL;
    }
    snprintf(path, sizeof(path), "%s/%s", root, TT_CKPT_LATEST_FILE);
    int n = snprintf(line, sizeof(line), "%s\n", id);
    return tt_fs_write_atomic(path, line, (size_t)n, err, errlen);
}

int tt_ckpt_latest_read(const char *root, char *id, char *err, size_t errlen) {
    char path[TT_CKPT_PATH_MAX];
    uint8_t *buf = NULL;
    size_t len = 0;
    id[0] = '\0';
    snprintf(path, sizeof(path), "%s/%s", root, TT_CKPT_LATEST_FILE);
    int rc = tt_fs_read_all(path, TT_MF_ID_MAX + 1, &buf, &len, err, errlen);
    if (rc == TT_ETOOBIG)
        rc = TT_ECORRUPT;
    if (rc != TT_OK) {
        free(buf);
        return rc;
    }
    if (len > 0 && buf[len - 1] == '\n')
        len--;
    buf[len] = '\0';
    if (strlen((char *)buf) != len || !id_ok((char *)buf)) {
        DSET_ERR(err, errlen, "%s does not hold one checkpoint id", path);
        rc = TT_ECORRUPT;
    } else {
        memcpy(id, buf, len + 1);
    }
    free(buf);
    return rc;
}

/* ---- listing ---- */

static int cmp_entry(const void *a, const void *b) {
    const tt_ckpt_entry_t *x = a, *y = b;
    if (x->step != y->step)
        return x->step < y->step ? -1 : 1;
    if (x->created_unix_ms != y->created_unix_ms)
        return x->created_unix_ms < y->created_unix_ms ? -1 : 1;
    return strcmp(x->id, y->id);
}

/* Fills *e when "<root>/<name>" is a committed checkpoint; 0 or -1. */
static int load_entry(const char *root, const char *name, tt_ckpt_entry_t *e) {
    char dir[TT_CKPT_PATH_MAX], why[600] = "";
    tt_manifest_t m;
    if (!id_ok(name))
        return -1;
    snprintf(dir, sizeof(dir), "%s/%s", root, name);
    if (tt_manifest_load(dir, &m, why, sizeof(why)) != TT_OK) {
        TT_DEBUG("ckpt", "%s is not a committed checkpoint: %s", dir, why);
        return -1;
    }
    memset(e, 0, sizeof(*e));
    snprintf(e->id, sizeof(e->id), "%s", name);
    e->step = m.step;
    e->epoch = m.epoch;
    e->created_unix_ms = m.created_unix_ms;
    e->duration_ms = m.duration_ms;
    for (uint32_t i = 0; i < m.nparts; i++)
        e->bytes += m.parts[i].size;
    tt_manifest_free(&m);
    return 0;
}

static int push_entry(tt_ckpt_entry_t **v, size_t *n, size_t *cap, const tt_ckpt_entry_t *e) {
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 16;
        tt_ckpt_entry_t *nv = realloc(*v, nc * sizeof(*nv));
        if (nv == NULL)
            return TT_ENOMEM;
        *v = nv;
        *cap = nc;
    }
    (*v)[(*n)++] = *e;
    return TT_OK;
}

int tt_ckpt_list(const char *root, tt_ckpt_entry_t **out, size_t *n, char *err, size_t errlen) {
    *out = NULL;
    *n = 0;
    DIR *d = opendir(root);
    if (d == NULL) {
        if (errno == ENOENT)
            return TT_OK;
        DSET_ERR(err, errlen, "cannot list %s: %s", root, strerror(errno));
        return TT_ESYS;
    }
    size_t cap = 0;
    int rc = TT_OK;
    struct dirent *de;
    while (rc == TT_OK && (de = readdir(d)) != NULL) {
        tt_ckpt_entry_t e;
        if (load_entry(root, de->d_name, &e) == 0)
            rc = push_entry(out, n, &cap, &e);
    }
    closedir(d);
    if (rc != TT_OK) {
        free(*out);
        *out = NULL;
        *n = 0;
        return rc;
    }
    if (*n > 1)
        qsort(*out, *n, sizeof(**out), cmp_entry);
    return TT_OK;
}

/* ---- retention ---- */

/* The files of `dir` (a checkpoint directory holds no subdirectories),
 * then the directory. */
static int remove_dir(const char *root, const char *dir, char *err, size_t errlen) {
    char path[TT_CKPT_PATH_MAX + TT_CKPT_NAME_MAX + 2];
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d != NULL && (de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        unlink(path);
    }
    if (d != NULL)
        closedir(d);
    if (rmdir(dir) != 0) {
        DSET_ERR(err, errlen, "cannot remove %s: %s", dir, strerror(errno));
        return TT_ESYS;
    }
    fsync_path(root);
    return TT_OK;
}

/* MANIFEST first: from that instant the checkpoint no longer exists. */
static int remove_checkpoint(const char *root, const char *id, char *err, size_t errlen) {
    char dir[TT_CKPT_PATH_MAX], path[TT_CKPT_PATH_MAX + TT_CKPT_NAME_MAX + 2];
    snprintf(dir, sizeof(dir), "%s/%s", root, id);
    snprintf(path, sizeof(path), "%s/%s", dir, TT_MANIFEST_FILE);
    if (unlink(path) != 0 || fsync_path(dir) != 0) {
        DSET_ERR(err, errlen, "cannot un-commit %s: %s", dir, strerror(errno));
        return TT_ESYS;
    }
    int rc = remove_dir(root, dir, err, errlen);
    if (rc == TT_OK)
        TT_INFO("ckpt", "retention removed checkpoint %s", dir);
    return rc;
}

/* The step of a "step-<digits>" id (the trainer's names), or -1. */
static int64_t id_step(const char *id) {
    const char *d = id + 5;
    size_t n = strlen(id) > 5 ? strlen(d) : 0;
    if (strncmp(id, "step-", 5) != 0 || n == 0 || n > 18 || strspn(d, "0123456789") != n)
        return -1;
    return (int64_t)strtoll(d, NULL, 10);
}

/* Why leftovers go, and which: a checkpoint that never committed (a writer
 * killed mid-write, a commit the coordinator refused, an abort after a
 * regroup) leaves its directory and parts, as large as a checkpoint, and
 * nothing would ever load or remove them. Only trainer-named directories
 * with no MANIFEST file at all, and only below the step of the checkpoint
 * `latest` names: retention runs right after a commit moved `latest`, at
 * most one checkpoint of a job is in flight and it is taken at a later
 * step, so no write in progress can be among them. A directory with a
 * MANIFEST that does not load is left for an operator to look at. */
static int remove_leftovers(const char *root, int64_t below, size_t *gone, char *err,
                            size_t errlen) {
    DIR *d = opendir(root);
    struct dirent *de;
    int rc = TT_OK;
    char dir[TT_CKPT_PATH_MAX], path[TT_CKPT_PATH_MAX + TT_CKPT_NAME_MAX + 2];
    struct stat st;
    while (rc == TT_OK && d != NULL && (de = readdir(d)) != NULL) {
        int64_t step = id_ok(de->d_name) ? id_step(de->d_name) : -1;
        if (step < 0 || step >= below)
            continue;
        snprintf(dir, sizeof(dir), "%s/%s", root, de->d_name);
        snprintf(path, sizeof(path), "%s/%s", dir, TT_MANIFEST_FILE);
        if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || lstat(path, &st) == 0 || errno != ENOENT)
            continue;
        rc = remove_dir(root, dir, err, errlen);
        if (rc == TT_OK) {
            (*gone)++;
            TT_INFO("ckpt", "retention removed uncommitted leftover %s", dir);
        }
    }
    if (d != NULL)
        closedir(d);
    return rc;
}

int tt_ckpt_retain(const char *root, size_t keep, size_t *removed, char *err, size_t errlen) {
    tt_ckpt_entry_t *v = NULL;
    size_t n = 0, gone = 0;
    char latest[TT_MF_ID_MAX] = "";
    if (removed != NULL)
        *removed = 0;
    if (keep == 0) {
        DSET_ERR(err, errlen, "retention must keep at least one checkpoint");
        return TT_EINVAL;
    }
    int rc = tt_ckpt_list(root, &v, &n, err, errlen);
    if (rc != TT_OK)
        return rc;
    if (tt_ckpt_latest_read(root, latest, NULL, 0) != TT_OK)
        latest[0] = '\0';
    int64_t latest_step = -1;
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i].id, latest) == 0)
            latest_step = (int64_t)v[i].step;
    for (size_t i = 0; rc == TT_OK && i + keep < n; i++) {
        if (strcmp(v[i].id, latest) == 0)
            continue;
        rc = remove_checkpoint(root, v[i].id, err, errlen);
        gone += rc == TT_OK;
    }
    free(v);
    if (rc == TT_OK && latest_step > 0)
        rc = remove_leftovers(root, latest_step, &gone, err, errlen);
    if (removed != NULL)
        *removed = gone;
    return rc;
}

/* ---- verification ---- */

/* The header must describe the part the manifest lists, or a part file
 * from another checkpoint copied in place would pass the CRC check. */
static int compare_header(const char *path, const tt_mf_part_t *p, char *msg, size_t cap) {
    tt_ckpt_reader_t *r = NULL;
    int rc = tt_ckpt_reader_create(&r, path, msg, cap);
    if (rc != TT_OK)
        return rc;
    const tt_ckpt_part_info_t *h = tt_ckpt_reader_info(r);
    const tt_ckpt_range_t *hr = tt_ckpt_reader_ranges(r);
    int same = h->kind == p->kind && h->planes == p->planes && h->nranges == p->nranges;
    for (uint32_t i = 0; same && i < p->nranges; i++)
        same = hr[i].offset == p->ranges[i].offset && hr[i].length == p->ranges[i].length;
    if (!same) {
        snprintf(msg, cap,
                 "part %s: header (kind %u, %u planes, %u ranges) disagrees with the "
                 "manifest (kind %u, %u planes, %u ranges)",
                 p->file, h->kind, h->planes, h->nranges, p->kind, p->planes, p->nranges);
        rc = TT_ECORRUPT;
    }
    tt_ckpt_reader_destroy(&r);
    return rc;
}

static void verify_part(const char *dir, const tt_mf_part_t *p, tt_ckpt_part_check_t *c) {
    char path[TT_CKPT_PATH_MAX + TT_CKPT_NAME_MAX + 2];
    tt_ckpt_expect_t exp = {p->size, p->crc32c};
    tt_ckpt_part_info_t info;
    struct stat st;
    snprintf(c->file, sizeof(c->file), "%s", p->file);
    snprintf(path, sizeof(path), "%s/%s", dir, p->file);
    c->rc = tt_ckpt_part_verify(path, p->file, &exp, &info, c->msg, sizeof(c->msg));
    c->size = stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
    c->crc32c = info.crc32c;
    if (c->rc == TT_OK)
        c->rc = compare_header(path, p, c->msg, sizeof(c->msg));
    if (c->rc == TT_OK)
        c->msg[0] = '\0';
}

int tt_ckpt_verify(const char *dir, tt_ckpt_report_t *rep) {
    memset(rep, 0, sizeof(*rep));
    rep->rc = tt_manifest_load(dir, &rep->manifest, rep->msg, sizeof(rep->msg));
    if (rep->rc != TT_OK)
        return rep->rc;
    rep->parts = calloc(rep->manifest.nparts, sizeof(*rep->parts));
    if (rep->parts == NULL)
        return rep->rc = TT_ENOMEM;
    rep->nparts = rep->manifest.nparts;
    uint32_t bad = 0;
    for (uint32_t i = 0; i < rep->nparts; i++) {
        verify_part(dir, &rep->manifest.parts[i], &rep->parts[i]);
        if (rep->parts[i].rc != TT_OK && bad++ == 0) {
            rep->rc = rep->parts[i].rc;
            snprintf(rep->msg, sizeof(rep->msg), "%s", rep->parts[i].msg);
        }
    }
    if (bad > 1) {
        size_t l = strlen(rep->msg);
        snprintf(rep->msg + l, sizeof(rep->msg) - l, " (and %u more bad parts)", bad - 1);
    }
    return rep->rc;
}

void tt_ckpt_report_free(tt_ckpt_report_t *rep) {
    if (rep == NULL)
        return;
    tt_manifest_free(&rep->manifest);
    free(rep->parts);
    memset(rep, 0, sizeof(*rep));
}

int tt_ckpt_latest_valid(const char *root, char *id, char *err, size_t errlen) {
    tt_ckpt_entry_t *v = NULL;
    size_t n = 0, used = 0;
    id[0] = '\0';
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    int rc = tt_ckpt_list(root, &v, &n, err, errlen);
    if (rc != TT_OK)
        return rc;
    rc = TT_ENOTFOUND;
    for (size_t i = n; i-- > 0 && rc == TT_ENOTFOUND;) {
        char dir[TT_CKPT_PATH_MAX];
        tt_ckpt_report_t rep;
        snprintf(dir, sizeof(dir), "%s/%s", root, v[i].id);
        if (tt_ckpt_verify(dir, &rep) == TT_OK) {
            snprintf(id, TT_MF_ID_MAX, "%s", v[i].id);
            rc = TT_OK;
        } else if (err != NULL && used + 1 < errlen) {
            used += (size_t)snprintf(err + used, errlen - used, "%s%s: %s", used ? "; " : "",
                                     v[i].id, rep.msg);
            used = used < errlen ? used : errlen - 1;
        }
        tt_ckpt_report_free(&rep);
    }
    free(v);
    return rc;
}

int tt_ckpt_read_plane(const tt_manifest_t *m, const char *dir, uint32_t state, void *dst,
                       uint64_t bytes, char *err, size_t errlen) {
    tt_reshard_seg_t *segs = NULL;
    tt_reshard_read_t *reads = NULL;
    size_t nsegs = 0, nreads = 0;
    tt_ckpt_reader_t **rd = calloc(m->nparts ? m->nparts : 1, sizeof(*rd));
    int rc = rd != NULL ? tt_manifest_layout(m, state, &segs, &nsegs) : TT_ENOMEM;
    if (rc == TT_ENOTFOUND)
        snprintf(err, errlen, "checkpoint %s holds no %s plane", m->id, tt_state_name(state));
    if (rc == TT_OK)
        rc = tt_reshard_plan(segs, nsegs, 0, bytes, &reads, &nreads, err, errlen);
    for (size_t i = 0; rc == TT_OK && i < nreads; i++) {
        const tt_reshard_read_t *r = &reads[i];
        if (rd[r->part] == NULL) {
            char path[TT_CKPT_PATH_MAX + TT_CKPT_NAME_MAX];
            snprintf(path, sizeof(path), "%s/%s", dir, m->parts[r->part].file);
            rc = tt_ckpt_reader_create(&rd[r->part], path, err, errlen);
        }
        if (rc == TT_OK)
            rc = tt_ckpt_reader_read(rd[r->part], r->part_offset, (uint8_t *)dst + r->dest_offset,
                                     (size_t)r->length);
    }
    for (uint32_t i = 0; rd != NULL && i < m->nparts; i++)
        tt_ckpt_reader_destroy(&rd[i]);
    free(rd);
    free(segs);
    free(reads);
    return rc;
}

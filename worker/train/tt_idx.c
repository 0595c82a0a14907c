/* tt_idx: IDX parsing and gzip reading. Every check produces a message that
 * names the file, the value found and the value expected, because a bad
 * dataset is an operator problem that must be fixable from the message. It
 * does not keep state between calls or cache files. */
#include "tt_idx.h"

#include "tt_log.h"
#include "tt_status.h"
#include "tt_tsan.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define IDX_TYPE_UBYTE 0x08
#define IDX_IMAGE_SIDE 28

static int idx_fail(int rc, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int idx_fail(int rc, char *err, size_t errlen, const char *fmt, ...) {
    if (err != NULL && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return rc;
}

static uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

int tt_idx_parse_header(const uint8_t *buf, size_t len, tt_idx_header_t *out, char *err,
                        size_t errlen) {
    memset(out, 0, sizeof(*out));
    if (len < 4)
        return idx_fail(TT_ECORRUPT, err, errlen, "truncated header: %zu bytes, need at least 4",
                        len);
    out->magic = be32(buf);
    if (buf[0] != 0 || buf[1] != 0 || buf[2] != IDX_TYPE_UBYTE)
        return idx_fail(TT_ECORRUPT, err, errlen,
                        "bad magic 0x%08x: expected 0x000008NN (uint8 IDX)", out->magic);
    out->ndim = buf[3];
    if (out->ndim < 1 || out->ndim > TT_IDX_MAX_DIMS)
        return idx_fail(TT_ECORRUPT, err, errlen, "bad number of dimensions %d: expected 1..%d",
                        out->ndim, TT_IDX_MAX_DIMS);
    out->header_len = 4 + 4 * (size_t)out->ndim;
    if (len < out->header_len)
        return idx_fail(TT_ECORRUPT, err, errlen,
                        "truncated header: %zu bytes, need %zu for %d dims", len, out->header_len,
                        out->ndim);
    size_t total = 1;
    for (int i = 0; i < out->ndim; i++) {
        out->dims[i] = be32(buf + 4 + 4 * (size_t)i);
        if (out->dims[i] != 0 && total > SIZE_MAX / 4 / out->dims[i])
            return idx_fail(TT_ECORRUPT, err, errlen, "dimensions overflow the address space");
        total *= out->dims[i];
    }
    out->payload_len = total;
    return TT_OK;
}

/* Parses the header and checks the magic and the payload length against
 * the buffer: shared by the image and label decoders. */
static int idx_check(const uint8_t *buf, size_t len, const char *name, uint32_t magic,
                     tt_idx_header_t *h, char *err, size_t errlen) {
    char why[160];
    if (tt_idx_parse_header(buf, len, h, why, sizeof(why)) < 0)
        return idx_fail(TT_ECORRUPT, err, errlen, "%s: %s", name, why);
    const char *kind = magic == TT_IDX_MAGIC_IMAGES ? "images" : "labels";
    if (h->magic != magic)
        return idx_fail(TT_ECORRUPT, err, errlen, "%s: bad magic 0x%08x, expected 0x%08x for %s",
                        name, h->magic, magic, kind);
    size_t have = len - h->header_len;
    if (have < h->payload_len)
        return idx_fail(TT_ECORRUPT, err, errlen,
                        "%s: truncated data: %zu bytes, header promises %zu", name, have,
                        h->payload_len);
    if (have > h->payload_len)
        return idx_fail(TT_ECORRUPT, err, errlen, "%s: %zu trailing bytes after the %zu data bytes",
                        name, have - h->payload_len, h->payload_len);
    return TT_OK;
}

/* Pixel p as the model sees it, (float)p / 255.0f, folded by the compiler:
 * a table lookup per input instead of a division. */
#define PX(p)   ((float)(p) / 255.0f)
#define PX4(p)  PX(p), PX((p) + 1), PX((p) + 2), PX((p) + 3)
#define PX16(p) PX4(p), PX4((p) + 4), PX4((p) + 8), PX4((p) + 12)
#define PX64(p) PX16(p), PX16((p) + 16), PX16((p) + 32), PX16((p) + 48)
static const float PIXEL[256] = {PX64(0), PX64(64), PX64(128), PX64(192)};

/* Runs every step on a whole batch: out is the caller's own buffer and the
 * set is read-only once loaded, so TSan has nothing to find here. */
TT_TSAN_SKIP void tt_idx_rows(const tt_idx_set_t *set, size_t first, size_t n, float *out) {
    size_t d = (size_t)set->rows * set->cols;
    if (set->pixels == NULL) {
        memcpy(out, set->images + first * d, n * d * sizeof(float));
        return;
    }
    const uint8_t *p = set->pixels + first * d;
    for (size_t i = 0; i < n * d; i++)
        out[i] = PIXEL[p[i]];
}

/* p cut down to n bytes; p itself when realloc cannot. */
static uint8_t *shrink(uint8_t *p, size_t n) {
    uint8_t *fit = realloc(p, n);
    if (fit == NULL)
        return p;
    return fit;
}

/* The decoder; with `own` (buf itself, which the caller hands over) the
 * pixels are moved to its start and it becomes set->pixels, so the loader
 * holds one copy of the images, not two, at its peak. */
static int decode_images(const uint8_t *buf, size_t len, const char *name, size_t keep,
                         tt_idx_set_t *set, uint8_t *own, char *err, size_t errlen) {
    tt_idx_header_t h;
    int rc = idx_check(buf, len, name, TT_IDX_MAGIC_IMAGES, &h, err, errlen);
    if (rc < 0)
        return rc;
    if (h.dims[1] != IDX_IMAGE_SIDE || h.dims[2] != IDX_IMAGE_SIDE || h.dims[0] == 0)
        return idx_fail(TT_ECORRUPT, err, errlen,
                        "%s: wrong dims %ux%ux%u, expected Nx%dx%d with N>0", name, h.dims[0],
                        h.dims[1], h.dims[2], IDX_IMAGE_SIDE, IDX_IMAGE_SIDE);
    size_t count = keep != 0 && keep < h.dims[0] ? keep : h.dims[0];
    size_t n = count * h.dims[1] * h.dims[2];
    uint8_t *px = own != NULL ? own : malloc(n);
    if (px == NULL)
        return idx_fail(TT_ENOMEM, err, errlen, "%s: out of memory", name);
    memmove(px, buf + h.header_len, n);
    set->pixels = own != NULL ? shrink(own, n) : px;
    set->count = count;
    set->in_file = h.dims[0];
    set->rows = h.dims[1];
    set->cols = h.dims[2];
    return TT_OK;
}

int tt_idx_decode_images(const uint8_t *buf, size_t len, const char *name, size_t keep,
                         tt_idx_set_t *set, char *err, size_t errlen) {
    return decode_images(buf, len, name, keep, set, NULL, err, errlen);
}

int tt_idx_decode_labels(const uint8_t *buf, size_t len, const char *name, tt_idx_set_t *set,
                         char *err, size_t errlen) {
    tt_idx_header_t h;
    int rc = idx_check(buf, len, name, TT_IDX_MAGIC_LABELS, &h, err, errlen);
    if (rc < 0)
        return rc;
    size_t images = set->in_file != 0 ? set->in_file : set->count;
    if (images != 0 && h.dims[0] != images)
        return idx_fail(TT_ECORRUPT, err, errlen,
                        "%s: %u labels but the images file has %zu images", name, h.dims[0],
                        images);
    const uint8_t *src = buf + h.header_len;
    for (size_t i = 0; i < h.payload_len; i++) {
        if (src[i] >= 10)
            return idx_fail(TT_ECORRUPT, err, errlen, "%s: label %u at index %zu, expected 0..9",
                            name, src[i], i);
    }
    size_t count = set->count != 0 ? set->count : h.dims[0];
    uint8_t *lab = malloc(count ? count : 1);
    if (lab == NULL)
        return idx_fail(TT_ENOMEM, err, errlen, "%s: out of memory", name);
    memcpy(lab, src, count);
    set->labels = lab;
    set->count = count;
    return TT_OK;
}

/* Doubles the buffer when it is full. */
static int gz_grow(uint8_t **b, size_t *cap, size_t n) {
    if (n < *cap)
        return TT_OK;
    uint8_t *nb = *cap > SIZE_MAX / 2 ? NULL : realloc(*b, *cap * 2);
    if (nb == NULL)
        return TT_ENOMEM;
    *b = nb;
    *cap *= 2;
    return TT_OK;
}

/* zlib reports a cut-off stream (Z_BUF_ERROR) or bad data (Z_DATA_ERROR)
 * through gzerror, whether gzread returned -1 or a short 0 at the end. */
static int gz_status(gzFile gz, const char *path, char *err, size_t errlen) {
    int zerr;
    const char *msg = gzerror(gz, &zerr);
    if (zerr == Z_OK)
        return TT_OK;
    return idx_fail(zerr == Z_ERRNO ? TT_EIO : TT_ECORRUPT, err, errlen,
                    "%s: truncated or corrupt gzip stream: %s", path, msg);
}

/* Reads the whole decompressed stream into a buffer of `hint` bytes,
 * growing it geometrically if that was short. gzread passes non-gzip input
 * through unchanged, so gzdirect after the first read is what tells a
 * plain file apart. */
static int gz_slurp(gzFile gz, const char *path, size_t hint, uint8_t **buf, size_t *len, char *err,
                    size_t errlen) {
    size_t cap = hint, n = 0;
    uint8_t *b = malloc(cap);
    int rc = b != NULL ? TT_OK : TT_ENOMEM, got = 1;
    while (rc == TT_OK && got > 0 && (rc = gz_grow(&b, &cap, n)) == TT_OK) {
        size_t want = cap - n > (1u << 30) ? (1u << 30) : cap - n;
        got = gzread(gz, b + n, (unsigned)want);
        if (got > 0 && n == 0 && gzdirect(gz))
            rc = idx_fail(TT_ECORRUPT, err, errlen, "%s: not a gzip file (expected a .gz IDX file)",
                          path);
        n += got > 0 ? (size_t)got : 0;
    }
    if (rc == TT_ENOMEM)
        idx_fail(rc, err, errlen, "%s: out of memory", path);
    else if (rc == TT_OK)
        rc = gz_status(gz, path, err, errlen);
    if (rc < 0) {
        free(b);
        return rc;
    }
    *buf = b;
    *len = n;
    return TT_OK;
}

/* A gzip file ends with its uncompressed size mod 2^32 (ISIZE): one
 * allocation of that size instead of doubling and copying 47 MB of images
 * (which a sanitizer build pays for dearly in every process). Only a hint:
 * a wrong one (not gzip, multiple members, a damaged trailer) costs a grow
 * or some memory, never a wrong result; capped at 1 GiB. */
static size_t size_hint(int fd) {
    uint8_t t[4];
    off_t end = lseek(fd, 0, SEEK_END);
    if (end < 4 || pread(fd, t, 4, end - 4) != 4 || lseek(fd, 0, SEEK_SET) != 0)
        return 1 << 20;
    size_t isize = (size_t)t[0] | (size_t)t[1] << 8 | (size_t)t[2] << 16 | (size_t)t[3] << 24;
    if (isize < (1u << 20) || isize >= (1u << 30))
        return 1 << 20;
    return isize + 1; /* the read that returns 0 needs no grow */
}

int tt_idx_read_gz(const char *path, uint8_t **buf, size_t *len, char *err, size_t errlen) {
    *buf = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return idx_fail(e == ENOENT ? TT_ENOTFOUND : TT_EIO, err, errlen, "%s: cannot open: %s",
                        path, strerror(e));
    }
    size_t hint = size_hint(fd);
    gzFile gz = gzdopen(fd, "rb"); /* owns fd from here, also on failure to read */
    if (gz == NULL) {
        close(fd);
        return idx_fail(TT_EIO, err, errlen, "%s: gzdopen failed", path);
    }
    gzbuffer(gz, 1 << 18);
    int rc = gz_slurp(gz, path, hint, buf, len, err, errlen);
    gzclose(gz);
    return rc;
}

/* Reads and decodes one file of a split: the images file when `images`,
 * else the labels file. */
static int idx_load_one(const char *dir, const char *prefix, int images, size_t keep,
                        tt_idx_set_t *set, char *err, size_t errlen) {
    char path[4096];
    int w = snprintf(path, sizeof(path), "%s/%s-%s-ubyte.gz", dir, prefix,
                     images ? "images-idx3" : "labels-idx1");
    if (w < 0 || (size_t)w >= sizeof(path))
        return idx_fail(TT_EINVAL, err, errlen, "data path too long: %s", dir);
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = tt_idx_read_gz(path, &buf, &len, err, errlen);
    if (rc == TT_OK && images) {
        rc = decode_images(buf, len, path, keep, set, buf, err, errlen);
        if (rc == TT_OK)
            return TT_OK; /* buf is set->pixels now */
    } else if (rc == TT_OK) {
        rc = tt_idx_decode_labels(buf, len, path, set, err, errlen);
    }
    free(buf);
    return rc;
}

int tt_idx_load(const char *dir, const char *prefix, size_t keep, tt_idx_set_t *set, char *err,
                size_t errlen) {
    char local[512];
    int quiet = err != NULL && errlen > 0; /* the caller says it */
    if (!quiet) {
        err = local;
        errlen = sizeof(local);
    }
    err[0] = '\0';
    int rc;
    TT_CHECK_GOTO(idx_load_one(dir, prefix, 1, keep, set, err, errlen), rc, fail);
    TT_CHECK_GOTO(idx_load_one(dir, prefix, 0, 0, set, err, errlen), rc, fail);
    return TT_OK;
fail:
    if (!quiet)
        TT_WARN("data", "%s", err);
    tt_idx_free(set);
    return rc;
}

void tt_idx_free(tt_idx_set_t *set) {
    if (set == NULL)
        return;
    free(set->images);
    free(set->pixels);
    free(set->labels);
    memset(set, 0, sizeof(*set));
}

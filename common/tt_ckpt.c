/* tt_ckpt: part files. Why a trailer and not a CRC in the header: the
 * writer streams, so the CRC is known only at the end, and appending it
 * keeps every byte written exactly once and in order. Why a separate
 * header CRC: a damaged length field would otherwise be reported as a
 * truncated payload; with it the message says the header itself is bad.
 * The bytes go out through tt_ckpt_sink (O_DIRECT, double-buffered, an I/O
 * thread), so computing the CRC overlaps writing the previous buffer. */
#include "tt_ckpt.h"
#include "tt_ckpt_sink.h"
#include "tt_crc32c.h"
#include "tt_status.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CSET_ERR(err, errlen, ...)                                                                 \
    do {                                                                                           \
        if ((err) != NULL && (errlen) > 0)                                                         \
            snprintf((err), (errlen), __VA_ARGS__);                                                \
    } while (0)

#define CKPT_MAGIC         "TTPART\r\n"
#define CKPT_TRAILER_MAGIC "TTPE"
#define CKPT_PATH_MAX      4096
#define CKPT_READ_BUF      ((size_t)1 << 20)

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p) {
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

int tt_ckpt_name_ok(const char *name) {
    if (name == NULL || name[0] == '\0' || name[0] == '.')
        return 0;
    size_t n = 0;
    for (const char *c = name; *c != '\0'; c++, n++) {
        int ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
                 *c == '.' || *c == '_' || *c == '-';
        if (!ok || n + 1 >= TT_CKPT_NAME_MAX)
            return 0;
    }
    return 1;
}

/* Bytes before the payload, and the whole file, for a header. */
static uint64_t prefix_bytes(uint32_t nranges) {
    return TT_CKPT_HEADER_BYTES + (uint64_t)nranges * TT_CKPT_RANGE_BYTES;
}

uint64_t tt_ckpt_payload_offset(uint32_t nranges) {
    return prefix_bytes(nranges);
}

static int check_ranges(const tt_ckpt_range_t *r, uint32_t n, uint64_t *sum, char *err,
                        size_t errlen) {
    uint64_t end = 0;
    *sum = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (r[i].length == 0 || r[i].offset + r[i].length < r[i].offset || r[i].offset < end ||
            *sum + r[i].length < *sum) {
            CSET_ERR(err, errlen, "range %u (offset %llu, length %llu) is empty, wraps or overlaps",
                     i, (unsigned long long)r[i].offset, (unsigned long long)r[i].length);
            return TT_EINVAL;
        }
        end = r[i].offset + r[i].length;
        *sum += r[i].length;
    }
    return TT_OK;
}

/* The rules shared by the writer's options and a decoded header. */
static int check_layout(uint32_t kind, const tt_ckpt_range_t *ranges, uint32_t nranges,
                        uint32_t planes, uint64_t payload_len, char *err, size_t errlen) {
    uint64_t sum = 0;
    if (kind == TT_CKPT_KIND_TRAINER && (nranges != 0 || planes != 0)) {
        CSET_ERR(err, errlen, "a trainer part has no ranges and no planes");
        return TT_EINVAL;
    }
    if (kind != TT_CKPT_KIND_TRAINER && kind != TT_CKPT_KIND_SHARD) {
        CSET_ERR(err, errlen, "part kind %u is neither shard (1) nor trainer (2)", kind);
        return TT_EINVAL;
    }
    if (kind == TT_CKPT_KIND_TRAINER)
        return TT_OK;
    if (nranges == 0 || nranges > TT_CKPT_MAX_RANGES || planes == 0 ||
        planes > TT_CKPT_MAX_PLANES) {
        CSET_ERR(err, errlen, "a shard part needs 1..%u ranges and 1..%u planes, not %u and %u",
                 TT_CKPT_MAX_RANGES, TT_CKPT_MAX_PLANES, nranges, planes);
        return TT_EINVAL;
    }
    int rc = check_ranges(ranges, nranges, &sum, err, errlen);
    if (rc == TT_OK && (sum > UINT64_MAX / planes || sum * planes != payload_len)) {
        CSET_ERR(err, errlen, "payload of %llu bytes, but %u planes x %llu range bytes",
                 (unsigned long long)payload_len, planes, (unsigned long long)sum);
        rc = TT_EINVAL;
    }
    return rc;
}

int tt_ckpt_part_opts_check(const tt_ckpt_part_opts_t *o, char *err, size_t errlen) {
    if (o == NULL || o->dir == NULL || !tt_ckpt_name_ok(o->name)) {
        CSET_ERR(err, errlen, "part needs a directory and a plain file name ([A-Za-z0-9._-])");
        return TT_EINVAL;
    }
    if (o->nranges > 0 && o->ranges == NULL) {
        CSET_ERR(err, errlen, "part %s: %u ranges but no range table", o->name, o->nranges);
        return TT_EINVAL;
    }
    return check_layout(o->kind, o->ranges, o->nranges, o->planes, o->payload_len, err, errlen);
}

static void encode_header(uint8_t *h, const tt_ckpt_part_info_t *info) {
    memset(h, 0, TT_CKPT_HEADER_BYTES);
    memcpy(h, CKPT_MAGIC, 8);
    put32(h + 8, TT_CKPT_PART_VERSION);
    put32(h + 12, info->kind);
    put32(h + 16, info->nranges);
    put32(h + 20, info->planes);
    put64(h + 24, info->payload_len);
    put32(h + 56, tt_crc32c(0, h, 56));
}

/* Fills *info from a header; `label` names the part in `err`. */
static int decode_header(const uint8_t *h, const char *label, tt_ckpt_part_info_t *info, char *err,
                         size_t errlen) {
    if (memcmp(h, CKPT_MAGIC, 8) != 0) {
        CSET_ERR(err, errlen, "part %s: bad magic, not a tether part file", label);
        return TT_ECORRUPT;
    }
    uint32_t want = get32(h + 56), got = tt_crc32c(0, h, 56);
    if (want != got) {
        CSET_ERR(err, errlen, "part %s: header CRC 0x%08x, header says 0x%08x", label, got, want);
        return TT_ECORRUPT;
    }
    if (get32(h + 8) != TT_CKPT_PART_VERSION) {
        CSET_ERR(err, errlen, "part %s: format version %u, this build reads %u", label,
                 get32(h + 8), TT_CKPT_PART_VERSION);
        return TT_ECORRUPT;
    }
    memset(info, 0, sizeof(*info));
    info->kind = get32(h + 12);
    info->nranges = get32(h + 16);
    info->planes = get32(h + 20);
    info->payload_len = get64(h + 24);
    uint64_t pre = prefix_bytes(info->nranges);
    if (info->nranges > TT_CKPT_MAX_RANGES || info->payload_len > UINT64_MAX - pre - 8) {
        CSET_ERR(err, errlen, "part %s: header lists %u ranges and %llu payload bytes", label,
                 info->nranges, (unsigned long long)info->payload_len);
        return TT_ECORRUPT;
    }
    info->size = pre + info->payload_len + TT_CKPT_TRAILER_BYTES;
    return TT_OK;
}

static int decode_ranges(const uint8_t *p, const tt_ckpt_part_info_t *info, const char *label,
                         tt_ckpt_range_t *r, char *err, size_t errlen) {
    for (uint32_t i = 0; i < info->nranges; i++) {
        r[i].offset = get64(p + (size_t)i * TT_CKPT_RANGE_BYTES);
        r[i].length = get64(p + (size_t)i * TT_CKPT_RANGE_BYTES + 8);
    }
    char why[256];
    if (check_layout(info->kind, r, info->nranges, info->planes, info->payload_len, why,
                     sizeof(why)) != TT_OK) {
        CSET_ERR(err, errlen, "part %s: %s", label, why);
        return TT_ECORRUPT;
    }
    return TT_OK;
}

/* ---- writer ---- */

struct tt_ckpt_writer {
    tt_ckpt_sink_t *sink;
    int state; /* 0 open, 1 finished, -1 dead */
    uint64_t payload_written;
    uint32_t crc;
    tt_ckpt_part_info_t info;
    char dir[CKPT_PATH_MAX];
    char path[CKPT_PATH_MAX];
    char tmp[CKPT_PATH_MAX + 8];
    char err[512];
};

static int fail_sys(tt_ckpt_writer_t *w, const char *step) {
    snprintf(w->err, sizeof(w->err), "part %s: %s failed: %s", w->path, step, strerror(errno));
    w->state = -1;
    return TT_ESYS;
}

static int fail_sink(tt_ckpt_writer_t *w) {
    snprintf(w->err, sizeof(w->err), "part %s", tt_ckpt_sink_error(w->sink));
    w->state = -1;
    return TT_ESYS;
}

/* Every byte of the file goes through here or emit_payload, so the CRC
 * covers all of it. */
static int emit(tt_ckpt_writer_t *w, const uint8_t *p, size_t len) {
    w->crc = tt_crc32c(w->crc, p, len);
    return tt_ckpt_sink_write(w->sink, p, len) == TT_OK ? TT_OK : fail_sink(w);
}

/* Payload: CRC one chunk, hand it to the sink in place, and CRC the next
 * while the I/O thread writes it. The first chunk of a call is small, as
 * its CRC cannot overlap a write; chunks end at 4 KiB file positions, so
 * after the first no bytes need copying. The caller's memory is released
 * before returning. */
#define EMIT_FIRST ((size_t)256 << 10)
#define EMIT_CHUNK ((size_t)4 << 20)
static int emit_payload(tt_ckpt_writer_t *w, const uint8_t *p, size_t len) {
    for (size_t off = 0, n; off < len; off += n) {
        n = (off == 0 ? EMIT_FIRST : EMIT_CHUNK) - (size_t)(tt_ckpt_sink_size(w->sink) % 4096);
        n = len - off < n ? len - off : n;
        w->crc = tt_crc32c(w->crc, p + off, n);
        if (tt_ckpt_sink_write_ref(w->sink, p + off, n) != TT_OK)
            return fail_sink(w);
    }
    return tt_ckpt_sink_release(w->sink) == TT_OK ? TT_OK : fail_sink(w);
}

static int emit_prefix(tt_ckpt_writer_t *w, const tt_ckpt_part_opts_t *o) {
    uint8_t h[TT_CKPT_HEADER_BYTES];
    encode_header(h, &w->info);
    int rc = emit(w, h, sizeof(h));
    for (uint32_t i = 0; rc == TT_OK && i < o->nranges; i++) {
        uint8_t r[TT_CKPT_RANGE_BYTES];
        put64(r, o->ranges[i].offset);
        put64(r + 8, o->ranges[i].length);
        rc = emit(w, r, sizeof(r));
    }
    return rc;
}

static int writer_open(tt_ckpt_writer_t *w, const tt_ckpt_part_opts_t *o) {
    snprintf(w->dir, sizeof(w->dir), "%s", o->dir);
    snprintf(w->path, sizeof(w->path), "%s/%s", o->dir, o->name);
    snprintf(w->tmp, sizeof(w->tmp), "%s.tmp", w->path);
    char why[600];
    /* A buffer larger than the file is memory to fault in for nothing
     * (the trainer part is 184 bytes). */
    uint64_t file = prefix_bytes(o->nranges) + o->payload_len + TT_CKPT_TRAILER_BYTES;
    size_t buf = o->buf_bytes ? o->buf_bytes : (size_t)4 << 20;
    buf = file < buf ? (size_t)file : buf;
    if (tt_ckpt_sink_open(&w->sink, w->tmp, buf, TT_CKPT_SINK_AUTO, why, sizeof(why)) != TT_OK) {
        snprintf(w->err, sizeof(w->err), "part %s", why);
        w->state = -1;
        return TT_ESYS;
    }
    w->info = (tt_ckpt_part_info_t){o->kind, o->planes, o->nranges, o->payload_len, file, 0};
    return emit_prefix(w, o);
}

int tt_ckpt_writer_create(tt_ckpt_writer_t **out, const tt_ckpt_part_opts_t *opts, char *err,
                          size_t errlen) {
    *out = NULL;
    int rc = tt_ckpt_part_opts_check(opts, err, errlen);
    if (rc != TT_OK)
        return rc;
    tt_ckpt_writer_t *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return TT_ENOMEM;
    rc = writer_open(w, opts);
    if (rc != TT_OK) {
        CSET_ERR(err, errlen, "%s", w->err);
        tt_ckpt_writer_destroy(&w);
        return rc;
    }
    *out = w;
    return TT_OK;
}

int tt_ckpt_writer_write(tt_ckpt_writer_t *w, const void *data, size_t len) {
    if (w->state != 0)
        return TT_ECLOSED;
    if (len > w->info.payload_len - w->payload_written) {
        snprintf(w->err, sizeof(w->err), "part %s: %llu more payload bytes than the %llu declared",
                 w->path, (unsigned long long)(w->payload_written + len - w->info.payload_len),
                 (unsigned long long)w->info.payload_len);
        w->state = -1;
        return TT_ESIZE;
    }
    w->payload_written += len;
    return emit_payload(w, data, len);
}

static int writer_seal(tt_ckpt_writer_t *w) {
    uint8_t t[TT_CKPT_TRAILER_BYTES];
    w->info.crc32c = w->crc;
    put32(t, w->crc);
    memcpy(t + 4, CKPT_TRAILER_MAGIC, 4);
    if (emit(w, t, sizeof(t)) != TT_OK) /* the CRC of the trailer is unused */
        return TT_ESYS;
    if (tt_ckpt_sink_close(w->sink) != TT_OK) /* flush, fsync, close */
        return fail_sink(w);
    if (rename(w->tmp, w->path) != 0)
        return fail_sys(w, "rename");
    int dfd = open(w->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || fsync(dfd) != 0) {
        if (dfd >= 0)
            close(dfd);
        return fail_sys(w, "directory fsync");
    }
    close(dfd);
    return TT_OK;
}

int tt_ckpt_writer_finish(tt_ckpt_writer_t *w, tt_ckpt_part_info_t *info) {
    if (w->state != 0)
        return TT_ECLOSED;
    if (w->payload_written != w->info.payload_len) {
        snprintf(w->err, sizeof(w->err), "part %s: %llu payload bytes written, %llu declared",
                 w->path, (unsigned long long)w->payload_written,
                 (unsigned long long)w->info.payload_len);
        w->state = -1;
        return TT_ESIZE;
    }
    int rc = writer_seal(w);
    if (rc != TT_OK)
        return rc;
    w->state = 1;
    if (info != NULL)
        *info = w->info;
    return TT_OK;
}

const char *tt_ckpt_writer_error(const tt_ckpt_writer_t *w) {
    return w->err;
}

void tt_ckpt_writer_destroy(tt_ckpt_writer_t **wp) {
    if (wp == NULL || *wp == NULL)
        return;
    tt_ckpt_writer_t *w = *wp;
    tt_ckpt_sink_destroy(&w->sink);
    if (w->state != 1 && w->tmp[0] != '\0')
        unlink(w->tmp);
    free(w);
    *wp = NULL;
}

/* ---- verification and reading ---- */

static int pread_all(int fd, uint8_t *p, size_t len, uint64_t off) {
    while (len > 0) {
        ssize_t r = pread(fd, p, len, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return TT_ESYS;
        if (r == 0)
            return TT_EIO;
        p += r;
        off += (uint64_t)r;
        len -= (size_t)r;
    }
    return TT_OK;
}

static int open_part(const char *path, const char *label, int *fd, uint64_t *size, char *err,
                     size_t errlen) {
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0) {
        int e = errno;
        CSET_ERR(err, errlen, "part %s: %s", label, e == ENOENT ? "missing" : strerror(e));
        return e == ENOENT ? TT_ENOTFOUND : TT_ESYS;
    }
    struct stat st;
    if (fstat(*fd, &st) != 0) {
        CSET_ERR(err, errlen, "part %s: stat failed: %s", label, strerror(errno));
        return TT_ESYS;
    }
    *size = (uint64_t)st.st_size;
    return TT_OK;
}

/* Header, size and range table of an open part; *ranges is malloc'd. */
static int load_prefix(int fd, uint64_t size, const char *label, tt_ckpt_part_info_t *info,
                       tt_ckpt_range_t **ranges, char *err, size_t errlen) {
    uint8_t h[TT_CKPT_HEADER_BYTES];
    *ranges = NULL;
    if (size < TT_CKPT_HEADER_BYTES + TT_CKPT_TRAILER_BYTES) {
        CSET_ERR(err, errlen, "part %s: %llu bytes, too short for a part file", label,
                 (unsigned long long)size);
        return TT_ECORRUPT;
    }
    int rc = pread_all(fd, h, sizeof(h), 0);
    if (rc == TT_OK)
        rc = decode_header(h, label, info, err, errlen);
    if (rc == TT_OK && info->size != size) {
        CSET_ERR(err, errlen, "part %s: %llu bytes, its header implies %llu (truncated?)", label,
                 (unsigned long long)size, (unsigned long long)info->size);
        rc = TT_ECORRUPT;
    }
    if (rc != TT_OK)
        return rc == TT_EIO || rc == TT_ESYS ? TT_ECORRUPT : rc;
    size_t tab = (size_t)info->nranges * TT_CKPT_RANGE_BYTES;
    uint8_t *raw = malloc(tab + 1);
    *ranges = malloc(((size_t)info->nranges + 1) * sizeof(**ranges));
    if (raw == NULL || *ranges == NULL)
        rc = TT_ENOMEM;
    else if (pread_all(fd, raw, tab, TT_CKPT_HEADER_BYTES) != TT_OK)
        rc = TT_ESYS;
    else
        rc = decode_ranges(raw, info, label, *ranges, err, errlen);
    free(raw);
    return rc;
}

/* CRC of the bytes before the trailer, and the trailer's own claim. */
static int crc_body(int fd, uint64_t size, const char *label, uint32_t *got, uint32_t *claimed,
                    char *err, size_t errlen) {
    size_t cap = CKPT_READ_BUF;
    uint8_t *buf = malloc(cap);
    if (buf == NULL)
        return TT_ENOMEM;
    uint64_t body = size - TT_CKPT_TRAILER_BYTES, off = 0;
    uint32_t crc = 0;
    int rc = TT_OK;
    while (rc == TT_OK && off < body) {
        size_t n = body - off < cap ? (size_t)(body - off) : cap;
        rc = pread_all(fd, buf, n, off);
        crc = tt_crc32c(crc, buf, n);
        off += n;
    }
    if (rc == TT_OK)
        rc = pread_all(fd, buf, TT_CKPT_TRAILER_BYTES, body);
    if (rc == TT_OK && memcmp(buf + 4, CKPT_TRAILER_MAGIC, 4) != 0) {
        CSET_ERR(err, errlen, "part %s: trailer magic missing (torn write?)", label);
        rc = TT_ECORRUPT;
    } else if (rc != TT_OK) {
        CSET_ERR(err, errlen, "part %s: read failed: %s", label, strerror(errno));
    }
    *got = crc;
    *claimed = rc == TT_OK ? get32(buf) : 0;
    free(buf);
    return rc;
}

static int compare_crc(const char *label, uint32_t got, uint32_t claimed,
                       const tt_ckpt_expect_t *exp, char *err, size_t errlen) {
    if (exp != NULL && got != exp->crc32c) {
        CSET_ERR(err, errlen, "part %s: CRC 0x%08x, manifest says 0x%08x", label, got, exp->crc32c);
        return TT_ECORRUPT;
    }
    if (got != claimed) {
        CSET_ERR(err, errlen, "part %s: CRC 0x%08x, its trailer says 0x%08x", label, got, claimed);
        return TT_ECORRUPT;
    }
    return TT_OK;
}

int tt_ckpt_part_verify(const char *path, const char *label, const tt_ckpt_expect_t *exp,
                        tt_ckpt_part_info_t *info, char *err, size_t errlen) {
    int fd = -1;
    uint64_t size = 0;
    tt_ckpt_part_info_t local;
    tt_ckpt_range_t *ranges = NULL;
    uint32_t got = 0, claimed = 0;
    if (info == NULL)
        info = &local;
    memset(info, 0, sizeof(*info));
    int rc;
    TT_CHECK_GOTO(open_part(path, label, &fd, &size, err, errlen), rc, out);
    if (exp != NULL && size != exp->size) {
        CSET_ERR(err, errlen, "part %s: %llu bytes, manifest says %llu%s", label,
                 (unsigned long long)size, (unsigned long long)exp->size,
                 size < exp->size ? " (truncated)" : "");
        rc = TT_ECORRUPT;
        goto out;
    }
    TT_CHECK_GOTO(load_prefix(fd, size, label, info, &ranges, err, errlen), rc, out);
    TT_CHECK_GOTO(crc_body(fd, size, label, &got, &claimed, err, errlen), rc, out);
    info->crc32c = got;
    rc = compare_crc(label, got, claimed, exp, err, errlen);
out:
    free(ranges);
    if (fd >= 0)
        close(fd);
    return rc;
}

struct tt_ckpt_reader {
    int fd;
    tt_ckpt_part_info_t info;
    tt_ckpt_range_t *ranges;
    uint64_t payload_at; /* file offset of payload byte 0 */
};

int tt_ckpt_reader_create(tt_ckpt_reader_t **out, const char *path, char *err, size_t errlen) {
    *out = NULL;
    tt_ckpt_reader_t *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return TT_ENOMEM;
    r->fd = -1;
    uint64_t size = 0;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    int rc;
    TT_CHECK_GOTO(open_part(path, base, &r->fd, &size, err, errlen), rc, fail);
    TT_CHECK_GOTO(load_prefix(r->fd, size, base, &r->info, &r->ranges, err, errlen), rc, fail);
    r->payload_at = prefix_bytes(r->info.nranges);
    *out = r;
    return TT_OK;
fail:
    tt_ckpt_reader_destroy(&r);
    return rc;
}

int tt_ckpt_reader_read(tt_ckpt_reader_t *r, uint64_t offset, void *buf, size_t len) {
    if (offset > r->info.payload_len || len > r->info.payload_len - offset)
        return TT_ESIZE;
    return pread_all(r->fd, buf, len, r->payload_at + offset);
}

const tt_ckpt_part_info_t *tt_ckpt_reader_info(const tt_ckpt_reader_t *r) {
    return &r->info;
}

const tt_ckpt_range_t *tt_ckpt_reader_ranges(const tt_ckpt_reader_t *r) {
    return r->ranges;
}

void tt_ckpt_reader_destroy(tt_ckpt_reader_t **rp) {
    if (rp == NULL || *rp == NULL)
        return;
    if ((*rp)->fd >= 0)
        close((*rp)->fd);
    free((*rp)->ranges);
    free(*rp);
    *rp = NULL;
}

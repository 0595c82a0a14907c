/* tt_ckpt: checkpoint part files, the unit a writer (a shard server, rank 0)
 * makes durable before the coordinator commits a checkpoint. It owns the
 * byte format (docs/checkpoint-format.md): a 64-byte header (magic,
 * version, kind, range count, plane count, payload length, header CRC), a
 * table of the flat-space byte ranges the part holds, the payload, and an
 * 8-byte trailer with the CRC-32C of everything before it. It writes parts
 * through a temporary file, fsync and rename, so a part either exists
 * complete or not at all, and it verifies parts against the size and CRC a
 * manifest recorded. It does not own the manifest (tt_manifest), the
 * directory layout and commit (tt_ckpt_dir), or what the payload means.
 *
 * Thread safety: a writer or reader is used by one thread at a time (a
 * thread-pool job, never the event loop: all calls block on disk I/O);
 * different objects are independent. Functions without an object are
 * reentrant. */
#ifndef TT_CKPT_H
#define TT_CKPT_H

#include <stddef.h>
#include <stdint.h>

#define TT_CKPT_PART_VERSION  1u
#define TT_CKPT_HEADER_BYTES  64u
#define TT_CKPT_RANGE_BYTES   16u
#define TT_CKPT_TRAILER_BYTES 8u
#define TT_CKPT_MAX_RANGES    (1u << 20)
#define TT_CKPT_MAX_PLANES    16u
#define TT_CKPT_NAME_MAX      128u /* file names, including the NUL */

enum {
    TT_CKPT_KIND_SHARD = 1,   /* planes x ranges of the flat parameter space */
    TT_CKPT_KIND_TRAINER = 2, /* opaque trainer state: no ranges, no planes */
};

typedef struct tt_ckpt_range {
    uint64_t offset; /* logical byte offset in the flat space */
    uint64_t length; /* bytes, > 0 */
} tt_ckpt_range_t;

/* What a part's header says and what its trailer carries. */
typedef struct tt_ckpt_part_info {
    uint32_t kind;
    uint32_t planes;
    uint32_t nranges;
    uint64_t payload_len;
    uint64_t size;   /* bytes of the whole file */
    uint32_t crc32c; /* CRC-32C of all bytes before the trailer */
} tt_ckpt_part_info_t;

typedef struct tt_ckpt_part_opts {
    const char *dir;               /* existing directory */
    const char *name;              /* file name, see tt_ckpt_name_ok */
    uint32_t kind;                 /* TT_CKPT_KIND_* */
    const tt_ckpt_range_t *ranges; /* borrowed during create; shard parts only */
    uint32_t nranges;
    uint32_t planes;      /* shard: payload_len == planes * sum(lengths) */
    uint64_t payload_len; /* exactly this many bytes must be written */
    size_t buf_bytes;     /* each of the writer's 2 buffers; 0: 4 MiB. Bounds its memory */
} tt_ckpt_part_opts_t;

typedef struct tt_ckpt_writer tt_ckpt_writer_t;
typedef struct tt_ckpt_reader tt_ckpt_reader_t;

/* 1 when `name` is a plain file name: 1..127 bytes of [A-Za-z0-9._-], not
 * starting with '.', so it never escapes the checkpoint directory. */
int tt_ckpt_name_ok(const char *name);

/* Checks that opts describe a consistent part (kind, ranges sorted and not
 * overlapping, plane count, payload length). 0 or TT_EINVAL with `err`. */
int tt_ckpt_part_opts_check(const tt_ckpt_part_opts_t *opts, char *err, size_t errlen);

/* File offset of the payload in a part with `nranges` ranges: a caller
 * that places its payload at an address equal to this modulo 4096 gets
 * it written without a copy (tt_ckpt_sink). */
uint64_t tt_ckpt_payload_offset(uint32_t nranges);

/* Creates "<dir>/<name>.tmp" and writes the header and range table.
 * Returns 0, TT_EINVAL (opts inconsistent), TT_ESYS, TT_ENOMEM; `err` says
 * which. *out owns the writer. */
int tt_ckpt_writer_create(tt_ckpt_writer_t **out, const tt_ckpt_part_opts_t *opts, char *err,
                          size_t errlen);

/* Appends payload bytes (`data` borrowed until it returns). Returns 0,
 * TT_ESIZE (more than payload_len in total), TT_ESYS, TT_ECLOSED (after
 * finish or an error). After any error the writer is dead: destroy it.
 * Payload memory whose address is congruent to its file position modulo
 * 4 KiB (see tt_ckpt_payload_offset) is written in place, without a copy. */
int tt_ckpt_writer_write(tt_ckpt_writer_t *w, const void *data, size_t len);

/* Writes the trailer, fsyncs, renames the temporary over "<dir>/<name>" and
 * fsyncs the directory: on 0 the part is durable and *info (may be NULL)
 * says its size and CRC for the manifest. TT_ESIZE when fewer than
 * payload_len bytes were written, TT_ESYS, TT_ECLOSED. */
int tt_ckpt_writer_finish(tt_ckpt_writer_t *w, tt_ckpt_part_info_t *info);

/* Last error sentence ("" when none); owned by the writer. */
const char *tt_ckpt_writer_error(const tt_ckpt_writer_t *w);

/* Accepts NULL; removes the temporary unless finish succeeded; *w = NULL. */
void tt_ckpt_writer_destroy(tt_ckpt_writer_t **w);

/* What verification compares against (from the manifest). */
typedef struct tt_ckpt_expect {
    uint64_t size;
    uint32_t crc32c;
} tt_ckpt_expect_t;

/* Re-reads the whole part at `path` and checks header, size and CRC, and,
 * when `exp` is not NULL, the size and CRC the manifest recorded. `label`
 * names the part in messages ("part shard-1.bin: CRC 0x1234abcd, manifest
 * says 0x9f00aa11"). *info (may be NULL) gets what the file says; its crc32c
 * is the one computed. Returns 0, TT_ENOTFOUND (missing), TT_ECORRUPT
 * (truncated, wrong size, bad magic/header/CRC), TT_ESYS, TT_ENOMEM.
 * Memory: one 1 MiB buffer. */
int tt_ckpt_part_verify(const char *path, const char *label, const tt_ckpt_expect_t *exp,
                        tt_ckpt_part_info_t *info, char *err, size_t errlen);

/* Opens a part for loading: checks magic, header CRC, the range table and
 * that the file size matches the header. It does NOT check the payload CRC:
 * loaders verify the checkpoint first (tt_ckpt_part_verify). Returns 0,
 * TT_ENOTFOUND, TT_ECORRUPT, TT_ESYS, TT_ENOMEM. *out owns the reader. */
int tt_ckpt_reader_create(tt_ckpt_reader_t **out, const char *path, char *err, size_t errlen);

/* Reads `len` payload bytes from payload byte `offset`. 0, TT_ESIZE (beyond
 * the payload), TT_EIO (short read), TT_ESYS. */
int tt_ckpt_reader_read(tt_ckpt_reader_t *r, uint64_t offset, void *buf, size_t len);

/* Header fields and the range table (owned by the reader). */
const tt_ckpt_part_info_t *tt_ckpt_reader_info(const tt_ckpt_reader_t *r);
const tt_ckpt_range_t *tt_ckpt_reader_ranges(const tt_ckpt_reader_t *r);

void tt_ckpt_reader_destroy(tt_ckpt_reader_t **r);

#endif

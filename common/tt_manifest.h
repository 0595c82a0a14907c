/* tt_manifest: the checkpoint manifest, the one file whose atomic rename
 * commits a checkpoint. It owns the in-memory form (a transparent value:
 * the coordinator fills it from the parts' reports, loaders read it in
 * loops), its encoding (protobuf CkptManifest through tt_wire), and every
 * validation rule: parts (name, kind, size, CRC, flat-space ranges) and
 * logical tensors (name, shape, dtype, flat offset, and for each state kind
 * the extents saying which part and payload offset hold which tensor bytes).
 * A manifest that decodes has been fully validated: tensors tile the flat
 * space, each state's extents tile its tensor exactly, extents stay inside
 * their part's payload and declared ranges, no two extents share part
 * bytes, and every shard payload byte belongs to some extent. It does not touch part files
 * (tt_ckpt) or directories (tt_ckpt_dir), and knows no shard placement: loaders reshard with
 * tt_manifest_layout + tt_reshard_plan.
 * Thread safety: reentrant; a manifest may be read by several threads when
 * nobody modifies it. */
#ifndef TT_MANIFEST_H
#define TT_MANIFEST_H

#include "tt_ckpt.h"
#include "tt_reshard.h"

#include <stddef.h>
#include <stdint.h>

#define TT_MANIFEST_VERSION   1u
#define TT_MANIFEST_FILE      "MANIFEST"
#define TT_MF_ID_MAX          128u /* checkpoint and job ids, including NUL */
#define TT_MF_NAME_MAX        256u /* tensor names, including NUL */
#define TT_MF_MAX_DIMS        8u
#define TT_MF_MAX_PARTS       65536u
#define TT_MF_MAX_TENSORS     (1u << 20)
#define TT_MF_MAX_EXTENTS     65536u     /* per tensor and state */
#define TT_MF_MAX_ALL_EXTENTS (1u << 24) /* in the whole manifest */

typedef enum {
    TT_DTYPE_F32 = 1,
    TT_DTYPE_F64 = 2,
    TT_DTYPE_F16 = 3,
    TT_DTYPE_BF16 = 4,
    TT_DTYPE_I32 = 5,
    TT_DTYPE_I64 = 6,
    TT_DTYPE_U8 = 7,
} tt_dtype_t;

/* State kinds: one plane of the flat space each. */
typedef enum {
    TT_STATE_PARAMS = 0,
    TT_STATE_MOMENTUM = 1, /* SGD momentum buffer */
    TT_STATE_ADAM_M = 2,   /* AdamW first moment */
    TT_STATE_ADAM_V = 3,   /* AdamW second moment */
    TT_STATE_COUNT = 4,
} tt_state_kind_t;

typedef struct tt_mf_part {
    char file[TT_CKPT_NAME_MAX];
    uint32_t kind; /* TT_CKPT_KIND_* */
    uint64_t size; /* bytes of the whole file */
    uint32_t crc32c;
    uint32_t planes;
    uint32_t nranges;
    tt_ckpt_range_t *ranges; /* owned */
} tt_mf_part_t;

typedef struct tt_mf_extent {
    uint64_t offset; /* tensor byte */
    uint64_t length;
    uint32_t part;        /* index into parts */
    uint64_t part_offset; /* payload byte */
} tt_mf_extent_t;

typedef struct tt_mf_state {
    uint32_t state; /* tt_state_kind_t */
    uint32_t nextents;
    tt_mf_extent_t *extents; /* owned, by increasing offset */
} tt_mf_state_t;

typedef struct tt_mf_tensor {
    char name[TT_MF_NAME_MAX];
    uint32_t ndim;
    uint64_t shape[TT_MF_MAX_DIMS];
    uint32_t dtype;       /* tt_dtype_t */
    uint64_t flat_offset; /* bytes; tensors are back to back from 0 */
    uint32_t nstates;
    tt_mf_state_t *states; /* owned; the same kinds for every tensor */
} tt_mf_tensor_t;

typedef struct tt_manifest {
    uint32_t version;
    char id[TT_MF_ID_MAX];
    char job_id[TT_MF_ID_MAX];
    uint64_t step;
    uint64_t epoch;
    uint64_t created_unix_ms;
    uint64_t duration_ms;
    uint32_t nparts;
    tt_mf_part_t *parts; /* owned */
    uint32_t ntensors;
    tt_mf_tensor_t *tensors; /* owned */
} tt_manifest_t;

/* Bytes per element (0 for an unknown dtype) and names ("f32", "params";
 * "?" when unknown). Static storage. */
size_t tt_dtype_size(uint32_t dtype);
const char *tt_dtype_name(uint32_t dtype);
const char *tt_state_name(uint32_t state);

/* Bytes of a tensor (product of its shape times the dtype size); 0 when the
 * shape or dtype is invalid or the product overflows. */
uint64_t tt_mf_tensor_bytes(const tt_mf_tensor_t *t);

/* Checks every rule listed at the top of this file. 0, TT_EVERSION, or
 * TT_EINVAL with a sentence naming the part, tensor or extent at fault. */
int tt_manifest_validate(const tt_manifest_t *m, char *err, size_t errlen);

/* Validates, then serialises to a malloc'd buffer (*out, owned by the
 * caller). 0, the validation error, TT_ENOMEM. */
int tt_manifest_encode(const tt_manifest_t *m, uint8_t **out, size_t *outlen, char *err,
                       size_t errlen);

/* Parses and validates; *out is overwritten (not freed first) and owns new
 * arrays on success, and is zeroed on failure. 0, TT_ETOOBIG, TT_ECORRUPT
 * (does not parse or breaks a rule; `err` says which), TT_EVERSION,
 * TT_ENOMEM. */
int tt_manifest_decode(const void *data, size_t len, tt_manifest_t *out, char *err, size_t errlen);

/* Releases the arrays and zeroes *m. Accepts NULL and zeroed manifests. */
void tt_manifest_free(tt_manifest_t *m);

/* "<dir>/MANIFEST": the encoding plus a CRC-32C trailer (tt_manifest_io.c).
 * load: TT_ENOTFOUND when absent, TT_ECORRUPT when the trailer is missing
 * or does not match ("the manifest itself is damaged"), else as decode.
 * store: validate, then tmp + fsync + rename + directory fsync (the commit
 * point of a checkpoint). Blocking I/O. */
int tt_manifest_load(const char *dir, tt_manifest_t *out, char *err, size_t errlen);
int tt_manifest_store(const char *dir, const tt_manifest_t *m, char *err, size_t errlen);

/* The saved layout of one state kind over the whole flat space, for
 * tt_reshard_plan: *segs is malloc'd (owned by the caller), sorted, and
 * tiles [0, total flat bytes). 0, TT_ENOTFOUND (no tensor has that state),
 * TT_ENOMEM. `m` must be valid. */
int tt_manifest_layout(const tt_manifest_t *m, uint32_t state, tt_reshard_seg_t **segs,
                       size_t *nsegs);

/* Fills every tensor's states from the shard parts' range tables, by the
 * payload convention of docs/checkpoint-format.md: plane k of every shard
 * part holds state kind states[k] (so planes == nstates), and within a
 * plane the part's ranges are stored back to back in order. Tensors (name,
 * shape, dtype, flat_offset) and parts (file, kind, planes, ranges) must be
 * set; states already present are freed and replaced. This is how a
 * coordinator turns the parts' reports into a manifest. 0, TT_EINVAL (the
 * shard parts' ranges do not tile the tensors' flat space, plane counts
 * disagree, bad state kinds; `err` says which), TT_ENOMEM. */
int tt_manifest_fill_extents(tt_manifest_t *m, const uint32_t *states, uint32_t nstates, char *err,
                             size_t errlen);

/* Total flat bytes (sum of tensor sizes) of a valid manifest. */
uint64_t tt_manifest_flat_bytes(const tt_manifest_t *m);

/* Index of the part named `file`, or -1. */
int tt_manifest_find_part(const tt_manifest_t *m, const char *file);

#endif

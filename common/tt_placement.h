/* tt_placement: how a job's flat parameter space is cut into chunks and
 * which shard server holds each chunk. It is pure arithmetic over sizes and
 * shard ids: no sockets, no clock, no global state. The coordinator computes
 * placements (and re-computes them when the set of live shards changes), the
 * PS backend in libtether consumes them; both read the same struct.
 *
 * Rules: chunks are `chunk_bytes / 4` float32 elements each, in order, the
 * last one shorter; shards are identified by id and kept sorted by id, so the
 * result never depends on the order shards registered in. Assignment is
 * balanced by bytes (every shard within one chunk of every other) and stable:
 * given the previous placement, a chunk stays on its shard whenever that
 * shard is still live and not over its fair share, so losing a shard moves
 * only that shard's chunks, and nothing changes when nothing changed. The
 * version goes up by one exactly when some chunk changes shard.
 *
 * The struct is transparent on purpose: it is a value that travels in
 * messages and is read in loops over chunks; it owns its arrays (free with
 * tt_placement_free). Thread safety: functions are reentrant; a placement
 * may be read from several threads when nobody modifies it. */
#ifndef TT_PLACEMENT_H
#define TT_PLACEMENT_H

#include <stddef.h>
#include <stdint.h>

#define TT_PLACE_ID_MAX              128
#define TT_PLACE_CHUNK_BYTES_DEFAULT ((uint64_t)4 << 20)
#define TT_PLACE_CHUNK_BYTES_MIN     ((uint64_t)64 << 10) /* of an automatic size */
#define TT_PLACE_CHUNKS_MIN          4u

typedef struct tt_place_chunk {
    uint64_t offset; /* first element of the chunk in the flat space */
    uint64_t count;  /* elements */
    uint32_t shard;  /* index into shard_ids */
} tt_place_chunk_t;

typedef struct tt_placement {
    uint64_t version;     /* 1 for the first placement */
    uint64_t chunk_bytes; /* multiple of 4 */
    uint64_t total_elems;
    size_t nchunks;
    tt_place_chunk_t *chunks;
    size_t nshards;
    char (*shard_ids)[TT_PLACE_ID_MAX]; /* sorted, distinct */
    uint64_t *shard_bytes;              /* bytes placed on each shard */
} tt_placement_t;

/* The chunk size of a job that asks for none: TT_PLACE_CHUNK_BYTES_DEFAULT,
 * or, for a flat space of fewer than TT_PLACE_CHUNKS_MIN such chunks, the
 * size that cuts it into that many (rounded up to 4 KiB, at least
 * TT_PLACE_CHUNK_BYTES_MIN). Why: a model of one chunk lives on one shard
 * however many there are, and its every step is one push and one result per
 * rank with nothing to overlap; four chunks spread over up to four shards
 * and pipeline under the PS backend's credits. A function of the size
 * alone, so every worker and a restarted coordinator agree on it. */
uint64_t tt_placement_auto_chunk_bytes(uint64_t total_elems);

/* Computes the placement of `total_elems` float32 elements cut into chunks
 * of `chunk_bytes` (0: tt_placement_auto_chunk_bytes) over the shards named
 * by `ids` (any order, distinct, non-empty, shorter than TT_PLACE_ID_MAX).
 * `prev` (may be NULL) is the placement in force: when it has the same
 * chunking its assignments are kept where the balance allows and its version
 * is reused (no change) or bumped (some chunk moved). *out is overwritten
 * (not freed first) and owns new arrays on success.
 * Returns 0, TT_EINVAL (no shards, zero elements, chunk size not a multiple
 * of 4, duplicate or bad id; `err` says which) or TT_ENOMEM. */
int tt_placement_compute(const tt_placement_t *prev, const char *const *ids, size_t nshards,
                         uint64_t total_elems, uint64_t chunk_bytes, tt_placement_t *out, char *err,
                         size_t errlen);

/* Deep copy into *out (overwritten). 0 or TT_ENOMEM. */
int tt_placement_copy(const tt_placement_t *src, tt_placement_t *out);

/* Releases the arrays and zeroes *p. Accepts NULL and zeroed structs. */
void tt_placement_free(tt_placement_t *p);

/* Number of chunks of `next` whose shard id differs from the one `prev`
 * gave them; SIZE_MAX when the chunkings differ. */
size_t tt_placement_moved(const tt_placement_t *prev, const tt_placement_t *next);

/* Index of the shard id in p, or -1. */
int tt_placement_shard_index(const tt_placement_t *p, const char *id);

#endif

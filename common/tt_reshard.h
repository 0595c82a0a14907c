/* tt_reshard: the arithmetic that loads a checkpoint into any number of
 * shard servers or workers. A saved layout says where each logical byte
 * range of one state plane (parameters, momentum, ...) lives: which part
 * file and at which payload offset. Given a wanted logical range, it
 * produces the list of reads (part, part offset, length, destination
 * offset) that fills it, in destination order. Pure: no files, no
 * allocation beyond the result, no state. The manifest builds layouts
 * (tt_manifest_layout); loaders execute the reads.
 * Thread safety: reentrant. */
#ifndef TT_RESHARD_H
#define TT_RESHARD_H

#include <stddef.h>
#include <stdint.h>

/* Logical bytes [logical_offset, logical_offset + length) are stored in part
 * `part` from payload byte `part_offset` on. */
typedef struct tt_reshard_seg {
    uint64_t logical_offset;
    uint64_t length;
    uint32_t part;
    uint64_t part_offset;
} tt_reshard_seg_t;

/* Copy `length` bytes from part `part` at payload byte `part_offset` to byte
 * `dest_offset` of the wanted range's buffer. */
typedef struct tt_reshard_read {
    uint32_t part;
    uint64_t part_offset;
    uint64_t length;
    uint64_t dest_offset;
} tt_reshard_read_t;

/* Checks that `segs` is sorted by logical offset, has no empty segment, no
 * overlap and no wrap-around; `total` > 0 additionally demands that the
 * segments tile [0, total) with no gap. 0, or TT_EINVAL with a sentence
 * naming the first offending segment. */
int tt_reshard_check(const tt_reshard_seg_t *segs, size_t nsegs, uint64_t total, char *err,
                     size_t errlen);

/* Plans the reads that fill logical [want_offset, want_offset + want_length)
 * from a layout that passes tt_reshard_check (checked again here). Adjacent
 * reads that continue each other in the same part are merged. On success
 * *reads is a malloc'd array owned by the caller (NULL when *nreads is 0,
 * e.g. for an empty range). Returns 0, TT_EINVAL (bad layout or the range
 * wraps around), TT_ENOTFOUND (some wanted byte is in no segment: `err`
 * names the first missing range) or TT_ENOMEM. */
int tt_reshard_plan(const tt_reshard_seg_t *segs, size_t nsegs, uint64_t want_offset,
                    uint64_t want_length, tt_reshard_read_t **reads, size_t *nreads, char *err,
                    size_t errlen);

#endif

/* tt_reshard: overlap arithmetic. Segments are sorted, so the first one
 * that can overlap the wanted range is found by binary search and the walk
 * stops at the first segment past it: a plan costs O(log n + reads). */
#include "tt_reshard.h"
#include "tt_status.h"

#include <stdio.h>
#include <stdlib.h>

#define RSET_ERR(err, errlen, ...)                                                                 \
    do {                                                                                           \
        if ((err) != NULL && (errlen) > 0)                                                         \
            snprintf((err), (errlen), __VA_ARGS__);                                                \
    } while (0)

int tt_reshard_check(const tt_reshard_seg_t *segs, size_t nsegs, uint64_t total, char *err,
                     size_t errlen) {
    uint64_t end = 0; /* end of the previous segment */
    for (size_t i = 0; i < nsegs; i++) {
        const tt_reshard_seg_t *s = &segs[i];
        if (s->length == 0 || s->logical_offset + s->length < s->logical_offset ||
            s->part_offset + s->length < s->part_offset) {
            RSET_ERR(err, errlen, "segment %zu (offset %llu, length %llu) is empty or wraps", i,
                     (unsigned long long)s->logical_offset, (unsigned long long)s->length);
            return TT_EINVAL;
        }
        if (s->logical_offset < end) {
            RSET_ERR(err, errlen, "segment %zu starts at %llu, before the previous one ends (%llu)",
                     i, (unsigned long long)s->logical_offset, (unsigned long long)end);
            return TT_EINVAL;
        }
        if (total > 0 && s->logical_offset > end) {
            RSET_ERR(err, errlen, "bytes [%llu, %llu) are in no segment", (unsigned long long)end,
                     (unsigned long long)s->logical_offset);
            return TT_EINVAL;
        }
        end = s->logical_offset + s->length;
    }
    if (total > 0 && end != total) {
        RSET_ERR(err, errlen, "segments end at byte %llu, the layout has %llu",
                 (unsigned long long)end, (unsigned long long)total);
        return TT_EINVAL;
    }
    return TT_OK;
}

/* Index of the first segment whose end lies after `off`. */
static size_t first_after(const tt_reshard_seg_t *segs, size_t nsegs, uint64_t off) {
    size_t lo = 0, hi = nsegs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (segs[mid].logical_offset + segs[mid].length <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void add_read(tt_reshard_read_t *reads, size_t *n, uint32_t part, uint64_t part_off,
                     uint64_t len, uint64_t dest) {
    tt_reshard_read_t *last = *n > 0 ? &reads[*n - 1] : NULL;
    if (last != NULL && last->part == part && last->part_offset + last->length == part_off &&
        last->dest_offset + last->length == dest) {
        last->length += len;
        return;
    }
    reads[(*n)++] = (tt_reshard_read_t){part, part_off, len, dest};
}

static int missing(uint64_t from, uint64_t to, char *err, size_t errlen) {
    RSET_ERR(err, errlen, "logical bytes [%llu, %llu) are in no saved part",
             (unsigned long long)from, (unsigned long long)to);
    return TT_ENOTFOUND;
}

int tt_reshard_plan(const tt_reshard_seg_t *segs, size_t nsegs, uint64_t want_offset,
                    uint64_t want_length, tt_reshard_read_t **reads, size_t *nreads, char *err,
                    size_t errlen) {
    *reads = NULL;
    *nreads = 0;
    uint64_t want_end = want_offset + want_length;
    if (want_end < want_offset) {
        RSET_ERR(err, errlen, "wanted range at %llu of %llu bytes wraps around",
                 (unsigned long long)want_offset, (unsigned long long)want_length);
        return TT_EINVAL;
    }
    int rc = tt_reshard_check(segs, nsegs, 0, err, errlen);
    if (rc != TT_OK || want_length == 0)
        return rc;
    size_t first = first_after(segs, nsegs, want_offset), n = 0;
    tt_reshard_read_t *out = malloc((nsegs - first + 1) * sizeof(*out));
    if (out == NULL)
        return TT_ENOMEM;
    uint64_t at = want_offset; /* first logical byte not planned yet */
    for (size_t i = first; i < nsegs && at < want_end; i++) {
        const tt_reshard_seg_t *s = &segs[i];
        if (s->logical_offset > at)
            break; /* gap: reported below */
        uint64_t seg_end = s->logical_offset + s->length;
        uint64_t len = (seg_end < want_end ? seg_end : want_end) - at;
        add_read(out, &n, s->part, s->part_offset + (at - s->logical_offset), len,
                 at - want_offset);
        at += len;
    }
    if (at < want_end) {
        uint64_t to = want_end;
        size_t next = first_after(segs, nsegs, at);
        if (next < nsegs && segs[next].logical_offset < to)
            to = segs[next].logical_offset;
        free(out);
        return missing(at, to, err, errlen);
    }
    *reads = out;
    *nreads = n;
    return TT_OK;
}

/* tt_placement: chunking and balanced, stable shard assignment.
 * Why the cap: a kept chunk may stay only while its shard is at or below
 * the fair share ceil(total / nshards); everything else goes to the least
 * loaded shard. With every kept load under the average, greedy filling
 * leaves max - min within one chunk, and a lost shard's chunks are the only
 * ones that move (the fair share grows when shards go away). */
#include "tt_placement.h"
#include "tt_status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PSET_ERR(err, errlen, ...)                                                                 \
    do {                                                                                           \
        if ((err) != NULL && (errlen) > 0)                                                         \
            snprintf((err), (errlen), __VA_ARGS__);                                                \
    } while (0)

static int cmp_id(const void *a, const void *b) {
    return strcmp((const char *)a, (const char *)b);
}

static int check_args(const char *const *ids, size_t n, uint64_t total, uint64_t chunk_bytes,
                      char *err, size_t errlen) {
    if (n == 0 || ids == NULL) {
        PSET_ERR(err, errlen, "no live shard to place chunks on");
        return TT_EINVAL;
    }
    if (total == 0 || chunk_bytes < 4 || chunk_bytes % 4 != 0) {
        PSET_ERR(err, errlen, "cannot place %llu elements in chunks of %llu bytes",
                 (unsigned long long)total, (unsigned long long)chunk_bytes);
        return TT_EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        if (ids[i] == NULL || ids[i][0] == '\0' || strlen(ids[i]) >= TT_PLACE_ID_MAX) {
            PSET_ERR(err, errlen, "shard id %zu is empty or too long", i);
            return TT_EINVAL;
        }
    }
    return TT_OK;
}

static int alloc_shards(tt_placement_t *p, const char *const *ids, size_t n, char *err,
                        size_t errlen) {
    p->shard_ids = calloc(n, sizeof(*p->shard_ids));
    p->shard_bytes = calloc(n, sizeof(*p->shard_bytes));
    if (p->shard_ids == NULL || p->shard_bytes == NULL)
        return TT_ENOMEM;
    p->nshards = n;
    for (size_t i = 0; i < n; i++)
        snprintf(p->shard_ids[i], TT_PLACE_ID_MAX, "%s", ids[i]);
    qsort(p->shard_ids, n, sizeof(*p->shard_ids), cmp_id);
    for (size_t i = 1; i < n; i++) {
        if (strcmp(p->shard_ids[i - 1], p->shard_ids[i]) == 0) {
            PSET_ERR(err, errlen, "shard id '%s' listed twice", p->shard_ids[i]);
            return TT_EINVAL;
        }
    }
    return TT_OK;
}

static int cut_chunks(tt_placement_t *p) {
    uint64_t per = p->chunk_bytes / 4;
    uint64_t n = (p->total_elems + per - 1) / per;
    p->chunks = calloc((size_t)n, sizeof(*p->chunks));
    if (p->chunks == NULL)
        return TT_ENOMEM;
    p->nchunks = (size_t)n;
    for (uint64_t i = 0; i < n; i++) {
        p->chunks[i].offset = i * per;
        p->chunks[i].count = i + 1 < n ? per : p->total_elems - i * per;
    }
    return TT_OK;
}

int tt_placement_shard_index(const tt_placement_t *p, const char *id) {
    for (size_t i = 0; i < p->nshards; i++) {
        if (strcmp(p->shard_ids[i], id) == 0)
            return (int)i;
    }
    return -1;
}

static int same_chunking(const tt_placement_t *a, const tt_placement_t *b) {
    return a != NULL && b != NULL && a->chunks != NULL && b->chunks != NULL &&
           a->chunk_bytes == b->chunk_bytes && a->total_elems == b->total_elems &&
           a->nchunks == b->nchunks;
}

static size_t least_loaded(const tt_placement_t *p) {
    size_t best = 0;
    for (size_t s = 1; s < p->nshards; s++) {
        if (p->shard_bytes[s] < p->shard_bytes[best])
            best = s;
    }
    return best;
}

/* Keeps what prev placed on a live shard below the fair share, then fills
 * the rest greedily. Returns the number of chunks that kept their shard. */
static size_t assign(tt_placement_t *p, const tt_placement_t *prev) {
    uint64_t total_bytes = p->total_elems * 4;
    uint64_t cap = (total_bytes + p->nshards - 1) / p->nshards;
    uint8_t *placed = calloc(p->nchunks, 1);
    size_t kept = 0;
    if (placed == NULL)
        return SIZE_MAX;
    for (size_t i = 0; same_chunking(p, prev) && i < p->nchunks; i++) {
        int s = tt_placement_shard_index(p, prev->shard_ids[prev->chunks[i].shard]);
        uint64_t bytes = p->chunks[i].count * 4;
        if (s >= 0 && p->shard_bytes[s] + bytes <= cap) {
            p->chunks[i].shard = (uint32_t)s;
            p->shard_bytes[s] += bytes;
            placed[i] = 1;
            kept++;
        }
    }
    for (size_t i = 0; i < p->nchunks; i++) {
        if (placed[i])
            continue;
        size_t s = least_loaded(p);
        p->chunks[i].shard = (uint32_t)s;
        p->shard_bytes[s] += p->chunks[i].count * 4;
    }
    free(placed);
    return kept;
}

uint64_t tt_placement_auto_chunk_bytes(uint64_t total_elems) {
    const uint64_t page = 4096;
    if (total_elems >= TT_PLACE_CHUNKS_MIN * (TT_PLACE_CHUNK_BYTES_DEFAULT / 4))
        return TT_PLACE_CHUNK_BYTES_DEFAULT;
    uint64_t b = (total_elems * 4 + TT_PLACE_CHUNKS_MIN - 1) / TT_PLACE_CHUNKS_MIN;
    b = (b + page - 1) / page * page;
    return b < TT_PLACE_CHUNK_BYTES_MIN ? TT_PLACE_CHUNK_BYTES_MIN : b;
}

int tt_placement_compute(const tt_placement_t *prev, const char *const *ids, size_t nshards,
                         uint64_t total_elems, uint64_t chunk_bytes, tt_placement_t *out, char *err,
                         size_t errlen) {
    memset(out, 0, sizeof(*out));
    if (chunk_bytes == 0)
        chunk_bytes = tt_placement_auto_chunk_bytes(total_elems);
    int rc;
    TT_CHECK_GOTO(check_args(ids, nshards, total_elems, chunk_bytes, err, errlen), rc, fail);
    out->chunk_bytes = chunk_bytes;
    out->total_elems = total_elems;
    TT_CHECK_GOTO(alloc_shards(out, ids, nshards, err, errlen), rc, fail);
    TT_CHECK_GOTO(cut_chunks(out), rc, fail);
    if (assign(out, prev) == SIZE_MAX) {
        rc = TT_ENOMEM;
        goto fail;
    }
    out->version = 1;
    if (prev != NULL && prev->version > 0) {
        size_t moved = tt_placement_moved(prev, out);
        out->version = prev->version + (moved == 0 ? 0 : 1);
    }
    return TT_OK;
fail:
    tt_placement_free(out);
    return rc;
}

size_t tt_placement_moved(const tt_placement_t *prev, const tt_placement_t *next) {
    if (!same_chunking(prev, next))
        return SIZE_MAX;
    size_t moved = 0;
    for (size_t i = 0; i < next->nchunks; i++) {
        const char *a = prev->shard_ids[prev->chunks[i].shard];
        const char *b = next->shard_ids[next->chunks[i].shard];
        moved += strcmp(a, b) != 0;
    }
    return moved;
}

int tt_placement_copy(const tt_placement_t *src, tt_placement_t *out) {
    *out = *src;
    out->chunks = NULL;
    out->shard_ids = NULL;
    out->shard_bytes = NULL;
    out->chunks = malloc((src->nchunks ? src->nchunks : 1) * sizeof(*out->chunks));
    out->shard_ids = malloc((src->nshards ? src->nshards : 1) * sizeof(*out->shard_ids));
    out->shard_bytes = malloc((src->nshards ? src->nshards : 1) * sizeof(*out->shard_bytes));
    if (out->chunks == NULL || out->shard_ids == NULL || out->shard_bytes == NULL) {
        tt_placement_free(out);
        return TT_ENOMEM;
    }
    if (src->nchunks)
        memcpy(out->chunks, src->chunks, src->nchunks * sizeof(*out->chunks));
    if (src->nshards) {
        memcpy(out->shard_ids, src->shard_ids, src->nshards * sizeof(*out->shard_ids));
        memcpy(out->shard_bytes, src->shard_bytes, src->nshards * sizeof(*out->shard_bytes));
    }
    return TT_OK;
}

void tt_placement_free(tt_placement_t *p) {
    if (p == NULL)
        return;
    free(p->chunks);
    free(p->shard_ids);
    free(p->shard_bytes);
    memset(p, 0, sizeof(*p));
}

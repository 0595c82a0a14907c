/* Unit tests of tt_placement: chunking of the flat space, balance by bytes,
 * stability when nothing changes, minimal movement on shard loss and gain,
 * and argument checking. */
#include "tt_cunit.h"
#include "tt_placement.h"
#include "tt_status.h"

#include <stdint.h>
#include <string.h>

#define MIB ((uint64_t)1 << 20)

static uint64_t spread(const tt_placement_t *p) {
    uint64_t lo = UINT64_MAX, hi = 0;
    for (size_t s = 0; s < p->nshards; s++) {
        lo = p->shard_bytes[s] < lo ? p->shard_bytes[s] : lo;
        hi = p->shard_bytes[s] > hi ? p->shard_bytes[s] : hi;
    }
    return hi - lo;
}

static void placement_chunks_tile_space(void) {
    const char *ids[] = {"s0"};
    tt_placement_t p;
    uint64_t total = 10 * (MIB / 4) + 3; /* 10 full 1 MiB chunks + 3 elements */
    CU_ASSERT_EQUAL_FATAL(tt_placement_compute(NULL, ids, 1, total, MIB, &p, NULL, 0), TT_OK);
    CU_ASSERT_EQUAL(p.nchunks, 11);
    CU_ASSERT_EQUAL(p.version, 1);
    uint64_t next = 0;
    for (size_t i = 0; i < p.nchunks; i++) {
        CU_ASSERT_EQUAL(p.chunks[i].offset, next);
        next += p.chunks[i].count;
    }
    CU_ASSERT_EQUAL(next, total);
    CU_ASSERT_EQUAL(p.chunks[10].count, 3);
    CU_ASSERT_EQUAL(p.shard_bytes[0], total * 4);
    tt_placement_free(&p);
}

static void placement_balanced_by_bytes(void) {
    const char *ids[] = {"c", "a", "b"};
    tt_placement_t p;
    uint64_t total = 100 * (MIB / 4) + 12345;
    CU_ASSERT_EQUAL_FATAL(tt_placement_compute(NULL, ids, 3, total, MIB, &p, NULL, 0), TT_OK);
    CU_ASSERT(spread(&p) <= MIB);
    uint64_t sum = 0;
    for (size_t s = 0; s < 3; s++)
        sum += p.shard_bytes[s];
    CU_ASSERT_EQUAL(sum, total * 4);
    /* ids are sorted whatever order they came in */
    CU_ASSERT_STRING_EQUAL(p.shard_ids[0], "a");
    CU_ASSERT_STRING_EQUAL(p.shard_ids[2], "c");
    tt_placement_free(&p);
}

static void placement_single_element(void) {
    const char *ids[] = {"a", "b"};
    tt_placement_t p;
    CU_ASSERT_EQUAL_FATAL(tt_placement_compute(NULL, ids, 2, 1, 0, &p, NULL, 0), TT_OK);
    CU_ASSERT_EQUAL(p.nchunks, 1);
    CU_ASSERT_EQUAL(p.chunk_bytes, TT_PLACE_CHUNK_BYTES_MIN);
    CU_ASSERT_EQUAL(p.chunks[0].count, 1);
    tt_placement_free(&p);
}

/* A job that names no chunk size gets 4 MiB chunks, or at least
 * TT_PLACE_CHUNKS_MIN chunks of a smaller space: the reference MLP's 1.07 MB
 * is cut in four, not left whole on one shard. */
static void placement_auto_chunk_size(void) {
    const uint64_t q = MIB / 4; /* elements in 1 MiB */
    CU_ASSERT_EQUAL(tt_placement_auto_chunk_bytes(1), TT_PLACE_CHUNK_BYTES_MIN);
    CU_ASSERT_EQUAL(tt_placement_auto_chunk_bytes(16 * 1024), TT_PLACE_CHUNK_BYTES_MIN);
    CU_ASSERT_EQUAL(tt_placement_auto_chunk_bytes(q), 256 * 1024);
    CU_ASSERT_EQUAL(tt_placement_auto_chunk_bytes(q + 1), 256 * 1024 + 4096);
    CU_ASSERT_EQUAL(tt_placement_auto_chunk_bytes(16 * q - 1), TT_PLACE_CHUNK_BYTES_DEFAULT);
    CU_ASSERT_EQUAL(tt_placement_auto_chunk_bytes(16 * q), TT_PLACE_CHUNK_BYTES_DEFAULT);
    CU_ASSERT_EQUAL(tt_placement_auto_chunk_bytes(1000 * q), TT_PLACE_CHUNK_BYTES_DEFAULT);
    /* 784-256-256-10: four chunks, two on each of two shards */
    uint64_t mlp = 784 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10;
    const char *ids[] = {"a", "b"};
    tt_placement_t p;
    CU_ASSERT_EQUAL_FATAL(tt_placement_compute(NULL, ids, 2, mlp, 0, &p, NULL, 0), TT_OK);
    CU_ASSERT_EQUAL(p.nchunks, TT_PLACE_CHUNKS_MIN);
    CU_ASSERT_EQUAL(p.chunk_bytes % 4096, 0);
    CU_ASSERT_EQUAL(p.shard_bytes[0] + p.shard_bytes[1], mlp * 4);
    CU_ASSERT(p.shard_bytes[0] > 0 && p.shard_bytes[1] > 0);
    tt_placement_free(&p);
    for (uint64_t n = 1; n < 20 * q; n += q / 3 + 7) { /* never more than 4 small chunks */
        uint64_t b = tt_placement_auto_chunk_bytes(n);
        CU_ASSERT(b % 4 == 0);
        CU_ASSERT(b >= TT_PLACE_CHUNK_BYTES_MIN && b <= TT_PLACE_CHUNK_BYTES_DEFAULT);
        CU_ASSERT(b == TT_PLACE_CHUNK_BYTES_DEFAULT || (n * 4 + b - 1) / b <= TT_PLACE_CHUNKS_MIN);
    }
}

static void placement_stable_when_nothing_changes(void) {
    const char *ids[] = {"a", "b", "c"};
    const char *shuffled[] = {"b", "c", "a"};
    tt_placement_t p1, p2, p3;
    uint64_t total = 37 * (MIB / 4) + 5;
    CU_ASSERT_EQUAL_FATAL(tt_placement_compute(NULL, ids, 3, total, MIB, &p1, NULL, 0), TT_OK);
    CU_ASSERT_EQUAL_FATAL(tt_placement_compute(&p1, shuffled, 3, total, MIB, &p2, NULL, 0), TT_OK);
    CU_ASSERT_EQUAL(tt_placement_moved(&p1, &p2), 0);
    CU_ASSERT_EQUAL(p2.version, p1.version);
    /* from scratch, the same inputs give the same answer */
    CU_ASSERT_EQUAL_FATAL(tt_placement_compute(NULL, shuffled, 3, total, MIB, &p3, NULL, 0), TT_OK);
    CU_ASSERT_EQUAL(tt_placement_moved(&p1, &p3), 0);
    tt_placement_free(&p1);
    tt_placement_free(&p2);
    tt_placement_free(&p3);
}

static void placement_recomputed_on_shard_loss(void) {
    const char *ids[] = {"a", "b", "c", "d"};
    const char *survivors[] = {"a", "c", "d"};
    tt_placement_t p1, p2;
    uint64_t total = 64 * (MIB / 4) + 77;
    CU_ASSERT_EQUAL_FATAL(tt_placement_compute(NULL, ids, 4, total, MIB, &p1, NULL, 0), TT_OK);
    size_t on_b = 0;
    for (size_t i = 0; i < p1.nchunks; i++)
        on_b += strcmp(p1.shard_ids[p1.chunks[i].shard], "b") == 0;
    CU_ASSERT_EQUAL_FATAL(tt_placement_compute(&p1, survivors, 3, total, MIB, &p2, NULL, 0), TT_OK);
    CU_ASSERT_EQUAL(p2.version, p1.version + 1);
    CU_ASSERT_EQUAL(p2.nshards, 3);
    CU_ASSERT(on_b > 0);
    CU_ASSERT_EQUAL(tt_placement_moved(&p1, &p2), on_b); /* only b's chunks moved */
    CU_ASSERT(spread(&p2) <= MIB);
    CU_ASSERT_EQUAL(tt_placement_shard_index(&p2, "b"), -1);
    tt_placement_free(&p1);
    tt_placement_free(&p2);
}

static void placement_rebalances_on_shard_gain(void) {
    const char *one[] = {"a"};
    const char *two[] = {"a", "b"};
    tt_placement_t p1, p2;
    uint64_t total = 20 * (MIB / 4);
    CU_ASSERT_EQUAL_FATAL(tt_placement_compute(NULL, one, 1, total, MIB, &p1, NULL, 0), TT_OK);
    CU_ASSERT_EQUAL_FATAL(tt_placement_compute(&p1, two, 2, total, MIB, &p2, NULL, 0), TT_OK);
    CU_ASSERT_EQUAL(p2.version, 2);
    CU_ASSERT_EQUAL(tt_placement_moved(&p1, &p2), 10); /* half moves, no more */
    CU_ASSERT_EQUAL(spread(&p2), 0);
    tt_placement_free(&p1);
    tt_placement_free(&p2);
}

static void placement_rejects_bad_arguments(void) {
    const char *dup[] = {"a", "a"};
    const char *ok[] = {"a"};
    tt_placement_t p;
    char err[128] = "";
    CU_ASSERT_EQUAL(tt_placement_compute(NULL, dup, 2, 10, 0, &p, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT(strstr(err, "twice") != NULL);
    CU_ASSERT_EQUAL(tt_placement_compute(NULL, ok, 0, 10, 0, &p, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_EQUAL(tt_placement_compute(NULL, ok, 1, 0, 0, &p, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_EQUAL(tt_placement_compute(NULL, ok, 1, 10, 6, &p, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_PTR_NULL(p.chunks);
}

static void placement_copy_is_deep(void) {
    const char *ids[] = {"a", "b"};
    tt_placement_t p, q;
    CU_ASSERT_EQUAL_FATAL(tt_placement_compute(NULL, ids, 2, 1000, 64, &p, NULL, 0), TT_OK);
    CU_ASSERT_EQUAL_FATAL(tt_placement_copy(&p, &q), TT_OK);
    CU_ASSERT(q.chunks != p.chunks);
    CU_ASSERT_EQUAL(tt_placement_moved(&p, &q), 0);
    tt_placement_free(&p);
    CU_ASSERT_EQUAL(q.nchunks, 63);
    tt_placement_free(&q);
}

static const tt_cunit_test_t tests[] = {
    {"placement_chunks_tile_space", placement_chunks_tile_space},
    {"placement_balanced_by_bytes", placement_balanced_by_bytes},
    {"placement_single_element", placement_single_element},
    {"placement_auto_chunk_size", placement_auto_chunk_size},
    {"placement_stable_when_nothing_changes", placement_stable_when_nothing_changes},
    {"placement_recomputed_on_shard_loss", placement_recomputed_on_shard_loss},
    {"placement_rebalances_on_shard_gain", placement_rebalances_on_shard_gain},
    {"placement_rejects_bad_arguments", placement_rejects_bad_arguments},
    {"placement_copy_is_deep", placement_copy_is_deep},
    {NULL, NULL},
};

TT_CUNIT_MAIN("placement", tests)

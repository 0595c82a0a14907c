/* Unit tests of tt_buckets: end-anchored layout with a smaller first bucket,
 * buckets ending at tensor boundaries (only tensors larger than a bucket
 * cut), limits respected, and completion reported exactly once per step. */
#include "tt_buckets.h"
#include "tt_cunit.h"
#include "tt_status.h"

static tt_buckets_t *make(size_t bucket, size_t first, const size_t *counts, size_t n) {
    tt_buckets_opts_t o = {4, bucket, first};
    tt_buckets_t *b = NULL;
    CU_ASSERT_FATAL(tt_buckets_create(&b, &o) == TT_OK);
    for (size_t i = 0; i < n; i++) {
        size_t id = 99;
        CU_ASSERT(tt_buckets_add(b, counts[i], &id) == TT_OK);
        CU_ASSERT(id == i);
    }
    CU_ASSERT_FATAL(tt_buckets_finalize(b) == TT_OK);
    return b;
}

static void buckets_layout_end_anchored(void) {
    /* 5 tensors, 100 elements total; buckets of 40 B = 10 elems, first 16 B */
    const size_t counts[] = {30, 25, 20, 15, 10};
    tt_buckets_t *b = make(40, 16, counts, 5);
    CU_ASSERT(tt_buckets_total(b) == 100);
    size_t off, cnt, covered = 0, prev_off = 100;
    /* [96,100) [90,96) | [80,90) [75,80) | [65,75) | [55,65) [45,55) [35,45)
     * | [30,35) [20,30) [10,20) [0,10): tensors 4, 3, 2, 1, 0 ("|") */
    CU_ASSERT(tt_buckets_count(b) == 12);
    for (size_t k = 0; k < tt_buckets_count(b); k++) {
        CU_ASSERT(tt_buckets_bucket_span(b, k, &off, &cnt) == TT_OK);
        CU_ASSERT(off + cnt == prev_off); /* contiguous, walking backwards */
        CU_ASSERT(cnt >= 1 && cnt * 4 <= (k == 0 ? 16u : 40u));
        prev_off = off;
        covered += cnt;
    }
    CU_ASSERT(covered == 100 && prev_off == 0);
    CU_ASSERT(tt_buckets_bucket_span(b, 0, &off, &cnt) == TT_OK);
    CU_ASSERT(off == 96 && cnt == 4); /* first bucket: the last tensor's tail */
    CU_ASSERT(tt_buckets_tensor_span(b, 4, &off, &cnt) == TT_OK);
    CU_ASSERT(off == 90 && cnt == 10);
    CU_ASSERT(tt_buckets_tensor_span(b, 5, &off, &cnt) == TT_ENOTFOUND);
    CU_ASSERT(tt_buckets_add(b, 5, NULL) == TT_EBUSY);
    tt_buckets_destroy(&b);
    CU_ASSERT(b == NULL);
}

static void buckets_completion_once(void) {
    /* bucket 0 = [90,100) (tensor 4), bucket 1 = [55,90) (tensors 2, 3:
     * tensor 1 does not fit in what is left), bucket 2 = [30,55) (tensor 1),
     * bucket 3 = [0,30) (tensor 0) */
    const size_t counts[] = {30, 25, 20, 15, 10};
    tt_buckets_t *b = make(160, 40, counts, 5);
    size_t done[8], nd;
    CU_ASSERT(tt_buckets_count(b) == 4);
    for (int step = 0; step < 2; step++) {
        CU_ASSERT(tt_buckets_grad_ready(b, 4, done, &nd) == TT_OK);
        CU_ASSERT(nd == 1 && done[0] == 0);
        CU_ASSERT(tt_buckets_grad_ready(b, 4, done, &nd) == TT_EEXIST);
        CU_ASSERT(nd == 0);
        CU_ASSERT(tt_buckets_grad_ready(b, 3, done, &nd) == TT_OK && nd == 0);
        CU_ASSERT(tt_buckets_grad_ready(b, 2, done, &nd) == TT_OK);
        CU_ASSERT(nd == 1 && done[0] == 1);
        CU_ASSERT(tt_buckets_grad_ready(b, 1, done, &nd) == TT_OK);
        CU_ASSERT(nd == 1 && done[0] == 2);
        CU_ASSERT(tt_buckets_grad_ready(b, 0, done, &nd) == TT_OK);
        CU_ASSERT(nd == 1 && done[0] == 3);
        tt_buckets_reset(b);
    }
    CU_ASSERT(tt_buckets_grad_ready(b, 7, done, &nd) == TT_ENOTFOUND);
    tt_buckets_destroy(&b);
}

static void buckets_big_tensor_spans_buckets(void) {
    const size_t counts[] = {3, 50};
    tt_buckets_t *b = make(40, 8, counts, 2);
    size_t done[16], nd;
    /* tensor 1 (50) is cut from its end: 2, then 10 x 4, then its head of 8
     * alone (tensor 0 does not fit beside it); tensor 0 gets bucket 6 */
    CU_ASSERT(tt_buckets_count(b) == 7);
    CU_ASSERT(tt_buckets_grad_ready(b, 1, done, &nd) == TT_OK);
    CU_ASSERT(nd == 6); /* buckets 0..5 lie inside tensor 1 only */
    for (size_t i = 0; i < nd; i++)
        CU_ASSERT(done[i] == i);
    size_t off, cnt;
    CU_ASSERT(tt_buckets_bucket_span(b, 5, &off, &cnt) == TT_OK && off == 3 && cnt == 8);
    CU_ASSERT(tt_buckets_grad_ready(b, 0, done, &nd) == TT_OK);
    CU_ASSERT(nd == 1 && done[0] == 6);
    tt_buckets_destroy(&b);
}

static void buckets_reference_mlp(void) {
    /* 784-256-256-10 in model order (W1 b1 W2 b2 W3 b3), default sizes: the
     * first bucket takes every tensor after W1 and completes as soon as b1
     * is ready, while W1 (802,816 B) is still being computed; cutting W1 to
     * fill 1 MiB would hold the first bucket back until W1 is done. */
    const size_t counts[] = {200704, 256, 65536, 256, 2560, 10};
    tt_buckets_t *b = make(0, 0, counts, 6);
    size_t done[4], nd, off, cnt;
    CU_ASSERT(tt_buckets_count(b) == 2);
    CU_ASSERT(tt_buckets_bucket_span(b, 0, &off, &cnt) == TT_OK);
    CU_ASSERT(off == 200704 && cnt == 68618);
    CU_ASSERT(tt_buckets_bucket_span(b, 1, &off, &cnt) == TT_OK && off == 0 && cnt == 200704);
    for (size_t t = 5; t >= 2; t--)
        CU_ASSERT(tt_buckets_grad_ready(b, t, done, &nd) == TT_OK && nd == 0);
    CU_ASSERT(tt_buckets_grad_ready(b, 1, done, &nd) == TT_OK && nd == 1 && done[0] == 0);
    CU_ASSERT(tt_buckets_grad_ready(b, 0, done, &nd) == TT_OK && nd == 1 && done[0] == 1);
    tt_buckets_destroy(&b);
}

static void buckets_defaults_and_errors(void) {
    tt_buckets_t *b = NULL;
    tt_buckets_opts_t bad = {4, 64, 128};
    CU_ASSERT(tt_buckets_create(&b, &bad) == TT_EINVAL);
    CU_ASSERT(b == NULL);
    CU_ASSERT_FATAL(tt_buckets_create(&b, NULL) == TT_OK);
    CU_ASSERT(tt_buckets_add(b, 0, NULL) == TT_EINVAL);
    size_t done[4], nd;
    CU_ASSERT(tt_buckets_grad_ready(b, 0, done, &nd) == TT_EBUSY);
    /* 10M floats = 40 MB: 1 MiB first, then 25 MiB, then the rest */
    CU_ASSERT(tt_buckets_add(b, 10000000, NULL) == TT_OK);
    CU_ASSERT(tt_buckets_finalize(b) == TT_OK);
    CU_ASSERT(tt_buckets_finalize(b) == TT_EBUSY);
    size_t off, cnt;
    CU_ASSERT(tt_buckets_count(b) == 3);
    CU_ASSERT(tt_buckets_bucket_span(b, 0, &off, &cnt) == TT_OK && cnt == 262144);
    CU_ASSERT(tt_buckets_bucket_span(b, 1, &off, &cnt) == TT_OK && cnt == 6553600);
    CU_ASSERT(tt_buckets_bucket_span(b, 2, &off, &cnt) == TT_OK && off == 0);
    CU_ASSERT(cnt == 10000000 - 262144 - 6553600);
    tt_buckets_destroy(&b);
    CU_ASSERT_FATAL(tt_buckets_create(&b, NULL) == TT_OK);
    CU_ASSERT(tt_buckets_finalize(b) == TT_OK);
    CU_ASSERT(tt_buckets_count(b) == 0);
    tt_buckets_destroy(&b);
}

static const tt_cunit_test_t tests[] = {
    {"buckets_layout_end_anchored", buckets_layout_end_anchored},
    {"buckets_completion_once", buckets_completion_once},
    {"buckets_big_tensor_spans_buckets", buckets_big_tensor_spans_buckets},
    {"buckets_reference_mlp", buckets_reference_mlp},
    {"buckets_defaults_and_errors", buckets_defaults_and_errors},
    {NULL, NULL},
};

TT_CUNIT_MAIN("buckets", tests)

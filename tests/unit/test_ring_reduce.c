/* Unit tests of tt_ring_reduce: every (dtype, op) kernel against a scalar
 * reference over lengths that hit the blocked loop and its scalar tail, int64
 * sums that wrap, unsupported pairs, and misaligned sources. */
#include "tt_collseq.h"
#include "tt_cunit.h"
#include "tt_ring_reduce.h"

#include <stdint.h>
#include <string.h>

#define N 37 /* two blocks of 16 and a tail of 5 */

static void ring_reduce_f32_sum_min_max(void) {
    float d[N], s[N], ref[N];
    const int ops[] = {TT_RED_SUM, TT_RED_MIN, TT_RED_MAX};
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < N; i++) {
            d[i] = (float)(i % 7) - 3.0f;
            s[i] = (float)(i % 5) - 2.5f;
            ref[i] = ops[k] == TT_RED_SUM   ? d[i] + s[i]
                     : ops[k] == TT_RED_MIN ? (s[i] < d[i] ? s[i] : d[i])
                                            : (s[i] > d[i] ? s[i] : d[i]);
        }
        tt_ring_red_fn fn = tt_ring_reduce_fn(TT_DT_FLOAT32, ops[k]);
        CU_ASSERT_PTR_NOT_NULL_FATAL(fn);
        fn(d, s, N);
        CU_ASSERT(memcmp(d, ref, sizeof(d)) == 0);
    }
}

static void ring_reduce_f64_and_i64(void) {
    double a[N], b[N];
    int64_t x[N], y[N];
    for (int i = 0; i < N; i++) {
        a[i] = i * 0.25;
        b[i] = -i * 0.5;
        x[i] = i == N - 1 ? INT64_MAX : -i; /* the last sum wraps */
        y[i] = i == N - 1 ? 1 : 3 * i;
    }
    tt_ring_reduce_fn(TT_DT_FLOAT64, TT_RED_MAX)(a, b, N);
    tt_ring_reduce_fn(TT_DT_INT64, TT_RED_SUM)(x, y, N);
    for (int i = 0; i < N; i++) {
        CU_ASSERT_EQUAL(a[i], i * 0.25);
        if (i < N - 1)
            CU_ASSERT_EQUAL(x[i], 2 * i);
    }
    CU_ASSERT_EQUAL(x[N - 1], INT64_MIN);
    int64_t m[2] = {5, -5}, n[2] = {-7, 7};
    tt_ring_reduce_fn(TT_DT_INT64, TT_RED_MIN)(m, n, 2);
    CU_ASSERT(m[0] == -7 && m[1] == -5);
}

static void ring_reduce_rejects_unsupported(void) {
    CU_ASSERT_PTR_NULL(tt_ring_reduce_fn(TT_DT_FLOAT32, TT_RED_NONE));
    CU_ASSERT_PTR_NULL(tt_ring_reduce_fn(0, TT_RED_SUM));
    CU_ASSERT_PTR_NULL(tt_ring_reduce_fn(TT_DT_INT64 + 1, TT_RED_SUM));
    CU_ASSERT_PTR_NULL(tt_ring_reduce_fn(TT_DT_FLOAT64, TT_RED_MAX + 1));
}

/* A source one byte off alignment, longer than the aligned bounce buffer
 * (64 x 8 bytes), so the copy loop runs more than once. */
static void ring_reduce_misaligned_source(void) {
    enum { M = 150 };
    double d[M], s[M];
    unsigned char raw[M * sizeof(double) + 1];
    for (int i = 0; i < M; i++) {
        d[i] = i;
        s[i] = 1000.0 + i;
    }
    memcpy(raw + 1, s, sizeof(s));
    tt_ring_reduce_into(tt_ring_reduce_fn(TT_DT_FLOAT64, TT_RED_SUM), d, raw + 1, M,
                        sizeof(double));
    for (int i = 0; i < M; i++)
        CU_ASSERT_EQUAL(d[i], 1000.0 + 2 * i);
}

static const tt_cunit_test_t tests[] = {
    {"ring_reduce_f32_sum_min_max", ring_reduce_f32_sum_min_max},
    {"ring_reduce_f64_and_i64", ring_reduce_f64_and_i64},
    {"ring_reduce_rejects_unsupported", ring_reduce_rejects_unsupported},
    {"ring_reduce_misaligned_source", ring_reduce_misaligned_source},
    {NULL, NULL},
};

TT_CUNIT_MAIN("ring_reduce", tests)

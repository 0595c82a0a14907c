/* Unit tests of tt_crc32c: published CRC-32C vectors (RFC 3720 B.4 and the
 * "123456789" check value) through both implementations, and agreement of
 * slicing-by-8, SSE4.2 and a bit-at-a-time reference on every length 0..64
 * at every alignment, plus incremental continuation. */
#include "tt_crc32c.h"
#include "tt_cunit.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef uint32_t (*crc_fn)(uint32_t, const void *, size_t);

/* The definition, one bit at a time: independent of the tables. */
static uint32_t crc_bitwise(uint32_t crc, const uint8_t *p, size_t n) {
    uint32_t c = ~crc;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
    }
    return ~c;
}

static void check_vectors(crc_fn f) {
    uint8_t buf[32];
    CU_ASSERT_EQUAL(f(0, "123456789", 9), 0xE3069283u);
    memset(buf, 0, sizeof(buf));
    CU_ASSERT_EQUAL(f(0, buf, 32), 0x8A9136AAu);
    memset(buf, 0xff, sizeof(buf));
    CU_ASSERT_EQUAL(f(0, buf, 32), 0x62A8AB43u);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)i;
    CU_ASSERT_EQUAL(f(0, buf, 32), 0x46DD794Eu);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)(31 - i);
    CU_ASSERT_EQUAL(f(0, buf, 32), 0x113FDB5Cu);
    CU_ASSERT_EQUAL(f(0x12345678u, NULL, 0), 0x12345678u);
}

static void crc32c_known_vectors_sw(void) {
    check_vectors(tt_crc32c_sw);
}

static void crc32c_known_vectors_hw(void) {
    check_vectors(tt_crc32c_hw);
    check_vectors(tt_crc32c);
    /* Say which path ran, so a CI log shows whether SSE4.2 was tested. */
    printf("\n    crc32c implementation: %s\n", tt_crc32c_impl_name());
}

static void fill(uint8_t *buf, size_t n) {
    uint32_t x = 0x9e3779b9u;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        buf[i] = (uint8_t)(x >> 24);
    }
}

static void crc32c_implementations_agree_all_lengths_and_alignments(void) {
    uint8_t buf[64 + 16];
    fill(buf, sizeof(buf));
    int bad = 0;
    for (size_t start = 0; start < 16; start++) {
        for (size_t len = 0; len <= 64; len++) {
            uint32_t want = crc_bitwise(0, buf + start, len);
            bad += tt_crc32c_sw(0, buf + start, len) != want;
            bad += tt_crc32c_hw(0, buf + start, len) != want;
            bad += tt_crc32c(0, buf + start, len) != want;
        }
    }
    CU_ASSERT_EQUAL(bad, 0);
}

/* Every entry of every slicing table is reached by some 8-byte block. */
static void crc32c_tables_match_reference_on_large_input(void) {
    static uint8_t big[1 << 16];
    fill(big, sizeof(big));
    uint32_t want = crc_bitwise(0, big, sizeof(big));
    CU_ASSERT_EQUAL(tt_crc32c_sw(0, big, sizeof(big)), want);
    CU_ASSERT_EQUAL(tt_crc32c_hw(0, big, sizeof(big)), want);
    int bad = 0;
    for (unsigned b = 0; b < 256; b++) {
        uint8_t blk[8] = {(uint8_t)b,         (uint8_t)(b * 7),  (uint8_t)(b ^ 0x5a),
                          (uint8_t)(255 - b), (uint8_t)(b * 13), (uint8_t)(b + 1),
                          (uint8_t)(b >> 1),  (uint8_t)b};
        bad += tt_crc32c_sw(0, blk, 8) != crc_bitwise(0, blk, 8);
    }
    CU_ASSERT_EQUAL(bad, 0);
}

/* The three-stream path (inputs of 3 x 32 KiB and more) against
 * slicing-by-8, with odd lengths, offsets and a non-zero start CRC, and
 * the shift operators against zero bytes run through the byte-wise code. */
static void crc32c_interleaved_matches_sw(void) {
    size_t n = (size_t)7 * 32768 + 1234;
    uint8_t *big = malloc(n + 16);
    CU_ASSERT_PTR_NOT_NULL_FATAL(big);
    fill(big, n + 16);
    const size_t lens[] = {3 * 32768 - 1, 3 * 32768, 3 * 32768 + 5, 6 * 32768 + 17, n};
    int bad = 0;
    for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++)
        for (size_t start = 0; start < 9; start += 4)
            bad += tt_crc32c_hw(0x1234abcdu, big + start, lens[k]) !=
                   tt_crc32c_sw(0x1234abcdu, big + start, lens[k]);
    CU_ASSERT_EQUAL(bad, 0);
    memset(big, 0, n);
    CU_ASSERT_EQUAL(tt_crc32c_hw(0, big, n), tt_crc32c_sw(0, big, n));
    free(big);
}

static void crc32c_incremental_equals_one_shot(void) {
    uint8_t buf[300];
    fill(buf, sizeof(buf));
    uint32_t whole = tt_crc32c(0, buf, sizeof(buf));
    int bad = 0;
    for (size_t cut = 0; cut <= sizeof(buf); cut += 7) {
        bad += tt_crc32c(tt_crc32c(0, buf, cut), buf + cut, sizeof(buf) - cut) != whole;
        bad += tt_crc32c_sw(tt_crc32c_hw(0, buf, cut), buf + cut, sizeof(buf) - cut) != whole;
    }
    CU_ASSERT_EQUAL(bad, 0);
    buf[150] ^= 0x01;
    CU_ASSERT_NOT_EQUAL(tt_crc32c(0, buf, sizeof(buf)), whole);
}

static const tt_cunit_test_t tests[] = {
    {"crc32c_known_vectors_sw", crc32c_known_vectors_sw},
    {"crc32c_known_vectors_hw", crc32c_known_vectors_hw},
    {"crc32c_implementations_agree_all_lengths_and_alignments",
     crc32c_implementations_agree_all_lengths_and_alignments},
    {"crc32c_tables_match_reference_on_large_input", crc32c_tables_match_reference_on_large_input},
    {"crc32c_interleaved_matches_sw", crc32c_interleaved_matches_sw},
    {"crc32c_incremental_equals_one_shot", crc32c_incremental_equals_one_shot},
    {NULL, NULL},
};

TT_CUNIT_MAIN("crc32c", tests)

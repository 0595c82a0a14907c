/* Unit tests of tt_idx: the pure header parser, and the loader on small
 * gzip files this test writes into a temporary directory: a valid set and
 * each corrupt case (missing file, truncated header, truncated data, bad
 * magic, wrong dims, count mismatch, trailing bytes, bad label, not gzip,
 * truncated gzip stream). Never reads the real dataset. */
#include "tt_cunit.h"
#include "tt_idx.h"
#include "tt_status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define NIMG 3
#define PIX  (28 * 28)

static size_t put_header(uint8_t *b, uint8_t ndim, const uint32_t *dims) {
    b[0] = 0;
    b[1] = 0;
    b[2] = 0x08;
    b[3] = ndim;
    for (int i = 0; i < ndim; i++) {
        b[4 + 4 * i] = (uint8_t)(dims[i] >> 24);
        b[5 + 4 * i] = (uint8_t)(dims[i] >> 16);
        b[6 + 4 * i] = (uint8_t)(dims[i] >> 8);
        b[7 + 4 * i] = (uint8_t)dims[i];
    }
    return 4 + 4 * (size_t)ndim;
}

/* Image file bytes: NIMG x rows x cols, pixel k = k % 256. */
static size_t image_bytes(uint8_t *b, uint32_t n, uint32_t rows, uint32_t cols) {
    uint32_t d[3] = {n, rows, cols};
    size_t h = put_header(b, 3, d);
    for (size_t k = 0; k < (size_t)n * rows * cols; k++)
        b[h + k] = (uint8_t)(k % 256);
    return h + (size_t)n * rows * cols;
}

static size_t label_bytes(uint8_t *b, uint32_t n) {
    size_t h = put_header(b, 1, &n);
    for (uint32_t k = 0; k < n; k++)
        b[h + k] = (uint8_t)(k % 10);
    return h + n;
}

static void write_file(const char *dir, const char *name, const uint8_t *b, size_t len, int gz) {
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    if (gz) {
        gzFile f = gzopen(path, "wb");
        CU_ASSERT_FATAL(f != NULL);
        CU_ASSERT(len == 0 || gzwrite(f, b, (unsigned)len) == (int)len);
        gzclose(f);
    } else {
        FILE *f = fopen(path, "wb");
        CU_ASSERT_FATAL(f != NULL);
        fwrite(b, 1, len, f);
        fclose(f);
    }
}

static uint8_t img[16 + NIMG * PIX + 8], lab[8 + NIMG + 8];

/* Writes "x-images/labels" in a fresh temp dir; returns the dir. */
static char *fixture(size_t ilen, size_t llen, int gz) {
    static char dir[64];
    snprintf(dir, sizeof(dir), "/tmp/tt_idx_XXXXXX");
    CU_ASSERT_FATAL(mkdtemp(dir) != NULL);
    write_file(dir, "x-images-idx3-ubyte.gz", img, ilen, gz);
    write_file(dir, "x-labels-idx1-ubyte.gz", lab, llen, 1);
    return dir;
}

static void cleanup(const char *dir) {
    char p[512];
    snprintf(p, sizeof(p), "%s/x-images-idx3-ubyte.gz", dir);
    unlink(p);
    snprintf(p, sizeof(p), "%s/x-labels-idx1-ubyte.gz", dir);
    unlink(p);
    rmdir(dir);
}

/* Loads the fixture and returns the status; err receives the message. */
static int load(size_t ilen, size_t llen, int gz, char *err, size_t errlen) {
    char *dir = fixture(ilen, llen, gz);
    tt_idx_set_t s = {0};
    int rc = tt_idx_load(dir, "x", 0, &s, err, errlen);
    if (rc < 0)
        CU_ASSERT(s.pixels == NULL && s.images == NULL && s.labels == NULL && s.count == 0);
    tt_idx_free(&s);
    cleanup(dir);
    return rc;
}

static void idx_loads_valid_files(void) {
    size_t il = image_bytes(img, NIMG, 28, 28), ll = label_bytes(lab, NIMG);
    char *dir = fixture(il, ll, 1);
    tt_idx_set_t s = {0};
    char err[256] = "";
    CU_ASSERT_EQUAL_FATAL(tt_idx_load(dir, "x", 0, &s, err, sizeof(err)), TT_OK);
    CU_ASSERT(s.count == NIMG && s.rows == 28 && s.cols == 28);
    CU_ASSERT(s.pixels != NULL && s.images == NULL); /* the file's bytes, not floats */
    float row[2 * PIX];
    tt_idx_rows(&s, 0, 2, row);
    CU_ASSERT_EQUAL(row[0], 0.0f);
    CU_ASSERT_EQUAL(row[255], 1.0f);
    /* exactly (float)p / 255.0f for every byte value: runs stay bitwise
     * what they were when the loader stored floats */
    int exact = 1;
    for (size_t i = 0; i < 2 * PIX; i++)
        exact &= row[i] == (float)img[16 + i] / 255.0f;
    CU_ASSERT(exact);
    tt_idx_rows(&s, 1, 1, row);
    CU_ASSERT_EQUAL(row[1], (float)((PIX + 1) % 256) / 255.0f);
    CU_ASSERT(s.labels[2] == 2);
    tt_idx_free(&s);
    CU_ASSERT(s.pixels == NULL && s.images == NULL);
    tt_idx_free(NULL);
    cleanup(dir);
}

/* --train-limit: only the first examples are kept, but both
 * files are still checked whole (a bad label past the kept ones, a count
 * mismatch). */
static void idx_keeps_the_first_examples(void) {
    size_t il = image_bytes(img, NIMG, 28, 28), ll = label_bytes(lab, NIMG);
    char *dir = fixture(il, ll, 1);
    tt_idx_set_t s = {0};
    char err[256] = "";
    CU_ASSERT_EQUAL_FATAL(tt_idx_load(dir, "x", 2, &s, err, sizeof(err)), TT_OK);
    CU_ASSERT(s.count == 2 && s.in_file == NIMG && s.rows == 28 && s.cols == 28);
    float row[PIX];
    tt_idx_rows(&s, 1, 1, row);
    CU_ASSERT_EQUAL(row[1], (float)((PIX + 1) % 256) / 255.0f);
    CU_ASSERT(s.labels[0] == 0 && s.labels[1] == 1);
    tt_idx_free(&s);
    CU_ASSERT_EQUAL_FATAL(tt_idx_load(dir, "x", NIMG + 5, &s, err, sizeof(err)), TT_OK);
    CU_ASSERT(s.count == NIMG && s.labels[2] == 2);
    tt_idx_free(&s);
    cleanup(dir);
    lab[8 + 2] = 11;
    dir = fixture(il, ll, 1);
    CU_ASSERT_EQUAL(tt_idx_load(dir, "x", 1, &s, err, sizeof(err)), TT_ECORRUPT);
    CU_ASSERT(strstr(err, "label 11 at index 2") != NULL);
    CU_ASSERT(s.pixels == NULL && s.count == 0);
    cleanup(dir);
    dir = fixture(il, label_bytes(lab, NIMG - 1), 1);
    CU_ASSERT_EQUAL(tt_idx_load(dir, "x", 1, &s, err, sizeof(err)), TT_ECORRUPT);
    CU_ASSERT(strstr(err, "2 labels but the images file has 3") != NULL);
    cleanup(dir);
}

static void idx_missing_file_is_notfound(void) {
    char err[256];
    tt_idx_set_t s = {0};
    CU_ASSERT_EQUAL(tt_idx_load("/nonexistent-dir", "train", 0, &s, err, sizeof(err)),
                    TT_ENOTFOUND);
    CU_ASSERT(strstr(err, "train-images-idx3-ubyte.gz") != NULL);
}

static void idx_truncated_header_and_data(void) {
    char err[256];
    size_t ll = label_bytes(lab, NIMG);
    image_bytes(img, NIMG, 28, 28);
    CU_ASSERT_EQUAL(load(10, ll, 1, err, sizeof(err)), TT_ECORRUPT);
    CU_ASSERT(strstr(err, "truncated header") != NULL);
    CU_ASSERT(strstr(err, "x-images-idx3-ubyte.gz") != NULL);
    CU_ASSERT_EQUAL(load(16 + PIX, ll, 1, err, sizeof(err)), TT_ECORRUPT);
    CU_ASSERT(strstr(err, "truncated data") != NULL);
}

static void idx_bad_magic_and_dims(void) {
    char err[256];
    size_t il = image_bytes(img, NIMG, 28, 28), ll = label_bytes(lab, NIMG);
    img[3] = 1; /* a labels magic in an images file */
    CU_ASSERT_EQUAL(load(il, ll, 1, err, sizeof(err)), TT_ECORRUPT);
    CU_ASSERT(strstr(err, "bad magic 0x00000801, expected 0x00000803") != NULL);
    img[3] = 3;
    img[2] = 0x0D; /* float32 type */
    CU_ASSERT_EQUAL(load(il, ll, 1, err, sizeof(err)), TT_ECORRUPT);
    CU_ASSERT(strstr(err, "bad magic") != NULL);
    il = image_bytes(img, NIMG, 28, 27);
    CU_ASSERT_EQUAL(load(il, ll, 1, err, sizeof(err)), TT_ECORRUPT);
    CU_ASSERT(strstr(err, "wrong dims 3x28x27") != NULL);
}

static void idx_count_mismatch_trailing_and_bad_label(void) {
    char err[256];
    size_t il = image_bytes(img, NIMG, 28, 28), ll = label_bytes(lab, NIMG - 1);
    CU_ASSERT_EQUAL(load(il, ll, 1, err, sizeof(err)), TT_ECORRUPT);
    CU_ASSERT(strstr(err, "2 labels but the images file has 3") != NULL);
    ll = label_bytes(lab, NIMG);
    CU_ASSERT_EQUAL(load(il, ll + 2, 1, err, sizeof(err)), TT_ECORRUPT);
    CU_ASSERT(strstr(err, "trailing") != NULL);
    lab[8 + 1] = 10;
    CU_ASSERT_EQUAL(load(il, ll, 1, err, sizeof(err)), TT_ECORRUPT);
    CU_ASSERT(strstr(err, "label 10 at index 1") != NULL);
}

static void idx_not_gzip_is_corrupt(void) {
    char err[256];
    size_t il = image_bytes(img, NIMG, 28, 28), ll = label_bytes(lab, NIMG);
    CU_ASSERT_EQUAL(load(il, ll, 0, err, sizeof(err)), TT_ECORRUPT);
    CU_ASSERT(strstr(err, "not a gzip file") != NULL);
}

static void idx_truncated_gzip_stream_is_corrupt(void) {
    size_t il = image_bytes(img, NIMG, 28, 28);
    char *dir = fixture(il, label_bytes(lab, NIMG), 1);
    char path[512], err[256];
    snprintf(path, sizeof(path), "%s/x-images-idx3-ubyte.gz", dir);
    FILE *f = fopen(path, "rb");
    uint8_t gz[8192];
    size_t n = fread(gz, 1, sizeof(gz), f);
    fclose(f);
    CU_ASSERT_FATAL(n > 40);
    write_file(dir, "x-images-idx3-ubyte.gz", gz, n / 2, 0);
    uint8_t *buf = NULL;
    size_t len = 0;
    CU_ASSERT_EQUAL(tt_idx_read_gz(path, &buf, &len, err, sizeof(err)), TT_ECORRUPT);
    CU_ASSERT_PTR_NULL(buf);
    cleanup(dir);
}

/* Reads `path` whole and checks it holds `n` bytes of pattern(i). */
static void check_pattern(const char *path, size_t n) {
    uint8_t *buf = NULL;
    size_t len = 0, bad = 0;
    char err[256];
    CU_ASSERT_EQUAL_FATAL(tt_idx_read_gz(path, &buf, &len, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(len, n);
    for (size_t i = 0; i < len && i < n; i++)
        bad += buf[i] != (uint8_t)(i * 7 + i / 4096);
    CU_ASSERT_EQUAL(bad, 0);
    free(buf);
}

/* The buffer is sized from the gzip trailer (ISIZE): right for one member;
 * for two members the trailer gives only the last one's size, and the
 * reader must grow past it and still return every byte. */
static void idx_gzip_size_hint_is_only_a_hint(void) {
    size_t n1 = 3u << 20, n2 = (3u << 19) + 5;
    uint8_t *b = malloc(n1 + n2);
    CU_ASSERT_FATAL(b != NULL);
    for (size_t i = 0; i < n1 + n2; i++)
        b[i] = (uint8_t)(i * 7 + i / 4096);
    char dir[64] = "/tmp/tt_idx_XXXXXX", path[512];
    CU_ASSERT_FATAL(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/one.gz", dir);
    write_file(dir, "one.gz", b, n1 + n2, 1);
    check_pattern(path, n1 + n2);
    unlink(path);
    snprintf(path, sizeof(path), "%s/two.gz", dir);
    for (int m = 0; m < 2; m++) { /* two gzip members, one after the other */
        gzFile f = gzopen(path, m == 0 ? "wb" : "ab");
        CU_ASSERT_FATAL(f != NULL);
        CU_ASSERT(gzwrite(f, b + (m ? n1 : 0), (unsigned)(m ? n2 : n1)) == (int)(m ? n2 : n1));
        gzclose(f);
    }
    check_pattern(path, n1 + n2);
    unlink(path);
    rmdir(dir);
    free(b);
}

static void idx_parse_header_pure(void) {
    uint8_t b[32];
    uint32_t d[2] = {7, 9};
    tt_idx_header_t h;
    char err[128];
    size_t n = put_header(b, 2, d);
    CU_ASSERT_EQUAL(tt_idx_parse_header(b, n, &h, err, sizeof(err)), TT_OK);
    CU_ASSERT(h.ndim == 2 && h.dims[1] == 9 && h.payload_len == 63 && h.header_len == 12 &&
              h.magic == 0x00000802);
    CU_ASSERT_EQUAL(tt_idx_parse_header(b, n - 1, &h, err, sizeof(err)), TT_ECORRUPT);
    CU_ASSERT_EQUAL(tt_idx_parse_header(b, 3, &h, NULL, 0), TT_ECORRUPT);
    b[3] = 0;
    CU_ASSERT_EQUAL(tt_idx_parse_header(b, n, &h, err, sizeof(err)), TT_ECORRUPT);
    CU_ASSERT(strstr(err, "dimensions") != NULL);
    uint32_t huge[4] = {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu};
    n = put_header(b, 4, huge);
    CU_ASSERT_EQUAL(tt_idx_parse_header(b, n, &h, err, sizeof(err)), TT_ECORRUPT);
    CU_ASSERT(strstr(err, "overflow") != NULL);
}

static const tt_cunit_test_t tests[] = {
    {"idx_loads_valid_files", idx_loads_valid_files},
    {"idx_keeps_the_first_examples", idx_keeps_the_first_examples},
    {"idx_missing_file_is_notfound", idx_missing_file_is_notfound},
    {"idx_gzip_size_hint_is_only_a_hint", idx_gzip_size_hint_is_only_a_hint},
    {"idx_truncated_header_and_data", idx_truncated_header_and_data},
    {"idx_bad_magic_and_dims", idx_bad_magic_and_dims},
    {"idx_count_mismatch_trailing_and_bad_label", idx_count_mismatch_trailing_and_bad_label},
    {"idx_not_gzip_is_corrupt", idx_not_gzip_is_corrupt},
    {"idx_truncated_gzip_stream_is_corrupt", idx_truncated_gzip_stream_is_corrupt},
    {"idx_parse_header_pure", idx_parse_header_pure},
    {NULL, NULL},
};

TT_CUNIT_MAIN("idx", tests)

/* Unit tests of tt_ckpt_sink in a temp directory (a real file, the real
 * I/O thread): byte-exact files for sizes around the 4 KiB alignment and
 * the buffer size, written in uneven pieces, in both modes (O_DIRECT falls
 * back to buffered where the file system refuses it, so AUTO is correct
 * either way); the error naming the path when the file cannot be created;
 * a sink destroyed without close. */
#include "tt_ckpt_sink.h"
#include "tt_cunit.h"
#include "tt_status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static uint8_t byte_at(uint64_t i) {
    return (uint8_t)((i * 2654435761u) >> 11);
}

/* Writes `size` bytes in pieces of `piece` through a sink with `buf`-byte
 * buffers and checks the file back byte by byte. */
static void roundtrip(const char *path, uint64_t size, size_t piece, size_t buf,
                      tt_ckpt_sink_mode_t mode) {
    tt_ckpt_sink_t *s = NULL;
    char err[512] = "";
    CU_ASSERT_EQUAL_FATAL(tt_ckpt_sink_open(&s, path, buf, mode, err, sizeof(err)), TT_OK);
    uint8_t *p = malloc(piece);
    for (uint64_t at = 0; at < size; at += piece) {
        size_t n = size - at < piece ? (size_t)(size - at) : piece;
        for (size_t k = 0; k < n; k++)
            p[k] = byte_at(at + k);
        CU_ASSERT_EQUAL(tt_ckpt_sink_write(s, p, n), TT_OK);
    }
    CU_ASSERT_EQUAL(tt_ckpt_sink_size(s), size);
    CU_ASSERT_EQUAL(tt_ckpt_sink_close(s), TT_OK);
    CU_ASSERT_STRING_EQUAL(tt_ckpt_sink_error(s), "");
    tt_ckpt_sink_destroy(&s);
    free(p);
    FILE *f = fopen(path, "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    uint64_t i = 0, bad = 0;
    int c;
    while ((c = fgetc(f)) != EOF)
        bad += (uint8_t)c != byte_at(i++);
    fclose(f);
    CU_ASSERT_EQUAL(i, size);
    CU_ASSERT_EQUAL(bad, 0);
}

static void sink_sizes_both_modes(void) {
    char dir[] = "/tmp/tt_sink_XXXXXX", path[256];
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/part.bin", dir);
    const uint64_t sizes[] = {0, 1, 4095, 4096, 4097, 8192, 65536, 65537, 3 * 65536 + 12345};
    for (int mode = 0; mode < 2; mode++)
        for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
            roundtrip(path, sizes[k], k % 2 ? 1000 : 70000, 65536, (tt_ckpt_sink_mode_t)mode);
    roundtrip(path, 5000000, 1 << 20, 0, TT_CKPT_SINK_AUTO); /* default 4 MiB buffers */
    unlink(path);
    rmdir(dir);
}

static void sink_unaligned_buffer_size_is_rounded(void) {
    char dir[] = "/tmp/tt_sink_XXXXXX", path[256];
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/odd.bin", dir);
    roundtrip(path, 100003, 777, 5000, TT_CKPT_SINK_AUTO); /* 5000 -> 8192 */
    unlink(path);
    rmdir(dir);
}

static void sink_create_failure_names_path(void) {
    tt_ckpt_sink_t *s = NULL;
    char err[512] = "";
    int rc = tt_ckpt_sink_open(&s, "/nonexistent-dir-tt/part.bin", 0, TT_CKPT_SINK_AUTO, err,
                               sizeof(err));
    CU_ASSERT_EQUAL(rc, TT_ESYS);
    CU_ASSERT_PTR_NULL(s);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "/nonexistent-dir-tt/part.bin"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "create"));
}

static void sink_destroy_without_close(void) {
    char dir[] = "/tmp/tt_sink_XXXXXX", path[256];
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/left.bin", dir);
    tt_ckpt_sink_t *s = NULL;
    char err[256];
    uint8_t block[10000];
    memset(block, 1, sizeof(block));
    CU_ASSERT_EQUAL_FATAL(tt_ckpt_sink_open(&s, path, 4096, TT_CKPT_SINK_AUTO, err, sizeof(err)),
                          TT_OK);
    CU_ASSERT_EQUAL(tt_ckpt_sink_write(s, block, sizeof(block)), TT_OK);
    tt_ckpt_sink_destroy(&s); /* joins the thread, closes the file */
    CU_ASSERT_PTR_NULL(s);
    tt_ckpt_sink_destroy(&s);
    unlink(path);
    rmdir(dir);
}

static const tt_cunit_test_t tests[] = {
    {"sink_sizes_both_modes", sink_sizes_both_modes},
    {"sink_unaligned_buffer_size_is_rounded", sink_unaligned_buffer_size_is_rounded},
    {"sink_create_failure_names_path", sink_create_failure_names_path},
    {"sink_destroy_without_close", sink_destroy_without_close},
    {NULL, NULL},
};

TT_CUNIT_MAIN("ckpt_sink", tests)

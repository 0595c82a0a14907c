/* fuzz-requires: worker/train/tt_idx.c */
/* libFuzzer target for the IDX decoders: the header parser on the raw
 * input, then a full in-memory decode as an images file and as a labels
 * file. None may crash, leak or read out of bounds, whatever the bytes.
 * fuzz-requires: worker/train/tt_idx.c */
#include "tt_fuzz.h"
#include "tt_idx.h"
#include "tt_status.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tt_idx_header_t h;
    char err[256];
    (void)tt_idx_parse_header(data, size, &h, err, sizeof(err));
    tt_idx_set_t set = {0};
    size_t keep = size % 3; /* all, or only the first one or two images */
    if (tt_idx_decode_images(data, size, "fuzz", keep, &set, err, sizeof(err)) == 0)
        (void)tt_idx_decode_labels(data, size, "fuzz", &set, err, sizeof(err));
    tt_idx_free(&set);
    (void)tt_idx_decode_labels(data, size, "fuzz", &set, err, sizeof(err));
    tt_idx_free(&set);
    return 0;
}

static size_t put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
    return 4;
}

/* No IDX writer exists (the trainer only reads the files), so the seeds are
 * built from the format itself: a big-endian magic, the dimensions, then one
 * byte per element. Small shapes keep the fuzzer fast. */
int tt_fuzz_seeds(tt_fuzz_emit_fn emit, void *ctx) {
    uint8_t buf[4 + 3 * 4 + 3 * 4 * 4];
    size_t n = put_be32(buf, TT_IDX_MAGIC_IMAGES);
    n += put_be32(buf + n, 3);
    n += put_be32(buf + n, 4);
    n += put_be32(buf + n, 4);
    for (size_t i = 0; i < 3 * 4 * 4; i++)
        buf[n++] = (uint8_t)(i * 5);
    int rc = emit(ctx, "images-3x4x4", buf, n);
    n = put_be32(buf, TT_IDX_MAGIC_LABELS);
    n += put_be32(buf + n, 3);
    memcpy(buf + n, "\x00\x07\x09", 3);
    if (rc == TT_OK)
        rc = emit(ctx, "labels-3", buf, n + 3);
    return rc;
}

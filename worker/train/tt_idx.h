/* tt_idx: reads the Fashion-MNIST / MNIST IDX files (gzip-compressed) into
 * memory: images as the file's bytes, handed out as float32 scaled to
 * [0,1] a few rows at a time (tt_idx_rows), labels as uint8. It owns the
 * format checks and their error messages; it does not shuffle, batch or
 * know about models. The header parser and the in-memory decoder are pure
 * functions over a byte buffer so that a fuzzer can drive them.
 *
 * IDX layout (big-endian): 2 zero bytes, a type byte (only 0x08 = uint8 is
 * supported), the number of dimensions, then that many uint32 sizes, then
 * the data. Images are magic 0x00000803 (count x rows x cols), labels
 * 0x00000801 (count). Bytes after the data are rejected as TT_ECORRUPT: the
 * format has no trailer, so extra bytes mean a wrong or concatenated file.
 *
 * Thread safety: all functions are reentrant. */
#ifndef TT_IDX_H
#define TT_IDX_H

#include <stddef.h>
#include <stdint.h>

#define TT_IDX_MAX_DIMS     4
#define TT_IDX_MAGIC_IMAGES 0x00000803u
#define TT_IDX_MAGIC_LABELS 0x00000801u

typedef struct {
    uint32_t magic; /* the first four bytes, big-endian */
    int ndim;       /* 1 .. TT_IDX_MAX_DIMS */
    uint32_t dims[TT_IDX_MAX_DIMS];
    size_t header_len;  /* 4 + 4 * ndim */
    size_t payload_len; /* product of dims (uint8 elements) */
} tt_idx_header_t;

/* Parses the header at the start of buf[0..len). Checks the zero bytes, the
 * type (uint8), 1 <= ndim <= TT_IDX_MAX_DIMS, that the dims fit the buffer
 * header, and that the payload size does not overflow. It does not check
 * that the payload is present (callers compare payload_len with the rest).
 * Returns 0, or TT_ECORRUPT with a message in err (may be NULL). */
int tt_idx_parse_header(const uint8_t *buf, size_t len, tt_idx_header_t *out, char *err,
                        size_t errlen);

/* An example's inputs are either bytes of the file (`pixels`, what the
 * decoder makes: a quarter of the memory of floats and no conversion pass
 * at load; 47 MB instead of 188 MB for Fashion-MNIST's training set) or
 * ready floats (`images`, for sets a program builds itself). Exactly one
 * is set; read rows through tt_idx_rows either way. */
typedef struct {
    float *images;   /* count * rows * cols, row-major, in [0,1]; or NULL */
    uint8_t *labels; /* count, each < 10 checked by the decoder; owned */
    size_t count;
    uint32_t rows, cols;
    size_t in_file;  /* examples the files hold (count may keep fewer); 0 = count */
    uint8_t *pixels; /* count * rows * cols, the file's bytes; or NULL */
} tt_idx_set_t;

/* Examples [first, first + n) as float32 rows into out (n * rows * cols):
 * a pixel p is (float)p / 255.0f, so every run sees the same inputs. */
void tt_idx_rows(const tt_idx_set_t *set, size_t first, size_t n, float *out);

/* Decodes a complete images file buffer into set->pixels/count/rows/cols
 * (allocates set->pixels), keeping the first `keep` images (0 = all; the
 * whole buffer is checked either way) and the file's count in
 * set->in_file. `name` names the file in messages. Returns 0, TT_ECORRUPT
 * (bad magic, dims, truncated or trailing data), TT_ENOMEM. */
int tt_idx_decode_images(const uint8_t *buf, size_t len, const char *name, size_t keep,
                         tt_idx_set_t *set, char *err, size_t errlen);

/* Decodes a labels file buffer into set->labels; the count must equal the
 * images file's (set->in_file, else set->count) when images were decoded
 * first, and only set->count labels are kept then. Every label is checked:
 * one >= 10 is TT_ECORRUPT. Returns 0, TT_ECORRUPT, TT_ENOMEM. */
int tt_idx_decode_labels(const uint8_t *buf, size_t len, const char *name, tt_idx_set_t *set,
                         char *err, size_t errlen);

/* Reads and gunzips `path` completely into *buf (malloc'd, caller frees).
 * Returns 0, TT_ENOTFOUND (missing), TT_EIO (read error), TT_ECORRUPT (not
 * gzip, or a truncated/corrupt gzip stream), TT_ENOMEM. */
int tt_idx_read_gz(const char *path, uint8_t **buf, size_t *len, char *err, size_t errlen);

/* Loads "<dir>/<prefix>-images-idx3-ubyte.gz" and
 * "<dir>/<prefix>-labels-idx1-ubyte.gz" (prefix "train" or "t10k") into
 * *set, which must be zeroed, keeping the first `keep` examples (0 = all):
 * a run on a subset does not hold the rest, yet both files are read and
 * checked whole. On error *set holds nothing.
 * Messages name the file and what is wrong, and are logged when err is
 * NULL (the caller would not say them). Returns as above. */
int tt_idx_load(const char *dir, const char *prefix, size_t keep, tt_idx_set_t *set, char *err,
                size_t errlen);

/* Frees the arrays of *set and zeroes it. Accepts NULL. */
void tt_idx_free(tt_idx_set_t *set);

#endif

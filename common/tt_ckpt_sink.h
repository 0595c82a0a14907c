/* tt_ckpt_sink: the append-only file a checkpoint part is streamed into.
 * It owns the file descriptor, two page-aligned buffers and one I/O thread:
 * the caller fills one buffer (copying, and computing its CRC meanwhile)
 * while the thread writes the other with O_DIRECT, so the disk, not the
 * CPU, sets the pace. Where O_DIRECT is refused (tmpfs, some network file
 * systems) it writes through the page cache and starts write-back every
 * few MiB instead. Not thread safe: one caller thread per sink. */
#ifndef TT_CKPT_SINK_H
#define TT_CKPT_SINK_H

#include <stddef.h>
#include <stdint.h>

typedef struct tt_ckpt_sink tt_ckpt_sink_t;

typedef enum {
    TT_CKPT_SINK_AUTO = 0,     /* O_DIRECT when the file system takes it */
    TT_CKPT_SINK_BUFFERED = 1, /* always through the page cache */
} tt_ckpt_sink_mode_t;

/* Creates (truncates) `path` for writing. buf_bytes: size of each of the
 * two buffers, rounded up to 4 KiB; 0: 4 MiB. TT_OK, TT_ENOMEM or TT_ESYS
 * (err names the path and the call). */
int tt_ckpt_sink_open(tt_ckpt_sink_t **out, const char *path, size_t buf_bytes,
                      tt_ckpt_sink_mode_t mode, char *err, size_t errlen);

/* Appends len bytes (copied; the caller's memory is free on return). TT_OK
 * or TT_ESYS, sticky: after a failure every call fails. */
int tt_ckpt_sink_write(tt_ckpt_sink_t *s, const void *data, size_t len);

/* Appends len bytes like tt_ckpt_sink_write, but where the bytes can go
 * out with O_DIRECT from where they are (data and the file position agree
 * modulo 4 KiB, and len spans at least two whole blocks) they are written
 * in place by the I/O thread while this returns at once: the memory must
 * stay valid and unchanged until tt_ckpt_sink_release (or close/destroy).
 * Otherwise it copies. TT_OK or TT_ESYS (sticky). */
int tt_ckpt_sink_write_ref(tt_ckpt_sink_t *s, const void *data, size_t len);

/* Waits until no write refers to the caller's memory. TT_OK or TT_ESYS. */
int tt_ckpt_sink_release(tt_ckpt_sink_t *s);

/* Writes what is buffered, fsyncs and closes the file. TT_OK or TT_ESYS.
 * The sink is spent afterwards (destroy it). */
int tt_ckpt_sink_close(tt_ckpt_sink_t *s);

/* 1 when the bulk of the file goes out with O_DIRECT. */
int tt_ckpt_sink_direct(tt_ckpt_sink_t *s);

/* Bytes appended so far. */
uint64_t tt_ckpt_sink_size(const tt_ckpt_sink_t *s);

/* Sentence of the first failure ("" when none). */
const char *tt_ckpt_sink_error(const tt_ckpt_sink_t *s);

/* Stops the thread and closes the file if still open (the file stays as
 * far as it got; the caller unlinks it). Accepts NULL; sets *s = NULL. */
void tt_ckpt_sink_destroy(tt_ckpt_sink_t **s);

#endif

/* launch_lines: turns one child's output stream into whole lines, each
 * with the child's prefix ("[worker 2] "), so that the output of many
 * children interleaves line by line and never mid-line. It owns the byte
 * buffering and the treatment of carriage returns; it does not own any
 * file descriptor: every finished piece goes to the caller's emit function
 * in one call (prefix, text and terminator together, so one write keeps it
 * whole).
 * Progress bars: a segment ended by '\r' (and not by "\r\n") is an update
 * that the next segment overwrites. In tty mode it is passed on at once as
 * "<prefix>text\r", so a bar keeps moving in place on a terminal. Otherwise
 * intermediate updates are dropped and only the last one before a newline
 * (or the end of the stream) is emitted, as a line: logs get the final
 * state without thousands of stale lines.
 * A line longer than the buffer is emitted in buffer-sized pieces, each as
 * its own line. Thread safety: none; one object per stream, one thread. */
#ifndef TT_LAUNCH_LINES_H
#define TT_LAUNCH_LINES_H

#include <stddef.h>

/* Receives one finished piece: `len` bytes ending in '\n' (or '\r' in tty
 * mode). The bytes are valid only during the call. */
typedef void (*tt_launch_emit_fn)(void *ctx, const char *data, size_t len);

typedef struct tt_launch_lines_opts {
    const char *prefix;     /* copied; e.g. "[worker 2] " */
    int tty;                /* 1: pass '\r' updates through */
    size_t max_line;        /* bytes buffered per line; 0: 64 KiB */
    tt_launch_emit_fn emit; /* required */
    void *ctx;              /* handed to emit */
} tt_launch_lines_opts_t;

typedef struct tt_launch_lines tt_launch_lines_t;

/* Returns TT_OK, TT_EINVAL (no emit function) or TT_ENOMEM. The caller
 * owns *out and frees it with tt_launch_lines_destroy. */
int tt_launch_lines_create(tt_launch_lines_t **out, const tt_launch_lines_opts_t *opts);

/* Consumes `n` bytes of the stream; emits every piece they complete. */
void tt_launch_lines_feed(tt_launch_lines_t *l, const char *buf, size_t n);

/* End of stream: emits a pending partial line (or the last progress
 * update) as a line with a '\n' added. Safe to call more than once. */
void tt_launch_lines_flush(tt_launch_lines_t *l);

/* Frees without flushing; accepts NULL and sets *l = NULL. */
void tt_launch_lines_destroy(tt_launch_lines_t **l);

#endif

/* launch_lines: line splitting and prefixing of a child's output. */
#include "launch_lines.h"
#include "tt_status.h"

#include <stdlib.h>
#include <string.h>

struct tt_launch_lines {
    char *buf;       /* prefix, then the current segment */
    size_t plen;     /* prefix length */
    size_t len;      /* bytes of the current segment */
    size_t max_line; /* capacity of the segment part */
    int pending_cr;  /* the last byte seen was '\r': "\r\n" or an update? */
    int tty;
    tt_launch_emit_fn emit;
    void *ctx;
};

int tt_launch_lines_create(tt_launch_lines_t **out, const tt_launch_lines_opts_t *opts) {
    *out = NULL;
    if (opts == NULL || opts->emit == NULL)
        return TT_EINVAL;
    tt_launch_lines_t *l = calloc(1, sizeof(*l));
    const char *prefix = opts->prefix ? opts->prefix : "";
    if (l == NULL)
        return TT_ENOMEM;
    l->plen = strlen(prefix);
    l->max_line = opts->max_line ? opts->max_line : 64 * 1024;
    /* +1 for the terminator written after the segment */
    l->buf = malloc(l->plen + l->max_line + 1);
    if (l->buf == NULL) {
        free(l);
        return TT_ENOMEM;
    }
    memcpy(l->buf, prefix, l->plen);
    l->tty = opts->tty;
    l->emit = opts->emit;
    l->ctx = opts->ctx;
    *out = l;
    return TT_OK;
}

void tt_launch_lines_destroy(tt_launch_lines_t **l) {
    if (l == NULL || *l == NULL)
        return;
    free((*l)->buf);
    free(*l);
    *l = NULL;
}

/* Emits the current segment with `term` and starts a new one. */
static void emit_segment(tt_launch_lines_t *l, char term) {
    l->buf[l->plen + l->len] = term;
    l->emit(l->ctx, l->buf, l->plen + l->len + 1);
    l->len = 0;
}

/* A '\r' not followed by '\n' ended a progress update. */
static void end_update(tt_launch_lines_t *l) {
    l->pending_cr = 0;
    if (l->len == 0)
        return; /* "\r" at the start of a bar: nothing to show yet */
    if (l->tty)
        emit_segment(l, '\r');
    else
        l->len = 0; /* superseded by the next update */
}

static void feed_byte(tt_launch_lines_t *l, char c) {
    if (l->pending_cr) {
        if (c == '\n') {
            l->pending_cr = 0;
            emit_segment(l, '\n');
            return;
        }
        end_update(l);
    }
    if (c == '\n') {
        emit_segment(l, '\n');
    } else if (c == '\r') {
        l->pending_cr = 1;
    } else {
        if (l->len == l->max_line)
            emit_segment(l, '\n');
        l->buf[l->plen + l->len++] = c;
    }
}

void tt_launch_lines_feed(tt_launch_lines_t *l, const char *buf, size_t n) {
    for (size_t i = 0; i < n; i++)
        feed_byte(l, buf[i]);
}

void tt_launch_lines_flush(tt_launch_lines_t *l) {
    l->pending_cr = 0;
    if (l->len > 0)
        emit_segment(l, '\n');
}

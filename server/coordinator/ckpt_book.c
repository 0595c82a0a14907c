/* ckpt_book: request numbering, the timer schedule and the committed
 * records of one job (see ckpt_book.h). Why one counter for timer and
 * on-demand requests: workers only need "is there a request newer than the
 * one served", whoever made it, and one number says that. */
#include "ckpt_book.h"
#include "tt_status.h"

#include <stdlib.h>
#include <string.h>

void tt_ckpt_book_init(tt_ckpt_book_t *b, uint64_t now_ms) {
    memset(b, 0, sizeof(*b));
    b->base_ms = now_ms;
}

void tt_ckpt_book_free(tt_ckpt_book_t *b) {
    if (b == NULL)
        return;
    free(b->recs);
    memset(b, 0, sizeof(*b));
}

uint64_t tt_ckpt_book_request(tt_ckpt_book_t *b, uint64_t now_ms) {
    (void)now_ms; /* an on-demand request leaves the timer's rhythm alone */
    return ++b->requested;
}

static int outstanding(const tt_ckpt_book_t *b) {
    return b->requested != b->served;
}

int tt_ckpt_book_timer(tt_ckpt_book_t *b, uint64_t now_ms, uint32_t every_ms, int running) {
    if (every_ms == 0 || !running || outstanding(b) || now_ms < b->base_ms + every_ms)
        return 0;
    b->requested++;
    b->base_ms = now_ms;
    return 1;
}

uint64_t tt_ckpt_book_deadline(const tt_ckpt_book_t *b, uint64_t now_ms, uint32_t every_ms) {
    if (every_ms == 0 || outstanding(b))
        return UINT64_MAX;
    uint64_t due = b->base_ms + every_ms;
    return due > now_ms ? due : now_ms;
}

static int text_ok(const char *s, size_t cap) {
    size_t n = strnlen(s, cap);
    return n > 0 && n < cap;
}

static int rec_ok(const tt_ckpt_rec_t *r) {
    return text_ok(r->id, sizeof(r->id)) && text_ok(r->dir, sizeof(r->dir));
}

const tt_ckpt_rec_t *tt_ckpt_book_find(const tt_ckpt_book_t *b, const char *id) {
    for (size_t i = 0; i < b->n; i++) {
        if (strcmp(b->recs[i].id, id) == 0)
            return &b->recs[i];
    }
    return NULL;
}

const tt_ckpt_rec_t *tt_ckpt_book_newest(const tt_ckpt_book_t *b) {
    return b->n > 0 ? &b->recs[b->n - 1] : NULL;
}

static int reserve(tt_ckpt_book_t *b, size_t want) {
    if (want <= b->cap)
        return TT_OK;
    size_t cap = b->cap ? b->cap * 2 : 4;
    cap = cap < want ? want : cap;
    tt_ckpt_rec_t *r = realloc(b->recs, cap * sizeof(*r));
    if (r == NULL)
        return TT_ENOMEM;
    b->recs = r;
    b->cap = cap;
    return TT_OK;
}

/* Drops the oldest records beyond `keep`. */
static void trim(tt_ckpt_book_t *b, size_t keep) {
    if (b->n <= keep)
        return;
    size_t drop = b->n - keep;
    memmove(b->recs, b->recs + drop, keep * sizeof(*b->recs));
    b->n = keep;
}

static size_t clamp_keep(uint32_t keep) {
    if (keep == 0)
        return 1;
    return keep < TT_CKPT_BOOK_MAX_RECORDS ? keep : TT_CKPT_BOOK_MAX_RECORDS;
}

int tt_ckpt_book_commit(tt_ckpt_book_t *b, const tt_ckpt_rec_t *rec, uint64_t request,
                        uint32_t keep, uint64_t now_ms) {
    if (!rec_ok(rec))
        return TT_EINVAL;
    if (tt_ckpt_book_find(b, rec->id) != NULL)
        return TT_EEXIST;
    if (reserve(b, b->n + 1) != TT_OK)
        return TT_ENOMEM;
    b->recs[b->n++] = *rec;
    /* A number never handed out (a coordinator that lost its last state
     * write) must not leave served above requested: the timer would wait
     * for requested == served forever. */
    if (request > b->requested)
        request = b->requested;
    if (request > b->served)
        b->served = request;
    b->base_ms = now_ms;
    b->failures_since_commit = 0;
    trim(b, clamp_keep(keep));
    return TT_OK;
}

int tt_ckpt_book_failed(tt_ckpt_book_t *b, const tt_ckpt_fail_t *f) {
    if (f->id[0] == '\0' || memchr(f->id, '\0', sizeof(f->id)) == NULL)
        return TT_EINVAL;
    tt_ckpt_fail_t *last = &b->last_fail;
    if (b->failures > 0 && strcmp(last->id, f->id) == 0) {
        if (f->request > last->request)
            last->request = f->request;
        return 0;
    }
    *last = *f;
    last->worker[sizeof(last->worker) - 1] = '\0';
    last->reason[sizeof(last->reason) - 1] = '\0';
    b->failures++;
    b->failures_since_commit++;
    return 1;
}

void tt_ckpt_book_export(const tt_ckpt_book_t *b, tt_ckpt_book_saved_t *out) {
    out->requested = b->requested;
    out->served = b->served;
    out->n = b->n;
    out->recs = b->recs;
}

static int saved_ok(const tt_ckpt_book_saved_t *in, size_t first) {
    if (in->served > in->requested)
        return 0;
    for (size_t i = first; i < in->n; i++) {
        if (!rec_ok(&in->recs[i]))
            return 0;
        for (size_t k = first; k < i; k++) {
            if (strcmp(in->recs[k].id, in->recs[i].id) == 0)
                return 0;
        }
    }
    return 1;
}

int tt_ckpt_book_import(tt_ckpt_book_t *b, const tt_ckpt_book_saved_t *in, uint64_t now_ms) {
    tt_ckpt_book_free(b);
    tt_ckpt_book_init(b, now_ms);
    size_t first = in->n > TT_CKPT_BOOK_MAX_RECORDS ? in->n - TT_CKPT_BOOK_MAX_RECORDS : 0;
    if (!saved_ok(in, first))
        return TT_ECORRUPT;
    if (reserve(b, in->n - first) != TT_OK)
        return TT_ENOMEM;
    if (in->n > first)
        memcpy(b->recs, in->recs + first, (in->n - first) * sizeof(*b->recs));
    b->n = in->n - first;
    b->requested = in->requested;
    b->served = in->served;
    return TT_OK;
}

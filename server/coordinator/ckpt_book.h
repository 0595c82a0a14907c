/* ckpt_book: one job's checkpoint book as the coordinator keeps it, a pure
 * value (no I/O; every time is passed in by the caller). It owns the
 * request numbering (timer and on-demand requests share one counter), the
 * newest request a committed checkpoint served, the timer schedule's base,
 * the committed checkpoints (oldest first, the newest `keep` of them) and
 * the count and newest of the attempts that failed.
 * It does not touch files (coord_ckpt.c stores manifests and applies
 * retention) and knows nothing of the wire (coord_state.c and coord_ckpt.c
 * convert). Thread safety: none; the coordinator's loop thread owns it. */
#ifndef TT_CKPT_BOOK_H
#define TT_CKPT_BOOK_H

#include <stddef.h>
#include <stdint.h>

#define TT_CKPT_BOOK_ID_MAX  128u  /* checkpoint id, including the NUL */
#define TT_CKPT_BOOK_DIR_MAX 1025u /* "<root>/<id>", including the NUL */
/* Records kept whatever `keep` says: the durable state and every reply
 * stay bounded (the wire refuses lists above 65536). */
#define TT_CKPT_BOOK_MAX_RECORDS 1024u

typedef struct tt_ckpt_rec {
    char id[TT_CKPT_BOOK_ID_MAX];
    char dir[TT_CKPT_BOOK_DIR_MAX];
    uint64_t step;
    uint64_t bytes; /* sum of the parts' sizes */
    uint64_t created_unix_ms;
    uint64_t duration_ms;
    uint64_t committed_unix_ms;
} tt_ckpt_rec_t;

#define TT_CKPT_BOOK_WORKER_MAX 128u  /* worker id, including the NUL */
#define TT_CKPT_BOOK_REASON_MAX 1025u /* a failure's sentence, including the NUL */

/* A checkpoint attempt that failed: a worker could not write its part, or
 * the coordinator refused the commit. */
typedef struct tt_ckpt_fail {
    char id[TT_CKPT_BOOK_ID_MAX];
    char worker[TT_CKPT_BOOK_WORKER_MAX];
    char reason[TT_CKPT_BOOK_REASON_MAX];
    uint64_t step;
    uint64_t request; /* the request it served (0: none known) */
    uint64_t unix_ms;
} tt_ckpt_fail_t;

/* Transparent so it can live inside the coordinator's job entry; change it
 * only through the functions below. */
typedef struct tt_ckpt_book {
    uint64_t requested; /* requests made so far (the newest one's number) */
    uint64_t served;    /* newest request a committed checkpoint served */
    uint64_t base_ms;   /* timer: last fire, commit or init */
    size_t n, cap;
    tt_ckpt_rec_t *recs; /* owned, oldest first */
    /* Failed attempts: not persisted (a restarted coordinator counts
     * afresh, as a Prometheus counter does). */
    uint64_t failures;              /* attempts, each counted once */
    uint64_t failures_since_commit; /* since the newest commit */
    tt_ckpt_fail_t last_fail;       /* valid when failures > 0 */
} tt_ckpt_book_t;

/* An empty book whose timer counts from now_ms. Allocates nothing. */
void tt_ckpt_book_init(tt_ckpt_book_t *b, uint64_t now_ms);
/* Frees the records and zeroes the book; accepts NULL. */
void tt_ckpt_book_free(tt_ckpt_book_t *b);

/* A new request (tetherctl checkpoint JOB): returns its number (1, 2, ...).
 * The timer base does not move. */
uint64_t tt_ckpt_book_request(tt_ckpt_book_t *b, uint64_t now_ms);

/* The timer schedule: makes a request and returns 1 when every_ms > 0, the
 * job runs, no request is outstanding (requested == served) and now_ms >=
 * base + every_ms; the base becomes now_ms then. Else 0, nothing changes. */
int tt_ckpt_book_timer(tt_ckpt_book_t *b, uint64_t now_ms, uint32_t every_ms, int running);

/* When tt_ckpt_book_timer can fire next (never before now_ms), or
 * UINT64_MAX when it cannot before something else changes (every_ms 0, or
 * a request outstanding). The caller leaves out jobs that do not run. */
uint64_t tt_ckpt_book_deadline(const tt_ckpt_book_t *b, uint64_t now_ms, uint32_t every_ms);

/* Records a committed checkpoint that served `request` (0: the step
 * schedule): appends *rec, served = max(served, request) (a request not
 * made yet counts as the newest made), the timer base becomes now_ms, and
 * only the newest `keep` records stay (at least 1, at most
 * TT_CKPT_BOOK_MAX_RECORDS). TT_OK; TT_EEXIST when rec->id is already
 * recorded (a retried commit: nothing changes); TT_EINVAL for an empty or
 * unterminated id or dir; TT_ENOMEM (nothing changes). */
int tt_ckpt_book_commit(tt_ckpt_book_t *b, const tt_ckpt_rec_t *rec, uint64_t request,
                        uint32_t keep, uint64_t now_ms);

/* Records a failed attempt. Every writer whose part failed reports, so a
 * report naming the attempt already recorded last counts nothing again: it
 * keeps the first reason and worker and takes the larger request (only rank
 * 0 knows which request the attempt served). Returns 1 for a new attempt
 * (counted), 0 for another report of the newest one, TT_EINVAL for an
 * empty or unterminated id. A commit resets failures_since_commit. */
int tt_ckpt_book_failed(tt_ckpt_book_t *b, const tt_ckpt_fail_t *f);

/* The record with that id, or NULL. Borrowed until the next change. */
const tt_ckpt_rec_t *tt_ckpt_book_find(const tt_ckpt_book_t *b, const char *id);
/* The newest record, or NULL when there is none. */
const tt_ckpt_rec_t *tt_ckpt_book_newest(const tt_ckpt_book_t *b);

/* What persists of a book: the counters and the records, oldest first. */
typedef struct tt_ckpt_book_saved {
    uint64_t requested;
    uint64_t served;
    size_t n;
    const tt_ckpt_rec_t *recs; /* export: borrowed from the book */
} tt_ckpt_book_saved_t;

void tt_ckpt_book_export(const tt_ckpt_book_t *b, tt_ckpt_book_saved_t *out);

/* Replaces *b (initialised or zeroed) with a saved book whose timer counts
 * from now_ms. TT_OK; TT_ECORRUPT when served > requested, a record has an
 * empty id or dir, or an id appears twice (b is left empty); TT_ENOMEM.
 * Only the newest TT_CKPT_BOOK_MAX_RECORDS records are taken. */
int tt_ckpt_book_import(tt_ckpt_book_t *b, const tt_ckpt_book_saved_t *in, uint64_t now_ms);

#endif

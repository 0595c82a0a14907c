/* shard_chunk: the life of one chunk on the loop thread. Admitted
 * contributions queue here with their ZeroMQ frames (moved, never copied);
 * one work item per chunk runs in the libuv pool at a time and folds in
 * everything queued when it started, and finishes the round when the round
 * was complete by then. The result becomes a reference-counted blob that
 * every parked pull is answered with, without a copy. Parks have deadlines:
 * an expired one is answered with TT_ETIMEDOUT naming the missing ranks
 * (the round itself keeps waiting, and is reported to the coordinator once).
 * A round can also be abandoned unfinished (a restarted shard must finish
 * the step before it first): its parks then hear why.
 * Why one work item per chunk: the accumulator's data calls must not
 * overlap, and different chunks still run in parallel on the pool. */
#include "shard_internal.h"
#include "tt_clock.h"
#include "tt_log.h"
#include "tt_status.h"

#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct shard_work {
    uv_work_t req;
    shard_chunk_t *ch;
    shard_contrib_t *items;
    size_t n;
    int finish;
    shard_blob_t *out;
    uint64_t total, gen, step;
} shard_work_t;

static shard_blob_t *blob_new(size_t n) {
    shard_blob_t *b = malloc(sizeof(*b) + n * sizeof(float));
    if (b != NULL) {
        atomic_init(&b->refs, 1);
        b->n = n;
    }
    return b;
}

/* ZeroMQ calls this from its I/O thread when a frame is sent. */
static void blob_unref(void *data, void *hint) {
    shard_blob_t *b = hint;
    (void)data;
    if (b != NULL)
        TT_TSAN_ACQUIRE(b);
    if (b != NULL && atomic_fetch_sub(&b->refs, 1) == 1)
        free(b);
}

/* A 4 MiB malloc is an mmap with a page fault per 4 KiB on first touch;
 * reusing the last result's buffer once every send of it has completed
 * avoids that on every round. Only the loop thread holds the last
 * reference when refs == 1, so the check cannot race with ZeroMQ. */
static void retire_result(shard_chunk_t *ch) {
    shard_blob_t *b = ch->result;
    ch->result = NULL;
    if (b != NULL && ch->spare == NULL && atomic_load(&b->refs) == 1)
        ch->spare = b;
    else
        blob_unref(NULL, b);
}

static shard_blob_t *take_blob(shard_chunk_t *ch) {
    shard_blob_t *b = ch->spare;
    ch->spare = NULL;
    if (b != NULL && atomic_load(&b->refs) == 1)
        return b;
    blob_unref(NULL, b);
    return blob_new(tt_accum_elems(ch->acc));
}

int shard_chunk_new(shard_job_t *job, uint32_t id, size_t elems, shard_chunk_t **out) {
    *out = NULL;
    shard_chunk_t *ch = calloc(1, sizeof(*ch));
    if (ch == NULL)
        return TT_ENOMEM;
    tt_accum_opts_t o = job->base;
    o.elems = elems;
    int rc = tt_accum_create(&ch->acc, &o);
    if (rc != TT_OK) {
        free(ch);
        return rc;
    }
    ch->job = job;
    ch->id = id;
    *out = ch;
    return TT_OK;
}

/* Answers `code` to the parks of generations before `gen` and, when
 * `step` is not NULL, to those of (gen, *step); forgets them. */
static void fail_parks(shard_chunk_t *ch, uint64_t gen, const uint64_t *step, int code,
                       const char *msg) {
    shard_park_t **pp = &ch->parks;
    while (*pp != NULL) {
        shard_park_t *p = *pp;
        if (p->gen < gen || (step != NULL && p->gen == gen && p->step == *step)) {
            *pp = p->next;
            shard_send_error(ch->job->s, p->peer, p->peer_len, ch->job->id, p->gen, p->req, code,
                             msg);
            free(p);
        } else {
            pp = &p->next;
        }
    }
}

/* Only called when the chunk is idle (the daemon never frees a busy one). */
void shard_chunk_free(shard_chunk_t **chp) {
    if (chp == NULL || *chp == NULL)
        return;
    shard_chunk_t *ch = *chp;
    *chp = NULL;
    while (ch->parks != NULL) {
        shard_park_t *p = ch->parks;
        ch->parks = p->next;
        free(p);
    }
    for (size_t i = 0; i < ch->npending; i++)
        zmq_msg_close(&ch->pending[i].msg);
    free(ch->pending);
    blob_unref(NULL, ch->result);
    blob_unref(NULL, ch->spare);
    tt_accum_destroy(&ch->acc);
    free(ch);
}

void shard_chunk_new_gen(shard_chunk_t *ch, uint64_t gen) {
    char msg[160];
    snprintf(msg, sizeof(msg),
             "chunk %u: generation %" PRIu64 " started, the round of an older one was dropped",
             ch->id, gen);
    fail_parks(ch, gen, NULL, TT_EMEMBERSHIP, msg);
    if (ch->result != NULL && ch->result_gen < gen)
        retire_result(ch);
    ch->complete_pending = 0;
}

void shard_chunk_abandon(shard_chunk_t *ch, int code, const char *msg) {
    uint64_t gen = tt_accum_generation(ch->acc), step = tt_accum_round_step(ch->acc);
    if (!tt_accum_abandon(ch->acc))
        return;
    fail_parks(ch, gen, &step, code, msg);
    for (size_t i = 0; i < ch->npending; i++) /* none while idle; kept for safety */
        zmq_msg_close(&ch->pending[i].msg);
    ch->npending = 0;
    ch->complete_pending = 0;
}

static void send_result(shard_chunk_t *ch, const uint8_t *peer, size_t peer_len, uint64_t req) {
    Tether__ChunkResult r = TETHER__CHUNK_RESULT__INIT;
    r.chunk = ch->id;
    r.step = ch->result_step;
    r.total_examples = ch->result_total;
    tt_env_t env;
    tt_wire_env_init(&env, ch->job->id, ch->job->s->id, ch->result_gen, req);
    env.body_case = TETHER__ENVELOPE__BODY_CHUNK_RESULT;
    env.chunk_result = &r;
    atomic_fetch_add(&ch->result->refs, 1);
    TT_TSAN_RELEASE(ch->result);
    tt_zmq_payload_t pl = {ch->result->data, ch->result->n * sizeof(float), blob_unref, ch->result};
    shard_send(ch->job->s, peer, peer_len, &env, &pl, 1);
}

int shard_chunk_answer(shard_chunk_t *ch, const uint8_t *peer, size_t peer_len, uint64_t req,
                       uint64_t gen, uint64_t step) {
    if (ch->result == NULL || ch->result_gen != gen || ch->result_step != step)
        return 0;
    send_result(ch, peer, peer_len, req);
    return 1;
}

int shard_chunk_replay(shard_chunk_t *ch, uint64_t gen, uint64_t step) {
    if (ch->result != NULL && ch->result_gen == gen && ch->result_step == step)
        return TT_OK; /* another rank of the generation asked first */
    shard_chunk_new_gen(ch, gen);
    retire_result(ch);
    shard_blob_t *b = take_blob(ch);
    if (b == NULL)
        return TT_ENOMEM;
    /* No data call runs: the round of `step` finished (mark_done), and
     * none is open. */
    tt_accum_get(ch->acc, TT_ACCUM_PARAMS, 0, b->data, b->n, NULL);
    ch->result = b;
    ch->result_gen = gen;
    ch->result_step = step;
    ch->result_total = tt_accum_done_total(ch->acc);
    TT_INFO("shard",
            "chunk %u: step %" PRIu64 " is final here already; generation %" PRIu64
            " gets its result again instead of a second update",
            ch->id, step, gen);
    return TT_OK;
}

int shard_chunk_park(shard_chunk_t *ch, const uint8_t *peer, size_t peer_len, uint64_t req,
                     uint64_t gen, uint64_t step, uint64_t now) {
    /* A small chunk's round may be final already (summed inline): a park
     * for it would never be woken. */
    if (shard_chunk_answer(ch, peer, peer_len, req, gen, step))
        return TT_OK;
    shard_park_t *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return TT_ENOMEM;
    memcpy(p->peer, peer, peer_len);
    p->peer_len = peer_len;
    p->req = req;
    p->gen = gen;
    p->step = step;
    p->deadline = now + ch->job->base.timeout_ms;
    p->next = ch->parks;
    ch->parks = p;
    return TT_OK;
}

/* The test knob of tt_shard_opts_t: is this the round to die in? */
static int test_die_here(const shard_chunk_t *ch) {
    const tt_shard_t *s = ch->job->s;
    size_t waiting = 0;
    if (s->die_step == 0 || ch->result_step != s->die_step)
        return 0;
    for (const shard_park_t *p = ch->parks; p != NULL; p = p->next)
        waiting += p->gen == ch->result_gen && p->step == ch->result_step;
    if (waiting < 2)
        return 0;
    int fd = open(s->die_once, O_CREAT | O_EXCL | O_WRONLY, 0600);
    if (fd < 0)
        return 0;
    close(fd);
    return 1;
}

static void test_die_now(const shard_chunk_t *ch) {
    TT_WARN("shard", "chunk %u: test knob: answered one rank of step %" PRIu64 ", dying now",
            ch->id, ch->result_step);
    tt_clock_sleep_us(200 * 1000); /* ZeroMQ's I/O thread sends that answer */
    raise(SIGKILL);
}

static void answer_parks(shard_chunk_t *ch) {
    shard_park_t **pp = &ch->parks;
    int die = test_die_here(ch);
    while (*pp != NULL) {
        shard_park_t *p = *pp;
        if (p->gen == ch->result_gen && p->step == ch->result_step) {
            *pp = p->next;
            send_result(ch, p->peer, p->peer_len, p->req);
            free(p);
            if (die)
                test_die_now(ch);
        } else {
            pp = &p->next;
        }
    }
}

/* When the work finishes the round, its last item is the round's last
 * contribution: folding it in and normalising is one pass, not two. */
static void work_run(uv_work_t *req) {
    shard_work_t *w = req->data;
    size_t adds = w->finish && w->n > 0 ? w->n - 1 : w->n;
    for (size_t i = 0; i < adds; i++)
        tt_accum_add(w->ch->acc, w->items[i].rank, zmq_msg_data(&w->items[i].msg),
                     w->items[i].first);
    if (w->finish && w->n > 0) {
        shard_contrib_t *last = &w->items[w->n - 1];
        w->total = tt_accum_add_finish(w->ch->acc, last->rank, zmq_msg_data(&last->msg),
                                       last->first, w->out->data);
    } else if (w->finish) {
        w->total = tt_accum_finish(w->ch->acc, w->out->data);
    }
}

static void start_work(shard_chunk_t *ch);

static void work_done(uv_work_t *req, int status) {
    shard_work_t *w = req->data;
    shard_chunk_t *ch = w->ch;
    for (size_t i = 0; i < w->n; i++)
        zmq_msg_close(&w->items[i].msg);
    free(w->items);
    ch->busy = 0;
    if (w->finish && status == 0) {
        tt_accum_mark_done(ch->acc);
        retire_result(ch);
        ch->result = w->out;
        ch->result_gen = w->gen;
        ch->result_step = w->step;
        ch->result_total = w->total;
        w->out = NULL;
        answer_parks(ch);
    }
    blob_unref(NULL, w->out);
    free(w);
    start_work(ch);
}

static shard_work_t *make_work(shard_chunk_t *ch) {
    shard_work_t *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return NULL;
    w->req.data = w;
    w->ch = ch;
    w->items = ch->pending; /* the queue moves into the work item */
    w->n = ch->npending;
    w->finish = ch->complete_pending;
    w->gen = tt_accum_generation(ch->acc);
    w->step = tt_accum_round_step(ch->acc);
    if (w->finish && (w->out = take_blob(ch)) == NULL) {
        free(w);
        return NULL;
    }
    ch->pending = NULL;
    ch->npending = ch->cappending = 0;
    ch->complete_pending = 0;
    return w;
}

/* A chunk this small is summed on the loop: one or two passes over it
 * take 50-100 us here, less than the round trip through the thread pool
 * (two thread wake-ups on a busy host), which made a 1 MiB push+pull 30 %
 * slower than the raw transfer. Larger chunks go to the pool so the loop
 * stays responsive and several chunks are summed in parallel. */
#define SHARD_INLINE_BYTES ((size_t)1 << 20)

static void start_work(shard_chunk_t *ch) {
    if (ch->busy || ch->job->s->closing || (ch->npending == 0 && !ch->complete_pending))
        return;
    shard_work_t *w = make_work(ch);
    if (w == NULL) {
        TT_ERROR("shard", "chunk %u: out of memory starting aggregation work", ch->id);
        return;
    }
    ch->busy = 1;
    if (tt_accum_elems(ch->acc) * sizeof(float) <= SHARD_INLINE_BYTES) {
        work_run(&w->req);
        work_done(&w->req, 0);
    } else if (uv_queue_work(ch->job->s->loop, &w->req, work_run, work_done) != 0) {
        TT_ERROR("shard", "chunk %u: uv_queue_work failed; running inline", ch->id);
        work_run(&w->req);
        work_done(&w->req, 0);
    }
}

/* ZeroMQ decodes small messages in place inside its shared receive
 * buffer, so their data can sit at any byte offset; the float loops need
 * float alignment (a misaligned load is undefined behaviour). Large frames
 * have their own allocation, whose data follows ZeroMQ's 40-byte header:
 * 8-byte aligned, never 16. Float alignment is all the loops need (the
 * vectoriser peels to its own alignment from any float-aligned start), so
 * those frames are moved as they are; copying them for 16-byte alignment
 * cost a full extra pass over every push, on the loop. */
static void free_copy(void *data, void *hint) {
    (void)hint;
    free(data);
}

static int take_frame(zmq_msg_t *dst, zmq_msg_t *frame) {
    size_t n = zmq_msg_size(frame);
    if (((uintptr_t)zmq_msg_data(frame) % _Alignof(float)) == 0 || n == 0) {
        zmq_msg_init(dst);
        return zmq_msg_move(dst, frame) == 0 ? TT_OK : TT_ESYS;
    }
    /* malloc is float aligned; zmq_msg_init_size may keep a small
     * message inside the zmq_msg_t itself, at no promised alignment. */
    void *copy = malloc(n);
    if (copy == NULL)
        return TT_ENOMEM;
    memcpy(copy, zmq_msg_data(frame), n);
    if (zmq_msg_init_data(dst, copy, n, free_copy, NULL) != 0) {
        free(copy);
        return TT_ENOMEM;
    }
    return TT_OK;
}

int shard_chunk_enqueue(shard_chunk_t *ch, zmq_msg_t *frame, uint32_t rank,
                        const tt_accum_ticket_t *t) {
    if (ch->npending == ch->cappending) {
        size_t cap = ch->cappending ? ch->cappending * 2 : 8;
        shard_contrib_t *p = realloc(ch->pending, cap * sizeof(*p));
        if (p == NULL)
            return TT_ENOMEM;
        ch->pending = p;
        ch->cappending = cap;
    }
    shard_contrib_t *c = &ch->pending[ch->npending];
    if (take_frame(&c->msg, frame) != TT_OK)
        return TT_ENOMEM;
    ch->npending++;
    c->rank = rank;
    c->first = t->first;
    if (t->complete)
        ch->complete_pending = 1;
    start_work(ch);
    return TT_OK;
}

static void expire_parks(shard_chunk_t *ch, uint64_t now) {
    uint32_t miss[16];
    size_t n = tt_accum_missing(ch->acc, miss, 16);
    char msg[256];
    int w =
        snprintf(msg, sizeof(msg), "chunk %u: deadline passed, %zu rank(s) missing:", ch->id, n);
    for (size_t i = 0; i < n && i < 16 && w > 0 && (size_t)w < sizeof(msg); i++)
        w += snprintf(msg + w, sizeof(msg) - (size_t)w, " %u", miss[i]);
    /* A complete round is being computed: its parks wait for the result
     * rather than blame nobody. */
    int computing = tt_accum_active(ch->acc) && n == 0;
    shard_park_t **pp = &ch->parks;
    while (*pp != NULL) {
        shard_park_t *p = *pp;
        if (p->deadline <= now && !(computing && p->gen == tt_accum_generation(ch->acc) &&
                                    p->step == tt_accum_round_step(ch->acc))) {
            *pp = p->next;
            shard_send_error(ch->job->s, p->peer, p->peer_len, ch->job->id, p->gen, p->req,
                             TT_ETIMEDOUT, msg);
            free(p);
        } else {
            pp = &p->next;
        }
    }
}

void shard_chunk_tick(shard_chunk_t *ch, uint64_t now) {
    if (tt_accum_take_expiry(ch->acc, now))
        shard_report_stall(ch->job->s, ch->job, ch);
    expire_parks(ch, now);
}

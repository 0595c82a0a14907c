/* coord_dump: the coordinator's relay for `tetherctl dump JOB`. A dump
 * request from the operator becomes a pushed DumpRequest to every member
 * of the job's current generation; each worker's background thread answers
 * with a DumpReport holding its flight-recorder text. The coordinator
 * collects reports for up to COORD_DUMP_WINDOW_MS (or until all members
 * answered) and replies with one section per rank, marking members that
 * stayed silent. It owns only these pending collections (a list hanging
 * off tt_coord_t, each with its own libuv timer); it changes no job state
 * and never blocks the loop. */
#include "coord_internal.h"
#include "tt_clock.h"
#include "tt_log.h"
#include "tt_status.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COORD_DUMP_WINDOW_MS 2000
#define COORD_DUMP_MAX_REPLY ((size_t)900 << 10) /* stay under the 1 MiB envelope */
#define COORD_DUMP_MAX_OPEN  16                  /* collections in flight */

typedef struct dump_slot {
    uint32_t rank;
    char worker_id[TT_RDZV_ID_MAX];
    uint64_t incarnation;
    int answered;
    char *text;
} dump_slot_t;

typedef struct coord_dump {
    struct coord_dump *next;
    tt_coord_t *c;
    uint64_t id, req_id, generation;
    char job_id[TT_RDZV_ID_MAX];
    uint8_t peer[TT_ZMQ_MAX_PEER];
    size_t peer_len;
    dump_slot_t *slots;
    size_t n, answered;
    int finished;
    uv_timer_t timer;
} coord_dump_t;

static void dump_free(coord_dump_t *d) {
    for (size_t i = 0; i < d->n; i++)
        free(d->slots[i].text);
    free(d->slots);
    free(d);
}

static void on_closed(uv_handle_t *h) {
    coord_dump_t *d = h->data;
    tt_coord_t *c = d->c;
    for (coord_dump_t **p = &c->dumps; *p != NULL; p = &(*p)->next) {
        if (*p == d) {
            *p = d->next;
            break;
        }
    }
    dump_free(d);
}

/* The reply: one section per member, silent ones marked, texts dropped
 * once the reply would outgrow the envelope limit. */
static void send_reply(coord_dump_t *d) {
    Tether__DumpSection *sec = calloc(d->n + 1, sizeof(*sec));
    Tether__DumpSection **ptrs = calloc(d->n + 1, sizeof(*ptrs));
    if (sec == NULL || ptrs == NULL) {
        coord_send_error(d->c, d->peer, d->peer_len, d->job_id, d->req_id, TT_ENOMEM,
                         "out of memory");
    } else {
        size_t used = 0;
        for (size_t i = 0; i < d->n; i++) {
            const dump_slot_t *s = &d->slots[i];
            size_t len = s->text != NULL ? strlen(s->text) : 0;
            tether__dump_section__init(&sec[i]);
            sec[i].rank = s->rank;
            sec[i].worker_id = (char *)s->worker_id;
            sec[i].answered = s->answered;
            int fits = used + len <= COORD_DUMP_MAX_REPLY;
            sec[i].text = fits ? (s->text ? s->text : "")
                               : "(text dropped: the reply would exceed the message size limit)";
            used += fits ? len : 0;
            ptrs[i] = &sec[i];
        }
        Tether__DumpReply r = TETHER__DUMP_REPLY__INIT;
        r.generation = d->generation;
        r.n_sections = d->n;
        r.sections = ptrs;
        tt_env_t env;
        tt_wire_env_init(&env, d->job_id, d->c->id, d->generation, d->req_id);
        env.body_case = TETHER__ENVELOPE__BODY_DUMP_REPLY;
        env.dump_reply = &r;
        coord_send(d->c, d->peer, d->peer_len, &env, 0);
    }
    free(sec);
    free(ptrs);
}

static void finish(coord_dump_t *d) {
    if (d->finished)
        return;
    d->finished = 1;
    TT_INFO("coord", "job %s: dump %" PRIu64 " done, %zu of %zu members answered", d->job_id, d->id,
            d->answered, d->n);
    if (!d->c->closing)
        send_reply(d);
    uv_timer_stop(&d->timer);
    uv_close((uv_handle_t *)&d->timer, on_closed);
}

static void on_timeout(uv_timer_t *t) {
    finish(t->data);
}

/* Copies the generation's members into d->slots. */
static int take_members(coord_dump_t *d, coord_job_t *job, uint64_t now) {
    size_t cap = tt_rdzv_member_count(job->rdzv), n = 0;
    tt_rdzv_member_info_t *info = calloc(cap + 1, sizeof(*info));
    d->slots = calloc(cap + 1, sizeof(*d->slots));
    if (info == NULL || d->slots == NULL) {
        free(info);
        return TT_ENOMEM;
    }
    tt_rdzv_members(job->rdzv, now, info, cap, &n);
    d->n = n < cap ? n : cap;
    for (size_t i = 0; i < d->n; i++) {
        d->slots[i].rank = info[i].m.rank;
        d->slots[i].incarnation = info[i].m.incarnation;
        snprintf(d->slots[i].worker_id, sizeof(d->slots[i].worker_id), "%s", info[i].m.worker_id);
    }
    free(info);
    d->generation = tt_rdzv_generation(job->rdzv);
    return TT_OK;
}

static void push_requests(coord_dump_t *d) {
    Tether__DumpRequest req = TETHER__DUMP_REQUEST__INIT;
    req.dump_id = d->id;
    tt_env_t env;
    tt_wire_env_init(&env, d->job_id, d->c->id, d->generation, 0);
    env.body_case = TETHER__ENVELOPE__BODY_DUMP;
    env.dump = &req;
    for (size_t i = 0; i < d->n; i++) {
        uint8_t peer[TT_ZMQ_MAX_PEER];
        size_t len;
        if (coord_worker_peer(d->slots[i].worker_id, d->slots[i].incarnation, peer, &len) == TT_OK)
            coord_send(d->c, peer, len, &env, 0);
    }
}

static size_t open_count(const tt_coord_t *c) {
    size_t n = 0;
    for (const coord_dump_t *d = c->dumps; d != NULL; d = d->next)
        n++;
    return n;
}

void coord_on_dump(const coord_req_t *q) {
    coord_job_t *job = coord_find_job(q->c, q->env->job_id);
    if (job == NULL) {
        coord_reply_error(q, TT_EJOB, "no such job");
        return;
    }
    if (open_count(q->c) >= COORD_DUMP_MAX_OPEN) {
        coord_reply_error(q, TT_EBUSY, "too many dumps in progress: try again in 2 s");
        return;
    }
    coord_dump_t *d = calloc(1, sizeof(*d));
    if (d == NULL || take_members(d, job, q->now) != TT_OK) {
        if (d != NULL)
            dump_free(d);
        coord_reply_error(q, TT_ENOMEM, "out of memory");
        return;
    }
    d->c = q->c;
    d->id = ++q->c->next_dump_id;
    d->req_id = q->env->request_id;
    snprintf(d->job_id, sizeof(d->job_id), "%s", q->env->job_id);
    d->peer_len = q->rx->peer_len;
    memcpy(d->peer, q->rx->peer, d->peer_len);
    d->next = q->c->dumps;
    q->c->dumps = d;
    uv_timer_init(q->c->loop, &d->timer);
    d->timer.data = d;
    TT_INFO("coord", "job %s: dump %" PRIu64 " asks %zu members", d->job_id, d->id, d->n);
    push_requests(d);
    if (d->n == 0)
        finish(d);
    else
        uv_timer_start(&d->timer, on_timeout, COORD_DUMP_WINDOW_MS, 0);
}

static dump_slot_t *slot_for(coord_dump_t *d, const char *worker_id) {
    for (size_t i = 0; i < d->n; i++)
        if (strcmp(d->slots[i].worker_id, worker_id) == 0)
            return &d->slots[i];
    return NULL;
}

void coord_on_dump_report(const coord_req_t *q) {
    const Tether__DumpReport *r = q->env->dump_report;
    coord_dump_t *d = q->c->dumps;
    while (d != NULL && d->id != r->dump_id)
        d = d->next;
    if (d == NULL || d->finished || strcmp(d->job_id, q->env->job_id) != 0)
        return; /* late or foreign: the operator already has the reply */
    dump_slot_t *s = slot_for(d, q->env->sender_id);
    if (s == NULL || s->answered)
        return;
    s->text = strdup(r->text != NULL ? r->text : "");
    s->answered = 1;
    if (++d->answered == d->n)
        finish(d);
}

void coord_dump_close(tt_coord_t *c) {
    for (coord_dump_t *d = c->dumps; d != NULL; d = d->next) {
        if (!d->finished) {
            d->finished = 1;
            uv_timer_stop(&d->timer);
            uv_close((uv_handle_t *)&d->timer, on_closed);
        }
    }
}

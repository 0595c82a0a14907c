/* shard_data: the data-plane requests (PsSetup, PushChunk, PullChunk,
 * SetParams, GetParams; WriteChunks goes on to shard_ckpt.c). Each handler validates what the wire
 * decoder cannot know (the job and chunk exist, the sizes match this chunk, the generation is
 * current, the chunk is not mid-computation), answers errors at once with a sentence, and never
 * lets a refused message change state. After a restart this shard holds nothing: workers set the
 * job up again (PsSetup) and re-push; a push one step off the open round is resolved by
 * restarted_rounds (the ranks ahead refill the older step first). */
#include "shard_internal.h"
#include "tt_clock.h"
#include "tt_log.h"
#include "tt_status.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct shard_req {
    tt_shard_t *s;
    tt_zmq_rx_t *rx;
    const tt_env_t *env;
    uint64_t now;
} shard_req_t;

static void reply_error(const shard_req_t *q, int code, const char *msg) {
    TT_DEBUG("shard", "%s from %s refused: %s", tt_wire_body_name(q->env->body_case),
             q->env->sender_id, msg);
    shard_send_error(q->s, q->rx->peer, q->rx->peer_len, q->env->job_id, q->env->generation,
                     q->env->request_id, code, msg);
}

static void reply_ack(const shard_req_t *q) {
    Tether__Ack a = TETHER__ACK__INIT;
    tt_env_t env;
    tt_wire_env_init(&env, q->env->job_id, q->s->id, q->env->generation, q->env->request_id);
    env.body_case = TETHER__ENVELOPE__BODY_ACK;
    env.ack = &a;
    shard_send(q->s, q->rx->peer, q->rx->peer_len, &env, NULL, 0);
}

shard_job_t *shard_find_job(tt_shard_t *s, const char *id) {
    for (size_t i = 0; i < s->njobs; i++) {
        if (strcmp(s->jobs[i]->id, id) == 0)
            return s->jobs[i];
    }
    return NULL;
}

shard_chunk_t *shard_find_chunk(const shard_job_t *job, uint32_t id) {
    size_t lo = 0, hi = job->nchunks;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (job->chunks[mid]->id == id)
            return job->chunks[mid];
        if (job->chunks[mid]->id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

void shard_job_free(shard_job_t **jp) {
    if (jp == NULL || *jp == NULL)
        return;
    shard_job_t *job = *jp;
    *jp = NULL;
    for (size_t i = 0; i < job->nchunks; i++)
        shard_chunk_free(&job->chunks[i]);
    shard_ckpt_forget(job);
    free(job->chunks);
    free(job);
}

/* The chunk a request names, or an error reply (unknown job or chunk). */
static shard_chunk_t *chunk_or_error(const shard_req_t *q, uint32_t chunk) {
    shard_job_t *job = shard_find_job(q->s, q->env->job_id);
    shard_chunk_t *ch = job ? shard_find_chunk(job, chunk) : NULL;
    if (ch == NULL) {
        char msg[256];
        if (job == NULL)
            snprintf(msg, sizeof(msg), "job '%s' is not set up on shard %s: send PsSetup first",
                     q->env->job_id, q->s->id);
        else
            snprintf(msg, sizeof(msg),
                     "chunk %u of job '%s' is not held by shard %s (placement version %" PRIu64
                     "): fetch the placement again",
                     chunk, q->env->job_id, q->s->id, job->placement_version);
        reply_error(q, TT_ENOTFOUND, msg);
    }
    return ch;
}

static void opts_from_setup(const Tether__PsSetup *p, uint32_t def_tmo, tt_accum_opts_t *o) {
    memset(o, 0, sizeof(*o));
    o->mode = p->mode == TETHER__PS_MODE__PS_OPTIMIZER ? TT_ACCUM_OPTIMIZER : TT_ACCUM_AGGREGATE;
    o->optim = p->optim == TETHER__PS_OPTIM__PS_ADAMW ? TT_ACCUM_ADAMW : TT_ACCUM_SGD;
    o->sgd.momentum = p->momentum;
    o->sgd.weight_decay = p->weight_decay;
    o->sgd.nesterov = p->nesterov ? 1 : 0;
    o->adamw.beta1 = p->beta1;
    o->adamw.beta2 = p->beta2;
    o->adamw.eps = p->eps;
    o->adamw.weight_decay = p->weight_decay;
    o->deterministic = p->deterministic ? 1 : 0;
    o->timeout_ms = p->park_timeout_ms ? p->park_timeout_ms : def_tmo;
}

/* An identical setup for the placement in force changes nothing. */
static int setup_matches(const shard_job_t *job, const Tether__PsSetup *p,
                         const tt_accum_opts_t *o) {
    if (job->nchunks != p->n_chunks)
        return 0;
    for (size_t i = 0; i < p->n_chunks; i++) {
        tt_accum_opts_t co = *o;
        co.elems = (size_t)p->chunks[i]->count;
        if (job->chunks[i]->id != p->chunks[i]->chunk ||
            !tt_accum_same_opts(job->chunks[i]->acc, &co))
            return 0;
    }
    return 1;
}

/* Builds the chunk table of a new placement, keeping chunks (parameters,
 * optimizer state) that stay here unchanged. Refuses while any old chunk
 * is mid-computation. */
static int kept(shard_chunk_t *const *next, size_t n, const shard_chunk_t *c) {
    for (size_t i = 0; i < n; i++) {
        if (next[i] == c)
            return 1;
    }
    return 0;
}

/* Builds the chunk table of a new placement, keeping chunks (parameters,
 * optimizer state) that stay here unchanged. Refuses while any old chunk
 * is mid-computation; on failure the old table stands. */
static int rebuild_chunks(shard_job_t *job, const Tether__PsSetup *p, const tt_accum_opts_t *o) {
    for (size_t i = 0; i < job->nchunks; i++) {
        if (job->chunks[i]->busy)
            return TT_EBUSY;
    }
    shard_chunk_t **next = calloc(p->n_chunks + 1, sizeof(*next));
    int rc = next ? TT_OK : TT_ENOMEM;
    tt_accum_opts_t saved = job->base;
    job->base = *o;
    for (size_t i = 0; rc == TT_OK && i < p->n_chunks; i++) {
        tt_accum_opts_t co = *o;
        co.elems = (size_t)p->chunks[i]->count;
        shard_chunk_t *old = shard_find_chunk(job, p->chunks[i]->chunk);
        if (old != NULL && tt_accum_same_opts(old->acc, &co))
            next[i] = old;
        else
            rc = shard_chunk_new(job, p->chunks[i]->chunk, co.elems, &next[i]);
    }
    if (rc != TT_OK) {
        for (size_t k = 0; next != NULL && k < p->n_chunks; k++) {
            if (next[k] != NULL && shard_find_chunk(job, next[k]->id) != next[k])
                shard_chunk_free(&next[k]);
        }
        free(next);
        job->base = saved;
        return rc;
    }
    for (size_t k = 0; k < job->nchunks; k++) {
        if (!kept(next, p->n_chunks, job->chunks[k]))
            shard_chunk_free(&job->chunks[k]);
    }
    free(job->chunks);
    job->chunks = next;
    job->nchunks = p->n_chunks;
    return TT_OK;
}

static shard_job_t *add_job(tt_shard_t *s, const char *id) {
    shard_job_t **jobs = realloc(s->jobs, (s->njobs + 1) * sizeof(*jobs));
    if (jobs == NULL)
        return NULL;
    s->jobs = jobs;
    shard_job_t *job = calloc(1, sizeof(*job));
    if (job == NULL)
        return NULL;
    job->s = s;
    snprintf(job->id, sizeof(job->id), "%s", id);
    s->jobs[s->njobs++] = job;
    return job;
}

static void on_setup(const shard_req_t *q) {
    const Tether__PsSetup *p = q->env->ps_setup;
    tt_accum_opts_t o;
    opts_from_setup(p, q->s->park_ms, &o);
    for (size_t i = 0; i < p->n_chunks; i++) {
        if (p->chunks[i]->count * 4 > q->s->max_chunk) {
            reply_error(q, TT_ETOOBIG, "a chunk is larger than this shard's max-chunk-bytes");
            return;
        }
    }
    shard_job_t *job = shard_find_job(q->s, q->env->job_id);
    if (job == NULL && (job = add_job(q->s, q->env->job_id)) == NULL) {
        reply_error(q, TT_ENOMEM, "out of memory");
        return;
    }
    int rc = TT_OK;
    if (job->placement_version > p->placement_version) {
        reply_error(q, TT_ESTALE, "placement version is older than the one set up");
        return;
    }
    if (job->placement_version == p->placement_version && job->nchunks > 0) {
        if (!setup_matches(job, p, &o))
            reply_error(q, TT_ECONFLICT,
                        "setup differs from the one already made for this placement version "
                        "(mode, optimizer, determinism, timeout or chunk list)");
        else
            reply_ack(q);
        return;
    }
    rc = rebuild_chunks(job, p, &o);
    if (rc != TT_OK) {
        reply_error(q, rc, rc == TT_EBUSY ? "chunks are mid-aggregation: retry" : "out of memory");
        return;
    }
    job->placement_version = p->placement_version;
    TT_INFO("shard", "job %s: placement version %" PRIu64 ", %zu chunks, %s mode%s", job->id,
            job->placement_version, job->nchunks, o.mode ? "optimizer" : "aggregate",
            o.deterministic ? ", deterministic" : "");
    reply_ack(q);
}

/* A push for the step after the open round of its generation. Ranks push
 * step s+1 only once they have the result of s, so this happens only
 * when this shard restarted after some ranks had that result and before
 * others did: the ranks behind re-push step s, and the ranks ahead must
 * contribute to it again (tt_ps refills from its copy) before step s+1 can
 * start here. TT_EAGAIN tells them so. */
static int older_round_open(const shard_chunk_t *ch, uint64_t gen, uint64_t step) {
    return tt_accum_active(ch->acc) && gen == tt_accum_generation(ch->acc) &&
           step == tt_accum_round_step(ch->acc) + 1;
}

/* The reverse order: a push for the step before the open round of its
 * generation, a step this shard never finished. The ranks ahead reached
 * the restarted shard first and opened the next round; it cannot finish
 * before this one, so it is dropped (its ranks hear TT_EAGAIN, as above,
 * and push it again after refilling this step) and this push admitted. */
static int newer_round_open(const shard_chunk_t *ch, uint64_t gen, uint64_t step) {
    uint64_t done = 0;
    int final = tt_accum_done_step(ch->acc, &done) && done >= step;
    return tt_accum_active(ch->acc) && gen == tt_accum_generation(ch->acc) &&
           step + 1 == tt_accum_round_step(ch->acc) && !final;
}

/* Applies the two orders above; TT_OK lets the push go on to admission. */
static int restarted_rounds(const shard_req_t *q, shard_chunk_t *ch) {
    const Tether__PushChunk *p = q->env->push_chunk;
    uint64_t gen = q->env->generation, open = tt_accum_round_step(ch->acc);
    char msg[256];
    if (older_round_open(ch, gen, p->step)) {
        snprintf(msg, sizeof(msg),
                 "chunk %u: step %" PRIu64 " is still open on this shard (it restarted): "
                 "contribute to it again, then push step %" PRIu64,
                 ch->id, open, p->step);
        reply_error(q, TT_EAGAIN, msg);
        return TT_EAGAIN;
    }
    if (!newer_round_open(ch, gen, p->step))
        return TT_OK;
    if (ch->busy) {
        reply_error(q, TT_EBUSY, "chunk is folding in pushes of the next step: retry");
        return TT_EBUSY;
    }
    snprintf(msg, sizeof(msg),
             "chunk %u: rank %u pushed step %" PRIu64 " again (this shard restarted): "
             "contribute to it again, then push step %" PRIu64 " again",
             ch->id, p->rank, p->step, open);
    shard_chunk_abandon(ch, TT_EAGAIN, msg);
    return TT_OK;
}

static int admit_push(const shard_req_t *q, shard_chunk_t *ch, tt_accum_ticket_t *t) {
    const Tether__PushChunk *p = q->env->push_chunk;
    char err[256] = "";
    if (q->env->generation > tt_accum_generation(ch->acc) && ch->busy) {
        reply_error(q, TT_EBUSY, "chunk is finishing the previous generation's round: retry");
        return TT_EBUSY;
    }
    int rc = restarted_rounds(q, ch);
    if (rc != TT_OK)
        return rc;
    tt_accum_push_t ap = {.generation = q->env->generation,
                          .step = p->step,
                          .rank = p->rank,
                          .world = p->world,
                          .examples = p->examples,
                          .lr = p->lr,
                          .elems = zmq_msg_size(&q->rx->payload[0]) / sizeof(float)};
    rc = tt_accum_admit(ch->acc, &ap, q->now, t, err, sizeof(err));
    if (rc != TT_OK) {
        char msg[320];
        snprintf(msg, sizeof(msg), "chunk %u: %s", ch->id, err);
        reply_error(q, rc, msg);
    }
    return rc;
}

/* Optimizer mode: a step redone by a newer generation that this chunk
 * finished already is answered with its parameters, not applied twice. */
static void replay_push(const shard_req_t *q, shard_chunk_t *ch) {
    const Tether__PushChunk *p = q->env->push_chunk;
    uint64_t gen = q->env->generation;
    if (shard_chunk_replay(ch, gen, p->step) != TT_OK) {
        reply_error(q, TT_ENOMEM, "out of memory for a replayed result");
        return;
    }
    if (!p->want_result ||
        !shard_chunk_answer(ch, q->rx->peer, q->rx->peer_len, q->env->request_id, gen, p->step))
        reply_ack(q);
}

static void on_push(const shard_req_t *q) {
    const Tether__PushChunk *p = q->env->push_chunk;
    shard_chunk_t *ch = chunk_or_error(q, p->chunk);
    tt_accum_ticket_t t;
    if (ch == NULL || admit_push(q, ch, &t) != TT_OK)
        return;
    if (t.replay) {
        replay_push(q, ch);
        return;
    }
    if (t.dropped_gen || t.first)
        shard_chunk_new_gen(ch, q->env->generation);
    int rc = shard_chunk_enqueue(ch, &q->rx->payload[0], p->rank, &t);
    if (rc == TT_OK && p->want_result)
        rc = shard_chunk_park(ch, q->rx->peer, q->rx->peer_len, q->env->request_id,
                              q->env->generation, p->step, q->now);
    else if (rc == TT_OK)
        reply_ack(q);
    if (rc != TT_OK)
        TT_ERROR("shard", "chunk %u: out of memory queueing a push", ch->id);
}

static void on_pull(const shard_req_t *q) {
    const Tether__PullChunk *p = q->env->pull_chunk;
    shard_chunk_t *ch = chunk_or_error(q, p->chunk);
    if (ch == NULL)
        return;
    uint64_t gen = q->env->generation, done = 0;
    if (shard_chunk_answer(ch, q->rx->peer, q->rx->peer_len, q->env->request_id, gen, p->step))
        return;
    if (gen < tt_accum_generation(ch->acc) ||
        (gen == tt_accum_generation(ch->acc) && tt_accum_done_step(ch->acc, &done) &&
         p->step <= done)) {
        reply_error(q, TT_ESTALE,
                    "that round's result is no longer held (stale step or generation)");
        return;
    }
    if (shard_chunk_park(ch, q->rx->peer, q->rx->peer_len, q->env->request_id, gen, p->step,
                         q->now) != TT_OK)
        reply_error(q, TT_ENOMEM, "out of memory");
}

static void on_set_params(const shard_req_t *q) {
    const Tether__SetParams *p = q->env->set_params;
    shard_chunk_t *ch = chunk_or_error(q, p->chunk);
    if (ch == NULL)
        return;
    /* An open round only touches the sum buffers; the parameters are read
     * when it finishes, in the pool: only that must not overlap. */
    if (ch->busy) {
        reply_error(q, TT_EBUSY, "chunk is applying an update: retry");
        return;
    }
    const zmq_msg_t *m = &q->rx->payload[0];
    int rc =
        tt_accum_set(ch->acc, (tt_accum_part_t)p->part, (size_t)p->offset,
                     zmq_msg_data((zmq_msg_t *)m), zmq_msg_size((zmq_msg_t *)m) / 4, p->optim_step);
    if (rc == TT_OK)
        reply_ack(q);
    else
        reply_error(q, rc, "range outside the chunk, or a part this optimizer does not keep");
}

static void free_buf(void *data, void *hint) {
    (void)hint;
    TT_TSAN_ACQUIRE(data);
    free(data);
}

static void on_get_params(const shard_req_t *q) {
    const Tether__GetParams *p = q->env->get_params;
    shard_chunk_t *ch = chunk_or_error(q, p->chunk);
    if (ch == NULL)
        return;
    size_t elems = tt_accum_elems(ch->acc);
    size_t off = (size_t)p->offset;
    size_t n = p->count ? (size_t)p->count : (off < elems ? elems - off : 0);
    float *buf = malloc((n ? n : 1) * sizeof(float));
    uint64_t t = 0;
    int rc = buf ? TT_OK : TT_ENOMEM;
    if (rc == TT_OK && ch->busy)
        rc = TT_EBUSY;
    if (rc == TT_OK)
        rc = tt_accum_get(ch->acc, (tt_accum_part_t)p->part, off, buf, n, &t);
    if (rc != TT_OK) {
        free(buf);
        reply_error(q, rc,
                    rc == TT_EBUSY ? "chunk is mid-aggregation: retry"
                                   : "range outside the chunk, or a part never set");
        return;
    }
    Tether__ParamsReply r = TETHER__PARAMS_REPLY__INIT;
    r.chunk = p->chunk;
    r.offset = p->offset;
    r.part = p->part;
    r.optim_step = t;
    tt_env_t env;
    tt_wire_env_init(&env, q->env->job_id, q->s->id, q->env->generation, q->env->request_id);
    env.body_case = TETHER__ENVELOPE__BODY_PARAMS_REPLY;
    env.params_reply = &r;
    tt_zmq_payload_t pl = {buf, n * sizeof(float), free_buf, NULL};
    TT_TSAN_RELEASE(buf);
    shard_send(q->s, q->rx->peer, q->rx->peer_len, &env, &pl, 1);
}

static void on_write_chunks(const shard_req_t *q) {
    shard_ckpt_write(q->s, q->rx->peer, q->rx->peer_len, q->env);
}

typedef void (*shard_handler_fn)(const shard_req_t *q);

static shard_handler_fn handler_for(int body) {
    switch (body) {
    case TETHER__ENVELOPE__BODY_PS_SETUP:
        return on_setup;
    case TETHER__ENVELOPE__BODY_PUSH_CHUNK:
        return on_push;
    case TETHER__ENVELOPE__BODY_PULL_CHUNK:
        return on_pull;
    case TETHER__ENVELOPE__BODY_SET_PARAMS:
        return on_set_params;
    case TETHER__ENVELOPE__BODY_GET_PARAMS:
        return on_get_params;
    case TETHER__ENVELOPE__BODY_WRITE_CHUNKS:
        return on_write_chunks;
    default:
        return NULL;
    }
}

void shard_on_data(void *sock, void *arg) {
    tt_shard_t *s = arg;
    tt_zmq_rx_t rx;
    char err[256] = "";
    int rc = tt_zmq_recv(sock, 1, 1, &s->lim, &rx, err, sizeof(err));
    if (rc == TT_EAGAIN || rc == TT_ESYS)
        return;
    if (rc != TT_OK) {
        char who[TT_ZMQ_PEER_NAME_MAX];
        TT_WARN("shard", "rejected message from %s: %s (%s)",
                tt_zmq_peer_name(rx.peer, rx.peer_len, who, sizeof(who)), err, tt_status_name(rc));
        shard_send_error(s, rx.peer, rx.peer_len, "", 0, 0, rc, err);
        return;
    }
    shard_req_t q = {.s = s, .rx = &rx, .env = rx.env, .now = tt_clock_mono_ms()};
    shard_handler_fn h = handler_for(rx.env->body_case);
    if (h != NULL) {
        h(&q);
    } else {
        snprintf(err, sizeof(err), "a shard server does not accept '%s' messages",
                 tt_wire_body_name(rx.env->body_case));
        reply_error(&q, TT_EPROTO, err);
    }
    tt_zmq_rx_close(&rx);
}

/* coord_events: turns rendezvous events into messages. A new generation is
 * first made durable (coord_request_save) and its replies are held behind
 * that write; everything else goes out at once. Workers are addressed by
 * their routing id "worker-<id>.<incarnation>", which the join handler
 * insists on, so no per-worker address table is needed. */
#include "coord_internal.h"
#include "tt_clock.h"
#include "tt_log.h"
#include "tt_status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int coord_worker_peer(const char *worker_id, uint64_t incarnation, uint8_t *peer,
                      size_t *peer_len) {
    char id[TT_ZMQ_MAX_PEER];
    if (tt_zmq_routing_id(id, sizeof(id), "worker", worker_id, incarnation) != TT_OK)
        return TT_EINVAL;
    *peer_len = strlen(id);
    memcpy(peer, id, *peer_len);
    return TT_OK;
}

static void send_to_worker(tt_coord_t *c, const char *worker_id, uint64_t inc, const tt_env_t *env,
                           int hold) {
    uint8_t peer[TT_ZMQ_MAX_PEER];
    size_t len;
    if (coord_worker_peer(worker_id, inc, peer, &len) == TT_OK)
        coord_send(c, peer, len, env, hold);
}

/* Builds the Generation message from a member array sorted by rank. What
 * the job decided when it formed `gen` (PS fallback, shrink relation) goes
 * only into that generation, so a resend to a catching-up member says the
 * same; g borrows job's arrays. */
static int fill_generation(coord_job_t *job, const tt_rdzv_member_t *src, size_t n, uint64_t gen,
                           int64_t resume, Tether__Generation *g, Tether__Member **ptrs,
                           Tether__Member *ms) {
    for (size_t i = 0; i < n; i++) {
        tether__member__init(&ms[i]);
        ms[i].rank = src[i].rank;
        ms[i].worker_id = (char *)src[i].worker_id;
        ms[i].host = (char *)src[i].host;
        ms[i].endpoint = (char *)src[i].endpoint;
        ms[i].last_step = src[i].last_step;
        ms[i].incarnation = src[i].incarnation;
        ptrs[i] = &ms[i];
    }
    tether__generation__init(g);
    g->generation = gen;
    g->world_size = (uint32_t)n;
    g->n_members = n;
    g->members = ptrs;
    g->resume_step = resume;
    g->job_nonce = job->nonce;
    if (job->formed_gen == gen) {
        g->job_steps = job->formed_job_steps;
        g->ps_until_step = job->ps_until_step;
        g->shrink_of = job->shrink_of;
        g->n_shrink_exclude = job->n_shrink_exclude; /* 0 without a relation */
        g->shrink_exclude = job->shrink_exclude;
    }
    return TT_OK;
}

static void send_reply_to(tt_coord_t *c, coord_job_t *job, Tether__Generation *g, size_t i,
                          uint64_t req, int hold) {
    Tether__JoinReply r = TETHER__JOIN_REPLY__INIT;
    r.generation = g;
    r.rank = g->members[i]->rank;
    tt_env_t env;
    tt_wire_env_init(&env, tt_rdzv_job_id(job->rdzv), c->id, g->generation, req);
    env.body_case = TETHER__ENVELOPE__BODY_JOIN_REPLY;
    env.join_reply = &r;
    send_to_worker(c, g->members[i]->worker_id, g->members[i]->incarnation, &env, hold);
}

/* Above this world size a JoinReply lists only the addressee and its ring
 * neighbours: sending every member the full table would cost O(W^2) bytes
 * per regroup (6 GB for 10,000 workers). tetherctl members has the rest. */
#define COORD_FULL_LIST_MAX 256

static size_t neighbour_ranks(size_t rank, size_t n, size_t out[3]) {
    size_t k = 0, cand[3] = {(rank + n - 1) % n, rank, (rank + 1) % n};
    for (int i = 0; i < 3; i++) {
        int dup = 0;
        for (size_t j = 0; j < k; j++)
            dup |= out[j] == cand[i];
        if (!dup)
            out[k++] = cand[i];
    }
    for (size_t i = 1; i < k; i++) /* sort: the wire wants ascending ranks */
        for (size_t j = i; j > 0 && out[j - 1] > out[j]; j--) {
            size_t t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    return k;
}

/* Sends member i its JoinReply, with the subset of the table it needs. */
static void send_to_member(tt_coord_t *c, coord_job_t *job, Tether__Generation *full, size_t i,
                           uint64_t req, int hold) {
    if (full->n_members <= COORD_FULL_LIST_MAX) {
        send_reply_to(c, job, full, i, req, hold);
        return;
    }
    size_t idx[3] = {0, 0, 0}, k = neighbour_ranks(i, full->n_members, idx);
    Tether__Member *sub[3];
    for (size_t j = 0; j < k; j++)
        sub[j] = full->members[idx[j]];
    Tether__Generation g = *full;
    g.n_members = k;
    g.members = sub;
    Tether__JoinReply r = TETHER__JOIN_REPLY__INIT;
    r.generation = &g;
    r.rank = full->members[i]->rank;
    tt_env_t env;
    tt_wire_env_init(&env, tt_rdzv_job_id(job->rdzv), c->id, g.generation, req);
    env.body_case = TETHER__ENVELOPE__BODY_JOIN_REPLY;
    env.join_reply = &r;
    send_to_worker(c, full->members[i]->worker_id, full->members[i]->incarnation, &env, hold);
}

/* Sends JoinReply to every listed member, or only to (worker_id, inc). */
static void send_generation(tt_coord_t *c, coord_job_t *job, const tt_rdzv_member_t *src, size_t n,
                            uint64_t gen, int64_t resume, const char *worker_id, uint64_t inc,
                            uint64_t req, int hold) {
    Tether__Member *ms = calloc(n + 1, sizeof(*ms));
    Tether__Member **ptrs = calloc(n + 1, sizeof(*ptrs));
    Tether__Generation g;
    if (ms != NULL && ptrs != NULL) {
        fill_generation(job, src, n, gen, resume, &g, ptrs, ms);
        for (size_t i = 0; i < n; i++) {
            if (worker_id == NULL ||
                (strcmp(src[i].worker_id, worker_id) == 0 && src[i].incarnation == inc))
                send_to_member(c, job, &g, i, req, hold);
        }
    }
    free(ms);
    free(ptrs);
}

void coord_send_generation(tt_coord_t *c, coord_job_t *job, const char *worker_id,
                           uint64_t incarnation, uint64_t req, int hold) {
    size_t cap = tt_rdzv_member_count(job->rdzv), n = 0;
    tt_rdzv_member_info_t *info = calloc(cap + 1, sizeof(*info));
    tt_rdzv_member_t *ms = calloc(cap + 1, sizeof(*ms));
    uint64_t gen = tt_rdzv_generation(job->rdzv);
    if (info != NULL && ms != NULL) {
        tt_rdzv_members(job->rdzv, 0, info, cap, &n);
        for (size_t i = 0; i < n && i < cap; i++)
            ms[i] = info[i].m;
        /* Unknown (-1) only when the state file did not say (written by
         * an older coordinator): the members' last steps then tell where
         * the generation stands. */
        int64_t resume = job->formed_gen == gen ? job->resume_step : -1;
        send_generation(c, job, ms, n < cap ? n : cap, gen, resume, worker_id, incarnation, req,
                        hold);
    }
    free(info);
    free(ms);
}

static void push_simple(tt_coord_t *c, coord_job_t *job, const tt_rdzv_event_t *ev) {
    tt_env_t env;
    tt_wire_env_init(&env, tt_rdzv_job_id(job->rdzv), c->id, ev->generation, 0);
    if (ev->kind == TT_RDZV_EV_CONTINUE) {
        Tether__Continue k = TETHER__CONTINUE__INIT;
        k.until_step = ev->step;
        env.body_case = TETHER__ENVELOPE__BODY_CONTINUE_;
        env.continue_ = &k;
        send_to_worker(c, ev->worker_id, ev->incarnation, &env, 0);
        return;
    }
    Tether__Error e = TETHER__ERROR__INIT;
    e.code = ev->status; /* EFENCED for an eviction, EDRAINED for a drain (rdzv_group.c) */
    e.message = (char *)ev->message;
    env.body_case = TETHER__ENVELOPE__BODY_ERROR;
    env.error = &e;
    send_to_worker(c, ev->worker_id, ev->incarnation, &env, 0);
}

static void push_regroup(tt_coord_t *c, coord_job_t *job, const tt_rdzv_event_t *ev) {
    size_t cap = tt_rdzv_member_count(job->rdzv), n = 0;
    tt_rdzv_member_info_t *info = calloc(cap + 1, sizeof(*info));
    if (info == NULL)
        return;
    tt_rdzv_members(job->rdzv, 0, info, cap, &n);
    Tether__RegroupNotice rn = TETHER__REGROUP_NOTICE__INIT;
    rn.regroup_after_step = ev->step;
    tt_env_t env;
    tt_wire_env_init(&env, tt_rdzv_job_id(job->rdzv), c->id, ev->generation, 0);
    env.body_case = TETHER__ENVELOPE__BODY_REGROUP_NOTICE;
    env.regroup_notice = &rn;
    for (size_t i = 0; i < n && i < cap; i++)
        send_to_worker(c, info[i].m.worker_id, info[i].m.incarnation, &env, 0);
    free(info);
}

/* Why only after steps ran: a first generation has no ring to replace and
 * its members build the ring before anything else. Why only with a live
 * shard: the members' PS backend needs one, and all of them must take the
 * same backend for the same step, so this is decided here, once. */
static int64_t ps_until(tt_coord_t *c, const tt_rdzv_event_t *ev) {
    if (c->ps_fallback_steps == 0 || ev->step <= 0 || ev->world_size < 2 ||
        !coord_shards_live(c, tt_clock_mono_ms()))
        return 0;
    return ev->step + (int64_t)c->ps_fallback_steps;
}

/* Keeps the event's shrink relation and says it in `out` for the log:
 * "; shrinks generation 3 by rank(s) 1 4" (the first 8 ranks). */
static void keep_shrink(coord_job_t *job, const tt_rdzv_event_t *ev, char *out, size_t cap) {
    job->shrink_of = ev->shrink_of; /* the rendezvous sets both or neither */
    job->n_shrink_exclude = ev->n_shrink_exclude;
    memcpy(job->shrink_exclude, ev->shrink_exclude,
           (size_t)job->n_shrink_exclude * sizeof(uint32_t));
    if (job->shrink_of == 0)
        return;
    int len = snprintf(out, cap, "; shrinks generation %llu by rank(s)",
                       (unsigned long long)job->shrink_of);
    uint32_t shown = job->n_shrink_exclude < 8 ? job->n_shrink_exclude : 8;
    for (uint32_t i = 0; i < shown && len > 0 && (size_t)len < cap; i++)
        len += snprintf(out + len, cap - (size_t)len, " %u", job->shrink_exclude[i]);
    if (shown < job->n_shrink_exclude && len > 0 && (size_t)len < cap)
        snprintf(out + len, cap - (size_t)len, " ... (%u in all)", job->n_shrink_exclude);
}

static void on_generation(tt_coord_t *c, coord_job_t *job, const tt_rdzv_event_t *ev) {
    char fallback[96] = "", shrink[192] = "";
    job->ps_until_step = ps_until(c, ev);
    if (job->ps_until_step > 0)
        snprintf(fallback, sizeof(fallback),
                 "; steps before %lld run on the shard servers while the new ring is made",
                 (long long)job->ps_until_step);
    keep_shrink(job, ev, shrink, sizeof(shrink));
    TT_INFO("coord", "job %s: generation %llu formed, world %u, resume at step %lld%s%s",
            tt_rdzv_job_id(job->rdzv), (unsigned long long)ev->generation, ev->world_size,
            (long long)ev->step, fallback, shrink);
    job->formed_gen = ev->generation;
    job->resume_step = ev->step;
    job->formed_job_steps = tt_rdzv_last_committed_step(job->rdzv) + 1; /* an index, -1: none */
    job->progress_step = -1; /* the new generation may train steps again */
    coord_request_save(c);
    send_generation(c, job, ev->members, ev->world_size, ev->generation, ev->step, NULL, 0, 0, 1);
}

void coord_drain_events(tt_coord_t *c, coord_job_t *job) {
    tt_rdzv_event_t ev;
    while (tt_rdzv_next_event(job->rdzv, &ev)) {
        switch (ev.kind) {
        case TT_RDZV_EV_GENERATION_FORMED:
            on_generation(c, job, &ev);
            break;
        case TT_RDZV_EV_MEMBER_EVICTED:
            if (ev.status == TT_EDRAINED)
                TT_INFO("coord", "job %s: %s drained from generation %llu: %s",
                        tt_rdzv_job_id(job->rdzv), ev.worker_id, (unsigned long long)ev.generation,
                        ev.message);
            else
                TT_WARN("coord", "job %s: %s evicted from generation %llu: %s",
                        tt_rdzv_job_id(job->rdzv), ev.worker_id, (unsigned long long)ev.generation,
                        ev.message);
            push_simple(c, job, &ev);
            break;
        case TT_RDZV_EV_JOIN_REFUSED:
        case TT_RDZV_EV_CONTINUE:
            push_simple(c, job, &ev);
            break;
        case TT_RDZV_EV_REGROUP_ANNOUNCED:
            TT_INFO("coord", "job %s: regroup after step %lld", tt_rdzv_job_id(job->rdzv),
                    (long long)ev.step);
            push_regroup(c, job, &ev);
            break;
        case TT_RDZV_EV_JOB_FAILED:
            TT_ERROR("coord", "job %s failed: %s", tt_rdzv_job_id(job->rdzv), ev.message);
            coord_request_save(c);
            break;
        case TT_RDZV_EV_JOB_FINISHED:
            TT_INFO("coord", "job %s finished; later joins are refused: %s",
                    tt_rdzv_job_id(job->rdzv), ev.message);
            coord_request_save(c);
            break;
        }
    }
    coord_commid_settle(c, job, tt_clock_mono_ms());
}

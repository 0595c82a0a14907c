/* coord_shards: the coordinator's shard-server requests. Shards register
 * and stay alive by heartbeating (routing id "shard-<id>.<incarnation>");
 * operators list them (tetherctl shards); workers declare a job's tensor
 * table and fetch its placement; shards report rounds stalled past their
 * deadline. State lives in shards.c (pure); this file only translates
 * messages. From the timer it regroups a running job whose placement
 * uses a shard that stopped heartbeating: its workers are stuck on that
 * shard until a new generation makes them fetch a placement without it.
 * A stall report is logged and counted, not acted on: only members may
 * accuse members (tt_rdzv_report_failure), and the workers blocked on that
 * round report the same ranks through their own timeouts. */
#include "coord_internal.h"
#include "shards.h"
#include "tt_log.h"
#include "tt_status.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static tt_shards_t *registry(const coord_req_t *q) {
    tt_coord_t *c = q->c;
    if (c->shards != NULL)
        return c->shards;
    if (tt_shards_create(&c->shards, c->shard_timeout_ms) != TT_OK) {
        coord_reply_error(q, TT_ENOMEM, "out of memory");
        return NULL;
    }
    /* see CoordState.boots */
    tt_shards_set_version_base(c->shards,
                               c->boots > 1 ? (c->boots - 1) * COORD_VERSIONS_PER_BOOT : 0);
    return c->shards;
}

static void ack(const coord_req_t *q) {
    Tether__Ack a = TETHER__ACK__INIT;
    tt_env_t env;
    coord_init_reply(q, &env, 0);
    env.body_case = TETHER__ENVELOPE__BODY_ACK;
    env.ack = &a;
    coord_reply(q, &env);
}

/* The routing id must be "shard-<shard_id>.<incarnation>". */
static int routing_matches(const coord_req_t *q, const Tether__ShardHeartbeat *h) {
    char want[TT_ZMQ_MAX_PEER + 1];
    int n = snprintf(want, sizeof(want), "shard-%s.%" PRIu64, h->shard_id, h->incarnation);
    return n > 0 && (size_t)n == q->rx->peer_len && memcmp(want, q->rx->peer, (size_t)n) == 0;
}

void coord_on_shard_heartbeat(const coord_req_t *q) {
    const Tether__ShardHeartbeat *h = q->env->shard_heartbeat;
    tt_shards_t *s = registry(q);
    if (s == NULL)
        return;
    if (!routing_matches(q, h)) {
        coord_reply_error(q, TT_EINVAL,
                          "shard heartbeats come from the routing id shard-<id>.<incarnation>");
        return;
    }
    tt_shard_info_t info;
    memset(&info, 0, sizeof(info));
    snprintf(info.id, sizeof(info.id), "%s", h->shard_id);
    snprintf(info.endpoint, sizeof(info.endpoint), "%s", h->endpoint);
    info.incarnation = h->incarnation;
    info.bytes_held = h->bytes_held;
    info.chunks = h->chunks;
    int known = tt_shards_endpoint(s, info.id) != NULL;
    int rc = tt_shards_heartbeat(s, &info, q->now);
    if (rc != TT_OK) {
        coord_reply_error(q, rc, "shard id or endpoint too long");
        return;
    }
    if (!known)
        TT_INFO("coord", "shard %s registered at %s", info.id, info.endpoint);
    ack(q);
}

static void fill_info(const tt_shards_t *s, size_t i, uint64_t now, Tether__ShardInfo *o) {
    const tt_shard_info_t *e = tt_shards_at(s, i);
    tether__shard_info__init(o);
    o->shard_id = (char *)e->id;
    o->endpoint = (char *)e->endpoint;
    o->bytes_held = e->bytes_held;
    o->chunks = e->chunks;
    o->heartbeat_age_ms = now > e->last_seen_ms ? now - e->last_seen_ms : 0;
    o->alive = tt_shards_alive(s, i, now) != 0;
    o->incarnation = e->incarnation;
}

int coord_shard_infos(tt_coord_t *c, uint64_t now, Tether__ShardInfo **infos,
                      Tether__ShardInfo ***ptrs, size_t *n) {
    *n = c->shards ? tt_shards_count(c->shards) : 0;
    *infos = calloc(*n + 1, sizeof(**infos));
    *ptrs = calloc(*n + 1, sizeof(**ptrs));
    if (*infos == NULL || *ptrs == NULL) {
        free(*infos);
        free(*ptrs);
        *infos = NULL;
        *ptrs = NULL;
        *n = 0;
        return TT_ENOMEM;
    }
    for (size_t i = 0; i < *n; i++) {
        fill_info(c->shards, i, now, &(*infos)[i]);
        (*ptrs)[i] = &(*infos)[i];
    }
    return TT_OK;
}

void coord_on_shards(const coord_req_t *q) {
    Tether__ShardInfo *infos = NULL, **ptrs = NULL;
    size_t n = 0;
    if (coord_shard_infos(q->c, q->now, &infos, &ptrs, &n) != TT_OK) {
        coord_reply_error(q, TT_ENOMEM, "out of memory");
        return;
    }
    Tether__ShardsReply r = TETHER__SHARDS_REPLY__INIT;
    r.n_shards = n;
    r.shards = ptrs;
    tt_env_t env;
    coord_init_reply(q, &env, 0);
    env.body_case = TETHER__ENVELOPE__BODY_SHARDS_REPLY;
    env.shards_reply = &r;
    coord_reply(q, &env);
    free(infos);
    free(ptrs);
}

/* The reply's arrays, freed together. */
typedef struct place_msg {
    Tether__PlacementReply r;
    Tether__ChunkPlace *chunks;
    Tether__ChunkPlace **chunk_ptrs;
    char **ids, **eps;
} place_msg_t;

static int build_placement(const tt_shards_t *s, const tt_placement_t *p, place_msg_t *m) {
    tether__placement_reply__init(&m->r);
    m->chunks = calloc(p->nchunks, sizeof(*m->chunks));
    m->chunk_ptrs = calloc(p->nchunks, sizeof(*m->chunk_ptrs));
    m->ids = calloc(p->nshards, sizeof(char *));
    m->eps = calloc(p->nshards, sizeof(char *));
    if (m->chunks == NULL || m->chunk_ptrs == NULL || m->ids == NULL || m->eps == NULL)
        return TT_ENOMEM;
    for (size_t i = 0; i < p->nchunks; i++) {
        tether__chunk_place__init(&m->chunks[i]);
        m->chunks[i].shard = p->chunks[i].shard;
        m->chunks[i].offset = p->chunks[i].offset;
        m->chunks[i].count = p->chunks[i].count;
        m->chunk_ptrs[i] = &m->chunks[i];
    }
    for (size_t k = 0; k < p->nshards; k++) {
        const char *ep = tt_shards_endpoint(s, p->shard_ids[k]);
        m->ids[k] = (char *)p->shard_ids[k];
        m->eps[k] = (char *)(ep ? ep : "");
    }
    m->r.version = p->version;
    m->r.chunk_bytes = p->chunk_bytes;
    m->r.total_elems = p->total_elems;
    m->r.n_chunks = p->nchunks;
    m->r.chunks = m->chunk_ptrs;
    m->r.n_shard_ids = m->r.n_shard_endpoints = p->nshards;
    m->r.shard_ids = m->ids;
    m->r.shard_endpoints = m->eps;
    return TT_OK;
}

int coord_shards_live(tt_coord_t *c, uint64_t now) {
    return c->shards != NULL && tt_shards_live_count(c->shards, now) > 0;
}

static void reply_placement(const coord_req_t *q, tt_shards_t *s) {
    const tt_placement_t *p = NULL;
    char err[256] = "";
    int rc = tt_shards_placement(s, q->env->job_id, q->now, &p, err, sizeof(err));
    if (rc == TT_ENOTFOUND && tt_shards_live_count(s, q->now) == 0)
        rc = TT_EAGAIN; /* shards and workers start in any order: ask again */
    if (rc != TT_OK) {
        coord_reply_error(q, rc, err[0] ? err : tt_strerror(rc));
        return;
    }
    place_msg_t m;
    memset(&m, 0, sizeof(m));
    if (build_placement(s, p, &m) == TT_OK) {
        tt_env_t env;
        coord_init_reply(q, &env, 0);
        env.body_case = TETHER__ENVELOPE__BODY_PLACEMENT_REPLY;
        env.placement_reply = &m.r;
        coord_reply(q, &env);
    } else {
        coord_reply_error(q, TT_ENOMEM, "out of memory");
    }
    free(m.chunks);
    free(m.chunk_ptrs);
    free(m.ids);
    free(m.eps);
}

void coord_on_declare(const coord_req_t *q) {
    const Tether__DeclareTensors *d = q->env->declare_tensors;
    tt_shards_t *s = registry(q);
    if (s == NULL)
        return;
    tt_tensor_decl_t *t = calloc(d->n_tensors, sizeof(*t));
    if (t == NULL) {
        coord_reply_error(q, TT_ENOMEM, "out of memory");
        return;
    }
    for (size_t i = 0; i < d->n_tensors; i++) {
        t[i].name = d->tensors[i]->name;
        t[i].count = d->tensors[i]->count;
    }
    char err[512] = "";
    int rc =
        tt_shards_declare(s, q->env->job_id, t, d->n_tensors, d->chunk_bytes, err, sizeof(err));
    free(t);
    if (rc != TT_OK) {
        TT_WARN("coord", "tensor table of job %s refused: %s", q->env->job_id, err);
        coord_reply_error(q, rc, err);
        return;
    }
    tt_shards_wait_for(s, q->env->job_id, d->min_shards);
    reply_placement(q, s);
}

void coord_on_placement(const coord_req_t *q) {
    tt_shards_t *s = registry(q);
    if (s != NULL)
        reply_placement(q, s);
}

void coord_on_shard_stall(const coord_req_t *q) {
    const Tether__ShardStall *st = q->env->shard_stall;
    char ranks[256] = "";
    size_t w = 0;
    for (size_t i = 0; i < st->n_missing_ranks && w < sizeof(ranks) - 12; i++)
        w += (size_t)snprintf(ranks + w, sizeof(ranks) - w, " %u", st->missing_ranks[i]);
    TT_WARN("coord",
            "shard %s: job %s generation %" PRIu64 " step %" PRIu64 " chunk %u waits for %zu "
            "of %u rank(s):%s",
            q->env->sender_id, q->env->job_id, q->env->generation, st->step, st->chunk,
            st->n_missing_ranks, st->world, ranks);
    ack(q);
}

uint64_t coord_shards_deadline(const tt_coord_t *c, uint64_t now) {
    return c->shards != NULL && c->njobs > 0 ? tt_shards_next_expiry(c->shards, now) : UINT64_MAX;
}

static void regroup_for_lost(tt_coord_t *c, coord_job_t *job, const char *shard, uint64_t now) {
    const char *id = tt_rdzv_job_id(job->rdzv);
    char why[TT_RDZV_REASON_MAX];
    TT_WARN("coord", "job %s: shard %s lost; regrouping to re-place its chunks", id, shard);
    snprintf(why, sizeof(why), "shard %s holding its chunks stopped heartbeating", shard);
    int rc = tt_rdzv_regroup_now(job->rdzv, why, now);
    if (rc != TT_OK)
        TT_WARN("coord", "job %s: regroup for shard %s: %s", id, shard, tt_strerror(rc));
    coord_drain_events(c, job);
}

void coord_check_shards(tt_coord_t *c, uint64_t now) {
    for (size_t i = 0; c->shards != NULL && i < c->njobs; i++) {
        coord_job_t *job = &c->jobs[i];
        uint64_t version = 0;
        const char *shard = tt_shards_lost(c->shards, tt_rdzv_job_id(job->rdzv), now, &version);
        /* The workers fetch a new placement in the new generation; until
         * then this one still names the lost shard: act on it once. */
        if (shard == NULL || version == job->lost_version ||
            tt_rdzv_state(job->rdzv) != TT_RDZV_RUNNING)
            continue;
        job->lost_version = version;
        regroup_for_lost(c, job, shard, now);
    }
}

/* coord_state: maps every job's rendezvous record, guard-rail memory
 * (regroup and eviction times, stored as wall-clock times because the
 * monotonic clock the rdzv runs on does not survive a reboot or a move to
 * another machine) and checkpoint book (requests, committed checkpoints)
 * to the CoordState protobuf and back. The file itself is written
 * by coord.c through tt_fs_write_atomic (tmp, fsync, rename) and decoded through tt_wire, the one
 * protobuf seam, which rejects a corrupt file with a clear message. */
#include "coord_internal.h"
#include "tt_fsutil.h"
#include "tt_log.h"
#include "tt_clock.h"
#include "tt_status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void coord_settings_to_pb(const tt_rdzv_settings_t *s, Tether__JobSettings *p) {
    tether__job_settings__init(p);
    p->min_workers = s->min_workers;
    p->max_workers = s->max_workers;
    p->last_call_ms = s->last_call_ms;
    p->heartbeat_ms = s->heartbeat_ms;
    p->heartbeat_timeout_ms = s->heartbeat_timeout_ms;
    p->global_batch = s->global_batch;
    p->join_timeout_ms = s->join_timeout_ms;
    p->checkpoint_every_steps = s->checkpoint_every_steps;
    p->checkpoint_every_ms = s->checkpoint_every_ms;
    p->checkpoint_keep = s->checkpoint_keep;
    p->max_regroups_per_hour = s->max_regroups_per_hour;
    p->flap_cooldown_ms = s->flap_cooldown_ms;
}

static void settings_from_pb(const Tether__JobSettings *p, tt_rdzv_settings_t *s) {
    s->min_workers = p->min_workers;
    s->max_workers = p->max_workers;
    s->last_call_ms = p->last_call_ms;
    s->heartbeat_ms = p->heartbeat_ms;
    s->heartbeat_timeout_ms = p->heartbeat_timeout_ms;
    s->global_batch = p->global_batch;
    s->join_timeout_ms = p->join_timeout_ms;
    s->checkpoint_every_steps = p->checkpoint_every_steps;
    s->checkpoint_every_ms = p->checkpoint_every_ms;
    s->checkpoint_keep = p->checkpoint_keep;
    s->max_regroups_per_hour = p->max_regroups_per_hour;
    s->flap_cooldown_ms = p->flap_cooldown_ms;
}

/* Everything one job record needs while it is being packed. */
typedef struct job_pb {
    tt_rdzv_record_t rec;
    Tether__CoordJobRecord pb;
    Tether__JobSettings settings;
    Tether__Member *members;
    Tether__Member **ptrs;
    Tether__CheckpointRecord *ckpts;
    Tether__CheckpointRecord **ckpt_ptrs;
    tt_rdzv_history_t hist;
    uint64_t *regroups; /* Unix ms */
    uint64_t *evicted;  /* Unix ms, TT_RDZV_FLAP_KEEP per flap */
    Tether__FlapRecord *flaps;
    Tether__FlapRecord **flap_ptrs;
} job_pb_t;

/* Both clocks read once per encode or load: ages convert between them. */
typedef struct {
    uint64_t mono, wall;
} clocks_t;

/* The wall time `x` ms before now (an age going out), and the age of wall
 * time x (coming in): both now - x, and 0 where x lies past now. A time in
 * the future (the wall clock went back) so counts as now: remembered
 * longer, never shorter. */
static uint64_t wall_minus(const clocks_t *k, uint64_t x) {
    return x < k->wall ? k->wall - x : 0;
}

/* The rdzv's memory of regroups and evictions, borrowed by the record. */
static int history_to_pb(const coord_job_t *job, const clocks_t *k, job_pb_t *j) {
    if (tt_rdzv_history_export(job->rdzv, k->mono, &j->hist) != TT_OK)
        return TT_ENOMEM;
    const tt_rdzv_history_t *h = &j->hist;
    j->regroups = calloc(h->n_regroups + 1, sizeof(uint64_t));
    j->evicted = calloc((size_t)h->n_flaps * TT_RDZV_FLAP_KEEP + 1, sizeof(uint64_t));
    j->flaps = calloc(h->n_flaps + 1, sizeof(*j->flaps));
    j->flap_ptrs = calloc(h->n_flaps + 1, sizeof(*j->flap_ptrs));
    if (!j->regroups || !j->evicted || !j->flaps || !j->flap_ptrs)
        return TT_ENOMEM;
    for (uint32_t i = 0; i < h->n_regroups; i++)
        j->regroups[i] = wall_minus(k, h->regroup_age_ms[i]);
    for (uint32_t i = 0; i < h->n_flaps; i++) {
        uint64_t *at = j->evicted + (size_t)i * TT_RDZV_FLAP_KEEP;
        for (uint32_t e = 0; e < h->flaps[i].n; e++)
            at[e] = wall_minus(k, h->flaps[i].age_ms[e]);
        tether__flap_record__init(&j->flaps[i]);
        j->flaps[i].worker_id = (char *)h->flaps[i].worker_id;
        j->flaps[i].n_evicted_unix_ms = h->flaps[i].n;
        j->flaps[i].evicted_unix_ms = at;
        j->flap_ptrs[i] = &j->flaps[i];
    }
    j->pb.n_regroup_unix_ms = h->n_regroups;
    j->pb.regroup_unix_ms = j->regroups;
    j->pb.n_flaps = h->n_flaps;
    j->pb.flaps = j->flap_ptrs;
    return TT_OK;
}

static void job_pb_free(job_pb_t *j) {
    tt_rdzv_record_free(&j->rec);
    free(j->members);
    free(j->ptrs);
    free(j->ckpts);
    free(j->ckpt_ptrs);
    tt_rdzv_history_free(&j->hist);
    free(j->regroups);
    free(j->evicted);
    free(j->flaps);
    free(j->flap_ptrs);
}

/* The book's records, borrowed by the packed record. */
static int book_to_pb(const tt_ckpt_book_t *b, job_pb_t *j) {
    tt_ckpt_book_saved_t saved;
    tt_ckpt_book_export(b, &saved);
    j->ckpts = calloc(saved.n + 1, sizeof(*j->ckpts));
    j->ckpt_ptrs = calloc(saved.n + 1, sizeof(*j->ckpt_ptrs));
    if (j->ckpts == NULL || j->ckpt_ptrs == NULL)
        return TT_ENOMEM;
    for (size_t i = 0; i < saved.n; i++) {
        coord_ckpt_rec_to_pb(&saved.recs[i], &j->ckpts[i]);
        j->ckpt_ptrs[i] = &j->ckpts[i];
    }
    j->pb.checkpoint_requested = saved.requested;
    j->pb.checkpoint_served = saved.served;
    j->pb.n_checkpoints = saved.n;
    j->pb.checkpoints = j->ckpt_ptrs;
    return TT_OK;
}

static int job_to_pb(const coord_job_t *job, const clocks_t *k, job_pb_t *j) {
    if (tt_rdzv_export(job->rdzv, &j->rec) != TT_OK)
        return TT_ENOMEM;
    size_t n = j->rec.n_members;
    j->members = calloc(n + 1, sizeof(*j->members));
    j->ptrs = calloc(n + 1, sizeof(*j->ptrs));
    if (j->members == NULL || j->ptrs == NULL)
        return TT_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        const tt_rdzv_member_t *m = &j->rec.members[i];
        tether__member__init(&j->members[i]);
        j->members[i].rank = m->rank;
        j->members[i].worker_id = (char *)m->worker_id;
        j->members[i].host = (char *)m->host;
        j->members[i].endpoint = (char *)m->endpoint;
        j->members[i].incarnation = m->incarnation;
        j->members[i].last_step = m->last_step;
        j->ptrs[i] = &j->members[i];
    }
    tether__coord_job_record__init(&j->pb);
    coord_settings_to_pb(&j->rec.settings, &j->settings);
    j->pb.job_id = j->rec.job_id;
    j->pb.settings = &j->settings;
    j->pb.generation = j->rec.generation;
    j->pb.n_members = n;
    j->pb.members = j->ptrs;
    j->pb.last_committed_step = j->rec.last_committed_step;
    j->pb.state = j->rec.state;
    j->pb.failure = j->rec.failure_reason;
    j->pb.job_nonce = job->nonce;
    j->pb.formed_generation = job->formed_gen;
    j->pb.resume_step = job->resume_step;
    j->pb.ps_until_step = job->ps_until_step;
    j->pb.job_steps = job->formed_job_steps;
    j->pb.shrink_of = job->shrink_of;
    j->pb.n_shrink_exclude = job->n_shrink_exclude;         /* 0 without a relation */
    j->pb.shrink_exclude = (uint32_t *)job->shrink_exclude; /* read only */
    j->pb.comm_id_generation = job->comm_id_gen;
    j->pb.comm_id.data = job->comm_id_gen != 0 ? (uint8_t *)job->comm_id : NULL; /* read only */
    j->pb.comm_id.len = job->comm_id_gen != 0 ? job->comm_id_len : 0;
    int rc = history_to_pb(job, k, j);
    return rc == TT_OK ? book_to_pb(&job->ckpt, j) : rc;
}

int coord_state_encode(tt_coord_t *c, uint8_t **buf, size_t *len) {
    size_t n = c->njobs;
    job_pb_t *jobs = calloc(n + 1, sizeof(*jobs));
    Tether__CoordJobRecord **ptrs = calloc(n + 1, sizeof(*ptrs));
    int rc = (jobs && ptrs) ? TT_OK : TT_ENOMEM;
    clocks_t k = {tt_clock_mono_ms(), tt_clock_wall_ms()};
    for (size_t i = 0; rc == TT_OK && i < n; i++) {
        rc = job_to_pb(&c->jobs[i], &k, &jobs[i]);
        ptrs[i] = &jobs[i].pb;
    }
    size_t nf = c->nforgotten;
    Tether__ForgottenJob *fj = calloc(nf + 1, sizeof(*fj));
    Tether__ForgottenJob **fp = calloc(nf + 1, sizeof(*fp));
    rc = rc == TT_OK && (fj == NULL || fp == NULL) ? TT_ENOMEM : rc;
    for (size_t i = 0; rc == TT_OK && i < nf; i++) {
        tether__forgotten_job__init(&fj[i]);
        fj[i].job_id = c->forgotten[i].job_id;
        fj[i].generation = c->forgotten[i].generation;
        fp[i] = &fj[i];
    }
    if (rc == TT_OK) {
        Tether__CoordState st = TETHER__COORD_STATE__INIT;
        st.version = TT_WIRE_VERSION;
        st.boots = c->boots;
        st.n_jobs = n;
        st.jobs = ptrs;
        st.n_forgotten = nf;
        st.forgotten = fp;
        rc = tt_wire_state_encode(&st, buf, len);
    }
    free(fj);
    free(fp);
    for (size_t i = 0; jobs != NULL && i < n; i++)
        job_pb_free(&jobs[i]);
    free(jobs);
    free(ptrs);
    return rc;
}

static int record_from_pb(const Tether__CoordJobRecord *p, tt_rdzv_record_t *rec) {
    memset(rec, 0, sizeof(*rec));
    snprintf(rec->job_id, sizeof(rec->job_id), "%s", p->job_id);
    settings_from_pb(p->settings, &rec->settings);
    rec->state = (tt_rdzv_state_t)p->state;
    rec->generation = p->generation;
    rec->last_committed_step = p->last_committed_step;
    snprintf(rec->failure_reason, sizeof(rec->failure_reason), "%s", p->failure ? p->failure : "");
    rec->n_members = (uint32_t)p->n_members;
    rec->members = calloc(p->n_members + 1, sizeof(*rec->members));
    if (rec->members == NULL)
        return TT_ENOMEM;
    for (size_t i = 0; i < p->n_members; i++) {
        const Tether__Member *m = p->members[i];
        tt_rdzv_member_t *d = &rec->members[i];
        d->rank = m->rank;
        snprintf(d->worker_id, sizeof(d->worker_id), "%s", m->worker_id ? m->worker_id : "");
        snprintf(d->host, sizeof(d->host), "%s", m->host ? m->host : "");
        snprintf(d->endpoint, sizeof(d->endpoint), "%s", m->endpoint ? m->endpoint : "");
        d->incarnation = m->incarnation;
        d->last_step = m->last_step;
    }
    return TT_OK;
}

static int book_from_pb(const Tether__CoordJobRecord *p, tt_ckpt_book_t *b, uint64_t now, char *err,
                        size_t errlen) {
    tt_ckpt_rec_t *recs = calloc(p->n_checkpoints + 1, sizeof(*recs));
    int rc = recs != NULL ? TT_OK : TT_ENOMEM;
    for (size_t i = 0; rc == TT_OK && i < p->n_checkpoints; i++)
        rc = coord_ckpt_rec_from_pb(p->checkpoints[i], &recs[i]);
    tt_ckpt_book_saved_t saved = {.requested = p->checkpoint_requested,
                                  .served = p->checkpoint_served,
                                  .n = p->n_checkpoints,
                                  .recs = recs};
    if (rc == TT_OK)
        rc = tt_ckpt_book_import(b, &saved, now);
    free(recs);
    if (rc == TT_ECORRUPT && err != NULL && errlen > 0)
        snprintf(err, errlen,
                 "job %s: checkpoint records are inconsistent (served %llu > "
                 "requested %llu, or an id twice)",
                 p->job_id, (unsigned long long)p->checkpoint_served,
                 (unsigned long long)p->checkpoint_requested);
    return rc;
}

static int history_from_pb(const Tether__CoordJobRecord *p, const clocks_t *k, tt_rdzv_t *r) {
    tt_rdzv_history_t h = {0};
    h.regroup_age_ms = calloc(p->n_regroup_unix_ms + 1, sizeof(uint64_t));
    h.flaps = calloc(p->n_flaps + 1, sizeof(*h.flaps));
    if (h.regroup_age_ms == NULL || h.flaps == NULL) {
        tt_rdzv_history_free(&h);
        return TT_ENOMEM;
    }
    for (size_t i = 0; i < p->n_regroup_unix_ms; i++)
        h.regroup_age_ms[h.n_regroups++] = wall_minus(k, p->regroup_unix_ms[i]);
    for (size_t i = 0; i < p->n_flaps; i++) {
        const Tether__FlapRecord *f = p->flaps[i];
        tt_rdzv_flap_saved_t *d = &h.flaps[h.n_flaps++];
        snprintf(d->worker_id, sizeof(d->worker_id), "%s", f->worker_id);
        for (size_t e = 0; e < f->n_evicted_unix_ms && e < TT_RDZV_FLAP_KEEP; e++)
            d->age_ms[d->n++] = wall_minus(k, f->evicted_unix_ms[e]);
    }
    tt_rdzv_history_import(r, &h, k->mono);
    tt_rdzv_history_free(&h);
    return TT_OK;
}

/* What the last formed generation said (resume step, PS fallback, shrink
 * relation), so that a member that missed its JoinReply gets the same one
 * from the restarted coordinator; an older state file has none (formed 0)
 * and the resume step stays unknown. */
static void restore_formed(coord_job_t *job, const Tether__CoordJobRecord *p) {
    if (p->formed_generation == 0 || p->formed_generation != p->generation)
        return;
    job->formed_gen = p->formed_generation;
    job->resume_step = p->resume_step;
    job->ps_until_step = p->ps_until_step;
    job->formed_job_steps = p->job_steps > 0 ? p->job_steps : 0;
    /* The decoder refused a malformed relation (tt_wire_shrink_ok: at most
     * TT_WIRE_MAX_SHRINK ranks, the size of the copy). */
    job->shrink_of = p->shrink_of;
    job->n_shrink_exclude = (uint32_t)p->n_shrink_exclude;
    if (p->n_shrink_exclude > 0)
        memcpy(job->shrink_exclude, p->shrink_exclude, p->n_shrink_exclude * sizeof(uint32_t));
    /* The id only means something to the generation it was offered for
     * (the decoder bounded its size). */
    if (p->comm_id_generation == p->generation && p->comm_id.len > 0) {
        job->comm_id_gen = p->comm_id_generation;
        job->comm_id_len = p->comm_id.len;
        memcpy(job->comm_id, p->comm_id.data, p->comm_id.len);
    }
}

static int restore_jobs(tt_coord_t *c, const tt_coord_state_pb_t *st, uint64_t now, char *err,
                        size_t errlen) {
    clocks_t k = {now, tt_clock_wall_ms()};
    for (size_t i = 0; i < st->n_jobs; i++) {
        tt_rdzv_record_t rec;
        tt_rdzv_t *r = NULL;
        int rc = record_from_pb(st->jobs[i], &rec);
        if (rc == TT_OK)
            rc = tt_rdzv_restore(&r, &rec, now, err, errlen);
        if (rc == TT_OK)
            rc = coord_add_job(c, &r);
        if (rc == TT_OK) /* 0 from an older state file: its members had none either */
            c->jobs[c->njobs - 1].nonce = st->jobs[i]->job_nonce;
        if (rc == TT_OK)
            restore_formed(&c->jobs[c->njobs - 1], st->jobs[i]);
        if (rc == TT_OK)
            rc = book_from_pb(st->jobs[i], &c->jobs[c->njobs - 1].ckpt, now, err, errlen);
        if (rc == TT_OK) /* after coord_add_job: setting the guard forgets regroups */
            rc = history_from_pb(st->jobs[i], &k, c->jobs[c->njobs - 1].rdzv);
        tt_rdzv_record_free(&rec);
        tt_rdzv_destroy(&r);
        if (rc != TT_OK)
            return rc;
        TT_INFO("coord", "restored job %s at generation %llu", st->jobs[i]->job_id,
                (unsigned long long)st->jobs[i]->generation);
    }
    return TT_OK;
}

int coord_state_load(tt_coord_t *c, char *err, size_t errlen) {
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = tt_fs_read_all(c->state_path, (size_t)64 << 20, &buf, &len, err, errlen);
    if (rc == TT_ENOTFOUND) {
        TT_INFO("coord", "no state file at %s: starting empty", c->state_path);
        return TT_OK;
    }
    tt_coord_state_pb_t *st = NULL;
    if (rc == TT_OK)
        rc = tt_wire_state_decode(buf, len, &st, err, errlen);
    free(buf);
    if (rc == TT_OK) {
        c->boots = st->boots;
        rc = restore_jobs(c, st, tt_clock_mono_ms(), err, errlen);
    }
    for (size_t i = 0; rc == TT_OK && st != NULL && i < st->n_forgotten; i++)
        rc = coord_note_forgotten(c, st->forgotten[i]->job_id, st->forgotten[i]->generation);
    tt_wire_state_free(&st);
    if (rc != TT_OK && err != NULL) {
        char tmp[512];
        snprintf(tmp, sizeof(tmp), "%s: %s", c->state_path, err);
        snprintf(err, errlen, "%s", tmp);
    }
    return rc;
}

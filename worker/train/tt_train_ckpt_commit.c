/* tt_train_ckpt_commit: rank 0's side of a trainer checkpoint once every
 * part is written: the manifest built from the parts' reports (the control
 * reduce's slots, or the shard servers' parts with the update on the
 * shards) and the commit on the checkpoint thread, off the step loop,
 * through the coordinator or on disk alone (manifest rename, `latest`,
 * retention). It also owns the commit's manifest between the hand-over
 * and the thread's end. */
#include "tt_train_ckpt_int.h"

#include "tt_clock.h"
#include "tt_log.h"
#include "tt_status.h"

#include <tether/tether.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tt_tc_join(tt_train_ckpt_t *c) {
    if (!c->thr_live)
        return;
    tt_tc_thread_wait(c);
    if (c->in_commit) {
        tt_manifest_free(&c->commit);
        c->in_commit = 0;
    }
}

static int add_shard_part(tt_manifest_t *m, const char *file, uint64_t off, uint64_t len,
                          uint32_t planes, double size, double crc) {
    tt_mf_part_t *p = &m->parts[m->nparts++];
    snprintf(p->file, sizeof(p->file), "%s", file);
    p->kind = TT_CKPT_KIND_SHARD;
    p->size = (uint64_t)size;
    p->crc32c = (uint32_t)crc;
    p->planes = planes;
    p->nranges = 1;
    p->ranges = malloc(sizeof(*p->ranges));
    if (p->ranges == NULL)
        return TT_ENOMEM;
    p->ranges[0] = (tt_ckpt_range_t){off, len};
    return TT_OK;
}

/* The parts the shard servers wrote (update on the shards), as rank 0 got
 * them from tether_checkpoint_shards_result. */
static int add_ps_parts(const tt_train_ckpt_t *c, tt_manifest_t *m) {
    for (size_t k = 0; k < c->nps_parts; k++) {
        const tether_shard_part_t *s = &c->ps_parts[k];
        tt_mf_part_t *p = &m->parts[m->nparts++];
        snprintf(p->file, sizeof(p->file), "%s", s->file);
        p->kind = TT_CKPT_KIND_SHARD;
        p->size = s->size;
        p->crc32c = s->crc32c;
        p->planes = s->planes;
        p->nranges = (uint32_t)s->nranges;
        p->ranges = calloc(s->nranges + 1, sizeof(*p->ranges));
        if (p->ranges == NULL)
            return TT_ENOMEM;
        for (size_t r = 0; r < s->nranges; r++)
            p->ranges[r] = (tt_ckpt_range_t){s->ranges[2 * r], s->ranges[2 * r + 1]};
    }
    return TT_OK;
}

/* The parts' reports arrive through the control reduce: slot 3+2r holds
 * rank r's shard part (size, CRC), slot 3+2W the trainer part. */
static int build_manifest(tt_train_ckpt_t *c, const double *v, int world, tt_manifest_t *m) {
    const tt_tc_job_t *j = &c->job;
    memset(m, 0, sizeof(*m));
    m->version = TT_MANIFEST_VERSION;
    snprintf(m->id, sizeof(m->id), "%s", j->id);
    snprintf(m->job_id, sizeof(m->job_id), "%s", c->job_id);
    m->step = j->step;
    m->epoch = j->epoch;
    m->created_unix_ms = j->start_unix_ms;
    m->duration_ms = tt_clock_wall_ms() - j->start_unix_ms;
    m->parts = calloc((size_t)world + c->nps_parts + 1, sizeof(*m->parts));
    if (m->parts == NULL)
        return TT_ENOMEM;
    int rc = c->on_shards ? add_ps_parts(c, m) : TT_OK;
    for (int r = 0; r < world && rc == TT_OK && !c->on_shards; r++) {
        uint64_t lo = (uint64_t)c->n * (uint64_t)r / (uint64_t)world;
        uint64_t hi = (uint64_t)c->n * (uint64_t)(r + 1) / (uint64_t)world;
        char file[TT_CKPT_NAME_MAX];
        snprintf(file, sizeof(file), "shard-%d.bin", r);
        if (hi > lo)
            rc = add_shard_part(m, file, lo * sizeof(float), (hi - lo) * sizeof(float), c->nstates,
                                v[3 + 2 * r], v[4 + 2 * r]);
    }
    tt_mf_part_t *tp = &m->parts[m->nparts++];
    snprintf(tp->file, sizeof(tp->file), "trainer.bin");
    tp->kind = TT_CKPT_KIND_TRAINER;
    tp->size = (uint64_t)v[3 + 2 * world];
    tp->crc32c = (uint32_t)v[4 + 2 * world];
    if (rc == TT_OK)
        rc = tt_tc_tensors(c, m);
    char err[512] = "";
    if (rc == TT_OK &&
        (rc = tt_manifest_fill_extents(m, c->states, c->nstates, err, sizeof(err))) < 0)
        TT_ERROR("ckpt", "checkpoint %s: cannot build the manifest: %s", j->id, err);
    return rc;
}

/* Rank 0's commit, off the step loop: the manifest rename is the commit
 * point; `latest` and retention follow (docs/checkpoint-format.md). */
static void *commit_main(void *arg) {
    tt_train_ckpt_t *c = arg;
    char err[512] = "";
    size_t removed = 0;
    int rc;
    if (c->tether != NULL) {
        rc = tt_tc_coord_commit(c, err, sizeof(err));
    } else {
        rc = tt_manifest_store(c->job.dir, &c->commit, err, sizeof(err));
        if (rc == TT_OK)
            rc = tt_ckpt_latest_write(c->root, c->commit.id, err, sizeof(err));
        if (rc == TT_OK)
            rc = tt_ckpt_retain(c->root, c->keep, &removed, err, sizeof(err));
    }
    if (rc < 0)
        TT_ERROR("ckpt", "commit of checkpoint %s failed: %s", c->commit.id, err);
    else
        TT_INFO("ckpt", "committed checkpoint %s (step %llu, %llu ms, %zu old removed)",
                c->commit.id, (unsigned long long)c->commit.step,
                (unsigned long long)(tt_clock_wall_ms() - c->commit.created_unix_ms), removed);
    return NULL;
}

int tt_tc_commit(tt_train_ckpt_t *c, const double *v) {
    tt_tc_join(c);
    int rc = build_manifest(c, v, c->world_at_start, &c->commit);
    if (rc < 0) {
        tt_manifest_free(&c->commit);
        TT_ERROR("ckpt", "checkpoint %s not committed: %s", c->job.id, tt_strerror(rc));
        return TT_OK; /* the previous checkpoint stays valid; training goes on */
    }
    c->commit_request = c->req_serving; /* the commit thread's own copies */
    c->commit_gen = c->sched.inflight_gen;
    c->in_commit = 1;
    if (tt_tc_thread_run(c, commit_main, c, 1) != TT_OK) {
        c->in_commit = 0;
        tt_manifest_free(&c->commit);
        return tt_tc_fail(c, TT_ESYS, "cannot start the commit thread");
    }
    return TT_OK;
}

/* tt_train_ckpt_load: resume from a committed checkpoint, plus the two
 * things save and load must agree on: the logical tensor list (the MLP's
 * layers, named and shaped) and the trainer-state part's payload. Loading
 * is arithmetic on the manifest's logical layout (tt_manifest_layout +
 * tt_reshard_plan), so a checkpoint saved by W ranks loads into any world
 * size; every rank reads the whole logical state. */
#include "tt_train_ckpt_int.h"

#include "tt_log.h"
#include "tt_status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STATE_MAGIC 0x3154534e52545454ull /* "TTTRNST1" little-endian */

int tt_tc_tensors(const tt_train_ckpt_t *c, tt_manifest_t *m) {
    tt_mlp_t *mlp = tt_trainer_model(c->t);
    int nt = tt_mlp_tensor_count(mlp);
    m->tensors = calloc((size_t)nt, sizeof(*m->tensors));
    if (m->tensors == NULL)
        return TT_ENOMEM;
    m->ntensors = (uint32_t)nt;
    for (int i = 0; i < nt; i++) {
        tt_mf_tensor_t *t = &m->tensors[i];
        size_t off = 0, len = 0;
        tt_mlp_tensor(mlp, i, &off, &len);
        int l = i / 2;
        snprintf(t->name, sizeof(t->name), "layer%d.%s", l, i % 2 ? "bias" : "weight");
        t->dtype = TT_DTYPE_F32;
        t->flat_offset = (uint64_t)off * sizeof(float);
        t->ndim = i % 2 ? 1 : 2;
        t->shape[0] = (uint64_t)c->dims[l + 1];
        t->shape[1] = (uint64_t)c->dims[l];
        if (t->shape[0] * (t->ndim == 2 ? t->shape[1] : 1) != len)
            return TT_EINTERNAL;
    }
    return TT_OK;
}

static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t dbits(double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof(u));
    return u;
}

static double bitsd(uint64_t u) {
    double d;
    memcpy(&d, &u, sizeof(d));
    return d;
}

void tt_train_ckpt_state_encode(const tt_trainer_state_t *s, const uint64_t cfg[5],
                                uint8_t out[TT_TRAIN_CKPT_STATE_BYTES]) {
    uint64_t f[14] = {STATE_MAGIC,
                      s->epoch,
                      s->step_in_epoch,
                      s->global_step,
                      (uint64_t)s->in_epoch,
                      dbits(s->loss_sum),
                      dbits(s->count),
                      dbits(s->examples),
                      cfg[0],
                      cfg[1],
                      cfg[2],
                      cfg[3],
                      cfg[4],
                      0};
    for (int i = 0; i < 14; i++)
        put64(out + 8 * i, f[i]);
}

int tt_train_ckpt_state_decode(const uint8_t *in, size_t len, tt_trainer_state_t *s,
                               uint64_t cfg[5]) {
    if (len != TT_TRAIN_CKPT_STATE_BYTES || get64(in) != STATE_MAGIC || get64(in + 104) != 0)
        return TT_ECORRUPT;
    memset(s, 0, sizeof(*s));
    s->epoch = get64(in + 8);
    s->step_in_epoch = get64(in + 16);
    s->global_step = get64(in + 24);
    s->in_epoch = get64(in + 32) != 0;
    s->loss_sum = bitsd(get64(in + 40));
    s->count = bitsd(get64(in + 48));
    s->examples = bitsd(get64(in + 56));
    for (int i = 0; i < 5; i++)
        cfg[i] = get64(in + 64 + 8 * i);
    return TT_OK;
}

/* The checkpoint directory `mode` selects; 1 when there is nothing to
 * load. `verify` says whether it still has to be verified. */
/* --resume job. Not asked for explicitly, so a record none of whose
 * checkpoints verifies does not stop the worker: it starts without one,
 * and a running job's members hand it their state at the agreement. */
static int pick_job(tt_train_ckpt_t *c, char *dir, int *verify, char *err, size_t errlen) {
    if (c->tether == NULL || c->root[0] == '\0')
        return 1;
    int rc = tt_tc_coord_pick(c, "job", dir, verify, err, errlen);
    if (rc == TT_ECORRUPT) {
        TT_WARN("ckpt", "%s: starting without a checkpoint (--resume job)", err);
        err[0] = '\0';
        return 1;
    }
    return rc;
}

static int pick_dir(tt_train_ckpt_t *c, const char *mode, char *dir, int *verify, char *err,
                    size_t errlen) {
    char id[TT_MF_ID_MAX];
    *verify = 1;
    if (strcmp(mode, "job") == 0) /* the job's record or nothing: not `latest` */
        return pick_job(c, dir, verify, err, errlen);
    if (strcmp(mode, "auto") != 0 && strcmp(mode, "latest-valid") != 0) {
        snprintf(dir, TT_CKPT_PATH_MAX, "%s", mode);
        return TT_OK;
    }
    if (c->root[0] == '\0') {
        snprintf(err, errlen, "--resume %s needs --checkpoint-dir", mode);
        return TT_EINVAL;
    }
    int rc = c->tether != NULL ? tt_tc_coord_pick(c, mode, dir, verify, err, errlen) : 1;
    if (rc != 1)
        return rc;
    if (strcmp(mode, "auto") == 0) {
        rc = tt_ckpt_latest_read(c->root, id, err, errlen);
    } else {
        *verify = 0; /* tt_ckpt_latest_valid verified it */
        rc = tt_ckpt_latest_valid(c->root, id, err, errlen);
        tt_ckpt_entry_t *v = NULL;
        size_t n = 0;
        if (rc == TT_ENOTFOUND && tt_ckpt_list(c->root, &v, &n, NULL, 0) == TT_OK && n == 0)
            rc = TT_ENOTFOUND;
        else if (rc == TT_ENOTFOUND)
            rc = TT_ECORRUPT; /* checkpoints exist but none verifies: refuse */
        free(v);
    }
    if (rc == TT_ENOTFOUND) {
        TT_INFO("ckpt", "no checkpoint under %s: starting from scratch", c->root);
        return 1;
    }
    if (rc < 0)
        return rc;
    snprintf(dir, TT_CKPT_PATH_MAX, "%s/%s", c->root, id);
    return TT_OK;
}

static int check_model(const tt_train_ckpt_t *c, const tt_manifest_t *m, char *err, size_t errlen) {
    tt_mlp_t *mlp = tt_trainer_model(c->t);
    if (m->ntensors != (uint32_t)tt_mlp_tensor_count(mlp) ||
        tt_manifest_flat_bytes(m) != c->n * sizeof(float)) {
        snprintf(err, errlen,
                 "checkpoint %s holds %u tensors of %llu bytes, the model has %d of %zu: "
                 "different --layers?",
                 m->id, m->ntensors, (unsigned long long)tt_manifest_flat_bytes(m),
                 tt_mlp_tensor_count(mlp), c->n * sizeof(float));
        return TT_EINVAL;
    }
    const tt_mf_tensor_t *t0 = &m->tensors[0];
    int same = t0->nstates == c->nstates;
    for (uint32_t k = 0; same && k < c->nstates; k++)
        same = t0->states[k].state == c->states[k];
    if (!same) {
        snprintf(err, errlen,
                 "checkpoint %s holds %u state planes (first %s), this optimizer "
                 "needs %u: different --optimizer?",
                 m->id, t0->nstates, tt_state_name(t0->nstates ? t0->states[0].state : 99),
                 c->nstates);
        return TT_EINVAL;
    }
    return TT_OK;
}

static int read_trainer(tt_train_ckpt_t *c, const tt_manifest_t *m, const char *dir,
                        tt_trainer_state_t *s, char *err, size_t errlen) {
    int idx = -1;
    for (uint32_t i = 0; i < m->nparts; i++)
        if (m->parts[i].kind == TT_CKPT_KIND_TRAINER)
            idx = (int)i;
    char path[TT_CKPT_PATH_MAX + TT_CKPT_NAME_MAX];
    uint8_t buf[TT_TRAIN_CKPT_STATE_BYTES];
    uint64_t cfg[5] = {0};
    tt_ckpt_reader_t *r = NULL;
    int rc = TT_ECORRUPT;
    if (idx >= 0) {
        snprintf(path, sizeof(path), "%s/%s", dir, m->parts[idx].file);
        rc = tt_ckpt_reader_create(&r, path, err, errlen);
    }
    if (rc == TT_OK && (rc = tt_ckpt_reader_read(r, 0, buf, sizeof(buf))) == TT_OK)
        rc = tt_train_ckpt_state_decode(buf, tt_ckpt_reader_info(r)->payload_len, s, cfg);
    tt_ckpt_reader_destroy(&r);
    if (rc == TT_OK && (cfg[0] != c->cfg[0] || cfg[1] != c->cfg[1] || cfg[2] != c->cfg[2] ||
                        cfg[3] != c->cfg[3] || cfg[4] != c->cfg[4])) {
        snprintf(err, errlen,
                 "checkpoint %s was saved with batch %llu seed %llu (%llu steps/epoch), this run "
                 "has batch %llu seed %llu (%llu): the update sequence would differ",
                 m->id, (unsigned long long)cfg[0], (unsigned long long)cfg[1],
                 (unsigned long long)cfg[4], (unsigned long long)c->cfg[0],
                 (unsigned long long)c->cfg[1], (unsigned long long)c->cfg[4]);
        return TT_EINVAL;
    }
    if (rc < 0 && err[0] == '\0')
        snprintf(err, errlen, "checkpoint %s: no readable trainer state part", m->id);
    return rc;
}

static int verify_dir(const char *dir, char *err, size_t errlen) {
    tt_ckpt_report_t rep;
    int rc = tt_ckpt_verify(dir, &rep);
    if (rc < 0)
        snprintf(err, errlen, "refusing checkpoint %s: %s", dir, rep.msg);
    tt_ckpt_report_free(&rep);
    return rc;
}

/* Loads every plane and the trainer state; only rank 0 keeps the saved
 * per-rank loss accumulators (they are display-only and summed over
 * ranks at the end of the epoch). */
static int load_dir(tt_train_ckpt_t *c, const char *dir, tt_manifest_t *m, char *err,
                    size_t errlen) {
    int rc = tt_manifest_load(dir, m, err, errlen);
    if (rc == TT_OK)
        rc = check_model(c, m, err, errlen);
    /* Handed out again before they are written: a device copy of the
     * model is then known to be stale, whenever the load happens. */
    size_t n;
    (void)tt_trainer_model(c->t);
    (void)tt_trainer_opt_state(c->t, 0, &n);
    for (uint32_t k = 0; rc == TT_OK && k < c->nstates; k++)
        rc = tt_ckpt_read_plane(m, dir, c->states[k], c->planes[k], c->n * sizeof(float), err,
                                errlen);
    tt_trainer_state_t s;
    if (rc == TT_OK)
        rc = read_trainer(c, m, dir, &s, err, errlen);
    int rank = 0, world = 1;
    uint64_t gen;
    if (rc == TT_OK && (rc = c->coll.membership(c->coll.ctx, &rank, &world, &gen)) == TT_OK) {
        if (rank != 0)
            s.loss_sum = s.count = 0.0;
        if ((rc = tt_trainer_set_state(c->t, &s)) < 0)
            snprintf(err, errlen,
                     "checkpoint %s: trainer state (epoch %llu, step %llu) does not "
                     "fit this run",
                     m->id, (unsigned long long)s.epoch, (unsigned long long)s.global_step);
    }
    return rc;
}

int tt_train_ckpt_resume(tt_train_ckpt_t *c, const char *mode, char *id, char *err, size_t errlen) {
    char dir[TT_CKPT_PATH_MAX];
    int verify = 1;
    err[0] = '\0';
    if (id != NULL)
        id[0] = '\0';
    if (mode == NULL || mode[0] == '\0' || strcmp(mode, "none") == 0)
        return 1;
    int rc = pick_dir(c, mode, dir, &verify, err, errlen);
    if (rc != TT_OK)
        return rc;
    if (verify && (rc = verify_dir(dir, err, errlen)) < 0)
        return rc;
    tt_manifest_t m = {0};
    rc = load_dir(c, dir, &m, err, errlen);
    if (rc == TT_OK && strcmp(mode, "job") == 0) /* not asked for: say it */
        TT_WARN("ckpt",
                "resumed from checkpoint %s (step %llu, epoch %llu), the newest the coordinator "
                "recorded for this job (--resume job, the default; --resume none starts over)",
                m.id, (unsigned long long)m.step, (unsigned long long)m.epoch);
    else if (rc == TT_OK)
        TT_INFO("ckpt", "resumed from checkpoint %s (step %llu, epoch %llu)", m.id,
                (unsigned long long)m.step, (unsigned long long)m.epoch);
    if (rc == TT_OK) {
        snprintf(c->resumed, sizeof(c->resumed), "%s", m.id);
        if (id != NULL)
            snprintf(id, TT_MF_ID_MAX, "%s", m.id);
        tt_ckpt_sched_opts_t so = c->sched.o; /* init clears the schedule */
        tt_ckpt_sched_init(&c->sched, &so, tt_trainer_global_step(c->t), c->sched.last_ms);
    }
    tt_manifest_free(&m);
    return rc;
}

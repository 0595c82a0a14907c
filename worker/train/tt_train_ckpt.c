/* tt_train_ckpt: the step-boundary hook, snapshot, background part writer
 * and rank-0 commit of trainer-side checkpoints (see the header and
 * docs/checkpoints.md). Resume lives in tt_train_ckpt_load.c, rank 0's
 * manifest and commit in tt_train_ckpt_commit.c, the coordinator's part
 * (requests, commit, record) in tt_train_ckpt_coord.c.
 *
 * Why a control all-reduce even though the coordinator makes the requests:
 * the ranks hear of a request at different times, but they run in lockstep
 * through the step's collectives, so a tiny reduce at the same boundary
 * gives every rank the same inputs (rank 0's wish: the coordinator's open
 * request, or its own timer without a coordinator; how many writers are
 * done) and every copy of tt_ckpt_sched takes the same decision at the
 * same step. It runs while a checkpoint is in flight, at every boundary
 * with a local timer, and every TT_TC_POLL_STEPS steps with a coordinator;
 * a step schedule alone needs none. With the update on the shards there is
 * nothing to agree on: the shard servers write the state and rank 0 the
 * trainer part and the commit, so rank 0 runs the schedule alone, every
 * input is its own, and no rank runs a control reduce (each was a sync
 * point that made rank 0 wait out the ranks' skew). */
#include "tt_train_ckpt_int.h"
#include "tt_train_ft.h"

#include "tt_clock.h"
#include "tt_fsutil.h"
#include "tt_log.h"
#include "tt_status.h"

#include <tether/tether.h>

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TC_CHUNK (16u << 20)

static int ensure_buffers(tt_train_ckpt_t *c, size_t snap_floats, size_t ctl_len);

int tt_tc_fail(tt_train_ckpt_t *c, int rc, const char *fmt, ...) {
    if (c->err[0] == '\0') {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, sizeof(c->err), fmt, ap);
        va_end(ap);
        TT_ERROR("ckpt", "%s", c->err);
    }
    return rc;
}

/* Which optimizer buffers exist decides the planes; their order follows
 * the state kinds, as the part format requires. With the update on the
 * shards they are the shards' (SGD without momentum keeps none). */
static void pick_states(tt_train_ckpt_t *c, tt_opt_kind_t opt, int shard_planes) {
    size_t n;
    c->planes[0] = tt_mlp_params(tt_trainer_model(c->t));
    c->states[0] = TT_STATE_PARAMS;
    c->nstates = 1;
    float *s1 = tt_trainer_opt_state(c->t, 0, &n);
    float *s2 = tt_trainer_opt_state(c->t, 1, &n);
    if (shard_planes == 1)
        return;
    if (s1 != NULL) {
        c->planes[c->nstates] = s1;
        c->states[c->nstates++] = opt == TT_OPT_ADAMW ? TT_STATE_ADAM_M : TT_STATE_MOMENTUM;
    }
    if (s2 != NULL && opt == TT_OPT_ADAMW) {
        c->planes[c->nstates] = s2;
        c->states[c->nstates++] = TT_STATE_ADAM_V;
    }
}

static void rm_tree_flat(const char *dir) {
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    struct dirent *e;
    char path[TT_CKPT_PATH_MAX + 256];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    if (rmdir(dir) == 0)
        TT_INFO("ckpt", "removed uncommitted checkpoint attempt %s", dir);
}

/* Directories without a MANIFEST are attempts that never committed (a
 * writer died, the job stopped); their ids would collide with the steps
 * this run reaches again. */
static void clean_leftovers(const char *root) {
    DIR *d = opendir(root);
    if (d == NULL)
        return;
    struct dirent *e;
    char path[TT_CKPT_PATH_MAX + 256];
    struct stat sb;
    while ((e = readdir(d)) != NULL) {
        if (!tt_ckpt_name_ok(e->d_name) || strcmp(e->d_name, TT_CKPT_LATEST_FILE) == 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s/%s", root, e->d_name, TT_MANIFEST_FILE);
        if (stat(path, &sb) == 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", root, e->d_name);
        if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
            rm_tree_flat(path);
    }
    closedir(d);
}

static int copy_opts(tt_train_ckpt_t *c, const tt_train_ckpt_opts_t *o, char *err, size_t errlen) {
    const char *root = o->root != NULL ? o->root : "";
    const char *job = o->job_id != NULL ? o->job_id : "local";
    if (o->topts == NULL || strlen(root) >= sizeof(c->root) || strlen(job) >= sizeof(c->job_id) ||
        o->every_s < 0) {
        snprintf(err, errlen,
                 "checkpoint options: missing trainer options, root or job id too "
                 "long, or negative period");
        return TT_EINVAL;
    }
    c->tether = o->tether;
    c->on_shards = o->shard_planes > 0;
    if (c->on_shards && c->tether == NULL) {
        snprintf(err, errlen, "checkpoints with the update on the shards need a coordinator");
        return TT_EINVAL;
    }
    if (c->tether != NULL && root[0] != '\0' && root[0] != '/') {
        /* The coordinator writes the manifest: it needs a path that does
         * not depend on this process's working directory. */
        char cwd[TT_CKPT_PATH_MAX];
        if (getcwd(cwd, sizeof(cwd)) == NULL ||
            snprintf(c->root, sizeof(c->root), "%s/%s", cwd, root) >= (int)sizeof(c->root)) {
            snprintf(err, errlen, "checkpoint root %s: cannot make it absolute", root);
            return TT_EINVAL;
        }
    } else {
        memcpy(c->root, root, strlen(root) + 1);
    }
    memcpy(c->job_id, job, strlen(job) + 1);
    for (char *p = c->job_id; *p != '\0'; p++) /* manifest ids are [A-Za-z0-9._-] */
        if (!tt_ckpt_name_ok((char[2]){*p, '\0'}))
            *p = '_';
    c->keep = o->keep != 0 ? o->keep : 3;
    c->nlayers = o->topts->nlayers;
    memcpy(c->dims, o->topts->dims, sizeof(c->dims));
    c->cfg[0] = o->topts->batch;
    c->cfg[1] = o->topts->seed;
    c->cfg[3] = (uint64_t)o->topts->opt;
    const char *knob = getenv("TETHER_CKPT_TEST_STALL_STEP");
    c->stall_knob = knob != NULL ? strtoull(knob, NULL, 10) : 0;
    return TT_OK;
}

int tt_train_ckpt_create(tt_train_ckpt_t **out, const tt_train_ckpt_opts_t *opts, tt_trainer_t *t,
                         const tt_train_coll_t *coll, char *err, size_t errlen) {
    *out = NULL;
    tt_train_ckpt_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return TT_ENOMEM;
    c->t = t;
    c->coll = *coll;
    int rc = copy_opts(c, opts, err, errlen);
    if (rc < 0) {
        free(c);
        return rc;
    }
    pthread_mutex_init(&c->job.mu, NULL);
    pthread_cond_init(&c->job.cv, NULL);
    pthread_mutex_init(&c->run_mu, NULL);
    pthread_cond_init(&c->run_cv, NULL);
    c->sync_init = 1;
    c->n = tt_mlp_param_count(tt_trainer_model(t));
    c->cfg[2] = c->n;
    c->cfg[4] = tt_trainer_steps_per_epoch(t);
    pick_states(c, opts->topts->opt, opts->shard_planes);
    /* With a coordinator its timer asks (tt_train_ckpt_coord.c). */
    uint64_t every_ms = opts->tether != NULL ? 0 : (uint64_t)(opts->every_s * 1000.0);
    tt_ckpt_sched_opts_t so = {opts->every_steps, every_ms};
    tt_ckpt_sched_init(&c->sched, &so, tt_trainer_global_step(t), tt_clock_mono_ms());
    int rank = 0, world = 1;
    uint64_t gen = 0;
    if ((rc = c->coll.membership(c->coll.ctx, &rank, &world, &gen)) < 0) {
        snprintf(err, errlen, "checkpoints: membership: %s", tt_strerror(rc));
        tt_train_ckpt_destroy(&c);
        return rc;
    }
    if (rank == 0 && c->root[0] != '\0')
        clean_leftovers(c->root);
    /* Fault the snapshot buffer in now: first-touch page faults of tens of
     * MB would otherwise land in the step loop at the first checkpoint. */
    size_t slice = c->on_shards ? 0 : c->n / (size_t)world + 1;
    if (c->root[0] != '\0' && ensure_buffers(c, c->nstates * slice + 1, 5 + 2 * (size_t)world) == 0)
        memset(c->snap, 0, c->snap_cap * sizeof(float));
    if (c->root[0] != '\0' && tt_tc_thread_start(c) != TT_OK)
        TT_WARN("ckpt", "no checkpoint thread yet: the first checkpoint tries again");
    *out = c;
    return TT_OK;
}

void tt_train_ckpt_destroy(tt_train_ckpt_t **cp) {
    if (cp == NULL || *cp == NULL)
        return;
    tt_train_ckpt_t *c = *cp;
    tt_tc_join(c);
    tt_tc_thread_stop(c);
    tt_manifest_free(&c->commit);
    tether_shard_parts_free(c->ps_parts, c->nps_parts);
    if (c->sync_init) {
        pthread_mutex_destroy(&c->job.mu);
        pthread_cond_destroy(&c->job.cv);
        pthread_mutex_destroy(&c->run_mu);
        pthread_cond_destroy(&c->run_cv);
    }
    free(c->snap_mem);
    free(c->ctl);
    free(c);
    *cp = NULL;
}

const char *tt_train_ckpt_error(const tt_train_ckpt_t *c) {
    return c->err;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

void tt_train_ckpt_stats(const tt_train_ckpt_t *c, tt_train_ckpt_stats_t *st) {
    *st = c->st;
    uint64_t v[TT_TC_STALLS_KEPT];
    size_t n = c->nstall_kept < TT_TC_STALLS_KEPT ? (size_t)c->nstall_kept : TT_TC_STALLS_KEPT;
    memcpy(v, c->stall_kept, n * sizeof(v[0]));
    qsort(v, n, sizeof(v[0]), cmp_u64);
    st->stall_samples = n;
    st->stall_ns_median = n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    st->started = c->sched.started;
    st->committed = c->sched.committed;
    st->aborted = c->sched.aborted;
}

void tt_train_ckpt_request(tt_train_ckpt_t *c) {
    tt_ckpt_sched_request(&c->sched);
}

/* Test knob only (TETHER_CKPT_TEST_STALL_STEP=S): hang inside the part
 * writer of every checkpoint at a step >= S (a deferred checkpoint may
 * land after S), so a test can kill the process mid-write. */
static void stall_for_test(const tt_tc_job_t *j) {
    if (j->stall_at_step == 0 || j->step < j->stall_at_step)
        return;
    TT_WARN("ckpt", "test knob: rank %d stalls inside the part writer of step %llu", j->rank,
            (unsigned long long)j->step);
    tt_clock_sleep_ms(120000);
}

static int write_part(tt_tc_job_t *j, const tt_ckpt_part_opts_t *po, const uint8_t *data,
                      tt_ckpt_part_info_t *info) {
    tt_ckpt_writer_t *w = NULL;
    int rc = tt_ckpt_writer_create(&w, po, j->msg, sizeof(j->msg));
    /* One call: each call ends by waiting for its writes to finish, and the
     * next starts with a small write up to a 4 KiB boundary, so pieces put
     * idle gaps into the disk's stream. The test knob needs a first piece
     * to stall after. */
    uint64_t piece = j->stall_at_step != 0 ? TC_CHUNK : po->payload_len;
    for (uint64_t off = 0; rc == TT_OK && off < po->payload_len; off += piece) {
        uint64_t len = po->payload_len - off < piece ? po->payload_len - off : piece;
        rc = tt_ckpt_writer_write(w, data + off, (size_t)len);
        if (off == 0 && po->kind == TT_CKPT_KIND_SHARD)
            stall_for_test(j);
    }
    if (rc == TT_OK)
        rc = tt_ckpt_writer_finish(w, info);
    if (rc < 0 && w != NULL)
        snprintf(j->msg, sizeof(j->msg), "part %s in %s: %s", po->name, j->dir,
                 tt_ckpt_writer_error(w));
    tt_ckpt_writer_destroy(&w);
    return rc;
}

/* Copies this rank's slice of every plane and publishes it: in gated
 * mode the step loop waits on `copied` before the next optimizer update,
 * the one write that could tear the snapshot. */
static void snapshot(tt_tc_job_t *j, uint32_t nstates) {
    uint64_t t0 = tt_clock_mono_ns();
    size_t len = (size_t)(j->hi - j->lo);
    for (uint32_t k = 0; k < nstates; k++)
        memcpy(j->snap + k * len, j->src[k] + j->lo, len * sizeof(float));
    j->copy_ns = tt_clock_mono_ns() - t0;
    pthread_mutex_lock(&j->mu);
    atomic_store_explicit(&j->copied, 1, memory_order_release);
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* This rank's part failed, so the checkpoint will abort. The coordinator
 * hears why, so that an operator sees it without reading worker logs.
 * Before the status is published: the step loop may reuse the job after.
 * The directory stays (another rank may still be writing into it); the
 * next commit's retention removes it (tt_ckpt_retain). */
static void failed_part(tt_tc_job_t *j) {
    TT_ERROR("ckpt", "rank %d: checkpoint %s not written: %s", j->rank, j->id, j->msg);
    if (j->tether == NULL)
        return;
    char err[256] = "", reason[640];
    snprintf(reason, sizeof(reason), "rank %d: %s", j->rank, j->msg);
    int rc = tether_checkpoint_failed(j->tether, j->id, j->step, j->request, j->generation, reason,
                                      TT_TC_REPORT_TIMEOUT_MS, err, sizeof(err));
    if (rc != TT_OK)
        TT_WARN("ckpt", "checkpoint %s: the failure was not reported to the coordinator: %s", j->id,
                err[0] ? err : tt_strerror(rc));
}

static void *job_main(void *arg) {
    tt_tc_job_t *j = arg;
    if (j->copy_in_thread)
        snapshot(j, j->nstates); /* timed on its own (copy_ns) */
    uint64_t t0 = tt_clock_mono_ns();
    int rc = j->shards_failed ? TT_EIO : tt_fs_mkdirs(j->dir, j->msg, sizeof(j->msg));
    if (rc == TT_OK && j->hi > j->lo) {
        char name[TT_CKPT_NAME_MAX];
        snprintf(name, sizeof(name), "shard-%d.bin", j->rank);
        tt_ckpt_range_t r = {j->lo * sizeof(float), (j->hi - j->lo) * sizeof(float)};
        tt_ckpt_part_opts_t po = {j->dir, name,       TT_CKPT_KIND_SHARD,    &r,
                                  1,      j->nstates, j->nstates * r.length, 0};
        rc = write_part(j, &po, (const uint8_t *)j->snap, &j->shard);
    }
    if (rc == TT_OK && j->rank == 0) {
        tt_ckpt_part_opts_t po = {
            j->dir, "trainer.bin", TT_CKPT_KIND_TRAINER, NULL, 0, 0, TT_TRAIN_CKPT_STATE_BYTES, 0};
        rc = write_part(j, &po, j->tstate, &j->trainer);
    }
    j->write_ns = tt_clock_mono_ns() - t0;
    if (rc < 0)
        failed_part(j);
    atomic_store_explicit(&j->status, rc < 0 ? -1 : 1, memory_order_release);
    return NULL;
}

static int ensure_buffers(tt_train_ckpt_t *c, size_t snap_floats, size_t ctl_len) {
    if (snap_floats > c->snap_cap) {
        /* Placed so that the part writer sends it to disk without a copy
         * (tt_ckpt_payload_offset): the copy would cost as much memory
         * bandwidth as the write. Nothing in it survives a resize. */
        size_t skew = (size_t)(tt_ckpt_payload_offset(1) % 4096);
        void *mem = NULL;
        if (posix_memalign(&mem, 4096, snap_floats * sizeof(float) + skew) != 0)
            return TT_ENOMEM;
        free(c->snap_mem);
        c->snap_mem = mem;
        c->snap = (float *)mem + skew / sizeof(float); /* headers are multiples of 16 bytes */
        c->snap_cap = snap_floats;
    }
    if (ctl_len > c->ctl_cap) {
        double *p = realloc(c->ctl, ctl_len * sizeof(double));
        if (p == NULL)
            return TT_ENOMEM;
        c->ctl = p;
        c->ctl_cap = ctl_len;
    }
    return TT_OK;
}

/* Rank 0, the update on the shards, at the start: the request to each
 * shard server, not waited for; the shard copies its chunks before it
 * takes this rank's next push and writes them while training goes on
 * (shard_ckpt.c says why nothing can tear the copy); shards_poll collects
 * the parts, or a refusal, between later steps. */
static void shards_begin(tt_train_ckpt_t *c, tt_tc_job_t *j) {
    tether_shard_parts_free(c->ps_parts, c->nps_parts);
    c->ps_parts = NULL;
    c->nps_parts = 0;
    int rc = tether_checkpoint_shards_begin(c->tether, j->dir);
    j->shards_failed = rc != TETHER_OK;
    c->ps_state = rc == TETHER_OK ? 0 : -1;
    if (rc != TETHER_OK)
        snprintf(j->msg, sizeof(j->msg), "the shard servers were not asked to write: %s (%s)",
                 tether_last_error(c->tether), tether_status_name(rc));
}

/* Rank 0: whether the shards' parts are durable (1), still written (0) or
 * failed (-1); `wait`: until it is known. One question per shard. */
static int shards_poll(tt_train_ckpt_t *c, int wait) {
    while (c->ps_state == 0) {
        int rc =
            tether_checkpoint_shards_result(c->tether, c->job.dir, &c->ps_parts, &c->nps_parts);
        if (rc == TETHER_EAGAIN && wait) {
            tt_clock_sleep_ms(2);
            continue;
        }
        if (rc == TETHER_EAGAIN)
            break;
        for (size_t k = 0; rc == TETHER_OK && k < c->nps_parts; k++)
            rc = c->ps_parts[k].planes == c->nstates ? TETHER_OK : TETHER_EPROTO;
        c->ps_state = rc == TETHER_OK ? 1 : -1;
        if (rc == TETHER_EPROTO)
            TT_ERROR("ckpt",
                     "checkpoint %s: a shard server wrote a part with other planes than "
                     "the %u of this optimizer",
                     c->job.id, c->nstates);
        else if (rc != TETHER_OK)
            TT_ERROR("ckpt", "checkpoint %s: the shard servers did not write their parts: %s (%s)",
                     c->job.id, tether_last_error(c->tether), tether_status_name(rc));
    }
    return c->ps_state;
}

/* On the GPU path the optimizer state lives on the device between steps
 * and the host planes are only as new as their last hand-out: asking for
 * them again brings them up to date (a no-op on the CPU path). */
static void refresh_planes(tt_train_ckpt_t *c) {
    size_t n;
    if (c->nstates > 1)
        (void)tt_trainer_opt_state(c->t, 0, &n);
}

/* The snapshot is the only part of a checkpoint the step loop waits for:
 * a memcpy of this rank's slice of each plane (and the trainer state).
 * With the update on the shards the shards write the planes instead. */
static int start(tt_train_ckpt_t *c, uint64_t step, int rank, int world) {
    tt_tc_join(c);
    tt_tc_job_t *j = &c->job;
    j->lo = c->on_shards ? 0 : (uint64_t)c->n * (uint64_t)rank / (uint64_t)world;
    j->hi = c->on_shards ? 0 : (uint64_t)c->n * (uint64_t)(rank + 1) / (uint64_t)world;
    size_t len = (size_t)(j->hi - j->lo);
    if (ensure_buffers(c, c->nstates * len + 1, 5 + 2 * (size_t)world) < 0)
        return tt_tc_fail(c, TT_ENOMEM, "checkpoint at step %llu: no memory for the snapshot",
                          (unsigned long long)step);
    j->snap = c->snap;
    refresh_planes(c);
    for (uint32_t k = 0; k < c->nstates; k++)
        j->src[k] = c->planes[k];
    j->copy_in_thread = c->gated;
    atomic_store_explicit(&j->copied, 0, memory_order_relaxed);
    if (!c->gated)
        snapshot(j, c->nstates);
    tt_trainer_state_t ts;
    tt_trainer_get_state(c->t, &ts);
    tt_train_ckpt_state_encode(&ts, c->cfg, j->tstate);
    j->nstates = c->nstates;
    j->rank = rank;
    j->world = world;
    j->step = step;
    j->epoch = ts.epoch;
    j->stall_at_step = c->stall_knob;
    j->start_unix_ms = tt_clock_wall_ms();
    j->msg[0] = '\0';
    snprintf(j->id, sizeof(j->id), "step-%09llu", (unsigned long long)step);
    snprintf(j->dir, sizeof(j->dir), "%s/%s", c->root, j->id);
    j->shards_failed = 0;
    j->tether = c->tether;
    j->request = c->req_serving;
    j->generation = c->sched.inflight_gen;
    if (c->on_shards && rank == 0)
        shards_begin(c, j);
    atomic_store_explicit(&j->status, 0, memory_order_relaxed);
    c->world_at_start = world;
    c->in_commit = 0;
    /* A snapshot to copy must start now; the rest can wait for the gate. */
    if (tt_tc_thread_run(c, job_main, j, !(j->copy_in_thread && len > 0)) != TT_OK)
        return tt_tc_fail(c, TT_ESYS, "checkpoint at step %llu: cannot start the writer thread",
                          (unsigned long long)step);
    return TT_OK;
}

/* Fills and runs the control reduce; the agreed sums become the tick (with
 * the update on the shards rank 0's own values, unreduced). */
static int control_reduce(tt_train_ckpt_t *c, int rank, int world, int time_due,
                          tt_ckpt_tick_t *tick) {
    int solo = c->on_shards; /* rank 0's inputs are all there is */
    size_t len = 5 + 2 * (size_t)world;
    if (ensure_buffers(c, 1, len) < 0)
        return TT_ENOMEM;
    double *v = c->ctl;
    memset(v, 0, len * sizeof(double));
    v[0] = rank == 0 && time_due ? 1.0 : 0.0;
    const tt_tc_job_t *j = &c->job;
    int writing = c->sched.phase == TT_CKPT_PHASE_WRITING && !c->in_commit;
    int st = writing ? atomic_load_explicit(&j->status, memory_order_acquire) : 0;
    if (st == 1 && c->on_shards && rank == 0) /* and the shards' parts */
        st = shards_poll(c, c->joined_for_finish);
    if (st != 0 && world == c->world_at_start) {
        v[1 + (st < 0)] = 1.0;
        v[3 + 2 * rank] = (double)j->shard.size;
        v[4 + 2 * rank] = (double)j->shard.crc32c;
        if (rank == 0) {
            v[3 + 2 * world] = (double)j->trainer.size;
            v[4 + 2 * world] = (double)j->trainer.crc32c;
        }
    } else if (st != 0) {
        v[2] = 1.0; /* the world changed under the checkpoint: it cannot commit */
    }
    int rc = solo ? TT_OK : c->coll.reduce_sum(c->coll.ctx, v, len);
    if (rc < 0)
        return rc;
    tick->time_due = v[0] > 0.5;
    tick->done = (uint32_t)(v[1] + 0.5);
    tick->failed = (uint32_t)(v[2] + 0.5);
    tick->writers = solo ? 1 : (uint32_t)c->world_at_start;
    return TT_OK;
}

static int apply(tt_train_ckpt_t *c, int act, int rank, int world, int wanted, uint64_t now_ms) {
    int failed = (act & TT_CKPT_ACT_FAILED) != 0;
    if ((act & TT_CKPT_ACT_ABORT) != 0 && c->tether != NULL)
        tt_tc_coord_aborted(c, failed && rank == 0, now_ms);
    if ((act & TT_CKPT_ACT_ABORT) != 0)
        TT_WARN("ckpt", "checkpoint %s aborted (%s); %s", c->job.id,
                failed ? "a part was not written: its writer logged why" : "the membership changed",
                c->sched.committed > 0 || c->resumed[0] != '\0'
                    ? "the previous one stays valid"
                    : "this run has committed none yet");
    int rc = TT_OK;
    if ((act & TT_CKPT_ACT_COMMIT) != 0) {
        c->st.last_bytes = c->job.shard.size + c->job.trainer.size;
        for (size_t k = 0; rank == 0 && k < c->nps_parts; k++)
            c->st.last_bytes += c->ps_parts[k].size;
        c->st.last_write_ns = c->job.write_ns;
        if (c->job.copy_ns > c->st.snapshot_ns_max)
            c->st.snapshot_ns_max = c->job.copy_ns;
        if (rank == 0)
            rc = tt_tc_commit(c, c->ctl);
    }
    /* After the commit took its request: one boundary may commit the
     * previous checkpoint and start the next. Every rank notes the request
     * (the members hear of it at once), so a failed part is reported with
     * it whichever rank failed. */
    if ((act & TT_CKPT_ACT_START) != 0 && c->tether != NULL)
        tt_tc_coord_started(c, wanted);
    if (rc == TT_OK && (act & TT_CKPT_ACT_START) != 0)
        rc = start(c, c->sched.inflight, rank, world);
    return rc;
}

/* The stall of the checkpoint in flight: its boundaries plus the gate's
 * waits; the worst one is reported. */
static void add_stall(tt_train_ckpt_t *c, uint64_t ns) {
    c->ck_stall_ns += ns;
    if (c->ck_stall_ns > c->st.stall_ns_max)
        c->st.stall_ns_max = c->ck_stall_ns;
}

/* A checkpoint was resolved (committed or aborted): its stall joins the
 * ones behind the median. */
static void keep_stall(tt_train_ckpt_t *c) {
    c->stall_kept[c->nstall_kept++ % TT_TC_STALLS_KEPT] = c->ck_stall_ns;
}

/* A checkpoint's stall covers the boundaries from the one that starts it
 * to the one that resolves it: the boundaries between checkpoints (the
 * coordinator polls every TT_TC_POLL_STEPS steps) are the hook's cost per
 * step, not one checkpoint's. */
static void note_boundary(tt_train_ckpt_t *c, uint64_t dt, int was_writing, uint64_t started) {
    int writing = c->sched.phase == TT_CKPT_PHASE_WRITING;
    if (c->sched.started != started) { /* a new one: its stall starts here */
        if (was_writing)
            keep_stall(c); /* the previous one was resolved at this boundary */
        c->ck_stall_ns = 0;
    }
    if (was_writing || writing) {
        add_stall(c, dt);
    } else {
        c->st.idle_boundaries++;
        c->st.idle_ns += dt;
    }
    if (was_writing && !writing && c->sched.started == started)
        keep_stall(c);
}

void tt_tc_wait_snapshot(tt_train_ckpt_t *c) {
    tt_tc_job_t *j = &c->job;
    if (!c->thr_live || c->in_commit || !j->copy_in_thread ||
        atomic_load_explicit(&j->copied, memory_order_acquire))
        return;
    uint64_t t0 = tt_clock_mono_ns();
    pthread_mutex_lock(&j->mu);
    while (!atomic_load_explicit(&j->copied, memory_order_acquire))
        pthread_cond_wait(&j->cv, &j->mu);
    pthread_mutex_unlock(&j->mu);
    uint64_t dt = tt_clock_mono_ns() - t0;
    c->st.stall_ns_total += dt;
    add_stall(c, dt);
}

int tt_train_ckpt_boundary(tt_train_ckpt_t *c, uint64_t now_ms) {
    if (c->failed || c->root[0] == '\0')
        return TT_OK;
    uint64_t t0 = tt_clock_mono_ns();
    int rank = 0, world = 1;
    tt_ckpt_tick_t tick = {0};
    tick.step = tt_trainer_global_step(c->t);
    uint64_t started = c->sched.started;
    int was_writing = c->sched.phase == TT_CKPT_PHASE_WRITING;
    int rc = c->coll.membership(c->coll.ctx, &rank, &world, &tick.generation);
    int act = rc == TT_OK ? tt_ckpt_sched_generation(&c->sched, tick.generation) : 0;
    /* Rank 0's wish: the coordinator's request, or its own timer. */
    int wish = c->tether != NULL ? rank == 0 && tt_tc_coord_wanted(c, now_ms)
                                 : tt_ckpt_sched_time_due(&c->sched, now_ms);
    /* Who runs the schedule: every rank, or rank 0 alone (on the shards),
     * which then looks at the coordinator's requests at every boundary. */
    int runs = !c->on_shards || rank == 0;
    int poll = c->tether != NULL && (c->on_shards || tick.step % TT_TC_POLL_STEPS == 0);
    if (rc == TT_OK && runs && (tt_ckpt_sched_needs_reduce(&c->sched) || poll))
        rc = control_reduce(c, rank, world, wish, &tick);
    if (rc == TT_OK && runs)
        act |= tt_ckpt_sched_boundary(&c->sched, &tick, now_ms);
    if (rc == TT_OK)
        rc = apply(c, act, rank, world, tick.time_due, now_ms);
    uint64_t dt = tt_clock_mono_ns() - t0;
    c->st.boundaries++;
    c->st.stall_ns_total += dt;
    note_boundary(c, dt, was_writing, started);
    /* A regroup (or a peer lost in the control reduce) is failover's
     * business; the new generation aborts the checkpoint in flight at the
     * next boundary (tt_ckpt_sched_generation). Checkpoints go on. */
    if (tt_train_ft_recoverable(rc) || rc == TT_EJOBDONE || rc == TT_EDRAINED)
        return rc; /* and a worker whose part is over has nothing to write */
    if (rc < 0) {
        c->failed = 1;
        return tt_tc_fail(c, rc, "checkpoint hook at step %llu: %s", (unsigned long long)tick.step,
                          tt_strerror(rc));
    }
    return TT_OK;
}

/* Waits for this rank's writer, then one control reduce resolves the
 * checkpoint in flight (every rank has joined its writer, so all report). */
static int finish_inflight(tt_train_ckpt_t *c, int rank, int world, const tt_ckpt_tick_t *t0) {
    tt_ckpt_tick_t tick = *t0;
    tt_tc_join(c);
    c->joined_for_finish = 1; /* rank 0 waits for the shards' parts too */
    int rc = control_reduce(c, rank, world, 0, &tick);
    c->joined_for_finish = 0;
    int act = rc == TT_OK ? tt_ckpt_sched_resolve(&c->sched, &tick) : 0;
    if (rc == TT_OK && act == 0)
        rc = TT_EINTERNAL;
    if (rc == TT_OK)
        rc = apply(c, act, rank, world, 0, tt_clock_mono_ms());
    tt_tc_join(c);
    return rc;
}

int tt_train_ckpt_finish(tt_train_ckpt_t *c) {
    int rank = 0, world = 1, rc = TT_OK;
    if (c->sched.phase == TT_CKPT_PHASE_WRITING)
        keep_stall(c); /* the run's end resolves it: its stall is what training saw */
    tt_ckpt_tick_t tick = {0};
    tick.step = tt_trainer_global_step(c->t);
    if (!c->failed && c->root[0] != '\0')
        rc = c->coll.membership(c->coll.ctx, &rank, &world, &tick.generation);
    if (rc == TT_OK && tt_ckpt_sched_generation(&c->sched, tick.generation) != 0)
        TT_WARN("ckpt", "checkpoint %s aborted: the membership changed", c->job.id);
    /* A checkpoint deferred behind the one in flight is taken now, so the
     * run's last due checkpoint is not lost; both decisions use agreed
     * state only, so every rank loops the same number of times. */
    for (int round = 0; rc == TT_OK && !c->failed && c->root[0] != '\0' && round < 2; round++) {
        if (c->sched.phase == TT_CKPT_PHASE_WRITING)
            rc = finish_inflight(c, rank, world, &tick);
        if (rc == TT_OK && c->sched.pending && tick.step != c->sched.last_step)
            rc = apply(c, tt_ckpt_sched_boundary(&c->sched, &tick, tt_clock_mono_ms()), rank, world,
                       0, tt_clock_mono_ms());
        else
            break;
    }
    if (rc == TT_OK && c->sched.phase == TT_CKPT_PHASE_WRITING)
        rc = finish_inflight(c, rank, world, &tick);
    tt_tc_join(c);
    if (rc < 0) {
        c->failed = 1;
        return tt_tc_fail(c, rc, "final checkpoint of step %llu: %s", (unsigned long long)tick.step,
                          tt_strerror(rc));
    }
    return c->failed ? TT_EINTERNAL : TT_OK;
}

/* tt_train_ft: recovery after a failed step. Why the pieces are shaped so:
 * - A rank whose collective failed never applied that step (tt_trainer
 *   returns before its update), but a ring can complete on some ranks and
 *   fail on others, so survivors may be one step apart. The agreement
 *   therefore asks every member for its completed step instead of trusting
 *   heartbeats that may be a beat late.
 * - Where the generation's backend has shard servers (the ps backend, and
 *   a ring generation on its PS fallback) the state travels through them:
 *   the root uploads it, its header broadcast afterwards tells the others
 *   it is there, and only the ranks that do not already hold it download
 *   it; any failure on the way falls back to the broadcast, which every
 *   other backend uses (jobs without shards, and the ring is built by the
 *   very first collective of the agreement anyway).
 * - With the update on the shards the shards hold the optimizer state and
 *   the parameters of the last step every chunk applied; a survivor holds
 *   only the parameters it was answered, and a chunk ahead of it replays
 *   the redone step (tt_accum) rather than applying it twice. So only the
 *   parameters move between ranks, nothing is uploaded at a regroup (that
 *   would roll chunks back), and the state is put on the shards once: when
 *   no member has completed a step in its process yet (the job's start or
 *   a resume from a checkpoint), by the rank the state is agreed from.
 * - Per-rank loss accumulators are not part of the transferred state: they
 *   are this rank's own sums, and copying the root's would count its
 *   examples twice in the epoch's train loss.
 * It does not own the trainer, the library object or the collectives. */
#include "tt_train_ft.h"

#include "tt_clock.h"
#include "tt_log.h"
#include "tt_status.h"

#include <tether/tether.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SUBSYS "failover"
/* epoch, step_in_epoch, global_step, in_epoch, examples, params, then the
 * root's: state uploaded to the shards (1) or not (0), its checksum */
#define HDR_N   8
#define HDR_VIA 6
#define HDR_CK  7
#define POLL_MS 5

struct tt_train_ft {
    tt_train_ft_opts_t o;
    tt_train_tether_t *tt;
    tt_trainer_t *t;
    tt_train_ft_stats_t st;
    int first_pending;     /* the first step after a recovery is not done */
    int boundary;          /* ... and that recovery failed no step (say_resumed) */
    tt_trainer_step_fn cb; /* the caller's step callback, wrapped */
    void *cbctx;
};

static int env_u32(const char *name, uint32_t lo, uint32_t *out, char *err, size_t errlen) {
    const char *v = getenv(name);
    if (v == NULL)
        return TT_OK;
    char *end = NULL;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || v[0] == '-' || x < lo || x > UINT32_MAX) {
        snprintf(err, errlen, "%s='%s' must be an integer in [%u, %u]", name, v, lo, UINT32_MAX);
        return TT_EINVAL;
    }
    *out = (uint32_t)x;
    return TT_OK;
}

int tt_train_ft_opts_from_env(tt_train_ft_opts_t *o, char *err, size_t errlen) {
    memset(o, 0, sizeof(*o));
    o->regroup_deadline_ms = 60000;
    o->max_regroups = 100;
    int rc = env_u32("TETHER_REGROUP_DEADLINE_MS", 1, &o->regroup_deadline_ms, err, errlen);
    if (rc == TT_OK)
        rc = env_u32("TETHER_MAX_REGROUPS", 0, &o->max_regroups, err, errlen);
    return rc;
}

int tt_train_ft_create(tt_train_ft_t **out, const tt_train_ft_opts_t *opts, tt_train_tether_t *tt,
                       tt_trainer_t *t) {
    *out = NULL;
    tt_train_ft_t *ft = calloc(1, sizeof(*ft));
    if (ft == NULL)
        return TT_ENOMEM;
    ft->o = *opts;
    ft->tt = tt;
    ft->t = t;
    ft->st.root = -1;
    *out = ft;
    return TT_OK;
}

void tt_train_ft_destroy(tt_train_ft_t **ft) {
    if (ft == NULL || *ft == NULL)
        return;
    free(*ft);
    *ft = NULL;
}

int tt_train_ft_recoverable(int rc) {
    return rc == TT_EMEMBERSHIP || rc == TT_ETIMEDOUT || rc == TT_EUNREACHABLE || rc == TT_EFENCED;
}

int tt_train_ft_rank(const tt_train_ft_t *ft) {
    return tt_train_tether_rank(ft->tt);
}

void tt_train_ft_stats(const tt_train_ft_t *ft, tt_train_ft_stats_t *out) {
    *out = ft->st;
}

/* FNV-1a over the bytes: a bitwise fingerprint, 62 bits so that its
 * negation fits an int64 (min and max travel in one MAX reduction). */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static int64_t state_checksum(tt_train_ft_t *ft) {
    tt_trainer_t *t = ft->t;
    tt_mlp_t *m = tt_trainer_model(t);
    uint64_t h =
        fnv(1469598103934665603ULL, tt_mlp_params(m), tt_mlp_param_count(m) * sizeof(float));
    for (int w = 0; w < 2 && !tt_train_tether_on_shards(ft->tt, NULL); w++) {
        size_t n = 0;
        const float *s = tt_trainer_opt_state(t, w, &n);
        if (s != NULL)
            h = fnv(h, s, n * sizeof(float));
    }
    return (int64_t)(h >> 2);
}

static int coll(tt_train_ft_t *ft, const char *what, int rc) {
    if (rc != TETHER_OK)
        TT_WARN(SUBSYS, "state agreement (%s) failed: %s (%s)", what,
                tether_last_error(tt_train_tether_handle(ft->tt)), tether_status_name(rc));
    return rc;
}

/* One MAX reduction gives the highest and lowest completed step and
 * epoch counter and the highest and lowest checksum over the members. The
 * epoch counter matters at an epoch's end: ranks at the same step may or
 * may not have closed the epoch, and must not run different collectives. */
typedef struct {
    int64_t c, lo;   /* highest and lowest global step */
    int64_t ep;      /* highest epoch counter among ranks at c */
    int same;        /* every member has the same step, epoch and checksum */
    int any_stepped; /* a member completed a step since its process started */
} survey_t;

static int survey(tt_train_ft_t *ft, survey_t *out) {
    tether_t *h = tt_train_tether_handle(ft->tt);
    tt_trainer_state_t s;
    tt_trainer_get_state(ft->t, &s);
    int64_t gs = (int64_t)s.global_step, ep = (int64_t)s.epoch * 2 + (s.in_epoch != 0);
    int64_t ck = state_checksum(ft);
    int64_t v[7] = {gs, -gs, ep, -ep, ck, -ck, tt_train_tether_stepped(ft->tt)};
    int rc = coll(ft, "survey", tether_allreduce(h, v, 7, TETHER_INT64, TETHER_MAX));
    out->c = v[0];
    out->lo = -v[1];
    out->ep = v[2];
    out->same = v[0] == -v[1] && v[2] == -v[3] && v[4] == -v[5];
    out->any_stepped = v[6] != 0;
    return rc;
}

static void pack_header(tt_trainer_t *t, int64_t *hdr) {
    tt_trainer_state_t s;
    tt_trainer_get_state(t, &s);
    hdr[0] = (int64_t)s.epoch;
    hdr[1] = (int64_t)s.step_in_epoch;
    hdr[2] = (int64_t)s.global_step;
    hdr[3] = s.in_epoch;
    hdr[4] = (int64_t)s.examples;
    hdr[5] = (int64_t)tt_mlp_param_count(tt_trainer_model(t));
}

/* Installs the root's scalar state, keeping this rank's own loss sums
 * when it is in the same epoch (they are per rank, see above). */
static int unpack_header(tt_trainer_t *t, const int64_t *hdr) {
    if (hdr[5] != (int64_t)tt_mlp_param_count(tt_trainer_model(t)))
        return TT_EINVAL;
    tt_trainer_state_t mine, s;
    tt_trainer_get_state(t, &mine);
    memset(&s, 0, sizeof(s));
    s.epoch = (uint64_t)hdr[0];
    s.step_in_epoch = (uint64_t)hdr[1];
    s.global_step = (uint64_t)hdr[2];
    s.in_epoch = (int)hdr[3];
    s.examples = (double)hdr[4];
    if (mine.epoch == s.epoch && mine.in_epoch) {
        s.loss_sum = mine.loss_sum;
        s.count = mine.count;
    }
    return tt_trainer_set_state(t, &s);
}

/* The state as parts laid out like the gradients: 0 parameters, 1-2 the
 * optimizer buffers this optimizer keeps. n[k] = 0: no such part. */
static void state_parts(tt_train_ft_t *ft, float *buf[3], size_t n[3]) {
    tt_mlp_t *m = tt_trainer_model(ft->t);
    buf[0] = tt_mlp_params(m);
    n[0] = tt_mlp_param_count(m);
    for (int w = 0; w < 2; w++)
        buf[w + 1] = tt_trainer_opt_state(ft->t, w, &n[w + 1]);
    for (int k = 1; k < 3; k++)
        n[k] = buf[k] != NULL && !tt_train_tether_on_shards(ft->tt, NULL) ? n[k] : 0;
}

/* Root: 1 when every part reached the shards, 0 to fall back (no shards
 * on this backend, or a shard failed: said in the log). */
static int upload(tt_train_ft_t *ft, float *buf[3], const size_t n[3]) {
    tether_t *h = tt_train_tether_handle(ft->tt);
    int rc = TETHER_OK;
    for (int k = 0; k < 3 && rc == TETHER_OK; k++)
        rc = n[k] > 0 ? tether_state_put(h, k, buf[k], n[k]) : TETHER_OK;
    if (rc != TETHER_OK && rc != TETHER_ENODEV)
        TT_WARN(SUBSYS, "state upload to the shards failed (%s): broadcasting it instead",
                tether_last_error(h));
    return rc == TETHER_OK;
}

/* Non-root, after the header: 1 when the state is here (downloaded, or
 * held already: same step and checksum as the root's), 0 on a failure. */
static int download(tt_train_ft_t *ft, const int64_t *hdr, int64_t mine_step, int64_t mine_ck,
                    float *buf[3], const size_t n[3]) {
    if (hdr[2] == mine_step && hdr[HDR_CK] == mine_ck)
        return 1;
    tether_t *h = tt_train_tether_handle(ft->tt);
    int rc = TETHER_OK;
    for (int k = 0; k < 3 && rc == TETHER_OK; k++) {
        rc = n[k] > 0 ? tether_state_get(h, k, buf[k], n[k]) : TETHER_OK;
        ft->st.bytes += rc == TETHER_OK ? n[k] * sizeof(float) : 0;
    }
    if (rc != TETHER_OK)
        TT_WARN(SUBSYS, "state download from the shards failed (%s): asking for a broadcast",
                tether_last_error(h));
    return rc == TETHER_OK;
}

static int broadcast_parts(tt_train_ft_t *ft, int root, float *buf[3], const size_t n[3]) {
    tether_t *h = tt_train_tether_handle(ft->tt);
    static const char *const what[3] = {"parameters", "optimizer", "optimizer"};
    int rc = TETHER_OK;
    for (int k = 0; k < 3 && rc == TETHER_OK; k++) {
        if (n[k] > 0)
            rc = coll(ft, what[k], tether_broadcast(h, buf[k], n[k], TETHER_FLOAT32, root));
        ft->st.bytes += n[k] * sizeof(float);
    }
    return rc;
}

/* The root's header (with whether its upload worked) reaches everyone;
 * then either everyone fetches from the shards what it lacks and all
 * agree it worked, or the root broadcasts the parts. */
static int transfer(tt_train_ft_t *ft, int root) {
    tether_t *h = tt_train_tether_handle(ft->tt);
    int64_t hdr[HDR_N];
    int me = tether_rank(h);
    float *buf[3];
    size_t n[3];
    state_parts(ft, buf, n);
    pack_header(ft->t, hdr);
    int64_t mine_step = hdr[2], mine_ck = state_checksum(ft);
    hdr[HDR_VIA] = me == root && !tt_train_tether_on_shards(ft->tt, NULL) ? upload(ft, buf, n) : 0;
    hdr[HDR_CK] = mine_ck;
    ft->st.bytes = sizeof(hdr);
    int rc = coll(ft, "header", tether_broadcast(h, hdr, HDR_N, TETHER_INT64, root));
    if (rc == TETHER_OK && me != root && (rc = unpack_header(ft->t, hdr)) != TT_OK)
        TT_ERROR(SUBSYS,
                 "state of rank %d (step %" PRId64 ", %" PRId64 " parameters) does not fit "
                 "this trainer: ranks run different models or datasets",
                 root, hdr[2], hdr[5]);
    int64_t ok = 1;
    if (rc == TETHER_OK && hdr[HDR_VIA]) {
        ok = me == root || download(ft, hdr, mine_step, mine_ck, buf, n);
        rc = coll(ft, "download", tether_allreduce(h, &ok, 1, TETHER_INT64, TETHER_MIN));
        if (me == root)
            ft->st.bytes += (n[0] + n[1] + n[2]) * sizeof(float);
    }
    ft->st.via_shards = rc == TETHER_OK && hdr[HDR_VIA] && ok;
    if (rc == TETHER_OK && !ft->st.via_shards)
        rc = broadcast_parts(ft, root, buf, n);
    if (rc == TETHER_OK && me != root && ft->st.bytes > sizeof(hdr))
        TT_INFO(SUBSYS, "state of rank %d (step %" PRId64 ") received %s: %zu bytes", root, hdr[2],
                ft->st.via_shards ? "through the shards" : "by broadcast", ft->st.bytes);
    return rc;
}

/* The lowest rank at step c whose epoch counter is the highest (the step
 * and the counter grow together, so such a rank exists). */
static int pick_root(tt_train_ft_t *ft, const survey_t *sv, int *root) {
    tether_t *h = tt_train_tether_handle(ft->tt);
    tt_trainer_state_t s;
    tt_trainer_get_state(ft->t, &s);
    int ahead =
        (int64_t)s.global_step == sv->c && (int64_t)s.epoch * 2 + (s.in_epoch != 0) == sv->ep;
    int64_t v = ahead ? tether_rank(h) : INT64_MAX;
    int rc = coll(ft, "root", tether_allreduce(h, &v, 1, TETHER_INT64, TETHER_MIN));
    *root = (int)v;
    return rc;
}

/* With the update on the shards, before any member's first step: `root`
 * puts the agreed state there (optimizer buffers, then the parameters with
 * the step counter), and every member waits for it, because a push to a
 * chunk that holds no state is refused. */
static int put_on_shards(tt_train_ft_t *ft, int root) {
    tether_t *h = tt_train_tether_handle(ft->tt);
    int parts = 0, rc = TETHER_OK;
    tt_train_tether_on_shards(ft->tt, &parts);
    int64_t ok = 1;
    if (tether_rank(h) == root) {
        uint64_t steps = tt_trainer_global_step(ft->t);
        for (int k = parts - 1; k >= 0 && rc == TETHER_OK; k--) {
            size_t n = tt_mlp_param_count(tt_trainer_model(ft->t));
            float *buf = k == 0 ? tt_mlp_params(tt_trainer_model(ft->t))
                                : tt_trainer_opt_state(ft->t, k - 1, &n);
            rc = tether_state_put_at(h, k, buf, n, steps);
        }
        if (rc != TETHER_OK)
            TT_ERROR(SUBSYS, "putting the state of step %" PRIu64 " on the shard servers: %s (%s)",
                     steps, tether_last_error(h), tether_status_name(rc));
        ok = rc == TETHER_OK;
        ft->st.bytes += (size_t)parts * tt_mlp_param_count(tt_trainer_model(ft->t)) * sizeof(float);
    }
    int arc = coll(ft, "state put", tether_allreduce(h, &ok, 1, TETHER_INT64, TETHER_MIN));
    if (rc == TETHER_OK && arc == TETHER_OK && !ok)
        TT_ERROR(SUBSYS, "rank %d could not put the state on the shard servers", root);
    return rc != TETHER_OK ? rc : arc != TETHER_OK ? arc : ok ? TT_OK : TT_EREMOTE;
}

/* The job's steps when the generation formed (tether_job_steps) are where
 * it had got to, as far as the coordinator heard: members report their
 * step with each heartbeat, so up to a heartbeat's worth of steps more may
 * have been done, and the figures are lower bounds. Members agreeing on an
 * earlier state means steps are trained again: the steps since a resumed
 * checkpoint, or all of them when no member held the state (every worker
 * restarted, a shard with the update on it lost) and no checkpoint was
 * resumed. Nothing else says so, so rank 0 does, once per generation. */
static void say_steps_redone(tether_t *h, int64_t reached, int64_t agreed) {
    if (tether_rank(h) != 0 || reached <= agreed)
        return;
    if (agreed == 0)
        TT_WARN(SUBSYS,
                "the job had completed at least %" PRId64 " step(s), but no member holds its "
                "state and no checkpoint was resumed: training starts over at step 0",
                reached);
    else
        TT_WARN(SUBSYS,
                "the job had completed at least %" PRId64 " step(s); generation %" PRIu64
                " resumes at step %" PRId64 ": at least %" PRId64 " are trained again",
                reached, tether_generation(h), agreed, reached - agreed);
}

int tt_train_ft_agree(tt_train_ft_t *ft) {
    tether_t *h = tt_train_tether_handle(ft->tt);
    survey_t sv = {0};
    int root = -1;
    uint64_t t0 = tt_clock_mono_ns();
    int64_t reached = tether_job_steps(h);
    int rc = survey(ft, &sv);
    ft->st.bytes = 0;
    if (rc == TETHER_OK && !sv.same) {
        TT_CHECK_GOTO(pick_root(ft, &sv, &root), rc, out);
        if (root < 0 || (uint32_t)root >= tether_world_size(h)) {
            rc = TT_EINTERNAL;
            goto out;
        }
        TT_CHECK_GOTO(transfer(ft, root), rc, out);
        TT_CHECK_GOTO(survey(ft, &sv), rc, out);
        if (!sv.same) {
            TT_ERROR(SUBSYS,
                     "replicas still differ after the transfer from rank %d (steps %" PRId64
                     "..%" PRId64 ")",
                     root, sv.lo, sv.c);
            rc = TT_EDIVERGED;
        }
    }
    if (rc == TETHER_OK && tt_train_tether_on_shards(ft->tt, NULL) && !sv.any_stepped)
        rc = put_on_shards(ft, root >= 0 ? root : 0);
    if (rc == TETHER_OK)
        rc = tt_train_tether_resync(ft->tt, sv.c);
out:
    if (rc == TETHER_OK) {
        ft->st.generation = tether_generation(h);
        ft->st.world = (int)tether_world_size(h);
        ft->st.resume_step = sv.c;
        ft->st.root = root;
        ft->st.agree_s = (double)(tt_clock_mono_ns() - t0) * 1e-9;
        ft->st.resumed_at_ns = tt_clock_mono_ns();
        say_steps_redone(h, reached, sv.c);
    }
    return rc;
}

static int leaving(const tt_train_ft_t *ft) {
    return ft->o.leaving != NULL && ft->o.leaving(ft->o.leaving_ctx);
}

/* Polls tether_step_done until the next generation is acknowledged; a
 * fenced worker joins again as a new member. *boundary: the generation
 * was acknowledged at a step boundary, before the step began, so no step
 * failed. `step_rc` when the worker is leaving. */
static int await_generation(tt_train_ft_t *ft, int step_rc, int *boundary) {
    tether_t *h = tt_train_tether_handle(ft->tt);
    *boundary = tt_train_tether_take_regrouped(ft->tt);
    if (*boundary)
        return TT_OK;
    uint64_t deadline = tt_clock_mono_ms() + ft->o.regroup_deadline_ms;
    int64_t last = (int64_t)tt_trainer_global_step(ft->t) - 1;
    for (;;) {
        int rc = tether_step_done(h, last);
        if (rc == TETHER_REGROUPED)
            return TT_OK;
        if (rc == TETHER_EFENCED) {
            TT_WARN(SUBSYS, "this worker was fenced (%s): joining again", tether_last_error(h));
            rc = tether_join(h, ft->o.regroup_deadline_ms);
            if (rc != TETHER_OK)
                TT_ERROR(SUBSYS, "joining again after being fenced: %s (%s)", tether_last_error(h),
                         tether_status_name(rc));
            return rc;
        }
        if (rc != TETHER_OK) {
            TT_ERROR(SUBSYS, "waiting for the next generation: %s (%s)", tether_last_error(h),
                     tether_status_name(rc));
            return rc;
        }
        if (leaving(ft))
            return step_rc;
        if (tt_clock_mono_ms() >= deadline) {
            TT_ERROR(SUBSYS,
                     "no new generation within the regroup deadline of %u ms "
                     "(TETHER_REGROUP_DEADLINE_MS)",
                     ft->o.regroup_deadline_ms);
            return TT_ETIMEDOUT;
        }
        tt_clock_sleep_ms(POLL_MS);
    }
}

/* The line every member logs once it resumes. A generation taken at a
 * step boundary (a joiner admitted, a drain, or a loss the coordinator saw
 * first) failed no step, and an operator's drain must not read as a
 * failure; a step that failed says why. */
static void say_resumed(const tt_train_ft_t *ft, int step_rc, int boundary, int was_world) {
    char why[160];
    if (boundary)
        snprintf(why, sizeof(why),
                 "the membership changed at a step boundary (%d ranks before: a worker joined, "
                 "left or was lost)",
                 was_world);
    else
        snprintf(why, sizeof(why), "step failed (%s)", tt_status_name(step_rc));
    TT_WARN(SUBSYS,
            "%s; generation %" PRIu64 " with %d ranks resumes at step %" PRId64
            ": regroup %.1f ms, agreement %.1f ms (%s, %zu bytes)",
            why, ft->st.generation, ft->st.world, ft->st.resume_step, ft->st.regroup_s * 1e3,
            ft->st.agree_s * 1e3,
            ft->st.root < 0     ? "no transfer"
            : ft->st.via_shards ? "state through the shards"
                                : "state broadcast",
            ft->st.bytes);
}

int tt_train_ft_recover(tt_train_ft_t *ft, int step_rc) {
    ft->st.failed_at_ns = tt_clock_mono_ns();
    int rc = step_rc, boundary = 0, was_world = ft->st.world, tries = 0;
    /* A member may fail during the agreement itself: regroup again. */
    do {
        if (ft->st.regroups >= ft->o.max_regroups) {
            TT_ERROR(SUBSYS,
                     "step failed (%s) but the bound of %u regroups per run "
                     "(TETHER_MAX_REGROUPS) is spent: giving up",
                     tt_status_name(rc), ft->o.max_regroups);
            return TT_EAGAIN;
        }
        ft->st.regroups++;
        int at_boundary = 0;
        rc = await_generation(ft, step_rc, &at_boundary);
        if (rc != TT_OK)
            return rc;                          /* deadline, job failed, closed: no second try */
        boundary = at_boundary && tries++ == 0; /* a second round follows a failure */
        ft->st.regroup_s = (double)(tt_clock_mono_ns() - ft->st.failed_at_ns) * 1e-9;
        rc = tt_train_ft_agree(ft);
    } while (tt_train_ft_recoverable(rc));
    if (rc != TT_OK)
        return rc;
    ft->boundary = boundary;
    say_resumed(ft, step_rc, boundary, was_world);
    return TT_OK;
}

int tt_train_ft_begin(tt_train_ft_t *ft) {
    int rc = tt_train_ft_agree(ft);
    return tt_train_ft_recoverable(rc) ? tt_train_ft_recover(ft, rc) : rc;
}

/* Wraps the caller's step callback to time the first step after a
 * recovery: kill-to-next-step is the figure failover is judged by. */
static void on_step(void *ctx, const tt_step_report_t *r) {
    tt_train_ft_t *ft = ctx;
    if (ft->first_pending) {
        ft->first_pending = 0;
        uint64_t now = tt_clock_mono_ns();
        ft->st.redo_s = (double)(now - ft->st.resumed_at_ns) * 1e-9;
        TT_WARN(SUBSYS,
                "first step after the regroup (global step %" PRIu64 ") done %.1f ms "
                "after the %s (%s %.1f ms)",
                r->global_step, (double)(now - ft->st.failed_at_ns) * 1e-6,
                ft->boundary ? "step boundary" : "failed step",
                ft->boundary ? "agreement to step done" : "redo", ft->st.redo_s * 1e3);
    }
    if (ft->cb != NULL)
        ft->cb(ft->cbctx, r);
}

int tt_train_ft_run_epoch(tt_train_ft_t *ft, tt_trainer_step_fn cb, void *cbctx,
                          tt_epoch_stats_t *stats) {
    tt_trainer_state_t s;
    tt_trainer_get_state(ft->t, &s);
    uint64_t epoch = s.epoch;
    ft->cb = cb;
    ft->cbctx = cbctx;
    for (;;) {
        int rc = tt_trainer_run_epoch(ft->t, on_step, ft, stats);
        if (rc >= 0 || !tt_train_ft_recoverable(rc) || leaving(ft))
            return rc;
        rc = tt_train_ft_recover(ft, rc);
        if (rc != TT_OK)
            return rc;
        ft->first_pending = 1;
        tt_trainer_get_state(ft->t, &s);
        if (s.epoch != epoch)
            return 1; /* the agreed state closed this epoch already */
    }
}

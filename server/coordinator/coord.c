/* coord: life cycle of the coordinator daemon, its timer (rendezvous
 * deadlines, shard-server expiry, checkpoint timer schedules, lazy saves),
 * its pulse (the loop's own standstills), the outbox of replies held
 * behind state writes, and the asynchronous state writes. */
#include "coord_internal.h"
#include "shards.h"
#include "tt_clock.h"
#include "tt_fsutil.h"
#include "tt_log.h"
#include "tt_status.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#define CSET_ERR(err, errlen, ...)                                                                 \
    do {                                                                                           \
        if ((err) != NULL && (errlen) > 0)                                                         \
            snprintf((err), (errlen), __VA_ARGS__);                                                \
    } while (0)

/* Progress (last steps) is flushed at most this often; generations are
 * written before anyone hears of them. */
#define COORD_LAZY_SAVE_MS 5000

/* The pulse: with it running, a gap of COORD_STALL_MS between two things
 * the loop did means the process stood still, not that it was idle. */
#define COORD_PULSE_MS 250
#define COORD_STALL_MS 1000

coord_job_t *coord_find_job(tt_coord_t *c, const char *job_id) {
    for (size_t i = 0; i < c->njobs; i++) {
        if (strcmp(tt_rdzv_job_id(c->jobs[i].rdzv), job_id) == 0)
            return &c->jobs[i];
    }
    return NULL;
}

void coord_remove_job(tt_coord_t *c, coord_job_t *job) {
    size_t i = (size_t)(job - c->jobs);
    coord_commid_drop(job);
    tt_rdzv_destroy(&job->rdzv);
    tt_ckpt_book_free(&job->ckpt);
    memmove(&c->jobs[i], &c->jobs[i + 1], (c->njobs - i - 1) * sizeof(*job));
    c->njobs--;
}

static coord_forgotten_t *find_forgotten(const tt_coord_t *c, const char *id) {
    for (size_t i = 0; i < c->nforgotten; i++) {
        if (strcmp(c->forgotten[i].job_id, id) == 0)
            return &c->forgotten[i];
    }
    return NULL;
}

uint64_t coord_forgotten_generation(const tt_coord_t *c, const char *id) {
    const coord_forgotten_t *f = find_forgotten(c, id);
    return f ? f->generation : 0;
}

int coord_note_forgotten(tt_coord_t *c, const char *id, uint64_t generation) {
    coord_forgotten_t *f = find_forgotten(c, id);
    if (f == NULL) {
        f = realloc(c->forgotten, (c->nforgotten + 1) * sizeof(*f));
        if (f == NULL)
            return TT_ENOMEM;
        c->forgotten = f;
        f = &c->forgotten[c->nforgotten++];
        snprintf(f->job_id, sizeof(f->job_id), "%s", id);
        f->generation = 0;
    }
    f->generation = generation > f->generation ? generation : f->generation;
    return TT_OK;
}

void coord_unforget(tt_coord_t *c, const char *id) {
    coord_forgotten_t *f = find_forgotten(c, id);
    if (f == NULL)
        return;
    *f = c->forgotten[--c->nforgotten];
}

/* Random, so that two job records never share one (a job forgotten and run
 * again, two coordinators with a job of the same id); 0 means "none". */
static uint64_t new_nonce(void) {
    uint64_t x = 0;
    if (getrandom(&x, sizeof(x), 0) != (ssize_t)sizeof(x))
        x = tt_clock_wall_ms() * 0x9E3779B97F4A7C15ull ^ (uint64_t)getpid() ^ tt_clock_mono_ns();
    return x != 0 ? x : 1;
}

int coord_add_job(tt_coord_t *c, tt_rdzv_t **rdzv) {
    tt_rdzv_guard_t g = tt_rdzv_guard_for_job(&c->guard, tt_rdzv_settings(*rdzv));
    int rc = tt_rdzv_set_guard(*rdzv, &g, NULL, 0); /* both parts validated */
    if (rc != TT_OK)
        return rc;
    if (c->njobs == c->capjobs) {
        size_t cap = c->capjobs ? c->capjobs * 2 : 8;
        coord_job_t *j = realloc(c->jobs, cap * sizeof(*j));
        if (j == NULL)
            return TT_ENOMEM;
        c->jobs = j;
        c->capjobs = cap;
    }
    coord_job_t *job = &c->jobs[c->njobs++];
    *job =
        (coord_job_t){.rdzv = *rdzv, .resume_step = -1, .progress_step = -1, .nonce = new_nonce()};
    tt_ckpt_book_init(&job->ckpt, tt_clock_mono_ms());
    *rdzv = NULL;
    return TT_OK;
}

static void flush_outbox(tt_coord_t *c) {
    while (c->out_head != NULL && !c->save_inflight) {
        coord_out_t *o = c->out_head;
        char who[TT_ZMQ_PEER_NAME_MAX];
        c->out_head = o->next;
        if (c->out_head == NULL)
            c->out_tail = NULL;
        if (zmq_send(c->router, o->peer, o->peer_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
            zmq_send(c->router, o->env, o->len, ZMQ_DONTWAIT) < 0)
            TT_DEBUG("coord", "reply to %s dropped: %s",
                     tt_zmq_peer_name(o->peer, o->peer_len, who, sizeof(who)),
                     zmq_strerror(zmq_errno()));
        free(o->env);
        free(o);
    }
    tt_uvzmq_kick(c->router_w);
}

/* ROUTER_MANDATORY fails the first frame for an unknown peer, so a
 * disconnected worker costs nothing and cannot block the loop. */
void coord_send(tt_coord_t *c, const uint8_t *peer, size_t peer_len, const tt_env_t *env,
                int hold) {
    coord_out_t *o = calloc(1, sizeof(*o));
    if (o == NULL || peer_len > TT_ZMQ_MAX_PEER || tt_wire_encode(env, &o->env, &o->len) != TT_OK) {
        TT_ERROR("coord", "cannot queue a reply (out of memory)");
        free(o);
        return;
    }
    memcpy(o->peer, peer, peer_len);
    o->peer_len = peer_len;
    if (c->out_tail)
        c->out_tail->next = o;
    else
        c->out_head = o;
    c->out_tail = o;
    if (!hold || !c->save_inflight)
        flush_outbox(c);
}

void coord_send_error(tt_coord_t *c, const uint8_t *peer, size_t peer_len, const char *job,
                      uint64_t req, int code, const char *msg) {
    tt_env_t env;
    Tether__Error e = TETHER__ERROR__INIT;
    e.code = code;
    e.message = (char *)msg;
    tt_wire_env_init(&env, job, c->id, 0, req);
    env.body_case = TETHER__ENVELOPE__BODY_ERROR;
    env.error = &e;
    coord_send(c, peer, peer_len, &env, 0);
}

void coord_send_ack(tt_coord_t *c, const uint8_t *peer, size_t peer_len, const char *job,
                    uint64_t req, int hold) {
    tt_env_t env;
    Tether__Ack a = TETHER__ACK__INIT;
    tt_wire_env_init(&env, job, c->id, 0, req);
    env.body_case = TETHER__ENVELOPE__BODY_ACK;
    env.ack = &a;
    coord_send(c, peer, peer_len, &env, hold);
}

static void save_work(uv_work_t *w) {
    tt_coord_t *c = w->data;
    c->save_rc = tt_fs_write_atomic(c->state_path, c->save_buf, c->save_len, c->save_err,
                                    sizeof(c->save_err));
}

static void start_save(tt_coord_t *c);

static void save_done(uv_work_t *w, int status) {
    tt_coord_t *c = w->data;
    free(c->save_buf);
    c->save_buf = NULL;
    c->save_inflight = 0;
    if (status != 0 || c->save_rc != TT_OK)
        TT_ERROR("coord", "state write failed: %s", c->save_err);
    if (c->save_again) {
        c->save_again = 0;
        /* Closing: a change made while the loop winds down (a checkpoint
         * commit finishing) is still written, once, without new work. */
        if (c->closing)
            tt_coord_save_now(c);
        else
            start_save(c);
    }
    if (!c->save_inflight)
        flush_outbox(c);
}

static void start_save(tt_coord_t *c) {
    if (coord_state_encode(c, &c->save_buf, &c->save_len) != TT_OK) {
        TT_ERROR("coord", "cannot encode state (out of memory)");
        return;
    }
    c->save_work.data = c;
    c->save_inflight = 1;
    c->dirty_since_ms = 0;
    if (uv_queue_work(c->loop, &c->save_work, save_work, save_done) != 0) {
        c->save_inflight = 0;
        free(c->save_buf);
        c->save_buf = NULL;
    }
}

void coord_request_save(tt_coord_t *c) {
    c->dirty_since_ms = 0;
    if (c->state_path[0] == '\0')
        return;
    if (c->save_inflight)
        c->save_again = 1;
    else
        start_save(c);
}

int tt_coord_save_now(tt_coord_t *c) {
    if (c->state_path[0] == '\0')
        return TT_OK;
    /* A background write of an older state would otherwise be renamed
     * over this one when it finishes: save_done writes again after it. */
    if (c->save_inflight) {
        c->save_again = 1;
        return TT_OK;
    }
    uint8_t *buf = NULL;
    size_t len = 0;
    char err[256];
    int rc = coord_state_encode(c, &buf, &len);
    if (rc == TT_OK)
        rc = tt_fs_write_atomic(c->state_path, buf, len, err, sizeof(err));
    if (rc != TT_OK)
        TT_ERROR("coord", "state write failed: %s", err);
    free(buf);
    return rc;
}

/* A process that stood still (SIGSTOP, a paused VM or host, heavy
 * swapping) finds its members' heartbeats of that time unread in the
 * socket, and libuv runs due timers before it polls: judged on the clock
 * alone, every healthy worker and shard would be evicted at once, and the
 * whole job fenced. The time it could not listen does not count. Called
 * first by every timer and every message, so nothing judges a heartbeat's
 * age before it. */
int coord_check_stall(tt_coord_t *c, uint64_t now) {
    uint64_t gap = now > c->awake_ms ? now - c->awake_ms : 0;
    c->awake_ms = now;
    if (gap < COORD_STALL_MS)
        return 0;
    TT_WARN("coord",
            "this process stood still for %" PRIu64
            " ms (stopped, or its host paused): that time does not count against the "
            "heartbeats of %zu job(s) and %zu shard server(s)",
            gap, c->njobs, c->shards != NULL ? tt_shards_count(c->shards) : 0);
    for (size_t i = 0; i < c->njobs; i++)
        tt_rdzv_forgive(c->jobs[i].rdzv, gap, now);
    tt_shards_forgive(c->shards, gap, now);
    return 1;
}

static void on_pulse(uv_timer_t *t) {
    tt_coord_t *c = t->data;
    if (coord_check_stall(c, tt_clock_mono_ms()))
        coord_rearm(c); /* the forgiven deadlines moved */
}

static void on_timer(uv_timer_t *t) {
    tt_coord_t *c = t->data;
    uint64_t now = tt_clock_mono_ms();
    (void)coord_check_stall(c, now); /* this timer rearms at its end */
    for (size_t i = 0; i < c->njobs; i++) {
        tt_rdzv_tick(c->jobs[i].rdzv, now);
        coord_drain_events(c, &c->jobs[i]);
    }
    coord_check_shards(c, now);
    coord_ckpt_tick(c, now);
    if (c->dirty_since_ms != 0 && now - c->dirty_since_ms >= COORD_LAZY_SAVE_MS)
        coord_request_save(c);
    coord_rearm(c);
}

void coord_rearm(tt_coord_t *c) {
    if (c->closing)
        return;
    uint64_t now = tt_clock_mono_ms(), next = UINT64_MAX;
    for (size_t i = 0; i < c->njobs; i++) {
        uint64_t d = tt_rdzv_next_deadline(c->jobs[i].rdzv);
        next = d < next ? d : next;
    }
    uint64_t shard = coord_shards_deadline(c, now);
    next = shard < next ? shard : next;
    uint64_t ckpt = coord_ckpt_deadline(c, now);
    next = ckpt < next ? ckpt : next;
    uint64_t held = coord_commid_deadline(c);
    next = held < next ? held : next;
    if (c->dirty_since_ms != 0 && c->dirty_since_ms + COORD_LAZY_SAVE_MS < next)
        next = c->dirty_since_ms + COORD_LAZY_SAVE_MS;
    if (next == UINT64_MAX) {
        uv_timer_stop(&c->timer);
        return;
    }
    uv_timer_start(&c->timer, on_timer, next > now ? next - now : 0, 0);
}

static int bind_router(tt_coord_t *c, const tt_coord_opts_t *o, char *err, size_t errlen) {
    tt_zmq_opts_t zo;
    tt_zmq_opts_default(&zo);
    zo.max_msg = o->max_msg_bytes > 0 ? o->max_msg_bytes : (1 << 20);
    zo.sndhwm = 100000; /* one reply per worker per heartbeat, 10,000s of workers */
    /* Application heartbeats decide membership and workers' ZMTP TTL closes
     * dead connections; pinging 10,000 peers every second from here would
     * double the control traffic for nothing. */
    zo.heartbeat_ivl_ms = 0;
    zo.rcvhwm = 100000;
    zo.key = &c->key;
    zo.key_kind = TT_ZAUTH_CONTROL;
    int rc = tt_zauth_zap_start(c->zctx, &c->key, "the coordinator", &c->zap, err, errlen);
    if (rc != TT_OK)
        return rc;
    return tt_zmq_router(c->zctx, o->listen, &zo, &c->router, c->endpoint, sizeof(c->endpoint), err,
                         errlen);
}

static int setup(tt_coord_t *c, const tt_coord_opts_t *o, char *err, size_t errlen) {
    int rc;
    c->zctx = zmq_ctx_new();
    if (c->zctx == NULL) {
        CSET_ERR(err, errlen, "cannot create a ZeroMQ context");
        return TT_ESYS;
    }
    zmq_ctx_set(c->zctx, ZMQ_MAX_SOCKETS, 64);
    if (o->key != NULL)
        c->key = *o->key;
    TT_CHECK_GOTO(bind_router(c, o, err, errlen), rc, out);
    TT_CHECK_GOTO(coord_monitor_start(c, err, errlen), rc, out);
    if (o->state_dir != NULL && o->state_dir[0] != '\0') {
        TT_CHECK_GOTO(tt_fs_mkdirs(o->state_dir, err, errlen), rc, out);
        snprintf(c->state_path, sizeof(c->state_path), "%s/coordinator.state", o->state_dir);
        TT_CHECK_GOTO(coord_state_load(c, err, errlen), rc, out);
        /* Durable before anything is served (CoordState.boots). */
        c->boots++;
        if (tt_coord_save_now(c) != TT_OK) {
            CSET_ERR(err, errlen, "cannot write the state file %s", c->state_path);
            rc = TT_ESYS;
            goto out;
        }
    } else {
        c->boots = 1;
    }
    uv_timer_init(c->loop, &c->timer);
    c->timer.data = c;
    uv_timer_init(c->loop, &c->pulse);
    c->pulse.data = c;
    c->awake_ms = tt_clock_mono_ms();
    uv_timer_start(&c->pulse, on_pulse, COORD_PULSE_MS, COORD_PULSE_MS);
    uv_unref((uv_handle_t *)&c->pulse); /* it alone keeps no loop running */
    TT_CHECK_GOTO(tt_uvzmq_start(c->loop, c->router, coord_on_router, c, &c->router_w), rc, out);
    coord_rearm(c);
out:
    return rc;
}

int tt_coord_create(tt_coord_t **out, uv_loop_t *loop, const tt_coord_opts_t *o, char *err,
                    size_t errlen) {
    *out = NULL;
    tt_coord_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return TT_ENOMEM;
    c->loop = loop;
    snprintf(c->id, sizeof(c->id), "%s", o->id ? o->id : "coordinator");
    c->guard = o->guard ? *o->guard : tt_rdzv_guard_default();
    c->shard_timeout_ms = o->shard_timeout_ms;
    c->ps_fallback_steps = o->ps_fallback_steps;
    int rc = tt_rdzv_guard_validate(&c->guard, err, errlen);
    if (rc != TT_OK) {
        free(c);
        return rc;
    }
    rc = setup(c, o, err, errlen);
    if (rc != TT_OK) {
        tt_coord_close(c);
        uv_run(loop, UV_RUN_NOWAIT);
        tt_coord_destroy(&c);
        return rc;
    }
    *out = c;
    return TT_OK;
}

const char *tt_coord_endpoint(const tt_coord_t *c) {
    return c->endpoint;
}

void tt_coord_close(tt_coord_t *c) {
    if (c == NULL || c->closing)
        return;
    c->closing = 1;
    coord_dump_close(c);
    tt_uvzmq_stop(&c->router_w);
    tt_uvzmq_stop(&c->monitor_w);
    if (c->timer.loop != NULL)
        uv_close((uv_handle_t *)&c->timer, NULL);
    if (c->pulse.loop != NULL)
        uv_close((uv_handle_t *)&c->pulse, NULL);
}

void tt_coord_destroy(tt_coord_t **cp) {
    if (cp == NULL || *cp == NULL)
        return;
    tt_coord_t *c = *cp;
    *cp = NULL;
    for (size_t i = 0; i < c->njobs; i++) {
        coord_commid_drop(&c->jobs[i]);
        tt_rdzv_destroy(&c->jobs[i].rdzv);
        tt_ckpt_book_free(&c->jobs[i].ckpt);
    }
    free(c->jobs);
    free(c->forgotten);
    free(c->conns);
    tt_shards_destroy(&c->shards);
    while (c->out_head != NULL) {
        coord_out_t *o = c->out_head;
        c->out_head = o->next;
        free(o->env);
        free(o);
    }
    free(c->save_buf);
    tt_zmq_monitor_close(c->router, &c->monitor);
    tt_zmq_close(&c->router);
    tt_zauth_zap_stop(&c->zap);
    if (c->zctx != NULL)
        zmq_ctx_term(c->zctx);
    memset(&c->key, 0, sizeof(c->key));
    free(c);
}

/* tt_client: the membership client's thread, socket and blocking calls.
 * The background thread owns the DEALER: it (re)creates it on each join
 * (a new incarnation means a new routing id), sends the request of the
 * blocking call in flight, heartbeats every heartbeat_ms and feeds every
 * message it receives to the state machine (tt_client_sm.c). Application
 * threads only touch the shared state under `mu`, wake the thread through a
 * pipe and wait on `cv`. The decisions live in the state machine; this file
 * only moves bytes and manages waiting. It does not own the public API
 * (tether_api.c) or the options (tt_client_opts.c).
 * A request that cannot be queued yet (ZMQ_IMMEDIATE: no connection) stays
 * in a one-slot outbox and is retried every OUTBOX_RETRY_MS, so a join
 * issued before the coordinator is up goes out as soon as it is; a join
 * the coordinator answered "busy" goes back into the outbox when the state
 * machine's retry time comes. When the worker stops being a member on the
 * coordinator's word, the ended hook (tether_coll.c) hears of it. */
#include "tt_client.h"
#include "tt_clock.h"
#include "tt_log.h"
#include "tt_status.h"
#include "tt_zmq.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define OUTBOX_RETRY_MS 20
#define IDLE_POLL_MS    1000

struct tt_client {
    tt_client_opts_t opts;
    tt_zauth_key_t key; /* opts.key_file, read at create */
    void *zctx;
    void *dealer; /* background thread only */
    void *mon;    /* ... and its monitor, read into `reach` */
    int wake_rd, wake_wr;
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* Everything below is guarded by mu. */
    tt_client_sm_t sm;
    uint64_t incarnation;
    uint64_t next_rid;
    int reconnect; /* thread must (re)create the DEALER */
    int outbox;    /* the request of sm.op still has to be sent */
    /* The op in flight: when it began, whether its request ever left (a
     * ZeroMQ connection existed), whether the missing one was logged. */
    uint64_t op_started_ms;
    int op_sent, op_warned;
    int silence_warned;   /* the coordinator's silence was logged */
    tt_zmq_reach_t reach; /* the dealer's: a peer that is no coordinator is told apart */
    uint32_t report_rank;
    char reason[TT_WIRE_MAX_TEXT / 4];
    int stop;
    uint64_t next_hb_ms;
    tt_client_dump_fn dump_fn; /* answers DumpRequest (tether_coll.c) */
    void *dump_ctx;
    tt_client_ended_fn ended_fn; /* told of TT_CLIENT_EV_ENDED (tether_coll.c) */
    void *ended_ctx;
    int dump_busy; /* dump_fn runs (unlocked): set_dump_fn waits it out */
    uint64_t epoch, epoch_examples, epoch_size; /* tt_client_progress */
    uint64_t steps, step_us, wait_us;           /* tt_client_step_times */
};

static void wake(tt_client_t *c) {
    char b = 1;
    /* A full pipe already means "wake up"; nothing to do on EAGAIN. */
    while (write(c->wake_wr, &b, 1) < 0 && errno == EINTR) {
    }
}

static void drain_wake(tt_client_t *c) {
    char buf[64];
    while (read(c->wake_rd, buf, sizeof(buf)) > 0) {
    }
}

static void env_for(tt_client_t *c, tt_env_t *env, uint64_t rid) {
    tt_wire_env_init(env, c->opts.job_id, c->opts.worker_id, c->sm.generation, rid);
}

static int send_env(tt_client_t *c, const tt_env_t *env) {
    if (c->dealer == NULL)
        return TT_EAGAIN;
    return tt_zmq_send(c->dealer, NULL, 0, env, NULL, 0, 1);
}

static int send_join(tt_client_t *c) {
    const tether_job_settings_t *j = &c->opts.job;
    Tether__JobSettings st = TETHER__JOB_SETTINGS__INIT;
    st.min_workers = j->min_workers;
    st.max_workers = j->max_workers;
    st.last_call_ms = j->last_call_ms;
    st.heartbeat_ms = j->heartbeat_ms;
    st.heartbeat_timeout_ms = j->heartbeat_timeout_ms;
    st.global_batch = j->global_batch;
    st.join_timeout_ms = j->join_timeout_ms;
    st.checkpoint_every_steps = j->checkpoint_every_steps;
    st.checkpoint_every_ms = j->checkpoint_every_ms;
    st.checkpoint_keep = j->checkpoint_keep;
    st.max_regroups_per_hour = j->max_regroups_per_hour;
    st.flap_cooldown_ms = j->flap_cooldown_ms;
    Tether__JoinRequest jr = TETHER__JOIN_REQUEST__INIT;
    jr.settings = &st;
    jr.worker_id = c->opts.worker_id;
    jr.host = c->opts.host;
    jr.endpoint = c->opts.endpoint;
    jr.incarnation = c->incarnation;
    jr.last_step = c->sm.completed_step;
    tt_env_t env;
    env_for(c, &env, c->sm.op_rid);
    env.body_case = TETHER__ENVELOPE__BODY_JOIN;
    env.join = &jr;
    return send_env(c, &env);
}

static void send_heartbeat(tt_client_t *c, uint64_t now) {
    Tether__Heartbeat hb = TETHER__HEARTBEAT__INIT;
    hb.completed_step = c->sm.completed_step;
    hb.incarnation = c->incarnation;
    hb.stopped = c->sm.state == TT_CLIENT_BOUNDARY;
    hb.epoch = c->epoch;
    hb.epoch_examples = c->epoch_examples;
    hb.epoch_size = c->epoch_size;
    hb.steps = c->steps;
    hb.step_us = c->step_us;
    hb.wait_us = c->wait_us;
    tt_env_t env;
    env_for(c, &env, ++c->next_rid);
    env.body_case = TETHER__ENVELOPE__BODY_HEARTBEAT;
    env.heartbeat = &hb;
    int rc = send_env(c, &env);
    if (rc != TT_OK)
        TT_DEBUG("client", "heartbeat not sent (%s): coordinator not connected",
                 tt_status_name(rc));
    else
        TT_DEBUG("client", "heartbeat gen=%" PRIu64 " step=%" PRId64 " state=%s", c->sm.generation,
                 c->sm.completed_step, tt_client_state_name(c->sm.state));
    c->next_hb_ms = now + c->opts.job.heartbeat_ms;
}

/* Sends the request of the op in flight (Join, Boundary, Leave, Report). */
static int send_op(tt_client_t *c) {
    if (c->sm.op == TT_CLIENT_OP_JOIN)
        return send_join(c);
    tt_env_t env;
    env_for(c, &env, c->sm.op_rid);
    Tether__Boundary b = TETHER__BOUNDARY__INIT;
    Tether__Leave l = TETHER__LEAVE__INIT;
    Tether__ReportFailure r = TETHER__REPORT_FAILURE__INIT;
    Tether__DrainWorker d = TETHER__DRAIN_WORKER__INIT;
    if (c->sm.op == TT_CLIENT_OP_BOUNDARY) {
        b.completed_step = c->sm.completed_step;
        env.body_case = TETHER__ENVELOPE__BODY_BOUNDARY;
        env.boundary = &b;
    } else if (c->sm.op == TT_CLIENT_OP_LEAVE) {
        /* The last step first: the Leave carries none, and a "finished"
         * leave ends the job with the steps the coordinator knows of. */
        send_heartbeat(c, tt_clock_mono_ms());
        l.reason = c->reason;
        env.body_case = TETHER__ENVELOPE__BODY_LEAVE;
        env.leave = &l;
    } else if (c->sm.op == TT_CLIENT_OP_REPORT) {
        r.suspect_rank = c->report_rank;
        r.reason = c->reason;
        env.body_case = TETHER__ENVELOPE__BODY_REPORT_FAILURE;
        env.report_failure = &r;
    } else if (c->sm.op == TT_CLIENT_OP_DRAIN) {
        d.worker_id = c->opts.worker_id; /* this worker, at a step boundary */
        env.body_case = TETHER__ENVELOPE__BODY_DRAIN;
        env.drain = &d;
    } else {
        return TT_OK;
    }
    return send_env(c, &env);
}

/* Ends the op in flight with `rc` from the thread's side (e.g. the socket
 * could not be made) and wakes its waiter. */
static void fail_op(tt_client_t *c, int rc) {
    if (c->sm.op == TT_CLIENT_OP_NONE || c->sm.op_done)
        return;
    c->sm.op_done = 1;
    c->sm.op_rc = rc;
    c->outbox = 0;
    pthread_cond_broadcast(&c->cv);
}

static void do_reconnect(tt_client_t *c) {
    c->reconnect = 0;
    tt_zmq_monitor_close(c->dealer, &c->mon);
    tt_zmq_close(&c->dealer);
    char rid[TT_WIRE_MAX_ID + 1];
    char err[256] = "";
    int rc = tt_client_routing_id(rid, sizeof(rid), c->opts.worker_id, c->incarnation);
    tt_zmq_opts_t zo;
    tt_zmq_opts_default(&zo);
    zo.routing_id = rid;
    zo.key = &c->key;
    zo.key_kind = TT_ZAUTH_CONTROL;
    if (rc == TT_OK)
        rc = tt_zmq_dealer_watched(c->zctx, c->opts.coordinator, &zo, TT_ZMQ_REACH_EVENTS,
                                   &c->dealer, &c->mon, err, sizeof(err));
    tt_zmq_reach_init(&c->reach, tt_clock_mono_ms());
    if (rc != TT_OK) {
        snprintf(c->sm.last_error, sizeof(c->sm.last_error), "%s", err);
        TT_ERROR("client", "%s", err);
        fail_op(c, rc);
        return;
    }
    TT_DEBUG("client", "connecting to %s as %s", c->opts.coordinator, rid);
}

/* How long the coordinator may say nothing before the worker says so:
 * its own heartbeat timeout (the time after which the coordinator would
 * call this worker dead), and more than the two heartbeats after which a
 * reply counts as the end of a silence (TT_CLIENT_EV_RESUMED), so that
 * every warning is followed by its "answers again" line. */
static uint64_t silence_limit_ms(const tt_client_t *c) {
    uint64_t t = c->opts.job.heartbeat_timeout_ms, two = 2ull * c->opts.job.heartbeat_ms + 1;
    return t > two ? t : two;
}

/* A join that has had no connection for that long says so once: the join
 * itself may wait minutes for a coordinator that starts later, and
 * silence would look like a job waiting for its other workers. */
static void warn_no_connection(tt_client_t *c, uint64_t now) {
    if (!c->outbox || c->op_sent || c->op_warned || c->sm.op != TT_CLIENT_OP_JOIN ||
        now - c->op_started_ms < silence_limit_ms(c))
        return;
    c->op_warned = 1;
    char why[384];
    if (tt_zmq_reach_wrong_peer(&c->reach)) {
        tt_zmq_reach_why(&c->reach, "the coordinator", c->opts.coordinator, "TETHER_COORDINATOR",
                         now, why, sizeof(why));
        TT_WARN("client", "%s The join goes on trying.", why);
        return;
    }
    TT_WARN("client",
            "cannot connect to the coordinator at %s after %" PRIu64
            " ms; the join goes on trying (is it running there, and is the address right?)",
            c->opts.coordinator, now - c->op_started_ms);
}

/* A coordinator that stopped answering heartbeats (it died, its host or
 * the network did): the workers train on, but nobody can handle a failure
 * or a membership change meanwhile, which an operator should hear of from
 * the workers too. Logged once per silence. */
static void warn_silence(tt_client_t *c, uint64_t now) {
    uint64_t last = c->sm.last_reply_ms;
    if (c->silence_warned || last == 0 || !tt_client_sm_wants_heartbeat(&c->sm) ||
        now - last < silence_limit_ms(c))
        return;
    c->silence_warned = 1;
    TT_WARN("client",
            "no answer from the coordinator at %s for %" PRIu64
            " ms: a failure or membership change cannot be handled until it answers again (is "
            "it running?)",
            c->opts.coordinator, now - last);
}

/* One round of sending; returns the poll timeout in ms. Holds mu. */
static long prepare_round(tt_client_t *c) {
    uint64_t now = tt_clock_mono_ms();
    if (c->reconnect)
        do_reconnect(c);
    if (c->sm.retry_at_ms != 0 && now >= c->sm.retry_at_ms) {
        c->sm.retry_at_ms = 0;
        c->outbox = c->sm.op == TT_CLIENT_OP_JOIN && !c->sm.op_done;
    }
    if (c->outbox) {
        int rc = send_op(c);
        if (rc == TT_OK) {
            c->outbox = 0;
            c->op_sent = 1;
        } else if (rc != TT_EAGAIN) {
            fail_op(c, rc);
        }
    }
    tt_zmq_reach_drain(&c->reach, c->mon);
    warn_no_connection(c, now);
    warn_silence(c, now);
    int hb = tt_client_sm_wants_heartbeat(&c->sm) && !c->outbox && c->dealer != NULL;
    if (hb && now >= c->next_hb_ms)
        send_heartbeat(c, now);
    long timeout = IDLE_POLL_MS;
    if (hb && (long)(c->next_hb_ms - now) < timeout)
        timeout = (long)(c->next_hb_ms - now);
    if (c->outbox && timeout > OUTBOX_RETRY_MS)
        timeout = OUTBOX_RETRY_MS;
    if (c->sm.retry_at_ms != 0 && (long)(c->sm.retry_at_ms - now) < timeout)
        timeout = (long)(c->sm.retry_at_ms - now);
    return timeout;
}

/* Reports what a message changed: wakes the waiter, logs a resumed link and
 * runs the generation callback without the lock. Holds mu on entry/exit. */
static void after_message(tt_client_t *c, int ev) {
    /* A failure report names a rank of the generation that just ended: the
     * coordinator drops it as stale without answering, and a waiter on the
     * communication thread would hold the old backend open meanwhile. */
    if ((ev & TT_CLIENT_EV_GENERATION) && c->sm.op == TT_CLIENT_OP_REPORT)
        fail_op(c, TT_ESTALE);
    if (ev & TT_CLIENT_EV_OP_DONE)
        pthread_cond_broadcast(&c->cv);
    if (ev & TT_CLIENT_EV_RESUMED) {
        /* As loud as the warning it ends, when there was one. */
        TT_LOG(c->silence_warned ? TT_LOG_WARN : TT_LOG_INFO, "client",
               "coordinator %s answers again after %" PRIu64 " ms of silence", c->opts.coordinator,
               c->sm.silence_ms);
        c->silence_warned = 0;
    }
    if ((ev & TT_CLIENT_EV_ENDED) && c->ended_fn != NULL) {
        tt_client_ended_fn fn = c->ended_fn;
        void *ctx = c->ended_ctx;
        int status = tt_client_sm_status(&c->sm);
        pthread_mutex_unlock(&c->mu);
        fn(ctx, status);
        pthread_mutex_lock(&c->mu);
    }
    if (!(ev & TT_CLIENT_EV_GENERATION))
        return;
    tt_log_set_generation(c->sm.generation);
    tether_generation_fn fn = c->opts.generation_fn;
    if (fn == NULL)
        return;
    uint64_t gen = c->sm.generation;
    uint32_t rank = (uint32_t)c->sm.rank, world = c->sm.world_size;
    pthread_mutex_unlock(&c->mu);
    fn(c->opts.generation_ctx, gen, rank, world);
    pthread_mutex_lock(&c->mu);
}

/* A pushed DumpRequest: the flight-recorder text, built without the lock
 * (it snapshots other threads' recorders), sent back as a DumpReport. */
static void answer_dump(tt_client_t *c, uint64_t dump_id) {
    tt_client_dump_fn fn = c->dump_fn;
    void *ctx = c->dump_ctx;
    int32_t rank = c->sm.generation != 0 ? c->sm.rank : -1;
    c->dump_busy = 1;
    pthread_mutex_unlock(&c->mu);
    char *text = fn != NULL ? fn(ctx) : NULL;
    pthread_mutex_lock(&c->mu);
    c->dump_busy = 0;
    pthread_cond_broadcast(&c->cv);
    Tether__DumpReport r = TETHER__DUMP_REPORT__INIT;
    r.dump_id = dump_id;
    r.rank = rank;
    r.text = text != NULL ? text : "(no flight recorder in this process)";
    tt_env_t env;
    env_for(c, &env, ++c->next_rid);
    env.body_case = TETHER__ENVELOPE__BODY_DUMP_REPORT;
    env.dump_report = &r;
    int rc = send_env(c, &env);
    if (rc != TT_OK)
        TT_WARN("client", "dump report not sent: %s", tt_status_name(rc));
    free(text);
}

/* Drains the DEALER. Holds mu except inside tt_zmq_recv and callbacks. */
static void receive_all(tt_client_t *c) {
    for (;;) {
        tt_zmq_rx_t rx;
        char err[256] = "";
        int rc = tt_zmq_recv(c->dealer, 0, 1, NULL, &rx, err, sizeof(err));
        if (rc == TT_EAGAIN || rc == TT_ESYS)
            return;
        if (rc != TT_OK) {
            TT_WARN("client", "dropped a bad message from the coordinator: %s", err);
            continue;
        }
        if (tt_wire_check_scope(rx.env, c->opts.job_id, 0, err, sizeof(err)) != TT_OK) {
            TT_WARN("client", "dropped a message from the coordinator: %s", err);
            tt_zmq_rx_close(&rx);
            continue;
        }
        if (rx.env->body_case == TETHER__ENVELOPE__BODY_DUMP) {
            uint64_t id = rx.env->dump->dump_id;
            tt_zmq_rx_close(&rx);
            answer_dump(c, id);
            continue;
        }
        int ev = tt_client_sm_on_message(&c->sm, rx.env, tt_clock_mono_ms());
        tt_zmq_rx_close(&rx);
        if (ev < 0)
            TT_ERROR("client", "cannot apply a message: %s", tt_strerror(ev));
        else
            after_message(c, ev);
    }
}

static void *thread_main(void *arg) {
    tt_client_t *c = arg;
    pthread_mutex_lock(&c->mu);
    while (!c->stop) {
        long timeout = prepare_round(c);
        zmq_pollitem_t items[2] = {
            {.socket = NULL, .fd = c->wake_rd, .events = ZMQ_POLLIN},
            {.socket = c->dealer, .fd = -1, .events = ZMQ_POLLIN},
        };
        int n = c->dealer != NULL ? 2 : 1;
        pthread_mutex_unlock(&c->mu);
        int rc = zmq_poll(items, n, timeout);
        pthread_mutex_lock(&c->mu);
        if (rc < 0 && errno != EINTR) {
            TT_ERROR("client", "zmq_poll: %s", zmq_strerror(errno));
            break;
        }
        if (rc > 0 && (items[0].revents & ZMQ_POLLIN))
            drain_wake(c);
        if (c->dealer != NULL)
            receive_all(c);
    }
    fail_op(c, TT_ECLOSED);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static int make_pipe(tt_client_t *c) {
    int fds[2];
    if (pipe(fds) != 0)
        return TT_ESYS;
    for (int i = 0; i < 2; i++) {
        fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK);
        fcntl(fds[i], F_SETFD, FD_CLOEXEC);
    }
    c->wake_rd = fds[0];
    c->wake_wr = fds[1];
    return TT_OK;
}

static int init_sync(tt_client_t *c) {
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0)
        return TT_ESYS;
    /* Waits are measured on the monotonic clock, like tt_clock_mono_ms. */
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&c->cv, &ca) == 0 ? TT_OK : TT_ESYS;
    pthread_condattr_destroy(&ca);
    if (rc == TT_OK && pthread_mutex_init(&c->mu, NULL) != 0) {
        pthread_cond_destroy(&c->cv);
        rc = TT_ESYS;
    }
    return rc;
}

static void free_client(tt_client_t *c, int sync_ok) {
    tt_zmq_monitor_close(c->dealer, &c->mon);
    tt_zmq_close(&c->dealer);
    if (c->zctx != NULL)
        zmq_ctx_term(c->zctx);
    if (c->wake_rd >= 0)
        close(c->wake_rd);
    if (c->wake_wr >= 0)
        close(c->wake_wr);
    if (sync_ok) {
        pthread_cond_destroy(&c->cv);
        pthread_mutex_destroy(&c->mu);
    }
    tt_client_sm_release(&c->sm);
    memset(&c->key, 0, sizeof(c->key));
    free(c);
}

int tt_client_create(tt_client_t **out, const tt_client_opts_t *opts, char *err, size_t errlen) {
    *out = NULL;
    int rc = tt_client_opts_validate(opts, err, errlen);
    if (rc != TT_OK)
        return rc;
    tt_client_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return TT_ENOMEM;
    c->opts = *opts;
    c->wake_rd = c->wake_wr = -1;
    if ((rc = tt_zauth_load(&c->key, opts->key_file, err, errlen)) != TT_OK) {
        free(c);
        return rc;
    }
    tt_client_sm_init(&c->sm, opts->job.heartbeat_ms);
    int sync_ok = 0;
    TT_CHECK_GOTO(init_sync(c), rc, fail);
    sync_ok = 1;
    TT_CHECK_GOTO(make_pipe(c), rc, fail);
    c->zctx = zmq_ctx_new();
    TT_CHECK_GOTO(c->zctx != NULL ? TT_OK : TT_ESYS, rc, fail);
    TT_CHECK_GOTO(pthread_create(&c->thread, NULL, thread_main, c) == 0 ? TT_OK : TT_ESYS, rc,
                  fail);
    c->thread_started = 1;
    *out = c;
    return TT_OK;
fail:
    if (err != NULL && errlen > 0)
        snprintf(err, errlen, "cannot start the membership client: %s (%s)", tt_strerror(rc),
                 strerror(errno));
    free_client(c, sync_ok);
    return rc;
}

/* Starts `op`, hands its request to the thread and waits up to timeout_ms
 * for the outcome. Holds mu (released while waiting). */
static int run_op(tt_client_t *c, tt_client_op_t op, uint64_t timeout_ms) {
    int rc = tt_client_sm_begin(&c->sm, op, ++c->next_rid);
    if (rc != TT_OK)
        return rc;
    c->outbox = 1;
    c->op_started_ms = tt_clock_mono_ms();
    c->op_sent = c->op_warned = 0;
    wake(c);
    uint64_t deadline = c->op_started_ms + timeout_ms;
    while (!c->sm.op_done) {
        struct timespec ts = {.tv_sec = (time_t)(deadline / 1000),
                              .tv_nsec = (long)(deadline % 1000) * 1000000L};
        if (pthread_cond_timedwait(&c->cv, &c->mu, &ts) == ETIMEDOUT &&
            tt_clock_mono_ms() >= deadline)
            break;
    }
    int timed_out = !c->sm.op_done;
    c->outbox = 0;
    rc = tt_client_sm_finish(&c->sm, timed_out);
    return rc;
}

/* The timeout's sentence. It tells apart the waits an operator fixes
 * differently: no connection at all (a coordinator not running, a wrong
 * address: with ZMQ_IMMEDIATE the join leaves only once a ZeroMQ peer has
 * completed its handshake), TCP connections with no handshake (something
 * else listens there), a connection nothing answered on (a
 * coordinator whose loop is stuck), and a coordinator that answered but
 * formed no generation; after "busy" refusals the last one says why it
 * would not take the worker yet. */
static void join_timeout_error(tt_client_t *c, uint64_t wait) {
    if (!c->op_sent && tt_zmq_reach_wrong_peer(&c->reach)) {
        char why[384];
        tt_zmq_reach_why(&c->reach, "the coordinator", c->opts.coordinator, "TETHER_COORDINATOR",
                         tt_clock_mono_ms(), why, sizeof(why));
        snprintf(c->sm.last_error, sizeof(c->sm.last_error),
                 "could not talk to the coordinator within %" PRIu64 " ms (job %s): %s", wait,
                 c->opts.job_id, why);
        return;
    }
    if (!c->op_sent) {
        snprintf(c->sm.last_error, sizeof(c->sm.last_error),
                 "could not connect to the coordinator at %s within %" PRIu64
                 " ms (job %s): is it running there, and is the address right?",
                 c->opts.coordinator, wait, c->opts.job_id);
        return;
    }
    if (c->sm.last_reply_ms < c->op_started_ms) {
        snprintf(c->sm.last_error, sizeof(c->sm.last_error),
                 "the coordinator at %s is connected but answered nothing within %" PRIu64
                 " ms (job %s): is its event loop stuck? (its /healthz says)",
                 c->opts.coordinator, wait, c->opts.job_id);
        return;
    }
    char why[sizeof(c->sm.last_error)];
    snprintf(why, sizeof(why), "%s", c->sm.busy_refusals > 0 ? c->sm.last_error : "");
    snprintf(c->sm.last_error, sizeof(c->sm.last_error),
             "no generation formed within %" PRIu64 " ms (coordinator %s, job %s)%s%.300s", wait,
             c->opts.coordinator, c->opts.job_id, why[0] ? "; last refusal: " : "", why);
}

static uint64_t long_wait_ms(const tt_client_t *c) {
    return (uint64_t)c->opts.job.join_timeout_ms + c->opts.job.heartbeat_timeout_ms;
}

int tt_client_join(tt_client_t *c, uint32_t timeout_ms) {
    pthread_mutex_lock(&c->mu);
    int rc = TT_OK;
    tt_client_state_t st = c->sm.state;
    if (st == TT_CLIENT_JOINING || st == TT_CLIENT_MEMBER || st == TT_CLIENT_BOUNDARY) {
        snprintf(c->sm.last_error, sizeof(c->sm.last_error), "already %s (generation %" PRIu64 ")",
                 tt_client_state_name(st), c->sm.generation);
        rc = TT_EBUSY;
    } else if (st == TT_CLIENT_CLOSED) {
        rc = c->sm.closed_rc; /* the job finished: its sentence stays */
        if (rc == TT_ECLOSED)
            snprintf(c->sm.last_error, sizeof(c->sm.last_error), "this client left the job");
    }
    if (rc == TT_OK) {
        /* A new incarnation on every join: a fenced worker comes back as a
         * new process would, never as the one that was declared dead. */
        c->incarnation =
            tt_client_next_incarnation(c->incarnation, tt_clock_wall_ms(), (uint32_t)getpid());
        c->reconnect = 1;
        c->next_hb_ms = tt_clock_mono_ms() + c->opts.job.heartbeat_ms;
        uint64_t wait = timeout_ms ? timeout_ms : long_wait_ms(c);
        rc = run_op(c, TT_CLIENT_OP_JOIN, wait);
        if (rc == TT_ETIMEDOUT)
            join_timeout_error(c, wait);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int tt_client_step_done(tt_client_t *c, int64_t step) {
    pthread_mutex_lock(&c->mu);
    int rc = tt_client_sm_step(&c->sm, step);
    if (rc == TT_CLIENT_STEP_BOUNDARY) {
        TT_INFO("client", "step %" PRId64 " is the regroup step: waiting at the boundary", step);
        rc = run_op(c, TT_CLIENT_OP_BOUNDARY, long_wait_ms(c));
        if (rc == TT_ETIMEDOUT)
            snprintf(c->sm.last_error, sizeof(c->sm.last_error),
                     "no new generation nor Continue within %" PRIu64 " ms at step %" PRId64,
                     long_wait_ms(c), step);
    } else if (rc == TT_EINVAL) {
        snprintf(c->sm.last_error, sizeof(c->sm.last_error), "step_done in state %s: join first",
                 tt_client_state_name(c->sm.state));
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void tt_client_progress(tt_client_t *c, uint64_t epoch, uint64_t epoch_examples,
                        uint64_t epoch_size) {
    pthread_mutex_lock(&c->mu);
    c->epoch = epoch;
    c->epoch_examples = epoch_examples;
    c->epoch_size = epoch_size;
    pthread_mutex_unlock(&c->mu);
}

void tt_client_step_times(tt_client_t *c, uint64_t steps, uint64_t step_us, uint64_t wait_us) {
    pthread_mutex_lock(&c->mu);
    c->steps = steps;
    c->step_us = step_us;
    c->wait_us = wait_us;
    pthread_mutex_unlock(&c->mu);
}

static int short_op(tt_client_t *c, tt_client_op_t op, const char *reason) {
    snprintf(c->reason, sizeof(c->reason), "%s", reason ? reason : "");
    int rc = run_op(c, op, c->opts.request_timeout_ms);
    if (rc == TT_ETIMEDOUT)
        snprintf(c->sm.last_error, sizeof(c->sm.last_error),
                 "no acknowledgement from %s within %u ms", c->opts.coordinator,
                 c->opts.request_timeout_ms);
    return rc;
}

/* An op only a member may start (Report, Drain); `what` names it in the
 * refusal. With mu held. */
static int member_op(tt_client_t *c, tt_client_op_t op, const char *reason, const char *what) {
    if (c->sm.state == TT_CLIENT_MEMBER)
        return short_op(c, op, reason);
    snprintf(c->sm.last_error, sizeof(c->sm.last_error), "%s in state %s: not a member", what,
             tt_client_state_name(c->sm.state));
    return c->sm.state == TT_CLIENT_FENCED ? TT_EFENCED : TT_EINVAL;
}

int tt_client_report_failure(tt_client_t *c, uint32_t suspect_rank, const char *reason) {
    pthread_mutex_lock(&c->mu);
    c->report_rank = suspect_rank;
    int rc = member_op(c, TT_CLIENT_OP_REPORT, reason, "report_failure");
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int tt_client_leave(tt_client_t *c, const char *reason) {
    pthread_mutex_lock(&c->mu);
    int rc = TT_OK;
    if (tt_client_sm_wants_heartbeat(&c->sm)) {
        rc = short_op(c, TT_CLIENT_OP_LEAVE, reason);
        /* Gone either way: heartbeats stop and the coordinator expires us
         * if the Leave was lost. */
        c->sm.state = TT_CLIENT_CLOSED;
    } else if (c->sm.state != TT_CLIENT_CLOSED) {
        snprintf(c->sm.last_error, sizeof(c->sm.last_error), "leave in state %s: not joined",
                 tt_client_state_name(c->sm.state));
        rc = TT_EINVAL;
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int tt_client_drain(tt_client_t *c) {
    pthread_mutex_lock(&c->mu);
    int rc = member_op(c, TT_CLIENT_OP_DRAIN, NULL, "drain");
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void tt_client_destroy(tt_client_t **pc) {
    if (pc == NULL || *pc == NULL)
        return;
    tt_client_t *c = *pc;
    *pc = NULL;
    pthread_mutex_lock(&c->mu);
    int joined = tt_client_sm_wants_heartbeat(&c->sm) && c->sm.op == TT_CLIENT_OP_NONE;
    pthread_mutex_unlock(&c->mu);
    if (joined)
        tt_client_leave(c, "shutdown");
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    wake(c);
    pthread_mutex_unlock(&c->mu);
    if (c->thread_started)
        pthread_join(c->thread, NULL);
    free_client(c, 1);
}

void tt_client_view(tt_client_t *c, tt_client_view_t *v) {
    pthread_mutex_lock(&c->mu);
    v->state = c->sm.state;
    v->generation = c->sm.generation;
    v->rank = c->sm.rank;
    v->world_size = c->sm.world_size;
    v->resume_step = c->sm.resume_step;
    v->job_steps = c->sm.job_steps;
    v->ps_until_step = c->sm.ps_until_step;
    v->job_nonce = c->sm.job_nonce;
    v->shrink_of = c->sm.shrink_of;
    v->nshrink = c->sm.nshrink;
    memcpy(v->shrink_exclude, c->sm.shrink_exclude, sizeof(v->shrink_exclude));
    v->regroup_after_step = c->sm.regroup_after_step;
    v->incarnation = c->incarnation;
    v->app_generation = c->sm.app_generation;
    v->ckpt_requested = c->sm.ckpt_requested;
    v->ckpt_served = c->sm.ckpt_served;
    v->status = tt_client_sm_status(&c->sm);
    pthread_mutex_unlock(&c->mu);
}

const tt_client_opts_t *tt_client_opts(const tt_client_t *c) {
    return &c->opts;
}

const tt_zauth_key_t *tt_client_key(const tt_client_t *c) {
    return &c->key;
}

/* The table is sorted by rank but may list only neighbours: search it. */
static int find_member(const tt_client_sm_t *sm, uint32_t rank, tether_member_t *info) {
    for (uint32_t i = 0; sm->generation != 0 && i < sm->nmembers; i++) {
        if (sm->members[i].rank == rank) {
            *info = sm->members[i];
            return TT_OK;
        }
    }
    return TT_ENOTFOUND;
}

int tt_client_member(tt_client_t *c, uint32_t rank, tether_member_t *info) {
    pthread_mutex_lock(&c->mu);
    int rc = find_member(&c->sm, rank, info);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int tt_client_member_of(tt_client_t *c, uint64_t gen, uint32_t rank, tether_member_t *info) {
    pthread_mutex_lock(&c->mu);
    int rc = c->sm.generation == gen ? find_member(&c->sm, rank, info) : TT_ESTALE;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void tt_client_set_dump_fn(tt_client_t *c, tt_client_dump_fn fn, void *ctx) {
    pthread_mutex_lock(&c->mu);
    while (c->dump_busy) /* the old callback's context may be going away */
        pthread_cond_wait(&c->cv, &c->mu);
    c->dump_fn = fn;
    c->dump_ctx = ctx;
    pthread_mutex_unlock(&c->mu);
}

void tt_client_set_ended_fn(tt_client_t *c, tt_client_ended_fn fn, void *ctx) {
    pthread_mutex_lock(&c->mu);
    c->ended_fn = fn;
    c->ended_ctx = ctx;
    pthread_mutex_unlock(&c->mu);
}

int tt_client_poll_generation(tt_client_t *c, uint64_t *gen) {
    pthread_mutex_lock(&c->mu);
    int changed = c->sm.generation != 0 && c->sm.generation != c->sm.polled_generation;
    if (changed) {
        c->sm.polled_generation = c->sm.generation;
        if (gen != NULL)
            *gen = c->sm.generation;
    }
    pthread_mutex_unlock(&c->mu);
    return changed;
}

void tt_client_last_error(tt_client_t *c, char *out, size_t n) {
    pthread_mutex_lock(&c->mu);
    snprintf(out, n, "%s", c->sm.last_error);
    pthread_mutex_unlock(&c->mu);
}

/* tt_client: libtether's membership client. It owns the DEALER to the
 * coordinator, the background thread that heartbeats and receives pushed
 * messages, and the state the application reads (generation, rank, world,
 * members). It is split in three parts so that the logic can be tested
 * without sockets or threads:
 *   - options (tt_client_opts.c): defaults, environment parsing through an
 *     injected lookup, validation, routing ids and incarnations; pure;
 *   - the state machine (tt_client_sm.c): how each message from the
 *     coordinator and each completed step moves the state; pure, time comes
 *     in as now_ms;
 *   - the client (tt_client.c): thread, socket, locking, blocking calls.
 * It does not own collectives, the wire format (tt_wire) or sockets'
 * options (tt_zmq); the public API (tether_api.c) is a thin layer over it.
 *
 * Threading: the background thread is the only one that touches the DEALER
 * (ZeroMQ sockets are single-threaded). Application threads post requests
 * into the mutex-protected state, wake the thread through a pipe that
 * zmq_poll watches next to the DEALER, and wait on a condition variable for
 * the outcome. A pipe is used instead of an inproc PAIR because it needs no
 * second ZeroMQ socket per client and zmq_poll watches plain fds as well. */
#ifndef TT_CLIENT_H
#define TT_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "tether/tether.h"
#include "tt_wire.h"
#include "tt_zauth.h"

typedef tether_opts_t tt_client_opts_t;

/* ---- options (pure) ---- */

/* Returns the value of environment variable `name`, or NULL when unset. */
typedef const char *(*tt_client_lookup_fn)(void *ctx, const char *name);

/* Defaults; worker_id "<hostname>-<pid>" and host from gethostname(). */
void tt_client_opts_default(tt_client_opts_t *o);

/* Applies the TETHER_* variables (see tether_opts_from_env) read through
 * `lookup`, then validates. TT_OK or TT_EINVAL with "TETHER_X='v': why" in
 * `err` (may be NULL). Pure apart from the lookup. */
int tt_client_opts_from_lookup(tt_client_opts_t *o, tt_client_lookup_fn lookup, void *ctx,
                               char *err, size_t errlen);

/* See tether_opts_validate. Pure. */
int tt_client_opts_validate(const tt_client_opts_t *o, char *err, size_t errlen);

/* "worker-<worker_id>.<incarnation>" (docs/protocol.md). TT_EINVAL when
 * it does not fit `n` or the wire's id limit. */
int tt_client_routing_id(char *out, size_t n, const char *worker_id, uint64_t incarnation);

/* An incarnation that differs from `prev` and from any other process
 * start: (wall_ms << 16 | pid & 0xffff), and at least prev + 1. */
uint64_t tt_client_next_incarnation(uint64_t prev, uint64_t wall_ms, uint32_t pid);

/* ---- state machine (pure, not thread safe: the caller locks) ---- */

typedef enum {
    TT_CLIENT_IDLE = 0,     /* not joined (yet, or after a failed join) */
    TT_CLIENT_JOINING = 1,  /* join sent, waiting for a generation */
    TT_CLIENT_MEMBER = 2,   /* member of `generation` */
    TT_CLIENT_BOUNDARY = 3, /* at the regroup step, waiting (Boundary sent) */
    TT_CLIENT_FENCED = 4,   /* declared dead: must join again */
    TT_CLIENT_FAILED = 5,   /* job failed for good */
    TT_CLIENT_CLOSED = 6,   /* left the job, or the job finished (closed_rc) */
} tt_client_state_t;

/* The blocking request an application thread waits on; one at a time. */
typedef enum {
    TT_CLIENT_OP_NONE = 0,
    TT_CLIENT_OP_JOIN,
    TT_CLIENT_OP_BOUNDARY,
    TT_CLIENT_OP_LEAVE,
    TT_CLIENT_OP_REPORT,
    TT_CLIENT_OP_DRAIN,
} tt_client_op_t;

/* Event bits returned by tt_client_sm_on_message. */
enum {
    TT_CLIENT_EV_GENERATION = 1, /* a new generation was installed */
    TT_CLIENT_EV_OP_DONE = 2,    /* the pending op has its outcome */
    TT_CLIENT_EV_RESUMED = 4,    /* first reply after a silence */
    /* The worker stopped being a member (or joiner) on the coordinator's
     * word: fenced, job failed, job finished. A collective of the old
     * generation can no longer complete. */
    TT_CLIENT_EV_ENDED = 8,
};

/* tt_client_sm_step result besides tether status codes: the announced
 * regroup step is reached; the caller begins TT_CLIENT_OP_BOUNDARY, sends
 * Boundary and waits. */
#define TT_CLIENT_STEP_BOUNDARY 2

typedef struct tt_client_sm {
    tt_client_state_t state;
    uint32_t heartbeat_ms; /* for silence detection */
    uint64_t generation;   /* 0: none */
    int32_t rank;          /* -1: none */
    uint32_t world_size;
    int64_t resume_step;
    int64_t job_steps;     /* Generation.job_steps; 0: none or unknown */
    int64_t ps_until_step; /* Generation.ps_until_step; 0: none */
    uint64_t job_nonce;    /* Generation.job_nonce; 0: none */
    uint64_t shrink_of;    /* Generation.shrink_of; 0: none */
    uint32_t nshrink;      /* its shrink_exclude, ascending old ranks */
    uint32_t shrink_exclude[TT_WIRE_MAX_SHRINK];
    tether_member_t *members; /* nmembers entries by rank, owned: all of
                               * them up to 256 ranks, else this rank and
                               * its ring neighbours (docs/protocol.md) */
    uint32_t nmembers;
    int64_t completed_step;     /* -1: none */
    int64_t regroup_after_step; /* -1: none announced */
    uint64_t app_generation;    /* last generation handed to the app */
    uint64_t polled_generation; /* last generation tether_poll_generation saw */
    tt_client_op_t op;
    uint64_t op_rid;
    int op_done;
    int op_rc;
    uint64_t last_reply_ms; /* 0: none yet */
    uint64_t silence_ms;    /* gap before the last RESUMED event */
    int closed_rc;          /* status of CLOSED: TT_ECLOSED (left) or TT_EJOBDONE */
    /* A join the coordinator refused with TT_EBUSY (flap cool-down, full
     * wait list) is sent again at retry_at_ms (0: no retry due), within the
     * join's own deadline; busy_refusals counts them for the timeout text. */
    uint64_t retry_at_ms;
    uint32_t busy_refusals;
    /* Checkpoint requests of the job, from the latest HeartbeatReply. */
    uint64_t ckpt_requested, ckpt_served;
    char last_error[512];
} tt_client_sm_t;

void tt_client_sm_init(tt_client_sm_t *sm, uint32_t heartbeat_ms);
void tt_client_sm_release(tt_client_sm_t *sm);

/* Starts blocking op `op` with request id `rid`: JOIN forgets the old
 * generation and moves to JOINING,
 * BOUNDARY to BOUNDARY. TT_EBUSY when another op is pending. */
int tt_client_sm_begin(tt_client_sm_t *sm, tt_client_op_t op, uint64_t rid);

/* Ends the pending op (the waiter got its answer or gave up) and returns
 * its outcome; on `timed_out` the outcome is TT_ETIMEDOUT and a JOIN falls
 * back to IDLE, a BOUNDARY to MEMBER. */
int tt_client_sm_finish(tt_client_sm_t *sm, int timed_out);

/* Applies one decoded message from the coordinator at `now_ms`. Returns
 * the TT_CLIENT_EV_* bits (0: nothing the caller must act on) or TT_ENOMEM
 * (state unchanged). Messages that do not fit the state are ignored.
 * TT_EJOBDONE (an Error, or a HeartbeatReply with job_state FINISHED)
 * moves any state to CLOSED with closed_rc TT_EJOBDONE and ends the op in
 * flight with it. A TT_EBUSY answer to the join in flight is no outcome:
 * the join stays pending and retry_at_ms is set one heartbeat ahead. */
int tt_client_sm_on_message(tt_client_sm_t *sm, const tt_env_t *env, uint64_t now_ms);

/* The application completed `step`. Returns TT_OK, TETHER_REGROUPED (a
 * generation newer than the app's is installed; now acknowledged),
 * TT_CLIENT_STEP_BOUNDARY (the announced regroup step is reached),
 * TT_EFENCED, TT_EJOBFAILED, TT_ECLOSED, TT_EJOBDONE or TT_EINVAL (not a
 * member). */
int tt_client_sm_step(tt_client_sm_t *sm, int64_t step);

/* 1 when heartbeats are due in this state (JOINING, MEMBER, BOUNDARY). */
int tt_client_sm_wants_heartbeat(const tt_client_sm_t *sm);

const char *tt_client_state_name(tt_client_state_t s);

/* The state as a status: TT_OK (joining, member, boundary), TT_EFENCED,
 * TT_EJOBFAILED, TT_ECLOSED, TT_EINVAL (idle). */
int tt_client_state_status(tt_client_state_t s);

/* Like tt_client_state_status, but CLOSED reads as sm->closed_rc, so a
 * client whose job finished reports TT_EJOBDONE rather than TT_ECLOSED. */
int tt_client_sm_status(const tt_client_sm_t *sm);

/* ---- the client (thread safe unless noted) ---- */

typedef struct tt_client tt_client_t;

/* Copies `opts` (validated), creates the ZeroMQ context and the wake pipe,
 * starts the thread; connects only on join. TT_OK, TT_EINVAL (`err`),
 * TT_ENOMEM, TT_ESYS. */
int tt_client_create(tt_client_t **out, const tt_client_opts_t *opts, char *err, size_t errlen);

/* Leaves when joined, stops the thread, closes everything. Accepts NULL;
 * sets *c = NULL. Not concurrent with other calls on the object. */
void tt_client_destroy(tt_client_t **c);

/* Blocking operations; see tether_join / tether_step_done /
 * tether_report_failure / tether_leave / tether_drain for the contracts. */
int tt_client_join(tt_client_t *c, uint32_t timeout_ms);
int tt_client_step_done(tt_client_t *c, int64_t step);
/* Step timing totals (tether_step_stats: steps, their wall time and the
 * time blocked on communication, in us); the next heartbeat carries them
 * for `tetherctl members`. */
void tt_client_step_times(tt_client_t *c, uint64_t steps, uint64_t step_us, uint64_t wait_us);
/* Where the job is in its data; the next heartbeat carries it. */
void tt_client_progress(tt_client_t *c, uint64_t epoch, uint64_t epoch_examples,
                        uint64_t epoch_size);
int tt_client_report_failure(tt_client_t *c, uint32_t suspect_rank, const char *reason);
int tt_client_leave(tt_client_t *c, const char *reason);
int tt_client_drain(tt_client_t *c);

/* Consistent snapshot of the membership view. `members` (may be NULL)
 * receives up to `cap` entries. */
typedef struct tt_client_view {
    tt_client_state_t state;
    int status; /* tt_client_sm_status: TT_OK while joining or a member */
    uint64_t generation;
    int32_t rank;
    uint32_t world_size;
    int64_t resume_step;
    int64_t job_steps;
    int64_t ps_until_step;
    uint64_t job_nonce;
    uint64_t shrink_of; /* Generation.shrink_of / shrink_exclude; 0: none */
    uint32_t nshrink;
    uint32_t shrink_exclude[TT_WIRE_MAX_SHRINK];
    int64_t regroup_after_step;
    uint64_t incarnation;
    uint64_t app_generation; /* newest generation handed to the application */
    uint64_t ckpt_requested; /* the job's checkpoint requests so far */
    uint64_t ckpt_served;    /* newest request a committed checkpoint served */
} tt_client_view_t;
void tt_client_view(tt_client_t *c, tt_client_view_t *v);
int tt_client_member(tt_client_t *c, uint32_t rank, tether_member_t *info);

/* The options the client was created with (immutable afterwards). */
const tt_client_opts_t *tt_client_opts(const tt_client_t *c);
/* The cluster key read from opts->key_file (off when none); immutable,
 * valid until tt_client_destroy. */
const tt_zauth_key_t *tt_client_key(const tt_client_t *c);
/* Like tt_client_member, but only while `gen` is the current generation:
 * TT_OK, TT_ESTALE (another generation is installed) or TT_ENOTFOUND
 * (rank not in the JoinReply's table). */
int tt_client_member_of(tt_client_t *c, uint64_t gen, uint32_t rank, tether_member_t *info);

/* Answers the coordinator's DumpRequest: called on the background thread
 * without the lock; returns malloc'd text (freed by the client) or NULL.
 * fn NULL: no answer. Any thread. */
typedef char *(*tt_client_dump_fn)(void *ctx);
void tt_client_set_dump_fn(tt_client_t *c, tt_client_dump_fn fn, void *ctx);
int tt_client_poll_generation(tt_client_t *c, uint64_t *gen);

/* Told on the background thread, without the lock, each time the worker
 * stops being a member on the coordinator's word (TT_CLIENT_EV_ENDED),
 * with the new status (TT_EFENCED, TT_EJOBFAILED, TT_EJOBDONE): the
 * collectives use it to end a collective that can no longer complete.
 * fn NULL: nobody. `ctx` must outlive the client's thread (it is called
 * until tt_client_destroy returns). Any thread. */
typedef void (*tt_client_ended_fn)(void *ctx, int status);
void tt_client_set_ended_fn(tt_client_t *c, tt_client_ended_fn fn, void *ctx);

/* Copies the last error sentence into `out`. */
void tt_client_last_error(tt_client_t *c, char *out, size_t n);

#endif

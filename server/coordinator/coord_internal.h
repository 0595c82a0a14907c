/* coord_internal: the daemon's private struct, shared by coord.c (life
 * cycle, timer, outbox, persistence), coord_handlers.c (requests),
 * coord_events.c (rdzv events to messages), coord_monitor.c (socket
 * monitor), coord_ckpt.c (coordinated checkpoints) and the other coord_*.c
 * request files. Not installed, not used outside server/coordinator/. */
#ifndef TT_COORD_INTERNAL_H
#define TT_COORD_INTERNAL_H

#include "ckpt_book.h"
#include "coord.h"
#include "rdzv.h"
#include "tt_uvzmq.h"
#include "tt_wire.h"
#include "tt_zmq.h"

#include <uv.h>

typedef struct coord_job {
    tt_rdzv_t *rdzv;
    uint64_t formed_gen;   /* last generation formed (kept in the state file) */
    int64_t resume_step;   /* its first step, for members catching up */
    int64_t ps_until_step; /* its Generation.ps_until_step */
    /* Its Generation.shrink_of / shrink_exclude (rdzv.h, GENERATION_FORMED;
     * kept in the state file). shrink_of 0: none. */
    uint64_t shrink_of;
    uint32_t n_shrink_exclude;
    uint32_t shrink_exclude[TT_RDZV_SHRINK_MAX];
    uint64_t nonce;           /* Generation.job_nonce: random at creation, persisted */
    int64_t formed_job_steps; /* Generation.job_steps of formed_gen; 0: none or unknown */
    uint64_t lost_version;    /* shard placement already regrouped for a lost shard */
    tt_ckpt_book_t ckpt;      /* checkpoint requests and committed records */
    int commit_busy;          /* a CheckpointCommit of this job runs in the pool */
    /* Where the job is in its data, from the heartbeat with the highest
     * completed step that carried it (memory only: heartbeats repeat it). */
    int64_t progress_step;
    uint64_t epoch, epoch_examples, epoch_size;
    /* The current generation's collective bootstrap id, offered by its
     * rank 0 (coord_commid.c; kept in the state file). comm_id_gen 0:
     * none. */
    uint64_t comm_id_gen;
    size_t comm_id_len;
    uint8_t comm_id[TT_WIRE_MAX_COMM_ID];
    /* CommIdRequests held until the id comes (coord_commid.c; memory
     * only: a restarted coordinator's workers ask again), all for
     * generation comm_wait_gen, at most one per member; the earliest end
     * of their waits in comm_wait_next. */
    struct coord_commid_wait *comm_waits;
    uint64_t comm_wait_gen, comm_wait_next;
    /* When the first request for comm_wait_gen was held, and when the
     * wait is next logged. */
    uint64_t comm_wait_since, comm_wait_note;
} coord_job_t;

_Static_assert(TT_RDZV_SHRINK_MAX == TT_WIRE_MAX_SHRINK,
               "a shrink the rendezvous makes must fit in Generation.shrink_exclude");

/* Which worker a TCP connection (by fd) belongs to, learned from ZMQ_SRCFD
 * of its messages, so a monitor DISCONNECTED event names a worker. */
typedef struct coord_conn {
    char job_id[TT_RDZV_ID_MAX];
    char worker_id[TT_RDZV_ID_MAX];
    uint64_t incarnation;
    int used;
} coord_conn_t;

/* A forgotten job's id and the last generation it used (CoordState). */
typedef struct coord_forgotten {
    char job_id[TT_RDZV_ID_MAX];
    uint64_t generation;
} coord_forgotten_t;

/* A reply waiting for the state write that must precede it. */
typedef struct coord_out {
    struct coord_out *next;
    size_t peer_len;
    uint8_t peer[TT_ZMQ_MAX_PEER];
    size_t len;
    uint8_t *env; /* encoded envelope */
} coord_out_t;

struct tt_coord {
    uv_loop_t *loop;
    void *zctx;
    void *router;
    tt_zauth_key_t key;
    tt_zauth_zap_t *zap;         /* admits holders of `key` to the router */
    tt_zauth_watch_t handshakes; /* the router's failed ones (coord_monitor.c) */
    void *monitor;               /* PAIR receiving monitor events */
    tt_uvzmq_t *router_w;
    tt_uvzmq_t *monitor_w;
    uv_timer_t timer;
    uv_timer_t pulse;  /* every COORD_PULSE_MS: notices the loop standing still */
    uint64_t awake_ms; /* when the loop last ran (a timer, a message) */
    char endpoint[256];
    char state_path[4096];
    char id[64];

    coord_job_t *jobs;
    size_t njobs, capjobs;

    coord_conn_t *conns; /* indexed by fd */
    size_t nconns;

    coord_out_t *out_head, *out_tail; /* held replies, in order */
    int save_inflight;                /* a state write runs in the pool */
    int save_again;                   /* state changed during that write */
    uint64_t save_seq;                /* bumps on every durable change */
    uv_work_t save_work;
    uint8_t *save_buf;
    size_t save_len;
    int save_rc;
    char save_err[256];
    int closing;
    uint64_t dirty_since_ms;  /* non-durable progress to flush lazily */
    struct coord_dump *dumps; /* flight-recorder collections in flight (coord_dump.c) */
    uint64_t next_dump_id;
    struct tt_shards *shards;     /* shard registry (coord_shards.c), created on first use */
    tt_rdzv_guard_t guard;        /* applied to every job's rdzv */
    uint32_t shard_timeout_ms;    /* of the shard registry, made on first use */
    uint32_t ps_fallback_steps;   /* tt_coord_opts_t's */
    uint64_t boots;               /* starts on this state file, this one included */
    coord_forgotten_t *forgotten; /* ids forgotten and not started again */
    size_t nforgotten;
};

/* Placement versions one coordinator start may hand out (CoordState.boots). */
#define COORD_VERSIONS_PER_BOOT 1000000u

/* coord.c */
coord_job_t *coord_find_job(tt_coord_t *c, const char *job_id);
/* Takes *rdzv (sets it NULL) after applying the daemon's guard rails. */
int coord_add_job(tt_coord_t *c, tt_rdzv_t **rdzv);
/* Frees the job's rendezvous and checkpoint book and closes the gap:
 * pointers to later jobs move (everything else finds jobs by id). */
void coord_remove_job(tt_coord_t *c, coord_job_t *job);
/* The generation job `id` must start after (0: never forgotten), and
 * noting a forgotten one (TT_OK or TT_ENOMEM); coord_unforget when the id
 * starts again. */
uint64_t coord_forgotten_generation(const tt_coord_t *c, const char *id);
int coord_note_forgotten(tt_coord_t *c, const char *id, uint64_t generation);
void coord_unforget(tt_coord_t *c, const char *id);
void coord_rearm(tt_coord_t *c);
/* The loop stood still since it last ran (a gap of COORD_STALL_MS): that
 * time is forgiven to every heartbeat (tt_rdzv_forgive, tt_shards_forgive)
 * and 1 returned; the caller rearms. Call before judging any age. */
int coord_check_stall(tt_coord_t *c, uint64_t now);
/* Queue one encoded reply; `hold` keeps it behind the pending state write. */
void coord_send(tt_coord_t *c, const uint8_t *peer, size_t peer_len, const tt_env_t *env, int hold);
void coord_request_save(tt_coord_t *c);
void coord_send_error(tt_coord_t *c, const uint8_t *peer, size_t peer_len, const char *job,
                      uint64_t req, int code, const char *msg);
void coord_send_ack(tt_coord_t *c, const uint8_t *peer, size_t peer_len, const char *job,
                    uint64_t req, int hold);

/* coord_events.c */
void coord_drain_events(tt_coord_t *c, coord_job_t *job);
int coord_worker_peer(const char *worker_id, uint64_t incarnation, uint8_t *peer, size_t *peer_len);
void coord_send_generation(tt_coord_t *c, coord_job_t *job, const char *worker_id,
                           uint64_t incarnation, uint64_t req, int hold);

/* coord_handlers.c: one decoded request and its reply helpers. */
typedef struct coord_req {
    tt_coord_t *c;
    const tt_zmq_rx_t *rx;
    const tt_env_t *env;
    uint64_t now;
} coord_req_t;

void coord_on_router(void *sock, void *arg);
void coord_reply(const coord_req_t *q, tt_env_t *env);
void coord_reply_error(const coord_req_t *q, int code, const char *msg);
void coord_reply_ack(const coord_req_t *q);
/* The request's job, or NULL after replying Error `code` ("unknown job"). */
coord_job_t *coord_job_or_error(const coord_req_t *q, int code);
/* A HeartbeatReply with hr's fields and the job's checkpoint counters, as
 * the answer to request `req` or pushed (req 0). */
void coord_send_heartbeat_reply(tt_coord_t *c, const uint8_t *peer, size_t peer_len,
                                const coord_job_t *job, const tt_rdzv_hb_reply_t *hr, uint64_t req);
void coord_init_reply(const coord_req_t *q, tt_env_t *env, uint64_t gen);

/* coord_commid.c: the relay of a generation's collective bootstrap id. */
void coord_on_comm_id_offer(const coord_req_t *q);
void coord_on_comm_id_request(const coord_req_t *q);
/* Answers the job's held requests that are due: all of them when their
 * generation is no longer running (the verdict a new request would get),
 * else those whose wait is over (not ready yet). After every event drain. */
void coord_commid_settle(tt_coord_t *c, coord_job_t *job, uint64_t now);
/* The earliest end of a held request's wait (UINT64_MAX: none held). */
uint64_t coord_commid_deadline(const tt_coord_t *c);
/* Frees the job's held requests unanswered (the job or daemon goes). */
void coord_commid_drop(coord_job_t *job);
/* Members waiting for the running generation's id: how many requests are
 * held, for how long members have asked, and rank 0's worker id and host
 * (all zero / "" when none waits). For status, metrics and the log. */
typedef struct {
    uint32_t n;
    uint64_t wait_ms;
    char from[TT_RDZV_ID_MAX];
    char host[TT_RDZV_HOST_MAX];
} coord_commid_waiting_t;
void coord_commid_waiting(const coord_job_t *job, uint64_t now, coord_commid_waiting_t *out);

/* coord_queries.c: operator queries (tetherctl). */
void coord_on_status(const coord_req_t *q);
void coord_on_members(const coord_req_t *q);

/* coord_shards.c: shard servers, tensor tables, placements. */
void coord_on_shard_heartbeat(const coord_req_t *q);
void coord_on_shards(const coord_req_t *q);
void coord_on_declare(const coord_req_t *q);
void coord_on_placement(const coord_req_t *q);
void coord_on_shard_stall(const coord_req_t *q);
/* Regroups every RUNNING job whose placement still puts chunks on a shard
 * that stopped heartbeating (once per placement version), so its workers
 * fetch a placement on the live shards. Called from the timer. */
void coord_check_shards(tt_coord_t *c, uint64_t now);
/* When coord_check_shards next has something to look at (UINT64_MAX: no
 * shard alive, or no job). */
uint64_t coord_shards_deadline(const tt_coord_t *c, uint64_t now);
/* Whether a shard server is alive now (PS fallback needs one). */
int coord_shards_live(tt_coord_t *c, uint64_t now);
/* Shard list for replies: *infos and *ptrs are malloc'd (free both); the
 * strings point into the registry. 0 or TT_ENOMEM. */
int coord_shard_infos(tt_coord_t *c, uint64_t now, Tether__ShardInfo **infos,
                      Tether__ShardInfo ***ptrs, size_t *n);

/* coord_dump.c: tetherctl dump JOB, relayed to every member. */
void coord_on_dump(const coord_req_t *q);
void coord_on_dump_report(const coord_req_t *q);
/* Drops collections in flight without replying (shutdown). */
void coord_dump_close(tt_coord_t *c);

/* coord_ckpt.c: coordinated checkpoints (docs/checkpoints.md). */
void coord_on_checkpoint_request(const coord_req_t *q);
void coord_on_checkpoint_commit(const coord_req_t *q);
void coord_on_checkpoint_failure(const coord_req_t *q);
void coord_on_checkpoints(const coord_req_t *q);
/* Fires the timer schedule of every RUNNING job that is due (timer). */
void coord_ckpt_tick(tt_coord_t *c, uint64_t now);
/* When coord_ckpt_tick next has something to do (UINT64_MAX: nothing). */
uint64_t coord_ckpt_deadline(const tt_coord_t *c, uint64_t now);
/* Record <-> wire. to_pb borrows r's strings; from_pb: TT_ECORRUPT when a
 * string does not fit. */
void coord_ckpt_rec_to_pb(const tt_ckpt_rec_t *r, Tether__CheckpointRecord *p);
void coord_ckpt_fail_to_pb(const tt_ckpt_fail_t *f, Tether__CheckpointFailure *p);
int coord_ckpt_rec_from_pb(const Tether__CheckpointRecord *p, tt_ckpt_rec_t *r);

/* coord_monitor.c */
int coord_monitor_start(tt_coord_t *c, char *err, size_t errlen);
void coord_conn_note(tt_coord_t *c, int fd, const char *job, const char *worker_id,
                     uint64_t incarnation);

/* coord_state.c */
void coord_settings_to_pb(const tt_rdzv_settings_t *s, Tether__JobSettings *p);
int coord_state_encode(tt_coord_t *c, uint8_t **buf, size_t *len);
int coord_state_load(tt_coord_t *c, char *err, size_t errlen);

#endif

/* tether.h: the public API of libtether, the library a training process
 * links to take part in a tether job. This is the installed header and an
 * ABI promise: only tether_* / TETHER_* names live here, and it includes
 * nothing but <stdint.h> and <stddef.h>. It is organised in sections
 * (status codes, options, lifecycle, membership, steps and failures,
 * collectives, the data-parallel step).
 * It does not describe the wire protocol (docs/protocol.md) or internals.
 *
 * Threading model: a tether_t runs one background thread that owns the
 * connection to the coordinator and sends heartbeats, and a communication
 * thread that runs the collectives (see "Collectives"). Every function may be
 * called from any application thread; the blocking calls (tether_join,
 * tether_step_done, tether_leave) must not run concurrently with each other
 * on one tether_t (a second one returns TETHER_EBUSY). The library never
 * prints to stdout and never exits the process. */
#ifndef TETHER_TETHER_H
#define TETHER_TETHER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define TETHER_API __attribute__((visibility("default")))
#else
#define TETHER_API
#endif

/* ------------------------------------------------------------------ */
/* Status codes                                                        */
/* ------------------------------------------------------------------ */

/* 0 is success, errors are negative; the numbers are those of the
 * internal status list and never change. Positive values are outcomes that
 * are not errors (TETHER_REGROUPED). */
enum {
    TETHER_OK = 0,
    TETHER_REGROUPED = 1, /* a new generation formed: rebuild collectives */
    TETHER_EINVAL = -1,
    TETHER_ECONFLICT = -2,
    TETHER_ENOTFOUND = -3,
    TETHER_EEXIST = -4,
    TETHER_ECLOSED = -5,
    TETHER_EBUSY = -6,
    TETHER_ENOMEM = -20,
    TETHER_ESYS = -21,
    TETHER_EIO = -22,
    TETHER_ECORRUPT = -23,
    TETHER_EPROTO = -40,
    TETHER_EVERSION = -41,
    TETHER_EJOB = -42,
    TETHER_ESTALE = -43,
    TETHER_ETOOBIG = -44,
    TETHER_ESIZE = -45,
    TETHER_EREMOTE = -46,
    TETHER_ETIMEDOUT = -47,
    TETHER_EMEMBERSHIP = -48,
    TETHER_EFENCED = -49,
    TETHER_EDESYNC = -50,
    TETHER_EUNREACHABLE = -51,
    TETHER_EJOBFAILED = -52,
    TETHER_EDIVERGED = -53,
    TETHER_EAGAIN = -54,
    TETHER_EJOBDONE = -55, /* the job finished: nothing left to do */
    TETHER_EDRAINED = -56, /* tetherctl drain removed this worker: end cleanly */
    TETHER_ECUDA = -60,
    TETHER_ENCCL = -61,
    TETHER_ENODEV = -62,
    TETHER_EINTERNAL = -99,
};

/* Sentence for a status ("fenced: declared dead, must re-join"); never
 * NULL, static storage. Any thread. */
TETHER_API const char *tether_strerror(int status);

/* Symbolic name ("EFENCED", "REGROUPED"); never NULL, static storage. */
TETHER_API const char *tether_status_name(int status);

/* ------------------------------------------------------------------ */
/* Options                                                             */
/* ------------------------------------------------------------------ */

#define TETHER_ID_MAX       128  /* job and worker ids, NUL included */
#define TETHER_HOST_MAX     256  /* host names, NUL included */
#define TETHER_ENDPOINT_MAX 256  /* ZeroMQ endpoints, NUL included */
#define TETHER_PATH_MAX     1024 /* checkpoint directories, key files, NUL included */

/* Log levels passed to tether_log_fn. */
enum { TETHER_LOG_ERROR = 0, TETHER_LOG_WARN = 1, TETHER_LOG_INFO = 2, TETHER_LOG_DEBUG = 3 };

/* Receives each log line (no trailing newline). Called from any library
 * thread, one line at a time (serialised by the library). */
typedef void (*tether_log_fn)(void *ctx, int level, const char *line);

/* Called from the background thread each time a new generation is
 * installed (the lock is not held: the callback may call the accessors, but
 * must not block for long nor call tether_destroy). */
typedef void (*tether_generation_fn)(void *ctx, uint64_t generation, uint32_t rank,
                                     uint32_t world_size);

/* Settings of the job. The first worker to join fixes them; a later join
 * whose settings differ is refused with TETHER_ECONFLICT. */
typedef struct tether_job_settings {
    uint32_t min_workers;          /* default 1 */
    uint32_t max_workers;          /* default 1 */
    uint32_t last_call_ms;         /* wait after min joined; default 2000 */
    uint32_t heartbeat_ms;         /* heartbeat interval; default 1000 */
    uint32_t heartbeat_timeout_ms; /* dead after this silence; default 5000 */
    uint32_t global_batch;         /* examples per step; default 256 */
    uint32_t join_timeout_ms;      /* below-min wait; default 60000 */
    /* Coordinated checkpoints (docs/checkpoints.md); the coordinator keeps
     * the schedule. checkpoint_keep 0 (default): the job takes none. */
    uint32_t checkpoint_every_steps; /* global_step % N == 0; 0: off */
    uint32_t checkpoint_every_ms;    /* the coordinator asks every T ms; 0: off */
    uint32_t checkpoint_keep;        /* committed checkpoints kept */
    /* Guard rails (docs/failover.md); 0: the coordinator's own. */
    uint32_t max_regroups_per_hour; /* more regroups within an hour fail the job */
    uint32_t flap_cooldown_ms;      /* base wait of a worker evicted twice or more */
} tether_job_settings_t;

typedef struct tether_opts {
    char coordinator[TETHER_ENDPOINT_MAX]; /* default "tcp://127.0.0.1:7600" */
    char job_id[TETHER_ID_MAX];            /* default "default" */
    char worker_id[TETHER_ID_MAX];         /* default "<hostname>-<pid>" */
    char host[TETHER_HOST_MAX];            /* default: the host name */
    char endpoint[TETHER_ENDPOINT_MAX];    /* advertised ring endpoint, may be "" */
    tether_job_settings_t job;
    uint32_t request_timeout_ms; /* Leave/ReportFailure acks; default 3000 */
    tether_log_fn log_fn;        /* NULL: stderr, level from TETHER_LOG */
    void *log_ctx;
    tether_generation_fn generation_fn; /* may be NULL */
    void *generation_ctx;
    /* The cluster key file (tetherctl keygen), the one the coordinator and
     * shard servers were given: every connection of this worker uses it,
     * and its own ring endpoint admits only holders. "" (the default):
     * none. Read by tether_create, which refuses a file others may read. */
    char key_file[TETHER_PATH_MAX];
} tether_opts_t;

/* Fills `o` with the defaults above. Any thread. */
TETHER_API void tether_opts_default(tether_opts_t *o);

/* Overrides fields of `o` from the environment: TETHER_COORDINATOR,
 * TETHER_JOB, TETHER_WORKER_ID, TETHER_HOST, TETHER_ENDPOINT,
 * TETHER_MIN_WORKERS, TETHER_MAX_WORKERS, TETHER_LAST_CALL_MS,
 * TETHER_HEARTBEAT_MS, TETHER_HEARTBEAT_TIMEOUT_MS, TETHER_GLOBAL_BATCH,
 * TETHER_JOIN_TIMEOUT_MS, TETHER_CHECKPOINT_EVERY_STEPS,
 * TETHER_CHECKPOINT_EVERY_MS, TETHER_CHECKPOINT_KEEP,
 * TETHER_JOB_MAX_REGROUPS_PER_HOUR, TETHER_JOB_FLAP_COOLDOWN_MS, TETHER_KEY_FILE. Unset
 * variables leave
 * the field alone. Then the
 * result is validated as by tether_opts_validate. Returns TETHER_OK, or
 * TETHER_EINVAL with a sentence naming the variable and its value in `err`
 * (may be NULL); on error `o` may be partly updated. Call it before
 * threads that modify the environment exist. */
TETHER_API int tether_opts_from_env(tether_opts_t *o, char *err, size_t errlen);

/* Checks ids, the endpoint and the job settings (1 <= min <= max, every
 * *_ms > 0, heartbeat_timeout_ms > heartbeat_ms, global_batch >=
 * max_workers). TETHER_OK or TETHER_EINVAL with a sentence in `err`. */
TETHER_API int tether_opts_validate(const tether_opts_t *o, char *err, size_t errlen);

/* ------------------------------------------------------------------ */
/* Lifecycle                                                           */
/* ------------------------------------------------------------------ */

typedef struct tether tether_t;

/* Validates and copies `opts`, starts the background thread; nothing is
 * sent until tether_join. With opts->log_fn set, the process-wide log sink
 * is routed to it until tether_destroy. Returns TETHER_OK (*out owned by the
 * caller), TETHER_EINVAL (message in `err`, may be NULL), TETHER_ENOMEM,
 * TETHER_ESYS. */
TETHER_API int tether_create(tether_t **out, const tether_opts_t *opts, char *err, size_t errlen);

/* Leaves the job cleanly when joined (Leave, waiting up to
 * request_timeout_ms for the acknowledgement), stops the thread, closes the
 * socket (linger 0) and frees everything. Accepts NULL and a pointer to
 * NULL; sets *t = NULL. Must not race with other calls on the object. */
TETHER_API void tether_destroy(tether_t **t);

/* The last error sentence of this object (e.g. the coordinator's message
 * for ECONFLICT); "" when none. Valid until the next call on `t` from the
 * same thread; copy it if needed. */
TETHER_API const char *tether_last_error(tether_t *t);

/* ------------------------------------------------------------------ */
/* Membership                                                          */
/* ------------------------------------------------------------------ */

/* Asks the coordinator to admit this worker and blocks until a generation
 * including it forms (the coordinator defers its reply; nothing is polled).
 * Each call after the first (e.g. after TETHER_EFENCED) uses a new
 * incarnation and so a new connection identity. Returns TETHER_OK (rank,
 * world size and generation are set), the coordinator's refusal
 * (TETHER_ECONFLICT, TETHER_EJOBFAILED, TETHER_EJOBDONE: the job already
 * finished, TETHER_EINVAL, TETHER_EFENCED) with its message in
 * tether_last_error(), TETHER_ETIMEDOUT after `timeout_ms` (0: wait
 * job.join_timeout_ms + job.heartbeat_timeout_ms), TETHER_EBUSY when
 * already joined or joining, TETHER_ECLOSED after tether_leave. The
 * coordinator's TETHER_EBUSY refusal (a worker in its flapping cool-down)
 * is retried every heartbeat interval until the timeout, which quotes it. */
TETHER_API int tether_join(tether_t *t, uint32_t timeout_ms);

/* Snapshot accessors of the current generation; consistent with each
 * other only within one tether_member/tether_poll_generation call. Before
 * the first join: rank -1, world size 0, generation 0, resume step -1. */
TETHER_API int tether_rank(tether_t *t);
TETHER_API uint32_t tether_world_size(tether_t *t);
TETHER_API uint64_t tether_generation(tether_t *t);
/* First step the current generation runs (all ranks resume there). */
TETHER_API int64_t tether_resume_step(tether_t *t);
/* How many steps the job's members had all completed when the current
 * generation formed (0: none, before the first join, or unknown to an
 * older coordinator). Resuming below it means steps are trained again:
 * since a resumed checkpoint, or all of them when no member held the
 * job's state. */
TETHER_API int64_t tether_job_steps(tether_t *t);

typedef struct tether_member {
    uint32_t rank;
    char worker_id[TETHER_ID_MAX];
    char host[TETHER_HOST_MAX];
    char endpoint[TETHER_ENDPOINT_MAX];
    int64_t last_step; /* as of the generation forming; -1: none */
} tether_member_t;

/* Copies member `rank` of the current generation into `info`. Returns
 * TETHER_OK or TETHER_ENOTFOUND (no generation, or rank out of range). */
TETHER_API int tether_member(tether_t *t, uint32_t rank, tether_member_t *info);

/* Returns 1 and sets *gen (may be NULL) when the generation changed since
 * the previous call, else 0. Cheap; for training loops that poll. */
TETHER_API int tether_poll_generation(tether_t *t, uint64_t *gen);

/* Standing of this worker, without blocking: TETHER_OK while joining or a
 * member, TETHER_EFENCED once declared dead (join again), TETHER_EJOBFAILED,
 * TETHER_EJOBDONE (the job finished: another member completed its run),
 * TETHER_EDRAINED (tetherctl drain removed this worker: end without joining
 * again), TETHER_ECLOSED after leaving, TETHER_EINVAL before the first join. Lets a
 * loop that is not completing steps learn that it was fenced. */
TETHER_API int tether_check(tether_t *t);

/* The step S after which the coordinator asked every member to stop and
 * regroup (a worker waits to join), or -1 when none is announced. A rank
 * blocked in the collective of step S+1 abandons it and reports S through
 * tether_step_done. */
TETHER_API int64_t tether_regroup_step(tether_t *t);

/* ------------------------------------------------------------------ */
/* Steps and failures                                                  */
/* ------------------------------------------------------------------ */

/* Records that `step` completed; the next heartbeat carries it. Returns:
 *   TETHER_OK         carry on;
 *   TETHER_REGROUPED  a new generation is installed (since the last join or
 *                     TETHER_REGROUPED): rebuild collectives for it and
 *                     resume at tether_resume_step(). When the coordinator
 *                     announced "regroup after step S" and step >= S, this
 *                     call sends Boundary and blocks until that generation
 *                     forms (TETHER_REGROUPED) or the coordinator says
 *                     Continue (TETHER_OK; the next stop is announced later);
 *   TETHER_EFENCED    the coordinator declared this worker dead: call
 *                     tether_join again (new incarnation), never carry on;
 *   TETHER_EJOBFAILED the job failed (tether_last_error says why);
 *   TETHER_EJOBDONE   the job finished (a member left with "finished");
 *   TETHER_EDRAINED   the operator drained this worker (tetherctl drain):
 *                     the others went on without it; end, do not join;
 *   TETHER_ETIMEDOUT  no answer at a boundary within join_timeout_ms +
 *                     heartbeat_timeout_ms;
 *   TETHER_EINVAL     not joined. */
TETHER_API int tether_step_done(tether_t *t, int64_t step);

/* Optional: where the job is in its data, for operators - the epoch
 * (1-based), the examples of it all ranks have consumed together, and the
 * examples per epoch. The next heartbeat carries it; `tetherctl status`
 * shows the newest the coordinator heard (e.g. "epoch 3 41%"). Cheap: no
 * message of its own. TETHER_OK, or TETHER_EINVAL (t NULL, or epoch 0 or
 * more examples than the epoch has). */
TETHER_API int tether_progress(tether_t *t, uint64_t epoch, uint64_t epoch_examples,
                               uint64_t epoch_size);

/* tether_report_failure's suspect when the failure names no peer (NCCL
 * reports that a peer failed, not which one): every other member is
 * suspected, and only those whose connection closed or whose heartbeats
 * are overdue are evicted. */
#define TETHER_SUSPECT_ANY 0xffffffffu

/* Tells the coordinator that rank `suspect_rank` of the current generation
 * (or TETHER_SUSPECT_ANY) failed, e.g. a collective broke. The coordinator
 * evicts the suspect once it has confirmed it (connection closed or
 * heartbeats overdue); a live suspect's next heartbeat clears it. Waits for
 * the acknowledgement up to request_timeout_ms. TETHER_OK, TETHER_ETIMEDOUT,
 * or the coordinator's error (TETHER_ESTALE, TETHER_EFENCED, TETHER_EINVAL). */
TETHER_API int tether_report_failure(tether_t *t, uint32_t suspect_rank, const char *reason);

/* Leaves the job on purpose (the others regroup at once). Waits for the
 * acknowledgement up to request_timeout_ms. Afterwards only accessors and
 * tether_destroy are useful. TETHER_OK, TETHER_ETIMEDOUT, TETHER_EINVAL
 * (not joined). With reason "finished" the worker says it completed the
 * run, and the job ends for every member (docs/protocol.md): collectives
 * other ranks still have in flight end with TETHER_EJOBDONE. A ring rank
 * can complete a collective while its neighbour still receives, so pass a
 * tether_barrier before leaving "finished". */
TETHER_API int tether_leave(tether_t *t, const char *reason);

/* Asks the coordinator to take this worker out of the job at the next step
 * boundary every member reaches, as `tetherctl drain JOB WORKER` does: no
 * step fails, and the tether_step_done of that boundary returns
 * TETHER_EDRAINED (the others go on without it). For a worker told to
 * stop (SIGTERM from Kubernetes or a supervisor) that wants to leave
 * without making the others redo a step. Waits for the acknowledgement up
 * to request_timeout_ms. TETHER_OK once the drain is set; TETHER_EINVAL
 * (not a member, or the job would fall below its min_workers:
 * tether_last_error says which), TETHER_EBUSY (the job is not running,
 * e.g. a generation is forming), TETHER_EFENCED, TETHER_ETIMEDOUT. */
TETHER_API int tether_drain(tether_t *t);

/* ------------------------------------------------------------------ */
/* Coordinated checkpoints (docs/checkpoints.md)                       */
/* ------------------------------------------------------------------ */

/* The job's checkpoint requests as of the newest heartbeat reply: how many
 * the coordinator has made (its timer, `tetherctl checkpoint JOB`) and the
 * newest one a committed checkpoint served. A checkpoint is wanted while
 * requested > served. Either pointer may be NULL. TETHER_OK or
 * TETHER_EINVAL (t NULL). */
TETHER_API int tether_checkpoint_requests(tether_t *t, uint64_t *requested, uint64_t *served);

/* Asks the coordinator to commit checkpoint `manifest` (the encoded
 * CkptManifest, `len` bytes) whose parts are durable under
 * <root>/<checkpoint id>; `request` is the request it serves (0: the step
 * schedule). The coordinator checks the parts, writes the MANIFEST (the
 * commit point), moves `latest`, applies retention and records it.
 * `generation` is the one the checkpoint was taken in (tether_generation
 * at its step): the coordinator takes the commit only while that is the
 * job's current generation and, while the job runs, only from one of its
 * members, so a process that was fenced with a commit in flight gets
 * TETHER_ESTALE (or TETHER_EFENCED) instead of moving `latest` back to its
 * older step. Safe from any thread; retries while the coordinator is
 * unreachable or busy, up to `timeout_ms` in all. TETHER_OK,
 * TETHER_ETIMEDOUT, or the coordinator's refusal (`err` has its
 * sentence). */
TETHER_API int tether_checkpoint_commit(tether_t *t, const char *root, uint64_t request,
                                        uint64_t generation, const void *manifest, size_t len,
                                        uint32_t timeout_ms, char *err, size_t errlen);

/* Tells the coordinator that this worker could not write its part of
 * checkpoint `checkpoint_id` (taken at `step`, in `generation`), so the
 * attempt was aborted; `reason` is the sentence an operator needs ("part
 * ... write failed: No space left on device"), `request` the request the
 * attempt served (0: the step schedule, or not known to this rank). The
 * coordinator logs it, counts it, shows it in `tetherctl checkpoints JOB`
 * and /metrics, and `tetherctl checkpoint JOB --wait` ends with it. One
 * try, bounded by `timeout_ms`: a report lost with an unreachable
 * coordinator costs only the report. Safe from any thread. TETHER_OK,
 * TETHER_ETIMEDOUT, or the coordinator's refusal (`err`). */
TETHER_API int tether_checkpoint_failed(tether_t *t, const char *checkpoint_id, uint64_t step,
                                        uint64_t request, uint64_t generation, const char *reason,
                                        uint32_t timeout_ms, char *err, size_t errlen);

typedef struct tether_checkpoint {
    char id[TETHER_ID_MAX];
    char dir[TETHER_PATH_MAX];
    uint64_t step, bytes, created_unix_ms, duration_ms, committed_unix_ms;
} tether_checkpoint_t;

/* The job's committed checkpoints as the coordinator recorded them, oldest
 * first: up to `cap` of the newest into `out`, their number into *n. Safe
 * from any thread; bounded by `timeout_ms`. TETHER_OK, TETHER_ETIMEDOUT,
 * TETHER_EJOB (the coordinator does not know the job), or another
 * refusal. */
TETHER_API int tether_checkpoint_list(tether_t *t, tether_checkpoint_t *out, size_t cap, size_t *n,
                                      uint32_t timeout_ms, char *err, size_t errlen);

/* ------------------------------------------------------------------ */
/* Collectives                                                         */
/* ------------------------------------------------------------------ */

/* Element types and reductions of the collectives. */
enum { TETHER_FLOAT32 = 1, TETHER_FLOAT64 = 2, TETHER_INT64 = 3 };
enum { TETHER_SUM = 1, TETHER_MIN = 2, TETHER_MAX = 3 };

/* Collective backends. AUTO: the TCP ring, and the parameter-server
 * backend when no ring can be built (a rank without an endpoint). */
enum {
    TETHER_BACKEND_AUTO = 0,
    TETHER_BACKEND_RING = 1,
    TETHER_BACKEND_PS = 2,
    TETHER_BACKEND_NCCL = 3,
};

/* Where the optimizer runs. LOCAL: tether_step_finish returns the
 * averaged (or summed) gradients and every rank applies the update itself.
 * SHARDS (backend PS only): the shard servers keep the parameters and the
 * optimizer state and apply the update as they reduce, so
 * tether_step_finish leaves the NEW PARAMETERS in the registered tensors;
 * the learning rate of each step is set with tether_set_lr, and the state
 * is put on the shards once before the first step (tether_state_put_at). */
enum { TETHER_UPDATE_LOCAL = 0, TETHER_UPDATE_SHARDS = 1 };
enum { TETHER_OPTIM_SGD = 0, TETHER_OPTIM_ADAMW = 1 };

typedef struct tether_optimizer {
    int kind;                /* TETHER_OPTIM_*; default SGD */
    float momentum;          /* SGD; 0: no momentum buffer */
    int nesterov;            /* SGD */
    float weight_decay;      /* SGD: L2 added to the gradient; AdamW: decoupled */
    float beta1, beta2, eps; /* AdamW; default 0.9, 0.999, 1e-8 */
} tether_optimizer_t;

typedef struct tether_coll_opts {
    int backend;               /* TETHER_BACKEND_*; default AUTO */
    uint32_t deadline_ms;      /* every collective's deadline; default 60000 */
    size_t bucket_bytes;       /* gradient bucket size; default 25 MiB */
    size_t first_bucket_bytes; /* the first (last layers) bucket; default 1 MiB */
    size_t segment_bytes;      /* ring pipelining unit, equal on all ranks; default 1 MiB */
    uint32_t audit_every;      /* steps between divergence audits; default 100, 0 off */
    int average;               /* step_finish divides by the global count; default 1 */
    char ring_bind[TETHER_ENDPOINT_MAX]; /* what the ring binds; "": the advertised endpoint */
    int update;                          /* TETHER_UPDATE_*; default LOCAL */
    tether_optimizer_t optimizer;        /* with TETHER_UPDATE_SHARDS */
    /* ps backend: before the job's first placement, wait (up to
     * shard_wait_ms) until this many shard servers are registered with the coordinator,
     * so a job whose workers start first is spread over all of them;
     * default 0 (any one). tether-launch sets it to --shards. */
    uint32_t min_shards;
    /* ps backend: how long fetching the placement waits for shard servers
     * (for min_shards, or for any live one) before the generation's
     * backend fails; default 0: 10 s. Shard pods may come minutes after
     * the workers (TETHER_SHARD_WAIT_MS). */
    uint32_t shard_wait_ms;
    /* ring: payloads between ranks that share a host go through shared
     * memory when every rank of the generation can map its left
     * neighbour's (checked by the ring itself; otherwise all over TCP);
     * 0 keeps them on TCP. Default 1 (TETHER_RING_SHM). */
    int ring_shm;
    /* nccl backend: the CUDA device of this worker's communicator, which
     * the buffers given to tether_step_finish_device must be on; NCCL
     * refuses two ranks on one device, so workers that share a host need
     * one each (tether-train: --cuda-device). Default -1: the device
     * current on the thread that calls tether_create or
     * tether_coll_configure with the nccl backend (cudaSetDevice first),
     * as ncclCommInitRank takes its caller's. TETHER_CUDA_DEVICE. */
    int cuda_device;
} tether_coll_opts_t;

/* Fills `o` with the defaults above. Any thread. */
TETHER_API void tether_coll_opts_default(tether_coll_opts_t *o);

/* Overrides fields from TETHER_BACKEND (ring|ps|nccl|auto),
 * TETHER_COLL_DEADLINE_MS, TETHER_BUCKET_BYTES, TETHER_FIRST_BUCKET_BYTES,
 * TETHER_AUDIT_EVERY, TETHER_MIN_SHARDS, TETHER_SHARD_WAIT_MS,
 * TETHER_RING_BIND, TETHER_RING_SHM (0 or 1) and TETHER_CUDA_DEVICE.
 * TETHER_OK or TETHER_EINVAL with a sentence naming the variable in `err`
 * (may be NULL). tether_create already applies these to the object's
 * defaults. */
TETHER_API int tether_coll_opts_from_env(tether_coll_opts_t *o, char *err, size_t errlen);

/* Replaces the collective options of `t`. Only before the first
 * collective or gradient registration: TETHER_EBUSY afterwards;
 * TETHER_EINVAL for bad values (sentence in `err`). */
TETHER_API int tether_coll_configure(tether_t *t, const tether_coll_opts_t *o, char *err,
                                     size_t errlen);

/* Collectives over the ranks of the current generation. Every rank must
 * issue the same collectives in the same order; they run one at a time on
 * the library's communication thread (calls from several application
 * threads are queued in call order). The first collective of a generation
 * builds the backend (the ring connects to its neighbours then).
 * `buf` is aligned to its element size and is the caller's again when the
 * call returns, whatever the outcome (its contents are unspecified after
 * an error). Returns:
 *   TETHER_OK
 *   TETHER_EINVAL       bad arguments, or not joined yet (nothing was sent)
 *   TETHER_EMEMBERSHIP  a new generation formed (before or during the
 *                       call): see "The training loop" below
 *   TETHER_ETIMEDOUT    a rank stayed silent past the deadline; the
 *                       suspect is reported to the coordinator and named
 *                       in tether_last_error
 *   TETHER_EUNREACHABLE a neighbour disconnected (reported likewise)
 *   TETHER_EDESYNC      ranks issued different collectives; the sentence
 *                       names both sides ("rank 2 sent allreduce #812
 *                       (float32 x 269322) but rank 1 expected broadcast
 *                       #812 ...")
 *   TETHER_ENODEV       no backend could be built (e.g. "ps" in a build
 *                       without it; tether_last_error says why)
 *   TETHER_EFENCED, TETHER_EJOBFAILED, TETHER_EJOBDONE, TETHER_ECLOSED
 *                       not a member (a collective in flight ends at once).
 * After any error but EINVAL the generation's backend stays failed: every
 * later collective of the generation returns the same status. */
TETHER_API int tether_allreduce(tether_t *t, void *buf, size_t count, int dtype, int op);
TETHER_API int tether_broadcast(tether_t *t, void *buf, size_t count, int dtype, int root);
TETHER_API int tether_barrier(tether_t *t);

/* Moves a copy of the training state through the shard servers of the
 * current generation: how a regroup hands the authoritative state to the
 * ranks that are behind when the generation's backend has shard servers
 * (the ps backend, or a ring generation on its PS fallback after a regroup).
 * tether_state_put stores `part` (0: parameters, 1 and 2: optimizer
 * buffers), laid out like the registered gradients (count = their total);
 * tether_state_get fetches it. Only the calling rank and the shards take
 * part: order the two with a collective (e.g. the uploader's broadcast
 * after its puts). TETHER_OK, TETHER_ENODEV (this backend has no shard
 * servers), or a collective's status. */
TETHER_API int tether_state_put(tether_t *t, int part, const float *buf, size_t count);
TETHER_API int tether_state_get(tether_t *t, int part, float *buf, size_t count);

/* A checkpoint part one shard server wrote
 * (tether_checkpoint_shards_result): what the manifest lists for it. */
typedef struct tether_shard_part {
    char file[128]; /* "ps-<k>.bin" in the directory; k: the shard's place */
    uint64_t size;  /* bytes of the file */
    uint32_t crc32c, planes;
    size_t nranges;
    uint64_t *ranges; /* nranges (offset, length) byte pairs of the flat state */
} tether_shard_part_t;

/* TETHER_UPDATE_SHARDS, between steps, one rank: every shard server of the
 * generation writes the state of its chunks (parameters and optimizer
 * state after the last step this rank completed) into `dir` (absolute) as
 * one part, fsynced. In two calls, and neither waits, not even for this
 * process's communication thread: _begin queues the request ahead of this
 * rank's next collective and returns (a shard copies before it takes this
 * rank's next push, so steps go on at once, while it copies and writes);
 * _result, called between later steps by the same rank, returns TETHER_OK
 * with *parts (one per shard, free with tether_shard_parts_free) and
 * *nparts once all are durable, TETHER_EAGAIN until that is known (the
 * questions travel with the next steps' collectives, so the answer comes
 * a step or two after the parts are durable; with no collective in
 * between, each call moves the question on), or what went wrong since
 * _begin (TETHER_EIO: a refused request, a failed copy or write;
 * TETHER_ESTALE when a shard's state does not follow that step, or it
 * restarted and knows no such part; TETHER_ETIMEDOUT: a shard left the
 * question unanswered for the collective deadline). The parts are not a
 * checkpoint until a manifest lists them. Also TETHER_EINVAL (the update
 * is local, bad arguments) or a collective's status; a failure leaves the
 * backend usable. */
TETHER_API int tether_checkpoint_shards_begin(tether_t *t, const char *dir);
TETHER_API int tether_checkpoint_shards_result(tether_t *t, const char *dir,
                                               tether_shard_part_t **parts, size_t *nparts);
TETHER_API void tether_shard_parts_free(tether_shard_part_t *parts, size_t nparts);

/* tether_state_put for a state that has had `steps_done` updates: with
 * TETHER_UPDATE_SHARDS, putting part 0 also sets the shards' AdamW step
 * counter to it, and a put makes the shards forget which step they last
 * applied (the next push of any step is applied to the state put). */
TETHER_API int tether_state_put_at(tether_t *t, int part, const float *buf, size_t count,
                                   uint64_t steps_done);

/* Copies this process's flight-recorder text (the last collectives across
 * generations, then the current backend's own records) into buf, NUL
 * terminated and cut to fit; returns the full length (like snprintf), or a
 * negative status. Any thread. `tetherctl dump JOB` collects it from every
 * member through the coordinator. */
TETHER_API long tether_flight_dump(tether_t *t, char *buf, size_t len);

/* ------------------------------------------------------------------ */
/* Data-parallel step                                                  */
/* ------------------------------------------------------------------ */

/* Registers the next float32 gradient tensor (in model order, `count` >= 1
 * elements) and returns its index in *id. `grad` may be NULL: the tensor
 * then lives only in the library's buffer (tether_grad_buffer). When the
 * registered pointers lie back to back in one array (tensor i+1 starts
 * where tensor i ends), that array becomes the library's flat buffer and
 * nothing is ever copied; otherwise each tensor is copied in when it is
 * marked ready and the result is copied back by tether_step_finish. Only
 * before the first step: TETHER_EBUSY afterwards. One thread drives the
 * step API. */
TETHER_API int tether_grad_register(tether_t *t, float *grad, size_t count, size_t *id);

/* Where tensor `id` lives in the library's flat buffer (the registered
 * pointer itself in the zero-copy case): the model may write gradients
 * there directly. Fixes the layout (no registration after it). NULL for
 * a bad id or out of memory. The memory is owned by the library (or the
 * caller, zero copy) and stays valid until tether_destroy. */
TETHER_API float *tether_grad_buffer(tether_t *t, size_t id);

/* Tensor `id` holds this rank's gradient SUM for the step (backward
 * produces them last layer first). When this completes a bucket, its
 * all-reduce starts on the communication thread while compute continues;
 * buckets start in a fixed order on every rank. Do not modify the tensor
 * until tether_step_finish returns. With gradient accumulation, add every
 * micro-batch into the tensors and call this once, after the last one.
 * TETHER_OK, TETHER_EEXIST (twice in one step), TETHER_ENOTFOUND (bad id),
 * TETHER_EMEMBERSHIP or another status of the collectives. */
TETHER_API int tether_grad_ready(tether_t *t, size_t id);

/* Ends the step: starts the buckets not marked ready, sums the example
 * counts exactly (int64) into *global_count (may be NULL), waits for all
 * buckets, divides the gradients by the global count (unless
 * opts.average is 0) and leaves the result in the registered tensors
 * (with TETHER_UPDATE_SHARDS: the parameters after the shards' update).
 * Every `audit_every` steps, with parameters set by tether_audit_params,
 * it then runs the divergence audit. Returns TETHER_OK, TETHER_EDIVERGED
 * (the gradients are still valid), or a status of the collectives; on an
 * error the step's gradients are unspecified and the step must be redone.
 * Zero the gradients yourself before the next step. */
TETHER_API int tether_step_finish(tether_t *t, int64_t local_count, int64_t *global_count);

/* GPU workers on the NCCL backend: the step's gradient SUMS, already in one
 * device buffer of `count` floats (CUDA memory), are summed over the ranks
 * in place, together with the example count (*global_count), after the
 * CUDA event `cuda_event` (a cudaEvent_t recorded when the sums are
 * complete; NULL: none). Use it instead of tether_grad_ready and
 * tether_step_finish for that step; nothing is divided (scale the update
 * by 1 / *global_count) and nothing is copied to the host. The audit runs
 * as in tether_step_finish. TETHER_ENODEV, with nothing issued, when the
 * backend is not NCCL (or the update runs on the shards): stage the
 * gradients through the host as usual. Otherwise as tether_step_finish. */
TETHER_API int tether_step_finish_device(tether_t *t, float *dgrads, size_t count,
                                         int64_t local_count, int64_t *global_count,
                                         void *cuda_event);

/* Bucket overlap on the device: part [dpart, dpart + count) of the step's
 * device buffer holds its final sums once `cuda_event` (recorded on the
 * compute stream; NULL: now) fires. Its sum over the ranks is enqueued on
 * the communication stream behind that event and this returns without
 * waiting, so it runs while backward computes the layers below. Every rank
 * reports the same parts in the same order; parts do not overlap and lie
 * inside the buffer given to tether_step_finish_device, which ends the
 * step (also after a failed part: it returns the first failure) and
 * reduces only what no part covered, with the count. Do not record the
 * event again before that returns. Reporting a part again before the end
 * gives up the attempt (a backward that failed) and starts the step over.
 * TETHER_ENODEV, with nothing issued, where tether_step_finish_device
 * would say so; TETHER_EINVAL, TETHER_EBUSY (a step begun on the host),
 * or the membership gate's status when it begins the step. */
TETHER_API int tether_step_ready_device(tether_t *t, float *dpart, size_t count, void *cuda_event);

/* TETHER_UPDATE_SHARDS: the learning rate the shards apply in the steps
 * that follow (every rank sets the same one for the same step). TETHER_OK,
 * TETHER_EINVAL (not finite or negative, or the update is local). */
TETHER_API int tether_set_lr(tether_t *t, float lr);

/* The step index the current generation's next step carries, when the
 * ranks agreed on a state other than tether_resume_step()'s: the
 * coordinator learns of completed steps from tether_step_done, so a member
 * lost after a step completed and before the next tether_step_done (an
 * evaluation, a checkpoint) leaves it one behind. The index keys the
 * redo of a step on the shard servers: with TETHER_UPDATE_SHARDS a step
 * that carries the number of one already applied gets its stored result,
 * not the new gradients. Every rank calls it with the same step, between
 * steps. TETHER_OK, TETHER_EINVAL (negative, or not joined), TETHER_EBUSY
 * (inside a step). */
TETHER_API int tether_resume_at(tether_t *t, int64_t step);

typedef struct tether_step_stats {
    uint64_t steps;          /* tether_step_finish calls that succeeded */
    double last_wait_s;      /* time the last tether_step_finish blocked */
    double total_wait_s;     /* exposed communication time, all steps */
    double last_step_s;      /* since the previous tether_step_finish returned
                              * (first step: since its first grad_ready) */
    double total_step_s;     /* sum of the above */
    double last_comm_s;      /* communication-thread time in the last step */
    uint64_t buckets;        /* buckets per step */
    uint64_t bytes_per_step; /* gradient bytes all-reduced per step */
    uint64_t audits;         /* divergence audits passed */
    char backend[16];        /* backend in use, "" before the first collective */
} tether_step_stats_t;

/* The share of step time spent waiting on communication is
 * total_wait_s / total_step_s. TETHER_OK or TETHER_EINVAL. */
TETHER_API int tether_step_stats(tether_t *t, tether_step_stats_t *s);

/* Divergence audit now: every rank checksums its `count` parameters
 * (64-bit, bitwise) and the min and max over ranks are compared.
 * TETHER_OK, TETHER_EDIVERGED (tether_last_error names the step and the
 * ranks differing from rank 0), or a status of the collectives. Every rank
 * must call it for the same step. */
TETHER_API int tether_audit(tether_t *t, const float *params, size_t count, int64_t step);

/* Parameters tether_step_finish audits every `audit_every` steps (borrowed
 * until tether_destroy or the next call; NULL stops the audits). */
TETHER_API int tether_audit_params(tether_t *t, const float *params, size_t count);

/* The training loop. Steps are numbered from tether_resume_step():
 *
 *   step = tether_resume_step(t);
 *   for (;;) {
 *       forward/backward, calling tether_grad_ready(t, i) per gradient;
 *       rc = tether_step_finish(t, my_examples, &total);
 *       if (rc == TETHER_OK) { apply the update; rc = tether_step_done(t, step++); }
 *       if (rc == TETHER_EMEMBERSHIP || rc == TETHER_ETIMEDOUT ||
 *           rc == TETHER_EUNREACHABLE)   // the step did not happen
 *           rc = tether_step_done(t, step - 1);  // learn the new generation
 *       if (rc == TETHER_REGROUPED) { step = tether_resume_step(t); continue; }
 *       if (rc != TETHER_OK) handle it (EFENCED: join again; EJOBFAILED: stop);
 *   }
 *
 * TETHER_EMEMBERSHIP means: a generation newer than the one this process
 * acknowledged exists. Collectives refuse to run until tether_step_done
 * (TETHER_REGROUPED) or tether_join acknowledges it; then the next
 * collective builds the backend for the new generation. After a timeout
 * or disconnect the coordinator forms that generation once it confirms the
 * failure; until then tether_step_done returns TETHER_OK and the failed
 * generation's collectives keep failing, so retry after a short pause. */

#ifdef __cplusplus
}
#endif

#endif

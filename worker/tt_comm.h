/* tt_comm: libtether's communication layer above the backends. It owns
 *   - the background communication thread, which runs every collective of
 *     a tether_t in the order they were issued (synchronous calls and
 *     gradient buckets share one FIFO, so every rank issues the same
 *     sequence), on a backend instance (tt_coll) built lazily for the
 *     current generation and rebuilt when the generation changes;
 *   - the data-parallel step: registered gradient tensors laid out in one
 *     flat float32 buffer cut into buckets (tt_buckets), bucket all-reduces
 *     started as gradients become ready, the exact int64 example count,
 *     averaging, copy-back, and the time step_finish spent waiting;
 *   - the divergence audit (min/max of a 64-bit parameter checksum);
 *   - ending a collective in flight when its generation is over, or this
 *     worker's membership is (tt_comm_generation_changed,
 *     tt_comm_membership_ended);
 *   - an API-level flight recorder that spans generations (tt_flight),
 *     logged on failure and returned by tt_comm_dump for `tetherctl dump`.
 * It does not own membership: it reads it through the hooks (tt_client in
 * the library, a fake in tests) and reports suspects back through them;
 * the worker never decides membership itself.
 * The pure parts (options from the environment, the membership gate, the
 * bucket launch plan, the audit verdict) are in tt_comm_plan.c and are
 * tested without threads or sockets.
 * Thread safety: tt_comm_* calls are serialised by the caller for one step
 * (grad_ready/step_finish from one thread); the synchronous collectives may
 * be called from any thread (they queue). tt_comm_dump and
 * tt_comm_last_error may run concurrently with everything. */
#ifndef TT_COMM_H
#define TT_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "tt_coll.h"
#include "tt_collseq.h"
#include "tt_optim.h"

/* ---- membership as seen through the hooks ---- */

typedef struct tt_comm_view {
    int status;              /* TT_OK while a member (or joining); else why not */
    uint64_t generation;     /* 0: none yet */
    uint64_t app_generation; /* the newest the application acknowledged */
    int rank, world;
    int64_t resume_step;
    int64_t ps_until_step;   /* steps before it go through the shards; 0: none */
    uint64_t job_nonce;      /* Generation.job_nonce */
    tt_coll_shrink_t shrink; /* Generation.shrink_of / shrink_exclude */
} tt_comm_view_t;

typedef struct tt_comm_hooks {
    void *ctx;
    /* Fills *v with the current membership. Any thread, cheap. */
    void (*view)(void *ctx, tt_comm_view_t *v);
    /* Copies the ring endpoint of `rank` in generation `gen` into buf.
     * Returns TT_OK, TT_ESTALE (the generation moved on) or TT_ENOTFOUND
     * (rank not listed: worlds above 256 list only neighbours). */
    int (*endpoint)(void *ctx, uint64_t gen, int rank, char *buf, size_t len);
    /* Tells the coordinator that `rank` failed (TT_COLL_SUSPECT_ANY: some
     * peer, not named); may block briefly. */
    int (*report)(void *ctx, int rank, const char *reason);
} tt_comm_hooks_t;

/* ---- options ---- */

#define TT_COMM_AUDIT_DEFAULT 100
#define TT_COMM_EP_MAX        256

typedef struct tt_comm_opts {
    tt_coll_kind_t backend;
    int deadline_ms;                    /* per collective; 0: 60000 */
    size_t bucket_bytes;                /* 0: 25 MiB */
    size_t first_bucket_bytes;          /* 0: 1 MiB (at most bucket_bytes) */
    size_t segment_bytes;               /* ring unit; 0: 1 MiB; equal on all ranks */
    uint32_t audit_every;               /* steps between audits; 0: never */
    int average;                        /* step_finish divides by the global count */
    size_t flight_capacity;             /* 0: 256 */
    char bind_endpoint[TT_COMM_EP_MAX]; /* "": bind the advertised endpoint */
    int ring_tcp_only;                  /* tt_ring_opts_t.tcp_only (TETHER_RING_SHM=0) */
    char coordinator[TT_COMM_EP_MAX], job_id[128], worker_id[128]; /* for ps */
    tt_zauth_key_t key;     /* the cluster key (tt_coll_cfg_t.key); off: none */
    uint32_t min_shards;    /* ps: shard servers to wait for before the first placement */
    uint32_t shard_wait_ms; /* ps: how long a placement waits for them; 0: 10000 */
    int shard_update;       /* the shards apply the optimizer (ps backend only) */
    int optim;              /* with shard_update: 0 SGD, 1 AdamW */
    tt_optim_sgd_hp_t sgd;
    tt_optim_adamw_hp_t adamw;
    int cuda_device; /* nccl: the CUDA device (tt_coll_cfg_t.device); -1: unset */
} tt_comm_opts_t;

/* Defaults: auto backend, 60 s deadline, 25 MiB / 1 MiB buckets, audit
 * every 100 steps, averaging on. */
void tt_comm_opts_default(tt_comm_opts_t *o);

typedef const char *(*tt_comm_lookup_fn)(void *ctx, const char *name);

/* Applies TETHER_BACKEND (ring|ps|nccl|auto), TETHER_COLL_DEADLINE_MS,
 * TETHER_BUCKET_BYTES, TETHER_FIRST_BUCKET_BYTES, TETHER_AUDIT_EVERY,
 * TETHER_MIN_SHARDS, TETHER_SHARD_WAIT_MS, TETHER_RING_SHM,
 * TETHER_CUDA_DEVICE, TETHER_RING_BIND read through
 * `lookup`; unset ones
 * are left alone.
 * TT_OK or TT_EINVAL with "TETHER_X='v': why" in err. Pure. */
int tt_comm_opts_from_lookup(tt_comm_opts_t *o, tt_comm_lookup_fn lookup, void *ctx, char *err,
                             size_t errlen);

/* ---- pure helpers (tt_comm_plan.c) ---- */

/* Whether a collective may start for this view: TT_OK; the view's status
 * when not a member; TT_EINVAL before the first generation; TT_EMEMBERSHIP
 * when a generation newer than the acknowledged one is installed. A
 * sentence goes to err. */
int tt_comm_gate(const tt_comm_view_t *v, char *err, size_t errlen);

/* Whether the backend serving generation `inst_gen` (1 for `nccl_row`: an
 * NCCL row, tt_coll_nccl_row) stays open, neither aborted nor closed, as
 * the communicator a newer generation announced as its shrink
 * (Generation.shrink_of) derives its own from. 1 or 0. */
int tt_comm_plan_keeps_parent(uint64_t inst_gen, int nccl_row, uint64_t shrink_of);

/* Whether a new generation's arrival ends the old backend's collectives
 * at once: always, unless it is kept as the parent of a shrink (`keeps`)
 * and NCCL cannot revoke it (`revokes`, tt_coll_nccl_revokes) without
 * freeing the communicator the shrink needs. 1 or 0. */
int tt_comm_plan_cuts_short(int keeps, int revokes);

/* Whether a backend being built for generation `gen` will never serve it:
 * a newer generation was notified or installed, or the view says this
 * worker is no longer a member. 1 or 0. */
int tt_comm_plan_gone(uint64_t notified_gen, const tt_comm_view_t *v, uint64_t gen);

/* Whom a failure with status `rc`, blamed by the backend on `suspect`,
 * is reported against: a rank, TT_COLL_SUSPECT_ANY, or -1 for no report.
 * Only a peer's silence or loss is reported; a refused call, a local
 * device error or the end of the generation is not. */
int tt_comm_plan_report(int rc, int suspect, int my_rank);

/* Bucket launch plan of one step. Buckets are launched in ascending index
 * (the order backward produces them) whatever order they complete in, so
 * every rank issues the same sequence of all-reduces even if grad_ready
 * calls differ in order between ranks. */
typedef struct tt_comm_plan {
    size_t nbuckets;
    size_t next;             /* first bucket not launched yet */
    unsigned char *complete; /* per bucket, this step */
} tt_comm_plan_t;

int tt_comm_plan_init(tt_comm_plan_t *p, size_t nbuckets);
void tt_comm_plan_release(tt_comm_plan_t *p);
void tt_comm_plan_reset(tt_comm_plan_t *p);
/* Marks `ndone` buckets complete and writes to launch[0..*nlaunch) the
 * buckets that may start now, in order (launch has room for nbuckets).
 * The last bucket never starts here: it waits for tt_comm_plan_rest (at
 * step_finish), so that the step's example count can travel with it. */
void tt_comm_plan_complete(tt_comm_plan_t *p, const size_t *done, size_t ndone, size_t *launch,
                           size_t *nlaunch);
/* Every bucket not launched yet, in order (step_finish). */
void tt_comm_plan_rest(tt_comm_plan_t *p, size_t *launch, size_t *nlaunch);

/* Audit verdict from the all-reduced [max(cs), max(~cs)]: TT_OK when
 * every rank had the same checksum, TT_EDIVERGED with a sentence naming
 * the step otherwise. */
int tt_comm_audit_verdict(const int64_t maxes[2], int64_t step, char *err, size_t errlen);

/* 1 when step `step` is an audit step for `every` (every > 0 and step is
 * a multiple of it). */
int tt_comm_audit_due(uint32_t every, int64_t step);

/* ---- the communication layer ---- */

typedef struct tt_comm tt_comm_t;

typedef struct tt_comm_stats {
    uint64_t steps;          /* step_finish calls that succeeded */
    double last_wait_s;      /* time the last step_finish blocked */
    double total_wait_s;     /* sum over steps */
    double last_step_s;      /* since the previous step_finish (first step:
                              * since its first grad_ready) */
    double total_step_s;     /* sum of the above */
    double last_comm_s;      /* comm-thread time in the last step's collectives */
    uint64_t buckets;        /* buckets per step */
    uint64_t bytes_per_step; /* gradient bytes all-reduced per step */
    uint64_t audits;         /* audits passed */
    const char *backend;     /* name of the backend in use ("" before the first) */
} tt_comm_stats_t;

/* Starts the communication thread; nothing is connected until the first
 * collective. hooks and opts are copied. TT_OK, TT_EINVAL, TT_ENOMEM,
 * TT_ESYS. */
int tt_comm_create(tt_comm_t **out, const tt_comm_opts_t *opts, const tt_comm_hooks_t *hooks);

/* Replaces the options (except coordinator, job and worker ids) while
 * nothing has used them: TT_EBUSY once a collective was queued or a
 * gradient registered. */
int tt_comm_configure(tt_comm_t *c, const tt_comm_opts_t *opts);

/* Checks bucket sizes, deadline and backend: TT_OK or TT_EINVAL with a
 * sentence. Pure. */
int tt_comm_opts_validate(const tt_comm_opts_t *o, char *err, size_t errlen);

/* Aborts what is queued (TT_ECLOSED), stops the thread, destroys the
 * backend. Accepts NULL; sets *c = NULL. Not concurrently with other
 * calls except dump/last_error. */
void tt_comm_destroy(tt_comm_t **c);

/* The membership client installed generation `gen` (any thread, cheap):
 * a collective of an older generation in flight is aborted (the ring ends
 * it at once with TT_EMEMBERSHIP), and the communication thread closes the
 * previous generation's backend as soon as it is idle, so that the endpoint
 * is free for the next ring. No wait is needed before the new ring: its
 * handshake (tt_ring.c) tolerates peers that still hold their old one.
 * `shrink_of` (Generation.shrink_of, 0: none) naming the backend's
 * generation keeps an NCCL backend's communicator instead, for the new
 * generation to shrink (tt_comm_plan_keeps_parent): its collectives are
 * cut short by ncclCommRevoke where NCCL has it, else left to finish or
 * to meet the watchdog (tt_comm_plan_cuts_short). */
void tt_comm_generation_changed(tt_comm_t *c, uint64_t gen, uint64_t shrink_of);

/* The membership client says this worker is no longer a member (fenced,
 * the job failed or finished; any thread, cheap): a collective in flight
 * can never complete, so the backend is aborted now rather than left to
 * its deadline (the ring ends it at once; ps runs to its deadline). The
 * collective then fails with the view's status (TT_EFENCED, TT_EJOBFAILED,
 * TT_EJOBDONE), as does every later one; the aborted backend is replaced
 * when a re-join brings a new generation. */
void tt_comm_membership_ended(tt_comm_t *c);

/* Synchronous collectives on the current generation (see tether.h for
 * the status codes). Any thread. */
int tt_comm_allreduce(tt_comm_t *c, void *buf, size_t count, tt_dtype_t dt, tt_redop_t op);
int tt_comm_broadcast(tt_comm_t *c, void *buf, size_t count, tt_dtype_t dt, int root);
int tt_comm_barrier(tt_comm_t *c);

/* Stores (put) or fetches part `part` (0-2) of the state through the shard
 * servers of the current generation (tt_coll_ops_t.state_io). TT_ENODEV
 * when the backend has none; otherwise as a collective, but involving
 * only this rank and the shards. A put with shard_update restores the
 * shards' AdamW step counter to `optim_step` (part 0). */
int tt_comm_state_io(tt_comm_t *c, int put, int part, float *buf, size_t count,
                     uint64_t optim_step);

/* With shard_update, between steps, one thread: the shard servers write
 * the state after the last step this rank completed as checkpoint parts
 * in `dir` (absolute); `phase` (1 or 2), *out, *n as
 * tt_coll_ops_t.write_ckpt (out and n may be NULL in phase 1). Neither
 * phase waits for the communication thread (tt_comm_ckpt.c): phase 1
 * queues the request ahead of the next collective and returns TT_OK; a
 * phase-2 call returns the answer to the question before it, TT_EAGAIN
 * while there is none or the parts are still written (and asks again),
 * or what went wrong since phase 1, as a collective's status (a failure
 * does not end the generation's backend). TT_EINVAL: bad arguments. */
struct tt_ps_written;
int tt_comm_write_ckpt(tt_comm_t *c, const char *dir, int phase, struct tt_ps_written **out,
                       size_t *n);

/* With shard_update: the learning rate of the steps that follow. TT_OK or
 * TT_EINVAL (not finite, negative, or the update is local). Step thread. */
int tt_comm_set_lr(tt_comm_t *c, float lr);

/* The ranks of the current generation agreed to resume at `step` (see
 * tether_resume_at). TT_OK, TT_EINVAL (negative, or no generation), TT_EBUSY
 * (a step is open). Step thread. */
int tt_comm_resume_at(tt_comm_t *c, int64_t step);

/* Step API; see tether_grad_register & co. in tether.h. */
int tt_comm_grad_register(tt_comm_t *c, float *ptr, size_t count, size_t *id);
float *tt_comm_grad_buffer(tt_comm_t *c, size_t id);
int tt_comm_grad_ready(tt_comm_t *c, size_t id);
int tt_comm_step_finish(tt_comm_t *c, int64_t local_count, int64_t *global_count);
/* The step's gradient SUMS already in one device buffer (CUDA): reduced in
 * place with the example count, on the device, after the CUDA event
 * `after` (NULL: none), all but the parts started earlier with
 * tt_comm_step_part_device. Replaces grad_ready/step_finish for that step.
 * TT_ENODEV, with nothing issued, unless the backend is NCCL (and the
 * update runs on the workers); otherwise as tt_comm_step_finish. */
int tt_comm_step_finish_device(tt_comm_t *c, float *dgrads, size_t count, int64_t local_count,
                               int64_t *global_count, void *after);
/* Part of a device step, final once the CUDA event `after` fires: its sum
 * starts behind the event without waiting (see tether_step_ready_device).
 * TT_OK, TT_EINVAL, TT_ENODEV (nothing issued), TT_EBUSY, or the gate's
 * status when it opens the step. Step thread. */
int tt_comm_step_part_device(tt_comm_t *c, float *dpart, size_t count, void *after);
int tt_comm_audit(tt_comm_t *c, const float *params, size_t count, int64_t step);
int tt_comm_audit_params(tt_comm_t *c, const float *params, size_t count);
void tt_comm_step_stats(tt_comm_t *c, tt_comm_stats_t *s);

/* Flight-recorder text of this process (API records across generations,
 * then the current backend's own), malloc'd; NULL when out of memory.
 * Any thread. */
char *tt_comm_dump(tt_comm_t *c, const char *who);

/* The last error sentence ("" when none) into out. Any thread. */
void tt_comm_last_error(tt_comm_t *c, char *out, size_t n);

#endif

/* tt_coll: the collective backends of libtether behind one ops table, and
 * the pure rules that pick one. A backend instance serves one generation:
 * it is created from that generation's rank, world and member endpoints,
 * runs all-reduce / broadcast / barrier for it, and is destroyed when the
 * generation ends. Backends, in order of preference:
 *   ring  the TCP ring of tt_ring (every CPU build has it);
 *   ps    aggregation on the shard servers (tt_ps) of the whole registered
 *         gradient buffer with the example count (reduce_step); its plain
 *         collectives (small: metrics, audits) ride a ring when the
 *         members advertised endpoints, else return TT_ENODEV;
 *   nccl  GPU collectives (a stub returning TT_ENODEV "built without NCCL").
 * After a regroup the coordinator may announce that a ring generation's
 * first steps reduce on the shard servers while its ring is made
 * (cfg.ps_until_step): the "ring+ps" row is the ps backend whose
 * whole_step says no from that step on, when buckets take the ring; an
 * NCCL generation's "nccl+ps" row (tt_coll_nccl_ps.c) builds its
 * communicator meanwhile and takes it from that step.
 * It does not own threads, membership, steps or the flight recorder of the
 * API (tt_comm does): a backend is driven by one thread at a time.
 * Thread safety: the table and the pure functions are reentrant; an
 * instance's collectives run on one thread at a time; `dump` may be called
 * from any thread while the instance is alive. */
#ifndef TT_COLL_H
#define TT_COLL_H

#include <stddef.h>
#include <stdint.h>

#include "tt_collseq.h"
#include "tt_optim.h"
#include "tt_zauth.h"

struct tt_ps_written; /* tt_ps.h */

/* Which backend the configuration asks for. */
typedef enum {
    TT_COLL_AUTO = 0, /* ring; PS when the ring is unavailable */
    TT_COLL_RING = 1,
    TT_COLL_PS = 2,
    TT_COLL_NCCL = 3,
} tt_coll_kind_t;

/* A generation that is the previous one minus some members, formed at a
 * step boundary (Generation.shrink_of / shrink_exclude): NCCL ranks derive
 * its communicator from the old one with ncclCommShrink. */
#define TT_COLL_SHRINK_MAX 64 /* TT_WIRE_MAX_SHRINK */
typedef struct tt_coll_shrink {
    uint64_t of; /* the old generation; 0: none */
    int n;       /* old ranks excluded, ascending */
    int exclude[TT_COLL_SHRINK_MAX];
} tt_coll_shrink_t;

/* Everything a backend needs to serve one generation. */
typedef struct tt_coll_cfg {
    int rank, world;
    uint64_t generation;
    /* world entries (borrowed, read only during create); entries the
     * JoinReply did not list are "" - a ring reads only its own and its
     * right neighbour's. May be NULL when world == 1. */
    const char *const *endpoints;
    const char *bind_endpoint; /* NULL: endpoints[rank] */
    int ring_tcp_only;         /* tt_ring_opts_t.tcp_only */
    int deadline_ms;           /* per collective; 0: backend default */
    size_t segment_bytes;      /* ring pipelining unit; 0: default */
    size_t flight_capacity;    /* backend's own recorder; 0: default */
    /* NCCL rows: the CUDA device of this worker's communicator, made
     * current on the thread that creates it (and on the watchdog's);
     * < 0: that thread's current device (tt_comm passes the worker's
     * tether_coll_opts_t.cuda_device; a zeroed config means device 0). */
    int device;
    /* For backends that go through the coordinator or shard servers. */
    const char *coordinator, *job_id, *worker_id;
    /* The cluster key (borrowed; NULL or off: none): ring links and links
     * to shard servers authenticate with it, requests to the coordinator
     * use CURVE (tt_zauth.h). */
    const tt_zauth_key_t *key;
    uint32_t min_shards;    /* tt_ps_fetch_opts_t.min_shards */
    uint32_t shard_wait_ms; /* tt_ps_fetch_opts_t.timeout_ms; 0: its default */
    /* The registered gradient tensors (float32 element counts, in order);
     * the ps backend declares them to the coordinator. ntensors may be 0. */
    const size_t *tensor_counts;
    size_t ntensors;
    /* Generation.ps_until_step: a ring or NCCL generation's steps before
     * it reduce their gradients on the shard servers (the "ring+ps" and
     * "nccl+ps" rows); 0: none. */
    int64_t ps_until_step;
    /* The shard servers apply the optimizer (ps backend only): its kind
     * (0 SGD, 1 AdamW) and hyperparameters; the step's result is then the
     * new parameters. */
    int shard_update, optim;
    tt_optim_sgd_hp_t sgd;
    tt_optim_adamw_hp_t adamw;
    /* Generation.job_nonce: with job_id, the tag of this job's ring
     * messages (tt_ring_opts_t.job_tag). */
    uint64_t job_nonce;
    /* Set when the coordinator announced this generation as a shrink; an
     * NCCL row then shrinks `parent` (tt_coll_nccl_take_parent: the old
     * generation's communicator; NULL when this rank has none fit to
     * shrink, and the row then builds a fresh one) instead of relaying a
     * new unique id.
     * The NCCL rows' create owns `parent` from the call on, whatever it
     * returns; other rows ignore both. */
    const tt_coll_shrink_t *shrink;
    void *parent;
    /* Polled while a backend waits to be built (an NCCL communicator up
     * to the init deadline, the shards' placement and set-up) and while
     * a ps call waits: nonzero once `generation` is over or this worker
     * is no longer a member, and the wait gives up (TT_EMEMBERSHIP).
     * NULL: never. Any thread; must outlive the instance. */
    int (*gone)(void *ctx, uint64_t generation);
    void *gone_ctx;
} tt_coll_cfg_t;

/* One backend. Every function but `name` receives the instance made by
 * `create`. Status codes are those of tt_ring_allreduce (TT_EINVAL leaves
 * the instance usable; any other error poisons it). */
/* A slice of a step's gradient buffer, in elements. */
typedef struct {
    size_t off, count;
} tt_coll_span_t;

/* Parts of one step a device step starts early (reduce_part_device); a
 * caller with more leaves the others to the step's end. */
#define TT_COLL_EARLY_MAX 32

/* ops->suspect when a peer failed but the backend cannot say which (NCCL):
 * the report then asks the coordinator to check every other member. */
#define TT_COLL_SUSPECT_ANY (-2)

typedef struct tt_coll_ops {
    const char *name;
    int (*create)(void **inst, const tt_coll_cfg_t *cfg, char *err, size_t errlen);
    int (*allreduce)(void *inst, void *buf, size_t count, tt_dtype_t dt, tt_redop_t op);
    /* allreduce that also sums one int64 per rank (*side in: this rank's,
     * out: the sum) in the same collective (tt_ring_allreduce_side); NULL
     * for backends that cannot, which then reduce it on its own. */
    int (*allreduce_side)(void *inst, void *buf, size_t count, tt_dtype_t dt, tt_redop_t op,
                          int64_t *side);
    int (*broadcast)(void *inst, void *buf, size_t count, tt_dtype_t dt, int root);
    int (*barrier)(void *inst);
    /* Makes the instance refuse further collectives with TT_ECLOSED.
     * The ring also ends a collective in flight (TT_EMEMBERSHIP); the ps
     * backend's shard exchange runs to its deadline. Any thread may call
     * it. */
    void (*abort)(void *inst);
    void (*destroy)(void **inst); /* accepts NULL; sets *inst = NULL */
    /* Details of the last failure ("" when none), the rank it blames (-1:
     * none; TT_COLL_SUSPECT_ANY: a peer, but the backend cannot say
     * which), the backend's own flight text (malloc'd, may be NULL), the
     * step named in its messages. */
    const char *(*last_error)(void *inst);
    int (*suspect)(void *inst);
    char *(*dump)(void *inst);
    void (*set_step)(void *inst, int64_t step);
    /* Whole-step reduction of backends that aggregate on servers: replaces
     * the gradient sums buf[0..count) (the whole registered buffer) by
     * their MEAN over all ranks and sets *global_count to the summed
     * example count. NULL for backends that reduce buckets through
     * allreduce (ring, nccl). */
    int (*reduce_step)(void *inst, float *buf, size_t count, int64_t local_count,
                       int64_t *global_count, int64_t step);
    /* Backends with shard servers: stores (put) or fetches a copy of one
     * part (0 parameters, 1-2 optimizer buffers) of the state, laid out
     * like the registered gradients, on the shards of this generation;
     * how a regroup moves the authoritative state. NULL elsewhere. */
    int (*state_io)(void *inst, int put, int part, float *buf, size_t count, uint64_t optim_step);
    /* With shard_update: the learning rate of the next reduce_step. NULL
     * elsewhere. */
    void (*set_lr)(void *inst, float lr);
    /* With shard_update, between steps: every shard server writes its
     * chunks' state (following round `after_round` unless it is negative)
     * as one checkpoint part in `dir`. `phase` 1: returns once the shards
     * accepted (out unused); 2: the parts of that write, *out (malloc'd,
     * *n entries, free with tt_ps_written_free and free), TT_EAGAIN while
     * one is written. NULL elsewhere. */
    int (*write_ckpt)(void *inst, const char *dir, int phase, int64_t after_round,
                      struct tt_ps_written **out, size_t *n);
    /* With reduce_step: whether `step` reduces the whole step (1) or its
     * buckets go through allreduce (0). NULL: always whole. The same on
     * every rank for the same step. */
    int (*whole_step)(void *inst, int64_t step);
    /* The step's reduction in device memory (the NCCL rows): sums
     * dgrads[0..count) and the example count over all ranks, in place,
     * after `after` (a cudaEvent_t, may be NULL) completes, and waits for
     * it; early[0..nearly) are the slices this step already gave to
     * reduce_part_device, which the row does not sum again where it
     * started them. NULL for backends that read host memory only: the
     * caller then stages through the host. */
    int (*reduce_step_device)(void *inst, float *dgrads, size_t count, const tt_coll_span_t *early,
                              int nearly, double local_count, double *global_count, void *after,
                              int64_t step);
    /* A part of the step's device buffer, final once `after` fires: its
     * reduction is enqueued behind the event and not waited for, so it
     * overlaps the rest of backward. TT_OK with nothing enqueued where the
     * row reduces the step as a whole at its end (nccl+ps before its
     * switch). NULL for the rows without reduce_step_device. */
    int (*reduce_part_device)(void *inst, float *dpart, size_t count, void *after, int64_t step);
} tt_coll_ops_t;

/* The table for `kind` (never AUTO); NULL for an unknown kind. Static. */
const tt_coll_ops_t *tt_coll_ops(tt_coll_kind_t kind);

/* 1 when an instance of the "ps" row has a ring for plain collectives
 * (the members advertised endpoints and it could be set up), else 0. */
int tt_coll_ps_has_ring(const void *ps_inst);

/* "auto", "ring", "ps", "nccl" -> kind. TT_EINVAL for anything else. */
int tt_coll_parse_kind(const char *s, tt_coll_kind_t *out);
const char *tt_coll_kind_name(tt_coll_kind_t kind);

/* Backends to try for `want`, in order, into out[0..*n) (at most 3). AUTO
 * gives ring then ps, but skips the ring when world > 1 and
 * `ring_endpoints_ok` is 0 (a rank advertised no endpoint). An explicit
 * kind gives just that kind. Pure. */
void tt_coll_candidates(tt_coll_kind_t want, int world, int ring_endpoints_ok,
                        tt_coll_kind_t out[3], size_t *n);

/* The first rank of `world` whose entry in `endpoints` is empty, or -1
 * when a ring can be built (every rank advertised one, or world <= 1).
 * Decided on the whole list, which every member of a generation gets the
 * same, never on a rank's own neighbourhood: ranks that chose apart (a
 * ring here, the shards or nothing there) would wait on each other until
 * the deadline, generation after generation. Pure. */
int tt_coll_ring_endpoint_missing(const char *const *endpoints, int world);

/* The row a generation described by `cfg` gets for `kind`: a regrouped
 * generation that starts on the shard servers (ps_until_step > 0, two or
 * more ranks) gets "ring+ps" for the ring, and "nccl+ps" for NCCL where
 * NCCL is built and gradients are registered; otherwise tt_coll_ops. */
const tt_coll_ops_t *tt_coll_row(tt_coll_kind_t kind, const tt_coll_cfg_t *cfg);

/* Tries the candidates for `want` in order and returns the first instance
 * that could be created: *ops and *inst are set (caller destroys with
 * (*ops)->destroy). When every candidate fails, returns the error of the
 * first one (explicit kind) or of the last (auto) with one sentence per
 * attempt in `err`. */
int tt_coll_open(tt_coll_kind_t want, const tt_coll_cfg_t *cfg, const tt_coll_ops_t **ops,
                 void **inst, char *err, size_t errlen);

#endif

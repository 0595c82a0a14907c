/* tt_ps: the parameter-server collective backend of libtether for one
 * generation. all-reduce-sum-with-count over a flat float32 buffer: every
 * chunk of the buffer (as the coordinator's placement cuts it) is pushed to
 * the shard that holds it together with this rank's example count, and the
 * shard's answer replaces it: sum / total count in aggregate mode, the new
 * parameters in optimizer mode; both return the total count. Chunks go to
 * all shards in parallel with at most `credits` in flight per shard, so no
 * ZeroMQ high-water mark is ever reached (a ROUTER would drop, a DEALER
 * would block). Large chunks are sent without a copy; a call returns only
 * when ZeroMQ has released every frame that points into the caller's
 * buffer (or, after a failure, at most a second later: see below).
 * It also moves parameters and optimizer state to and from the shards
 * (tt_ps_set_params / tt_ps_get_params), which is how the authoritative
 * state travels at a regroup and how a joining worker gets the model, and
 * it declares the tensor table / fetches the placement from the coordinator
 * (tt_ps_layout_fetch).
 * A shard server that is restarted on its endpoint during a call does not
 * fail it: what it lost is sent again, in aggregate mode after setting the
 * job up there again, and in deterministic aggregate mode the ranks that
 * already had a step's result refill that step from a copy of their input
 * (tt_ps_recover.c; it costs one copy of the buffer per rank).
 * It does not know about membership: the library creates one per
 * generation (like tt_ring) and destroys it when the generation ends. The
 * interface follows tt_ring's so both can sit behind one ops table.
 * Thread safety: one thread at a time per object (ZeroMQ sockets are
 * single-threaded); tt_ps_interrupt from any thread at any time (it wakes
 * a call in flight); tt_ps_last_error/status/suspect from any thread, with
 * values that change only inside a call. */
#ifndef TT_PS_H
#define TT_PS_H

#include <stddef.h>
#include <stdint.h>

#include "tt_ckpt.h"
#include "tt_optim.h"
#include "tt_placement.h"
#include "tt_zauth.h"

typedef struct tt_ps tt_ps_t;

#define TT_PS_DEADLINE_DEFAULT_MS 60000
#define TT_PS_CREDITS_DEFAULT     4

typedef enum { TT_PS_AGGREGATE = 0, TT_PS_OPTIMIZER = 1 } tt_ps_mode_t;
typedef enum { TT_PS_SGD = 0, TT_PS_ADAMW = 1 } tt_ps_optim_t;
typedef enum { TT_PS_PARAMS = 0, TT_PS_STATE1 = 1, TT_PS_STATE2 = 2 } tt_ps_part_t;

/* A placement together with the data endpoint of each of its shards. */
typedef struct tt_ps_layout {
    tt_placement_t place;
    char **endpoints; /* place.nshards strings, owned */
} tt_ps_layout_t;

void tt_ps_layout_free(tt_ps_layout_t *l);

typedef struct tt_ps_tensor {
    const char *name;
    uint64_t count; /* float32 elements */
} tt_ps_tensor_t;

typedef struct tt_ps_fetch_opts {
    const char *coordinator;   /* control endpoint */
    const tt_zauth_key_t *key; /* the cluster key; NULL: none */
    const char *job_id;
    const char *sender_id;
    /* When ntensors > 0 the table is declared first (idempotent; a
     * different table is refused by the coordinator with the difference). */
    const tt_ps_tensor_t *tensors;
    size_t ntensors;
    uint64_t chunk_bytes; /* 0: 4 MiB */
    int timeout_ms;       /* 0: 10000 */
    /* DeclareTensors.min_shards: before the job's first placement the
     * coordinator answers TT_EAGAIN (waited out as above) while fewer shard
     * servers are alive. 0: any one. */
    uint32_t min_shards;
    /* Optional: asked between the asks above; nonzero once `generation`
     * is over, and the fetch ends with TT_EMEMBERSHIP instead of waiting
     * out timeout_ms for shards a newer generation may not need. */
    int (*gen_over)(void *ctx, uint64_t generation);
    void *gen_ctx;
    uint64_t generation;
} tt_ps_fetch_opts_t;

/* Asks the coordinator for the job's placement (declaring the tensor table
 * first when one is given) and fills *out (owned by the caller, free with
 * tt_ps_layout_free). Returns 0, TT_ETIMEDOUT (no answer), TT_EREMOTE or
 * the coordinator's code (e.g. TT_ECONFLICT; TT_EAGAIN while no shard is
 * live, asked again with a growing pause until timeout_ms) with its
 * sentence in `err`, TT_EPROTO, TT_EMEMBERSHIP (gen_over said so).
 * Blocking; any thread. */
int tt_ps_layout_fetch(const tt_ps_fetch_opts_t *o, tt_ps_layout_t *out, char *err, size_t errlen);

typedef struct tt_ps_opts {
    int rank;  /* 0 <= rank < world */
    int world; /* >= 1 */
    uint64_t generation;
    const char *job_id;
    const char *sender_id;        /* worker id, for logs on the shards */
    const tt_zauth_key_t *key;    /* the cluster key (read during create); NULL: none */
    const tt_ps_layout_t *layout; /* borrowed; copied during create */
    int deadline_ms;              /* per call; 0: 60000 */
    int credits;                  /* chunks in flight per shard; 0: 4 */
    int io_threads;               /* ZeroMQ I/O threads; 0: min(shards, 4) */
    tt_ps_mode_t mode;
    tt_ps_optim_t optim;       /* optimizer mode */
    tt_optim_sgd_hp_t sgd;     /* optimizer mode, SGD */
    tt_optim_adamw_hp_t adamw; /* optimizer mode, AdamW (its weight_decay) */
    int deterministic;         /* shards sum in rank order; aggregate mode also
                                  keeps this rank's last input to refill a
                                  restarted shard with the same bits */
    uint32_t park_timeout_ms;  /* shard-side round deadline; 0: shard default */
    uint64_t first_step;       /* sequence number of the first call */
    /* Optional: asked every few ms while a call waits; returns the rank of
     * a peer known to be gone (its connection closed), or -1. The shards
     * wait for every rank, so a round missing a dead one never completes:
     * the call then fails at once with TT_EUNREACHABLE naming that rank,
     * not at the deadline or the next generation. Called on the calling
     * thread. */
    int (*peer_gone)(void *ctx);
    void *peer_ctx;
    /* Optional: asked as often while a call waits, the setup in
     * tt_ps_create included; nonzero once `generation` is over (the
     * coordinator formed a newer one). The call then ends at once with
     * TT_EMEMBERSHIP, like tt_ps_interrupt, which nobody can call on an
     * object still being created. Called on the calling thread. */
    int (*gen_over)(void *ctx, uint64_t generation);
    void *gen_ctx;
} tt_ps_opts_t;

/* Connects to every shard of the layout and sets the job up on each
 * (mode, optimizer, the chunks it holds); waits for every shard to accept
 * under the deadline. Returns 0 with *out owned by the caller
 * (tt_ps_destroy), TT_EINVAL (bad options: `err` says which), TT_ETIMEDOUT
 * (a shard did not answer), a shard's refusal code (e.g. TT_ECONFLICT: the
 * job is set up differently), TT_EMEMBERSHIP (gen_over said so while it
 * waited), TT_ENOMEM, TT_ESYS. */
int tt_ps_create(tt_ps_t **out, const tt_ps_opts_t *opts, char *err, size_t errlen);

/* Closes the sockets and frees the object. Accepts NULL and *p == NULL;
 * sets *p = NULL. */
void tt_ps_destroy(tt_ps_t **p);

/* In-place all-reduce-sum-with-count of the whole flat space: `count` must
 * equal the layout's total elements. Pushes `local_count` (this rank's
 * examples) with the gradient sums in `buf`; on return `buf` holds the
 * result and *total_count (may be NULL) the sum of every rank's count.
 * Returns 0 or:
 *   TT_EINVAL     bad arguments (nothing was sent; the object stays usable)
 *   TT_EUNREACHABLE a shard lost its connection or the job too often within
 *                 one call (a restart within the deadline is no error)
 *   TT_ETIMEDOUT  the deadline passed (tt_ps_suspect names a missing rank
 *                 when a shard reported one)
 *   TT_EREMOTE and the other codes a shard refused a chunk with (stale
 *                 generation, duplicate, membership change, ...): the text
 *                 names the shard, chunk and reason
 *   TT_EDESYNC    shards disagree on the total count
 *   TT_EPROTO/TT_ESIZE a malformed reply
 * Any error except TT_EINVAL poisons the object (every later call returns
 * it): the library must build a new generation. After an error the shards
 * may still hold references to `buf` for up to a second; keep it valid
 * until tt_ps_destroy when in doubt. */
int tt_ps_allreduce(tt_ps_t *p, float *buf, size_t count, uint64_t local_count,
                    uint64_t *total_count);

/* The sequence number (training step) of the next all-reduce; it then
 * counts up by one per call. Every rank must use the same numbers. */
void tt_ps_set_step(tt_ps_t *p, uint64_t step);

/* Learning rate sent with the next all-reduces (optimizer mode). */
void tt_ps_set_lr(tt_ps_t *p, float lr);

/* Writes `count` elements of `part` at flat element `offset` to the shards
 * (all chunks the range touches, in parallel). With TT_PS_PARAMS,
 * `optim_step` restores the AdamW step counter of every chunk touched.
 * Returns 0, TT_EINVAL or the errors of tt_ps_allreduce (not poisoning:
 * a refused upload leaves the object usable). Not during a round. */
int tt_ps_set_params(tt_ps_t *p, tt_ps_part_t part, const float *src, size_t offset, size_t count,
                     uint64_t optim_step);

/* Reads `count` elements of `part` at flat element `offset` into dst.
 * *optim_step (may be NULL) gets the AdamW step counter of the first chunk.
 * Same returns as tt_ps_set_params. */
int tt_ps_get_params(tt_ps_t *p, tt_ps_part_t part, float *dst, size_t offset, size_t count,
                     uint64_t *optim_step);

/* A checkpoint part one shard server wrote (tt_ps_write_checkpoint): what
 * the manifest lists for it. ranges: owned, free with tt_ps_written_free. */
typedef struct tt_ps_written {
    char file[TT_CKPT_NAME_MAX]; /* "ps-<k>.bin", k: the shard's place */
    uint64_t size;
    uint32_t crc32c, planes, nranges;
    tt_ckpt_range_t *ranges; /* flat-space byte ranges, sorted */
} tt_ps_written_t;

/* Optimizer mode, between calls: every shard server writes the chunks it
 * holds (parameters and optimizer state after the last completed round,
 * which must be *after_round unless that is NULL; a shard that lost its
 * state refuses with TT_ESTALE) as one part <dir>/ps-<k>.bin, fsynced,
 * and answers with its size, CRC and ranges: out[k] for shard k (the
 * caller's array of tt_ps_nshards entries). The shards copy on their loops
 * and write on their thread pools; this returns when every part is durable.
 * Returns 0, TT_EINVAL (aggregate mode, bad dir), or the errors of
 * tt_ps_allreduce (not poisoning: a failed write leaves the object usable;
 * parts already written stay, uncommitted). Free out with
 * tt_ps_written_free either way. */
int tt_ps_write_checkpoint(tt_ps_t *p, const char *dir, const uint64_t *after_round,
                           tt_ps_written_t *out);
void tt_ps_written_free(tt_ps_written_t *w, size_t n);

/* tt_ps_write_checkpoint in two calls, so that the caller waits neither
 * for the shards' copy nor for their disk. begin returns once the request
 * is on its way to every shard, without an answer: a shard copies its
 * chunks before it reads this rank's next push, which follows on the same
 * connection, and the next round cannot complete without that push, so
 * training goes on at once. result, called between later calls, waits for
 * no shard either: it takes the answers that have arrived (the rounds in
 * between read them too) and asks again every shard whose part is not
 * known to be durable. It fills out[] like tt_ps_write_checkpoint once
 * every part of `dir` is, returns TT_EAGAIN until then, or what went wrong
 * since begin: TT_ESTALE when a shard's state did not follow *after_round
 * or it knows no such part (it restarted, or the request was lost with its
 * connection), TT_EIO for a refused request or a failed copy or write
 * (the shard's sentence in tt_ps_last_error), TT_ETIMEDOUT when a shard
 * left a question unanswered for the deadline. Neither poisons the
 * object. */
int tt_ps_checkpoint_begin(tt_ps_t *p, const char *dir, const uint64_t *after_round);
int tt_ps_checkpoint_result(tt_ps_t *p, const char *dir, tt_ps_written_t *out);

/* Shard servers of the layout. */
size_t tt_ps_nshards(const tt_ps_t *p);

/* Between calls, on the calling thread (e.g. from another collective's
 * waits): a shard that restarted after this rank had the result of the
 * last step may hold that step open for ranks that did not, and they
 * cannot leave it until this rank contributes again. This reads the
 * shards' connection events and, once a lost shard is connected again,
 * sets the job up there and pushes this rank's saved input of that step
 * to its chunks (deterministic aggregate mode; the answers are dropped).
 * Never blocks; a no-op otherwise. Accepts NULL. */
void tt_ps_tend(tt_ps_t *p);

/* Ends the call in flight (and every later one) with TT_EMEMBERSHIP: the
 * generation is over, e.g. because a shard it waits for is gone and the
 * coordinator formed a new one. The only function another thread may call
 * while a call runs. Accepts NULL. */
void tt_ps_interrupt(tt_ps_t *p);

/* Sticky status of a poisoned object, 0 while healthy. */
int tt_ps_status(const tt_ps_t *p);

/* Sentence of the last failure ("" when none); owned by the object. */
const char *tt_ps_last_error(const tt_ps_t *p);

/* A rank a shard reported missing at the last timeout, -1 when none. */
int tt_ps_suspect(const tt_ps_t *p);

#endif

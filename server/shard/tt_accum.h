/* tt_accum: one chunk of one job on a shard server: its parameters, its
 * optimizer state, and the aggregation in flight for it. The rules live
 * here, free of sockets, threads and clocks (time is an argument), so they
 * can be tested alone:
 *  - a contribution is scoped by (generation, step) and by the world of
 *    that generation; a duplicate rank, an older generation, a step that is
 *    already final, a wrong size, a world or learning rate that disagrees
 *    with the round's is refused and changes nothing;
 *  - a newer generation drops the partial round of the old one;
 *  - optimizer mode keeps its last final step across generations, because
 *    the chunk's state is after it: a newer generation that pushes that
 *    step again (a step redone after a regroup, which this chunk finished
 *    before the failure and others did not) gets a replay ticket and the
 *    current parameters, without a second update; an earlier step is
 *    refused. Uploading state (tt_accum_set) forgets the last final step:
 *    the state no longer follows from it;
 *  - the round is final when every rank 0..world-1 has contributed; the
 *    result is sum / total count (aggregate mode) or the parameters after
 *    one optimizer update with grad_scale = 1 / total count (optimizer
 *    mode); a round with total count 0 gives zeros / no gradient step;
 *  - default mode sums in arrival order into one buffer; deterministic mode
 *    keeps each rank's contribution and sums in rank order at the end, so
 *    the result is bitwise reproducible;
 *  - a round that is not final by its deadline is reported once (the
 *    caller tells the coordinator) and keeps waiting;
 *  - a round can be abandoned unfinished (tt_accum_abandon).
 *
 * Threads: the bookkeeping calls (admit, mark_done, expiry, set/get params)
 * belong to one thread (the shard's loop); the data calls (tt_accum_add,
 * tt_accum_finish) may run on another (the thread pool) provided the caller
 * runs at most one data call per accumulator at a time, calls add for
 * admitted contributions in admission order, and calls finish only after
 * every admitted add returned. Bookkeeping never touches the data buffers,
 * except set/get params, which the caller must not overlap with data calls
 * (tt_accum_busy tells it to refuse). */
#ifndef TT_ACCUM_H
#define TT_ACCUM_H

#include <stddef.h>
#include <stdint.h>

#include "tt_optim.h"

typedef struct tt_accum tt_accum_t;

typedef enum { TT_ACCUM_AGGREGATE = 0, TT_ACCUM_OPTIMIZER = 1 } tt_accum_mode_t;
typedef enum { TT_ACCUM_SGD = 0, TT_ACCUM_ADAMW = 1 } tt_accum_optim_t;
typedef enum { TT_ACCUM_PARAMS = 0, TT_ACCUM_STATE1 = 1, TT_ACCUM_STATE2 = 2 } tt_accum_part_t;

#define TT_ACCUM_MAX_WORLD 65536u

typedef struct tt_accum_opts {
    size_t elems; /* float32 elements of the chunk, >= 1 */
    tt_accum_mode_t mode;
    tt_accum_optim_t optim; /* optimizer mode only */
    tt_optim_sgd_hp_t sgd;
    tt_optim_adamw_hp_t adamw;
    int deterministic;
    uint32_t timeout_ms; /* round deadline after its first contribution; 0: 30000 */
} tt_accum_opts_t;

/* One contribution's header (the data follows separately). */
typedef struct tt_accum_push {
    uint64_t generation;
    uint64_t step;
    uint32_t rank, world;
    uint64_t examples;
    float lr;
    size_t elems;
} tt_accum_push_t;

/* What admit tells the caller about an accepted contribution. */
typedef struct tt_accum_ticket {
    int first;       /* first of its round: tt_accum_add copies, not adds */
    int complete;    /* the round now has every rank */
    int dropped_gen; /* a newer generation dropped an older partial round */
    int replay;      /* optimizer mode: the step is final here already and
                      * was pushed by a newer generation: answer it with the
                      * parameters (tt_accum_get) and tt_accum_done_total;
                      * nothing was added and no round is open */
} tt_accum_ticket_t;

/* 0, TT_EINVAL (elems 0, bad mode/optimizer) or TT_ENOMEM. Parameters and
 * optimizer state start at zero. */
int tt_accum_create(tt_accum_t **out, const tt_accum_opts_t *opts);
void tt_accum_destroy(tt_accum_t **a);

/* Decides whether a contribution joins the current round. TT_OK with
 * *ticket filled; otherwise nothing changed and `err` has a sentence:
 * TT_ESIZE (wrong element count), TT_ESTALE (older generation, or the step
 * is already final and no replay), TT_EEXIST (this rank already contributed), TT_EDESYNC
 * (another step is in progress, or the world or learning rate differ),
 * TT_EINVAL (rank outside world, world too large), TT_ENOMEM. */
int tt_accum_admit(tt_accum_t *a, const tt_accum_push_t *p, uint64_t now_ms,
                   tt_accum_ticket_t *ticket, char *err, size_t errlen);

/* Data: folds an admitted contribution of `rank` in. `first` from its
 * ticket. */
void tt_accum_add(tt_accum_t *a, uint32_t rank, const float *data, int first);

/* Data: once every rank's add returned, computes the result into `out`
 * (elems floats, caller-owned) and, in optimizer mode, updates the
 * parameters and state. Returns the total example count. */
uint64_t tt_accum_finish(tt_accum_t *a, float *out);

/* Data: tt_accum_add of the round's last admitted contribution followed by
 * tt_accum_finish, fused into one pass over memory where the mode allows
 * (aggregate, not deterministic); the result is bitwise the same. */
uint64_t tt_accum_add_finish(tt_accum_t *a, uint32_t rank, const float *data, int first,
                             float *out);

/* Bookkeeping: the round finished (after tt_accum_finish returned); it
 * becomes the last final step and a new round may start. */
void tt_accum_mark_done(tt_accum_t *a);

/* Round state, for the daemon's parked pulls. */
int tt_accum_active(const tt_accum_t *a);                    /* a round is open */
uint64_t tt_accum_generation(const tt_accum_t *a);           /* highest seen */
uint64_t tt_accum_round_step(const tt_accum_t *a);           /* valid when active */
uint32_t tt_accum_round_world(const tt_accum_t *a);          /* valid when active */
int tt_accum_done_step(const tt_accum_t *a, uint64_t *step); /* 1 when one is final */
uint64_t tt_accum_done_total(const tt_accum_t *a);
uint64_t tt_accum_deadline(const tt_accum_t *a); /* UINT64_MAX when none */

/* Lists up to `cap` ranks that have not contributed to the open round and
 * returns how many there are in all (0 when no round is open). */
size_t tt_accum_missing(const tt_accum_t *a, uint32_t *ranks, size_t cap);

/* 1 exactly once per round: when it is open, not complete and now_ms has
 * reached its deadline (the caller reports the missing ranks). */
int tt_accum_take_expiry(tt_accum_t *a, uint64_t now_ms);

/* Moves to generation `gen` when it is newer, dropping an open round.
 * Returns 1 when something was dropped. */
int tt_accum_new_generation(tt_accum_t *a, uint64_t gen);

/* Drops the open round without finishing it: a restarted shard got a
 * step its ranks must finish first. Returns 1 when one was open. The
 * caller makes sure no data call is running (bookkeeping thread). */
int tt_accum_abandon(tt_accum_t *a);

/* Parameter / optimizer state upload and download at element `offset`.
 * TT_EINVAL (range outside the chunk, a part this optimizer does not have,
 * or a part that was never set for get), TT_ENOMEM. `optim_step` (set with
 * PARAMS) restores the AdamW step counter; get reports it. */
int tt_accum_set(tt_accum_t *a, tt_accum_part_t part, size_t offset, const float *src, size_t n,
                 uint64_t optim_step);
int tt_accum_get(const tt_accum_t *a, tt_accum_part_t part, size_t offset, float *dst, size_t n,
                 uint64_t *optim_step);

size_t tt_accum_elems(const tt_accum_t *a);
/* State planes an optimizer-mode chunk keeps (parameters, then state1 and
 * state2 where the optimizer has them): what a checkpoint of it stores.
 * 0 in aggregate mode, where the shard holds no authoritative state. */
uint32_t tt_accum_planes(const tt_accum_t *a);
/* Bytes of buffers currently held (params, state, sums, rank copies). */
uint64_t tt_accum_bytes(const tt_accum_t *a);
/* Whether the options match (a repeated setup must be identical). */
int tt_accum_same_opts(const tt_accum_t *a, const tt_accum_opts_t *o);

#endif

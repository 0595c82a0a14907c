/* tt_train_tether: the trainer's collective interface (tt_train_coll_t)
 * backed by libtether's public API, so tether-train is an ordinary
 * libtether program: it joins the job described by the TETHER_*
 * environment, registers the model's gradient tensors zero-copy (they are
 * one flat buffer already), hands each to the library as backward finishes
 * it, reports every completed step to the coordinator, and tells it when
 * the run is complete (the job is then FINISHED for everyone).
 * It does not own the model or the training loop (tt_trainer).
 * Thread safety: one training thread drives it. */
#ifndef TT_TRAIN_TETHER_H
#define TT_TRAIN_TETHER_H

#include "tt_mlp.h"
#include "tt_trainer.h"

#include <stddef.h>
#include <stdint.h>

struct tether; /* <tether/tether.h> */
typedef struct tt_train_tether tt_train_tether_t;

/* The job's checkpoint settings (the coordinator keeps the schedule);
 * keep 0: the run takes no checkpoints. */
typedef struct {
    uint32_t every_steps, every_ms, keep;
} tt_train_tether_ckpt_t;

/* Where the optimizer runs: on_shards 0, every rank (the trainer); 1, the
 * shard servers (backend "ps" only), with the trainer's optimizer. The
 * trainer's options also name the CUDA device of a GPU worker, which its
 * NCCL communicator then uses. */
typedef struct {
    int on_shards;
    const tt_trainer_opts_t *topts; /* borrowed during create */
} tt_train_tether_update_t;

/* Creates a tether object from the environment, sets the job's checkpoint
 * settings from `ck`, selects `backend` ("ring", "ps" or "auto") and where
 * the update runs (`up`), and joins the job (blocking). TT_OK, or the
 * library's status with a sentence in `err` (TT_EJOBDONE: the job had
 * finished already; nothing to do). */
int tt_train_tether_create(tt_train_tether_t **out, const char *backend,
                           const tt_train_tether_ckpt_t *ck, const tt_train_tether_update_t *up,
                           char *err, size_t errlen);

/* With the update on the shards: 1, and the number of state parts the
 * shards keep (parameters, then the optimizer's buffers) in *parts. */
int tt_train_tether_on_shards(const tt_train_tether_t *tt, int *parts);

/* Whether this process completed a step since it started (with the update
 * on the shards, the shards then hold the job's state). */
int tt_train_tether_stepped(const tt_train_tether_t *tt);

/* Fills *coll with the interface the trainer calls (ctx = tt). */
void tt_train_tether_coll(tt_train_tether_t *tt, tt_train_coll_t *coll);

/* Registers the model's gradient tensors with the library (zero copy: they
 * are back to back in the model's flat gradient buffer) and its parameters
 * for the divergence audit. Call once, after the trainer built the model,
 * before the first step. */
int tt_train_tether_register(tt_train_tether_t *tt, tt_mlp_t *mlp, char *err, size_t errlen);

int tt_train_tether_rank(tt_train_tether_t *tt);

/* The library object (borrowed; owned by tt). For tt_train_ft, which runs
 * the membership and state-agreement calls itself. */
struct tether *tt_train_tether_handle(tt_train_tether_t *tt);

/* 1 when a step's membership call already acknowledged a new generation
 * (tether_step_done returned TETHER_REGROUPED and the step was aborted with
 * TT_EMEMBERSHIP); clears the flag. */
int tt_train_tether_take_regrouped(tt_train_tether_t *tt);

/* Global steps whose update this rank applied, as counted here. */
int64_t tt_train_tether_steps_done(const tt_train_tether_t *tt);

/* After the agreement: this rank has now applied `steps_done` steps, the
 * coordinator knows it (nothing is left to report), and the generation's
 * next step carries that index (tether_resume_at). TT_OK or its error. */
int tt_train_tether_resync(tt_train_tether_t *tt, int64_t steps_done);

/* Share of step time spent waiting on communication, from the library. */
double tt_train_tether_comm_share(tt_train_tether_t *tt);

/* The run completed: leaves with reason "finished", which makes the
 * coordinator mark the job FINISHED (later and waiting joiners are told
 * TT_EJOBDONE instead of waiting for a generation that never forms). The
 * last step is not reported first: that report could stop at an announced
 * regroup boundary, only to admit a joiner the job no longer needs. Returns
 * tether_leave's status (TT_EJOBDONE: another rank finished it first). */
int tt_train_tether_finish(tt_train_tether_t *tt);

/* Reports the last completed step, leaves the job (reason "shutdown", a
 * regroup for the others, unless finished already) and frees everything.
 * Accepts NULL. */
void tt_train_tether_destroy(tt_train_tether_t **tt);

#endif

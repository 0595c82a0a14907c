/* tt_train_ft: the failover loop of tether-train. When a step fails
 * because a rank died, hung or a new generation formed, it acknowledges the
 * new generation (re-joining when this worker was fenced), makes every
 * member agree on the state to continue from, and resumes the epoch at the
 * next step with the global batch re-sliced over the new world. The state
 * agreement runs at the start of every generation, the first included, so
 * a worker that joins a running job pulls the state the same way a survivor
 * behind the others does. It owns the recovery policy (deadline, bound on
 * regroups) and its timing figures; it does not own the trainer, the
 * library object (tt_train_tether) or the collectives.
 * Thread safety: driven by the training thread only. */
#ifndef TT_TRAIN_FT_H
#define TT_TRAIN_FT_H

#include "tt_train_tether.h"
#include "tt_trainer.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t regroup_deadline_ms; /* max wait for a new generation; default 60000 */
    uint32_t max_regroups;        /* regroups allowed per run; default 100 */
    /* Non-zero while this worker is on its way out of the job (a stop
     * signal): a failed step is then returned as it is, and a regroup
     * under way is given up, instead of holding the others in an agreement
     * it would leave at the next boundary. NULL (the default): never. */
    int (*leaving)(void *ctx);
    void *leaving_ctx;
} tt_train_ft_opts_t;

/* Figures of the last recovery, for logs and bench/bench_failover. */
typedef struct {
    uint64_t regroups;      /* recoveries completed */
    uint64_t generation;    /* generation of the last agreement */
    int world;              /* its world size */
    int64_t resume_step;    /* global step it resumed at (c) */
    int root;               /* rank that provided the state; -1: no transfer */
    size_t bytes;           /* bytes this rank moved in the last agreement */
    int via_shards;         /* ... through the shard servers, not a broadcast */
    double regroup_s;       /* failed step -> generation acknowledged */
    double agree_s;         /* state agreement and transfer */
    double redo_s;          /* agreement done -> first step completed */
    uint64_t failed_at_ns;  /* monotonic time the last step failed */
    uint64_t resumed_at_ns; /* monotonic time the agreement finished */
} tt_train_ft_stats_t;

typedef struct tt_train_ft tt_train_ft_t;

/* Defaults, overridden by TETHER_REGROUP_DEADLINE_MS and
 * TETHER_MAX_REGROUPS. TT_OK or TT_EINVAL (sentence in err). */
int tt_train_ft_opts_from_env(tt_train_ft_opts_t *o, char *err, size_t errlen);

/* Binds the loop to a joined libtether trainer collective and a trainer
 * (both borrowed, must outlive it). TT_OK or TT_ENOMEM. */
int tt_train_ft_create(tt_train_ft_t **out, const tt_train_ft_opts_t *opts, tt_train_tether_t *tt,
                       tt_trainer_t *t);

/* Accepts NULL; sets *ft = NULL. */
void tt_train_ft_destroy(tt_train_ft_t **ft);

/* Whether a step's status is one the loop survives (a new generation, a
 * silent or disconnected peer, this worker fenced). */
int tt_train_ft_recoverable(int rc);

/* State agreement among the members of the current generation; every
 * member calls it at the start of the generation. Members agree on
 * c = the highest completed global step; when every member is at c and the
 * checksums of parameters and optimizer state agree nothing is sent,
 * otherwise the lowest rank at c broadcasts trainer state, parameters and
 * optimizer buffers, and a second checksum round proves the replicas equal.
 * TT_OK, TT_EDIVERGED (replicas differ after the transfer), TT_EINVAL (the
 * received state does not fit this trainer) or a collective's status. */
int tt_train_ft_agree(tt_train_ft_t *ft);

/* Acknowledges the generation that follows a failed step (polling
 * tether_step_done; tether_join again when fenced) and runs the agreement.
 * TT_OK, `step_rc` when the worker is leaving (opts.leaving),
 * TT_ETIMEDOUT (no generation within the regroup deadline),
 * TT_EJOBFAILED (the coordinator failed the job: the reason is logged),
 * TT_EAGAIN (the bound on regroups is spent) or a status of the agreement. */
int tt_train_ft_recover(tt_train_ft_t *ft, int step_rc);

/* The run's first agreement (a worker joining a running job pulls the
 * state here). A member lost meanwhile, e.g. a worker that dies at
 * start-up, is a regroup like a failed step's (tt_train_ft_recover), not
 * the end of the run. Returns what tt_train_ft_recover returns. */
int tt_train_ft_begin(tt_train_ft_t *ft);

/* tt_trainer_run_epoch with failover: a recoverable failure is followed
 * by tt_train_ft_recover and the epoch continues where the agreed state
 * left it (unless the worker is leaving: then the failure is returned).
 * Returns what tt_trainer_run_epoch returns, 1 when the agreed
 * state had already closed this epoch (no stats: another rank reported
 * it), or the status of a recovery that failed. */
int tt_train_ft_run_epoch(tt_train_ft_t *ft, tt_trainer_step_fn cb, void *cbctx,
                          tt_epoch_stats_t *stats);

/* This worker's rank in the current generation (-1 before a join). */
int tt_train_ft_rank(const tt_train_ft_t *ft);

/* Copies the figures of the recoveries so far. */
void tt_train_ft_stats(const tt_train_ft_t *ft, tt_train_ft_stats_t *out);

#endif

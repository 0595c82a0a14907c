/* tt_train_ckpt: trainer-side checkpoints for ring (aggregate) mode, where
 * parameters and optimizer state live on the workers and are identical on
 * every rank. It owns the step-boundary hook (the tt_ckpt_sched decision,
 * fed by a small control all-reduce through the trainer's collective), the
 * snapshot (a memcpy of this rank's slice [r*n/W, (r+1)*n/W) of every state
 * plane, plus the trainer state on rank 0; taken by the writer thread while
 * the next step computes when the trainer runs on a tt_train_ckpt_gate_t),
 * the background thread that writes the part files, the commit by rank 0
 * once every rank reported a durable part (sent to the coordinator, which
 * writes the manifest, `latest` and applies retention; done by rank 0
 * itself in a run without one),
 * and resume: loading
 * a committed checkpoint, verified first, into any world size through the
 * manifest's logical layout (tt_reshard). It does not own the trainer, the
 * collective or the on-disk format (common/tt_ckpt*, tt_manifest).
 * docs/checkpoints.md describes the protocol.
 *
 * Thread safety: one training thread calls every function; the object
 * runs at most one writer thread of its own, joined before it is reused
 * and by destroy. */
#ifndef TT_TRAIN_CKPT_H
#define TT_TRAIN_CKPT_H

#include "tt_ckpt_sched.h"
#include "tt_trainer.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *root;               /* checkpoint root directory shared by all ranks;
                                     * NULL or "": no checkpoints written */
    uint64_t every_steps;           /* 0: off */
    double every_s;                 /* rank 0's wall-clock period; 0: off */
    size_t keep;                    /* committed checkpoints kept; 0: 3 */
    const char *job_id;             /* recorded in the manifest; NULL: "local" */
    const tt_trainer_opts_t *topts; /* the trainer's options (borrowed during
                                     * create): layer shapes, batch, seed */
    /* The joined libtether handle (borrowed; NULL: a run without a
     * coordinator). With one, the coordinator keeps the schedule: its
     * requests (timer every_s, `tetherctl checkpoint JOB`) replace rank 0's
     * timer, it writes the manifest and `latest` and applies retention, and
     * resume asks it for the job's newest committed checkpoint first. */
    struct tether *tether;
    /* Non-zero: the update runs on the shard servers (needs `tether`), and
     * they hold this many state planes (parameters, optimizer buffers),
     * which they write themselves; resume loads them like any others. */
    int shard_planes;
} tt_train_ckpt_opts_t;

typedef struct {
    uint64_t started, committed, aborted;
    uint64_t stall_ns_total, stall_ns_max; /* step loop blocked in the hook */
    /* Of the stalls of the last (up to 256) checkpoints, from the boundary
     * that started one to the one that resolved it: the median, and how
     * many there were. */
    uint64_t stall_ns_median, stall_samples;
    /* Boundaries with no checkpoint in flight (a coordinator's request
     * is looked for every TT_TC_POLL_STEPS of them) and their time. */
    uint64_t idle_boundaries, idle_ns;
    uint64_t snapshot_ns_max; /* of which the snapshot memcpy */
    uint64_t last_bytes;      /* bytes this rank wrote last time */
    uint64_t last_write_ns;   /* its part writes, after the snapshot */
    uint64_t boundaries;
} tt_train_ckpt_stats_t;

typedef struct tt_train_ckpt tt_train_ckpt_t;

/* Creates the hook for trainer `t` and collective `coll` (both borrowed,
 * must outlive the object; coll must be the trainer's). On rank 0 with a
 * root it removes uncommitted leftovers (directories without a MANIFEST)
 * of earlier runs, before any rank can write. Returns 0, TT_EINVAL (bad
 * options, `err` says which), TT_ENOMEM, or the collective's status. */
int tt_train_ckpt_create(tt_train_ckpt_t **out, const tt_train_ckpt_opts_t *opts, tt_trainer_t *t,
                         const tt_train_coll_t *coll, char *err, size_t errlen);

/* Joins the writer thread (an uncommitted checkpoint stays uncommitted)
 * and frees everything. Accepts NULL; sets *c = NULL. */
void tt_train_ckpt_destroy(tt_train_ckpt_t **c);

/* Loads a checkpoint into the trainer before the first step. `mode`:
 * "none"; "job" (joined to a coordinator: the newest checkpoint of this
 * job it recorded that verifies, so a restart of every worker of a running
 * job goes on from where the job got to; nothing without a coordinator, a
 * root or a record); "auto" (the one `latest` names under the root;
 * refused when it does not verify, `err` naming the bad part);
 * "latest-valid" (the newest one that verifies); or the path of a
 * checkpoint directory (verified).
 * Every rank reads the whole logical state (parameters, optimizer state)
 * and the trainer state, whatever the world size at save time. `id`
 * (TT_MF_ID_MAX bytes, may be NULL) receives what was loaded. Returns 0
 * (loaded), 1 (nothing to load: "none", or no checkpoint yet for "job",
 * "auto" or "latest-valid"), TT_EINVAL (mode needs a root, model or optimizer do not
 * match), TT_ECORRUPT / TT_ENOTFOUND (verification failed), TT_ESYS,
 * TT_ENOMEM. */
int tt_train_ckpt_resume(tt_train_ckpt_t *c, const char *mode, char *id, char *err, size_t errlen);

/* The step-boundary hook: call on every rank after every completed step
 * (tt_trainer's step callback). `now_ms` is the monotonic clock (only rank
 * 0's matters). It may run one small all-reduce (a timer schedule, or a
 * checkpoint in flight), start a checkpoint (snapshot, then write on the
 * thread) and, on rank 0, commit one. Returns 0 or the collective's /
 * system's status. A status failover recovers from (a regroup, a peer
 * lost: tt_train_ft_recoverable) leaves checkpoints on, the checkpoint in
 * flight being aborted by the new generation; after any other error the
 * hook does nothing more. */
int tt_train_ckpt_boundary(tt_train_ckpt_t *c, uint64_t now_ms);

/* Asks for a checkpoint at the next boundary (every rank must call it
 * before the same boundary, e.g. at the same step). */
void tt_train_ckpt_request(tt_train_ckpt_t *c);

/* End of the run, every rank: waits for the checkpoint in flight and, when
 * every rank wrote its part, commits it (rank 0). 0 or a status. */
int tt_train_ckpt_finish(tt_train_ckpt_t *c);

/* First error sentence ("" when none); owned by the object. */
const char *tt_train_ckpt_error(const tt_train_ckpt_t *c);

void tt_train_ckpt_stats(const tt_train_ckpt_t *c, tt_train_ckpt_stats_t *st);

/* The collective the trainer should be built with when checkpoints may be
 * taken: it forwards every call to `inner` and, after finish() (the last
 * collective call before the optimizer update), waits until the snapshot of
 * a checkpoint started at the previous boundary is complete. The writer
 * thread then takes the snapshot while the step computes and communicates,
 * and the step loop only waits for what the copy did not overlap. Without a
 * gate the hook copies at the boundary (the whole copy is a stall).
 * Usage: tt_train_ckpt_gate_init(&g, &coll) before tt_trainer_create(...,
 * &g.coll, ...); create the checkpoint object with &g.inner; then
 * tt_train_ckpt_gate_attach(&g, ck). The gate must outlive the trainer;
 * detach (attach NULL) before destroying the object. Same thread rules. */
typedef struct {
    tt_train_coll_t coll;  /* what the trainer calls */
    tt_train_coll_t inner; /* the real collective */
    tt_train_ckpt_t *ck;   /* NULL: a pure pass-through */
} tt_train_ckpt_gate_t;

void tt_train_ckpt_gate_init(tt_train_ckpt_gate_t *g, const tt_train_coll_t *inner);
void tt_train_ckpt_gate_attach(tt_train_ckpt_gate_t *g, tt_train_ckpt_t *ck);

/* Internal to tt_train_ckpt*.c: the trainer-state part's payload. */
#define TT_TRAIN_CKPT_STATE_BYTES 112u
void tt_train_ckpt_state_encode(const tt_trainer_state_t *s, const uint64_t cfg[5],
                                uint8_t out[TT_TRAIN_CKPT_STATE_BYTES]);
int tt_train_ckpt_state_decode(const uint8_t *in, size_t len, tt_trainer_state_t *s,
                               uint64_t cfg[5]);

#endif

/* tt_train_ckpt_int: the object shared by tt_train_ckpt.c (boundary hook,
 * snapshot, writer thread), tt_train_ckpt_commit.c (rank 0's manifest and
 * commit), tt_train_ckpt_load.c (resume), tt_train_ckpt_coord.c,
 * tt_train_ckpt_gate.c and tt_train_ckpt_thread.c. Not an API: nothing
 * outside these files includes it. */
#ifndef TT_TRAIN_CKPT_INT_H
#define TT_TRAIN_CKPT_INT_H

#include "tt_ckpt.h"
#include "tt_ckpt_dir.h"
#include "tt_train_ckpt.h"

#include <pthread.h>
#include <stdatomic.h>

#define TT_TC_MAX_STATES  3
#define TT_TC_STALLS_KEPT 256 /* per-checkpoint stalls behind the median */

/* One checkpoint attempt of this rank; the thread owns it while running
 * and publishes `status` (release) when done. */
typedef struct {
    char dir[TT_CKPT_PATH_MAX];
    char id[TT_MF_ID_MAX];
    uint64_t step, epoch, start_unix_ms;
    int rank, world;
    uint64_t lo, hi; /* this rank's element range */
    uint32_t nstates;
    float *snap;                        /* nstates planes of hi - lo floats */
    const float *src[TT_TC_MAX_STATES]; /* live planes, when the thread copies */
    int copy_in_thread;                 /* gated: the thread takes the snapshot */
    uint64_t copy_ns;
    atomic_int copied; /* the snapshot is complete */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint8_t tstate[TT_TRAIN_CKPT_STATE_BYTES];
    uint64_t stall_at_step; /* test knob: hang inside the part writer */
    tt_ckpt_part_info_t shard, trainer;
    int shards_failed;     /* rank 0, update on the shards: their parts failed */
    struct tether *tether; /* with a coordinator: a failure is reported to it */
    uint64_t request;      /* the request it serves (rank 0; 0: none known) */
    uint64_t generation;
    uint64_t write_ns;
    char msg[512];
    atomic_int status; /* 0 running, 1 done, -1 failed */
} tt_tc_job_t;

struct tt_train_ckpt {
    char root[TT_CKPT_PATH_MAX];
    char job_id[TT_MF_ID_MAX];
    size_t keep;
    uint64_t cfg[5]; /* batch, seed, param count, optimizer, steps/epoch */
    int dims[TT_MLP_MAX_LAYERS + 1];
    int nlayers;
    tt_trainer_t *t;
    tt_train_coll_t coll;
    tt_ckpt_sched_t sched;
    uint32_t nstates;
    uint32_t states[TT_TC_MAX_STATES]; /* tt_state_kind_t of each plane */
    float *planes[TT_TC_MAX_STATES];   /* live buffers (borrowed) */
    size_t n;                          /* floats per plane */
    float *snap;    /* inside snap_mem, at the shard payload's offset modulo 4 KiB */
    void *snap_mem; /* the allocation */
    size_t snap_cap;
    double *ctl;
    size_t ctl_cap;
    tt_tc_job_t job;
    /* The checkpoint thread (tt_train_ckpt_thread.c). */
    pthread_t thr;
    int thr_started;         /* thr exists */
    int thr_live;            /* a job was handed over and not waited for */
    pthread_mutex_t run_mu;  /* guards run_fn, run_arg, run_stop */
    pthread_cond_t run_cv;   /* a job handed over, done, or stop */
    void *(*run_fn)(void *); /* the job the thread runs; NULL: idle */
    void *run_arg;
    int run_stop;
    void *(*later_fn)(void *); /* given, not handed over yet (step loop's) */
    void *later_arg;
    tt_manifest_t commit; /* rank 0: the manifest the commit thread stores */
    int in_commit;        /* the thread runs a commit, not a write */
    int world_at_start;
    int failed;
    int gated;     /* a tt_train_ckpt_gate is attached: copy off the step loop */
    int sync_init; /* job.mu, job.cv, run_mu, run_cv initialised */
    /* The update on the shards: the shard servers write the state planes
     * (tether_checkpoint_shards_begin/_result), the workers only rank 0's
     * trainer part. */
    int on_shards;
    struct tether_shard_part *ps_parts; /* rank 0: the last ones written */
    size_t nps_parts;
    int ps_state;          /* rank 0: their write 0 in flight, 1 durable, -1 failed */
    int joined_for_finish; /* the run ends: wait for them */
    uint64_t stall_knob;
    uint64_t ck_stall_ns;                   /* stall of the checkpoint in flight so far */
    uint64_t stall_kept[TT_TC_STALLS_KEPT]; /* of resolved ones, a ring */
    uint64_t nstall_kept;
    tt_train_ckpt_stats_t st;
    char resumed[TT_MF_ID_MAX]; /* the checkpoint this run resumed from ("": none) */
    /* With a coordinator (tt_train_ckpt_coord.c): the requests rank 0 has
     * taken up, and the one the checkpoint in flight serves. */
    struct tether *tether;
    uint64_t req_taken, req_serving;
    tt_ckpt_retry_t retry;    /* rank 0: the pause after a failed attempt */
    uint64_t commit_request;  /* req_serving of the checkpoint being committed */
    uint64_t commit_gen;      /* the generation it was taken in */
    atomic_int commit_failed; /* set by the commit thread */
    char err[512];
};

/* tt_train_ckpt_thread.c, all from the step loop: starts the checkpoint
 * thread (TT_ESYS if it cannot be); gives it `fn(arg)` (starting it if
 * need be), with `later` and a gate attached only at the next
 * tt_tc_thread_flush (the gate's, before the step's reduction); hands
 * over a job so kept; waits until the job given is done (handing it over
 * first); ends the thread (after its job). */
int tt_tc_thread_start(tt_train_ckpt_t *c);
int tt_tc_thread_run(tt_train_ckpt_t *c, void *(*fn)(void *), void *arg, int later);
void tt_tc_thread_flush(tt_train_ckpt_t *c);
void tt_tc_thread_wait(tt_train_ckpt_t *c);
void tt_tc_thread_stop(tt_train_ckpt_t *c);

/* With a gate attached: waits until the writer thread has copied the
 * snapshot of the checkpoint in flight (its wait counts as stall). */
void tt_tc_wait_snapshot(tt_train_ckpt_t *c);

/* tt_train_ckpt_commit.c, from the step loop: waits for the checkpoint
 * thread's job and frees the manifest of a commit it ran; builds rank 0's
 * manifest from the control reduce's sums `v` and hands the commit to the
 * thread (TT_OK also when the manifest cannot be built: the previous
 * checkpoint stays valid). */
void tt_tc_join(tt_train_ckpt_t *c);
int tt_tc_commit(tt_train_ckpt_t *c, const double *v);

/* Sets the object's first error and logs it; returns rc. */
int tt_tc_fail(tt_train_ckpt_t *c, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* tt_train_ckpt_coord.c: the coordinator's part (c->tether set). */

/* Steps between control reduces that look for a coordinator request when
 * nothing else needs one (an on-demand checkpoint starts within this many
 * steps of rank 0 hearing of it). */
#define TT_TC_POLL_STEPS 16

/* A failed part's report to the coordinator (on the writer thread): one
 * try, short, since an unreachable coordinator only costs the report. */
#define TT_TC_REPORT_TIMEOUT_MS 2000u

/* Rank 0's wish: the coordinator asked for a checkpoint not yet taken up,
 * and no pause after a failure holds it back (tt_ckpt_retry). */
int tt_tc_coord_wanted(tt_train_ckpt_t *c, uint64_t now_ms);
/* At a start: remember which request it serves (`wanted`: rank 0 wished
 * for it; every rank, so a failure report names it); after an abort:
 * forget, so the request is taken again, after a pause when a writer
 * failed (`writer_failed`, rank 0 only; not when the membership changed). */
void tt_tc_coord_started(tt_train_ckpt_t *c, int wanted);
void tt_tc_coord_aborted(tt_train_ckpt_t *c, int writer_failed, uint64_t now_ms);
/* The commit through the coordinator (on the commit thread). 0 or a
 * status, `err` set. */
int tt_tc_coord_commit(tt_train_ckpt_t *c, char *err, size_t errlen);
/* Resume "auto" / "latest-valid" / "job" (as latest-valid) from the
 * coordinator's record: TT_OK with `dir` (and *verify: 0 when already
 * verified), 1 when the coordinator has none (look on disk, or for "job"
 * start from scratch), or a refusal. */
int tt_tc_coord_pick(tt_train_ckpt_t *c, const char *mode, char *dir, int *verify, char *err,
                     size_t errlen);

/* Fills m->tensors (names, shapes, flat offsets) from the model. */
int tt_tc_tensors(const tt_train_ckpt_t *c, tt_manifest_t *m);

#endif

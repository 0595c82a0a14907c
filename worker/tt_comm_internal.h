/* tt_comm_internal: the private struct of tt_comm, shared by tt_comm.c
 * (thread, queue, backend), tt_comm_step.c (gradient step, audit) and
 * tt_comm_ckpt.c (the shards' checkpoint). Not used outside them. */
#ifndef TT_COMM_INTERNAL_H
#define TT_COMM_INTERNAL_H

#include "tt_buckets.h"
#include "tt_comm.h"
#include "tt_flight.h"

#include <pthread.h>
#include <stdarg.h>

/* What a job is to the step: backends that reduce the whole step at once
 * (reduce_step, the ps backend) skip bucket jobs and turn the count job
 * into the step's one reduction. */
enum {
    TT_COMM_JOB_PLAIN = 0,
    TT_COMM_JOB_BUCKET = 1,
    TT_COMM_JOB_COUNT = 2,
    TT_COMM_JOB_STATE = 3,
    TT_COMM_JOB_CKPT = 4,       /* the shards write a checkpoint (buf: the directory) */
    TT_COMM_JOB_DEVICE = 5,     /* the step's end on device memory (buf), count in io_count */
    TT_COMM_JOB_DEVICE_PART = 6 /* a part of a device step, started early (buf) */
};

/* One queued collective. Owned by whoever waits for it (a stack frame or
 * the step's job array); the thread touches it only until `done`. */
typedef struct tt_comm_job {
    int kind;                       /* tt_coll_op_t */
    int role;                       /* TT_COMM_JOB_* */
    float *flat;                    /* COUNT: the step's whole gradient buffer */
    size_t flat_count;              /* its elements */
    int averaged;                   /* COUNT: the backend left means, not sums */
    struct tt_comm_job *fuse;       /* BUCKET: the COUNT job whose value rides along */
    int fused;                      /* COUNT: already summed with the last bucket */
    float lr;                       /* COUNT with shard_update: the step's learning rate */
    uint64_t optim_step;            /* STATE put: the state's AdamW step counter */
    struct tt_ps_written **written; /* CKPT: the parts written */
    int phase;                      /* CKPT: tt_coll_ops_t.write_ckpt's */
    size_t *nwritten;
    void *after;                 /* DEVICE: CUDA event the reduction waits for (NULL: none) */
    int64_t *io_count;           /* DEVICE: local example count in, global out */
    const tt_coll_span_t *early; /* DEVICE: the parts started early, in elements of buf */
    int nearly;
    void *buf;
    size_t count;
    tt_dtype_t dt;
    tt_redop_t op;
    int root;
    uint64_t gen; /* generation the job was issued in */
    int64_t step; /* named in timeout messages, -1: none */
    uint64_t seq; /* API sequence within gen */
    uint64_t flight_id;
    int status, done; /* under mu */
    uint64_t run_ns;
    struct tt_comm_job *next;
} tt_comm_job_t;

typedef struct tt_comm_tensor {
    float *user;  /* registered pointer, NULL: lives only in the flat buffer */
    size_t count; /* elements */
    int ready;    /* grad_ready seen this step */
} tt_comm_tensor_t;

struct tt_comm {
    tt_comm_opts_t opts;
    tt_comm_hooks_t hooks;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv, done_cv;
    int sync_ok;
    /* under mu */
    tt_comm_job_t *head, *tail;
    int stop;
    const tt_coll_ops_t *ops; /* written by the thread only */
    void *inst;
    uint64_t seq_gen, seq;
    char err[640];
    /* communication thread only */
    uint64_t inst_gen;
    int open_rc;
    char open_err[600];
    int logged_failure;
    uint64_t notified_gen; /* under mu: last tt_comm_generation_changed */
    uint64_t reported_gen;
    int reported_rank;
    tt_flight_t *flight;
    uint64_t device_steps; /* step thread: tt_comm_step_finish_device successes */
    /* step thread: the open device step's parts (tt_comm_step_part_device);
     * a device step is open while it has any */
    tt_comm_job_t dev_parts[TT_COLL_EARLY_MAX];
    tt_coll_span_t dev_spans[TT_COLL_EARLY_MAX];
    int ndev_parts;
    /* step state: the thread that drives the step */
    tt_comm_tensor_t *tensors;
    size_t ntensors, tcap;
    tt_buckets_t *buckets;
    int finalized, zero_copy, step_open, step_rc;
    float *flat;
    tt_comm_plan_t plan;
    tt_comm_job_t *bjobs; /* one per bucket */
    unsigned char *launched;
    size_t *scratch_done, *scratch_launch;
    tt_comm_job_t count_job;
    int64_t count_val;
    float lr; /* shard_update: the next steps' learning rate (step thread) */
    uint64_t step_gen;
    int64_t step_index; /* -1 until the first step of a generation */
    const float *audit_params;
    size_t audit_count;
    tt_comm_stats_t stats;
    uint64_t last_finish_ns, step_open_ns;
    /* under mu: tensor sizes for backends that declare them (set once) */
    size_t *tcounts;
    size_t ntcounts;
    /* the shards' checkpoint (tt_comm_ckpt.c), the asking thread's; the
     * job and the answer are the communication thread's while queued */
    tt_comm_job_t ckpt_job;
    int ckpt_busy;       /* ckpt_job queued and its end not taken */
    char ckpt_dir[4096]; /* TT_CKPT_PATH_MAX (tt_ckpt_dir.h) */
    struct tt_ps_written *ckpt_w;
    size_t ckpt_n;
};

void tt_comm_set_error(tt_comm_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tt_comm_enqueue(tt_comm_t *c, tt_comm_job_t *j);
/* Queues without waking the thread: the job rides with the next one
 * queued, or runs at tt_comm_kick. */
void tt_comm_enqueue_quiet(tt_comm_t *c, tt_comm_job_t *j);
void tt_comm_kick(tt_comm_t *c);
int tt_comm_wait(tt_comm_t *c, tt_comm_job_t *j);
/* The client's view, and whether a collective may run in it
 * (tt_comm_gate; its sentence becomes the error). */
int tt_comm_view_gated(tt_comm_t *c, tt_comm_view_t *v);
/* Membership gate, then enqueue and wait: a synchronous collective. */
int tt_comm_run_sync(tt_comm_t *c, tt_comm_job_t *j);
void tt_comm_step_release(tt_comm_t *c);
void tt_comm_ckpt_release(tt_comm_t *c);

#endif

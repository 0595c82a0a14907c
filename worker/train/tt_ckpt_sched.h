/* tt_ckpt_sched: the trigger and commit state machine of trainer-side
 * checkpoints, as a pure value with an injected clock. Every rank runs one
 * copy (with the update on the shards only rank 0, whose inputs are then
 * all there is) and feeds it the same agreed inputs at the same step
 * boundary (the result of a small control all-reduce: whether rank 0's
 * timer fired, how many writers finished or failed, the generation), so
 * every copy makes the same decision at the same step without a separate
 * announcement. It decides when a checkpoint starts (every N steps, every
 * T ms, or on an explicit request, at most one in flight, a due one
 * deferred while another is in flight), and when the one in flight commits
 * or aborts. It does not snapshot, write, commit or talk to anybody
 * (tt_train_ckpt does). Thread safety: a plain value; one thread at a
 * time. */
#ifndef TT_CKPT_SCHED_H
#define TT_CKPT_SCHED_H

#include <stdint.h>

typedef struct {
    uint64_t every_steps; /* checkpoint when global_step % N == 0; 0: off */
    uint64_t every_ms;    /* checkpoint when rank 0's clock says so; 0: off */
} tt_ckpt_sched_opts_t;

typedef enum { TT_CKPT_PHASE_IDLE = 0, TT_CKPT_PHASE_WRITING = 1 } tt_ckpt_phase_t;

/* Bits of tt_ckpt_sched_boundary's result, applied in this order. */
enum {
    TT_CKPT_ACT_COMMIT = 1, /* every writer reported: commit the one in flight */
    TT_CKPT_ACT_ABORT = 2,  /* a writer failed or the generation changed */
    TT_CKPT_ACT_START = 4,  /* snapshot now and start writing checkpoint `step` */
    TT_CKPT_ACT_FAILED = 8, /* with ABORT: a writer failed (not a generation change) */
};

/* The agreed inputs of one step boundary. */
typedef struct {
    uint64_t step;       /* global steps completed */
    uint64_t generation; /* membership the boundary runs in */
    int time_due;        /* rank 0's timer fired (agreed through the reduce) */
    uint32_t writers;    /* parts the in-flight checkpoint needs */
    uint32_t done;       /* writers that reported a durable part */
    uint32_t failed;     /* writers that reported a failure */
} tt_ckpt_tick_t;

typedef struct {
    tt_ckpt_sched_opts_t o;
    tt_ckpt_phase_t phase;
    uint64_t last_ms;   /* rank 0's clock at the last start (or init) */
    uint64_t last_step; /* step of the last start (or the resumed step) */
    uint64_t inflight;  /* step of the checkpoint in flight */
    uint64_t inflight_gen;
    int pending; /* a due checkpoint waits for the one in flight */
    uint64_t started, committed, aborted;
} tt_ckpt_sched_t;

/* Starts the schedule at `step` (0, or the step a run resumed from: that
 * boundary is never checkpointed again) and rank 0's clock `now_ms`. */
void tt_ckpt_sched_init(tt_ckpt_sched_t *s, const tt_ckpt_sched_opts_t *o, uint64_t step,
                        uint64_t now_ms);

/* 1 when this boundary needs the control reduce: a timer schedule (rank 0's
 * wish must be shared) or a checkpoint in flight (reports must be
 * collected). Depends only on agreed state, so all ranks agree. */
int tt_ckpt_sched_needs_reduce(const tt_ckpt_sched_t *s);

/* Rank 0's local wish: the timer has fired at `now_ms`. */
int tt_ckpt_sched_time_due(const tt_ckpt_sched_t *s, uint64_t now_ms);

/* Asks for a checkpoint at the next boundary where none is in flight. Every
 * rank must call it before the same boundary. */
void tt_ckpt_sched_request(tt_ckpt_sched_t *s);

/* Call at every boundary with the generation the boundary runs in, before
 * deciding on the control reduce: a checkpoint in flight from an older
 * generation is aborted locally (a rank that joined since has none in
 * flight, so no rank may run a reduce for it), and a deferred one is
 * dropped (the joiner never deferred it). TT_CKPT_ACT_ABORT or 0. */
int tt_ckpt_sched_generation(tt_ckpt_sched_t *s, uint64_t generation);

/* Resolves the checkpoint in flight only (the end of a run): COMMIT,
 * ABORT or 0 (still writing, or none in flight). */
int tt_ckpt_sched_resolve(tt_ckpt_sched_t *s, const tt_ckpt_tick_t *tick);

/* Decides what happens at this boundary; a bit mask of TT_CKPT_ACT_*.
 * `now_ms` is only recorded (rank 0's copy drives the timer). Resolution
 * of the in-flight checkpoint comes first, so COMMIT|START or ABORT|START
 * in one boundary is possible. */
int tt_ckpt_sched_boundary(tt_ckpt_sched_t *s, const tt_ckpt_tick_t *tick, uint64_t now_ms);

/* Rank 0's pause before it takes the coordinator's open requests up again
 * after an attempt failed (a part not written, a commit refused). Without
 * it an open request is retried at every poll (TT_TC_POLL_STEPS steps):
 * on a full disk that is a checkpoint's worth of writes, a directory and
 * an error line per rank every few seconds, for as long as the disk stays
 * full. The pause doubles with each failure in a row, from
 * TT_CKPT_RETRY_FIRST_MS up to TT_CKPT_RETRY_MAX_MS; a request made after
 * the failure (an operator who freed space and asks again) is not held
 * back, and a served request ends the streak. A step schedule
 * (every_steps) is not affected: its next multiple is its retry. */
#define TT_CKPT_RETRY_FIRST_MS 5000u
#define TT_CKPT_RETRY_MAX_MS   300000u

typedef struct {
    uint64_t until_ms;  /* held back before this (rank 0's clock) */
    uint64_t delay_ms;  /* the pause of the newest failure; 0: no streak */
    uint64_t requested; /* requests made when it failed */
} tt_ckpt_retry_t;

/* An attempt failed at `now_ms` with `requested` requests made. Returns
 * the pause chosen. */
uint64_t tt_ckpt_retry_failed(tt_ckpt_retry_t *r, uint64_t requested, uint64_t now_ms);
/* 1 while the requests must wait: before until_ms, with no request newer
 * than the failure. */
int tt_ckpt_retry_holds(const tt_ckpt_retry_t *r, uint64_t requested, uint64_t now_ms);
/* `served` requests were served: a streak covered by them ends. */
void tt_ckpt_retry_served(tt_ckpt_retry_t *r, uint64_t served);

#endif

/* rdzv: the coordinator's rendezvous and membership state machine for one
 * job. It owns the job's settings, the current generation (its members and
 * their ranks), the participants and the wait list, failure suspicion and
 * confirmation, the "regroup after step S" protocol that admits late joiners
 * at a step boundary, the job's end (FAILED, or FINISHED when a worker
 * completed the run), the guard rails against flapping (a bound on regroups
 * per hour, a growing cool-down before a worker evicted again and again may
 * re-join), and the events that tell the daemon whom to answer.
 * It does not own sockets, timers, the clock, persistence or state transfer:
 * it is pure logic, time comes in as `now_ms`, deferred replies go out as
 * events (tt_rdzv_next_event), and persistence goes through a plain record
 * (tt_rdzv_export / tt_rdzv_restore) that another module maps to protobuf.
 *
 * Thread safety: a tt_rdzv_t is not thread safe. The daemon owns one per job
 * and calls it from its loop thread only; distinct objects are independent.
 * Logging goes through tt_log (subsystem "coord"). Nothing here blocks. */
#ifndef TT_RDZV_H
#define TT_RDZV_H

#include <stddef.h>
#include <stdint.h>

/* String limits, terminating NUL included: ids are at most 127 bytes. */
#define TT_RDZV_ID_MAX       128
#define TT_RDZV_HOST_MAX     256
#define TT_RDZV_ENDPOINT_MAX 256
#define TT_RDZV_REASON_MAX   256
/* Largest max_workers accepted; also the cap on the wait list length. */
#define TT_RDZV_WORKERS_LIMIT 65536u
/* Largest value accepted for any of the *_ms settings (one day). */
#define TT_RDZV_MS_LIMIT 86400000u

/* Numeric values match the wire enum JobState (JOB_REGROUPING = 2 is not a
 * state here: a pending regroup shows as RUNNING with regroup_after_step). */
typedef enum {
    TT_RDZV_WAITING = 0, /* collecting participants; no generation running */
    TT_RDZV_RUNNING = 1, /* a generation is formed */
    TT_RDZV_FAILED = 3,  /* terminal; see tt_rdzv_failure_reason() */
    /* terminal: a worker completed the run (tt_rdzv_finish); every later
     * request gets TT_EJOBDONE, and nothing fails or regroups any more */
    TT_RDZV_FINISHED = 4,
} tt_rdzv_state_t;

/* Job settings. Every field takes part in tt_rdzv_settings_equal(). */
typedef struct {
    uint32_t min_workers;
    uint32_t max_workers;
    uint32_t last_call_ms;         /* wait after min is reached (2000) */
    uint32_t heartbeat_ms;         /* worker heartbeat interval (1000) */
    uint32_t heartbeat_timeout_ms; /* dead after this much silence (5000) */
    uint32_t global_batch;         /* examples per step over all ranks */
    uint32_t join_timeout_ms;      /* below-min wait before failing (60000) */
    /* Checkpoints (coord_ckpt.c); the rendezvous only keeps and compares
     * them. keep 0: the job takes no checkpoints. */
    uint32_t checkpoint_every_steps; /* 0: off */
    uint32_t checkpoint_every_ms;    /* 0: off */
    uint32_t checkpoint_keep;        /* 0 (default): no checkpoints */
    /* Guard rails of this job (tt_rdzv_guard_for_job); 0: the
     * coordinator's own. */
    uint32_t max_regroups_per_hour;
    uint32_t flap_cooldown_ms;
} tt_rdzv_settings_t;

/* Defaults: min = max = 1, last call 2000 ms, heartbeat 1000 ms, heartbeat
 * timeout 5000 ms, global batch 256, join timeout 60000 ms. */
tt_rdzv_settings_t tt_rdzv_settings_default(void);

/* Checks 1 <= min <= max <= TT_RDZV_WORKERS_LIMIT, every *_ms in
 * 1..TT_RDZV_MS_LIMIT, heartbeat_timeout_ms > heartbeat_ms, and
 * global_batch >= max_workers (so that no rank ever gets an empty slice).
 * Returns TT_OK or TT_EINVAL with a sentence naming the field, its value and
 * the rule in `err` (may be NULL). Pure; any thread. */
int tt_rdzv_settings_validate(const tt_rdzv_settings_t *s, char *err, size_t errlen);

/* 1 when every field is equal, else 0. */
int tt_rdzv_settings_equal(const tt_rdzv_settings_t *a, const tt_rdzv_settings_t *b);

/* Compares a job's settings with a joiner's. Returns 0 when equal; else 1
 * and writes "min_workers: job has 2, join asked 3" for the first differing
 * field (in declaration order) into `msg` (may be NULL). */
int tt_rdzv_settings_diff(const tt_rdzv_settings_t *job, const tt_rdzv_settings_t *join, char *msg,
                          size_t msglen);

/* Guard rails against a flapping job: the coordinator's policy, which a
 * job's settings may override (tt_rdzv_guard_for_job).
 *   max_regroups_per_hour: a generation formed after the first is a
 *     regroup; the one that would make more than this many within the last
 *     hour fails the job instead, with a reason naming the bound. 0: none.
 *   flap_cooldown_ms: a worker evicted k >= 2 times within the last hour
 *     may join again only flap_cooldown_ms * 2^(k-2) ms after its last
 *     eviction, capped at flap_cooldown_max_ms; earlier joins get TT_EBUSY
 *     with a sentence saying when. 0: no cool-down.
 * Every eviction counts (death, confirmed report, leave, a re-join that
 * replaced the member), since each one costs the job a regroup. The first
 * one within the hour costs no wait: one failure is not flapping, and its
 * re-join is the ordinary failover path (held back 1 s, it let a fenced
 * worker's stale ring break the next generation before the re-join's
 * regroup was announced: test_failover's SIGSTOP test then failed 4 runs
 * of 11, and 0 of 8 without the hold). */
typedef struct {
    uint32_t max_regroups_per_hour; /* 60 */
    uint32_t flap_cooldown_ms;      /* 1000 */
    uint32_t flap_cooldown_max_ms;  /* 300000 (five minutes) */
} tt_rdzv_guard_t;

/* Largest max_regroups_per_hour accepted (the rdzv keeps one timestamp per
 * regroup it may still have to count). */
#define TT_RDZV_REGROUPS_LIMIT 100000u
/* The window both guard rails look back over. */
#define TT_RDZV_HOUR_MS 3600000u

/* Defaults: 60 regroups per hour, cool-down 1000 ms doubling up to 5 min. */
tt_rdzv_guard_t tt_rdzv_guard_default(void);

/* Checks max_regroups_per_hour <= TT_RDZV_REGROUPS_LIMIT, both *_ms <=
 * TT_RDZV_MS_LIMIT and flap_cooldown_max_ms >= flap_cooldown_ms. TT_OK or
 * TT_EINVAL with a sentence naming the field in `err` (may be NULL). */
int tt_rdzv_guard_validate(const tt_rdzv_guard_t *g, char *err, size_t errlen);

/* The guard rails job `s` runs under: the coordinator's `daemon` ones with
 * the job's nonzero max_regroups_per_hour / flap_cooldown_ms in their
 * place (the cap rises to a longer job cool-down). Pure. */
tt_rdzv_guard_t tt_rdzv_guard_for_job(const tt_rdzv_guard_t *daemon, const tt_rdzv_settings_t *s);

/* One member of a generation (events, member lists, persistence). */
typedef struct {
    uint32_t rank;
    char worker_id[TT_RDZV_ID_MAX];
    char host[TT_RDZV_HOST_MAX];
    char endpoint[TT_RDZV_ENDPOINT_MAX];
    uint64_t incarnation;
    int64_t last_step; /* last completed step it reported, -1 = none */
} tt_rdzv_member_t;

/* A member as `tetherctl members` shows it. */
typedef struct {
    tt_rdzv_member_t m;
    uint64_t heartbeat_age_ms;               /* now - last heartbeat */
    int suspected;                           /* a report awaits confirmation */
    char suspect_reason[TT_RDZV_REASON_MAX]; /* "" unless suspected */
    double step_ms, wait_ms;                 /* tt_rdzv_step_times; 0: none yet */
    int straggler; /* the rank the others wait for (tt_rdzv_members says when) */
    int draining;  /* tt_rdzv_drain set: it leaves at the next step boundary */
} tt_rdzv_member_info_t;

typedef enum {
    /* A generation formed: answer every member (pending joins, members
     * waiting at a boundary, survivors) with its rank. `generation`,
     * `world_size`, `members` (sorted by rank) and `step` = resume_step,
     * the first step the generation runs. `shrink_of` != 0: this
     * generation is generation `shrink_of` minus the members that held
     * its ranks `shrink_exclude` (n_shrink_exclude of them, ascending):
     * formed at a step boundary every member waited at, by dropping
     * drained members and admitting nobody, so nothing was in flight and
     * the survivors keep their order (new rank = old rank minus the
     * excluded ranks below it). NCCL members may then shrink the old
     * communicator (Generation.shrink_of) instead of building a new one.
     * Every other formation (the first, after a death or a drain with
     * `now`: rdzv_group.c says why, tt_rdzv_regroup_now, one that admits
     * a joiner, more than TT_RDZV_SHRINK_MAX drained) has shrink_of 0 and
     * no excluded ranks. */
    TT_RDZV_EV_GENERATION_FORMED = 1,
    /* A member was declared dead and fenced. `worker_id`, `incarnation`,
     * `message` = reason, `generation` = the generation it was evicted from.
     * Any generation formed because of it follows as its own event. */
    TT_RDZV_EV_MEMBER_EVICTED = 2,
    /* A deferred join will never be granted: `worker_id`, `incarnation`,
     * `status` (TT_EJOBFAILED, TT_EJOBDONE when the job finished,
     * TT_ETIMEDOUT when the waiter went silent, TT_EFENCED when a newer
     * incarnation replaced it) and `message`. */
    TT_RDZV_EV_JOIN_REFUSED = 3,
    /* Every member must stop after completing step `step` (S) and call
     * tt_rdzv_at_boundary(); push it to all members. */
    TT_RDZV_EV_REGROUP_ANNOUNCED = 4,
    /* Answer to a member waiting at a boundary (`worker_id`): keep training.
     * `step` >= 0: the regroup moved to that step, stop after it instead;
     * `step` == -1: the regroup was cancelled (no one left to admit). */
    TT_RDZV_EV_CONTINUE = 5,
    /* The job failed for good: `message` = reason. Pending joins get their
     * own JOIN_REFUSED events before this one. */
    TT_RDZV_EV_JOB_FAILED = 6,
    /* A worker completed the run: the job is FINISHED for good. `message`
     * = the sentence every later request is refused with. Pending joins get
     * their own JOIN_REFUSED (TT_EJOBDONE) events before this one. */
    TT_RDZV_EV_JOB_FINISHED = 7,
} tt_rdzv_event_kind_t;

/* Most old ranks a shrink may exclude: Generation.shrink_exclude's bound
 * (TT_WIRE_MAX_SHRINK); a larger drain is announced as a new generation. */
#define TT_RDZV_SHRINK_MAX 64u

typedef struct {
    tt_rdzv_event_kind_t kind;
    uint64_t generation; /* generation current when the event was made */
    char worker_id[TT_RDZV_ID_MAX];
    uint64_t incarnation;
    int status;
    int64_t step;
    uint32_t world_size;
    const tt_rdzv_member_t *members; /* GENERATION_FORMED only, else NULL */
    char message[TT_RDZV_REASON_MAX];
    /* GENERATION_FORMED only: the shrink relation (see above); 0 / 0. */
    uint64_t shrink_of;
    uint32_t n_shrink_exclude;
    uint32_t shrink_exclude[TT_RDZV_SHRINK_MAX]; /* old ranks, ascending */
} tt_rdzv_event_t;

/* What a heartbeat returns to the worker. Filled on every return code except
 * TT_EINVAL, so that even a fenced worker learns the job's state. */
typedef struct {
    uint64_t generation; /* the job's current generation (0 = none) */
    tt_rdzv_state_t state;
    int64_t regroup_after_step; /* -1 = no regroup pending */
    int32_t rank;               /* rank in the current generation, -1 if not a member */
    uint32_t world_size;        /* members of the current generation */
} tt_rdzv_hb_reply_t;

typedef struct {
    const char *job_id;          /* 1..127 bytes; copied */
    tt_rdzv_settings_t settings; /* validated */
    uint64_t now_ms;             /* creation time: starts the join timeout */
    /* Generations this job id already used (a forgotten job's): the first
     * one formed is after_generation + 1, so that nothing that saw the old
     * ones (shard servers, late messages) takes the new for older. */
    uint64_t after_generation;
    /* Guard rails start as tt_rdzv_guard_default(); see tt_rdzv_set_guard. */
} tt_rdzv_opts_t;

typedef struct {
    const char *worker_id;              /* 1..127 bytes */
    uint64_t incarnation;               /* changes on every process start */
    const char *host;                   /* may be NULL or "" */
    const char *endpoint;               /* ring peer address; may be NULL or "" */
    int64_t last_step;                  /* last completed step it holds state for, -1 none */
    const tt_rdzv_settings_t *settings; /* NULL: accept the job's */
} tt_rdzv_join_t;

/* A report's suspect_rank when the reporter's collective failed without
 * naming a peer (NCCL says that a peer failed, not which one). */
#define TT_RDZV_SUSPECT_ANY UINT32_MAX

typedef struct {
    const char *reporter_id;
    uint64_t generation;   /* the generation `suspect_rank` refers to */
    uint32_t suspect_rank; /* or TT_RDZV_SUSPECT_ANY */
    const char *reason;    /* e.g. "peer disconnected"; may be NULL */
} tt_rdzv_report_t;

typedef struct tt_rdzv tt_rdzv_t;

/* Creates the rendezvous of job `opts->job_id` in WAITING with no
 * generation. The join timeout starts at opts->now_ms. Returns TT_OK,
 * TT_EINVAL (message in `err`, may be NULL) or TT_ENOMEM. *out is owned by
 * the caller; free with tt_rdzv_destroy(). */
int tt_rdzv_create(tt_rdzv_t **out, const tt_rdzv_opts_t *opts, char *err, size_t errlen);

/* Frees everything, including queued and popped events. Accepts NULL and a
 * pointer to NULL; sets *r = NULL. */
void tt_rdzv_destroy(tt_rdzv_t **r);

/* A worker asks to take part. The reply is deferred: TT_OK means "pending";
 * the answer is a GENERATION_FORMED event listing the worker (or a
 * JOIN_REFUSED event). In WAITING the worker becomes a participant (beyond
 * max_workers it waits for a later generation); while RUNNING it goes to the
 * wait list and a regroup is announced if a slot is free.
 *   - same worker_id and incarnation while pending: duplicate, TT_OK;
 *   - same worker_id, new incarnation while pending: replaces the old entry
 *     (the old process gets JOIN_REFUSED/TT_EFENCED);
 *   - worker_id is a member of the running generation (restarted, or it lost
 *     its state): the old member is evicted as dead and the new join goes to
 *     the wait list; since a death is a step boundary, the regroup it causes
 *     admits the new join at once when a slot is free.
 * Errors (synchronous, nothing changed, message in `err`): TT_EINVAL (bad
 * id or string too long), TT_ECONFLICT (settings differ; names the field),
 * TT_EJOBFAILED (job failed; the message gives the reason), TT_EJOBDONE
 * (job finished: nothing left to do), TT_EBUSY (the worker is in its flap
 * cool-down - the message says when it may come back - or the wait list
 * holds TT_RDZV_WORKERS_LIMIT entries). The cool-down is checked before a
 * re-join replaces a member, so a refused re-join evicts nobody.
 * TT_ENOMEM: see "Memory". */
int tt_rdzv_join(tt_rdzv_t *r, const tt_rdzv_join_t *req, uint64_t now_ms, char *err,
                 size_t errlen);

/* A worker leaves on purpose. A member is evicted at once (reason "left"),
 * as a death without the confirmation delay; a pending worker is dropped
 * silently (nobody waits for its answer). Returns TT_OK, TT_ENOTFOUND (not
 * known, or a different incarnation), TT_EJOBFAILED or TT_EJOBDONE. */
int tt_rdzv_leave(tt_rdzv_t *r, const char *worker_id, uint64_t incarnation, uint64_t now_ms);

/* The operator removes member `worker_id` (tetherctl drain). By default at
 * the next step boundary every member reaches, through the "regroup after
 * step S" protocol of a scale-up: no step fails and the new generation
 * resumes at S + 1 with the others. now != 0: at once, like a death (a
 * member that will never reach a boundary); the others' step in flight
 * fails and is redone. Either way the worker is told TT_EDRAINED (a
 * MEMBER_EVICTED event with that status), and so is every later request
 * of that incarnation, so it ends instead of joining again; no flap is
 * counted. A drain already set is TT_OK again (now != 0 then evicts at
 * once). A worker still waiting to be admitted is dropped at once, its
 * join refused with TT_EDRAINED. Returns TT_OK; TT_ENOTFOUND (neither a
 * member nor waiting); TT_EINVAL (the members left would be fewer than
 * min_workers); TT_EBUSY (no generation is running); TT_EJOBFAILED /
 * TT_EJOBDONE; with a sentence in err. */
int tt_rdzv_drain(tt_rdzv_t *r, const char *worker_id, int now, uint64_t now_ms, char *err,
                  size_t errlen);

/* A worker completed the job's run (it leaves with reason "finished"): the
 * job becomes FINISHED. Pending workers get JOIN_REFUSED (TT_EJOBDONE), a
 * JOB_FINISHED event follows, members and waiters are forgotten, and from
 * then on joins, heartbeats, boundaries, reports and leaves get
 * TT_EJOBDONE; no timeout, regroup or failure happens any more. The worker
 * must be known (member or waiting) with this incarnation: the first
 * finisher ends the job, since members of a synchronous job complete the
 * same steps; for the same reason a member finisher's last step becomes
 * the job's last committed step. Returns TT_OK, TT_ENOTFOUND (unknown or
 * other incarnation: nothing changed), TT_EJOBFAILED, TT_EJOBDONE (already
 * finished), TT_EINVAL. TT_ENOMEM: see "Memory". */
int tt_rdzv_finish(tt_rdzv_t *r, const char *worker_id, uint64_t incarnation, uint64_t now_ms);

/* Liveness and progress from one worker; `generation` is the one it runs
 * (0 while it waits). Records last_seen and last_step and clears any
 * suspicion and disconnect mark. Returns:
 *   TT_OK       a member at the current generation, or a pending worker;
 *   TT_ESTALE   a member of the current generation whose heartbeat carries an
 *               older generation: it has not yet received the newest
 *               GENERATION_FORMED. The heartbeat still counts and `reply` is
 *               filled, so the worker can fetch the generation and catch up;
 *   TT_EFENCED  not a member and not pending (declared dead, never joined,
 *               or an older incarnation): it must re-join, never carry on;
 *   TT_EPROTO   a member claiming a generation newer than the coordinator's
 *               (the coordinator lost state it had announced); ignored;
 *   TT_EJOBFAILED the job failed; TT_EJOBDONE the job finished;
 *   TT_EINVAL bad arguments.
 * last_step only grows: a completed_step below the recorded one is ignored.
 * A completed_step beyond a pending regroup step S raises S to it (see
 * tt_rdzv_at_boundary). `running`: the worker says it is not waiting at a
 * boundary (Heartbeat.stopped false). A running member of the current
 * generation that completed S or beyond has already entered the next
 * step, which it can only finish together with every other member, so S
 * moves to completed_step + 1 instead, and members waiting at the old S
 * are told to continue (left there, they would wait for it while it waits
 * for them in that step's collective until its deadline). `reply` may be
 * NULL. */
int tt_rdzv_heartbeat(tt_rdzv_t *r, const char *worker_id, uint64_t incarnation,
                      uint64_t generation, int64_t completed_step, int running, uint64_t now_ms,
                      tt_rdzv_hb_reply_t *reply);

/* A member reports a peer it suspects (a failed collective). Rule: the
 * suspect is marked; the suspicion is confirmed, and the suspect evicted,
 * when its heartbeat is overdue (silent for at least 1.5 x heartbeat_ms) or
 * the daemon saw its connection drop (tt_rdzv_peer_disconnected) - now or
 * later, as long as the suspicion stands. The suspect's next heartbeat
 * clears the suspicion: it is alive as far as the coordinator can tell, and
 * a reporter whose collective still fails reports again. The pending reason
 * shows in tt_rdzv_members(). TT_RDZV_SUSPECT_ANY suspects every other
 * member under the same rule: the dead are confirmed as above, the living
 * are cleared by their next heartbeat. `*confirmed` (may be NULL) is set to
 * the number of suspects evicted by this call. Returns TT_OK (accepted), TT_EFENCED
 * (reporter is not a member of the current generation), TT_ESTALE
 * (rep->generation is not the current one: its ranks mean nothing now),
 * TT_EINVAL (rank out of range, or a self-report), TT_EJOBFAILED,
 * TT_EJOBDONE. */
int tt_rdzv_report_failure(tt_rdzv_t *r, const tt_rdzv_report_t *rep, uint64_t now_ms,
                           int *confirmed);

/* The daemon's socket monitor saw this worker's connection close. Marks
 * it; a standing suspicion is confirmed at once. A mark alone evicts nobody
 * (ZeroMQ reconnects by itself); the next heartbeat clears it. Returns TT_OK
 * or TT_ENOTFOUND (unknown id or other incarnation; ignored). */
int tt_rdzv_peer_disconnected(tt_rdzv_t *r, const char *worker_id, uint64_t incarnation,
                              uint64_t now_ms);

/* A member has completed `completed_step` and stops there because a regroup
 * after step S was announced. The reply is deferred: TT_OK means it waits
 * for a GENERATION_FORMED event (everyone reached S, or a member died) or a
 * CONTINUE event (it stopped below S, S moved up, or the regroup was
 * cancelled; also sent at once when no regroup is pending). A completed step
 * beyond S raises S to it and re-announces. A member blocked in the
 * collective of step S+1 when it learns S must abandon that step and report
 * S: the others stopped after S, so the collective cannot complete.
 * Returns TT_OK, TT_EFENCED (not a member), TT_ESTALE (generation is not
 * the current one), TT_EINVAL, TT_EJOBFAILED, TT_EJOBDONE. */
int tt_rdzv_at_boundary(tt_rdzv_t *r, const char *worker_id, uint64_t generation,
                        int64_t completed_step, uint64_t now_ms);

/* Step timing from a member's heartbeat: cumulative steps finished, their
 * wall time and the time blocked on communication (us) since its process
 * started. Keeps the means over a window of at least TT_RDZV_TIMING_STEPS
 * steps or TT_RDZV_TIMING_US of step time since the previous update (the
 * first report: since the start; until a window is full the previous
 * means stand), for
 * tt_rdzv_members: in a synchronous job every rank's step takes as long
 * as the slowest one's, so the straggler is the rank that waits least.
 * Totals that go backwards start over. Ignored for anyone but a member of
 * that incarnation. */
#define TT_RDZV_TIMING_STEPS 8
#define TT_RDZV_TIMING_US    1000000u
void tt_rdzv_step_times(tt_rdzv_t *r, const char *worker_id, uint64_t incarnation, uint64_t steps,
                        uint64_t step_us, uint64_t wait_us);

/* Whether a checkpoint commit sent by `worker_id` at `generation` (its
 * view when it sent it) may move the job's `latest`. Why it matters: a
 * process that was fenced (stopped, partitioned) may wake with a commit of
 * an old step in flight; accepted after the live members committed newer
 * ones, it would send the next full restart back to that step. The rule:
 * the generation must be the job's current one, and while the job runs the
 * sender must be one of its members (after FINISHED or FAILED nobody is a
 * member any more; rank 0's last commit may follow another rank's finish).
 * The worker id alone cannot tell an old incarnation from the new one; the
 * generation can, since the new one joined a later generation. Returns
 * TT_OK, TT_ESTALE (another generation), TT_EFENCED (running, not a
 * member), TT_EINVAL. */
int tt_rdzv_may_commit(const tt_rdzv_t *r, const char *worker_id, uint64_t generation);

/* The rank of `worker_id` in `generation`, which must be the running
 * job's current one (the collective bootstrap id's relay checks who offers
 * and who asks with it). TT_OK with *rank, TT_ESTALE (another generation,
 * or the job is not running it any more), TT_EFENCED (not a member),
 * TT_EINVAL. */
int tt_rdzv_member_rank(const tt_rdzv_t *r, const char *worker_id, uint64_t generation,
                        uint32_t *rank);

/* Acts on time: heartbeat expiry (members, suspects, waiters), the last-call
 * deadline and the join timeout; nothing once FAILED or FINISHED. Cheap when
 * nothing is due: the expiry scan (O(n)) only runs once now_ms reaches a lower
 * bound of the earliest expiry. Returns TT_OK or TT_ENOMEM (see "Memory"). */
int tt_rdzv_tick(tt_rdzv_t *r, uint64_t now_ms);

/* Forms a new generation of a RUNNING job at once, with the same members
 * (and any waiters a free slot admits, as after a death), because something
 * outside the membership changed under it (e.g. a shard server holding its
 * chunks is gone, so every member's current collective cannot complete).
 * Like a death, the resume step is one past the highest step a member
 * reported: the members agree on the state among themselves. `reason` is
 * logged. The regroup counts against max_regroups_per_hour (one too many
 * fails the job). Returns TT_OK (formed, or the job failed by the guard
 * rail), TT_EAGAIN (WAITING: no generation runs, the next one is formed
 * anyway), TT_EJOBFAILED, TT_EJOBDONE, TT_EINVAL or TT_ENOMEM. */
int tt_rdzv_regroup_now(tt_rdzv_t *r, const char *reason, uint64_t now_ms);

/* The caller (the coordinator's loop) stood still for `gap_ms` up to
 * now_ms: the process was stopped, its host or VM paused. Heartbeats sent
 * meanwhile wait unread in its socket, and judged on the clock alone every
 * healthy worker would be overdue at once. So the time it could not
 * listen does not count: every member's and waiter's last heartbeat moves
 * gap_ms later (never past now_ms), and the expiry bound is recomputed at
 * the next tick. A worker that was already silent before the stall keeps
 * the silence it had. The job's own waits (below min_workers, the last
 * call) move by the gap too, since joins may wait unread as well. */
void tt_rdzv_forgive(tt_rdzv_t *r, uint64_t gap_ms, uint64_t now_ms);

/* Earliest now_ms at which tt_rdzv_tick() may have something to do, or
 * UINT64_MAX. It can be early (a heartbeat arrived meanwhile), never late:
 * arm the timer with it and call tick when it fires. */
uint64_t tt_rdzv_next_deadline(const tt_rdzv_t *r);

/* Pops the oldest event into *ev. Returns 1 when one was popped, 0 when the
 * queue is empty. Strings and `ev->members` are owned by the rdzv and stay
 * valid until the next tt_rdzv_next_event() or tt_rdzv_destroy() on it. */
int tt_rdzv_next_event(tt_rdzv_t *r, tt_rdzv_event_t *ev);

/* Replaces the guard rails (validated as by tt_rdzv_guard_validate). The
 * regroups counted so far are forgotten; the eviction history is kept.
 * Call it after tt_rdzv_create / tt_rdzv_restore when the daemon's policy
 * is not the default. TT_OK, TT_EINVAL (message in `err`, may be NULL) or
 * TT_ENOMEM (nothing changed). */
int tt_rdzv_set_guard(tt_rdzv_t *r, const tt_rdzv_guard_t *g, char *err, size_t errlen);
const tt_rdzv_guard_t *tt_rdzv_guard(const tt_rdzv_t *r);

/* Regroups counted within the last hour as of now_ms (0 when
 * max_regroups_per_hour is 0: nothing is counted then). */
uint32_t tt_rdzv_regroups_last_hour(const tt_rdzv_t *r, uint64_t now_ms);

/* The guard rails' memory for the state file, so that a restarted
 * coordinator keeps counting a flapping job's regroups and evictions
 * instead of starting both windows empty. Times are ages (now_ms minus the
 * event) because the caller's clock does not survive a restart (nor a
 * reboot, nor a move to another machine); the daemon stores wall-clock
 * times. Only events within the last hour are exported. */
#define TT_RDZV_FLAP_KEEP 32 /* evictions kept per worker id */
typedef struct {
    char worker_id[TT_RDZV_ID_MAX];
    uint32_t n;
    uint64_t age_ms[TT_RDZV_FLAP_KEEP]; /* oldest first */
} tt_rdzv_flap_saved_t;

typedef struct {
    uint32_t n_regroups;
    uint64_t *regroup_age_ms; /* oldest first */
    uint32_t n_flaps;
    tt_rdzv_flap_saved_t *flaps;
} tt_rdzv_history_t;

/* Fills *out (owned arrays; free with tt_rdzv_history_free). TT_OK or
 * TT_ENOMEM (*out empty). */
int tt_rdzv_history_export(const tt_rdzv_t *r, uint64_t now_ms, tt_rdzv_history_t *out);

/* Adds a saved memory to r's, as of now_ms; call it after tt_rdzv_set_guard
 * (which forgets regroups). Ages of an hour or more are dropped; of the
 * regroups only the newest max_regroups_per_hour are kept. An age larger
 * than now_ms (a clock younger than an hour, e.g. after a reboot) counts
 * as at time 0: remembered a little longer, never shorter. Entries that do
 * not fit in memory only shorten a cool-down, as in tt_rdzv_flap_note. */
void tt_rdzv_history_import(tt_rdzv_t *r, const tt_rdzv_history_t *h, uint64_t now_ms);

void tt_rdzv_history_free(tt_rdzv_history_t *h);

/* Accessors; borrowed strings live as long as the rdzv. */
const char *tt_rdzv_job_id(const tt_rdzv_t *r);
tt_rdzv_state_t tt_rdzv_state(const tt_rdzv_t *r);
const char *tt_rdzv_state_name(tt_rdzv_state_t s);
/* Latest formed generation, 0 = none yet. Still the old number in WAITING
 * after a below-min regroup: no generation is running then. */
uint64_t tt_rdzv_generation(const tt_rdzv_t *r);
const tt_rdzv_settings_t *tt_rdzv_settings(const tt_rdzv_t *r);
uint32_t tt_rdzv_member_count(const tt_rdzv_t *r);
/* Participants (WAITING) plus the wait list: everyone pending a generation. */
uint32_t tt_rdzv_waiter_count(const tt_rdzv_t *r);
const char *tt_rdzv_failure_reason(const tt_rdzv_t *r); /* "" unless FAILED */
/* Why requests are refused now: the failure reason when FAILED, the
 * "already finished" sentence when FINISHED, "" otherwise. */
const char *tt_rdzv_end_reason(const tt_rdzv_t *r);
int64_t tt_rdzv_regroup_after_step(const tt_rdzv_t *r); /* -1 = none */
/* The highest step that every member of some generation has reported
 * complete: max over time of (min over the members that reported a step
 * of last_step). Never decreases; -1 = none. O(members). */
int64_t tt_rdzv_last_committed_step(const tt_rdzv_t *r);
/* Where the running generation is: the lowest step its members reported
 * complete, among those that reported one (a joiner that has not is not
 * counted). Below tt_rdzv_last_committed_step while a generation trains
 * steps again (resumed from a checkpoint, or started over when no member
 * held the state). The committed step when not running or before any
 * member reported. O(members). */
int64_t tt_rdzv_current_step(const tt_rdzv_t *r);

/* Copies up to `cap` members, by rank, into `out` (may be NULL with cap 0)
 * and sets *n_total to the member count. Heartbeat ages are taken at now_ms.
 * When all fit and at least two report step timing, the one that waits
 * least is marked the straggler if the others' median wait exceeds its
 * wait by at least 0.5 ms and a tenth of the median step (below that the
 * ranks are even). Returns TT_OK. */
int tt_rdzv_members(const tt_rdzv_t *r, uint64_t now_ms, tt_rdzv_member_info_t *out, size_t cap,
                    size_t *n_total);

/* Persistence record. `members` is sorted by rank (rank == index). */
typedef struct {
    char job_id[TT_RDZV_ID_MAX];
    tt_rdzv_settings_t settings;
    tt_rdzv_state_t state;
    uint64_t generation;
    int64_t last_committed_step;
    char failure_reason[TT_RDZV_REASON_MAX];
    uint32_t n_members;
    tt_rdzv_member_t *members; /* owned by the record */
} tt_rdzv_record_t;

/* Fills *out with the durable part of the state: members of the running
 * generation (none in WAITING, FAILED or FINISHED). Participants, the wait
 * list, suspicions and a pending regroup are not kept: after a restore those
 * workers get TT_EFENCED and re-join. The guard rails' history travels
 * separately (tt_rdzv_history_export). Persist the record whenever a
 * GENERATION_FORMED event is popped, before sending its replies, so a restored
 * coordinator never hands out a generation number twice. Returns TT_OK or
 * TT_ENOMEM; free with tt_rdzv_record_free(). */
int tt_rdzv_export(const tt_rdzv_t *r, tt_rdzv_record_t *out);

/* Frees rec->members and zeroes the record; accepts NULL. */
void tt_rdzv_record_free(tt_rdzv_record_t *rec);

/* Rebuilds a rendezvous after a coordinator restart. Members get
 * last_seen = now_ms: a grace period of one heartbeat timeout to come back.
 * A member that heartbeats with the recorded generation just continues (no
 * new generation, training undisturbed); one that never comes back is
 * evicted by the normal timeout, and the regroup makes a generation newer
 * than every recorded one. A WAITING job restarts its join timeout at now_ms.
 * A FAILED or FINISHED job stays so. Guard rails start as the defaults.
 * Returns TT_OK, TT_ECORRUPT (inconsistent record; message in `err`) or
 * TT_ENOMEM. *out as for tt_rdzv_create(). */
int tt_rdzv_restore(tt_rdzv_t **out, const tt_rdzv_record_t *rec, uint64_t now_ms, char *err,
                    size_t errlen);

/* Memory: a mutating call that returns TT_ENOMEM may have applied its change
 * but lost an event. The daemon cannot answer every worker correctly then;
 * it should destroy the rdzv and restore it from its last record. */

#endif

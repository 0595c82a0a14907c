/* tt_nccl_watchdog: the deadline keeper of a device collective backend.
 * NCCL has no timeouts of its own and a dead peer leaves its kernels
 * spinning forever, so every enqueued collective is tracked here with a
 * deadline; a watchdog thread probes each one's completion (a CUDA event)
 * and the communicator's asynchronous error, and on an error or an expired
 * deadline reports the suspect through a callback and aborts the
 * communicator (never destroys it: destroy waits for the very kernels that
 * hang; the NCCL backend's abort revokes first, where it can). The
 * abort can itself hang, so a second monitor thread calls `abort_hung`
 * when it has not returned within its own deadline; the NCCL backend's
 * handler logs why and ends the process, the only way out of a wedged
 * device (PyTorch's choice too).
 *
 * The decisions are a pure state machine over an injected clock
 * (track / poll / abort_begin / abort_end / abort_overdue); the threads
 * only drive it with the monotonic clock. It knows nothing of NCCL or CUDA:
 * the backend supplies the probes. It does not own the communicator.
 *
 * Thread safety: every function may be called from any thread (one mutex);
 * callbacks `probe` and `async_error` run under that mutex and must be
 * quick and must not call back into the watchdog; `report`, `abort` and
 * `abort_hung` run without it. */
#ifndef TT_NCCL_WATCHDOG_H
#define TT_NCCL_WATCHDOG_H

#include <stddef.h>
#include <stdint.h>

#define TT_NCCL_WD_MAX_INFLIGHT 256

/* What a probe says about one tracked collective. */
typedef enum {
    TT_WD_PENDING = 0,
    TT_WD_DONE = 1,
    TT_WD_FAILED = 2, /* the probe itself failed (e.g. a CUDA error) */
} tt_wd_probe_t;

typedef enum {
    TT_WD_RUNNING = 0,  /* watching */
    TT_WD_ABORTING = 1, /* decided to abort; abort in progress */
    TT_WD_ABORTED = 2,  /* abort returned */
    TT_WD_HUNG = 3,     /* abort overran its deadline; abort_hung was called */
} tt_wd_state_t;

typedef struct {
    int deadline_ms;       /* per collective, from its enqueue; > 0 */
    int abort_deadline_ms; /* how long abort may take; > 0 */
    int poll_ms;           /* thread period; 0: 5 ms */
    void *ctx;
    /* Completion of collective `seq` (its event). Required. */
    tt_wd_probe_t (*probe)(void *ctx, uint64_t seq);
    /* 0 when the communicator is healthy, else a negative status with a
     * sentence in why (ncclCommGetAsyncError). May be NULL. */
    int (*async_error)(void *ctx, char *why, size_t len);
    /* The verdict, once: `seq` is the oldest unfinished collective,
     * `status` TT_ETIMEDOUT / TT_ENCCL / TT_ECUDA, `why` a sentence. The
     * backend names its suspect ranks here. May be NULL. */
    void (*report)(void *ctx, uint64_t seq, int status, const char *why);
    /* Aborts the communicator (may hang). Required for the threads. */
    void (*abort)(void *ctx);
    /* The abort hung past abort_deadline_ms. May be NULL (then only logged). */
    void (*abort_hung)(void *ctx, const char *why);
} tt_nccl_wd_opts_t;

typedef struct tt_nccl_wd tt_nccl_wd_t;

/* Creates a watchdog in state RUNNING with no threads (tt_nccl_wd_start
 * adds them). Returns 0, TT_EINVAL (deadlines <= 0, no probe), TT_ENOMEM. */
int tt_nccl_wd_create(tt_nccl_wd_t **out, const tt_nccl_wd_opts_t *opts);

/* Stops and joins the threads. No abort begins once it is called; one
 * already running is waited for, the monitor still timing it. Returns 1
 * when that abort overran its deadline (HUNG, with abort_hung not ending
 * the process): its thread is detached and the object leaked rather than
 * freed under it, and the caller must leave alone what the abort uses.
 * Else 0. Accepts NULL; sets *wd = NULL. */
int tt_nccl_wd_destroy(tt_nccl_wd_t **wd);

/* Starts the watchdog and monitor threads. 0 or TT_ESYS. */
int tt_nccl_wd_start(tt_nccl_wd_t *wd);

/* Tracks collective `seq` (strictly increasing) enqueued at now_ms; when
 * the list is full it first retires what finished (probing, as a pass).
 * 0, TT_ECLOSED (the watchdog has aborted: refuse new work), TT_EBUSY
 * (TT_NCCL_WD_MAX_INFLIGHT unfinished), TT_EINVAL (seq not increasing). */
int tt_nccl_wd_track(tt_nccl_wd_t *wd, uint64_t seq, uint64_t now_ms);

/* Where collective `seq` stands: 1 finished, 0 pending, or the negative
 * status of the verdict once the watchdog has decided to abort (every
 * unfinished collective then fails). Probes nothing. */
int tt_nccl_wd_result(tt_nccl_wd_t *wd, uint64_t seq);

/* One watchdog pass at now_ms: retires finished collectives in order,
 * checks the asynchronous error and the oldest deadline. Returns 1 when it
 * decided to abort (state ABORTING, `report` called, the caller must now
 * call abort), else 0. Pure apart from the callbacks. */
int tt_nccl_wd_poll(tt_nccl_wd_t *wd, uint64_t now_ms);

/* Decides to abort from outside (the backend's own error, a membership
 * change): as a failed poll with `status` and `why`. Returns 1 when this
 * call made the decision, 0 when one was already made. */
int tt_nccl_wd_fail(tt_nccl_wd_t *wd, int status, const char *why, uint64_t now_ms);

/* The abort started / returned (the thread brackets the `abort` call).
 * begin returns 0, and nothing starts, once destroy has begun: the
 * owner, tearing down, aborts or frees the communicator itself. */
int tt_nccl_wd_abort_begin(tt_nccl_wd_t *wd, uint64_t now_ms);
void tt_nccl_wd_abort_end(tt_nccl_wd_t *wd);

/* 1 once an abort that began has not returned within abort_deadline_ms at
 * now_ms (state becomes HUNG; reported once), else 0. */
int tt_nccl_wd_abort_overdue(tt_nccl_wd_t *wd, uint64_t now_ms);

tt_wd_state_t tt_nccl_wd_state(tt_nccl_wd_t *wd);
/* Number of tracked, unfinished collectives. */
size_t tt_nccl_wd_inflight(tt_nccl_wd_t *wd);
/* The verdict's sentence ("" while running). Copied into buf. */
void tt_nccl_wd_why(tt_nccl_wd_t *wd, char *buf, size_t len);

#endif

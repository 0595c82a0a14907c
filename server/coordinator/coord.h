/* coord: the tether-coordinator daemon. One libuv loop owns a ZeroMQ ROUTER
 * (control endpoint), one rendezvous (rdzv) per job, a timer armed at the
 * earliest rendezvous deadline, a socket monitor that turns closed TCP
 * connections into disconnect marks, and the durable state file. It turns
 * requests into rdzv calls and rdzv events into replies. Replies caused by
 * a new generation are held until the state that names it is durable, so a
 * restarted coordinator never hands out a generation number twice.
 * It does not own membership rules (rdzv.c) or the wire format (tt_wire).
 * Thread safety: everything runs on the loop thread; only the state file
 * write and checkpoint commits (manifest, `latest`, retention) run on the
 * libuv thread pool. */
#ifndef TT_COORD_H
#define TT_COORD_H

#include "rdzv.h"
#include "tt_zauth.h"

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct tt_coord tt_coord_t;

typedef struct tt_coord_opts {
    const char *listen;    /* e.g. "tcp://0.0.0.0:7600" */
    const char *state_dir; /* "" or NULL: no durable state */
    const char *id;        /* for logs */
    int64_t max_msg_bytes; /* ZMQ_MAXMSGSIZE of the control socket */
    /* Guard rails of every job (created or restored); NULL: defaults. */
    const tt_rdzv_guard_t *guard;
    /* A shard server silent this long is dead (its chunks are re-placed
     * and the jobs using them regroup); 0: TT_SHARDS_TIMEOUT_DEFAULT_MS. */
    uint32_t shard_timeout_ms;
    /* After a regroup of a job that ran steps, while a shard server is
     * alive: the first this many steps of the new generation run on the
     * PS backend (Generation.ps_until_step); 0: never. */
    uint32_t ps_fallback_steps;
    /* The cluster key (copied): CURVE on the control socket, and only
     * its holders admitted. NULL or off: no security (tt_zauth.h). */
    const tt_zauth_key_t *key;
} tt_coord_opts_t;

/* Creates the daemon on `loop` (borrowed), binds the control socket and
 * loads the state file when there is one. An invalid opts->guard is
 * refused with TT_EINVAL. The endpoint actually bound is
 * available from tt_coord_endpoint(). Returns 0 or a tt_status error with
 * `err` filled. */
int tt_coord_create(tt_coord_t **out, uv_loop_t *loop, const tt_coord_opts_t *opts, char *err,
                    size_t errlen);

const char *tt_coord_endpoint(const tt_coord_t *c);

/* Persists the state synchronously (shutdown path), or, while a
 * background write is in flight, right after it (once the loop runs its
 * completion), so that an older state is never renamed over a newer one. */
int tt_coord_save_now(tt_coord_t *c);

/* The HTTP endpoint's handler (a tt_http_handler_fn, ctx the
 * coordinator): /healthz, /readyz (503 once closing) and /metrics in the
 * Prometheus text format (coord_metrics.c). Loop thread. */
struct tt_http_reply;
void tt_coord_http(void *ctx, const char *path, struct tt_http_reply *r);

/* Stops watching and closes handles; run the loop until it ends, then
 * destroy. */
void tt_coord_close(tt_coord_t *c);
void tt_coord_destroy(tt_coord_t **c);

#endif

/* shard: the tether-shard daemon. One libuv loop owns a ZeroMQ ROUTER (the
 * data endpoint workers push gradient chunks to and pull results from), a
 * DEALER to the coordinator (registration, heartbeats, stall reports), a
 * periodic timer (heartbeats, park deadlines) and, per job, the chunks this
 * shard holds (tt_accum: parameters, optimizer state, aggregation). The
 * aggregation math runs on the libuv thread pool, one work item per chunk
 * at a time, so the loop never blocks on arithmetic.
 * It does not decide placement (the coordinator does; workers tell each
 * shard which chunks it holds with PsSetup) and it keeps no durable state
 * (checkpoint parts are a later issue): restarted, it starts empty, the
 * workers set their job up again and push what it lost (shard_data.c).
 * Thread safety: everything runs on the loop thread, except the math in
 * the pool and the free callbacks of zero-copy results, which ZeroMQ may
 * run on its I/O thread (reference counts are atomic). */
#ifndef TT_SHARD_H
#define TT_SHARD_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "tt_zauth.h"

typedef struct tt_shard tt_shard_t;

typedef struct tt_shard_opts {
    const char *listen;       /* data endpoint, e.g. "tcp://0.0.0.0:7700" */
    const char *advertise;    /* endpoint told to the coordinator; NULL: the bound one */
    const char *coordinator;  /* control endpoint; NULL or "": run without one */
    const char *id;           /* shard id, e.g. "s0" */
    uint64_t incarnation;     /* distinguishes restarts; 0: derived from the clock */
    uint32_t heartbeat_ms;    /* to the coordinator; 0: 1000 */
    uint32_t park_timeout_ms; /* default round deadline; 0: 30000 */
    uint64_t max_chunk_bytes; /* largest chunk accepted; 0: 64 MiB */
    uint32_t io_threads;      /* ZeroMQ I/O threads of the data socket; 0: 2 */
    /* The cluster key (copied; tt_zauth.h): the data socket admits only
     * its holders, and the link to the coordinator uses CURVE. NULL or
     * off: no security. */
    const tt_zauth_key_t *key;
    /* Test knob (TETHER_SHARD_TEST_DIE="STEP:FILE"): when a round of step
     * die_step (> 0) finishes with several ranks waiting, answer one of
     * them and die by SIGKILL, once: only the process that creates
     * die_once (which must not exist) does. Reproduces a shard lost
     * between answering some ranks and the others. */
    uint64_t die_step;
    const char *die_once;
} tt_shard_opts_t;

/* Binds the data endpoint, connects to the coordinator and starts the
 * heartbeat on `loop` (borrowed). Returns 0 with *out owned by the caller,
 * or a tt_status error with `err` filled (TT_ESYS: cannot bind). */
int tt_shard_create(tt_shard_t **out, uv_loop_t *loop, const tt_shard_opts_t *opts, char *err,
                    size_t errlen);

/* The data endpoint actually bound (e.g. with the port picked). */
const char *tt_shard_endpoint(const tt_shard_t *s);

/* Stops watching sockets and timers; run the loop until it ends (work in
 * the pool completes first), then destroy. */
/* The HTTP endpoint's handler (a tt_http_handler_fn, ctx the shard):
 * /healthz, /readyz (503 once closing) and /metrics in the Prometheus text
 * format (shard_metrics.c). Loop thread. */
struct tt_http_reply;
void tt_shard_http(void *ctx, const char *path, struct tt_http_reply *r);

void tt_shard_close(tt_shard_t *s);
void tt_shard_destroy(tt_shard_t **s);

#endif

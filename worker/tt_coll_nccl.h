/* tt_coll_nccl: the NCCL collective backend behind tt_coll's ops table,
 * plus the device-side entry points a GPU trainer uses directly.
 *
 * One instance serves one generation with its own communicator, created
 * non-blocking (ncclCommInitRankConfig, blocking = 0) from a unique id that
 * rank 0 draws and the coordinator relays with the generation
 * (tt_coll_nccl_id.c), so an id never leaks into another generation. A
 * communicator is never reused: the next generation builds a fresh one
 * from a fresh id, or, when the coordinator announces it as the old one
 * minus some members (a drain, a death), derives its own from the old
 * one by ncclCommShrink (tt_coll_cfg_t.shrink).
 *
 * Collectives run on the instance's communication stream; device ones wait
 * on the caller's event (recorded on the compute stream after the bucket's
 * gradient) so buckets overlap the rest of backward: the trainer hands
 * each layer over as a part when backward has enqueued it, and the step's
 * end reduces only what the parts (listed by its caller) left, with the
 * example count. Host-buffer
 * collectives (the ops table) are staged through a device scratch buffer.
 * Every collective is tracked by a tt_nccl_watchdog: on an asynchronous
 * NCCL error or an expired deadline it records the error, calls the
 * reporter, and aborts the communicator (ncclCommRevoke, else
 * ncclCommAbort; never destroy); if the abort hangs, the monitor logs
 * why and ends the process (exit 70), unless TETHER_NCCL_ABORT_HANG=log.
 *
 * Builds without CUDA/NCCL compile tt_nccl_stub.c instead: create fails
 * with TT_ENODEV and a sentence, so `auto` falls through.
 *
 * Threads: one thread drives an instance's collectives; `abort` (ops
 * table), `last_error`, `suspect` and `dump` may be called from any thread
 * while it is alive. */
#ifndef TT_COLL_NCCL_H
#define TT_COLL_NCCL_H

#include "tt_coll.h"

#include <stddef.h>
#include <stdint.h>

/* The ops table row ("nccl"). Static; NULL in a build without NCCL (tt_coll
 * then keeps its own stub row). */
const tt_coll_ops_t *tt_coll_nccl_ops(void);

/* The "nccl+ps" row (tt_coll_nccl_ps.c) that tt_coll_open takes for an
 * NCCL generation whose first steps go through the shard servers
 * (tt_coll_cfg_t.ps_until_step): the ps backend for those steps while the
 * communicator is built, NCCL from the announced step. Static; NULL in a
 * build without NCCL. */
const tt_coll_ops_t *tt_coll_nccl_ps_ops(void);

/* 1 when this build has the NCCL backend compiled in. */
int tt_coll_nccl_compiled(void);

/* 1 when its NCCL has ncclCommRevoke (2.28.7 on): the watchdog's abort
 * then revokes first, which stops the collectives in flight but keeps the
 * communicator for a shrink, and aborts only when that fails. */
int tt_coll_nccl_revokes(void);

/* Called once per instance when the watchdog or a collective reaches a
 * verdict: `suspect` is the blamed rank or -1 (NCCL does not say which
 * peer failed), `status` TT_ETIMEDOUT / TT_ENCCL / TT_ECUDA, `why` a
 * sentence. Runs on the watchdog thread: it must not block for long. */
typedef void (*tt_coll_nccl_report_fn)(void *ctx, int suspect, int status, const char *why);

/* Sets the reporter of an instance made by the ops table's create.
 * Any thread, before the first collective. */
void tt_coll_nccl_set_reporter(void *inst, tt_coll_nccl_report_fn fn, void *ctx);

/* Enqueues an all-reduce of `count` elements of device memory `dbuf` in
 * place on the communication stream, after `after` (a cudaEvent_t, may be
 * NULL) completes; returns without waiting. 0, TT_EINVAL, TT_ECLOSED
 * (aborted), TT_ENCCL / TT_ECUDA (instance poisoned). */
int tt_coll_nccl_allreduce_device(void *inst, void *dbuf, size_t count, tt_dtype_t dt,
                                  tt_redop_t op, void *after);

/* The step's last reduction on the device: sums the floats of
 * dgrads[0..count) that none of early[0..nearly) covers (the slices this
 * step already summed with allreduce_device), and the example count (a
 * double, in the same NCCL group, so the count travels with the
 * gradients), after `after`; then waits for every enqueued collective and
 * sets *global_count. Same codes as above, plus TT_ETIMEDOUT from the
 * watchdog and TT_EINVAL (after waiting for what is in flight) for early
 * slices that overlap, leave the buffer or number over
 * TT_COLL_EARLY_MAX. */
int tt_coll_nccl_reduce_step_device(void *inst, float *dgrads, size_t count,
                                    const tt_coll_span_t *early, int nearly, double local_count,
                                    double *global_count, void *after);

/* Waits until every enqueued collective finished or the watchdog failed
 * them. 0 or the verdict's status. */
int tt_coll_nccl_wait(void *inst);

/* Takes the NCCL communicator of a generation's backend (ops, *inst) out,
 * for the next generation to shrink (tt_coll_cfg_t.parent), and destroys
 * the rest (*inst = NULL). Where NCCL revokes, the communicator is
 * revoked first (what is in flight is cut short) and kept. Returns NULL
 * (everything destroyed) for a row other than nccl / nccl+ps, or a
 * communicator not fit to shrink: never built, aborted, or (without
 * revoke) failed or still running a collective that then fails. */
void *tt_coll_nccl_take_parent(const tt_coll_ops_t *ops, void **inst);

/* Frees a taken communicator that no shrink will use (NULL is fine):
 * aborted, never finalized, since a finalize could wait for a rank that
 * left. */
void tt_coll_nccl_parent_free(void *parent);

/* 1 when `ops` is the nccl or the nccl+ps row. */
int tt_coll_nccl_row(const tt_coll_ops_t *ops);

/* The communication stream (cudaStream_t) for callers that order their
 * own work after it. Valid until destroy. */
void *tt_coll_nccl_stream(void *inst);

#endif

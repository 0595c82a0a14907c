/* tt_coll_nccl_int: what the NCCL backend's rows share inside libtether,
 * not part of tt_coll_nccl's interface. An instance is made in two halves
 * so a generation can start building its communicator and use it only
 * later: `begin` relays the unique id (rank 0 draws it) through the
 * coordinator and starts the non-blocking init; `finish` waits for
 * the init under its deadline and starts the watchdog. The plain "nccl" row
 * does both in create; the "nccl+ps" row (tt_coll_nccl_ps.c) runs the
 * first steps on the shard servers in between. Compiled only where NCCL
 * is. */
#ifndef TT_COLL_NCCL_INT_H
#define TT_COLL_NCCL_INT_H

#include "tt_coll.h"

#include <stddef.h>
#include <stdint.h>

/* TT_OK when this host has a CUDA device, else TT_ENODEV and "nccl: no
 * CUDA device on this host" in err. */
int tt_nccl_have_device(char *err, size_t errlen);

/* How long a communicator may take to form (the id's relay included)
 * when the collective deadline is shorter: bootstrap and topology
 * discovery are slow on big nodes. */
#define TT_NCCL_INIT_MS 60000

/* Rank 0 draws an id and offers it to the coordinator for cfg->generation;
 * the other members fetch it from there (tt_commid). `out` gets the
 * ncclUniqueId. World 1 relays nothing. TT_ESTALE once the generation is
 * over. */
int tt_nccl_id_relay(const tt_coll_cfg_t *cfg, void *out, char *err,
                     size_t errlen); /* tt_coll_nccl_id.c */

/* The first half: a CUDA device, the relayed id, the stream, and the
 * non-blocking ncclCommInitRankConfig started; or, for a generation
 * announced as a shrink (cfg->shrink), the non-blocking ncclCommShrink of
 * cfg->parent (owned from the call on; freed once the shrink settles),
 * with no id at all. The instance may be
 * destroyed (nccl row's destroy: a half-built communicator is aborted)
 * without `finish`. 0 with *inst set, TT_ENODEV, TT_ENCCL, TT_ECUDA,
 * TT_ESTALE, TT_ENOMEM. */
int tt_nccl_inst_begin(void **inst, const tt_coll_cfg_t *cfg, char *err, size_t errlen);

/* The second half: waits for the init (at least 60 s, or the collective
 * deadline) and starts the watchdog. Idempotent: later calls return the
 * first result. Every member must call it (the init is collective). 0 or
 * the failure's status; the nccl row's last_error says why. */
int tt_nccl_inst_finish(void *inst);

/* Any thread: a `finish` waiting for the init (now or later) gives up
 * with TT_ECLOSED. For a generation that ended before its switch. */
void tt_nccl_inst_stop(void *inst);

/* The nccl row instance `inst` when the next generation may shrink it
 * (settled and revoked, or where NCCL has no revoke neither aborted nor
 * failed, nothing in flight; its watchdog is stopped), else frees it and
 * returns NULL. */
void *tt_nccl_inst_take_parent(void *inst);

/* The nccl+ps row's NCCL instance once it is ready (the row switched to
 * it, or a plain collective with no ring waited for it), taken out of
 * `inst` (which the caller then destroys); NULL before that. */
void *tt_nccl_ps_detach(void *inst); /* tt_coll_nccl_ps.c */

#endif

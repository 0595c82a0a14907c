/* tt_nccl_inst: one NCCL instance of the nccl rows, shared by the two
 * files that make it up, not part of any interface: tt_nccl_inst.c owns
 * its life (errors, the comm lock, settling non-blocking calls, the
 * watchdog's callbacks, creation, shrink, teardown), tt_coll_nccl.c the
 * collectives it runs and the ops table. Compiled only where NCCL is. */
#ifndef TT_NCCL_INST_H
#define TT_NCCL_INST_H

#include "tt_coll_nccl.h"
#include "tt_nccl_watchdog.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define NSLOT 64 /* device collectives in flight, one event each */

/* ncclCommRevoke came with NCCL 2.28.7 (tt_coll_nccl_revokes). */
#define TT_NCCL_HAS_REVOKE (NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 7))

typedef struct nccl_inst {
    int rank, world, deadline_ms;
    int device;      /* of the communicator, current on the creating thread; -1 before */
    int want_device; /* tt_coll_cfg_t.device; < 0: the creating thread's */
    int buf_checked; /* a device buffer was found on `device` */
    uint64_t generation;
    ncclComm_t comm;
    cudaStream_t stream;
    cudaEvent_t ev[NSLOT];
    uint64_t next_seq; /* of the next collective; seqs start at 1 */
    /* Every seq up to this one completed, as the collectives' own thread
     * saw by its event before reusing the slot: the watchdog takes that
     * for done rather than query a slot that may hold a later event. */
    _Atomic uint64_t seen_done;
    void *scratch;  /* device staging for host-buffer collectives */
    void *hscratch; /* its pinned host twin: async copies both ways */
    size_t scratch_bytes;
    double *dcount, *hcount; /* device / pinned example count */
    tt_nccl_wd_t *wd;
    tt_coll_nccl_report_fn report;
    void *report_ctx;
    int settled;              /* the non-blocking init (or shrink) completed */
    struct nccl_inst *parent; /* the instance a shrink in progress derives from */
    int (*gone)(void *ctx, uint64_t generation); /* tt_coll_cfg_t.gone */
    void *gone_ctx;
    atomic_int aborted;  /* ncclCommAbort returned: the comm is gone */
    atomic_int revoked;  /* ncclCommRevoke quiesced it: only a shrink or an abort may follow */
    atomic_int stop;     /* tt_nccl_inst_stop: a settle in progress gives up */
    atomic_int poisoned; /* negative status once failed */
    _Atomic int64_t step;
    pthread_mutex_t emu;
    pthread_rwlock_t cl; /* read: using comm; write: aborting it */
    char err[512];
} nccl_inst_t;

/* Keeps the first failure's sentence (prefixed with generation, rank and
 * step) and poisons the instance with rc (not for TT_EINVAL: a bad
 * argument leaves it usable). Returns rc. Any thread. */
int tt_nccl_set_err(nccl_inst_t *ni, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int tt_nccl_cu_rc(nccl_inst_t *ni, cudaError_t e, const char *what);
/* Caller holds the comm lock. The sentence adds NCCL's last message,
 * which is the process's, not necessarily this communicator's. */
int tt_nccl_nc_rc(nccl_inst_t *ni, ncclResult_t r, const char *what);

/* Read lock on the communicator; TT_ECLOSED (lock not held) once it was
 * aborted. */
int tt_nccl_comm_lock(nccl_inst_t *ni);
void tt_nccl_comm_unlock(nccl_inst_t *ni);

/* Completes a non-blocking NCCL call under the collective deadline. Called
 * and returns with the comm lock held. */
int tt_nccl_settle(nccl_inst_t *ni, ncclResult_t r, const char *what);

/* Waits for work in flight (or the abort), finalizes or aborts the
 * communicator and frees everything. */
void tt_nccl_inst_free(nccl_inst_t *ni);

#endif

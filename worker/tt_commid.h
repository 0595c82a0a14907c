/* tt_commid: a worker's side of the relay of a generation's collective
 * bootstrap id through the coordinator (CommIdOffer / CommIdRequest,
 * docs/protocol.md): rank 0 offers the id it drew, every other member
 * asks until it is there. Each call has a short-lived DEALER of its own
 * (tt_zreq), so it runs on whatever thread builds the communicator,
 * independent of the membership client's socket. The bytes are opaque
 * here; the NCCL rows (tt_coll_nccl_id.c) give them meaning. Compiled in
 * every build, so the relay is tested without a GPU. */
#ifndef TT_COMMID_H
#define TT_COMMID_H

#include <stddef.h>
#include <stdint.h>

#include "tt_zauth.h"

typedef struct tt_commid_opts {
    const char *coordinator;   /* its ROUTER endpoint */
    const tt_zauth_key_t *key; /* the cluster key; NULL: none */
    const char *job_id;
    const char *worker_id;
    uint64_t generation;
    int timeout_ms; /* for the whole call; <= 0: 10 s */
} tt_commid_opts_t;

/* Rank 0: offers `len` bytes (1..TT_WIRE_MAX_COMM_ID) for the generation,
 * asking again while the coordinator does not answer. TT_OK once it
 * acknowledged; its refusal (TT_ESTALE: the generation is over,
 * TT_EFENCED: not its rank 0, TT_EINVAL) or TT_ETIMEDOUT, with a sentence
 * in err. */
int tt_commid_offer(const tt_commid_opts_t *o, const void *id, size_t len, char *err,
                    size_t errlen);

/* Every other member: asks until rank 0 has offered, each request held by
 * the coordinator until the id comes (for up to 2 s, then asked again);
 * a coordinator that answers at once without it is asked again after a
 * pause that grows to 200 ms. TT_OK with exactly `len` bytes in out;
 * TT_ESTALE as soon as the generation is over (rank 0 died, say),
 * TT_EFENCED, TT_EPROTO (an id of another size or generation) or
 * TT_ETIMEDOUT, with a sentence in err. */
int tt_commid_fetch(const tt_commid_opts_t *o, void *out, size_t len, char *err, size_t errlen);

#endif

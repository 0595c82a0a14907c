/* tt_coll_nccl_id: how a generation's NCCL unique id reaches its members.
 * Rank 0 draws it; a broadcast the caller chooses carries it with the
 * generation number, so a receiver can refuse an id of another generation
 * and no protocol message is needed. The plain nccl row broadcasts over a
 * short-lived ring of the members; the nccl+ps row over the ps backend's
 * ring, which it keeps anyway. Compiled only where NCCL is. */
#include "tt_coll_nccl_int.h"

#include "tt_ring.h"
#include "tt_status.h"

#include <nccl.h>
#include <stdio.h>
#include <string.h>

/* Rank 0 draws the id; a broadcast over this generation's members carries
 * it, with the generation, to the others (tt_coll_nccl_int.h). */
#define ID_WORDS (sizeof(ncclUniqueId) / sizeof(int64_t))

int tt_nccl_id_relay(const tt_coll_cfg_t *cfg, tt_nccl_bcast_fn bcast, void *ctx, void *out,
                     char *err, size_t errlen) {
    int64_t msg[ID_WORDS + 1];
    ncclUniqueId id;
    memset(&id, 0, sizeof(id));
    if (cfg->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) {
            snprintf(err, errlen, "nccl: ncclGetUniqueId: %s", ncclGetErrorString(r));
            return TT_ENCCL;
        }
    }
    memcpy(msg, &id, sizeof(id));
    msg[ID_WORDS] = (int64_t)cfg->generation;
    int rc = cfg->world == 1 ? TT_OK : bcast(ctx, msg, ID_WORDS + 1, err, errlen);
    if (rc == TT_OK && msg[ID_WORDS] != (int64_t)cfg->generation) {
        snprintf(err, errlen, "nccl: unique id of generation %lld, expected %llu",
                 (long long)msg[ID_WORDS], (unsigned long long)cfg->generation);
        rc = TT_ESTALE;
    }
    if (rc == TT_OK)
        memcpy(out, msg, sizeof(id));
    return rc;
}

/* The plain row's transport: a ring of the generation's members, closed
 * again at once. */
int tt_nccl_ring_bcast(void *ctx, int64_t *msg, size_t n, char *err, size_t errlen) {
    const tt_coll_cfg_t *cfg = ctx;
    if (!tt_coll_ring_endpoints_ok(cfg->endpoints, cfg->rank, cfg->world)) {
        snprintf(err, errlen,
                 "nccl: the unique id travels over the ring, but rank %d or its "
                 "right neighbour advertised no endpoint (set TETHER_ENDPOINT)",
                 cfg->rank);
        return TT_ENODEV;
    }
    tt_ring_opts_t o;
    tt_coll_ring_opts(cfg, &o);
    o.tcp_only = 1; /* 136 bytes, once */
    tt_ring_t *ring = NULL;
    int rc = tt_ring_create(&ring, &o, err, errlen);
    if (rc == TT_OK && (rc = tt_ring_broadcast(ring, msg, n, TT_DT_INT64, 0)) != TT_OK)
        snprintf(err, errlen, "nccl: relaying the unique id: %s", tt_ring_last_error(ring));
    tt_ring_destroy(&ring);
    return rc;
}

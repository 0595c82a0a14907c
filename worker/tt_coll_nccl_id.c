/* tt_coll_nccl_id: how a generation's NCCL unique id reaches its members.
 * Rank 0 draws it and offers it to the coordinator with the generation
 * number; the other members ask the coordinator for that generation's id
 * (tt_commid). The id thus travels with the generation, needs no
 * connection between workers, and a member stops waiting as soon as the
 * generation is over (rank 0 died) instead of at a deadline. Compiled only
 * where NCCL is. */
#include "tt_coll_nccl_int.h"

#include "tt_commid.h"
#include "tt_status.h"

#include <nccl.h>
#include <stdio.h>
#include <string.h>

int tt_nccl_id_relay(const tt_coll_cfg_t *cfg, void *out, char *err, size_t errlen) {
    ncclUniqueId id;
    memset(&id, 0, sizeof(id));
    if (cfg->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) {
            snprintf(err, errlen, "nccl: ncclGetUniqueId: %s", ncclGetErrorString(r));
            return TT_ENCCL;
        }
    }
    int rc = TT_OK;
    if (cfg->world > 1) {
        if (cfg->coordinator == NULL || cfg->job_id == NULL || cfg->worker_id == NULL) {
            snprintf(err, errlen,
                     "nccl: the unique id travels through the coordinator: none given");
            return TT_EINVAL;
        }
        /* Rank 0 may still be building its shard connections (nccl+ps):
         * wait as long as the init itself may take. */
        tt_commid_opts_t o = {.coordinator = cfg->coordinator,
                              .key = cfg->key,
                              .job_id = cfg->job_id,
                              .worker_id = cfg->worker_id,
                              .generation = cfg->generation,
                              .timeout_ms = cfg->deadline_ms > TT_NCCL_INIT_MS ? cfg->deadline_ms
                                                                               : TT_NCCL_INIT_MS};
        char why[384] = "";
        rc = cfg->rank == 0 ? tt_commid_offer(&o, &id, sizeof(id), why, sizeof(why))
                            : tt_commid_fetch(&o, &id, sizeof(id), why, sizeof(why));
        if (rc != TT_OK)
            snprintf(err, errlen, "nccl: the unique id of generation %llu: %s",
                     (unsigned long long)cfg->generation, why);
    }
    if (rc == TT_OK)
        memcpy(out, &id, sizeof(id));
    return rc;
}

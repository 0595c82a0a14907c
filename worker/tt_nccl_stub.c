/* tt_nccl_stub: the NCCL backend in a build without CUDA/NCCL. It reports
 * itself as not compiled; tt_coll keeps its own "built without NCCL" table
 * row for that case, so only the device entry points below need bodies,
 * and each says TT_ENODEV (no instance can exist to call them with). */
#include "tt_coll_nccl.h"
#include "tt_status.h"

#include <stddef.h>

int tt_coll_nccl_compiled(void) {
    return 0;
}

int tt_coll_nccl_revokes(void) {
    return 0;
}

const tt_coll_ops_t *tt_coll_nccl_ops(void) {
    return NULL;
}

const tt_coll_ops_t *tt_coll_nccl_ps_ops(void) {
    return NULL;
}

void tt_coll_nccl_set_reporter(void *inst, tt_coll_nccl_report_fn fn, void *ctx) {
    (void)inst, (void)fn, (void)ctx;
}

int tt_coll_nccl_allreduce_device(void *inst, void *dbuf, size_t count, tt_dtype_t dt,
                                  tt_redop_t op, void *after) {
    (void)inst, (void)dbuf, (void)count, (void)dt, (void)op, (void)after;
    return TT_ENODEV;
}

int tt_coll_nccl_reduce_step_device(void *inst, float *dgrads, size_t count,
                                    const tt_coll_span_t *early, int nearly, double local_count,
                                    double *global_count, void *after) {
    (void)inst, (void)dgrads, (void)count, (void)early, (void)nearly, (void)local_count;
    (void)global_count, (void)after;
    return TT_ENODEV;
}

int tt_coll_nccl_wait(void *inst) {
    (void)inst;
    return TT_ENODEV;
}

void *tt_coll_nccl_stream(void *inst) {
    (void)inst;
    return NULL;
}

void *tt_coll_nccl_take_parent(const tt_coll_ops_t *ops, void **inst) {
    if (ops != NULL && inst != NULL && *inst != NULL)
        ops->destroy(inst);
    return NULL;
}

void tt_coll_nccl_parent_free(void *parent) {
    (void)parent; /* no NCCL row here, so never one to free */
}

int tt_coll_nccl_row(const tt_coll_ops_t *ops) {
    (void)ops;
    return 0;
}

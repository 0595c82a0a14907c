/* tt_train_ckpt_gate: the collective wrapper that keeps a checkpoint's
 * snapshot whole while the writer thread copies it off the step loop: it
 * passes every call through to the inner collective and, after finish()
 * (the optimizer update follows it, the one write that could tear the
 * snapshot), waits until the copy is done. Before finish() it hands the
 * checkpoint thread the job kept for that moment (tt_train_ckpt_thread.c
 * says why). The copy and its timing are tt_train_ckpt.c's. */
#include "tt_train_ckpt_int.h"

#include "tt_status.h"

static int gate_membership(void *ctx, int *rank, int *world, uint64_t *gen) {
    tt_train_ckpt_gate_t *g = ctx;
    return g->inner.membership(g->inner.ctx, rank, world, gen);
}

static int gate_grad_ready(void *ctx, int tensor) {
    tt_train_ckpt_gate_t *g = ctx;
    return g->inner.grad_ready(g->inner.ctx, tensor);
}

/* The optimizer update follows finish(): the snapshot must be complete. */
static int gate_finish(void *ctx, float *grads, size_t n, double local, double *global) {
    tt_train_ckpt_gate_t *g = ctx;
    if (g->ck != NULL)
        tt_tc_thread_flush(g->ck); /* the step loop sleeps in the reduction next */
    int rc = g->inner.finish(g->inner.ctx, grads, n, local, global);
    if (g->ck != NULL)
        tt_tc_wait_snapshot(g->ck);
    return rc;
}

static int gate_finish_device(void *ctx, float *dgrads, size_t n, double local, double *global,
                              void *event) {
    tt_train_ckpt_gate_t *g = ctx;
    if (g->ck != NULL)
        tt_tc_thread_flush(g->ck);
    int rc = g->inner.finish_device(g->inner.ctx, dgrads, n, local, global, event);
    if (g->ck != NULL && rc != TT_ENODEV) /* else finish() follows and waits */
        tt_tc_wait_snapshot(g->ck);
    return rc;
}

/* A part changes no parameter: nothing to guard. */
static int gate_ready_device(void *ctx, float *dpart, size_t n, void *event) {
    tt_train_ckpt_gate_t *g = ctx;
    return g->inner.ready_device(g->inner.ctx, dpart, n, event);
}

static int gate_reduce(void *ctx, double *vals, size_t n) {
    tt_train_ckpt_gate_t *g = ctx;
    return g->inner.reduce_sum(g->inner.ctx, vals, n);
}

static int gate_set_lr(void *ctx, float lr) {
    tt_train_ckpt_gate_t *g = ctx;
    return g->inner.set_lr(g->inner.ctx, lr);
}

void tt_train_ckpt_gate_init(tt_train_ckpt_gate_t *g, const tt_train_coll_t *inner) {
    g->inner = *inner;
    g->ck = NULL;
    g->coll = (tt_train_coll_t){g,
                                inner->name,
                                gate_membership,
                                inner->grad_ready != NULL ? gate_grad_ready : NULL,
                                gate_finish,
                                gate_reduce,
                                inner->updates_params,
                                inner->set_lr != NULL ? gate_set_lr : NULL,
                                inner->finish_device != NULL ? gate_finish_device : NULL,
                                inner->ready_device != NULL ? gate_ready_device : NULL};
}

void tt_train_ckpt_gate_attach(tt_train_ckpt_gate_t *g, tt_train_ckpt_t *ck) {
    if (g->ck != NULL) {
        tt_tc_wait_snapshot(g->ck);
        tt_tc_thread_flush(g->ck); /* no gate hands it over from now on */
        g->ck->gated = 0;
    }
    g->ck = ck;
    if (ck != NULL)
        ck->gated = 1;
}

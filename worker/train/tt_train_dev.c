/* tt_train_dev: host model <-> CUDA twin for the trainer. Keeping the host
 * model authoritative costs one parameter download per step (and an upload
 * after anyone else wrote it) but lets every CPU-side feature - ring and
 * PS collectives, checkpoints, failover - work unchanged on the GPU path.
 * Compiled in every build; without CUDA the twin cannot be created and
 * create returns the stub's TT_ENODEV sentence. */
#include "tt_train_dev.h"

#include "tt_mlp_cuda.h"
#include "tt_status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tt_train_dev {
    tt_mlp_t *host;
    tt_mlp_cuda_t *gpu;
    size_t n;
    int dirty[2]; /* host params / optimizer state newer than the device's */
};

int tt_train_dev_create(tt_train_dev_t **out, tt_mlp_t *host, const tt_mlp_opts_t *mo, int device,
                        int math, char *err, size_t errlen) {
    tt_train_dev_t *d = calloc(1, sizeof(*d));
    if (d == NULL)
        return TT_ENOMEM;
    int rc = tt_mlp_cuda_create(&d->gpu, mo, device, err, errlen);
    if (rc == TT_OK && (rc = tt_mlp_cuda_set_math(d->gpu, (tt_mlp_cuda_math_t)math)) != TT_OK &&
        err != NULL)
        snprintf(err, errlen, "CUDA products as %s: %s",
                 tt_mlp_cuda_math_name((tt_mlp_cuda_math_t)math),
                 rc == TT_EINVAL ? "no such mode" : tt_mlp_cuda_last_error(d->gpu));
    if (rc != TT_OK) {
        tt_mlp_cuda_destroy(&d->gpu);
        free(d);
        return rc;
    }
    d->host = host;
    d->n = tt_mlp_param_count(host);
    d->dirty[0] = d->dirty[1] = 1;
    *out = d;
    return TT_OK;
}

/* A device or rank number: digits only, at most 1023. */
static int parse_index(const char *s, int *out) {
    if (s == NULL || s[0] == '\0' || strlen(s) > 4)
        return TT_EINVAL;
    int v = 0;
    for (const char *p = s; *p != '\0'; p++) {
        if (*p < '0' || *p > '9')
            return TT_EINVAL;
        v = v * 10 + (*p - '0');
    }
    if (v > 1023)
        return TT_EINVAL;
    *out = v;
    return TT_OK;
}

static int auto_device(const char *tether_dev, const char *local_rank, int ndev, int exclusive,
                       int *out, char *err, size_t errlen) {
    if (tether_dev != NULL && tether_dev[0] != '\0') {
        if (parse_index(tether_dev, out) == TT_OK)
            return TT_OK;
        snprintf(err, errlen, "TETHER_CUDA_DEVICE='%.32s': not a device number", tether_dev);
        return TT_EINVAL;
    }
    int r = 0;
    if (local_rank != NULL && local_rank[0] != '\0' && parse_index(local_rank, &r) != TT_OK) {
        snprintf(err, errlen, "TETHER_LOCAL_RANK='%.32s': not a rank number", local_rank);
        return TT_EINVAL;
    }
    if (exclusive && ndev > 0 && r >= ndev) {
        /* Said here, at start-up, because NCCL would say it only inside
         * every rank's communicator init ("Duplicate GPU"), failing the
         * whole generation, again at each regroup. */
        snprintf(err, errlen,
                 "local rank %d on a host where this process sees %d CUDA device(s): the nccl "
                 "backend needs a device per worker (start at most %d workers on this host, or "
                 "use --backend ring or ps, which may share one)",
                 r, ndev, ndev);
        return TT_EBUSY;
    }
    *out = ndev > 0 ? r % ndev : 0;
    return TT_OK;
}

int tt_train_pick_device(const char *want, const char *tether_dev, const char *local_rank, int ndev,
                         int exclusive, int *out, char *err, size_t errlen) {
    int d = 0, rc;
    if (want == NULL || want[0] == '\0' || strcmp(want, "auto") == 0) {
        rc = auto_device(tether_dev, local_rank, ndev, exclusive, &d, err, errlen);
    } else if ((rc = parse_index(want, &d)) != TT_OK) {
        snprintf(err, errlen, "--cuda-device '%.32s': auto or a device number", want);
    }
    if (rc == TT_OK && ndev > 0 && d >= ndev) {
        snprintf(err, errlen,
                 "CUDA device %d: this process sees %d device(s), numbered from 0 after "
                 "CUDA_VISIBLE_DEVICES",
                 d, ndev);
        rc = TT_ENODEV;
    }
    if (rc == TT_OK)
        *out = d;
    return rc;
}

void tt_train_dev_destroy(tt_train_dev_t **dp) {
    if (dp == NULL || *dp == NULL)
        return;
    tt_mlp_cuda_destroy(&(*dp)->gpu);
    free(*dp);
    *dp = NULL;
}

void tt_train_dev_mark_dirty(tt_train_dev_t *d, int which) {
    d->dirty[which ? 1 : 0] = 1;
}

static int upload_state(tt_train_dev_t *d, const float *s1, const float *s2) {
    int rc = s1 != NULL ? tt_mlp_cuda_set_opt_state(d->gpu, 0, s1, d->n) : TT_OK;
    if (rc == TT_OK && s2 != NULL)
        rc = tt_mlp_cuda_set_opt_state(d->gpu, 1, s2, d->n);
    if (rc == TT_OK)
        d->dirty[1] = 0;
    return rc;
}

int tt_train_dev_begin(tt_train_dev_t *d, const float *s1, const float *s2) {
    int rc = TT_OK;
    if (d->dirty[0] && (rc = tt_mlp_cuda_set_params(d->gpu, tt_mlp_params(d->host), d->n)) == 0)
        d->dirty[0] = 0;
    if (rc == TT_OK && d->dirty[1])
        rc = upload_state(d, s1, s2);
    return rc == TT_OK ? tt_mlp_cuda_zero_grads(d->gpu) : rc;
}

int tt_train_dev_begin_idle(tt_train_dev_t *d, const float *s1, const float *s2) {
    int rc = tt_train_dev_begin(d, s1, s2);
    return rc == TT_OK ? tt_mlp_cuda_sync(d->gpu) : rc;
}

typedef struct {
    tt_train_dev_t *d;
    tt_train_dev_part_fn part;
    void *ctx;
} part_hook_t;

/* The bias of layer l is enqueued after its weights on the one compute
 * stream, so its event closes the layer; the two lie back to back in the
 * flat layout, one part. */
static int layer_hook(void *ctx, int tensor) {
    part_hook_t *h = ctx;
    if (tensor % 2 == 0)
        return TT_OK;
    size_t woff, wlen, boff, blen;
    tt_mlp_tensor(h->d->host, tensor - 1, &woff, &wlen);
    tt_mlp_tensor(h->d->host, tensor, &boff, &blen);
    float *g = tt_mlp_cuda_dev_grads(h->d->gpu);
    void *ev = tt_mlp_cuda_grad_event(h->d->gpu, tensor);
    if (woff + wlen == boff)
        return h->part(h->ctx, g + woff, wlen + blen, ev);
    int rc = h->part(h->ctx, g + woff, wlen, ev);
    return rc < 0 ? rc : h->part(h->ctx, g + boff, blen, ev);
}

int tt_train_dev_batch(tt_train_dev_t *d, const float *x, const uint8_t *y, size_t rows,
                       tt_train_dev_part_fn part, void *ctx, double *loss) {
    part_hook_t h = {d, part, ctx};
    return tt_mlp_cuda_train_batch(d->gpu, x, y, rows, part != NULL ? layer_hook : NULL, &h, loss,
                                   NULL);
}

int tt_train_dev_grads_out(tt_train_dev_t *d, int (*ready)(void *ctx, int tensor), void *ctx) {
    int rc = tt_mlp_cuda_get_grads(d->gpu, tt_mlp_grads(d->host), d->n);
    /* Backward order, as tt_mlp's hook: last layer first, weight then bias. */
    for (int l = tt_mlp_tensor_count(d->host) / 2 - 1; rc >= 0 && ready != NULL && l >= 0; l--) {
        rc = ready(ctx, 2 * l);
        if (rc >= 0)
            rc = ready(ctx, 2 * l + 1);
    }
    return rc < 0 ? rc : TT_OK;
}

float *tt_train_dev_grads(tt_train_dev_t *d) {
    return tt_mlp_cuda_dev_grads(d->gpu);
}

int tt_train_dev_update(tt_train_dev_t *d, int on_device, int adamw, float lr, float scale,
                        uint64_t t, const tt_optim_sgd_hp_t *sgd, const tt_optim_adamw_hp_t *aw) {
    int rc = on_device ? TT_OK : tt_mlp_cuda_set_grads(d->gpu, tt_mlp_grads(d->host), d->n);
    if (rc == TT_OK)
        rc = adamw ? tt_mlp_cuda_adamw_step(d->gpu, lr, scale, t, aw)
                   : tt_mlp_cuda_sgd_step(d->gpu, lr, scale, sgd);
    if (rc == TT_OK)
        rc = tt_mlp_cuda_get_params(d->gpu, tt_mlp_params(d->host), d->n);
    return rc;
}

int tt_train_dev_pull_opt_state(tt_train_dev_t *d, float *s1, float *s2) {
    if (d->dirty[1])
        return TT_OK; /* no step since it was handed out: the host's is current */
    int rc = s1 != NULL ? tt_mlp_cuda_get_opt_state(d->gpu, 0, s1, d->n) : TT_OK;
    if (rc == TT_OK && s2 != NULL)
        rc = tt_mlp_cuda_get_opt_state(d->gpu, 1, s2, d->n);
    return rc;
}

int tt_train_dev_evaluate(tt_train_dev_t *d, const float *x, const uint8_t *y, size_t rows,
                          double *loss, size_t *correct) {
    /* Parameters only: evaluation never reads the optimizer state. */
    int rc = TT_OK;
    if (d->dirty[0] && (rc = tt_mlp_cuda_set_params(d->gpu, tt_mlp_params(d->host), d->n)) == 0)
        d->dirty[0] = 0;
    return rc == TT_OK ? tt_mlp_cuda_evaluate(d->gpu, x, y, rows, loss, correct) : rc;
}

const char *tt_train_dev_last_error(const tt_train_dev_t *d) {
    return tt_mlp_cuda_last_error(d->gpu);
}

/* tt_sampler: epoch permutation and global-batch slicing. All the position
 * arithmetic is pure so the coordinator, a recovering rank and the tests can
 * recompute any step's assignment; the object only caches the current
 * epoch's permutation. It does not read data or know the membership. */
#include "tt_sampler.h"

#include "tt_rng.h"
#include "tt_status.h"

#include <stdlib.h>

struct tt_sampler {
    uint64_t n, batch, seed, epoch;
    uint32_t *perm;
};

uint64_t tt_sampler_steps_per_epoch(uint64_t n, uint64_t batch) {
    if (n == 0 || batch == 0)
        return 0;
    return n / batch + (n % batch != 0);
}

tt_range_t tt_sampler_batch(uint64_t n, uint64_t batch, uint64_t step) {
    tt_range_t r = {0, 0};
    if (step >= tt_sampler_steps_per_epoch(n, batch))
        return r;
    r.begin = step * batch;
    r.end = n - r.begin < batch ? n : r.begin + batch;
    return r;
}

tt_range_t tt_sampler_slice(uint64_t n, uint64_t batch, uint64_t step, int rank, int world) {
    tt_range_t g = tt_sampler_batch(n, batch, step);
    tt_range_t r = {g.begin, g.begin};
    if (world < 1 || rank < 0 || rank >= world)
        return r;
    uint64_t len = g.end - g.begin, w = (uint64_t)world, k = (uint64_t)rank;
    uint64_t base = len / w, extra = len % w;
    /* The first `extra` ranks hold base + 1 examples each. */
    r.begin = g.begin + k * base + (k < extra ? k : extra);
    r.end = r.begin + base + (k < extra);
    return r;
}

uint64_t tt_sampler_micro_count(tt_range_t slice, uint64_t micro) {
    uint64_t len = slice.end > slice.begin ? slice.end - slice.begin : 0;
    if (len == 0)
        return 0;
    if (micro == 0)
        return 1;
    return len / micro + (len % micro != 0);
}

tt_range_t tt_sampler_micro(tt_range_t slice, uint64_t micro, uint64_t i) {
    tt_range_t r = {slice.end, slice.end};
    if (micro == 0)
        return i == 0 ? slice : r;
    if (i >= tt_sampler_micro_count(slice, micro))
        return r;
    r.begin = slice.begin + i * micro;
    r.end = slice.end - r.begin < micro ? slice.end : r.begin + micro;
    return r;
}

void tt_sampler_permute(uint32_t *perm, uint64_t n, uint64_t seed, uint64_t epoch) {
    uint64_t state = tt_rng_derive(seed, epoch);
    for (uint64_t i = 0; i < n; i++)
        perm[i] = (uint32_t)i;
    for (uint64_t i = n; i > 1; i--) {
        uint64_t j = tt_rng_below(&state, i);
        uint32_t t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
}

int tt_sampler_create(tt_sampler_t **out, const tt_sampler_opts_t *opts) {
    if (out == NULL || opts == NULL || opts->n == 0 || opts->n > UINT32_MAX || opts->batch == 0)
        return TT_EINVAL;
    tt_sampler_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return TT_ENOMEM;
    s->perm = malloc(opts->n * sizeof(*s->perm));
    if (s->perm == NULL) {
        free(s);
        return TT_ENOMEM;
    }
    s->n = opts->n;
    s->batch = opts->batch;
    s->seed = opts->seed;
    tt_sampler_permute(s->perm, s->n, s->seed, 0);
    *out = s;
    return TT_OK;
}

void tt_sampler_destroy(tt_sampler_t **s) {
    if (s == NULL || *s == NULL)
        return;
    free((*s)->perm);
    free(*s);
    *s = NULL;
}

void tt_sampler_set_epoch(tt_sampler_t *s, uint64_t epoch) {
    if (epoch == s->epoch)
        return;
    tt_sampler_permute(s->perm, s->n, s->seed, epoch);
    s->epoch = epoch;
}

uint32_t tt_sampler_index(const tt_sampler_t *s, uint64_t pos) {
    return s->perm[pos];
}

uint64_t tt_sampler_epoch(const tt_sampler_t *s) {
    return s->epoch;
}

uint64_t tt_sampler_steps(const tt_sampler_t *s) {
    return tt_sampler_steps_per_epoch(s->n, s->batch);
}

/* train_testlib: the synthetic data set of the trainer unit tests
 * (test_trainer.c, test_train_ckpt.c): rows of `nin` inputs from a fixed
 * LCG, labelled with the index of the largest input, which an MLP learns
 * but not in one linear step. */
#ifndef TRAIN_TESTLIB_H
#define TRAIN_TESTLIB_H

#include "tt_idx.h"

#include <stdint.h>

/* Fills xs[nex * nin] and ys[nex] from `seed`; the set borrows them. */
static inline tt_idx_set_t tt_test_argmax_set(float *xs, uint8_t *ys, int nex, int nin,
                                              uint64_t seed) {
    uint64_t s = seed;
    for (int i = 0; i < nex; i++) {
        int best = 0;
        for (int j = 0; j < nin; j++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            xs[i * nin + j] = (float)(s >> 40) / 16777216.0f;
            best = xs[i * nin + j] > xs[i * nin + best] ? j : best;
        }
        ys[i] = (uint8_t)best;
    }
    tt_idx_set_t set = {xs, ys, (size_t)nex, 2, 3, (size_t)nex, NULL};
    return set;
}

#endif

/* pair_testlib: two libtether workers joined into one generation, for
 * the tests that need a running job of two against a real coordinator
 * (test_client_live.c, tests/gpu/nccl_relay_check.c). A job of exactly
 * two forms only when both joins are in flight, so one runs on a thread.
 * The coordinator ranks members by worker id, so t[0] must have the
 * smaller id. */
#ifndef PAIR_TESTLIB_H
#define PAIR_TESTLIB_H

#include "tether/tether.h"

#include <pthread.h>
#include <stdint.h>

static inline void *pair_join_one(void *arg) {
    return (void *)(intptr_t)tether_join((tether_t *)arg, 10000);
}

/* Joins t[0] and t[1] (created, not joined); the generation once both are
 * members with ranks 0 and 1, else 0. */
static inline uint64_t pair_join(tether_t *t[2]) {
    pthread_t th;
    if (pthread_create(&th, NULL, pair_join_one, t[0]) != 0)
        return 0;
    int rc = tether_join(t[1], 10000);
    void *rc0 = NULL;
    pthread_join(th, &rc0);
    if (rc != TETHER_OK || rc0 != NULL || tether_rank(t[0]) != 0 || tether_rank(t[1]) != 1)
        return 0;
    return tether_generation(t[0]);
}

#endif

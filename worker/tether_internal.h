/* tether_internal: the private struct behind the public tether_t, shared
 * by the files that implement include/tether/tether.h: tether_api.c
 * (lifecycle, membership) and tether_coll.c (collectives, step API, dump
 * answers). Not installed. */
#ifndef TETHER_INTERNAL_H
#define TETHER_INTERNAL_H

#include "tether/tether.h"
#include "tt_client.h"
#include "tt_comm.h"

#include <pthread.h>
#include <stdatomic.h>

struct tether {
    tt_client_t *client;
    tt_comm_t *comm; /* communication thread; created with the object */
    int owns_sink;
    /* The client calls tt_tether_on_generation (its generation_fn) on its
     * thread; it forwards to the communication layer while `notify` is
     * set, then to the application's own callback. */
    pthread_mutex_t gen_mu;
    tt_comm_t *notify;
    tether_generation_fn user_gen_fn;
    void *user_gen_ctx;
    /* 1 when the newest error came from a collective (tt_comm), so that
     * tether_last_error shows that one; membership calls clear it. */
    atomic_int err_from_coll;
    char err[640];
};

/* tether_coll.c: starts / stops the communication layer of `t` (hooks on
 * t->client, options from the environment, the dump answer). Called by
 * tether_create after the client exists and by tether_destroy before the
 * client goes. TT_OK, TT_EINVAL (bad TETHER_* collective variable, message
 * in err), TT_ENOMEM, TT_ESYS. */
int tt_tether_coll_init(tether_t *t, const tether_opts_t *opts, char *err, size_t errlen);
void tt_tether_coll_fini(tether_t *t);

/* Installs the generation hook in `copy` (the options the client gets),
 * keeping the application's callback for chaining. Before the client is
 * created. TT_OK or TT_ESYS. */
int tt_tether_coll_prepare(tether_t *t, tether_opts_t *copy);

#endif

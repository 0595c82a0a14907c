/* tt_zreq: one request, one reply, over a DEALER of its own - the way a
 * program or a library thread that is not a daemon's event loop talks to
 * the coordinator (tetherctl's queries, libtether's checkpoint commit and
 * listing). It owns a private ZeroMQ context and socket, the bounded wait
 * for the send (ZMQ_IMMEDIATE: queued only once TCP is connected) and for
 * the reply with the request's id; replies to earlier, abandoned requests
 * are skipped, and the check that a reply is the expected kind or an
 * Error (tt_zreq_call_want). It does not own retries or what a reply
 * means.
 * Thread safety: one thread per object. */
#ifndef TT_ZREQ_H
#define TT_ZREQ_H

#include "tt_zmq.h"

#include <stdint.h>

typedef struct tt_zreq tt_zreq_t;

/* Connects to `endpoint` with routing id "<role>-<id>.<random>", with the
 * cluster key `key` (CURVE, as every control socket; NULL or off: none).
 * TT_OK, TT_EINVAL / TT_ESYS / TT_ENOMEM with `err`. */
int tt_zreq_open(tt_zreq_t **out, const char *endpoint, const tt_zauth_key_t *key, const char *role,
                 const char *id, char *err, size_t errlen);

/* A caller that would rather hear at once that nothing listens (an
 * operator's command) gives up after `tries` connection attempts refused
 * or failed, as long as no TCP connection was ever made: the call then
 * returns TT_EUNREACHABLE. 0, the default, waits out the timeout, as a
 * library thread must while the coordinator restarts. Once the socket has
 * met its peer it never gives up early. */
void tt_zreq_give_up_after(tt_zreq_t *z, uint32_t tries);

/* Sends `env` (request_id as set by the caller, which must differ between
 * calls on one object) with `npl` payload frames and waits at most
 * `timeout_ms` in all for the reply carrying the same request id. TT_OK
 * with rx->env set (release with tt_zmq_rx_close before tt_zreq_close), or
 * TT_ETIMEDOUT ("could not connect to ..." when no peer ever completed the
 * handshake, else "no reply from ... within N ms"), TT_EUNREACHABLE (see
 * tt_zreq_give_up_after) / a send error. */
int tt_zreq_call(tt_zreq_t *z, const tt_env_t *env, const tt_zmq_payload_t *pl, size_t npl,
                 uint32_t timeout_ms, tt_zmq_rx_t *rx, char *err, size_t errlen);

/* tt_zreq_call whose reply must have body `want`: an Error's code is
 * returned (TT_EREMOTE for a non-negative one) with "coordinator: <its
 * sentence>" in err, another body is TT_EPROTO. A failed call's sentence
 * is prefixed with "<what>: " when `what` is given. On failure rx is
 * released; on TT_OK the caller releases it. */
int tt_zreq_call_want(tt_zreq_t *z, const tt_env_t *env, const tt_zmq_payload_t *pl, size_t npl,
                      uint32_t timeout_ms, int want, const char *what, tt_zmq_rx_t *rx, char *err,
                      size_t errlen);

/* Closes the socket and the context. Accepts NULL; sets *z = NULL. */
void tt_zreq_close(tt_zreq_t **z);

#endif

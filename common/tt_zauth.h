/* tt_zauth: the cluster key and who may connect. One key file, given to
 * every process of a cluster (TETHER_KEY_FILE, or --key-file), holds a
 * CURVE secret key and the cluster's policy for bulk data. With it:
 * - control sockets (the coordinator's ROUTER and every socket that talks
 *   to it: workers, shard servers, tetherctl) use CURVE: encrypted, and a
 *   peer is admitted only if it proves it holds the same secret key;
 * - bulk data sockets (ring links, the shard servers' ROUTERs and the
 *   workers' links to them) use PLAIN with a password derived from the key
 *   ("data = plain", the default): a stranger who can connect but not
 *   read the cluster's traffic is refused, and gradients travel at full
 *   speed; "data = curve" encrypts them too, at a measured cost
 *   (docs/operations.md, bench/bench_allreduce --key-file).
 * A ZAP handler thread per ZeroMQ context (tt_zauth_zap_start) checks each
 * handshake against the key and logs the peers it refuses.
 * Without a key file nothing changes: ZeroMQ's NULL mechanism, as before.
 * Thread safety: a loaded key is read only; share it freely. */
#ifndef TT_ZAUTH_H
#define TT_ZAUTH_H

#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

#define TT_ZAUTH_Z85 41 /* a 32-byte key as Z85 text, with its NUL */

typedef struct tt_zauth_key {
    int on;                 /* 0: no key file, NULL mechanism everywhere */
    int data_curve;         /* bulk data: 1 CURVE, 0 PLAIN */
    char pub[TT_ZAUTH_Z85]; /* derived from sec */
    char sec[TT_ZAUTH_Z85];
    char path[256]; /* where it was read, for messages */
} tt_zauth_key_t;

/* Which side of which kind of link a socket is. */
enum { TT_ZAUTH_CONTROL = 0, TT_ZAUTH_BULK = 1 };

/* Reads `path` ("" or NULL: no key, k->on = 0). Refuses, with a sentence
 * naming the file, one that is missing, writable by others or readable by
 * everyone, or whose content is not a key file (see tt_zauth_format).
 * TT_OK, TT_EINVAL or TT_ESYS. */
int tt_zauth_load(tt_zauth_key_t *k, const char *path, char *err, size_t errlen);

/* Parses key file text (lines "key = Z85", "data = plain|curve", '#'
 * comments) into *k, all of which it sets (path to ""). Pure. TT_OK, or
 * TT_EINVAL with the line that is wrong and k->on = 0. */
int tt_zauth_parse(tt_zauth_key_t *k, const char *text, char *err, size_t errlen);

/* A new key file's text, with a fresh secret key, into buf. */
int tt_zauth_format(char *buf, size_t len, int data_curve, char *err, size_t errlen);

/* Creates `path` (mode 0600, never over an existing file) with a new key. */
int tt_zauth_generate(const char *path, int data_curve, char *err, size_t errlen);

/* Sets the mechanism on `sock` before it binds or connects: `server` for
 * the side that binds, `kind` TT_ZAUTH_CONTROL or TT_ZAUTH_BULK. A key
 * that is off (or NULL) sets nothing. TT_OK or TT_ESYS. */
int tt_zauth_apply(void *sock, const tt_zauth_key_t *k, int server, int kind);

/* The ZAP handler of one ZeroMQ context, on its own thread: it admits a
 * CURVE peer whose public key is the cluster's and a PLAIN peer with the
 * cluster's data password, and refuses (and logs, at most every 10 s per
 * context) all others. Start it before the context's first server socket
 * binds; stop it after they are closed and before zmq_ctx_term. A key that
 * is off starts nothing (*out = NULL). `name` is the owner ("coordinator",
 * "shard s0", "ring rank 2") for log lines. */
typedef struct tt_zauth_zap tt_zauth_zap_t;
int tt_zauth_zap_start(void *zctx, const tt_zauth_key_t *k, const char *name, tt_zauth_zap_t **out,
                       char *err, size_t errlen);
/* Handshakes refused so far. */
unsigned long tt_zauth_zap_refused(const tt_zauth_zap_t *z);
void tt_zauth_zap_stop(tt_zauth_zap_t **z);

/* The failed handshakes a server socket's monitor reports (watch
 * TT_ZAUTH_FAILURE_EVENTS): a peer with no cluster key, or another one.
 * A connection closed before its handshake (a TCP probe, a port scan) is
 * no failure of ours and is not counted. */
#define TT_ZAUTH_FAILURE_EVENTS ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
typedef struct tt_zauth_watch {
    uint64_t failed;    /* handshakes failed so far */
    uint64_t warned_ms; /* when a line was last logged; 0: never */
} tt_zauth_watch_t;

/* Counts `event` (with its value) on the server socket bound at `where`,
 * of `kind` and with key `k`, when it is a failed handshake, and logs it
 * with its likely cause ("the peer has no cluster key file (this process
 * has one)") unless a line was logged less than 10 s ago (a misconfigured
 * peer retries every 100 ms). Returns the cause it logged, or NULL. */
const char *tt_zauth_watch(tt_zauth_watch_t *w, const tt_zauth_key_t *k, int kind,
                           const char *where, unsigned event, int value, uint64_t now_ms);

/* What a server's /metrics counts as refused connections: the failed
 * handshakes `w` saw and the peers ZAP handler `z` refused (either NULL). */
unsigned long long tt_zauth_refused_total(const tt_zauth_watch_t *w, const tt_zauth_zap_t *z);

/* What the mechanism is, for an INFO line: "none", "CURVE" or "CURVE
 * (control), PLAIN (data)". */
const char *tt_zauth_describe(const tt_zauth_key_t *k);

#endif

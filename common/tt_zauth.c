/* tt_zauth: the cluster key file, the mechanism each socket gets, and the
 * ZAP handler (ZeroMQ RFC 27) that admits only holders of the key. The
 * data password is the key's public half: a process without the key file
 * cannot know it, and one who learns it by reading the network learns
 * nothing that lets it pass the control plane's CURVE check, which asks
 * for proof of the secret half. */
#include "tt_zauth.h"
#include "tt_clock.h"
#include "tt_log.h"
#include "tt_status.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#define ZAP_ENDPOINT   "inproc://zeromq.zap.01"
#define PLAIN_USER     "tether"
#define REFUSAL_LOG_MS 10000
#define KEY_FILE_MAX   4096

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...) {
    if (err == NULL || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* ---- the key file ---- */

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t')
        s++;
    char *e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
        *--e = '\0';
    return s;
}

/* One "name = value" line into k; what was wrong into err. */
static int parse_line(tt_zauth_key_t *k, char *line, int lineno, int *have_key, char *err,
                      size_t errlen) {
    char *eq = strchr(line, '=');
    if (eq == NULL) {
        set_err(err, errlen, "line %d: expected 'name = value'", lineno);
        return TT_EINVAL;
    }
    *eq = '\0';
    const char *name = trim(line), *value = trim(eq + 1);
    if (strcmp(name, "key") == 0) {
        uint8_t raw[32];
        if (strlen(value) != 40 || zmq_z85_decode(raw, value) == NULL) {
            set_err(err, errlen, "line %d: key must be 40 characters of Z85 (tetherctl keygen)",
                    lineno);
            return TT_EINVAL;
        }
        snprintf(k->sec, sizeof(k->sec), "%s", value);
        *have_key = 1;
    } else if (strcmp(name, "data") == 0) {
        if (strcmp(value, "plain") != 0 && strcmp(value, "curve") != 0) {
            set_err(err, errlen, "line %d: data must be 'plain' or 'curve', not '%s'", lineno,
                    value);
            return TT_EINVAL;
        }
        k->data_curve = strcmp(value, "curve") == 0;
    } else {
        set_err(err, errlen, "line %d: unknown setting '%s' (key, data)", lineno, name);
        return TT_EINVAL;
    }
    return TT_OK;
}

int tt_zauth_parse(tt_zauth_key_t *k, const char *text, char *err, size_t errlen) {
    memset(k, 0, sizeof(*k));
    size_t len = strlen(text);
    char *copy = strdup(text);
    if (copy == NULL)
        return TT_ENOMEM;
    int rc = TT_OK, have_key = 0, lineno = 0;
    for (char *l = copy, *next; l != NULL && rc == TT_OK; l = next) {
        next = strchr(l, '\n');
        if (next != NULL)
            *next++ = '\0';
        lineno++;
        char *t = trim(l);
        if (*t != '\0' && *t != '#')
            rc = parse_line(k, t, lineno, &have_key, err, errlen);
    }
    memset(copy, 0, len); /* the secret does not outlive the parse in freed memory */
    free(copy);
    if (rc == TT_OK && !have_key) {
        set_err(err, errlen, "no 'key = ...' line");
        rc = TT_EINVAL;
    }
    if (rc == TT_OK && zmq_curve_public(k->pub, k->sec) != 0) {
        set_err(err, errlen, "cannot derive the public key: %s", zmq_strerror(errno));
        rc = TT_EINVAL;
    }
    if (rc != TT_OK)
        memset(k, 0, sizeof(*k));
    k->on = rc == TT_OK;
    return rc;
}

/* The file's mode is checked on the descriptor that is read, so a file
 * swapped between the check and the read cannot slip through. */
static int read_key_file(const char *path, char *buf, size_t len, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        set_err(err, errlen, "cannot open key file %s: %s", path, strerror(errno));
        return TT_ESYS;
    }
    struct stat st;
    int rc = TT_OK;
    if (fstat(fd, &st) != 0) {
        set_err(err, errlen, "cannot stat key file %s: %s", path, strerror(errno));
        rc = TT_ESYS;
    } else if (!S_ISREG(st.st_mode)) {
        set_err(err, errlen, "key file %s is not a regular file", path);
        rc = TT_EINVAL;
    } else if (st.st_mode & (S_IROTH | S_IWOTH | S_IWGRP)) {
        set_err(err, errlen,
                "key file %s is open to others (mode %04o): it holds the cluster's secret; "
                "chmod 600 %s",
                path, (unsigned)(st.st_mode & 07777), path);
        rc = TT_EINVAL;
    }
    ssize_t n = 0;
    if (rc == TT_OK && (n = read(fd, buf, len - 1)) < 0) {
        set_err(err, errlen, "cannot read key file %s: %s", path, strerror(errno));
        rc = TT_ESYS;
    } else if (rc == TT_OK && (size_t)n == len - 1) {
        set_err(err, errlen, "key file %s is longer than %zu bytes: is it a key file?", path,
                len - 1);
        rc = TT_EINVAL;
    }
    if (rc == TT_OK)
        buf[n] = '\0';
    close(fd);
    return rc;
}

int tt_zauth_load(tt_zauth_key_t *k, const char *path, char *err, size_t errlen) {
    memset(k, 0, sizeof(*k));
    if (path == NULL || path[0] == '\0')
        return TT_OK;
    if (!zmq_has("curve")) {
        set_err(err, errlen, "key file %s given, but this ZeroMQ library has no CURVE", path);
        return TT_EINVAL;
    }
    char text[KEY_FILE_MAX], why[200];
    int rc = read_key_file(path, text, sizeof(text), err, errlen);
    if (rc != TT_OK)
        return rc;
    rc = tt_zauth_parse(k, text, why, sizeof(why));
    memset(text, 0, sizeof(text));
    if (rc != TT_OK)
        set_err(err, errlen, "key file %s: %s", path, why);
    else
        snprintf(k->path, sizeof(k->path), "%s", path);
    return rc;
}

int tt_zauth_format(char *buf, size_t len, int data_curve, char *err, size_t errlen) {
    char pub[TT_ZAUTH_Z85], sec[TT_ZAUTH_Z85];
    if (zmq_curve_keypair(pub, sec) != 0) {
        set_err(err, errlen, "cannot make a key: %s", zmq_strerror(errno));
        return TT_ESYS;
    }
    int w = snprintf(buf, len,
                     "# tether cluster key: give this file to every process of the cluster,\n"
                     "# and to nobody else (docs/operations.md, \"The cluster key\").\n"
                     "key = %s\n"
                     "# bulk data (ring links, shard servers): plain (authenticated) or curve\n"
                     "# (authenticated and encrypted, slower)\n"
                     "data = %s\n",
                     sec, data_curve ? "curve" : "plain");
    memset(sec, 0, sizeof(sec));
    return (w > 0 && (size_t)w < len) ? TT_OK : TT_EINVAL;
}

int tt_zauth_generate(const char *path, int data_curve, char *err, size_t errlen) {
    char text[512];
    int rc = tt_zauth_format(text, sizeof(text), data_curve, err, errlen);
    if (rc != TT_OK)
        return rc;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        set_err(err, errlen, "cannot create key file %s: %s", path, strerror(errno));
        memset(text, 0, sizeof(text));
        return TT_ESYS;
    }
    size_t n = strlen(text);
    int ok = write(fd, text, n) == (ssize_t)n && fsync(fd) == 0;
    memset(text, 0, sizeof(text));
    if (close(fd) != 0 || !ok) {
        set_err(err, errlen, "cannot write key file %s: %s", path, strerror(errno));
        unlink(path);
        return TT_ESYS;
    }
    return TT_OK;
}

/* ---- sockets ---- */

static int curve(void *s, const tt_zauth_key_t *k, int server) {
    int one = 1;
    if (server)
        return zmq_setsockopt(s, ZMQ_CURVE_SERVER, &one, sizeof(one)) |
               zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, k->sec, 40);
    return zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, k->pub, 40) |
           zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, k->pub, 40) |
           zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, k->sec, 40);
}

static int plain(void *s, const tt_zauth_key_t *k, int server) {
    int one = 1;
    if (server)
        return zmq_setsockopt(s, ZMQ_PLAIN_SERVER, &one, sizeof(one));
    return zmq_setsockopt(s, ZMQ_PLAIN_USERNAME, PLAIN_USER, strlen(PLAIN_USER)) |
           zmq_setsockopt(s, ZMQ_PLAIN_PASSWORD, k->pub, 40);
}

int tt_zauth_apply(void *sock, const tt_zauth_key_t *k, int server, int kind) {
    if (k == NULL || !k->on)
        return TT_OK;
    int rc =
        (kind == TT_ZAUTH_BULK && !k->data_curve) ? plain(sock, k, server) : curve(sock, k, server);
    return rc == 0 ? TT_OK : TT_ESYS;
}

/* With a key, a data port's mechanism (PLAIN) also differs from a control
 * client's (CURVE): tetherctl or a worker pointed at a shard's address. */
static const char *failure(int key_on, int kind, unsigned event, int value) {
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL &&
        value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) {
        if (!key_on)
            return "the peer has a cluster key file (this process has none)";
        return kind == TT_ZAUTH_BULK
                   ? "the peer has no cluster key file (this process has one), or is a control "
                     "client (tetherctl, a worker's TETHER_COORDINATOR) given this data port"
                   : "the peer has no cluster key file (this process has one)";
    }
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL &&
        value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC)
        return "the peer's key cannot talk to this one: it holds another cluster's key file";
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL)
        return key_on ? "the handshake broke ZeroMQ's protocol: another cluster's key file?"
                      : "the handshake broke ZeroMQ's protocol: a peer with a cluster key file?";
    return NULL;
}

/* Whether a rate-limited line may be logged now (and then it is due
 * again REFUSAL_LOG_MS later): strangers retry every 100 ms. */
static int line_due(uint64_t *last_ms, uint64_t now_ms) {
    if (*last_ms != 0 && now_ms - *last_ms < REFUSAL_LOG_MS)
        return 0;
    *last_ms = now_ms;
    return 1;
}

const char *tt_zauth_watch(tt_zauth_watch_t *w, const tt_zauth_key_t *k, int kind,
                           const char *where, unsigned event, int value, uint64_t now_ms) {
    int on = k != NULL && k->on;
    const char *why = failure(on, on && k->data_curve ? TT_ZAUTH_CONTROL : kind, event, value);
    if (why == NULL)
        return NULL;
    w->failed++;
    if (!line_due(&w->warned_ms, now_ms))
        return NULL;
    TT_WARN("auth",
            "a connection to %s failed its handshake (%llu so far): %s; every process of the "
            "cluster needs the same --key-file / TETHER_KEY_FILE",
            where, (unsigned long long)w->failed, why);
    return why;
}

const char *tt_zauth_describe(const tt_zauth_key_t *k) {
    if (k == NULL || !k->on)
        return "none";
    return k->data_curve ? "CURVE" : "CURVE (control), PLAIN (data)";
}

/* ---- the ZAP handler ---- */

struct tt_zauth_zap {
    void *rep;
    pthread_t thread;
    atomic_int stop;
    atomic_ulong refused;
    tt_zauth_key_t key;
    char name[64];
    uint64_t logged_ms; /* handler thread only */
    unsigned long unlogged;
};

enum { F_VERSION, F_ID, F_DOMAIN, F_ADDRESS, F_ROUTING, F_MECH, F_CRED1, F_CRED2, F_MAX };

typedef struct {
    zmq_msg_t f[F_MAX];
    int n;
} zap_req_t;

/* Compares in time that does not depend on where the bytes differ: the
 * data password is a secret a stranger could otherwise guess byte by byte
 * from how fast it is refused. */
static int frame_is(const zmq_msg_t *m, const void *s, size_t n) {
    if (zmq_msg_size((zmq_msg_t *)m) != n)
        return 0;
    const uint8_t *a = zmq_msg_data((zmq_msg_t *)m), *b = s;
    uint8_t diff = 0;
    for (size_t i = 0; i < n; i++)
        diff |= a[i] ^ b[i];
    return diff == 0;
}

/* Why the request's peer is refused, or NULL when it is admitted. */
static const char *judge(const tt_zauth_zap_t *z, zap_req_t *r) {
    if (r->n < F_CRED1 || !frame_is(&r->f[F_VERSION], "1.0", 3))
        return "a malformed ZAP request";
    zmq_msg_t *mech = &r->f[F_MECH];
    if (frame_is(mech, "CURVE", 5)) {
        uint8_t want[32];
        zmq_z85_decode(want, z->key.pub);
        return (r->n > F_CRED1 && frame_is(&r->f[F_CRED1], want, sizeof(want)))
                   ? NULL
                   : "its CURVE key is not this cluster's";
    }
    if (frame_is(mech, "PLAIN", 5))
        return (r->n > F_CRED2 && frame_is(&r->f[F_CRED1], PLAIN_USER, strlen(PLAIN_USER)) &&
                frame_is(&r->f[F_CRED2], z->key.pub, 40))
                   ? NULL
                   : "its data password is not this cluster's";
    return "it offered no credentials";
}

static void note_refusal(tt_zauth_zap_t *z, zap_req_t *r, const char *why) {
    atomic_fetch_add(&z->refused, 1);
    if (!line_due(&z->logged_ms, tt_clock_mono_ms())) {
        z->unlogged++;
        return;
    }
    char addr[64] = "?";
    if (r->n > F_ADDRESS) {
        size_t n = zmq_msg_size(&r->f[F_ADDRESS]);
        n = n < sizeof(addr) - 1 ? n : sizeof(addr) - 1;
        memcpy(addr, zmq_msg_data(&r->f[F_ADDRESS]), n);
        addr[n] = '\0';
    }
    TT_WARN(
        "auth", "%s refused a connection from %s: %s (is it given this cluster's key file, %s?)%s",
        z->name, addr, why, z->key.path, z->unlogged ? "; more refusals since the last line" : "");
    z->unlogged = 0;
}

static int reply(void *rep, zap_req_t *r, const char *status, const char *text) {
    const char *uid = strcmp(status, "200") == 0 ? "tether" : "";
    int rc = 0;
    rc |= zmq_send(rep, "1.0", 3, ZMQ_SNDMORE) < 0;
    rc |= zmq_send(rep, zmq_msg_data(&r->f[F_ID]), zmq_msg_size(&r->f[F_ID]), ZMQ_SNDMORE) < 0;
    rc |= zmq_send(rep, status, strlen(status), ZMQ_SNDMORE) < 0;
    rc |= zmq_send(rep, text, strlen(text), ZMQ_SNDMORE) < 0;
    rc |= zmq_send(rep, uid, strlen(uid), ZMQ_SNDMORE) < 0;
    rc |= zmq_send(rep, "", 0, 0) < 0;
    return rc ? TT_ESYS : TT_OK;
}

/* Reads one whole request (every frame, also past F_MAX). */
static int read_request(void *rep, zap_req_t *r) {
    int more = 1;
    r->n = 0;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, rep, 0) < 0) {
            zmq_msg_close(&m);
            return TT_ESYS;
        }
        more = zmq_msg_more(&m);
        if (r->n < F_MAX)
            r->f[r->n++] = m;
        else
            zmq_msg_close(&m);
    }
    return TT_OK;
}

static void *zap_main(void *arg) {
    tt_zauth_zap_t *z = arg;
    while (!atomic_load(&z->stop)) {
        zmq_pollitem_t it = {z->rep, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, 100) <= 0)
            continue;
        zap_req_t r;
        if (read_request(z->rep, &r) != TT_OK)
            continue;
        const char *why = r.n > F_ID ? judge(z, &r) : "a malformed ZAP request";
        if (why != NULL)
            note_refusal(z, &r, why);
        if (r.n > F_ID)
            reply(z->rep, &r, why == NULL ? "200" : "400", why == NULL ? "OK" : why);
        for (int i = 0; i < r.n; i++)
            zmq_msg_close(&r.f[i]);
    }
    return NULL;
}

int tt_zauth_zap_start(void *zctx, const tt_zauth_key_t *k, const char *name, tt_zauth_zap_t **out,
                       char *err, size_t errlen) {
    *out = NULL;
    if (k == NULL || !k->on)
        return TT_OK;
    tt_zauth_zap_t *z = calloc(1, sizeof(*z));
    if (z == NULL)
        return TT_ENOMEM;
    z->key = *k;
    snprintf(z->name, sizeof(z->name), "%s", name);
    int linger = 0;
    z->rep = zmq_socket(zctx, ZMQ_REP);
    if (z->rep == NULL || zmq_setsockopt(z->rep, ZMQ_LINGER, &linger, sizeof(linger)) != 0 ||
        zmq_bind(z->rep, ZAP_ENDPOINT) != 0) {
        set_err(err, errlen, "cannot start the ZAP handler: %s", zmq_strerror(errno));
        if (z->rep != NULL)
            zmq_close(z->rep);
        free(z);
        return TT_ESYS;
    }
    if (pthread_create(&z->thread, NULL, zap_main, z) != 0) {
        set_err(err, errlen, "cannot start the ZAP handler's thread");
        zmq_close(z->rep);
        free(z);
        return TT_ESYS;
    }
    *out = z;
    return TT_OK;
}

unsigned long tt_zauth_zap_refused(const tt_zauth_zap_t *z) {
    return z != NULL ? atomic_load(&((tt_zauth_zap_t *)z)->refused) : 0;
}

unsigned long long tt_zauth_refused_total(const tt_zauth_watch_t *w, const tt_zauth_zap_t *z) {
    return (w != NULL ? (unsigned long long)w->failed : 0) + tt_zauth_zap_refused(z);
}

void tt_zauth_zap_stop(tt_zauth_zap_t **pz) {
    if (pz == NULL || *pz == NULL)
        return;
    tt_zauth_zap_t *z = *pz;
    *pz = NULL;
    atomic_store(&z->stop, 1);
    pthread_join(z->thread, NULL);
    zmq_close(z->rep);
    memset(&z->key, 0, sizeof(z->key));
    free(z);
}

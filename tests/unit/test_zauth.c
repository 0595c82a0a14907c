/* Unit tests of tt_zauth: the key file's parser and loader (what an
 * operator gets wrong: a truncated key, an unknown line, a file others can
 * read), then real sockets on 127.0.0.1 behind a real ZAP handler — a
 * holder of the key is admitted on control (CURVE) and data (PLAIN and
 * CURVE) links, and a process with another key or none is refused, with
 * the reach record's sentence saying which. */
#include "net_testlib.h"
#include "tt_clock.h"
#include "tt_cunit.h"
#include "tt_status.h"
#include "tt_zauth.h"
#include "tt_zmq.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void parse_accepts_a_formatted_key(void) {
    char text[512], err[256] = "";
    tt_zauth_key_t k = {0};
    CU_ASSERT_EQUAL_FATAL(tt_zauth_format(text, sizeof(text), 0, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL_FATAL(tt_zauth_parse(&k, text, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(k.on, 1);
    CU_ASSERT_EQUAL(k.data_curve, 0);
    CU_ASSERT_EQUAL(strlen(k.pub), 40);
    CU_ASSERT_STRING_EQUAL(tt_zauth_describe(&k), "CURVE (control), PLAIN (data)");
    CU_ASSERT_EQUAL_FATAL(tt_zauth_format(text, sizeof(text), 1, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL_FATAL(tt_zauth_parse(&k, text, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(k.data_curve, 1);
    CU_ASSERT_STRING_EQUAL(tt_zauth_describe(&k), "CURVE");
    CU_ASSERT_STRING_EQUAL(tt_zauth_describe(NULL), "none");
}

static void parse_refuses_what_is_wrong(void) {
    static const struct {
        const char *text, *says;
    } bad[] = {
        {"", "no 'key = ...' line"},
        {"# only a comment\n", "no 'key = ...' line"},
        {"key = short\n", "line 1: key must be 40 characters of Z85"},
        {"key = 0123456789012345678901234567890123456789~\n", "line 1: key must be 40"},
        {"key\n", "line 1: expected 'name = value'"},
        {"\n# c\nsecret = x\n", "line 3: unknown setting 'secret'"},
        {"data = fast\n", "line 1: data must be 'plain' or 'curve', not 'fast'"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        tt_zauth_key_t k = {0};
        char err[256] = "";
        CU_ASSERT_EQUAL(tt_zauth_parse(&k, bad[i].text, err, sizeof(err)), TT_EINVAL);
        CU_ASSERT_EQUAL(k.on, 0);
        if (strstr(err, bad[i].says) == NULL)
            fprintf(stderr, "case %zu: '%s' does not say '%s'\n", i, err, bad[i].says);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, bad[i].says));
    }
}

static void load_checks_the_file(void) {
    char dir[] = "/tmp/tt-zauth-XXXXXX", path[128], err[512] = "";
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/cluster.key", dir);
    tt_zauth_key_t k;
    CU_ASSERT_EQUAL(tt_zauth_load(&k, "", err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(k.on, 0);
    CU_ASSERT_EQUAL(tt_zauth_load(&k, path, err, sizeof(err)), TT_ESYS);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "cannot open key file"));
    CU_ASSERT_EQUAL_FATAL(tt_zauth_generate(path, 0, err, sizeof(err)), TT_OK);
    struct stat st;
    CU_ASSERT_EQUAL_FATAL(stat(path, &st), 0);
    CU_ASSERT_EQUAL(st.st_mode & 0777, 0600);
    CU_ASSERT_EQUAL(tt_zauth_generate(path, 0, err, sizeof(err)), TT_ESYS); /* never over one */
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "File exists"));
    CU_ASSERT_EQUAL_FATAL(tt_zauth_load(&k, path, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(k.on, 1);
    CU_ASSERT_STRING_EQUAL(k.path, path);
    chmod(path, 0644);
    CU_ASSERT_EQUAL(tt_zauth_load(&k, path, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "is open to others (mode 0644)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "chmod 600"));
    chmod(path, 0640); /* a group that may read it: a Kubernetes Secret's fsGroup */
    CU_ASSERT_EQUAL(tt_zauth_load(&k, path, err, sizeof(err)), TT_OK);
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_EQUAL(write(fd, "data = curve\n", 13), 13);
    close(fd);
    CU_ASSERT_EQUAL(tt_zauth_load(&k, path, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "no 'key = ...' line"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, path));
    unlink(path);
    rmdir(dir);
}

static tt_zauth_key_t new_key(int data_curve) {
    char text[512], err[256];
    tt_zauth_key_t k = {0};
    CU_ASSERT_EQUAL(tt_zauth_format(text, sizeof(text), data_curve, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(tt_zauth_parse(&k, text, err, sizeof(err)), TT_OK);
    snprintf(k.path, sizeof(k.path), "%s", "test.key");
    return k;
}

/* A DEALER with key `k` (NULL: none) of `kind` to `ep`, watched for up to
 * `ms` or until its handshake completes (net_watch). */
static tt_zmq_reach_t dial(void *zctx, const char *ep, const tt_zauth_key_t *k, int kind, int ms,
                           char *why, size_t len) {
    tt_zmq_opts_t o;
    tt_zmq_opts_default(&o);
    o.key = k;
    o.key_kind = kind;
    return net_watch(zctx, ep, &o, ms, 1, why, len);
}

/* A keyed ROUTER of `kind` in its own context with its ZAP handler. */
typedef struct {
    void *zctx, *router;
    tt_zauth_zap_t *zap;
    char ep[64];
} server_t;

static void server_open(server_t *s, const tt_zauth_key_t *k, int kind) {
    char err[256] = "";
    tt_zmq_opts_t o;
    tt_zmq_opts_default(&o);
    o.key = k;
    o.key_kind = kind;
    s->zctx = zmq_ctx_new();
    CU_ASSERT_EQUAL_FATAL(tt_zauth_zap_start(s->zctx, k, "test server", &s->zap, err, sizeof(err)),
                          TT_OK);
    CU_ASSERT_EQUAL_FATAL(tt_zmq_router(s->zctx, "tcp://127.0.0.1:0", &o, &s->router, s->ep,
                                        sizeof(s->ep), err, sizeof(err)),
                          TT_OK);
}

static void server_close(server_t *s) {
    tt_zmq_close(&s->router);
    tt_zauth_zap_stop(&s->zap);
    zmq_ctx_term(s->zctx);
}

static void keyed_peers_are_admitted(void) {
    static const struct {
        int data_curve, kind;
    } cases[] = {{0, TT_ZAUTH_CONTROL}, {0, TT_ZAUTH_BULK}, {1, TT_ZAUTH_BULK}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        tt_zauth_key_t k = new_key(cases[i].data_curve);
        server_t s;
        char why[512];
        server_open(&s, &k, cases[i].kind);
        void *cctx = zmq_ctx_new();
        tt_zmq_reach_t r = dial(cctx, s.ep, &k, cases[i].kind, 5000, why, sizeof(why));
        CU_ASSERT_EQUAL(r.met, 1);
        CU_ASSERT_STRING_EQUAL(why, "");
        CU_ASSERT_EQUAL(tt_zauth_zap_refused(s.zap), 0);
        zmq_ctx_term(cctx);
        server_close(&s);
    }
}

static void strangers_are_refused_and_told_why(void) {
    tt_zauth_key_t k = new_key(0), other = new_key(0);
    char why[512];
    for (int kind = TT_ZAUTH_CONTROL; kind <= TT_ZAUTH_BULK; kind++) {
        server_t s;
        server_open(&s, &k, kind);
        void *cctx = zmq_ctx_new();
        /* No key at all: the mechanisms differ (NULL against CURVE/PLAIN).
         * Which event says so depends on who reads the other's greeting
         * first: the mismatch, or a connection closed without detail. */
        tt_zmq_reach_t r = dial(cctx, s.ep, NULL, kind, 600, why, sizeof(why));
        CU_ASSERT(!r.met && r.tcp_ups > 0);
        CU_ASSERT(strstr(why, "disagree on security") != NULL ||
                  strstr(why, "another cluster key file") != NULL);
        /* Another cluster's key. */
        r = dial(cctx, s.ep, &other, kind, 600, why, sizeof(why));
        CU_ASSERT(!r.met && r.tcp_ups > 0);
        if (strstr(why, "key") == NULL)
            fprintf(stderr, "kind %d: '%s'\n", kind, why);
        CU_ASSERT_PTR_NOT_NULL(strstr(why, "key file"));
        if (kind == TT_ZAUTH_BULK) /* PLAIN reaches the handler, which refuses */
            CU_ASSERT(tt_zauth_zap_refused(s.zap) > 0);
        /* The key's holder still gets in. */
        r = dial(cctx, s.ep, &k, kind, 5000, why, sizeof(why));
        CU_ASSERT_EQUAL(r.met, 1);
        zmq_ctx_term(cctx);
        server_close(&s);
    }
}

/* A server's watch of failed handshakes, with an injected clock: probes
 * are not failures, every failure is counted, one line per 10 s. */
static void watch_counts_and_names_failures(void) {
    tt_zauth_key_t k = new_key(0);
    tt_zauth_watch_t w = {0};
    const int mismatch = ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH;
    CU_ASSERT_PTR_NULL(tt_zauth_watch(&w, &k, TT_ZAUTH_CONTROL, "test",
                                      ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL, 32, 1000));
    CU_ASSERT_PTR_NULL(
        tt_zauth_watch(&w, &k, TT_ZAUTH_CONTROL, "test", ZMQ_EVENT_ACCEPTED, 7, 1000));
    CU_ASSERT_EQUAL(w.failed, 0);
    const char *why = tt_zauth_watch(&w, &k, TT_ZAUTH_CONTROL, "test",
                                     ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL, mismatch, 1000);
    CU_ASSERT_PTR_NOT_NULL_FATAL(why);
    CU_ASSERT_STRING_EQUAL(why, "the peer has no cluster key file (this process has one)");
    CU_ASSERT_PTR_NULL(tt_zauth_watch(&w, &k, TT_ZAUTH_CONTROL, "test",
                                      ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL, mismatch, 10999));
    CU_ASSERT_EQUAL(w.failed, 2);
    why = tt_zauth_watch(&w, &k, TT_ZAUTH_CONTROL, "test", ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL,
                         ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC, 11000);
    CU_ASSERT_PTR_NOT_NULL_FATAL(why);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "another cluster's key file"));
    /* A data port: a control client given its address looks the same. */
    tt_zauth_watch_t d = {0};
    why = tt_zauth_watch(&d, &k, TT_ZAUTH_BULK, "test", ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL,
                         mismatch, 5);
    CU_ASSERT_PTR_NOT_NULL_FATAL(why);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "or is a control client"));
    tt_zauth_watch_t n = {0}; /* this side has no key */
    why = tt_zauth_watch(&n, NULL, TT_ZAUTH_BULK, "test", ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL,
                         mismatch, 5);
    CU_ASSERT_PTR_NOT_NULL_FATAL(why);
    CU_ASSERT_STRING_EQUAL(why, "the peer has a cluster key file (this process has none)");
}

static const tt_cunit_test_t tests[] = {
    {"watch_counts_and_names_failures", watch_counts_and_names_failures},
    {"parse_accepts_a_formatted_key", parse_accepts_a_formatted_key},
    {"parse_refuses_what_is_wrong", parse_refuses_what_is_wrong},
    {"load_checks_the_file", load_checks_the_file},
    {"keyed_peers_are_admitted", keyed_peers_are_admitted},
    {"strangers_are_refused_and_told_why", strangers_are_refused_and_told_why},
    {NULL, NULL},
};

TT_CUNIT_MAIN("zauth", tests)

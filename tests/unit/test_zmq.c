/* Unit tests of tt_zmq's reach record (tt_zmq_reach_*), the part of the
 * socket factory that tells why a connecting socket has not reached its
 * peer: the event bookkeeping on its own, then a DEALER's real monitor
 * against the three peers an operator must tell apart on 127.0.0.1 —
 * nothing listening, a TCP listener that is no ZeroMQ peer, a ROUTER;
 * and how a log line names a ROUTER peer (tt_zmq_peer_name). */
#include "tt_clock.h"
#include "net_testlib.h"
#include "tt_cunit.h"
#include "tt_status.h"
#include "tt_zmq.h"

#include <stdio.h>
#include <string.h>

static void reach_counts_until_a_handshake(void) {
    tt_zmq_reach_t r;
    char why[512];
    tt_zmq_reach_init(&r, 1000);
    tt_zmq_reach_event(&r, ZMQ_EVENT_CONNECT_RETRIED, 0);
    tt_zmq_reach_event(&r, ZMQ_EVENT_CONNECT_RETRIED, 0);
    tt_zmq_reach_why(&r, "shard s0", "tcp://10.0.0.9:7700", "its advertised address", 3500, why,
                     sizeof(why));
    CU_ASSERT_STRING_EQUAL(why, "cannot connect to shard s0 at tcp://10.0.0.9:7700 (its advertised "
                                "address; 2 attempt(s) failed in 2500 ms): is it running, and "
                                "reachable from this host?");
    tt_zmq_reach_event(&r, ZMQ_EVENT_CONNECTED, 0);
    tt_zmq_reach_event(&r, ZMQ_EVENT_DISCONNECTED, 0); /* not counted: not a reach event */
    tt_zmq_reach_why(&r, "rank 2", "tcp://h:1", "its advertised endpoint", 4000, why, sizeof(why));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "rank 2 at tcp://h:1 (its advertised endpoint) took 1 TCP "
                                       "connection(s) in 3000 ms and completed no ZeroMQ "
                                       "handshake"));
    tt_zmq_reach_event(&r, ZMQ_EVENT_HANDSHAKE_SUCCEEDED, 0);
    tt_zmq_reach_event(&r, ZMQ_EVENT_CONNECT_RETRIED, 0); /* a later drop: not this record's */
    tt_zmq_reach_event(&r, ZMQ_EVENT_CONNECTED, 0);
    CU_ASSERT_EQUAL(r.met, 1);
    CU_ASSERT_EQUAL(r.tries, 2);
    CU_ASSERT_EQUAL(r.tcp_ups, 1);
    tt_zmq_reach_why(&r, "rank 2", "tcp://h:1", "x", 5000, why, sizeof(why));
    CU_ASSERT_STRING_EQUAL(why, "");
    CU_ASSERT_EQUAL(tt_zmq_reach_warn_after(60000), 5000);
    CU_ASSERT_EQUAL(tt_zmq_reach_warn_after(2000), 1000);
    CU_ASSERT_EQUAL(tt_zmq_reach_warn_after(0), 0);
    tt_zmq_reach_init(&r, 0); /* a clock behind the start says 0 ms, not a wrapped count */
    tt_zmq_reach_why(&r, "x", "y", "z", 0, why, sizeof(why));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "failed in 0 ms"));
}

static tt_zmq_reach_t watch(void *zctx, const char *ep, int ms, int until_met, char *why,
                            size_t len) {
    return net_watch(zctx, ep, NULL, ms, until_met, why, len);
}

static void reach_of_real_peers(void) {
    void *zctx = zmq_ctx_new();
    char why[512], ep[64], err[256] = "";
    /* Nothing listens on port 1: refused, retried. */
    tt_zmq_reach_t r = watch(zctx, "tcp://127.0.0.1:1", 500, 0, why, sizeof(why));
    CU_ASSERT(r.tries > 0 && r.tcp_ups == 0 && !r.met);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "cannot connect to peer p at tcp://127.0.0.1:1"));
    /* A TCP listener that is no ZeroMQ peer. */
    int fd = net_mute_listener(ep, sizeof(ep));
    CU_ASSERT_FATAL(fd >= 0);
    r = watch(zctx, ep, 300, 0, why, sizeof(why));
    CU_ASSERT(r.tcp_ups > 0 && !r.met);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "completed no ZeroMQ handshake"));
    close(fd);
    /* A ROUTER: the handshake completes and the sentence is empty. */
    void *router = NULL;
    CU_ASSERT_EQUAL_FATAL(
        tt_zmq_router(zctx, "tcp://127.0.0.1:0", NULL, &router, ep, sizeof(ep), err, sizeof(err)),
        TT_OK);
    r = watch(zctx, ep, 5000, 1, why, sizeof(why));
    CU_ASSERT_EQUAL(r.met, 1);
    CU_ASSERT_STRING_EQUAL(why, "");
    tt_zmq_close(&router);
    zmq_ctx_term(zctx);
}

/* A log line names a ROUTER peer: our ids as they are, ZeroMQ's generated
 * ones (a zero byte, then four) in hex, a long one cut at a whole byte. */
static void peer_names_for_logs(void) {
    char out[TT_ZMQ_PEER_NAME_MAX], small[8];
    const unsigned char gen[] = {0x00, 0x80, 0x00, 0x00, 0x41};
    CU_ASSERT_STRING_EQUAL(tt_zmq_peer_name("worker-w1.7", 11, out, sizeof(out)), "worker-w1.7");
    CU_ASSERT_STRING_EQUAL(tt_zmq_peer_name(gen, sizeof(gen), out, sizeof(out)), "0x0080000041");
    CU_ASSERT_STRING_EQUAL(tt_zmq_peer_name("a\nb", 3, out, sizeof(out)), "0x610a62");
    CU_ASSERT_STRING_EQUAL(tt_zmq_peer_name("", 0, out, sizeof(out)), "(no id)");
    CU_ASSERT_STRING_EQUAL(tt_zmq_peer_name(gen, sizeof(gen), small, sizeof(small)), "0x0080");
    unsigned char big[255];
    memset(big, 0xff, sizeof(big));
    CU_ASSERT_EQUAL(strlen(tt_zmq_peer_name(big, sizeof(big), out, sizeof(out))), 2 + 2 * 255);
}

static const tt_cunit_test_t tests[] = {
    {"peer_names_for_logs", peer_names_for_logs},
    {"reach_counts_until_a_handshake", reach_counts_until_a_handshake},
    {"reach_of_real_peers", reach_of_real_peers},
    {NULL, NULL},
};

TT_CUNIT_MAIN("zmq", tests)

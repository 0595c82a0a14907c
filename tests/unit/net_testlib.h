/* net_testlib: a loopback TCP socket that listens and never accepts, for
 * the tests of what a ZeroMQ client says when the address it was given
 * holds something that is no ZeroMQ peer (test_zmq.c, test_zreq.c,
 * test_client.c): the kernel completes the connection, and nothing ever
 * answers ZeroMQ's greeting. And a DEALER whose monitor feeds a reach
 * record, for the tests of what it says of a peer (test_zmq.c,
 * test_zauth.c). */
#ifndef NET_TESTLIB_H
#define NET_TESTLIB_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tt_clock.h"
#include "tt_status.h"
#include "tt_zmq.h"

/* The listening fd (close it when done) and "tcp://127.0.0.1:PORT" in
 * ep; -1 when no socket could be made. */
static inline int net_mute_listener(char *ep, size_t len) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 16) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &alen) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    snprintf(ep, len, "tcp://127.0.0.1:%d", ntohs(a.sin_port));
    return fd;
}

/* A DEALER with options `o` (NULL: defaults) to `ep` whose monitor feeds
 * a reach record for up to `ms`, or until a handshake when `until_met`;
 * the record's sentence goes to why (the open's error, if it failed). */
static inline tt_zmq_reach_t net_watch(void *zctx, const char *ep, const tt_zmq_opts_t *o, int ms,
                                       int until_met, char *why, size_t len) {
    tt_zmq_reach_t r;
    void *d = NULL, *mon = NULL;
    tt_zmq_reach_init(&r, tt_clock_mono_ms());
    if (tt_zmq_dealer_watched(zctx, ep, o, TT_ZMQ_REACH_EVENTS, &d, &mon, why, len) != TT_OK)
        return r;
    uint64_t end = tt_clock_mono_ms() + (uint64_t)ms;
    while (tt_clock_mono_ms() < end && !(until_met && r.met)) {
        zmq_pollitem_t it = {mon, 0, ZMQ_POLLIN, 0};
        zmq_poll(&it, 1, 20);
        tt_zmq_reach_drain(&r, mon);
    }
    tt_zmq_reach_why(&r, "peer p", ep, "the test's", tt_clock_mono_ms(), why, len);
    tt_zmq_monitor_close(d, &mon);
    tt_zmq_close(&d);
    return r;
}

#endif

/* net_testlib: a loopback TCP socket that listens and never accepts, for
 * the tests of what a ZeroMQ client says when the address it was given
 * holds something that is no ZeroMQ peer (test_zmq.c, test_zreq.c,
 * test_client.c): the kernel completes the connection, and nothing ever
 * answers ZeroMQ's greeting. */
#ifndef NET_TESTLIB_H
#define NET_TESTLIB_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

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

#endif

/* fuzz-requires: common/tt_http.c */
/* libFuzzer target for the HTTP request-head parser of the daemons' HTTP
 * endpoint (tt_http_parse), which reads whatever a TCP client sends: it may
 * not crash or read out of bounds, and what it returns must hold: a
 * request has a non-empty method and a path that starts with '/', both
 * NUL-terminated within their buffers. Every prefix is parsed too, as the
 * server does while the head arrives.
 * fuzz-requires: common/tt_http.c */
#include "tt_fuzz.h"
#include "tt_http.h"
#include "tt_status.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check(const uint8_t *data, size_t size, size_t plen) {
    char method[16], path[TT_HTTP_PATH_MAX];
    memset(method, 'x', sizeof(method));
    memset(path, 'x', sizeof(path));
    int rc = tt_http_parse((const char *)data, size, method, sizeof(method), path, plen);
    if (rc == TT_HTTP_REQUEST &&
        (memchr(method, '\0', sizeof(method)) == NULL || method[0] == '\0' ||
         memchr(path, '\0', plen) == NULL || path[0] != '/'))
        abort();
    if (rc != TT_HTTP_MORE && rc != TT_HTTP_REQUEST && rc != TT_HTTP_BAD && rc != TT_HTTP_TOO_LONG)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* the parser sees the bytes as they arrive: every prefix, then all */
    size_t step = size / 8 + 1;
    for (size_t n = 0; n < size; n += step)
        check(data, n, TT_HTTP_PATH_MAX);
    check(data, size, TT_HTTP_PATH_MAX);
    check(data, size, 2 + size % 8); /* a tiny path buffer */
    return 0;
}

int tt_fuzz_seeds(tt_fuzz_emit_fn emit, void *ctx) {
    static const char *const seeds[][2] = {
        {"get-metrics", "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:7680\r\nAccept: */*\r\n\r\n"},
        {"head-query", "HEAD /healthz?x=1#y HTTP/1.0\n\n"},
        {"post", "POST /readyz HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"},
        {"partial", "GET /metr"},
        {"garbage", "\x16\x03\x01\x02\x05\x01\r\n\r\n"},
    };
    int rc = TT_OK;
    for (size_t i = 0; rc == TT_OK && i < sizeof(seeds) / sizeof(seeds[0]); i++)
        rc = emit(ctx, seeds[i][0], seeds[i][1], strlen(seeds[i][1]));
    return rc;
}

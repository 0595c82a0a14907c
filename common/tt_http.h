/* tt_http: the daemons' small HTTP endpoint (DESIGN.md §1: /healthz,
 * /readyz, /metrics for Kubernetes probes and Prometheus). It owns one
 * listening TCP socket on the daemon's libuv loop, its connections, the
 * parsing of one GET or HEAD request per connection (HTTP/1.0 and 1.1,
 * answered with "Connection: close") and the framing of the answer; what
 * a path answers is the daemon's handler, called on the loop thread, so it
 * may read the daemon's state without locks. Why not a library: three
 * read-only paths do not justify a dependency, and the parser is small
 * enough to be fuzzed (tests/fuzz/fuzz_http.c).
 * Limits a scraper never reaches and a bad client cannot exceed: 8 KiB of
 * request head, 5 s per connection, 64 connections at once (more are
 * closed on accept).
 * Thread safety: everything on the loop thread; tt_http_parse is pure. */
#ifndef TT_HTTP_H
#define TT_HTTP_H

#include <stddef.h>
#include <uv.h>

typedef struct tt_http tt_http_t;

#define TT_HTTP_HEAD_MAX 8192
#define TT_HTTP_PATH_MAX 256

/* An answer being built by a handler. */
typedef struct tt_http_reply {
    int status;               /* 200 unless the handler says otherwise */
    const char *content_type; /* static string; default text/plain */
    char *body;               /* grown by tt_http_printf */
    size_t len, cap;
    int oom; /* a printf ran out of memory: the answer becomes a 500 */
} tt_http_reply_t;

/* Appends to the body (printf format). Any thread that owns `r`. */
void tt_http_printf(tt_http_reply_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* `s` as a label value of the Prometheus text format (\\, \" and \n
 * escaped) in buf, cut to fit; returns buf. */
const char *tt_http_label(const char *s, char *buf, size_t len);

/* A sample value as the Prometheus text format wants it: the shortest
 * decimal that reads back as exactly v (0.035, not %.17g's
 * 0.035000000000000003), NaN and +Inf/-Inf by their names. Returns buf
 * (TT_HTTP_NUM_MAX bytes). */
#define TT_HTTP_NUM_MAX 32
const char *tt_http_num(double v, char *buf);

/* Per-job gauges in the Prometheus text format: for each gauge g (its name
 * gauges[g][0], help gauges[g][1]) the HELP/TYPE lines, then one line per
 * job labelled job="jobs[j]" with the value v[j * ngauges + g]. */
void tt_http_job_gauges(tt_http_reply_t *r, const char *const (*gauges)[2], size_t ngauges,
                        const char *const *jobs, size_t njobs, const double *v);

/* The paths every daemon answers alike: /healthz (200 "ok": the loop
 * runs), /readyz (200 "ready", or 503 "stopping" when !ready) and any path
 * but /metrics (404). Returns 1 when it answered; 0 for /metrics, the
 * caller's, with the text format's content type set. */
int tt_http_common(const char *path, int ready, tt_http_reply_t *r);

/* Fills r for `path` (the request path without its query string). */
typedef void (*tt_http_handler_fn)(void *ctx, const char *path, tt_http_reply_t *r);

/* Parser result. */
enum {
    TT_HTTP_MORE = 0,     /* the head is not complete yet */
    TT_HTTP_REQUEST = 1,  /* a request line was read */
    TT_HTTP_BAD = -1,     /* not an HTTP/1.x request line: 400 */
    TT_HTTP_TOO_LONG = -2 /* head or path too long: 431 / 414 */
};

/* Reads the request head in buf[0..len): once it ends ("\r\n\r\n", or
 * "\n\n"), copies the method (at most 15 bytes) and the path without its
 * query string (at most TT_HTTP_PATH_MAX - 1 bytes, must start with '/')
 * and returns TT_HTTP_REQUEST. Pure. */
int tt_http_parse(const char *buf, size_t len, char *method, size_t mlen, char *path, size_t plen);

/* Listens on `addr`: "HOST:PORT", "[V6]:PORT" or ":PORT" (all IPv4
 * interfaces); PORT 0 takes a free one (tt_http_address says which).
 * TT_OK, TT_EINVAL (bad address, sentence in err), TT_ESYS (cannot bind),
 * TT_ENOMEM. */
int tt_http_start(tt_http_t **out, uv_loop_t *loop, const char *addr, tt_http_handler_fn fn,
                  void *ctx, char *err, size_t errlen);

/* "HOST:PORT" as bound. */
const char *tt_http_address(const tt_http_t *h);

/* Closes the listener and every connection; the memory goes with the last
 * close callback, so the loop must run on. Sets *h = NULL; accepts NULL. */
void tt_http_close(tt_http_t **h);

#endif

/* tt_http: the daemons' HTTP endpoint (see the header): one listener on
 * the loop, one request per connection, each connection two libuv handles
 * (its socket and its deadline timer) freed when both have closed. */
#include "tt_http.h"

#include "tt_log.h"
#include "tt_status.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CONN_MAX     64
#define CONN_TIMEOUT 5000

typedef struct conn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_write_t wr;
    uv_shutdown_t sd;
    struct tt_http *h;
    struct conn *prev, *next;
    int open_handles, closing, answered;
    char *out;
    size_t len;
    char buf[TT_HTTP_HEAD_MAX];
    char spill[64]; /* reads after a full head land here and are dropped */
} conn_t;

struct tt_http {
    uv_loop_t *loop;
    uv_tcp_t listener;
    tt_http_handler_fn fn;
    void *ctx;
    conn_t *conns;
    int nconns, closing, listener_open;
    char addr[80];
};

/* Room for `need` bytes in the body; 0, or -1 with r->oom set. */
static int grow(tt_http_reply_t *r, size_t need) {
    if (need <= r->cap)
        return 0;
    size_t cap = r->cap ? r->cap : 4096;
    while (cap < need)
        cap *= 2;
    char *nb = realloc(r->body, cap);
    if (nb == NULL) {
        r->oom = 1;
        return -1;
    }
    r->body = nb;
    r->cap = cap;
    return 0;
}

void tt_http_printf(tt_http_reply_t *r, const char *fmt, ...) {
    va_list ap;
    if (r->oom || grow(r, r->len + 1) != 0)
        return;
    va_start(ap, fmt);
    int n = vsnprintf(r->body + r->len, r->cap - r->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
        r->oom = 1;
        return;
    }
    if ((size_t)n >= r->cap - r->len) {
        if (grow(r, r->len + (size_t)n + 1) != 0)
            return;
        va_start(ap, fmt);
        vsnprintf(r->body + r->len, r->cap - r->len, fmt, ap);
        va_end(ap);
    }
    r->len += (size_t)n;
}

const char *tt_http_label(const char *s, char *buf, size_t len) {
    size_t o = 0;
    for (; s != NULL && *s != '\0' && o + 3 < len; s++) {
        if (*s == '\\' || *s == '"' || *s == '\n')
            buf[o++] = '\\';
        buf[o++] = *s == '\n' ? 'n' : *s;
    }
    if (len > 0)
        buf[o] = '\0';
    return buf;
}

const char *tt_http_num(double v, char *buf) {
    if (isnan(v))
        return strcpy(buf, "NaN");
    if (isinf(v))
        return strcpy(buf, v > 0 ? "+Inf" : "-Inf");
    for (int prec = 1; prec < 17; prec++) { /* 17 digits always read back */
        snprintf(buf, TT_HTTP_NUM_MAX, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            return buf;
    }
    snprintf(buf, TT_HTTP_NUM_MAX, "%.17g", v);
    return buf;
}

void tt_http_job_gauges(tt_http_reply_t *r, const char *const (*gauges)[2], size_t ngauges,
                        const char *const *jobs, size_t njobs, const double *v) {
    char id[512], num[TT_HTTP_NUM_MAX];
    for (size_t g = 0; g < ngauges; g++) {
        tt_http_printf(r, "# HELP %s %s\n# TYPE %s gauge\n", gauges[g][0], gauges[g][1],
                       gauges[g][0]);
        for (size_t j = 0; j < njobs; j++)
            tt_http_printf(r, "%s{job=\"%s\"} %s\n", gauges[g][0],
                           tt_http_label(jobs[j], id, sizeof(id)),
                           tt_http_num(v[j * ngauges + g], num));
    }
}

int tt_http_common(const char *path, int ready, tt_http_reply_t *r) {
    if (strcmp(path, "/metrics") == 0) {
        r->content_type = "text/plain; version=0.0.4; charset=utf-8";
        return 0;
    }
    if (strcmp(path, "/healthz") == 0) {
        tt_http_printf(r, "ok\n");
    } else if (strcmp(path, "/readyz") == 0) {
        r->status = ready ? 200 : 503;
        tt_http_printf(r, "%s\n", ready ? "ready" : "stopping");
    } else {
        r->status = 404;
        tt_http_printf(r, "not found: try /healthz, /readyz or /metrics\n");
    }
    return 1;
}

/* ---- parsing (pure) ---- */

static int token_char(char c) {
    return c >= 'A' && c <= 'Z';
}

/* The request line line[0..n): METHOD SP /path[?query] SP HTTP/1.x */
static int request_line(const char *line, size_t n, char *method, size_t mlen, char *path,
                        size_t plen) {
    size_t i = 0;
    while (i < n && token_char(line[i]))
        i++;
    if (i == 0 || i >= mlen || i >= n || line[i] != ' ')
        return TT_HTTP_BAD;
    memcpy(method, line, i);
    method[i] = '\0';
    size_t p0 = ++i;
    while (i < n && line[i] != ' ') {
        if ((unsigned char)line[i] <= 0x20 || line[i] == 0x7f)
            return TT_HTTP_BAD;
        i++;
    }
    size_t pend = p0;
    while (pend < i && line[pend] != '?' && line[pend] != '#')
        pend++;
    if (p0 == i || line[p0] != '/' || i + 9 != n || memcmp(line + i, " HTTP/1.", 8) != 0 ||
        line[n - 1] < '0' || line[n - 1] > '9')
        return TT_HTTP_BAD;
    if (pend - p0 >= plen)
        return TT_HTTP_TOO_LONG;
    memcpy(path, line + p0, pend - p0);
    path[pend - p0] = '\0';
    return TT_HTTP_REQUEST;
}

/* Where the head ends (just past its blank line), or 0. */
static size_t head_end(const char *buf, size_t len) {
    for (size_t i = 0; i + 1 < len; i++) {
        if (buf[i] != '\n')
            continue;
        if (buf[i + 1] == '\n')
            return i + 2;
        if (i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n')
            return i + 3;
    }
    return 0;
}

int tt_http_parse(const char *buf, size_t len, char *method, size_t mlen, char *path, size_t plen) {
    const char *nl = memchr(buf, '\n', len);
    if (nl == NULL)
        return len >= TT_HTTP_HEAD_MAX ? TT_HTTP_TOO_LONG : TT_HTTP_MORE;
    size_t n = (size_t)(nl - buf);
    if (n > 0 && buf[n - 1] == '\r')
        n--;
    int rc = request_line(buf, n, method, mlen, path, plen);
    if (rc != TT_HTTP_REQUEST)
        return rc; /* no need to wait for the rest of a bad head */
    if (head_end(buf, len) == 0)
        return len >= TT_HTTP_HEAD_MAX ? TT_HTTP_TOO_LONG : TT_HTTP_MORE;
    return TT_HTTP_REQUEST;
}

/* ---- connections ---- */

static void maybe_free(tt_http_t *h) {
    if (h->closing && !h->listener_open && h->nconns == 0)
        free(h);
}

static void on_conn_closed(uv_handle_t *hd) {
    conn_t *c = hd->data;
    if (--c->open_handles > 0)
        return;
    tt_http_t *h = c->h;
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        h->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    h->nconns--;
    free(c->out);
    free(c);
    maybe_free(h);
}

static void conn_close(conn_t *c) {
    if (c->closing)
        return;
    c->closing = 1;
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
    uv_close((uv_handle_t *)&c->timer, on_conn_closed);
}

static void on_alloc(uv_handle_t *hd, size_t suggested, uv_buf_t *b);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b);

/* Why the connection is not closed at once: closing a socket with unread
 * input (the rest of a request refused as too long) sends a reset, which
 * may destroy the answer before the client reads it. So the write side
 * is shut down and input is read and dropped until the client closes, or
 * until the connection's deadline. */
static void on_shut(uv_shutdown_t *sd, int status) {
    conn_t *c = sd->data;
    if (status != 0 || c->closing || uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0)
        conn_close(c);
}

static void on_written(uv_write_t *w, int status) {
    conn_t *c = w->data;
    c->sd.data = c;
    if (status != 0 || c->closing || uv_shutdown(&c->sd, (uv_stream_t *)&c->tcp, on_shut) != 0)
        conn_close(c);
}

static const char *reason(int status) {
    switch (status) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 414:
        return "URI Too Long";
    case 431:
        return "Request Header Fields Too Large";
    case 503:
        return "Service Unavailable";
    default:
        return "Internal Server Error";
    }
}

/* The whole answer in one buffer, then the connection closes. */
static void answer(conn_t *c, const tt_http_reply_t *r, int head_only) {
    int status = r->oom ? 500 : r->status;
    const char *body = r->oom || r->body == NULL ? "" : r->body;
    size_t blen = r->oom ? 0 : r->len;
    char head[320];
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Cache-Control: no-store\r\n%sConnection: close\r\n\r\n",
                     status, reason(status),
                     r->content_type ? r->content_type : "text/plain; charset=utf-8", blen,
                     status == 405 ? "Allow: GET, HEAD\r\n" : "");
    size_t total = (size_t)n + (head_only ? 0 : blen);
    c->answered = 1;
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->out = malloc(total);
    if (c->out == NULL) {
        conn_close(c);
        return;
    }
    memcpy(c->out, head, (size_t)n);
    if (!head_only)
        memcpy(c->out + n, body, blen);
    uv_buf_t b = uv_buf_init(c->out, (unsigned)total);
    c->wr.data = c;
    if (uv_write(&c->wr, (uv_stream_t *)&c->tcp, &b, 1, on_written) != 0)
        conn_close(c);
}

static void answer_error(conn_t *c, int status, const char *text) {
    tt_http_reply_t r = {.status = status};
    tt_http_printf(&r, "%s\n", text);
    answer(c, &r, 0);
    free(r.body);
}

static void serve(conn_t *c) {
    char method[16], path[TT_HTTP_PATH_MAX];
    int rc = tt_http_parse(c->buf, c->len, method, sizeof(method), path, sizeof(path));
    if (rc == TT_HTTP_MORE)
        return;
    if (rc == TT_HTTP_BAD) {
        answer_error(c, 400, "bad request: expected 'GET /path HTTP/1.1'");
        return;
    }
    if (rc == TT_HTTP_TOO_LONG) {
        answer_error(c, c->len >= TT_HTTP_HEAD_MAX ? 431 : 414, "request too long");
        return;
    }
    int head = strcmp(method, "HEAD") == 0;
    if (!head && strcmp(method, "GET") != 0) {
        answer_error(c, 405, "only GET and HEAD");
        return;
    }
    tt_http_reply_t r = {.status = 200};
    c->h->fn(c->h->ctx, path, &r);
    answer(c, &r, head);
    free(r.body);
}

static void on_alloc(uv_handle_t *hd, size_t suggested, uv_buf_t *b) {
    (void)suggested;
    conn_t *c = hd->data;
    if (c->answered || c->len >= sizeof(c->buf))
        *b = uv_buf_init(c->spill, sizeof(c->spill));
    else
        *b = uv_buf_init(c->buf + c->len, (unsigned)(sizeof(c->buf) - c->len));
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b) {
    conn_t *c = s->data;
    if (nread < 0) { /* the client closed, or an error: either way done */
        conn_close(c);
        return;
    }
    if (nread == 0 || c->answered || b->base == c->spill)
        return;
    c->len += (size_t)nread;
    serve(c);
}

static void on_timeout(uv_timer_t *t) {
    conn_close(t->data);
}

static void on_connection(uv_stream_t *srv, int status) {
    tt_http_t *h = srv->data;
    conn_t *c = status == 0 && !h->closing ? calloc(1, sizeof(*c)) : NULL;
    if (c == NULL)
        return;
    c->h = h;
    uv_tcp_init(h->loop, &c->tcp);
    uv_timer_init(h->loop, &c->timer);
    c->tcp.data = c->timer.data = c;
    c->open_handles = 2;
    c->next = h->conns;
    if (h->conns != NULL)
        h->conns->prev = c;
    h->conns = c;
    h->nconns++;
    if (uv_accept(srv, (uv_stream_t *)&c->tcp) != 0 || h->nconns > CONN_MAX) {
        conn_close(c);
        return;
    }
    uv_timer_start(&c->timer, on_timeout, CONN_TIMEOUT, 0);
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

/* ---- life cycle ---- */

static int parse_addr(const char *addr, struct sockaddr_storage *ss, char *err, size_t errlen) {
    const char *colon = addr != NULL ? strrchr(addr, ':') : NULL;
    char host[64];
    char *end = NULL;
    long port = colon != NULL ? strtol(colon + 1, &end, 10) : -1;
    size_t hl = colon != NULL ? (size_t)(colon - addr) : 0;
    int ok = colon != NULL && colon[1] != '\0' && end != NULL && *end == '\0' && port >= 0 &&
             port <= 65535 && hl < sizeof(host);
    if (ok) {
        memcpy(host, addr, hl);
        host[hl] = '\0';
        if (hl == 0 || strcmp(host, "*") == 0)
            ok = uv_ip4_addr("0.0.0.0", (int)port, (struct sockaddr_in *)ss) == 0;
        else if (host[0] == '[' && host[hl - 1] == ']') {
            host[hl - 1] = '\0';
            ok = uv_ip6_addr(host + 1, (int)port, (struct sockaddr_in6 *)ss) == 0;
        } else
            ok = uv_ip4_addr(host, (int)port, (struct sockaddr_in *)ss) == 0;
    }
    if (!ok && err != NULL)
        snprintf(err, errlen, "HTTP address '%s': expected HOST:PORT, [V6]:PORT or :PORT",
                 addr ? addr : "");
    return ok ? TT_OK : TT_EINVAL;
}

static void bound_name(tt_http_t *h) {
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    char ip[64] = "?";
    int port = 0;
    if (uv_tcp_getsockname(&h->listener, (struct sockaddr *)&ss, &len) != 0)
        return;
    if (ss.ss_family == AF_INET6) {
        uv_ip6_name((struct sockaddr_in6 *)&ss, ip, sizeof(ip));
        port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
        snprintf(h->addr, sizeof(h->addr), "[%s]:%d", ip, port);
    } else {
        uv_ip4_name((struct sockaddr_in *)&ss, ip, sizeof(ip));
        port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        snprintf(h->addr, sizeof(h->addr), "%s:%d", ip, port);
    }
}

static void on_listener_closed(uv_handle_t *hd) {
    tt_http_t *h = hd->data;
    h->listener_open = 0;
    maybe_free(h);
}

int tt_http_start(tt_http_t **out, uv_loop_t *loop, const char *addr, tt_http_handler_fn fn,
                  void *ctx, char *err, size_t errlen) {
    struct sockaddr_storage ss;
    *out = NULL;
    if (parse_addr(addr, &ss, err, errlen) != TT_OK || fn == NULL)
        return TT_EINVAL;
    tt_http_t *h = calloc(1, sizeof(*h));
    if (h == NULL)
        return TT_ENOMEM;
    h->loop = loop;
    h->fn = fn;
    h->ctx = ctx;
    uv_tcp_init(loop, &h->listener);
    h->listener.data = h;
    h->listener_open = 1;
    int rc = uv_tcp_bind(&h->listener, (struct sockaddr *)&ss, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&h->listener, 64, on_connection);
    if (rc != 0) {
        if (err != NULL)
            snprintf(err, errlen, "cannot listen for HTTP on %s: %s", addr, uv_strerror(rc));
        h->closing = 1;
        uv_close((uv_handle_t *)&h->listener, on_listener_closed);
        return TT_ESYS;
    }
    bound_name(h);
    TT_INFO("http", "serving /healthz, /readyz and /metrics on http://%s", h->addr);
    *out = h;
    return TT_OK;
}

const char *tt_http_address(const tt_http_t *h) {
    return h->addr;
}

void tt_http_close(tt_http_t **hp) {
    if (hp == NULL || *hp == NULL)
        return;
    tt_http_t *h = *hp;
    *hp = NULL;
    h->closing = 1;
    for (conn_t *c = h->conns; c != NULL; c = c->next)
        conn_close(c);
    uv_close((uv_handle_t *)&h->listener, on_listener_closed);
}

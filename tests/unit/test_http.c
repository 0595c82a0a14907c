/* Unit tests of tt_http: the request-head parser (pure) and the reply
 * builder. The server itself is exercised through the daemons by
 * tests/integration/test_http.py. */
#include "tt_cunit.h"
#include "tt_http.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int parse(const char *s, char *method, char *path) {
    return tt_http_parse(s, strlen(s), method, 16, path, TT_HTTP_PATH_MAX);
}

static void http_parse_requests(void) {
    char m[16], p[TT_HTTP_PATH_MAX];
    CU_ASSERT_EQUAL(parse("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", m, p), TT_HTTP_REQUEST);
    CU_ASSERT_STRING_EQUAL(m, "GET");
    CU_ASSERT_STRING_EQUAL(p, "/metrics");
    CU_ASSERT_EQUAL(parse("HEAD /healthz?verbose=1 HTTP/1.0\n\n", m, p), TT_HTTP_REQUEST);
    CU_ASSERT_STRING_EQUAL(m, "HEAD");
    CU_ASSERT_STRING_EQUAL(p, "/healthz");
    CU_ASSERT_EQUAL(parse("POST /x#frag HTTP/1.1\r\n\r\n", m, p), TT_HTTP_REQUEST);
    CU_ASSERT_STRING_EQUAL(m, "POST"); /* the server answers 405 */
    CU_ASSERT_STRING_EQUAL(p, "/x");
}

static void http_parse_waits_for_the_head(void) {
    char m[16], p[TT_HTTP_PATH_MAX];
    CU_ASSERT_EQUAL(parse("", m, p), TT_HTTP_MORE);
    CU_ASSERT_EQUAL(parse("GET /metr", m, p), TT_HTTP_MORE);
    CU_ASSERT_EQUAL(parse("GET /metrics HTTP/1.1\r\n", m, p), TT_HTTP_MORE);
    CU_ASSERT_EQUAL(parse("GET /metrics HTTP/1.1\r\nHost: x\r\n", m, p), TT_HTTP_MORE);
}

static void http_parse_refuses_garbage(void) {
    char m[16], p[TT_HTTP_PATH_MAX];
    static const char *const bad[] = {
        "\r\n\r\n",
        "get /x HTTP/1.1\r\n",       /* lower case method */
        "GET x HTTP/1.1\r\n",        /* no leading slash */
        "GET /x HTTP/2.0\r\n",       /* not 1.x */
        "GET /x HTTP/1.1 extra\r\n", /* trailing junk */
        "GET  /x HTTP/1.1\r\n",      /* empty target */
        "GET /a\tb HTTP/1.1\r\n",    /* control character */
        "GETTINGVERYLONGMETHOD / HTTP/1.1\r\n",
        "\x16\x03\x01\x02\x05\x01\n", /* a TLS hello */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CU_ASSERT_EQUAL(parse(bad[i], m, p), TT_HTTP_BAD);
}

static void http_parse_limits(void) {
    char m[16], p[TT_HTTP_PATH_MAX];
    char *big = malloc(TT_HTTP_HEAD_MAX + 64);
    CU_ASSERT_PTR_NOT_NULL_FATAL(big);
    /* a path longer than the limit */
    strcpy(big, "GET /");
    memset(big + 5, 'a', TT_HTTP_PATH_MAX);
    strcpy(big + 5 + TT_HTTP_PATH_MAX, " HTTP/1.1\r\n\r\n");
    CU_ASSERT_EQUAL(parse(big, m, p), TT_HTTP_TOO_LONG);
    /* a head that never ends */
    strcpy(big, "GET / HTTP/1.1\r\n");
    memset(big + 16, 'h', TT_HTTP_HEAD_MAX);
    big[16 + TT_HTTP_HEAD_MAX] = '\0';
    CU_ASSERT_EQUAL(tt_http_parse(big, TT_HTTP_HEAD_MAX, m, 16, p, sizeof(p)), TT_HTTP_TOO_LONG);
    /* a first line that never ends */
    memset(big, 'G', TT_HTTP_HEAD_MAX);
    CU_ASSERT_EQUAL(tt_http_parse(big, TT_HTTP_HEAD_MAX, m, 16, p, sizeof(p)), TT_HTTP_TOO_LONG);
    free(big);
}

static void http_reply_grows(void) {
    tt_http_reply_t r = {.status = 200};
    for (int i = 0; i < 2000; i++)
        tt_http_printf(&r, "line %d of a long body\n", i);
    CU_ASSERT_EQUAL(r.oom, 0);
    CU_ASSERT(r.len > 40000 && strlen(r.body) == r.len);
    CU_ASSERT(strncmp(r.body, "line 0 of", 9) == 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.body, "line 1999 of a long body\n"));
    free(r.body);
}

static void http_label_escapes(void) {
    char buf[16];
    CU_ASSERT_STRING_EQUAL(tt_http_label("job-1", buf, sizeof(buf)), "job-1");
    CU_ASSERT_STRING_EQUAL(tt_http_label("a\"b\\c\nd", buf, sizeof(buf)), "a\\\"b\\\\c\\nd");
    CU_ASSERT_STRING_EQUAL(tt_http_label("0123456789abcdefgh", buf, sizeof(buf)),
                           "0123456789abc"); /* cut to fit, never a half escape */
    CU_ASSERT_STRING_EQUAL(tt_http_label(NULL, buf, sizeof(buf)), "");
}

static void http_job_gauges_table(void) {
    static const char *const gauges[][2] = {{"g_a", "first"}, {"g_b", "second"}};
    const char *jobs[] = {"j1", "q\"x"};
    double v[] = {1, 2, 3.5, -1}; /* job-major: j1 {1, 2}, q"x {3.5, -1} */
    tt_http_reply_t r = {0};
    tt_http_job_gauges(&r, gauges, 2, jobs, 2, v);
    CU_ASSERT_FATAL(!r.oom && r.body != NULL);
    CU_ASSERT_STRING_EQUAL(r.body, "# HELP g_a first\n# TYPE g_a gauge\n"
                                   "g_a{job=\"j1\"} 1\ng_a{job=\"q\\\"x\"} 3.5\n"
                                   "# HELP g_b second\n# TYPE g_b gauge\n"
                                   "g_b{job=\"j1\"} 2\ng_b{job=\"q\\\"x\"} -1\n");
    free(r.body);
    tt_http_reply_t e = {0}; /* no jobs: the HELP/TYPE lines only */
    tt_http_job_gauges(&e, gauges, 1, jobs, 0, v);
    CU_ASSERT_STRING_EQUAL(e.body, "# HELP g_a first\n# TYPE g_a gauge\n");
    free(e.body);
}

static void http_num_shortest(void) {
    char b[TT_HTTP_NUM_MAX];
    CU_ASSERT_STRING_EQUAL(tt_http_num(0.035, b), "0.035"); /* %.17g: 0.035000000000000003 */
    CU_ASSERT_STRING_EQUAL(tt_http_num(0.0404, b), "0.0404");
    CU_ASSERT_STRING_EQUAL(tt_http_num(-1, b), "-1");
    CU_ASSERT_STRING_EQUAL(tt_http_num(0, b), "0");
    CU_ASSERT_STRING_EQUAL(tt_http_num(1796445056.73, b), "1796445056.73");
    CU_ASSERT_STRING_EQUAL(tt_http_num(1e300, b), "1e+300");
    CU_ASSERT_STRING_EQUAL(tt_http_num(NAN, b), "NaN");
    CU_ASSERT_STRING_EQUAL(tt_http_num(-INFINITY, b), "-Inf");
    CU_ASSERT_STRING_EQUAL(tt_http_num(INFINITY, b), "+Inf");
    double hard[] = {0.1 + 0.2, 1.0 / 3.0, 5e-324, 1.7976931348623157e308, 123456789012345678.0};
    for (size_t i = 0; i < sizeof(hard) / sizeof(hard[0]); i++)
        CU_ASSERT_EQUAL(strtod(tt_http_num(hard[i], b), NULL), hard[i]); /* reads back exactly */
    CU_ASSERT_STRING_EQUAL(tt_http_num(0.1 + 0.2, b), "0.30000000000000004");
}

static void http_common_paths(void) {
    tt_http_reply_t r = {.status = 200};
    CU_ASSERT_EQUAL(tt_http_common("/healthz", 0, &r), 1);
    CU_ASSERT(r.status == 200 && strcmp(r.body, "ok\n") == 0);
    free(r.body);
    r = (tt_http_reply_t){.status = 200};
    CU_ASSERT_EQUAL(tt_http_common("/readyz", 0, &r), 1);
    CU_ASSERT(r.status == 503 && strcmp(r.body, "stopping\n") == 0);
    free(r.body);
    r = (tt_http_reply_t){.status = 200};
    CU_ASSERT_EQUAL(tt_http_common("/readyz", 1, &r), 1);
    CU_ASSERT(r.status == 200 && strcmp(r.body, "ready\n") == 0);
    free(r.body);
    r = (tt_http_reply_t){.status = 200};
    CU_ASSERT_EQUAL(tt_http_common("/metricsx", 1, &r), 1);
    CU_ASSERT_EQUAL(r.status, 404);
    free(r.body);
    r = (tt_http_reply_t){.status = 200};
    CU_ASSERT_EQUAL(tt_http_common("/metrics", 1, &r), 0);
    CU_ASSERT(r.status == 200 && r.len == 0 && strstr(r.content_type, "version=0.0.4") != NULL);
}

static const tt_cunit_test_t tests[] = {
    {"http_parse_requests", http_parse_requests},
    {"http_parse_waits_for_the_head", http_parse_waits_for_the_head},
    {"http_parse_refuses_garbage", http_parse_refuses_garbage},
    {"http_parse_limits", http_parse_limits},
    {"http_reply_grows", http_reply_grows},
    {"http_label_escapes", http_label_escapes},
    {"http_job_gauges_table", http_job_gauges_table},
    {"http_num_shortest", http_num_shortest},
    {"http_common_paths", http_common_paths},
    {NULL, NULL},
};

TT_CUNIT_MAIN("http", tests)

/* Unit tests of tt_log: a message longer than the formatting buffer reaches
 * the sink and the log file whole (a flight recorder's dump ends with the
 * records that matter), with the usual line head and no trailing newline
 * of its own. */
#include "tt_cunit.h"
#include "tt_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    char *line;
    int level;
    int calls;
} capture_t;

static void capture(void *ctx, int level, const char *line) {
    capture_t *c = ctx;
    free(c->line);
    c->line = strdup(line);
    c->level = level;
    c->calls++;
}

static int ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && strcmp(s + n - k, tail) == 0;
}

/* A text of n characters: "#0 #1 #2 ... " cut to n, ending in "END". */
static char *long_text(size_t n) {
    char *t = malloc(n + 1);
    size_t used = 0;
    for (int i = 0; used + 16 < n; i++)
        used += (size_t)snprintf(t + used, n + 1 - used, "#%d ", i);
    memset(t + used, '.', n - used - 3);
    memcpy(t + n - 3, "END", 4);
    return t;
}

static void log_long_message_to_sink(void) {
    capture_t c = {NULL, -1, 0};
    tt_log_set_identity("worker", "w-long");
    tt_log_set_sink(capture, &c);
    char *text = long_text(20000);
    TT_WARN("coll", "flight recorder: %s", text);
    tt_log_set_sink(NULL, NULL);
    CU_ASSERT_FATAL(c.calls == 1 && c.line != NULL);
    CU_ASSERT(c.level == TT_LOG_WARN);
    CU_ASSERT(strstr(c.line, " WARN worker[w-long] gen=") != NULL);
    const char *msg = strstr(c.line, "flight recorder: ");
    CU_ASSERT_FATAL(msg != NULL);
    CU_ASSERT(strcmp(msg + strlen("flight recorder: "), text) == 0);
    /* a short one still goes the stack way, unchanged */
    tt_log_set_sink(capture, &c);
    TT_ERROR("coll", "short %d", 7);
    tt_log_set_sink(NULL, NULL);
    CU_ASSERT(c.calls == 2 && c.level == TT_LOG_ERROR);
    CU_ASSERT(ends_with(c.line, " short 7"));
    /* a multi-line text (a dump) ends the line without an empty one after */
    tt_log_set_sink(capture, &c);
    TT_WARN("coll", "dump:\n  #1\n  #2\n");
    tt_log_set_sink(NULL, NULL);
    CU_ASSERT(ends_with(c.line, " dump:\n  #1\n  #2"));
    free(c.line);
    free(text);
}

static void log_long_message_to_file(void) {
    char path[] = "/tmp/tt_log_testXXXXXX";
    int fd = mkstemp(path);
    CU_ASSERT_FATAL(fd >= 0);
    close(fd);
    CU_ASSERT_FATAL(tt_log_set_file(path) == 0);
    char *text = long_text(5000);
    TT_WARN("coll", "%s", text);
    tt_log_set_file(NULL);
    FILE *f = fopen(path, "r");
    CU_ASSERT_FATAL(f != NULL);
    char *buf = calloc(1, 8192);
    size_t n = fread(buf, 1, 8191, f);
    fclose(f);
    unlink(path);
    CU_ASSERT(n > 5000);
    CU_ASSERT(strchr(buf, '\n') == buf + n - 1); /* one line */
    buf[n - 1] = '\0';
    CU_ASSERT(n - 1 >= 5000 && strcmp(buf + n - 1 - 5000, text) == 0);
    free(buf);
    free(text);
}

static const tt_cunit_test_t tests[] = {
    {"log_long_message_to_sink", log_long_message_to_sink},
    {"log_long_message_to_file", log_long_message_to_file},
    {NULL, NULL},
};

TT_CUNIT_MAIN("log", tests)

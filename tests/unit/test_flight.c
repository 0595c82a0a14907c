/* Unit tests of tt_flight: records, wrap-around keeps the newest N, and the
 * dump text shows them oldest first with states and statuses, the newest
 * N of them when asked. */
#include "tt_collseq.h"
#include "tt_cunit.h"
#include "tt_flight.h"
#include "tt_status.h"

#include <stdlib.h>
#include <string.h>

static tt_flight_rec_t rec(uint64_t seq) {
    tt_flight_rec_t r;
    memset(&r, 0, sizeof(r));
    r.generation = 3;
    r.seq = seq;
    r.op = TT_COLL_ALLREDUCE;
    r.dtype = TT_DT_FLOAT32;
    r.redop = TT_RED_SUM;
    r.bytes = seq * 4;
    r.peer = 1;
    r.t_queued_ns = seq * 1000000;
    return r;
}

static void flight_records_lifecycle(void) {
    tt_flight_t *f = NULL;
    CU_ASSERT_FATAL(tt_flight_create(&f, 4) == TT_OK);
    tt_flight_rec_t r = rec(1), out[4];
    uint64_t id = tt_flight_begin(f, &r);
    CU_ASSERT(id == 0);
    CU_ASSERT(tt_flight_snapshot(f, out, 4) == 1);
    CU_ASSERT(out[0].state == TT_FLIGHT_QUEUED);
    tt_flight_started(f, id, 1500000);
    tt_flight_finish(f, id, 4000000, TT_ETIMEDOUT);
    CU_ASSERT(tt_flight_snapshot(f, out, 4) == 1);
    CU_ASSERT(out[0].state == TT_FLIGHT_FINISHED && out[0].status == TT_ETIMEDOUT);
    CU_ASSERT(out[0].t_started_ns == 1500000 && out[0].t_finished_ns == 4000000);
    tt_flight_destroy(&f);
    CU_ASSERT(f == NULL);
    tt_flight_destroy(&f);
}

static void flight_wraps_keeping_newest(void) {
    tt_flight_t *f = NULL;
    CU_ASSERT_FATAL(tt_flight_create(&f, 4) == TT_OK);
    uint64_t ids[10];
    for (uint64_t s = 1; s <= 10; s++) {
        tt_flight_rec_t r = rec(s);
        ids[s - 1] = tt_flight_begin(f, &r);
    }
    tt_flight_finish(f, ids[0], 99, TT_OK); /* overwritten: ignored */
    tt_flight_rec_t out[8];
    size_t n = tt_flight_snapshot(f, out, 8);
    CU_ASSERT_FATAL(n == 4);
    for (size_t i = 0; i < n; i++) {
        CU_ASSERT(out[i].seq == 7 + i);
        CU_ASSERT(out[i].state == TT_FLIGHT_QUEUED);
    }
    CU_ASSERT(tt_flight_snapshot(f, out, 2) == 2);
    CU_ASSERT(out[0].seq == 9 && out[1].seq == 10);
    tt_flight_destroy(&f);
}

static void flight_dump_text(void) {
    tt_flight_t *f = NULL;
    CU_ASSERT_FATAL(tt_flight_create(&f, 2) == TT_OK);
    for (uint64_t s = 1; s <= 3; s++) {
        tt_flight_rec_t r = rec(s);
        uint64_t id = tt_flight_begin(f, &r);
        if (s == 2)
            tt_flight_finish(f, id, s * 1000000 + 2500000, TT_EDESYNC);
        if (s == 3)
            tt_flight_started(f, id, s * 1000000);
    }
    char *text = tt_flight_dump(f, "rank 1", 8000000, 0);
    CU_ASSERT_FATAL(text != NULL);
    CU_ASSERT(strstr(text, "flight recorder of rank 1: 2 record(s)") != NULL);
    const char *a = strstr(text, "#2 gen=3 allreduce float32/sum bytes=8 peer=1 finished");
    const char *b = strstr(text, "#3 gen=3 allreduce");
    CU_ASSERT(a != NULL && b != NULL && a < b);
    CU_ASSERT(strstr(text, "took=2.500ms status=EDESYNC") != NULL);
    CU_ASSERT(strstr(text, "running_for=5.000ms status=-") != NULL);
    CU_ASSERT(strstr(text, "#1 ") == NULL);
    free(text);
    tt_flight_destroy(&f);
}

/* A failure logs only the newest records; the first line says how many
 * there were, so a reader knows the older ones exist. */
static void flight_dump_newest(void) {
    tt_flight_t *f = NULL;
    CU_ASSERT_FATAL(tt_flight_create(&f, 8) == TT_OK);
    for (uint64_t s = 1; s <= 10; s++) {
        tt_flight_rec_t r = rec(s);
        tt_flight_finish(f, tt_flight_begin(f, &r), s * 1000000 + 1000, TT_OK);
    }
    char *text = tt_flight_dump(f, "this process (API)", 20000000, 3);
    CU_ASSERT_FATAL(text != NULL);
    CU_ASSERT(strstr(text, "flight recorder of this process (API): newest 3 of 8 record(s)\n") ==
              text);
    CU_ASSERT(strstr(text, "#7 ") == NULL);
    const char *a = strstr(text, "#8 "), *b = strstr(text, "#9 "), *c = strstr(text, "#10 ");
    CU_ASSERT(a != NULL && b != NULL && c != NULL && a < b && b < c);
    free(text);
    /* a limit above what is stored shows all, with no "newest" */
    text = tt_flight_dump(f, NULL, 20000000, 100);
    CU_ASSERT_FATAL(text != NULL);
    CU_ASSERT(strstr(text, "flight recorder: 8 record(s)\n") == text);
    CU_ASSERT(strstr(text, "#3 ") != NULL && strstr(text, "#2 ") == NULL);
    free(text);
    tt_flight_destroy(&f);
}

static const tt_cunit_test_t tests[] = {
    {"flight_records_lifecycle", flight_records_lifecycle},
    {"flight_wraps_keeping_newest", flight_wraps_keeping_newest},
    {"flight_dump_text", flight_dump_text},
    {"flight_dump_newest", flight_dump_newest},
    {NULL, NULL},
};

TT_CUNIT_MAIN("flight", tests)

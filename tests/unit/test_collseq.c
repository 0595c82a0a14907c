/* Unit tests of tt_collseq: header round trip and rejection, and the exact
 * desync sentences. */
#include "tt_collseq.h"
#include "tt_cunit.h"
#include "tt_status.h"

#include <string.h>

static tt_collseq_hdr_t sample(void) {
    tt_collseq_hdr_t h;
    memset(&h, 0, sizeof(h));
    h.kind = TT_COLLSEQ_DATA;
    h.src = 2;
    h.aux = -1;
    h.status = TT_EDESYNC;
    h.generation = 0x0102030405060708ULL;
    h.seq = 812;
    h.unit = 77;
    h.fp = (tt_coll_fp_t){TT_COLL_ALLREDUCE, TT_DT_FLOAT32, TT_RED_SUM, -1, 269322};
    h.job = tt_collseq_job_tag("mnist");
    return h;
}

static void collseq_header_round_trip(void) {
    uint8_t buf[TT_COLLSEQ_HDR_SIZE];
    tt_collseq_hdr_t h = sample(), back;
    tt_collseq_encode(&h, buf);
    CU_ASSERT(buf[0] == 'T' && buf[3] == 'G'); /* little-endian magic */
    CU_ASSERT_EQUAL(tt_collseq_decode(buf, sizeof(buf), &back, NULL, 0), 0);
    CU_ASSERT(back.kind == h.kind && back.src == 2 && back.aux == -1);
    CU_ASSERT(back.status == TT_EDESYNC && back.generation == h.generation);
    CU_ASSERT(back.seq == 812 && back.unit == 77 && back.fp.count == 269322);
    CU_ASSERT(back.fp.op == TT_COLL_ALLREDUCE && back.fp.root == -1);
    CU_ASSERT(back.job == h.job);
}

/* Jobs are told apart by their tag; the empty id is tag 0. */
static void collseq_job_tags_differ(void) {
    CU_ASSERT_EQUAL(tt_collseq_job_tag(NULL), 0);
    CU_ASSERT_EQUAL(tt_collseq_job_tag(""), 0);
    CU_ASSERT_EQUAL(tt_collseq_job_tag("launch"), tt_collseq_job_tag("launch"));
    CU_ASSERT_NOT_EQUAL(tt_collseq_job_tag("launch"), tt_collseq_job_tag("launcH"));
    CU_ASSERT_NOT_EQUAL(tt_collseq_job_tag("a"), 0);
}

static void collseq_decode_rejects(void) {
    uint8_t buf[TT_COLLSEQ_HDR_SIZE];
    tt_collseq_hdr_t h = sample(), back;
    char err[128];
    tt_collseq_encode(&h, buf);
    CU_ASSERT_EQUAL(tt_collseq_decode(buf, sizeof(buf) - 1, &back, err, sizeof(err)), TT_EPROTO);
    CU_ASSERT(strstr(err, "length") != NULL);
    buf[4] = 9;
    CU_ASSERT_EQUAL(tt_collseq_decode(buf, sizeof(buf), &back, err, sizeof(err)), TT_EVERSION);
    tt_collseq_encode(&h, buf);
    buf[0] ^= 1;
    CU_ASSERT_EQUAL(tt_collseq_decode(buf, sizeof(buf), &back, err, sizeof(err)), TT_EPROTO);
    tt_collseq_encode(&h, buf);
    buf[6] = 9; /* unknown op */
    CU_ASSERT_EQUAL(tt_collseq_decode(buf, sizeof(buf), &back, err, sizeof(err)), TT_EPROTO);
}

static void collseq_check_exact_text(void) {
    tt_collseq_hdr_t got = sample();
    tt_coll_fp_t want = {TT_COLL_BROADCAST, TT_DT_FLOAT32, TT_RED_NONE, 0, 269322};
    char err[256];
    CU_ASSERT_EQUAL(tt_collseq_check(&got, 1, 812, &want, err, sizeof(err)), TT_EDESYNC);
    CU_ASSERT_STRING_EQUAL(err, "rank 2 sent allreduce #812 (float32 x 269322) but rank 1 "
                                "expected broadcast #812 (float32 x 269322, root 0)");
}

static void collseq_check_seq_and_fields(void) {
    tt_collseq_hdr_t got = sample();
    tt_coll_fp_t want = got.fp;
    char err[256];
    CU_ASSERT_EQUAL(tt_collseq_check(&got, 1, 812, &want, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(tt_collseq_check(&got, 3, 813, &want, err, sizeof(err)), TT_EDESYNC);
    CU_ASSERT_STRING_EQUAL(err, "rank 2 sent allreduce #812 (float32 x 269322) but rank 3 "
                                "expected allreduce #813 (float32 x 269322)");
    want.redop = TT_RED_MAX;
    CU_ASSERT_EQUAL(tt_collseq_check(&got, 0, 812, &want, err, sizeof(err)), TT_EDESYNC);
    CU_ASSERT(strstr(err, "expected allreduce #812 (float32 x 269322, max)") != NULL);
    want = got.fp;
    want.dtype = TT_DT_INT64;
    CU_ASSERT_EQUAL(tt_collseq_check(&got, 0, 812, &want, err, sizeof(err)), TT_EDESYNC);
    want = got.fp;
    want.count = 269321;
    CU_ASSERT_EQUAL(tt_collseq_check(&got, 0, 812, &want, err, sizeof(err)), TT_EDESYNC);
    want = (tt_coll_fp_t){TT_COLL_BARRIER, 0, TT_RED_NONE, -1, 0};
    CU_ASSERT_EQUAL(tt_collseq_check(&got, 0, 812, &want, err, sizeof(err)), TT_EDESYNC);
    CU_ASSERT(strstr(err, "expected barrier #812") != NULL);
}

static void collseq_seq_and_names(void) {
    uint64_t c = 0;
    CU_ASSERT(tt_collseq_next(&c) == 1);
    CU_ASSERT(tt_collseq_next(&c) == 2);
    CU_ASSERT(tt_collseq_dtype_size(TT_DT_FLOAT64) == 8);
    CU_ASSERT(tt_collseq_dtype_size(TT_DT_FLOAT32) == 4);
    CU_ASSERT(tt_collseq_dtype_size(42) == 0);
    CU_ASSERT_STRING_EQUAL(tt_collseq_dtype_name(TT_DT_INT64), "int64");
    CU_ASSERT_STRING_EQUAL(tt_collseq_op_name(42), "?");
}

static const tt_cunit_test_t tests[] = {
    {"collseq_header_round_trip", collseq_header_round_trip},
    {"collseq_job_tags_differ", collseq_job_tags_differ},
    {"collseq_decode_rejects", collseq_decode_rejects},
    {"collseq_check_exact_text", collseq_check_exact_text},
    {"collseq_check_seq_and_fields", collseq_check_seq_and_fields},
    {"collseq_seq_and_names", collseq_seq_and_names},
    {NULL, NULL},
};

TT_CUNIT_MAIN("collseq", tests)

/* Unit tests of tt_status: every code has a distinct name and a sentence. */
#include "tt_cunit.h"
#include "tt_status.h"

#include <string.h>

static void status_names_round_trip(void) {
    CU_ASSERT_STRING_EQUAL(tt_status_name(TT_OK), "OK");
    CU_ASSERT_STRING_EQUAL(tt_status_name(TT_ESTALE), "ESTALE");
    CU_ASSERT_STRING_EQUAL(tt_strerror(TT_ESTALE), "stale generation");
    CU_ASSERT_STRING_EQUAL(tt_status_name(12345), "UNKNOWN");
    CU_ASSERT_EQUAL(TT_EJOBDONE, -55);
    CU_ASSERT_STRING_EQUAL(tt_status_name(TT_EJOBDONE), "EJOBDONE");
    CU_ASSERT_STRING_EQUAL(tt_strerror(TT_EJOBDONE), "job already finished");
}

static void status_codes_negative_and_unique(void) {
    static const int codes[] = {
#define X(name, val, msg) val,
        TT_STATUS_MAP(X)
#undef X
    };
    size_t n = sizeof(codes) / sizeof(codes[0]);
    for (size_t i = 0; i < n; i++) {
        CU_ASSERT(codes[i] <= 0);
        for (size_t j = i + 1; j < n; j++)
            CU_ASSERT(codes[i] != codes[j]);
    }
}

static const tt_cunit_test_t tests[] = {
    {"status_names_round_trip", status_names_round_trip},
    {"status_codes_negative_and_unique", status_codes_negative_and_unique},
    {NULL, NULL},
};

TT_CUNIT_MAIN("status", tests)

/* tt_cunit: the shared main() of every CUnit test program. A test file
 * defines its tests and one table, then says TT_CUNIT_MAIN("mod", tests).
 * The run fails (exit 1) when any assertion or test failed, and CUnit's
 * summary table is printed either way. */
#ifndef TT_CUNIT_H
#define TT_CUNIT_H

#include <CUnit/Basic.h>
#include <stdio.h>

typedef struct {
    const char *name;
    void (*fn)(void);
} tt_cunit_test_t;

static inline int tt_cunit_run(const char *suite_name, const tt_cunit_test_t *tests) {
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite suite = CU_add_suite(suite_name, NULL, NULL);
    if (suite == NULL)
        return 2;
    for (const tt_cunit_test_t *t = tests; t->name != NULL; t++) {
        if (CU_add_test(suite, t->name, t->fn) == NULL)
            return 2;
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    return failed == 0 ? 0 : 1;
}

#define TT_CUNIT_MAIN(suite, table)                                                                \
    int main(void) {                                                                               \
        return tt_cunit_run((suite), (table));                                                     \
    }

#endif

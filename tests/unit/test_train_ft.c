/* Unit tests of tt_train_ft's pure parts: the recovery options from the
 * environment and which step statuses the loop survives. The recovery
 * itself needs a coordinator and real ranks: tests/integration/
 * test_failover.py kills workers for real. */
#include "tt_cunit.h"
#include "tt_status.h"
#include "tt_train_ft.h"

#include <stdlib.h>
#include <string.h>

static void clear_env(void) {
    unsetenv("TETHER_REGROUP_DEADLINE_MS");
    unsetenv("TETHER_MAX_REGROUPS");
}

static void train_ft_opts_defaults(void) {
    clear_env();
    tt_train_ft_opts_t o;
    char err[128] = "";
    CU_ASSERT_EQUAL(tt_train_ft_opts_from_env(&o, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(o.regroup_deadline_ms, 60000);
    CU_ASSERT_EQUAL(o.max_regroups, 100);
    CU_ASSERT_PTR_NULL(o.leaving); /* a worker never leaves unless told to */
}

static void train_ft_opts_env_overrides(void) {
    clear_env();
    setenv("TETHER_REGROUP_DEADLINE_MS", "2500", 1);
    setenv("TETHER_MAX_REGROUPS", "0", 1);
    tt_train_ft_opts_t o;
    char err[128] = "";
    CU_ASSERT_EQUAL(tt_train_ft_opts_from_env(&o, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(o.regroup_deadline_ms, 2500);
    CU_ASSERT_EQUAL(o.max_regroups, 0);
    clear_env();
}

static void train_ft_opts_env_rejects_bad_values(void) {
    static const char *bad[] = {"abc", "0", "-5", "12x", "99999999999"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        clear_env();
        setenv("TETHER_REGROUP_DEADLINE_MS", bad[i], 1);
        tt_train_ft_opts_t o;
        char err[128] = "";
        CU_ASSERT_EQUAL(tt_train_ft_opts_from_env(&o, err, sizeof(err)), TT_EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, "TETHER_REGROUP_DEADLINE_MS"));
        CU_ASSERT_PTR_NOT_NULL(strstr(err, bad[i]));
    }
    clear_env();
}

static void train_ft_recoverable_statuses(void) {
    CU_ASSERT_TRUE(tt_train_ft_recoverable(TT_EMEMBERSHIP));
    CU_ASSERT_TRUE(tt_train_ft_recoverable(TT_ETIMEDOUT));
    CU_ASSERT_TRUE(tt_train_ft_recoverable(TT_EUNREACHABLE));
    CU_ASSERT_TRUE(tt_train_ft_recoverable(TT_EFENCED));
    CU_ASSERT_FALSE(tt_train_ft_recoverable(TT_OK));
    CU_ASSERT_FALSE(tt_train_ft_recoverable(TT_EJOBFAILED));
    CU_ASSERT_FALSE(tt_train_ft_recoverable(TT_EDESYNC));
    CU_ASSERT_FALSE(tt_train_ft_recoverable(TT_EDIVERGED));
    CU_ASSERT_FALSE(tt_train_ft_recoverable(TT_ECORRUPT));
}

static const tt_cunit_test_t tests[] = {
    {"train_ft_opts_defaults", train_ft_opts_defaults},
    {"train_ft_opts_env_overrides", train_ft_opts_env_overrides},
    {"train_ft_opts_env_rejects_bad_values", train_ft_opts_env_rejects_bad_values},
    {"train_ft_recoverable_statuses", train_ft_recoverable_statuses},
    {NULL, NULL},
};

TT_CUNIT_MAIN("train_ft", tests)

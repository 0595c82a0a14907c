/* Unit tests of tt_train_tether's pure rule: when the gradient buckets of
 * a rank should overlap backward (a CPU to run the all-reduce on beside
 * the compute threads, or backward on a GPU), and when one bucket sent
 * after backward costs less. The rest of the module joins a real job and
 * is exercised by the integration tests (test_train.py, test_launch.py). */
#include "tt_cunit.h"
#include "tt_train_tether.h"

static void train_tether_overlap_needs_a_spare_cpu(void) {
    CU_ASSERT_FALSE(tt_train_tether_overlap_pays(1, 1, 0)); /* a worker bound to one core */
    CU_ASSERT_FALSE(tt_train_tether_overlap_pays(4, 4, 0)); /* every CPU computes */
    CU_ASSERT_FALSE(tt_train_tether_overlap_pays(2, 4, 0)); /* oversubscribed */
    CU_ASSERT_TRUE(tt_train_tether_overlap_pays(2, 1, 0));
    CU_ASSERT_TRUE(tt_train_tether_overlap_pays(16, 1, 0));
}

static void train_tether_overlap_on_a_gpu(void) {
    CU_ASSERT_TRUE(tt_train_tether_overlap_pays(1, 1, 1)); /* the CPU waits on the device */
}

static const tt_cunit_test_t tests[] = {
    {"train_tether_overlap_needs_a_spare_cpu", train_tether_overlap_needs_a_spare_cpu},
    {"train_tether_overlap_on_a_gpu", train_tether_overlap_on_a_gpu},
    {NULL, NULL},
};

TT_CUNIT_MAIN("train_tether", tests)

/* Unit tests of tt_train_pick_device: which CUDA device a worker trains
 * on (and its NCCL communicator uses). Workers of one host get one device
 * each by local rank (the nccl backend refuses a rank the host has no
 * device for), TETHER_CUDA_DEVICE and an explicit number win,
 * numbers the process cannot see and words that are not numbers are
 * refused with a sentence. Pure: no GPU needed. */
#include "tt_cunit.h"
#include "tt_status.h"
#include "tt_train_dev.h"

#include <string.h>

static int pick_for(int exclusive, const char *want, const char *tdev, const char *lrank, int ndev,
                    int *d, char *err) {
    *d = -7;
    return tt_train_pick_device(want, tdev, lrank, ndev, exclusive, d, err, 256);
}

/* The ring and ps backends: devices may be shared. */
static int pick(const char *want, const char *tdev, const char *lrank, int ndev, int *d,
                char *err) {
    return pick_for(0, want, tdev, lrank, ndev, d, err);
}

static void train_dev_auto_spreads_local_ranks(void) {
    char err[256] = "";
    int d;
    CU_ASSERT_EQUAL(pick("auto", NULL, NULL, 8, &d, err), TT_OK);
    CU_ASSERT_EQUAL(d, 0);
    CU_ASSERT_EQUAL(pick("auto", NULL, "5", 8, &d, err), TT_OK);
    CU_ASSERT_EQUAL(d, 5);
    CU_ASSERT_EQUAL(pick(NULL, NULL, "5", 8, &d, err), TT_OK);
    CU_ASSERT_EQUAL(d, 5);
    CU_ASSERT_EQUAL(pick("", "", "", 8, &d, err), TT_OK);
    CU_ASSERT_EQUAL(d, 0);
    /* more workers than devices: they share, round robin */
    CU_ASSERT_EQUAL(pick("auto", NULL, "9", 4, &d, err), TT_OK);
    CU_ASSERT_EQUAL(d, 1);
    CU_ASSERT_EQUAL(pick("auto", NULL, "1", 1, &d, err), TT_OK);
    CU_ASSERT_EQUAL(d, 0);
    /* no device seen: 0, and creating the model says why */
    CU_ASSERT_EQUAL(pick("auto", NULL, "3", 0, &d, err), TT_OK);
    CU_ASSERT_EQUAL(d, 0);
}

static void train_dev_explicit_choices_win(void) {
    char err[256] = "";
    int d;
    CU_ASSERT_EQUAL(pick("auto", "2", "5", 8, &d, err), TT_OK);
    CU_ASSERT_EQUAL(d, 2);
    CU_ASSERT_EQUAL(pick("6", "2", "5", 8, &d, err), TT_OK);
    CU_ASSERT_EQUAL(d, 6);
    CU_ASSERT_EQUAL(pick("0", NULL, "5", 8, &d, err), TT_OK);
    CU_ASSERT_EQUAL(d, 0);
    CU_ASSERT_EQUAL(pick("3", NULL, NULL, 0, &d, err), TT_OK); /* unknown count */
    CU_ASSERT_EQUAL(d, 3);
}

static void train_dev_refuses_what_cannot_be(void) {
    char err[256] = "";
    int d;
    CU_ASSERT_EQUAL(pick("8", NULL, NULL, 8, &d, err), TT_ENODEV);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "CUDA device 8: this process sees 8 device(s)"));
    CU_ASSERT_EQUAL(d, -7); /* untouched */
    CU_ASSERT_EQUAL(pick("auto", "1", NULL, 1, &d, err), TT_ENODEV);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "CUDA device 1"));
    CU_ASSERT_EQUAL(pick("cuda:1", NULL, NULL, 8, &d, err), TT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "--cuda-device 'cuda:1'"));
    CU_ASSERT_EQUAL(pick("-1", NULL, NULL, 8, &d, err), TT_EINVAL);
    CU_ASSERT_EQUAL(pick("1024", NULL, NULL, 0, &d, err), TT_EINVAL);
    CU_ASSERT_EQUAL(pick("auto", "x", NULL, 8, &d, err), TT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "TETHER_CUDA_DEVICE='x'"));
    CU_ASSERT_EQUAL(pick("auto", NULL, "one", 8, &d, err), TT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "TETHER_LOCAL_RANK='one'"));
    CU_ASSERT_EQUAL(d, -7);
}

/* The nccl backend: a device per worker, so a local rank the host has no
 * device for is refused at start-up, with what to do instead; choices
 * the operator made (a number, TETHER_CUDA_DEVICE) are left to them. */
static void train_dev_nccl_wants_a_device_each(void) {
    char err[256] = "";
    int d;
    CU_ASSERT_EQUAL(pick_for(1, "auto", NULL, "3", 4, &d, err), TT_OK);
    CU_ASSERT_EQUAL(d, 3);
    CU_ASSERT_EQUAL(pick_for(1, "auto", NULL, "4", 4, &d, err), TT_EBUSY);
    CU_ASSERT_PTR_NOT_NULL(
        strstr(err, "local rank 4 on a host where this process sees 4 CUDA device(s)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "at most 4 workers on this host"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "--backend ring or ps"));
    CU_ASSERT_EQUAL(d, -7);
    CU_ASSERT_EQUAL(pick_for(1, NULL, NULL, "1", 1, &d, err), TT_EBUSY);
    /* not the modulo's doing: left to NCCL and the operator */
    CU_ASSERT_EQUAL(pick_for(1, "auto", "0", "1", 1, &d, err), TT_OK);
    CU_ASSERT_EQUAL(d, 0);
    CU_ASSERT_EQUAL(pick_for(1, "0", NULL, "1", 1, &d, err), TT_OK);
    CU_ASSERT_EQUAL(d, 0);
    /* no device seen, or no local rank: nothing to refuse here */
    CU_ASSERT_EQUAL(pick_for(1, "auto", NULL, "3", 0, &d, err), TT_OK);
    CU_ASSERT_EQUAL(pick_for(1, "auto", NULL, NULL, 2, &d, err), TT_OK);
    CU_ASSERT_EQUAL(d, 0);
    /* the same rank shares under ring and ps */
    CU_ASSERT_EQUAL(pick_for(0, "auto", NULL, "4", 4, &d, err), TT_OK);
    CU_ASSERT_EQUAL(d, 0);
}

static const tt_cunit_test_t tests[] = {
    {"train_dev_auto_spreads_local_ranks", train_dev_auto_spreads_local_ranks},
    {"train_dev_explicit_choices_win", train_dev_explicit_choices_win},
    {"train_dev_refuses_what_cannot_be", train_dev_refuses_what_cannot_be},
    {"train_dev_nccl_wants_a_device_each", train_dev_nccl_wants_a_device_each},
    {NULL, NULL},
};

TT_CUNIT_MAIN("train_dev", tests)

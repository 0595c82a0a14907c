/* GPU smoke test: the CUDA seam finds a device and a kernel computes the
 * right answer. Exits 77 (skipped) without CUDA support or without a GPU,
 * and says so. */
#include "tt_cuda.h"
#include "tt_status.h"

#include <stdio.h>

int main(void) {
    char err[256] = "";
    int n = 0;
    if (tt_cuda_device_count(&n, err, sizeof(err)) != TT_OK) {
        printf("SKIPPED: %s\n", err);
        return 77;
    }
    int rc = tt_cuda_selftest(1u << 20, err, sizeof(err));
    if (rc != TT_OK) {
        printf("FAILED: %s (%s)\n", err, tt_status_name(rc));
        return 1;
    }
    printf("PASSED: %d CUDA device(s); axpy on 1M floats correct\n", n);
    return 0;
}

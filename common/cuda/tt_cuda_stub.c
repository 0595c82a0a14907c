/* tt_cuda_stub: the CPU-only build's tt_cuda. Every entry point says that
 * this build has no CUDA, so callers fall back or skip cleanly. */
#include "tt_cuda.h"
#include "tt_status.h"

#include <stdio.h>

int tt_cuda_compiled(void) {
    return 0;
}

int tt_cuda_device_count(int *n, char *err, size_t errlen) {
    *n = 0;
    if (err != NULL && errlen > 0)
        snprintf(err, errlen,
                 "this build of tether has no CUDA support (TETHER_WITH_CUDA=OFF "
                 "or nvcc/NCCL not found)");
    return TT_ENODEV;
}

int tt_cuda_current_device(void) {
    return -1;
}

int tt_cuda_selftest(size_t n, char *err, size_t errlen) {
    (void)n;
    int count;
    return tt_cuda_device_count(&count, err, errlen);
}

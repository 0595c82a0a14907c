/* tt_cuda: the one seam between tether and the CUDA runtime. Builds with
 * CUDA compile common/cuda/tt_cuda.cu; builds without it compile
 * common/cuda/tt_cuda_stub.c, whose functions return TT_ENODEV, so a
 * CPU-only build links and runs. Thread safety: as the CUDA runtime. */
#ifndef TT_CUDA_H
#define TT_CUDA_H

#include <stddef.h>

/* 1 when this build has CUDA support compiled in. */
int tt_cuda_compiled(void);

/* Number of usable devices in *n. TT_ENODEV (with *n = 0) when CUDA is not
 * compiled in or no device/driver is present; `err` says which. */
int tt_cuda_device_count(int *n, char *err, size_t errlen);

/* The device current on the calling thread (cudaGetDevice); -1 without
 * CUDA, a driver or a device. */
int tt_cuda_current_device(void);

/* Runs a small kernel (y = a*x + y on `n` floats) on device 0 and checks
 * the result against the host. TT_OK, TT_ENODEV, TT_ECUDA or TT_ECORRUPT
 * (wrong result) with `err` filled. */
int tt_cuda_selftest(size_t n, char *err, size_t errlen);

#endif

/* tt_cuda: device discovery and a self-test kernel; the first GPU module,
 * which the CUDA trainer and NCCL backend build on. */
extern "C" {
#include "tt_cuda.h"
#include "tt_status.h"
}

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CU_ERR(err, errlen, ...)                                                                   \
    do {                                                                                           \
        if ((err) != NULL && (errlen) > 0)                                                         \
            snprintf((err), (errlen), __VA_ARGS__);                                                \
    } while (0)

__global__ static void axpy_kernel(float a, const float *x, float *y, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + y[i];
}

extern "C" int tt_cuda_compiled(void) {
    return 1;
}

extern "C" int tt_cuda_device_count(int *n, char *err, size_t errlen) {
    *n = 0;
    cudaError_t e = cudaGetDeviceCount(n);
    if (e != cudaSuccess || *n == 0) {
        CU_ERR(err, errlen, "no CUDA device: %s",
               e != cudaSuccess ? cudaGetErrorString(e) : "device count is 0");
        *n = 0;
        return TT_ENODEV;
    }
    return TT_OK;
}

extern "C" int tt_cuda_current_device(void) {
    int d = -1;
    if (cudaGetDevice(&d) != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky for the next caller */
        return -1;
    }
    return d;
}

static int run_axpy(float *hx, float *hy, size_t n, char *err, size_t errlen) {
    float *dx = NULL, *dy = NULL;
    size_t bytes = n * sizeof(float);
    cudaError_t e = cudaMalloc(&dx, bytes);
    if (e == cudaSuccess)
        e = cudaMalloc(&dy, bytes);
    if (e == cudaSuccess)
        e = cudaMemcpy(dx, hx, bytes, cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(dy, hy, bytes, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) {
        axpy_kernel<<<(unsigned)((n + 255) / 256), 256>>>(2.0f, dx, dy, n);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess)
        e = cudaMemcpy(hy, dy, bytes, cudaMemcpyDeviceToHost);
    cudaFree(dx);
    cudaFree(dy);
    if (e != cudaSuccess) {
        CU_ERR(err, errlen, "CUDA self-test: %s", cudaGetErrorString(e));
        return TT_ECUDA;
    }
    return TT_OK;
}

extern "C" int tt_cuda_selftest(size_t n, char *err, size_t errlen) {
    int count;
    int rc = tt_cuda_device_count(&count, err, errlen);
    if (rc != TT_OK)
        return rc;
    float *hx = (float *)malloc(n * sizeof(float)), *hy = (float *)malloc(n * sizeof(float));
    if (hx == NULL || hy == NULL) {
        free(hx);
        free(hy);
        return TT_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        hx[i] = (float)(i % 97);
        hy[i] = 1.0f;
    }
    rc = run_axpy(hx, hy, n, err, errlen);
    for (size_t i = 0; rc == TT_OK && i < n; i++) {
        if (hy[i] != 2.0f * (float)(i % 97) + 1.0f) {
            CU_ERR(err, errlen, "CUDA self-test: element %zu is %g", i, (double)hy[i]);
            rc = TT_ECORRUPT;
        }
    }
    free(hx);
    free(hy);
    return rc;
}

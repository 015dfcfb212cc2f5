/* blas.cu — cuBLAS wrapper for prefill: bf16 x bf16 -> fp32 GEMMs (tensor cores, fp32
 * accumulation); the experts' grouped GEMM is moe.cu's own kernel. Row-major Y[T, N] = X[T, K] W[N, K]^T
 * is column-major Y^T = W^T(as stored) X^T: cublas(op T, op N, m=N, n=T, k=K). Engine thread. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdlib.h>

#include "backend/cuda/cuda_ops.h"
#include "core/status.h"

struct ft_blas {
    cublasHandle_t h;
    cudaStream_t s;
};

static enum ft_status blas_err(cublasStatus_t st, const char *what) {
    return ft_fail(FT_ERR_CUDA, "cuBLAS %s failed: %s (%d)", what, cublasGetStatusString(st), (int)st);
}

extern "C" enum ft_status ft_blas_init(struct ft_blas **out, cudaStream_t s) {
    struct ft_blas *b = (struct ft_blas *)calloc(1, sizeof *b);
    if (!b) return ft_fail(FT_ERR_OOM, "cuBLAS: out of memory");
    cublasStatus_t st = cublasCreate(&b->h);
    if (st != CUBLAS_STATUS_SUCCESS) {
        free(b);
        return blas_err(st, "cublasCreate");
    }
    cublasSetStream(b->h, s);
    cublasSetMathMode(b->h, CUBLAS_DEFAULT_MATH);
    b->s = s;
    *out = b;
    return FT_OK;
}

extern "C" void ft_blas_free(struct ft_blas *b) {
    if (!b) return;
    if (b->h) cublasDestroy(b->h);
    free(b);
}

extern "C" enum ft_status ft_blas_gemm(struct ft_blas *b, float *y, int ldy, const uint16_t *x,
                                       const uint16_t *w, int T, int N, int K) {
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t st = cublasGemmEx(b->h, CUBLAS_OP_T, CUBLAS_OP_N, N, T, K, &one, w, CUDA_R_16BF,
                                     K, x, CUDA_R_16BF, K, &zero, y, CUDA_R_32F, ldy,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return st == CUBLAS_STATUS_SUCCESS ? FT_OK : blas_err(st, "GemmEx");
}

/* blas.cu — cuBLAS wrapper for prefill: bf16 x bf16 -> fp32 GEMMs (tensor cores, fp32
 * accumulation), plain and grouped (one group per expert). Row-major Y[T, N] = X[T, K] W[N, K]^T
 * is column-major Y^T = W^T(as stored) X^T: cublas(op T, op N, m=N, n=T, k=K). Engine thread. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_ops.h"
#include "core/status.h"

struct ft_blas {
    cublasHandle_t h;
    cudaStream_t s;
    void **d_ptrs;    /* device pointer arrays for grouped GEMMs: [3 * cap] */
    void **h_ptrs;    /* pinned host staging of the same */
    int cap;
    int grouped_ok;   /* 1 until cublasGemmGroupedBatchedEx refuses once */
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
    b->cap = 1024;
    b->grouped_ok = 1;
    if (cudaMalloc((void **)&b->d_ptrs, 3 * b->cap * sizeof(void *)) != cudaSuccess ||
        cudaMallocHost((void **)&b->h_ptrs, 3 * b->cap * sizeof(void *)) != cudaSuccess) {
        ft_blas_free(b);
        return ft_cuda_check("cuBLAS pointer arrays");
    }
    *out = b;
    return FT_OK;
}

extern "C" void ft_blas_free(struct ft_blas *b) {
    if (!b) return;
    if (b->h) cublasDestroy(b->h);
    cudaFree(b->d_ptrs);
    cudaFreeHost(b->h_ptrs);
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

extern "C" enum ft_status ft_blas_gemm_grouped(struct ft_blas *b, float *const *y,
                                               const uint16_t *const *x, const uint16_t *const *w,
                                               const int *m, int n_groups, int N, int K) {
    if (n_groups <= 0) return FT_OK;
    if (b->grouped_ok && n_groups <= b->cap) {
        /* wait for the previous grouped call's pointer upload before overwriting the staging */
        cudaStreamSynchronize(b->s);
        const void **A = (const void **)b->h_ptrs, **B = A + b->cap;
        void **C = b->h_ptrs + 2 * b->cap;
        enum { MAXG = 1024 };
        cublasOperation_t ta[MAXG], tb[MAXG];
        int mm[MAXG], nn[MAXG], kk[MAXG], lda[MAXG], ldb[MAXG], ldc[MAXG], gs[MAXG];
        float alpha[MAXG], beta[MAXG];
        for (int g = 0; g < n_groups; g++) {
            A[g] = w[g];
            B[g] = x[g];
            C[g] = y[g];
            ta[g] = CUBLAS_OP_T, tb[g] = CUBLAS_OP_N;
            mm[g] = N, nn[g] = m[g], kk[g] = K;
            lda[g] = K, ldb[g] = K, ldc[g] = N, gs[g] = 1;
            alpha[g] = 1.0f, beta[g] = 0.0f;
        }
        cudaMemcpyAsync(b->d_ptrs, b->h_ptrs, 3 * b->cap * sizeof(void *), cudaMemcpyHostToDevice, b->s);
        void **dA = b->d_ptrs, **dB = dA + b->cap, **dC = dA + 2 * b->cap;
        cublasStatus_t st = cublasGemmGroupedBatchedEx(
            b->h, ta, tb, mm, nn, kk, alpha, (const void *const *)dA, CUDA_R_16BF, lda,
            (const void *const *)dB, CUDA_R_16BF, ldb, beta, dC, CUDA_R_32F, ldc, n_groups, gs,
            CUBLAS_COMPUTE_32F);
        if (st == CUBLAS_STATUS_SUCCESS) return FT_OK;
        b->grouped_ok = 0; /* not supported here: fall back to one GEMM per group from now on */
    }
    for (int g = 0; g < n_groups; g++) {
        enum ft_status st = ft_blas_gemm(b, y[g], N, x[g], w[g], m[g], N, K);
        if (st != FT_OK) return st;
    }
    return FT_OK;
}

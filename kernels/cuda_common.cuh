/* kernels/cuda_common.cuh — helpers shared by the kernels/ CUDA sources only:
 * the launch error slot, row-major cuBLAS GEMM wrappers, grid sizing. */
#ifndef SP_KERNELS_CUDA_COMMON_CUH
#define SP_KERNELS_CUDA_COMMON_CUH

#include <cublas_v2.h>
#include <cuda_runtime.h>

extern "C" {
#include "kernels/kernels.h"
}

/* Records the first CUDA/cuBLAS error of a launcher on this thread. */
void kn_cuda_set_error(int rc, const char *what, const char *detail);
/* Checks cudaGetLastError() after a kernel launch. */
void kn_cuda_check_launch(const char *what);
/* The cached handle for stream, bound to it; NULL (error recorded) on failure. */
cublasHandle_t kn_cuda_handle(cudaStream_t stream);

/* Row-major C (M x N) = alpha op(A) op(B) + beta C, batched with strides. */
void kn_cuda_gemm(cudaStream_t stream, bool ta, bool tb, int M, int N, int K, float alpha,
		  const float *A, int lda, long long sa, const float *B, int ldb, long long sb,
		  float beta, float *C, int ldc, long long sc, int batch);

static inline unsigned kn_blocks(long n, int threads)
{
	long b = (n + threads - 1) / threads;
	return (unsigned)(b > 65535L * 32 ? 65535L * 32 : b);
}

#endif

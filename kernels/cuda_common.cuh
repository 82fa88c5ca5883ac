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

/* The bf16 CUDA kernels (cuda_bf16.cu, cuda_flash.cu): each fp32 launcher calls
 * its twin for KN_BF16. */
#define KN_CUDA_BF16_DECLARE_(name, args) \
	void kn_##name##_cuda_bf16(const struct args *a, cudaStream_t s);
KN_CUDA_BF16_DECLARE_(encoder_forward, kn_encoder_fwd_args)
KN_CUDA_BF16_DECLARE_(encoder_backward, kn_encoder_bwd_args)
KN_CUDA_BF16_DECLARE_(layernorm_forward, kn_layernorm_fwd_args)
KN_CUDA_BF16_DECLARE_(layernorm_backward, kn_layernorm_bwd_args)
KN_CUDA_BF16_DECLARE_(matmul_forward, kn_matmul_fwd_args)
KN_CUDA_BF16_DECLARE_(matmul_backward, kn_matmul_bwd_args)
KN_CUDA_BF16_DECLARE_(attention_forward, kn_attention_fwd_args)
KN_CUDA_BF16_DECLARE_(attention_backward, kn_attention_bwd_args)
KN_CUDA_BF16_DECLARE_(gelu_forward, kn_gelu_fwd_args)
KN_CUDA_BF16_DECLARE_(gelu_backward, kn_gelu_bwd_args)
KN_CUDA_BF16_DECLARE_(residual_forward, kn_residual_fwd_args)
KN_CUDA_BF16_DECLARE_(residual_backward, kn_residual_bwd_args)
KN_CUDA_BF16_DECLARE_(crossentropy_forward, kn_crossentropy_fwd_args)
KN_CUDA_BF16_DECLARE_(crossentropy_backward, kn_crossentropy_bwd_args)
KN_CUDA_BF16_DECLARE_(grad_accumulate, kn_grad_accumulate_args)
KN_CUDA_BF16_DECLARE_(grad_scale, kn_grad_scale_args)
#undef KN_CUDA_BF16_DECLARE_
/* Destroys the cached cuBLASLt handles and frees their workspaces. */
void kn_cuda_lt_release(void);

static inline unsigned kn_blocks(long n, int threads)
{
	long b = (n + threads - 1) / threads;
	return (unsigned)(b > 65535L * 32 ? 65535L * 32 : b);
}

#endif

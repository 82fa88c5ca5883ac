/* kernels/internal.h — helpers shared by the kernels/ sources only.
 *
 * kn_gemm_f32: row-major C = alpha * op(A) @ op(B) + beta * C, through
 * cblas_sgemm when OpenBLAS is present, else plain loops in a fixed order.
 * Both are deterministic for a fixed thread count (OpenBLAS sgemm splits output
 * tiles, never the K reduction).
 */
#ifndef SP_KERNELS_INTERNAL_H
#define SP_KERNELS_INTERNAL_H

#include "kernels/kernels.h"

/* Row-major GEMM: op(A) is M x K, op(B) is K x N, C is M x N. */
void kn_gemm_f32(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                 int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* How a layer sequence runs its kernels: directly on the CPU, or through
 * dev_launch on a stream (launch.c). Returns 0 or a launch error. */
struct kn_runner {
	int (*run)(void *ctx, const struct dev_kernel *k, const void *args, size_t size,
	           struct dev_cost cost);
	void *ctx;
};
int kn_layer_forward_run(const struct kn_runner *r, const struct kn_model_config *cfg,
                         enum kn_layer_kind kind, int B, int T, const struct kn_layer_mem *mem,
                         const struct kn_layer_io *io);
int kn_layer_backward_run(const struct kn_runner *r, const struct kn_model_config *cfg,
                          enum kn_layer_kind kind, int B, int T, const struct kn_layer_mem *mem,
                          const struct kn_layer_io *io);
int kn_layer_update_run(const struct kn_runner *r, const struct kn_model_config *cfg,
                        enum kn_layer_kind kind, const struct kn_layer_mem *mem,
                        const struct kn_optim_hparams *h);
int kn_layer_zero_grad_run(const struct kn_runner *r, const struct kn_model_config *cfg,
                           enum kn_layer_kind kind, const struct kn_layer_mem *mem);

#define KN_GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */
#define KN_LN_EPS     1e-5f

#endif

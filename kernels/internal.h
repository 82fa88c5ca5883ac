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

#include <string.h>

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
/* Runs op with args struct a through runner r, returning its error. */
#define KN_RUN(r, op, a) \
	SP_CHECK((r)->run((r)->ctx, &kn_##op##_kernel, &(a), sizeof(a), kn_##op##_cost(&(a))))
int kn_layer_forward_run(const struct kn_runner *r, const struct kn_model_config *cfg,
                         enum kn_layer_kind kind, int B, int T, const struct kn_layer_mem *mem,
                         const struct kn_layer_io *io);
int kn_layer_backward_run(const struct kn_runner *r, const struct kn_model_config *cfg,
                          enum kn_layer_kind kind, int B, int T, const struct kn_layer_mem *mem,
                          const struct kn_layer_io *io);
int kn_layer_update_run(const struct kn_runner *r, const struct kn_model_config *cfg,
                        enum kn_layer_kind kind, const struct kn_layer_mem *mem,
                        const struct kn_optim_hparams *h);
int kn_layer_update_mixed_run(const struct kn_runner *r, const struct kn_model_config *cfg,
                              enum kn_layer_kind kind, const struct kn_layer_mem *mem,
                              const struct kn_optim_hparams *h);
int kn_block_tp_forward_run(const struct kn_runner *r, const struct kn_model_config *cfg, int t,
                            int rank, int seg, int B, int T, const struct kn_layer_mem *mem,
                            const struct kn_layer_io *io);
int kn_block_tp_backward_run(const struct kn_runner *r, const struct kn_model_config *cfg, int t,
                             int rank, int seg, int B, int T, const struct kn_layer_mem *mem,
                             const struct kn_layer_io *io);
int kn_layer_zero_grad_run(const struct kn_runner *r, const struct kn_model_config *cfg,
                           enum kn_layer_kind kind, const struct kn_layer_mem *mem);

/* The bf16 CPU kernels (cpu_bf16.c): each fp32 kernel calls its twin for
 * KN_BF16. bf16 storage, fp32 arithmetic, one rounding per stored value. */
#define KN_BF16_DECLARE_(name, args) void kn_##name##_cpu_bf16(const struct args *a);
KN_BF16_DECLARE_(encoder_forward, kn_encoder_fwd_args)
KN_BF16_DECLARE_(encoder_backward, kn_encoder_bwd_args)
KN_BF16_DECLARE_(layernorm_forward, kn_layernorm_fwd_args)
KN_BF16_DECLARE_(layernorm_backward, kn_layernorm_bwd_args)
KN_BF16_DECLARE_(matmul_forward, kn_matmul_fwd_args)
KN_BF16_DECLARE_(matmul_backward, kn_matmul_bwd_args)
KN_BF16_DECLARE_(attention_forward, kn_attention_fwd_args)
KN_BF16_DECLARE_(attention_backward, kn_attention_bwd_args)
KN_BF16_DECLARE_(gelu_forward, kn_gelu_fwd_args)
KN_BF16_DECLARE_(gelu_backward, kn_gelu_bwd_args)
KN_BF16_DECLARE_(residual_forward, kn_residual_fwd_args)
KN_BF16_DECLARE_(residual_backward, kn_residual_bwd_args)
KN_BF16_DECLARE_(crossentropy_forward, kn_crossentropy_fwd_args)
KN_BF16_DECLARE_(crossentropy_backward, kn_crossentropy_bwd_args)
KN_BF16_DECLARE_(grad_accumulate, kn_grad_accumulate_args)
KN_BF16_DECLARE_(grad_scale, kn_grad_scale_args)
#undef KN_BF16_DECLARE_

#define KN_GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */
#define KN_LN_EPS     1e-5f

#endif

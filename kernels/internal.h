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

#define KN_GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */
#define KN_LN_EPS     1e-5f

#endif

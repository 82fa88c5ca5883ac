/* kernels/tp_ops.c — the strided GEMM, column sum and tree sum on the CPU
 * (fp32), which the tensor-parallel block form (tp.c) is built from. The
 * GEMM is kn_gemm_f32 (OpenBLAS: it splits output tiles, never K); the tree
 * sum runs in kernels.h's order, the column sum row after row (CUDA's in 32
 * strided partials: each backend its own fixed order). */
#include "kernels/internal.h"

void kn_gemm_cpu(const struct kn_gemm_args *a)
{
	kn_gemm_f32(a->trans_a, a->trans_b, a->M, a->N, a->K, 1.0f, a->a, a->lda, a->b, a->ldb,
	            a->beta, a->c, a->ldc);
	if (!a->bias)
		return;
	for (int m = 0; m < a->M; m++) {
		float *row = a->c + (size_t)m * a->ldc;
		for (int n = 0; n < a->N; n++)
			row[n] += a->bias[n];
	}
}

void kn_colsum_cpu(const struct kn_colsum_args *a)
{
	for (int m = 0; m < a->M; m++) {
		const float *row = a->in + (size_t)m * a->ld;
		for (int n = 0; n < a->N; n++)
			a->out[n] += row[n];
	}
}

void kn_tree_sum_cpu(const struct kn_tree_sum_args *a)
{
	const float *x = a->in;
	long s = a->stride;
	for (long i = 0; i < a->N; i++) {
		float v = x[i];
		if (a->n == 2)
			v = x[i] + x[s + i];
		else if (a->n == 4)
			v = (x[i] + x[s + i]) + (x[2 * s + i] + x[3 * s + i]);
		if (a->bias)
			v += a->bias[i % a->OC];
		a->out[i] = v;
	}
}

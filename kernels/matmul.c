/* kernels/matmul.c — linear layer, CPU: out (B,T,OC) = inp (B,T,C) @ weight^T + bias.
 * All three products go through kn_gemm_f32 (OpenBLAS); the bias gradient is a
 * column sum in row order. Backward accumulates (+=, GEMM beta = 1). */
#include "kernels/internal.h"

#include <string.h>

void kn_matmul_forward_cpu(const struct kn_matmul_fwd_args *a)
{
	if (a->dtype == KN_BF16) {
		kn_matmul_forward_cpu_bf16(a);
		return;
	}
	int BT = a->B * a->T, C = a->C, OC = a->OC;
	float *out = a->out;
	const float *bias = a->bias;
	float beta = 0.0f;
	if (bias) {
		for (int r = 0; r < BT; r++)
			memcpy(out + (size_t)r * OC, bias, (size_t)OC * sizeof(float));
		beta = 1.0f;
	}
	kn_gemm_f32(0, 1, BT, OC, C, 1.0f, a->inp, C, a->weight, C, beta, out, OC);
}

void kn_matmul_backward_cpu(const struct kn_matmul_bwd_args *a)
{
	if (a->dtype == KN_BF16) {
		kn_matmul_backward_cpu_bf16(a);
		return;
	}
	int BT = a->B * a->T, C = a->C, OC = a->OC;
	const float *dout = a->dout;
	if (a->dinp)
		kn_gemm_f32(0, 0, BT, C, OC, 1.0f, dout, OC, a->weight, C, 1.0f, a->dinp, C);
	if (a->dweight)
		kn_gemm_f32(1, 0, OC, C, BT, 1.0f, dout, OC, a->inp, C, 1.0f, a->dweight, C);
	if (a->dbias) {
		float *db = a->dbias;
		for (int r = 0; r < BT; r++) {
			const float *d = dout + (size_t)r * OC;
			for (int o = 0; o < OC; o++)
				db[o] += d[o];
		}
	}
}

/* kernels/attention.c — causal multi-head self-attention, CPU.
 * Per (b, head): preatt = q k^T / sqrt(hs) (one GEMM over the full T x T, the
 * upper triangle then masked to 0), causal softmax row by row (double sums),
 * out = att @ v. Backward uses ws for one T x T block at a time and the same
 * GEMMs transposed; everything runs in (b, h) order, so it is deterministic. */
#include "kernels/internal.h"

#include <math.h>

size_t kn_attention_ws_bytes(enum kn_dtype dtype, int B, int T, int C, int NH)
{
	/* bf16 (fp32 words): CUDA D = rowsum(dout * out) (B NH T); the CPU its
	 * fp32 dq, dk, dv of one head (3 T hs) and two rows of scores (2 T). */
	if (dtype == KN_BF16)
		return sizeof(float) *
		       ((size_t)B * NH * T + 3 * (size_t)T * (C / NH) + 2 * (size_t)T);
	/* CUDA: q,k,v,dq,dk,dv,dvacc (7 BTC) + datt (B NH T T); CPU uses less. */
	return kn_dtype_size(dtype) * (7 * (size_t)B * T * C + (size_t)B * NH * T * T);
}

size_t kn_attention_att_bytes(enum kn_dtype dtype, int B, int T, int NH)
{
	size_t rows = (size_t)B * NH * T;
	return sizeof(float) * (dtype == KN_BF16 ? rows : rows * T);
}

void kn_attention_forward_cpu(const struct kn_attention_fwd_args *a)
{
	if (a->dtype == KN_BF16) {
		kn_attention_forward_cpu_bf16(a);
		return;
	}
	int B = a->B, T = a->T, C = a->C, NH = a->NH, hs = C / NH;
	float scale = 1.0f / sqrtf((float)hs);
	const float *inp = a->inp;
	for (int b = 0; b < B; b++) {
		for (int h = 0; h < NH; h++) {
			const float *q = inp + (size_t)b * T * 3 * C + (size_t)h * hs;
			const float *k = q + C, *v = q + 2 * C;
			float *att = (float *)a->att + ((size_t)b * NH + h) * T * T;
			float *out = (float *)a->out + (size_t)b * T * C + (size_t)h * hs;
			kn_gemm_f32(0, 1, T, T, hs, scale, q, 3 * C, k, 3 * C, 0.0f, att, T);
			for (int t = 0; t < T; t++) {
				float *row = att + (size_t)t * T;
				float mx = row[0];
				for (int t2 = 1; t2 <= t; t2++)
					mx = row[t2] > mx ? row[t2] : mx;
				double sum = 0.0;
				for (int t2 = 0; t2 <= t; t2++) {
					row[t2] = expf(row[t2] - mx);
					sum += row[t2];
				}
				float inv = (float)(1.0 / sum);
				for (int t2 = 0; t2 <= t; t2++)
					row[t2] *= inv;
				for (int t2 = t + 1; t2 < T; t2++)
					row[t2] = 0.0f;
			}
			kn_gemm_f32(0, 0, T, hs, T, 1.0f, att, T, v, 3 * C, 0.0f, out, C);
		}
	}
}

void kn_attention_backward_cpu(const struct kn_attention_bwd_args *a)
{
	if (a->dtype == KN_BF16) {
		kn_attention_backward_cpu_bf16(a);
		return;
	}
	int B = a->B, T = a->T, C = a->C, NH = a->NH, hs = C / NH;
	float scale = 1.0f / sqrtf((float)hs);
	const float *inp = a->inp;
	float *datt = a->ws;
	for (int b = 0; b < B; b++) {
		for (int h = 0; h < NH; h++) {
			size_t off = (size_t)b * T * 3 * C + (size_t)h * hs;
			const float *q = inp + off, *k = q + C, *v = q + 2 * C;
			float *dq = (float *)a->dinp + off, *dk = dq + C, *dv = dq + 2 * C;
			const float *att = (const float *)a->att + ((size_t)b * NH + h) * T * T;
			const float *dout =
			    (const float *)a->dout + (size_t)b * T * C + (size_t)h * hs;
			/* datt = dout @ v^T; dv += att^T @ dout */
			kn_gemm_f32(0, 1, T, T, hs, 1.0f, dout, C, v, 3 * C, 0.0f, datt, T);
			kn_gemm_f32(1, 0, T, hs, T, 1.0f, att, T, dout, C, 1.0f, dv, 3 * C);
			/* softmax backward, scaled: dpre = att * (datt - <att, datt>) / sqrt(hs) */
			for (int t = 0; t < T; t++) {
				const float *arow = att + (size_t)t * T;
				float *drow = datt + (size_t)t * T;
				double dot = 0.0;
				for (int t2 = 0; t2 <= t; t2++)
					dot += (double)arow[t2] * drow[t2];
				float fdot = (float)dot;
				for (int t2 = 0; t2 <= t; t2++)
					drow[t2] = arow[t2] * (drow[t2] - fdot) * scale;
				for (int t2 = t + 1; t2 < T; t2++)
					drow[t2] = 0.0f;
			}
			/* dq += dpre @ k; dk += dpre^T @ q */
			kn_gemm_f32(0, 0, T, hs, T, 1.0f, datt, T, k, 3 * C, 1.0f, dq, 3 * C);
			kn_gemm_f32(1, 0, T, hs, T, 1.0f, datt, T, q, 3 * C, 1.0f, dk, 3 * C);
		}
	}
}

/* kernels/cuda_matmul.cu — linear layer and causal attention on CUDA (cuBLAS).
 *
 * GEMMs are cuBLAS fp32 (no TF32) on the handle bound to the given stream.
 * Column sums (bias gradients) use a fixed-shape block reduction, so results
 * are deterministic run to run. Attention permutes q, k, v to (B,NH,T,hs) in
 * the workspace and runs batched GEMMs over the B*NH heads, as llm.c does.
 */
#include "kernels/cuda_common.cuh"

#include <math.h>

/* out[c] += sum over rows r of in[r*C + c]; block (32, 32), grid ceil(C/32). */
__global__ void kn_bias_colsum_kernel(float *out, const float *in, int R, int C)
{
	__shared__ float part[32][33];
	int c = blockIdx.x * 32 + threadIdx.x;
	float acc = 0.0f;
	if (c < C)
		for (int r = threadIdx.y; r < R; r += 32)
			acc += in[(size_t)r * C + c];
	part[threadIdx.y][threadIdx.x] = acc;
	__syncthreads();
	if (threadIdx.y == 0 && c < C) {
		float s = 0.0f;
		for (int i = 0; i < 32; i++)
			s += part[i][threadIdx.x];
		out[c] += s;
	}
}

__global__ void kn_bias_fill_kernel(float *out, const float *bias, long n, int OC)
{
	for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
	     i += (long)gridDim.x * blockDim.x)
		out[i] = bias[i % OC];
}

extern "C" void kn_matmul_forward_cuda(const struct kn_matmul_fwd_args *a, void *stream)
{
	if (a->dtype == KN_BF16) {
		kn_matmul_forward_cuda_bf16(a, (cudaStream_t)stream);
		return;
	}
	cudaStream_t s = (cudaStream_t)stream;
	int BT = a->B * a->T;
	float beta = 0.0f;
	if (a->bias) {
		long n = (long)BT * a->OC;
		kn_bias_fill_kernel<<<kn_blocks(n, 256), 256, 0, s>>>(
		    (float *)a->out, (const float *)a->bias, n, a->OC);
		kn_cuda_check_launch("matmul_forward bias");
		beta = 1.0f;
	}
	kn_cuda_gemm(s, false, true, BT, a->OC, a->C, 1.0f, (const float *)a->inp, a->C, 0,
	             (const float *)a->weight, a->C, 0, beta, (float *)a->out, a->OC, 0, 1);
}

extern "C" void kn_matmul_backward_cuda(const struct kn_matmul_bwd_args *a, void *stream)
{
	if (a->dtype == KN_BF16) {
		kn_matmul_backward_cuda_bf16(a, (cudaStream_t)stream);
		return;
	}
	cudaStream_t s = (cudaStream_t)stream;
	int BT = a->B * a->T, C = a->C, OC = a->OC;
	const float *dout = (const float *)a->dout;
	if (a->dinp)
		kn_cuda_gemm(s, false, false, BT, C, OC, 1.0f, dout, OC, 0,
		             (const float *)a->weight, C, 0, 1.0f, (float *)a->dinp, C, 0, 1);
	if (a->dweight)
		kn_cuda_gemm(s, true, false, OC, C, BT, 1.0f, dout, OC, 0, (const float *)a->inp, C,
		             0, 1.0f, (float *)a->dweight, C, 0, 1);
	if (a->dbias) {
		kn_bias_colsum_kernel<<<(OC + 31) / 32, dim3(32, 32), 0, s>>>((float *)a->dbias,
		                                                              dout, BT, OC);
		kn_cuda_check_launch("matmul_backward bias");
	}
}

/* (B,T,3,NH,hs) -> q, k, v each (B,NH,T,hs) */
__global__ void kn_qkv_permute_kernel(float *q, float *k, float *v, const float *inp, int B, int T,
                                      int NH, int hs)
{
	long n = (long)B * NH * T * hs;
	int C = NH * hs;
	for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
	     i += (long)gridDim.x * blockDim.x) {
		int d = i % hs;
		int t = (i / hs) % T;
		int h = (i / ((long)hs * T)) % NH;
		int b = i / ((long)hs * T * NH);
		size_t src = ((size_t)b * T + t) * 3 * C + (size_t)h * hs + d;
		q[i] = inp[src];
		k[i] = inp[src + C];
		v[i] = inp[src + 2 * C];
	}
}

/* dinp (B,T,3C) += dq|dk|dv (B,NH,T,hs) */
__global__ void kn_qkv_unpermute_add_kernel(float *dinp, const float *dq, const float *dk,
                                            const float *dv, int B, int T, int NH, int hs)
{
	long n = (long)B * NH * T * hs;
	int C = NH * hs;
	for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
	     i += (long)gridDim.x * blockDim.x) {
		int d = i % hs;
		int t = (i / hs) % T;
		int h = (i / ((long)hs * T)) % NH;
		int b = i / ((long)hs * T * NH);
		size_t dst = ((size_t)b * T + t) * 3 * C + (size_t)h * hs + d;
		dinp[dst] += dq[i];
		dinp[dst + C] += dk[i];
		dinp[dst + 2 * C] += dv[i];
	}
}

/* (B,NH,T,hs) <-> (B,T,NH,hs): to_bhtd = 1 gathers out (B,T,C) into (B,NH,T,hs) */
__global__ void kn_head_permute_kernel(float *dst, const float *src, int B, int T, int NH, int hs,
                                       int to_bhtd)
{
	long n = (long)B * NH * T * hs;
	for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
	     i += (long)gridDim.x * blockDim.x) {
		int d = i % hs;
		int t = (i / hs) % T;
		int h = (i / ((long)hs * T)) % NH;
		int b = i / ((long)hs * T * NH);
		size_t btc = (((size_t)b * T + t) * NH + h) * hs + d;
		if (to_bhtd)
			dst[i] = src[btc];
		else
			dst[btc] = src[i];
	}
}

/* In place on att (rows of T, one warp per row): scaled logits -> causal softmax. */
__global__ void kn_causal_softmax_kernel(float *att, int rows, int T)
{
	int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
	int lane = threadIdx.x % 32;
	if (row >= rows)
		return;
	int t = row % T;
	float *x = att + (size_t)row * T;
	float mx = -INFINITY;
	for (int i = lane; i <= t; i += 32)
		mx = fmaxf(mx, x[i]);
	for (int o = 16; o > 0; o /= 2)
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
	float sum = 0.0f;
	for (int i = lane; i <= t; i += 32) {
		float e = expf(x[i] - mx);
		x[i] = e;
		sum += e;
	}
	for (int o = 16; o > 0; o /= 2)
		sum += __shfl_xor_sync(0xffffffffu, sum, o);
	float inv = 1.0f / sum;
	for (int i = lane; i < T; i += 32)
		x[i] = i <= t ? x[i] * inv : 0.0f;
}

/* In place on datt: dpre = att * (datt - <att, datt>) * scale, 0 above the diagonal. */
__global__ void kn_causal_softmax_bwd_kernel(float *datt, const float *att, int rows, int T,
                                             float scale)
{
	int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
	int lane = threadIdx.x % 32;
	if (row >= rows)
		return;
	int t = row % T;
	float *d = datt + (size_t)row * T;
	const float *p = att + (size_t)row * T;
	float dot = 0.0f;
	for (int i = lane; i <= t; i += 32)
		dot += p[i] * d[i];
	for (int o = 16; o > 0; o /= 2)
		dot += __shfl_xor_sync(0xffffffffu, dot, o);
	for (int i = lane; i < T; i += 32)
		d[i] = i <= t ? p[i] * (d[i] - dot) * scale : 0.0f;
}

extern "C" void kn_attention_forward_cuda(const struct kn_attention_fwd_args *a, void *stream)
{
	if (a->dtype == KN_BF16) {
		kn_attention_forward_cuda_bf16(a, (cudaStream_t)stream);
		return;
	}
	cudaStream_t s = (cudaStream_t)stream;
	int B = a->B, T = a->T, C = a->C, NH = a->NH, hs = C / NH;
	size_t btc = (size_t)B * T * C;
	float *q = (float *)a->ws, *k = q + btc, *v = k + btc, *vacc = v + btc;
	float *att = (float *)a->att;
	float scale = 1.0f / sqrtf((float)hs);
	kn_qkv_permute_kernel<<<kn_blocks(btc, 256), 256, 0, s>>>(q, k, v, (const float *)a->inp, B,
	                                                          T, NH, hs);
	kn_cuda_check_launch("attention_forward permute");
	/* att[bh] (T,T) = scale * q[bh] (T,hs) @ k[bh]^T */
	long long sq = (long long)T * hs, sa = (long long)T * T;
	kn_cuda_gemm(s, false, true, T, T, hs, scale, q, hs, sq, k, hs, sq, 0.0f, att, T, sa,
	             B * NH);
	int rows = B * NH * T;
	kn_causal_softmax_kernel<<<(rows + 7) / 8, 256, 0, s>>>(att, rows, T);
	kn_cuda_check_launch("attention_forward softmax");
	/* vacc[bh] (T,hs) = att[bh] @ v[bh] */
	kn_cuda_gemm(s, false, false, T, hs, T, 1.0f, att, T, sa, v, hs, sq, 0.0f, vacc, hs, sq,
	             B * NH);
	kn_head_permute_kernel<<<kn_blocks(btc, 256), 256, 0, s>>>((float *)a->out, vacc, B, T, NH,
	                                                           hs, 0);
	kn_cuda_check_launch("attention_forward unpermute");
}

extern "C" void kn_attention_backward_cuda(const struct kn_attention_bwd_args *a, void *stream)
{
	if (a->dtype == KN_BF16) {
		kn_attention_backward_cuda_bf16(a, (cudaStream_t)stream);
		return;
	}
	cudaStream_t s = (cudaStream_t)stream;
	int B = a->B, T = a->T, C = a->C, NH = a->NH, hs = C / NH;
	size_t btc = (size_t)B * T * C;
	float *q = (float *)a->ws, *k = q + btc, *v = k + btc;
	float *dq = v + btc, *dk = dq + btc, *dv = dk + btc, *dvacc = dv + btc;
	float *datt = dvacc + btc;
	const float *att = (const float *)a->att;
	float scale = 1.0f / sqrtf((float)hs);
	long long sq = (long long)T * hs, sa = (long long)T * T;
	int bh = B * NH;
	kn_qkv_permute_kernel<<<kn_blocks(btc, 256), 256, 0, s>>>(q, k, v, (const float *)a->inp, B,
	                                                          T, NH, hs);
	kn_head_permute_kernel<<<kn_blocks(btc, 256), 256, 0, s>>>(dvacc, (const float *)a->dout, B,
	                                                           T, NH, hs, 1);
	kn_cuda_check_launch("attention_backward permute");
	/* datt = dvacc @ v^T; dv = att^T @ dvacc */
	kn_cuda_gemm(s, false, true, T, T, hs, 1.0f, dvacc, hs, sq, v, hs, sq, 0.0f, datt, T, sa,
	             bh);
	kn_cuda_gemm(s, true, false, T, hs, T, 1.0f, att, T, sa, dvacc, hs, sq, 0.0f, dv, hs, sq,
	             bh);
	int rows = bh * T;
	kn_causal_softmax_bwd_kernel<<<(rows + 7) / 8, 256, 0, s>>>(datt, att, rows, T, scale);
	kn_cuda_check_launch("attention_backward softmax");
	/* dq = dpre @ k; dk = dpre^T @ q */
	kn_cuda_gemm(s, false, false, T, hs, T, 1.0f, datt, T, sa, k, hs, sq, 0.0f, dq, hs, sq, bh);
	kn_cuda_gemm(s, true, false, T, hs, T, 1.0f, datt, T, sa, q, hs, sq, 0.0f, dk, hs, sq, bh);
	kn_qkv_unpermute_add_kernel<<<kn_blocks(btc, 256), 256, 0, s>>>((float *)a->dinp, dq, dk,
	                                                                dv, B, T, NH, hs);
	kn_cuda_check_launch("attention_backward unpermute");
}

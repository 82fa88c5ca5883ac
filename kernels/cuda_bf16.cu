/* kernels/cuda_bf16.cu — the bf16 CUDA kernels other than attention: embedding,
 * layernorm, GELU, residual, cross-entropy, bias gradient and gradient buffers,
 * with the linear layer through cuBLASLt (bf16 in and out, fp32 compute
 * CUBLAS_COMPUTE_32F, bias in the epilogue).
 *
 * Same semantics as kernels/cpu_bf16.c: bf16 in memory, fp32 arithmetic, one
 * round-to-nearest-even per stored value (__float2bfloat16_rn); accumulating
 * outputs read the bf16 value, add the fp32 contribution and round once.
 * No atomics: fixed-shape reductions, deterministic run to run. cuBLASLt runs
 * on one handle and one 32 MiB workspace per (device, stream), allocated once.
 */
#include "kernels/cuda_common.cuh"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>

extern "C" {
#include "common/log.h"
}

typedef __nv_bfloat16 bf16;

#define KN_GRID_STRIDE(i, n)                                                \
	for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < (n); \
	     i += (long)gridDim.x * blockDim.x)

__device__ __forceinline__ float f(const bf16 *p, long i)
{
	return __bfloat162float(p[i]);
}

__device__ __forceinline__ void st(bf16 *p, long i, float v)
{
	p[i] = __float2bfloat16_rn(v);
}

__device__ __forceinline__ void add(bf16 *p, long i, float v)
{
	p[i] = __float2bfloat16_rn(__bfloat162float(p[i]) + v);
}

__device__ __forceinline__ float warp_sum(float v)
{
	for (int o = 16; o > 0; o /= 2)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ __forceinline__ float warp_max(float v)
{
	for (int o = 16; o > 0; o /= 2)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

/* ---- encoder ---- */
__global__ void kn_encoder_fwd_bf16_kernel(bf16 *out, const int *inp, const bf16 *wte,
                                           const bf16 *wpe, int B, int T, int C, int V)
{
	long n = (long)B * T * C;
	KN_GRID_STRIDE(i, n)
	{
		int c = i % C;
		long bt = i / C;
		int t = bt % T, ix = inp[bt];
		st(out, i,
		   ix >= 0 && ix < V ? f(wte, (long)ix * C + c) + f(wpe, (long)t * C + c) : NAN);
	}
}

/* dwpe[t,c] += sum over b of dout[b,t,c] (one rounding) */
__global__ void kn_encoder_bwd_wpe_bf16_kernel(bf16 *dwpe, const bf16 *dout, int B, int T, int C)
{
	long n = (long)T * C;
	KN_GRID_STRIDE(i, n)
	{
		float acc = 0.0f;
		for (int b = 0; b < B; b++)
			acc += f(dout, (long)b * T * C + i);
		add(dwpe, i, acc);
	}
}

/* dwte[inp[bt]] += dout[bt], rounded per token, serial over (b,t) per element
 * (the CPU's order): grid x over channels, y over vocabulary slices. */
#define KN_ENC_TILE    1024
#define KN_ENC_VSLICES 64
__global__ void kn_encoder_bwd_wte_bf16_kernel(bf16 *dwte, const bf16 *dout, const int *inp, int BT,
                                               int C, int V)
{
	__shared__ int tok[KN_ENC_TILE];
	int c = blockIdx.x * blockDim.x + threadIdx.x;
	int v0 = (int)((long)blockIdx.y * V / gridDim.y);
	int v1 = (int)((long)(blockIdx.y + 1) * V / gridDim.y);
	for (int base = 0; base < BT; base += KN_ENC_TILE) {
		int n = BT - base < KN_ENC_TILE ? BT - base : KN_ENC_TILE;
		__syncthreads();
		for (int i = threadIdx.x; i < n; i += blockDim.x)
			tok[i] = inp[base + i];
		__syncthreads();
		if (c >= C)
			continue;
		for (int i = 0; i < n; i++) {
			int v = tok[i];
			if (v >= v0 && v < v1)
				add(dwte, (long)v * C + c, f(dout, (long)(base + i) * C + c));
		}
	}
}

void kn_encoder_forward_cuda_bf16(const struct kn_encoder_fwd_args *a, cudaStream_t s)
{
	long n = (long)a->B * a->T * a->C;
	kn_encoder_fwd_bf16_kernel<<<kn_blocks(n, 256), 256, 0, s>>>(
	    (bf16 *)a->out, a->inp, (const bf16 *)a->wte, (const bf16 *)a->wpe, a->B, a->T, a->C,
	    a->V);
	kn_cuda_check_launch("encoder_forward bf16");
}

void kn_encoder_backward_cuda_bf16(const struct kn_encoder_bwd_args *a, cudaStream_t s)
{
	long n = (long)a->T * a->C;
	kn_encoder_bwd_wpe_bf16_kernel<<<kn_blocks(n, 256), 256, 0, s>>>(
	    (bf16 *)a->dwpe, (const bf16 *)a->dout, a->B, a->T, a->C);
	dim3 grid((a->C + 127) / 128, a->V < KN_ENC_VSLICES ? a->V : KN_ENC_VSLICES);
	kn_encoder_bwd_wte_bf16_kernel<<<grid, 128, 0, s>>>((bf16 *)a->dwte, (const bf16 *)a->dout,
	                                                    a->inp, a->B * a->T, a->C, a->V);
	kn_cuda_check_launch("encoder_backward bf16");
}

/* 8 bf16 at p (16-byte aligned) as floats, and back (rounding each, as st) */
__device__ __forceinline__ void ld8(const bf16 *p, float v[8])
{
	uint4 u = *reinterpret_cast<const uint4 *>(p);
	const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&u);
#pragma unroll
	for (int k = 0; k < 4; k++) {
		float2 x = __bfloat1622float2(h[k]);
		v[2 * k] = x.x;
		v[2 * k + 1] = x.y;
	}
}

__device__ __forceinline__ void st8(bf16 *p, const float v[8])
{
	uint4 u;
	__nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&u);
#pragma unroll
	for (int k = 0; k < 4; k++)
		h[k] = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
	*reinterpret_cast<uint4 *>(p) = u;
}

static bool al16(const void *p)
{
	return ((uintptr_t)p & 15) == 0;
}

/* ---- layernorm: one warp per row, statistics in fp32; 16-byte accesses when vec
 * (C % 8 == 0, every tensor 16-byte aligned) ---- */
__global__ void kn_layernorm_fwd_bf16_kernel(bf16 *out, float *mean, float *rstd, const bf16 *inp,
                                             const bf16 *w, const bf16 *bias, int rows, int C,
                                             bool vec)
{
	int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
	int lane = threadIdx.x % 32;
	if (row >= rows)
		return;
	const bf16 *x = inp + (long)row * C;
	if (vec) {
		float s = 0.0f, v = 0.0f, xv[8], wv[8], bv[8];
		for (int i = lane * 8; i < C; i += 256) {
			ld8(x + i, xv);
#pragma unroll
			for (int k = 0; k < 8; k++)
				s += xv[k];
		}
		float m = warp_sum(s) / C;
		for (int i = lane * 8; i < C; i += 256) {
			ld8(x + i, xv);
#pragma unroll
			for (int k = 0; k < 8; k++)
				v += (xv[k] - m) * (xv[k] - m);
		}
		v = warp_sum(v) / C;
		float r = rsqrtf(v + 1e-5f);
		for (int i = lane * 8; i < C; i += 256) {
			ld8(x + i, xv);
			ld8(w + i, wv);
			ld8(bias + i, bv);
#pragma unroll
			for (int k = 0; k < 8; k++)
				xv[k] = (xv[k] - m) * r * wv[k] + bv[k];
			st8(out + (long)row * C + i, xv);
		}
		if (lane == 0) {
			mean[row] = m;
			rstd[row] = r;
		}
		return;
	}
	float s = 0.0f;
	for (int i = lane; i < C; i += 32)
		s += f(x, i);
	float m = warp_sum(s) / C;
	float v = 0.0f;
	for (int i = lane; i < C; i += 32) {
		float d = f(x, i) - m;
		v += d * d;
	}
	v = warp_sum(v) / C;
	float r = rsqrtf(v + 1e-5f);
	bf16 *o = out + (long)row * C;
	for (int i = lane; i < C; i += 32)
		st(o, i, (f(x, i) - m) * r * f(w, i) + f(bias, i));
	if (lane == 0) {
		mean[row] = m;
		rstd[row] = r;
	}
}

__global__ void kn_layernorm_bwd_dinp_bf16_kernel(bf16 *dinp, const bf16 *dout, const bf16 *inp,
                                                  const bf16 *w, const float *mean,
                                                  const float *rstd, int rows, int C, bool vec)
{
	int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
	int lane = threadIdx.x % 32;
	if (row >= rows)
		return;
	const bf16 *x = inp + (long)row * C, *dy = dout + (long)row * C;
	bf16 *dx = dinp + (long)row * C;
	float m = mean[row], r = rstd[row];
	float dm = 0.0f, dnm = 0.0f;
	if (vec) {
		float xv[8], wv[8], gv[8], dv[8];
		for (int i = lane * 8; i < C; i += 256) {
			ld8(x + i, xv);
			ld8(w + i, wv);
			ld8(dy + i, gv);
#pragma unroll
			for (int k = 0; k < 8; k++) {
				float dn = wv[k] * gv[k];
				dm += dn;
				dnm += dn * ((xv[k] - m) * r);
			}
		}
		dm = warp_sum(dm) / C;
		dnm = warp_sum(dnm) / C;
		for (int i = lane * 8; i < C; i += 256) {
			ld8(x + i, xv);
			ld8(w + i, wv);
			ld8(dy + i, gv);
			ld8(dx + i, dv);
#pragma unroll
			for (int k = 0; k < 8; k++) {
				float norm = (xv[k] - m) * r;
				dv[k] += (wv[k] * gv[k] - dm - norm * dnm) * r;
			}
			st8(dx + i, dv);
		}
		return;
	}
	for (int i = lane; i < C; i += 32) {
		float norm = (f(x, i) - m) * r;
		float dn = f(w, i) * f(dy, i);
		dm += dn;
		dnm += dn * norm;
	}
	dm = warp_sum(dm) / C;
	dnm = warp_sum(dnm) / C;
	for (int i = lane; i < C; i += 32) {
		float norm = (f(x, i) - m) * r;
		float dn = f(w, i) * f(dy, i);
		add(dx, i, (dn - dm - norm * dnm) * r);
	}
}

/* dweight[c] += sum_r dout*norm, dbias[c] += sum_r dout; block (32,32), fixed order */
__global__ void kn_layernorm_bwd_params_bf16_kernel(bf16 *dw, bf16 *db, const bf16 *dout,
                                                    const bf16 *inp, const float *mean,
                                                    const float *rstd, int rows, int C)
{
	__shared__ float pw[32][33], pb[32][33];
	int c = blockIdx.x * 32 + threadIdx.x;
	float aw = 0.0f, ab = 0.0f;
	if (c < C) {
		for (int r = threadIdx.y; r < rows; r += 32) {
			float dy = f(dout, (long)r * C + c);
			float norm = (f(inp, (long)r * C + c) - mean[r]) * rstd[r];
			aw += dy * norm;
			ab += dy;
		}
	}
	pw[threadIdx.y][threadIdx.x] = aw;
	pb[threadIdx.y][threadIdx.x] = ab;
	__syncthreads();
	if (threadIdx.y == 0 && c < C) {
		float sw = 0.0f, sb = 0.0f;
		for (int i = 0; i < 32; i++) {
			sw += pw[i][threadIdx.x];
			sb += pb[i][threadIdx.x];
		}
		add(dw, c, sw);
		add(db, c, sb);
	}
}

void kn_layernorm_forward_cuda_bf16(const struct kn_layernorm_fwd_args *a, cudaStream_t s)
{
	int rows = a->B * a->T;
	bool vec =
	    a->C % 8 == 0 && al16(a->out) && al16(a->inp) && al16(a->weight) && al16(a->bias);
	kn_layernorm_fwd_bf16_kernel<<<(rows + 7) / 8, 256, 0, s>>>(
	    (bf16 *)a->out, a->mean, a->rstd, (const bf16 *)a->inp, (const bf16 *)a->weight,
	    (const bf16 *)a->bias, rows, a->C, vec);
	kn_cuda_check_launch("layernorm_forward bf16");
}

void kn_layernorm_backward_cuda_bf16(const struct kn_layernorm_bwd_args *a, cudaStream_t s)
{
	int rows = a->B * a->T;
	bool vec =
	    a->C % 8 == 0 && al16(a->dinp) && al16(a->dout) && al16(a->inp) && al16(a->weight);
	kn_layernorm_bwd_dinp_bf16_kernel<<<(rows + 7) / 8, 256, 0, s>>>(
	    (bf16 *)a->dinp, (const bf16 *)a->dout, (const bf16 *)a->inp, (const bf16 *)a->weight,
	    a->mean, a->rstd, rows, a->C, vec);
	kn_layernorm_bwd_params_bf16_kernel<<<(a->C + 31) / 32, dim3(32, 32), 0, s>>>(
	    (bf16 *)a->dweight, (bf16 *)a->dbias, (const bf16 *)a->dout, (const bf16 *)a->inp,
	    a->mean, a->rstd, rows, a->C);
	kn_cuda_check_launch("layernorm_backward bf16");
}

/* ---- GELU, residual, gradient buffers ---- */
#define KN_GELU_S 0.7978845608028654f

__device__ __forceinline__ float gelu(float x)
{
	float cube = 0.044715f * x * x * x;
	return 0.5f * x * (1.0f + tanhf(KN_GELU_S * (x + cube)));
}

__device__ __forceinline__ float gelu_grad(float x)
{
	float cube = 0.044715f * x * x * x;
	float th = tanhf(KN_GELU_S * (x + cube));
	float sech2 = 1.0f - th * th;
	return 0.5f * (1.0f + th) +
	       x * 0.5f * sech2 * KN_GELU_S * (1.0f + 3.0f * 0.044715f * x * x);
}

/* Elementwise over n elements: 8 at a time with 16-byte accesses when vec
 * (every pointer 16-byte aligned), the rest one by one. Op has one(i) and
 * vec8(i) computing the same thing (the same fp32 operations, one rounding). */
template <class Op> __global__ void kn_ew_bf16_kernel(Op op, long n, bool vec)
{
	long stride = (long)gridDim.x * blockDim.x;
	long i0 = blockIdx.x * (long)blockDim.x + threadIdx.x;
	long n8 = vec ? n / 8 : 0;
	for (long i = i0; i < n8; i += stride)
		op.vec8(i * 8);
	for (long i = n8 * 8 + i0; i < n; i += stride)
		op.one(i);
}

template <class Op> static void kn_ew_launch(Op op, long n, bool vec, cudaStream_t s)
{
	kn_ew_bf16_kernel<Op><<<kn_blocks(vec ? (n + 7) / 8 : n, 256), 256, 0, s>>>(op, n, vec);
}

struct kn_gelu_fwd_op {
	bf16 *out;
	const bf16 *inp;
	__device__ void one(long i) const
	{
		st(out, i, gelu(f(inp, i)));
	}
	__device__ void vec8(long i) const
	{
		float x[8];
		ld8(inp + i, x);
#pragma unroll
		for (int k = 0; k < 8; k++)
			x[k] = gelu(x[k]);
		st8(out + i, x);
	}
};

struct kn_gelu_bwd_op {
	bf16 *dinp;
	const bf16 *inp, *dout;
	__device__ void one(long i) const
	{
		add(dinp, i, gelu_grad(f(inp, i)) * f(dout, i));
	}
	__device__ void vec8(long i) const
	{
		float x[8], dy[8], acc[8];
		ld8(inp + i, x);
		ld8(dout + i, dy);
		ld8(dinp + i, acc);
#pragma unroll
		for (int k = 0; k < 8; k++)
			acc[k] += gelu_grad(x[k]) * dy[k];
		st8(dinp + i, acc);
	}
};

struct kn_add_op { /* out = x + y */
	bf16 *out;
	const bf16 *x, *y;
	__device__ void one(long i) const
	{
		st(out, i, f(x, i) + f(y, i));
	}
	__device__ void vec8(long i) const
	{
		float a[8], b[8];
		ld8(x + i, a);
		ld8(y + i, b);
#pragma unroll
		for (int k = 0; k < 8; k++)
			a[k] += b[k];
		st8(out + i, a);
	}
};

struct kn_acc_op { /* dst += src */
	bf16 *dst;
	const bf16 *src;
	__device__ void one(long i) const
	{
		add(dst, i, f(src, i));
	}
	__device__ void vec8(long i) const
	{
		float a[8], b[8];
		ld8(dst + i, a);
		ld8(src + i, b);
#pragma unroll
		for (int k = 0; k < 8; k++)
			a[k] += b[k];
		st8(dst + i, a);
	}
};

struct kn_add2_op { /* da += d, db += d */
	bf16 *da, *db;
	const bf16 *d;
	__device__ void one(long i) const
	{
		float v = f(d, i);
		add(da, i, v);
		add(db, i, v);
	}
	__device__ void vec8(long i) const
	{
		float v[8], a[8], b[8];
		ld8(d + i, v);
		ld8(da + i, a);
		ld8(db + i, b);
#pragma unroll
		for (int k = 0; k < 8; k++) {
			a[k] += v[k];
			b[k] += v[k];
		}
		st8(da + i, a);
		st8(db + i, b);
	}
};

__global__ void kn_scale_bf16_kernel(bf16 *x, float scale, long n)
{
	KN_GRID_STRIDE(i, n)
	st(x, i, f(x, i) * scale);
}

void kn_gelu_forward_cuda_bf16(const struct kn_gelu_fwd_args *a, cudaStream_t s)
{
	kn_gelu_fwd_op op = {(bf16 *)a->out, (const bf16 *)a->inp};
	kn_ew_launch(op, a->N, al16(op.out) && al16(op.inp), s);
	kn_cuda_check_launch("gelu_forward bf16");
}

void kn_gelu_backward_cuda_bf16(const struct kn_gelu_bwd_args *a, cudaStream_t s)
{
	kn_gelu_bwd_op op = {(bf16 *)a->dinp, (const bf16 *)a->inp, (const bf16 *)a->dout};
	kn_ew_launch(op, a->N, al16(op.dinp) && al16(op.inp) && al16(op.dout), s);
	kn_cuda_check_launch("gelu_backward bf16");
}

void kn_residual_forward_cuda_bf16(const struct kn_residual_fwd_args *a, cudaStream_t s)
{
	kn_add_op op = {(bf16 *)a->out, (const bf16 *)a->a, (const bf16 *)a->b};
	kn_ew_launch(op, a->N, al16(op.out) && al16(op.x) && al16(op.y), s);
	kn_cuda_check_launch("residual_forward bf16");
}

void kn_residual_backward_cuda_bf16(const struct kn_residual_bwd_args *a, cudaStream_t s)
{
	kn_add2_op op = {(bf16 *)a->da, (bf16 *)a->db, (const bf16 *)a->dout};
	kn_ew_launch(op, a->N, al16(op.da) && al16(op.db) && al16(op.d), s);
	kn_cuda_check_launch("residual_backward bf16");
}

void kn_grad_accumulate_cuda_bf16(const struct kn_grad_accumulate_args *a, cudaStream_t s)
{
	kn_acc_op op = {(bf16 *)a->dst, (const bf16 *)a->src};
	kn_ew_launch(op, a->N, al16(op.dst) && al16(op.src), s);
	kn_cuda_check_launch("grad_accumulate bf16");
}

void kn_grad_scale_cuda_bf16(const struct kn_grad_scale_args *a, cudaStream_t s)
{
	kn_scale_bf16_kernel<<<kn_blocks(a->N, 256), 256, 0, s>>>((bf16 *)a->x, a->scale, a->N);
	kn_cuda_check_launch("grad_scale bf16");
}

/* ---- cross-entropy: one block of 256 per row, statistics in fp32 ---- */
__device__ float kn_block_reduce_bf16(float v, bool is_max)
{
	__shared__ float part[8];
	__shared__ float result;
	int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
	v = is_max ? warp_max(v) : warp_sum(v);
	if (lane == 0)
		part[warp] = v;
	__syncthreads();
	if (threadIdx.x == 0) {
		float r = part[0];
		for (int i = 1; i < (int)(blockDim.x / 32); i++)
			r = is_max ? fmaxf(r, part[i]) : r + part[i];
		result = r;
	}
	__syncthreads();
	float r = result;
	__syncthreads();
	return r;
}

__global__ void kn_ce_fwd_bf16_kernel(float *losses, bf16 *probs, const bf16 *logits,
                                      const int *targets, int V)
{
	long row = blockIdx.x;
	const bf16 *x = logits + row * V;
	bf16 *p = probs + row * V;
	float mx = -INFINITY;
	for (int i = threadIdx.x; i < V; i += blockDim.x)
		mx = fmaxf(mx, f(x, i));
	mx = kn_block_reduce_bf16(mx, true);
	float s = 0.0f;
	for (int i = threadIdx.x; i < V; i += blockDim.x)
		s += expf(f(x, i) - mx);
	s = kn_block_reduce_bf16(s, false);
	float inv = 1.0f / s;
	for (int i = threadIdx.x; i < V; i += blockDim.x)
		st(p, i, expf(f(x, i) - mx) * inv);
	if (threadIdx.x == 0) {
		int tgt = targets[row];
		losses[row] = tgt >= 0 && tgt < V ? logf(s) + mx - f(x, tgt) : NAN;
	}
}

__global__ void kn_ce_bwd_bf16_kernel(bf16 *dlogits, const bf16 *probs, const int *targets,
                                      float dloss, long n, int V)
{
	KN_GRID_STRIDE(i, n)
	{
		int v = i % V;
		float ind = v == targets[i / V] ? 1.0f : 0.0f;
		add(dlogits, i, (f(probs, i) - ind) * dloss);
	}
}

void kn_crossentropy_forward_cuda_bf16(const struct kn_crossentropy_fwd_args *a, cudaStream_t s)
{
	kn_ce_fwd_bf16_kernel<<<a->B * a->T, 256, 0, s>>>(
	    a->losses, (bf16 *)a->probs, (const bf16 *)a->logits, a->targets, a->V);
	kn_cuda_check_launch("crossentropy_forward bf16");
}

void kn_crossentropy_backward_cuda_bf16(const struct kn_crossentropy_bwd_args *a, cudaStream_t s)
{
	long n = (long)a->B * a->T * a->V;
	kn_ce_bwd_bf16_kernel<<<kn_blocks(n, 256), 256, 0, s>>>(
	    (bf16 *)a->dlogits, (const bf16 *)a->probs, a->targets, a->dloss, n, a->V);
	kn_cuda_check_launch("crossentropy_backward bf16");
}

/* ---- linear layer: cuBLASLt ---- */
/* out[c] += sum over rows r of in[r*C + c] (fp32 sum, one rounding); block (32, 32). */
__global__ void kn_colsum_bf16_kernel(bf16 *out, const bf16 *in, int R, int C)
{
	__shared__ float part[32][33];
	int c = blockIdx.x * 32 + threadIdx.x;
	float acc = 0.0f;
	if (c < C)
		for (int r = threadIdx.y; r < R; r += 32)
			acc += f(in, (long)r * C + c);
	part[threadIdx.y][threadIdx.x] = acc;
	__syncthreads();
	if (threadIdx.y == 0 && c < C) {
		float s = 0.0f;
		for (int i = 0; i < 32; i++)
			s += part[i][threadIdx.x];
		add(out, c, s);
	}
}

#define KN_LT_WS_BYTES ((size_t)32 << 20)

namespace
{
struct lt_slot {
	int dev;
	cudaStream_t stream;
	cublasLtHandle_t handle;
	void *ws;
};
pthread_mutex_t lt_lock = PTHREAD_MUTEX_INITIALIZER;
lt_slot lt_cache[KN_CUBLAS_CACHE];
int lt_n;
} // namespace

/* The cuBLASLt handle and workspace of (current device, stream); false (error
 * recorded) on failure. Created on first use, kept until kn_cuda_lt_release. */
static bool kn_lt_get(cudaStream_t stream, cublasLtHandle_t *h, void **ws)
{
	int dev = 0;
	cudaError_t ce = cudaGetDevice(&dev);
	if (ce != cudaSuccess) {
		kn_cuda_set_error(-EIO, "cublasLt cudaGetDevice", cudaGetErrorString(ce));
		return false;
	}
	bool ok = false;
	pthread_mutex_lock(&lt_lock);
	for (int i = 0; i < lt_n; i++) {
		if (lt_cache[i].dev == dev && lt_cache[i].stream == stream) {
			*h = lt_cache[i].handle;
			*ws = lt_cache[i].ws;
			ok = true;
			goto unlock;
		}
	}
	if (lt_n == KN_CUBLAS_CACHE) {
		kn_cuda_set_error(-ENOSPC, "cublasLt handle", "cache full");
		goto unlock;
	}
	{
		cublasLtHandle_t nh;
		cublasStatus_t st = cublasLtCreate(&nh);
		if (st != CUBLAS_STATUS_SUCCESS) {
			kn_cuda_set_error(-EIO, "cublasLtCreate", cublasGetStatusString(st));
			goto unlock;
		}
		void *w = NULL;
		ce = cudaMalloc(&w, KN_LT_WS_BYTES);
		if (ce != cudaSuccess) {
			cublasLtDestroy(nh);
			kn_cuda_set_error(-ENOMEM, "cublasLt workspace", cudaGetErrorString(ce));
			goto unlock;
		}
		lt_cache[lt_n].dev = dev;
		lt_cache[lt_n].stream = stream;
		lt_cache[lt_n].handle = nh;
		lt_cache[lt_n].ws = w;
		lt_n++;
		*h = nh;
		*ws = w;
		ok = true;
	}
unlock:
	pthread_mutex_unlock(&lt_lock);
	return ok;
}

void kn_cuda_lt_release(void)
{
	pthread_mutex_lock(&lt_lock);
	for (int i = 0; i < lt_n; i++) {
		int cur = 0;
		if (cudaGetDevice(&cur) == cudaSuccess &&
		    cudaSetDevice(lt_cache[i].dev) == cudaSuccess) {
			cudaFree(lt_cache[i].ws);
			cudaSetDevice(cur);
		}
		cublasLtDestroy(lt_cache[i].handle);
	}
	lt_n = 0;
	pthread_mutex_unlock(&lt_lock);
}

static uint32_t kn_lt_align(const void *p)
{
	uintptr_t a = (uintptr_t)p;
	uint32_t al = 256;
	while (al > 2 && (a % al) != 0)
		al /= 2;
	return al;
}

#define KN_LT_CHECK(call)                                                           \
	do {                                                                        \
		cublasStatus_t st_ = (call);                                        \
		if (st_ != CUBLAS_STATUS_SUCCESS) {                                 \
			kn_cuda_set_error(-EIO, #call, cublasGetStatusString(st_)); \
			goto done;                                                  \
		}                                                                   \
	} while (0)

/* Column-major D (m x n, ldd) = op(A) op(B) + beta D, bf16 A, B, D, fp32
 * compute; bias (m, bf16) added in the epilogue when not NULL. op(A) is m x k
 * (A stored k x m when ta), op(B) k x n (B stored n x k when tb). */
static void kn_lt_gemm(cudaStream_t s, bool ta, bool tb, int m, int n, int k, const bf16 *A,
                       int lda, const bf16 *B, int ldb, float beta, bf16 *D, int ldd,
                       const bf16 *bias)
{
	cublasLtHandle_t h;
	void *ws;
	if (!kn_lt_get(s, &h, &ws))
		return;
	cublasLtMatmulDesc_t op = NULL;
	cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
	cublasLtMatmulPreference_t pref = NULL;
	cublasLtMatmulHeuristicResult_t res;
	int nres = 0;
	float alpha = 1.0f;
	cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N,
	                  opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
	size_t wsz = KN_LT_WS_BYTES;
	uint32_t aa = kn_lt_align(A), ab = kn_lt_align(B), ad = kn_lt_align(D);
	KN_LT_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
	KN_LT_CHECK(
	    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
	KN_LT_CHECK(
	    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
	if (bias) {
		cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
		cudaDataType_t bt = CUDA_R_16BF;
		KN_LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
		                                           sizeof(epi)));
		KN_LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
		                                           &bias, sizeof(bias)));
		KN_LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
		                                           &bt, sizeof(bt)));
	}
	KN_LT_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, ta ? k : m, ta ? m : k, lda));
	KN_LT_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, tb ? n : k, tb ? k : n, ldb));
	KN_LT_CHECK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, m, n, ldd));
	KN_LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
	KN_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(
	    pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsz, sizeof(wsz)));
	KN_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(
	    pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof(aa)));
	KN_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(
	    pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof(ab)));
	KN_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(
	    pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ad, sizeof(ad)));
	KN_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(
	    pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ad, sizeof(ad)));
	KN_LT_CHECK(cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, ld, ld, pref, 1, &res, &nres));
	if (nres == 0) {
		kn_cuda_set_error(-ENOTSUP, "cublasLtMatmulAlgoGetHeuristic", "no algorithm");
		goto done;
	}
	KN_LT_CHECK(cublasLtMatmul(h, op, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &res.algo, ws,
	                           wsz, s));
done:
	if (pref)
		cublasLtMatmulPreferenceDestroy(pref);
	if (ld)
		cublasLtMatrixLayoutDestroy(ld);
	if (lb)
		cublasLtMatrixLayoutDestroy(lb);
	if (la)
		cublasLtMatrixLayoutDestroy(la);
	if (op)
		cublasLtMatmulDescDestroy(op);
}

/* Row-major out (BT, OC) is column-major (OC x BT): out^T = W (C x OC col-major)^T inp^T. */
void kn_matmul_forward_cuda_bf16(const struct kn_matmul_fwd_args *a, cudaStream_t s)
{
	int BT = a->B * a->T;
	kn_lt_gemm(s, true, false, a->OC, BT, a->C, (const bf16 *)a->weight, a->C,
	           (const bf16 *)a->inp, a->C, 0.0f, (bf16 *)a->out, a->OC, (const bf16 *)a->bias);
}

void kn_matmul_backward_cuda_bf16(const struct kn_matmul_bwd_args *a, cudaStream_t s)
{
	int BT = a->B * a->T, C = a->C, OC = a->OC;
	const bf16 *dout = (const bf16 *)a->dout;
	/* dinp^T (C x BT) += W^T-view (C x OC) dout^T (OC x BT) */
	if (a->dinp)
		kn_lt_gemm(s, false, false, C, BT, OC, (const bf16 *)a->weight, C, dout, OC, 1.0f,
		           (bf16 *)a->dinp, C, NULL);
	/* dW^T (C x OC) += inp^T (C x BT) dout (BT x OC) */
	if (a->dweight)
		kn_lt_gemm(s, false, true, C, OC, BT, (const bf16 *)a->inp, C, dout, OC, 1.0f,
		           (bf16 *)a->dweight, C, NULL);
	if (a->dbias) {
		kn_colsum_bf16_kernel<<<(OC + 31) / 32, dim3(32, 32), 0, s>>>((bf16 *)a->dbias,
		                                                              dout, BT, OC);
		kn_cuda_check_launch("matmul_backward bf16 bias");
	}
}

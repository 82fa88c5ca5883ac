/* kernels/cuda_flash.cu — causal multi-head attention in bf16, flash style.
 *
 * Forward: one block of 4 warps per (64 queries, b, head); K/V tiles of 64 keys
 * go through shared memory, S = q k^T and P v run on tensor cores (wmma bf16
 * 16x16x16, fp32 accumulate); the softmax is online (running max and sum per
 * row in fp32). Saves only out (B,T,C) and the logsumexp of each row (B,NH,T),
 * never a T x T matrix. Backward: D = rowsum(dout * out) (ws), then two
 * kernels that recompute P from q, k and the logsumexp: one per 64 keys
 * accumulates dK and dV, one per 64 queries accumulates dQ, so every output
 * element has one writer (no atomics, deterministic); each adds its fp32 sum to
 * dinp once, rounding to bf16 (the += convention).
 * The head size hs <= 128 runs padded to HSP in {16, 32, 64, 128} (zeros in
 * shared memory); rows past T load as zeros and are masked.
 */
#include "kernels/cuda_common.cuh"

#include <cuda_bf16.h>
#include <math.h>
#include <mma.h>
#include <stdint.h>

using namespace nvcuda;
typedef __nv_bfloat16 bf16;

#define FA_TILE    64 /* queries and keys per tile */
#define FA_WARPS   4  /* 16 rows each */
#define FA_THREADS (32 * FA_WARPS)
#define FA_LOG2E   1.4426950408889634f
#define FA_LDS     (FA_TILE + 4) /* fp32 scratch row stride (floats) */
#define FA_LDP     (FA_TILE + 8) /* bf16 P / dS row stride (elements) */

template <int HSP> struct fa_dims {
	static constexpr int LDH = HSP + 8;                      /* bf16 tile row stride */
	static constexpr int LDO = HSP + 4;                      /* fp32 output scratch stride */
	static constexpr size_t TILE = (size_t)FA_TILE * LDH * 2; /* bytes of one q/k/v tile */
	static constexpr size_t SW = 16 * (LDO > FA_LDS ? LDO : FA_LDS) * 4; /* per warp */
	static constexpr size_t DP = 16 * FA_LDS * 4;                         /* per warp */
	static constexpr size_t PW = 16 * FA_LDP * 2;                         /* per warp */
};

/* Loads a 64 x HSP tile (row r of the tile at src + r*stride) into dst (stride
 * LDH), zero past rows_valid rows and hs columns; 16-byte loads when vec. */
template <int HSP>
__device__ void fa_load_tile(bf16 *dst, const bf16 *src, int rows_valid, int hs, long stride,
                             bool vec)
{
	constexpr int CH = HSP / 8, LDH = fa_dims<HSP>::LDH;
	for (int i = threadIdx.x; i < FA_TILE * CH; i += blockDim.x) {
		int r = i / CH, c = (i % CH) * 8;
		uint4 v = make_uint4(0, 0, 0, 0);
		if (r < rows_valid) {
			const bf16 *s = src + (long)r * stride + c;
			if (vec && c + 8 <= hs) {
				v = *reinterpret_cast<const uint4 *>(s);
			} else {
				bf16 t[8];
#pragma unroll
				for (int e = 0; e < 8; e++)
					t[e] = c + e < hs ? s[e] : __float2bfloat16_rn(0.0f);
				memcpy(&v, t, sizeof(v));
			}
		}
		*reinterpret_cast<uint4 *>(dst + r * LDH + c) = v;
	}
}

__device__ __forceinline__ unsigned char *fa_align(unsigned char *p)
{
	return (unsigned char *)(((uintptr_t)p + 127) & ~(uintptr_t)127);
}

typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa_a;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> fa_bt;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> fa_b;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> fa_acc;

/* out (16 x 64 fp32, stride FA_LDS) = X (16 rows at x, stride LDH) Y^T (64 rows at y). */
template <int HSP> __device__ void fa_xyt(float *out, const bf16 *x, const bf16 *y)
{
	constexpr int LDH = fa_dims<HSP>::LDH;
#pragma unroll
	for (int n = 0; n < FA_TILE / 16; n++) {
		fa_acc acc;
		wmma::fill_fragment(acc, 0.0f);
#pragma unroll
		for (int k = 0; k < HSP / 16; k++) {
			fa_a a;
			fa_bt b;
			wmma::load_matrix_sync(a, x + k * 16, LDH);
			wmma::load_matrix_sync(b, y + n * 16 * LDH + k * 16, LDH);
			wmma::mma_sync(acc, a, b, acc);
		}
		wmma::store_matrix_sync(out + n * 16, acc, FA_LDS, wmma::mem_row_major);
	}
}

/* acc[n] += P (16 x 64 bf16 at p, stride FA_LDP) Y (64 x HSP at y, stride LDH). */
template <int HSP> __device__ void fa_py(fa_acc *acc, const bf16 *p, const bf16 *y)
{
	constexpr int LDH = fa_dims<HSP>::LDH;
#pragma unroll
	for (int n = 0; n < HSP / 16; n++) {
#pragma unroll
		for (int k = 0; k < FA_TILE / 16; k++) {
			fa_a a;
			fa_b b;
			wmma::load_matrix_sync(a, p + k * 16, FA_LDP);
			wmma::load_matrix_sync(b, y + k * 16 * LDH + n * 16, LDH);
			wmma::mma_sync(acc[n], a, b, acc[n]);
		}
	}
}

/* Index of the tile and (b,h) a block works on: heavy tiles first. */
struct fa_pos {
	int tile, bh, b, h;
};
__device__ __forceinline__ fa_pos fa_where(int NH, int ntiles, bool heavy_high)
{
	int BH = gridDim.x / ntiles;
	int i = blockIdx.x / BH;
	fa_pos p;
	p.bh = blockIdx.x % BH;
	p.tile = heavy_high ? ntiles - 1 - i : i;
	p.b = p.bh / NH;
	p.h = p.bh % NH;
	return p;
}

template <int HSP>
__global__ void __launch_bounds__(FA_THREADS)
    kn_flash_fwd_kernel(bf16 *out, float *lse, const bf16 *inp, int T, int C, int NH, int hs,
                        float scale, bool vec)
{
	typedef fa_dims<HSP> D;
	extern __shared__ unsigned char fa_smem[];
	unsigned char *sp = fa_align(fa_smem);
	bf16 *Qs = (bf16 *)sp;
	bf16 *Ks = (bf16 *)(sp + D::TILE);
	bf16 *Vs = (bf16 *)(sp + 2 * D::TILE);
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	float *Sw = (float *)(sp + 3 * D::TILE + warp * D::SW);
	bf16 *Pw = (bf16 *)(sp + 3 * D::TILE + FA_WARPS * D::SW + warp * D::PW);

	int ntiles = (T + FA_TILE - 1) / FA_TILE;
	fa_pos P = fa_where(NH, ntiles, true);
	int q0 = P.tile * FA_TILE;
	long stride = 3L * C;
	const bf16 *base = inp + (long)P.b * T * stride + (long)P.h * hs;
	fa_load_tile<HSP>(Qs, base + (long)q0 * stride, T - q0, hs, stride, vec);

	const int r = lane >> 1, half = lane & 1; /* this lane's row and half of the columns */
	const int qi = q0 + warp * 16 + r;
	const float sl2 = scale * FA_LOG2E;
	float m = -INFINITY, l = 0.0f;
	float o[HSP / 2];
#pragma unroll
	for (int j = 0; j < HSP / 2; j++)
		o[j] = 0.0f;

	for (int kb = 0; kb <= P.tile; kb++) {
		int k0 = kb * FA_TILE;
		__syncthreads(); /* everyone is done with the previous K, V */
		fa_load_tile<HSP>(Ks, base + (long)k0 * stride + C, T - k0, hs, stride, vec);
		fa_load_tile<HSP>(Vs, base + (long)k0 * stride + 2 * C, T - k0, hs, stride, vec);
		__syncthreads();
		fa_xyt<HSP>(Sw, Qs + warp * 16 * D::LDH, Ks);
		__syncwarp();
		/* online softmax on row r, columns half*32 .. +31 (log2 domain) */
		float sv[32], mx = -INFINITY;
#pragma unroll
		for (int j = 0; j < 32; j++) {
			int c = half * 32 + j;
			float s = Sw[r * FA_LDS + c] * sl2;
			sv[j] = k0 + c > qi ? -INFINITY : s;
			mx = fmaxf(mx, sv[j]);
		}
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
		float mnew = fmaxf(m, mx); /* finite: key 0 is unmasked in the first tile */
		float alpha = exp2f(m - mnew);
		float ps = 0.0f;
#pragma unroll
		for (int j = 0; j < 32; j++) {
			float p = exp2f(sv[j] - mnew);
			ps += p;
			Pw[r * FA_LDP + half * 32 + j] = __float2bfloat16_rn(p);
		}
		ps += __shfl_xor_sync(0xffffffffu, ps, 1);
		l = l * alpha + ps;
		m = mnew;
		__syncwarp();
		/* P V into the scratch, then o = o * alpha + P V */
		fa_acc acc[HSP / 16];
#pragma unroll
		for (int n = 0; n < HSP / 16; n++)
			wmma::fill_fragment(acc[n], 0.0f);
		fa_py<HSP>(acc, Pw, Vs);
#pragma unroll
		for (int n = 0; n < HSP / 16; n++)
			wmma::store_matrix_sync(Sw + n * 16, acc[n], D::LDO, wmma::mem_row_major);
		__syncwarp();
#pragma unroll
		for (int j = 0; j < HSP / 2; j++)
			o[j] = o[j] * alpha + Sw[r * D::LDO + half * (HSP / 2) + j];
		__syncwarp();
	}
	if (qi < T) {
		float inv = 1.0f / l;
		bf16 *dst = out + ((long)P.b * T + qi) * C + (long)P.h * hs + half * (HSP / 2);
#pragma unroll
		for (int j = 0; j < HSP / 2; j++)
			if (half * (HSP / 2) + j < hs)
				dst[j] = __float2bfloat16_rn(o[j] * inv);
		if (half == 0)
			lse[(long)P.bh * T + qi] = m / FA_LOG2E + logf(l);
	}
}

/* D[bh, t] = sum_d dout[b,t,h,d] * out[b,t,h,d]: one warp per (b, t, h). */
__global__ void kn_flash_d_kernel(float *Dv, const bf16 *dout, const bf16 *out, int B, int T,
                                  int NH, int hs)
{
	long row = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
	int lane = threadIdx.x % 32;
	if (row >= (long)B * T * NH)
		return;
	int h = row % NH;
	long bt = row / NH;
	int b = bt / T, t = bt % T;
	long o = bt * NH * hs + (long)h * hs;
	float s = 0.0f;
	for (int d = lane; d < hs; d += 32)
		s += __bfloat162float(dout[o + d]) * __bfloat162float(out[o + d]);
	for (int k = 16; k > 0; k /= 2)
		s += __shfl_xor_sync(0xffffffffu, s, k);
	if (lane == 0)
		Dv[((long)b * NH + h) * T + t] = s;
}

/* dinp[row, col .. col+hs) += scale * acc, one row per lane pair, from the
 * per-warp fp32 scratch (16 x HSP, stride LDO) of fragments acc. */
template <int HSP>
__device__ void fa_add_out(bf16 *dinp, float *scr, fa_acc *acc, long row0_off, long row_stride,
                           int rows_valid, int hs, float scale)
{
	constexpr int LDO = fa_dims<HSP>::LDO;
	int lane = threadIdx.x % 32, r = lane >> 1, half = lane & 1;
#pragma unroll
	for (int n = 0; n < HSP / 16; n++)
		wmma::store_matrix_sync(scr + n * 16, acc[n], LDO, wmma::mem_row_major);
	__syncwarp();
	if (r < rows_valid) {
		bf16 *dst = dinp + row0_off + (long)r * row_stride + half * (HSP / 2);
#pragma unroll
		for (int j = 0; j < HSP / 2; j++)
			if (half * (HSP / 2) + j < hs)
				dst[j] = __float2bfloat16_rn(__bfloat162float(dst[j]) +
				                             scale * scr[r * LDO + half * (HSP / 2) + j]);
	}
	__syncwarp();
}

/* dK, dV for 64 keys: loops over the query tiles at and after the diagonal. */
template <int HSP>
__global__ void __launch_bounds__(FA_THREADS)
    kn_flash_bwd_dkdv_kernel(bf16 *dinp, const bf16 *inp, const bf16 *dout, const float *lse,
                             const float *Dv, int T, int C, int NH, int hs, float scale,
                             bool vec_in, bool vec_out)
{
	typedef fa_dims<HSP> D;
	extern __shared__ unsigned char fa_smem[];
	unsigned char *sp = fa_align(fa_smem);
	bf16 *Ks = (bf16 *)sp;
	bf16 *Vs = (bf16 *)(sp + D::TILE);
	bf16 *Qs = (bf16 *)(sp + 2 * D::TILE);
	bf16 *dOs = (bf16 *)(sp + 3 * D::TILE);
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	unsigned char *w0 = sp + 4 * D::TILE;
	float *Sw = (float *)(w0 + warp * D::DP);
	float *dPw = (float *)(w0 + FA_WARPS * D::DP + warp * D::DP);
	bf16 *Pw = (bf16 *)(w0 + 2 * FA_WARPS * D::DP + warp * D::PW);
	bf16 *dSw = (bf16 *)(w0 + 2 * FA_WARPS * D::DP + FA_WARPS * D::PW + warp * D::PW);
	float *lse_s = (float *)(w0 + 2 * FA_WARPS * D::DP + 2 * FA_WARPS * D::PW);
	float *D_s = lse_s + FA_TILE;

	int ntiles = (T + FA_TILE - 1) / FA_TILE;
	fa_pos P = fa_where(NH, ntiles, false);
	int k0 = P.tile * FA_TILE;
	long stride = 3L * C;
	const bf16 *base = inp + (long)P.b * T * stride + (long)P.h * hs;
	const bf16 *dobase = dout + (long)P.b * T * C + (long)P.h * hs;
	fa_load_tile<HSP>(Ks, base + (long)k0 * stride + C, T - k0, hs, stride, vec_in);
	fa_load_tile<HSP>(Vs, base + (long)k0 * stride + 2 * C, T - k0, hs, stride, vec_in);

	const int r = lane >> 1, half = lane & 1;
	const int kj = k0 + warp * 16 + r;
	const float sl2 = scale * FA_LOG2E;
	fa_acc dk[HSP / 16], dv[HSP / 16];
#pragma unroll
	for (int n = 0; n < HSP / 16; n++) {
		wmma::fill_fragment(dk[n], 0.0f);
		wmma::fill_fragment(dv[n], 0.0f);
	}
	for (int qb = P.tile; qb < ntiles; qb++) {
		int q0 = qb * FA_TILE;
		__syncthreads(); /* everyone is done with the previous Q, dO */
		fa_load_tile<HSP>(Qs, base + (long)q0 * stride, T - q0, hs, stride, vec_in);
		fa_load_tile<HSP>(dOs, dobase + (long)q0 * C, T - q0, hs, C, vec_out);
		for (int i = threadIdx.x; i < FA_TILE; i += blockDim.x) {
			bool ok = q0 + i < T;
			lse_s[i] = ok ? lse[(long)P.bh * T + q0 + i] * FA_LOG2E : 0.0f;
			D_s[i] = ok ? Dv[(long)P.bh * T + q0 + i] : 0.0f;
		}
		__syncthreads();
		fa_xyt<HSP>(Sw, Ks + warp * 16 * D::LDH, Qs);   /* S^T: keys x queries */
		fa_xyt<HSP>(dPw, Vs + warp * 16 * D::LDH, dOs); /* dP^T = V dO^T */
		__syncwarp();
#pragma unroll 8
		for (int j = 0; j < 32; j++) {
			int c = half * 32 + j, qi = q0 + c;
			float p = 0.0f;
			if (qi >= kj && qi < T)
				p = exp2f(Sw[r * FA_LDS + c] * sl2 - lse_s[c]);
			float ds = p * (dPw[r * FA_LDS + c] - D_s[c]);
			Pw[r * FA_LDP + c] = __float2bfloat16_rn(p);
			dSw[r * FA_LDP + c] = __float2bfloat16_rn(ds);
		}
		__syncwarp();
		fa_py<HSP>(dv, Pw, dOs); /* dV += P^T dO */
		fa_py<HSP>(dk, dSw, Qs); /* dK += dS^T Q (scaled at the end) */
		__syncwarp();
	}
	__syncthreads(); /* the tiles are free: reuse Qs.. as fp32 output scratch */
	float *scr = (float *)(sp + 2 * D::TILE) + warp * 16 * D::LDO;
	long row0 = ((long)P.b * T + k0 + warp * 16) * stride + (long)P.h * hs;
	int rows_valid = T - (k0 + warp * 16);
	fa_add_out<HSP>(dinp, scr, dk, row0 + C, stride, rows_valid, hs, scale);
	fa_add_out<HSP>(dinp, scr, dv, row0 + 2 * C, stride, rows_valid, hs, 1.0f);
}

/* dQ for 64 queries: loops over the key tiles up to the diagonal. */
template <int HSP>
__global__ void __launch_bounds__(FA_THREADS)
    kn_flash_bwd_dq_kernel(bf16 *dinp, const bf16 *inp, const bf16 *dout, const float *lse,
                           const float *Dv, int T, int C, int NH, int hs, float scale, bool vec_in,
                           bool vec_out)
{
	typedef fa_dims<HSP> D;
	extern __shared__ unsigned char fa_smem[];
	unsigned char *sp = fa_align(fa_smem);
	bf16 *Qs = (bf16 *)sp;
	bf16 *dOs = (bf16 *)(sp + D::TILE);
	bf16 *Ks = (bf16 *)(sp + 2 * D::TILE);
	bf16 *Vs = (bf16 *)(sp + 3 * D::TILE);
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	unsigned char *w0 = sp + 4 * D::TILE;
	float *Sw = (float *)(w0 + warp * D::DP);
	float *dPw = (float *)(w0 + FA_WARPS * D::DP + warp * D::DP);
	bf16 *dSw = (bf16 *)(w0 + 2 * FA_WARPS * D::DP + warp * D::PW);
	float *lse_s = (float *)(w0 + 2 * FA_WARPS * D::DP + FA_WARPS * D::PW);
	float *D_s = lse_s + FA_TILE;

	int ntiles = (T + FA_TILE - 1) / FA_TILE;
	fa_pos P = fa_where(NH, ntiles, true);
	int q0 = P.tile * FA_TILE;
	long stride = 3L * C;
	const bf16 *base = inp + (long)P.b * T * stride + (long)P.h * hs;
	const bf16 *dobase = dout + (long)P.b * T * C + (long)P.h * hs;
	fa_load_tile<HSP>(Qs, base + (long)q0 * stride, T - q0, hs, stride, vec_in);
	fa_load_tile<HSP>(dOs, dobase + (long)q0 * C, T - q0, hs, C, vec_out);
	for (int i = threadIdx.x; i < FA_TILE; i += blockDim.x) {
		bool ok = q0 + i < T;
		lse_s[i] = ok ? lse[(long)P.bh * T + q0 + i] * FA_LOG2E : 0.0f;
		D_s[i] = ok ? Dv[(long)P.bh * T + q0 + i] : 0.0f;
	}

	const int r = lane >> 1, half = lane & 1;
	const int qr = warp * 16 + r, qi = q0 + qr;
	const float sl2 = scale * FA_LOG2E;
	fa_acc dq[HSP / 16];
#pragma unroll
	for (int n = 0; n < HSP / 16; n++)
		wmma::fill_fragment(dq[n], 0.0f);
	for (int kb = 0; kb <= P.tile; kb++) {
		int k0 = kb * FA_TILE;
		__syncthreads(); /* everyone is done with the previous K, V (and the Q loads) */
		fa_load_tile<HSP>(Ks, base + (long)k0 * stride + C, T - k0, hs, stride, vec_in);
		fa_load_tile<HSP>(Vs, base + (long)k0 * stride + 2 * C, T - k0, hs, stride, vec_in);
		__syncthreads();
		fa_xyt<HSP>(Sw, Qs + warp * 16 * D::LDH, Ks);   /* S = Q K^T */
		fa_xyt<HSP>(dPw, dOs + warp * 16 * D::LDH, Vs); /* dP = dO V^T */
		__syncwarp();
		float L = lse_s[qr], Dq = D_s[qr];
#pragma unroll 8
		for (int j = 0; j < 32; j++) {
			int c = half * 32 + j, kk = k0 + c;
			float p = 0.0f;
			if (kk <= qi && qi < T)
				p = exp2f(Sw[r * FA_LDS + c] * sl2 - L);
			dSw[r * FA_LDP + c] = __float2bfloat16_rn(p * (dPw[r * FA_LDS + c] - Dq));
		}
		__syncwarp();
		fa_py<HSP>(dq, dSw, Ks); /* dQ += dS K (scaled at the end) */
		__syncwarp();
	}
	__syncthreads(); /* reuse the K, V tiles as fp32 output scratch */
	float *scr = (float *)(sp + 2 * D::TILE) + warp * 16 * D::LDO;
	long row0 = ((long)P.b * T + q0 + warp * 16) * stride + (long)P.h * hs;
	fa_add_out<HSP>(dinp, scr, dq, row0, stride, T - (q0 + warp * 16), hs, scale);
}

/* ---- launchers ---- */
template <int HSP> static size_t fa_fwd_smem()
{
	typedef fa_dims<HSP> D;
	return 128 + 3 * D::TILE + FA_WARPS * (D::SW + D::PW);
}

template <int HSP> static size_t fa_bwd_smem()
{
	typedef fa_dims<HSP> D;
	/* 4 tiles, S and dP fp32, P and dS bf16, lse and D; the output scratch
	 * (4 warps x 16 x LDO fp32) reuses two tiles */
	static_assert(FA_WARPS * 16 * D::LDO * 4 <= 2 * D::TILE, "output scratch fits 2 tiles");
	return 128 + 4 * D::TILE + FA_WARPS * (2 * D::DP + 2 * D::PW) + 2 * FA_TILE * 4;
}

static bool fa_aligned(const void *p)
{
	return ((uintptr_t)p & 15) == 0;
}

static bool fa_set_smem(const void *fn, size_t bytes, const char *what)
{
	cudaError_t e =
	    cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
	if (e != cudaSuccess) {
		kn_cuda_set_error(-EIO, what, cudaGetErrorString(e));
		return false;
	}
	return true;
}

template <int HSP>
static void fa_forward(const struct kn_attention_fwd_args *a, cudaStream_t s, float scale)
{
	int hs = a->C / a->NH, ntiles = (a->T + FA_TILE - 1) / FA_TILE;
	bool vec = hs % 8 == 0 && a->C % 8 == 0 && fa_aligned(a->inp);
	size_t smem = fa_fwd_smem<HSP>();
	if (!fa_set_smem((const void *)kn_flash_fwd_kernel<HSP>, smem, "attention_forward bf16"))
		return;
	long blocks = (long)ntiles * a->B * a->NH;
	kn_flash_fwd_kernel<HSP><<<(unsigned)blocks, FA_THREADS, smem, s>>>(
	    (bf16 *)a->out, (float *)a->att, (const bf16 *)a->inp, a->T, a->C, a->NH, hs, scale,
	    vec);
	kn_cuda_check_launch("attention_forward bf16");
}

template <int HSP>
static void fa_backward(const struct kn_attention_bwd_args *a, cudaStream_t s, float scale)
{
	int hs = a->C / a->NH, ntiles = (a->T + FA_TILE - 1) / FA_TILE;
	bool vec_in = hs % 8 == 0 && a->C % 8 == 0 && fa_aligned(a->inp);
	bool vec_out = hs % 8 == 0 && a->C % 8 == 0 && fa_aligned(a->dout);
	float *Dv = (float *)a->ws;
	long rows = (long)a->B * a->T * a->NH;
	kn_flash_d_kernel<<<(unsigned)((rows + 7) / 8), 256, 0, s>>>(
	    Dv, (const bf16 *)a->dout, (const bf16 *)a->out, a->B, a->T, a->NH, hs);
	kn_cuda_check_launch("attention_backward bf16 D");
	size_t smem = fa_bwd_smem<HSP>();
	if (!fa_set_smem((const void *)kn_flash_bwd_dkdv_kernel<HSP>, smem,
	                 "attention_backward bf16 dkdv") ||
	    !fa_set_smem((const void *)kn_flash_bwd_dq_kernel<HSP>, smem,
	                 "attention_backward bf16 dq"))
		return;
	long blocks = (long)ntiles * a->B * a->NH;
	kn_flash_bwd_dkdv_kernel<HSP><<<(unsigned)blocks, FA_THREADS, smem, s>>>(
	    (bf16 *)a->dinp, (const bf16 *)a->inp, (const bf16 *)a->dout, (const float *)a->att,
	    Dv, a->T, a->C, a->NH, hs, scale, vec_in, vec_out);
	kn_cuda_check_launch("attention_backward bf16 dkdv");
	kn_flash_bwd_dq_kernel<HSP><<<(unsigned)blocks, FA_THREADS, smem, s>>>(
	    (bf16 *)a->dinp, (const bf16 *)a->inp, (const bf16 *)a->dout, (const float *)a->att,
	    Dv, a->T, a->C, a->NH, hs, scale, vec_in, vec_out);
	kn_cuda_check_launch("attention_backward bf16 dq");
}

void kn_attention_forward_cuda_bf16(const struct kn_attention_fwd_args *a, cudaStream_t s)
{
	int hs = a->C / a->NH;
	float scale = 1.0f / sqrtf((float)hs);
	if (hs <= 16)
		fa_forward<16>(a, s, scale);
	else if (hs <= 32)
		fa_forward<32>(a, s, scale);
	else if (hs <= 64)
		fa_forward<64>(a, s, scale);
	else if (hs <= 128)
		fa_forward<128>(a, s, scale);
	else
		kn_cuda_set_error(-ENOTSUP, "attention_forward bf16", "head size over 128");
}

void kn_attention_backward_cuda_bf16(const struct kn_attention_bwd_args *a, cudaStream_t s)
{
	int hs = a->C / a->NH;
	float scale = 1.0f / sqrtf((float)hs);
	if (hs <= 16)
		fa_backward<16>(a, s, scale);
	else if (hs <= 32)
		fa_backward<32>(a, s, scale);
	else if (hs <= 64)
		fa_backward<64>(a, s, scale);
	else if (hs <= 128)
		fa_backward<128>(a, s, scale);
	else
		kn_cuda_set_error(-ENOTSUP, "attention_backward bf16", "head size over 128");
}

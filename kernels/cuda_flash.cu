/* kernels/cuda_flash.cu — causal multi-head attention in bf16, flash style.
 *
 * Forward: one block of 4 warps per (64 queries, b, head), each warp owning 16
 * query rows; K/V tiles of 64 keys go through shared memory; S = q k^T and
 * P v run on the tensor cores (mma.sync m16n8k16, bf16 in, fp32 accumulate)
 * with the accumulators in registers, so the online softmax (running max and
 * sum per row, fp32) works on registers and P feeds the next product without a
 * trip through memory (the accumulator layout of one mma is the A layout of
 * the next). Saves only out (B,T,C) and each row's logsumexp (B,NH,T), never
 * a T x T matrix. Backward: D = rowsum(dout * out) (ws), then two kernels that
 * recompute P from q, k and the logsumexp: one per 64 keys (a warp per 16
 * keys) accumulates dK and dV, one per 64 queries accumulates dQ, so every
 * output element has one writer (no atomics, deterministic); each adds its
 * fp32 sum to dinp once, rounding to bf16 (the += convention).
 * The head size hs <= 128 runs padded to HSP in {16, 32, 64, 128} (zeros in
 * shared memory); rows past T load as zeros and are masked.
 *
 * Fragment layouts (PTX ISA, mma.m16n8k16 .bf16): with g = lane / 4 and
 * t = lane % 4, A (16 x 16, row) regs a0..a3 hold (g, 2t..2t+1), (g+8, 2t..),
 * (g, 2t+8..), (g+8, 2t+8..); B (16 x 8, col) b0, b1 hold (k 2t..2t+1, n g),
 * (k 2t+8.., n g); C (16 x 8) c0, c1 at (g, 2t..2t+1), c2, c3 at (g+8, 2t..).
 */
#include "kernels/cuda_common.cuh"

#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

typedef __nv_bfloat16 bf16;

#define FA_TILE    64 /* queries and keys per tile */
#define FA_WARPS   4  /* 16 rows each */
#define FA_THREADS (32 * FA_WARPS)
#define FA_LOG2E   1.4426950408889634f

template <int HSP> struct fa_dims {
	static constexpr int LDH = HSP + 8;                       /* bf16 tile row stride */
	static constexpr size_t TILE = (size_t)FA_TILE * LDH * 2; /* bytes of one tile */
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

/* A tile load through cp.async (16-byte chunks, zero-filled past rows_valid
 * rows and hs columns) when vec, else the synchronous fa_load_tile. Either way
 * the data is visible after fa_wait and a __syncthreads. */
template <int HSP>
__device__ void fa_load(bf16 *dst, const bf16 *src, int rows_valid, int hs, long stride, bool vec)
{
	if (!vec) {
		fa_load_tile<HSP>(dst, src, rows_valid, hs, stride, false);
		return;
	}
	constexpr int CH = HSP / 8, LDH = fa_dims<HSP>::LDH;
	for (int i = threadIdx.x; i < FA_TILE * CH; i += blockDim.x) {
		int r = i / CH, c = (i % CH) * 8;
		bool ok = r < rows_valid && c < hs; /* vec: hs % 8 == 0, so c + 8 <= hs */
		const bf16 *g = ok ? src + (long)r * stride + c : src;
		uint32_t sa = (uint32_t)__cvta_generic_to_shared(dst + r * LDH + c);
		asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(g),
		             "r"(ok ? 16 : 0)
		             : "memory");
	}
}

__device__ __forceinline__ void fa_commit()
{
	asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* waits until at most N of this thread's committed groups are in flight */
template <int N> __device__ __forceinline__ void fa_wait()
{
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* two fp32 as a bf16x2 register, lo in the low half (the smaller column) */
__device__ __forceinline__ uint32_t fa_pack(float lo, float hi)
{
	__nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
	return *reinterpret_cast<uint32_t *>(&v);
}

__device__ __forceinline__ uint32_t fa_ld32(const bf16 *p)
{
	return *reinterpret_cast<const uint32_t *>(p);
}

/* c += a b on the tensor cores: m16n8k16, bf16 inputs, fp32 accumulators */
__device__ __forceinline__ void fa_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
	             "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
	             : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* The A fragment of the 16 x 16 block at p (row-major, stride ld elements). */
__device__ __forceinline__ void fa_lda(uint32_t a[4], const bf16 *p, int ld)
{
	int lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
	a[0] = fa_ld32(p + g * ld + 2 * t);
	a[1] = fa_ld32(p + (g + 8) * ld + 2 * t);
	a[2] = fa_ld32(p + g * ld + 2 * t + 8);
	a[3] = fa_ld32(p + (g + 8) * ld + 2 * t + 8);
}

/* The B fragment (k 16 x n 8) of X^T where X is row-major with n along its
 * rows: rows n0.. of X at p (k along the row), stride ld. */
__device__ __forceinline__ void fa_ldbt(uint32_t &b0, uint32_t &b1, const bf16 *p, int ld)
{
	int lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
	b0 = fa_ld32(p + g * ld + 2 * t);
	b1 = fa_ld32(p + g * ld + 2 * t + 8);
}

/* The B fragments of two n-tiles (n0, n0+8) of a row-major k x n block at p
 * (k along rows, stride ld): ldmatrix .trans, lane l gives the address of row
 * l % 16, column 8 * (l / 16). */
__device__ __forceinline__ void fa_ldb2(uint32_t b[4], const bf16 *p, int ld)
{
	int lane = threadIdx.x % 32;
	const bf16 *row = p + (lane & 15) * ld + 8 * (lane >> 4);
	uint32_t addr = (uint32_t)__cvta_generic_to_shared(row);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
	             : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
	             : "r"(addr));
}

/* acc[dn] (16 x HSP) += P (16 x 16*KS, as C fragments s[2*KS][4]) Y (16*KS rows
 * of a row-major tile at y, stride ld) */
template <int HSP, int KS>
__device__ __forceinline__ void fa_pv(float acc[][4], float s[][4], const bf16 *y, int ld)
{
#pragma unroll
	for (int j = 0; j < KS; j++) {
		uint32_t a[4] = {fa_pack(s[2 * j][0], s[2 * j][1]),
		                 fa_pack(s[2 * j][2], s[2 * j][3]),
		                 fa_pack(s[2 * j + 1][0], s[2 * j + 1][1]),
		                 fa_pack(s[2 * j + 1][2], s[2 * j + 1][3])};
#pragma unroll
		for (int dn = 0; dn < HSP / 8; dn += 2) {
			uint32_t b[4];
			fa_ldb2(b, y + j * 16 * ld + dn * 8, ld);
			fa_mma(acc[dn], a, b[0], b[1]);
			fa_mma(acc[dn + 1], a, b[2], b[3]);
		}
	}
}

/* s[n] (16 x 8*NT) += X (16 rows at x) Y^T (8*NT rows at y), both row-major
 * with HSP columns, stride ld */
template <int HSP, int NT>
__device__ __forceinline__ void fa_xyt(float s[][4], const bf16 *x, const bf16 *y, int ld)
{
#pragma unroll
	for (int kk = 0; kk < HSP / 16; kk++) {
		uint32_t a[4];
		fa_lda(a, x + kk * 16, ld);
#pragma unroll
		for (int n = 0; n < NT; n++) {
			uint32_t b0, b1;
			fa_ldbt(b0, b1, y + n * 8 * ld + kk * 16, ld);
			fa_mma(s[n], a, b0, b1);
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
	constexpr int LDH = D::LDH;
	extern __shared__ unsigned char fa_smem[];
	unsigned char *sp = fa_align(fa_smem);
	bf16 *Qs = (bf16 *)sp;
	/* K and V buffers i = 0, 1 (offsets, not arrays: a run-time index of a
	 * local array would go to local memory) */
	auto Kb = [&](int i) { return (bf16 *)(sp + (1 + 2 * i) * D::TILE); };
	auto Vb = [&](int i) { return (bf16 *)(sp + (2 + 2 * i) * D::TILE); };
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;

	int ntiles = (T + FA_TILE - 1) / FA_TILE;
	fa_pos P = fa_where(NH, ntiles, true);
	int q0 = P.tile * FA_TILE;
	long stride = 3L * C;
	const bf16 *base = inp + (long)P.b * T * stride + (long)P.h * hs;
	fa_load<HSP>(Qs, base + (long)q0 * stride, T - q0, hs, stride, vec);
	fa_load<HSP>(Kb(0), base + C, T, hs, stride, vec);
	fa_load<HSP>(Vb(0), base + 2 * C, T, hs, stride, vec);
	fa_commit();

	const int qr0 = q0 + warp * 16 + g, qr1 = qr0 + 8; /* this lane's two rows */
	const float sl2 = scale * FA_LOG2E;
	float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
	float o[HSP / 8][4];
#pragma unroll
	for (int dn = 0; dn < HSP / 8; dn++)
		o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;

	for (int kb = 0; kb <= P.tile; kb++) {
		int k0 = kb * FA_TILE, cur = kb & 1;
		if (kb < P.tile) { /* prefetch the next K, V into the other buffers */
			int k1 = k0 + FA_TILE;
			__syncthreads(); /* everyone is done with them (iteration kb - 1) */
			fa_load<HSP>(Kb(cur ^ 1), base + (long)k1 * stride + C, T - k1, hs, stride,
			             vec);
			fa_load<HSP>(Vb(cur ^ 1), base + (long)k1 * stride + 2 * C, T - k1, hs,
			             stride, vec);
			fa_commit();
			fa_wait<1>(); /* this tile's (and Q's) copies are done */
		} else {
			fa_wait<0>();
		}
		__syncthreads();
		const bf16 *Ks = Kb(cur), *Vs = Vb(cur);
		float s[8][4];
#pragma unroll
		for (int n = 0; n < 8; n++)
			s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
		fa_xyt<HSP, 8>(s, Qs + warp * 16 * LDH, Ks, LDH);
		/* scale to the log2 domain, causal mask, row maxima (4 lanes per row) */
		float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
		for (int n = 0; n < 8; n++) {
#pragma unroll
			for (int e = 0; e < 4; e++) {
				int key = k0 + n * 8 + 2 * t + (e & 1);
				float v = s[n][e] * sl2;
				s[n][e] = key > (e < 2 ? qr0 : qr1) ? -INFINITY : v;
			}
			mx0 = fmaxf(mx0, fmaxf(s[n][0], s[n][1]));
			mx1 = fmaxf(mx1, fmaxf(s[n][2], s[n][3]));
		}
		mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
		mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
		mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
		mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
		/* finite: key 0 is unmasked for every row in the first tile */
		float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
		float al0 = exp2f(m0 - mn0), al1 = exp2f(m1 - mn1);
		float ps0 = 0.0f, ps1 = 0.0f;
#pragma unroll
		for (int n = 0; n < 8; n++) {
			s[n][0] = exp2f(s[n][0] - mn0);
			s[n][1] = exp2f(s[n][1] - mn0);
			s[n][2] = exp2f(s[n][2] - mn1);
			s[n][3] = exp2f(s[n][3] - mn1);
			ps0 += s[n][0] + s[n][1];
			ps1 += s[n][2] + s[n][3];
		}
		ps0 += __shfl_xor_sync(0xffffffffu, ps0, 1);
		ps0 += __shfl_xor_sync(0xffffffffu, ps0, 2);
		ps1 += __shfl_xor_sync(0xffffffffu, ps1, 1);
		ps1 += __shfl_xor_sync(0xffffffffu, ps1, 2);
		l0 = l0 * al0 + ps0;
		l1 = l1 * al1 + ps1;
		m0 = mn0;
		m1 = mn1;
#pragma unroll
		for (int dn = 0; dn < HSP / 8; dn++) {
			o[dn][0] *= al0;
			o[dn][1] *= al0;
			o[dn][2] *= al1;
			o[dn][3] *= al1;
		}
		fa_pv<HSP, 4>(o, s, Vs, LDH); /* o += P V (P rounded to bf16) */
	}
	float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
#pragma unroll
	for (int dn = 0; dn < HSP / 8; dn++) {
#pragma unroll
		for (int e = 0; e < 4; e++) {
			int qr = e < 2 ? qr0 : qr1, d = dn * 8 + 2 * t + (e & 1);
			if (qr < T && d < hs)
				out[((long)P.b * T + qr) * C + (long)P.h * hs + d] =
				    __float2bfloat16_rn(o[dn][e] * (e < 2 ? inv0 : inv1));
		}
	}
	if (t == 0) {
		if (qr0 < T)
			lse[(long)P.bh * T + qr0] = m0 / FA_LOG2E + logf(l0);
		if (qr1 < T)
			lse[(long)P.bh * T + qr1] = m1 / FA_LOG2E + logf(l1);
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

/* dinp[row r, column d] += scale * acc for this lane's C-fragment elements of
 * 16 rows (row0_off: row 0, row_stride), rows < rows_valid, columns < hs. */
template <int HSP>
__device__ __forceinline__ void fa_add_out(bf16 *dinp, float acc[][4], long row0_off,
                                           long row_stride, int rows_valid, int hs, float scale)
{
	int lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
#pragma unroll
	for (int dn = 0; dn < HSP / 8; dn++) {
#pragma unroll
		for (int e = 0; e < 4; e++) {
			int r = g + (e < 2 ? 0 : 8), d = dn * 8 + 2 * t + (e & 1);
			if (r < rows_valid && d < hs) {
				bf16 *p = dinp + row0_off + (long)r * row_stride + d;
				*p = __float2bfloat16_rn(__bfloat162float(*p) + scale * acc[dn][e]);
			}
		}
	}
}

/* dK, dV for 64 keys (a warp per 16): loops over the query tiles at and after
 * the diagonal, 32 queries at a time. */
template <int HSP>
__global__ void __launch_bounds__(FA_THREADS)
    kn_flash_bwd_dkdv_kernel(bf16 *dinp, const bf16 *inp, const bf16 *dout, const float *lse,
                             const float *Dv, int T, int C, int NH, int hs, float scale,
                             bool vec_in, bool vec_out)
{
	typedef fa_dims<HSP> D;
	constexpr int LDH = D::LDH;
	extern __shared__ unsigned char fa_smem[];
	unsigned char *sp = fa_align(fa_smem);
	bf16 *Ks = (bf16 *)sp;
	bf16 *Vs = (bf16 *)(sp + D::TILE);
	/* Q, dO and (logsumexp, D) buffers i = 0, 1 */
	auto Qb = [&](int i) { return (bf16 *)(sp + (2 + 2 * i) * D::TILE); };
	auto dOb = [&](int i) { return (bf16 *)(sp + (3 + 2 * i) * D::TILE); };
	auto lse_b = [&](int i) { return (float *)(sp + 6 * D::TILE) + i * 2 * FA_TILE; };
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;

	int ntiles = (T + FA_TILE - 1) / FA_TILE;
	fa_pos P = fa_where(NH, ntiles, false);
	int k0 = P.tile * FA_TILE;
	long stride = 3L * C;
	const bf16 *base = inp + (long)P.b * T * stride + (long)P.h * hs;
	const bf16 *dobase = dout + (long)P.b * T * C + (long)P.h * hs;
	/* Q, dO, logsumexp (log2 units) and D of query tile qb into buffer i */
	auto load_q = [&](int qb, int i) {
		int q0 = qb * FA_TILE;
		fa_load<HSP>(Qb(i), base + (long)q0 * stride, T - q0, hs, stride, vec_in);
		fa_load<HSP>(dOb(i), dobase + (long)q0 * C, T - q0, hs, C, vec_out);
		for (int j = threadIdx.x; j < FA_TILE; j += blockDim.x) {
			bool ok = q0 + j < T;
			lse_b(i)[j] = ok ? lse[(long)P.bh * T + q0 + j] * FA_LOG2E : 0.0f;
			lse_b(i)[FA_TILE + j] = ok ? Dv[(long)P.bh * T + q0 + j] : 0.0f;
		}
	};
	fa_load<HSP>(Ks, base + (long)k0 * stride + C, T - k0, hs, stride, vec_in);
	fa_load<HSP>(Vs, base + (long)k0 * stride + 2 * C, T - k0, hs, stride, vec_in);
	load_q(P.tile, 0);
	fa_commit();

	const int kr0 = k0 + warp * 16 + g, kr1 = kr0 + 8; /* this lane's two key rows */
	const float sl2 = scale * FA_LOG2E;
	float dk[HSP / 8][4], dv[HSP / 8][4];
#pragma unroll
	for (int dn = 0; dn < HSP / 8; dn++)
#pragma unroll
		for (int e = 0; e < 4; e++)
			dk[dn][e] = dv[dn][e] = 0.0f;
	for (int qb = P.tile; qb < ntiles; qb++) {
		int q0 = qb * FA_TILE, cur = (qb - P.tile) & 1;
		if (qb + 1 < ntiles) {   /* prefetch the next query tile into the other buffers */
			__syncthreads(); /* everyone is done with them (iteration qb - 1) */
			load_q(qb + 1, cur ^ 1);
			fa_commit();
			fa_wait<1>(); /* this tile's (and K's, V's) copies are done */
		} else {
			fa_wait<0>();
		}
		__syncthreads();
		const bf16 *Qs = Qb(cur), *dOs = dOb(cur);
		const float *lse_s = lse_b(cur), *D_s = lse_b(cur) + FA_TILE;
#pragma unroll 1
		for (int hq = 0; hq < FA_TILE; hq += 32) { /* 32 queries at a time */
			float s[4][4], dp[4][4];
#pragma unroll
			for (int n = 0; n < 4; n++)
#pragma unroll
				for (int e = 0; e < 4; e++)
					s[n][e] = dp[n][e] = 0.0f;
			/* S^T = K Q^T and dP^T = V dO^T: keys x queries */
			fa_xyt<HSP, 4>(s, Ks + warp * 16 * LDH, Qs + hq * LDH, LDH);
			fa_xyt<HSP, 4>(dp, Vs + warp * 16 * LDH, dOs + hq * LDH, LDH);
#pragma unroll
			for (int n = 0; n < 4; n++) {
#pragma unroll
				for (int e = 0; e < 4; e++) {
					int c = hq + n * 8 + 2 * t + (e & 1), q = q0 + c;
					int kr = e < 2 ? kr0 : kr1;
					float p = 0.0f;
					if (q >= kr && q < T)
						p = exp2f(s[n][e] * sl2 - lse_s[c]);
					dp[n][e] = p * (dp[n][e] - D_s[c]); /* dS^T */
					s[n][e] = p;                        /* P^T */
				}
			}
			fa_pv<HSP, 2>(dv, s, dOs + hq * LDH, LDH); /* dV += P^T dO */
			fa_pv<HSP, 2>(dk, dp, Qs + hq * LDH, LDH); /* dK += dS^T Q */
		}
	}
	long row0 = ((long)P.b * T + k0 + warp * 16) * stride + (long)P.h * hs;
	int rows_valid = T - (k0 + warp * 16);
	fa_add_out<HSP>(dinp, dk, row0 + C, stride, rows_valid, hs, scale);
	fa_add_out<HSP>(dinp, dv, row0 + 2 * C, stride, rows_valid, hs, 1.0f);
}

/* dQ for 64 queries (a warp per 16): loops over the key tiles up to the
 * diagonal, 32 keys at a time. */
template <int HSP>
__global__ void __launch_bounds__(FA_THREADS)
    kn_flash_bwd_dq_kernel(bf16 *dinp, const bf16 *inp, const bf16 *dout, const float *lse,
                           const float *Dv, int T, int C, int NH, int hs, float scale, bool vec_in,
                           bool vec_out)
{
	typedef fa_dims<HSP> D;
	constexpr int LDH = D::LDH;
	extern __shared__ unsigned char fa_smem[];
	unsigned char *sp = fa_align(fa_smem);
	bf16 *Qs = (bf16 *)sp;
	bf16 *dOs = (bf16 *)(sp + D::TILE);
	/* K and V buffers i = 0, 1 */
	auto Kb = [&](int i) { return (bf16 *)(sp + (2 + 2 * i) * D::TILE); };
	auto Vb = [&](int i) { return (bf16 *)(sp + (3 + 2 * i) * D::TILE); };
	float *lse_s = (float *)(sp + 6 * D::TILE);
	float *D_s = lse_s + FA_TILE;
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;

	int ntiles = (T + FA_TILE - 1) / FA_TILE;
	fa_pos P = fa_where(NH, ntiles, true);
	int q0 = P.tile * FA_TILE;
	long stride = 3L * C;
	const bf16 *base = inp + (long)P.b * T * stride + (long)P.h * hs;
	const bf16 *dobase = dout + (long)P.b * T * C + (long)P.h * hs;
	fa_load<HSP>(Qs, base + (long)q0 * stride, T - q0, hs, stride, vec_in);
	fa_load<HSP>(dOs, dobase + (long)q0 * C, T - q0, hs, C, vec_out);
	fa_load<HSP>(Kb(0), base + C, T, hs, stride, vec_in);
	fa_load<HSP>(Vb(0), base + 2 * C, T, hs, stride, vec_in);
	fa_commit();
	for (int i = threadIdx.x; i < FA_TILE; i += blockDim.x) {
		bool ok = q0 + i < T;
		lse_s[i] = ok ? lse[(long)P.bh * T + q0 + i] * FA_LOG2E : 0.0f;
		D_s[i] = ok ? Dv[(long)P.bh * T + q0 + i] : 0.0f;
	}
	__syncthreads();
	const int qr0 = q0 + warp * 16 + g, qr1 = qr0 + 8;
	const float L0 = lse_s[warp * 16 + g], L1 = lse_s[warp * 16 + g + 8];
	const float D0 = D_s[warp * 16 + g], D1 = D_s[warp * 16 + g + 8];
	const float sl2 = scale * FA_LOG2E;
	float dq[HSP / 8][4];
#pragma unroll
	for (int dn = 0; dn < HSP / 8; dn++)
		dq[dn][0] = dq[dn][1] = dq[dn][2] = dq[dn][3] = 0.0f;
	for (int kb = 0; kb <= P.tile; kb++) {
		int k0 = kb * FA_TILE, cur = kb & 1;
		if (kb < P.tile) { /* prefetch the next K, V into the other buffers */
			int k1 = k0 + FA_TILE;
			__syncthreads(); /* everyone is done with them (iteration kb - 1) */
			fa_load<HSP>(Kb(cur ^ 1), base + (long)k1 * stride + C, T - k1, hs, stride,
			             vec_in);
			fa_load<HSP>(Vb(cur ^ 1), base + (long)k1 * stride + 2 * C, T - k1, hs,
			             stride, vec_in);
			fa_commit();
			fa_wait<1>(); /* this tile's (and Q's, dO's) copies are done */
		} else {
			fa_wait<0>();
		}
		__syncthreads();
		const bf16 *Ks = Kb(cur), *Vs = Vb(cur);
#pragma unroll 1
		for (int hk = 0; hk < FA_TILE; hk += 32) { /* 32 keys at a time */
			float s[4][4], dp[4][4];
#pragma unroll
			for (int n = 0; n < 4; n++)
#pragma unroll
				for (int e = 0; e < 4; e++)
					s[n][e] = dp[n][e] = 0.0f;
			fa_xyt<HSP, 4>(s, Qs + warp * 16 * LDH, Ks + hk * LDH, LDH); /* S = Q K^T */
			fa_xyt<HSP, 4>(dp, dOs + warp * 16 * LDH, Vs + hk * LDH,
			               LDH); /* dP = dO V^T */
#pragma unroll
			for (int n = 0; n < 4; n++) {
#pragma unroll
				for (int e = 0; e < 4; e++) {
					int key = k0 + hk + n * 8 + 2 * t + (e & 1);
					int qr = e < 2 ? qr0 : qr1;
					float p = 0.0f;
					if (key <= qr && qr < T)
						p = exp2f(s[n][e] * sl2 - (e < 2 ? L0 : L1));
					dp[n][e] = p * (dp[n][e] - (e < 2 ? D0 : D1)); /* dS */
				}
			}
			fa_pv<HSP, 2>(dq, dp, Ks + hk * LDH, LDH); /* dQ += dS K */
		}
	}
	long row0 = ((long)P.b * T + q0 + warp * 16) * stride + (long)P.h * hs;
	fa_add_out<HSP>(dinp, dq, row0, stride, T - (q0 + warp * 16), hs, scale);
}

/* ---- launchers ---- */
template <int HSP> static size_t fa_fwd_smem()
{
	return 128 + 5 * fa_dims<HSP>::TILE; /* Q, two K and two V buffers */
}

template <int HSP> static size_t fa_bwd_smem()
{
	/* 6 tiles (two buffers of the loop's pair), two buffers of lse and D */
	return 128 + 6 * fa_dims<HSP>::TILE + 4 * FA_TILE * 4;
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
	    (bf16 *)a->dinp, (const bf16 *)a->inp, (const bf16 *)a->dout, (const float *)a->att, Dv,
	    a->T, a->C, a->NH, hs, scale, vec_in, vec_out);
	kn_cuda_check_launch("attention_backward bf16 dkdv");
	kn_flash_bwd_dq_kernel<HSP><<<(unsigned)blocks, FA_THREADS, smem, s>>>(
	    (bf16 *)a->dinp, (const bf16 *)a->inp, (const bf16 *)a->dout, (const float *)a->att, Dv,
	    a->T, a->C, a->NH, hs, scale, vec_in, vec_out);
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

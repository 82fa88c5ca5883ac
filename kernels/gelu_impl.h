/* kernels/gelu_impl.h — what elementwise.c and elementwise_simd.c share (and
 * tests/kernels/test_gelu.c reaches for): the fp32 tanh the GELU loops use, in
 * scalar form, and one table of GELU loops per instruction set.
 *
 * kn_gelu_tanhf is tanh in float without libm: |u| < 0.625 an odd polynomial
 * (Cephes' tanhf), else 1 - 2 / (exp(2|u|) + 1) with a polynomial exp (Cephes'
 * expf, |u| clamped to 10 where tanh is 1.0f); within 1.4 ulp of tanh over all
 * floats (glibc's tanhf: 2.2). IEEE mul/add/div only, no FMA (the elementwise
 * files are built with -ffp-contract=off), so the AVX2 loops, which compute both
 * branches lane by lane and blend, give every element the scalar path's bits.
 */
#ifndef SP_KERNELS_GELU_IMPL_H
#define SP_KERNELS_GELU_IMPL_H

#include "kernels/optim_impl.h"

#include <stdint.h>
#include <string.h>

#define KN_GELU_CUBE   0.044715f
#define KN_TANH_SMALL  0.625f      /* below: the polynomial */
#define KN_TANH_CLAMP  10.0f       /* tanh(|u| >= 10) rounds to 1.0f */
#define KN_EXP_SHIFTER 12582912.0f /* 1.5 * 2^23: x + it rounds x to an integer */
#define KN_EXP_LOG2E   1.44269504088896341f
#define KN_EXP_LN2_HI  0.693359375f /* ln 2 = HI + LO; n * HI is exact for n < 2^11 */
#define KN_EXP_LN2_LO  -2.12194440e-4f
#define KN_EXP_P0      1.9875691500e-4f /* Cephes expf's polynomial on [-ln2/2, ln2/2] */
#define KN_EXP_P1      1.3981999507e-3f
#define KN_EXP_P2      8.3334519073e-3f
#define KN_EXP_P3      4.1665795894e-2f
#define KN_EXP_P4      1.6666665459e-1f
#define KN_EXP_P5      5.0000001201e-1f
#define KN_TANH_P0     -5.70498872745e-3f /* Cephes tanhf's polynomial on [0, 0.625] */
#define KN_TANH_P1     2.06390887954e-2f
#define KN_TANH_P2     -5.37397155531e-2f
#define KN_TANH_P3     1.33314422036e-1f
#define KN_TANH_P4     -3.33332819422e-1f

/* exp(x) for x in [0, 2 * KN_TANH_CLAMP] (or NaN-free inputs of that range only). */
static inline float kn_gelu_expf(float x)
{
	float k = x * KN_EXP_LOG2E + KN_EXP_SHIFTER;
	float n = k - KN_EXP_SHIFTER;
	float r = x - n * KN_EXP_LN2_HI;
	r = r - n * KN_EXP_LN2_LO;
	float p = KN_EXP_P0;
	p = p * r + KN_EXP_P1;
	p = p * r + KN_EXP_P2;
	p = p * r + KN_EXP_P3;
	p = p * r + KN_EXP_P4;
	p = p * r + KN_EXP_P5;
	p = p * (r * r) + r;
	p = p + 1.0f;
	uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
	float scale;
	memcpy(&scale, &bits, sizeof(scale));
	return p * scale;
}

/* tanh(u) in float, see above. A NaN u gives +-1 (the GELU loops still return
 * NaN: they multiply by the NaN input). */
static inline float kn_gelu_tanhf(float u)
{
	uint32_t ub, sign;
	memcpy(&ub, &u, sizeof(ub));
	sign = ub & 0x80000000u;
	ub &= 0x7fffffffu;
	float a;
	memcpy(&a, &ub, sizeof(a));
	a = a < KN_TANH_CLAMP ? a : KN_TANH_CLAMP;
	float t;
	if (a < KN_TANH_SMALL) {
		float z = a * a;
		float p = KN_TANH_P0;
		p = p * z + KN_TANH_P1;
		p = p * z + KN_TANH_P2;
		p = p * z + KN_TANH_P3;
		p = p * z + KN_TANH_P4;
		t = p * z * a + a;
	} else {
		float e = kn_gelu_expf(a + a);
		t = 1.0f - 2.0f / (e + 1.0f);
	}
	uint32_t tb;
	memcpy(&tb, &t, sizeof(tb));
	tb |= sign;
	memcpy(&t, &tb, sizeof(t));
	return t;
}

/* One instruction set's GELU loops over elements [0, n): forward y = gelu(x);
 * backward dx += gelu'(x) * dy (kn_gelu_{fwd,bwd}_args' meaning). */
struct kn_gelu_path {
	const char *name;
	void (*forward)(float *y, const float *x, long n);
	void (*backward)(float *dx, const float *x, const float *dy, long n);
};

/* Scalar (elementwise.c) and AVX2 (elementwise_simd.c: x86-64 only, NULL loops
 * elsewhere; its tail runs the scalar loop). */
extern const struct kn_gelu_path kn_gelu_scalar_path;
extern const struct kn_gelu_path kn_gelu_avx2_path;

/* Test knob, process-wide, not thread-safe against running kernels: isa
 * KN_OPTIM_SCALAR or KN_OPTIM_AVX2 forces that path, -1 picks the widest this CPU
 * runs (the default). Returns 0, -ENOTSUP if this CPU or build lacks it, -EINVAL. */
int kn_gelu_tune(int isa) SP_MUST_CHECK;

#endif

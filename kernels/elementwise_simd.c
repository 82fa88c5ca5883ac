/* kernels/elementwise_simd.c — the GELU loops in AVX2 (8 floats).
 *
 * Compiled for AVX2 with a target attribute (the rest of the build stays
 * portable); elementwise.c calls them only after checking the CPU. Lane by lane
 * they are elementwise.c's scalar loops with kn_gelu_tanhf inlined: the same IEEE
 * operations in the same order (no FMA), both tanh branches computed and blended
 * by |u| < KN_TANH_SMALL, then the scalar loop for the last n % 8 elements, so
 * every element gets the scalar path's bits.
 */
#include "kernels/gelu_impl.h"
#include "kernels/internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define V8 __attribute__((target("avx2"), always_inline)) static inline

V8 __m256 mul8(__m256 a, __m256 b)
{
	return _mm256_mul_ps(a, b);
}
V8 __m256 add8(__m256 a, __m256 b)
{
	return _mm256_add_ps(a, b);
}
V8 __m256 sub8(__m256 a, __m256 b)
{
	return _mm256_sub_ps(a, b);
}
V8 __m256 k8(float c)
{
	return _mm256_set1_ps(c);
}

/* kn_gelu_expf, 8 lanes */
V8 __m256 exp8(__m256 x)
{
	__m256 k = add8(mul8(x, k8(KN_EXP_LOG2E)), k8(KN_EXP_SHIFTER));
	__m256 n = sub8(k, k8(KN_EXP_SHIFTER));
	__m256 r = sub8(x, mul8(n, k8(KN_EXP_LN2_HI)));
	r = sub8(r, mul8(n, k8(KN_EXP_LN2_LO)));
	__m256 p = k8(KN_EXP_P0);
	p = add8(mul8(p, r), k8(KN_EXP_P1));
	p = add8(mul8(p, r), k8(KN_EXP_P2));
	p = add8(mul8(p, r), k8(KN_EXP_P3));
	p = add8(mul8(p, r), k8(KN_EXP_P4));
	p = add8(mul8(p, r), k8(KN_EXP_P5));
	p = add8(mul8(p, mul8(r, r)), r);
	p = add8(p, k8(1.0f));
	__m256i bits =
	    _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
	return mul8(p, _mm256_castsi256_ps(bits));
}

/* kn_gelu_tanhf, 8 lanes */
V8 __m256 tanh8(__m256 u)
{
	const __m256 signbit = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
	__m256 sign = _mm256_and_ps(u, signbit);
	__m256 a = _mm256_andnot_ps(signbit, u);
	/* a < CLAMP ? a : CLAMP, a NaN giving CLAMP as the scalar form: minps returns
	 * its second operand when either is NaN */
	a = _mm256_min_ps(a, k8(KN_TANH_CLAMP));
	__m256 z = mul8(a, a);
	__m256 p = k8(KN_TANH_P0);
	p = add8(mul8(p, z), k8(KN_TANH_P1));
	p = add8(mul8(p, z), k8(KN_TANH_P2));
	p = add8(mul8(p, z), k8(KN_TANH_P3));
	p = add8(mul8(p, z), k8(KN_TANH_P4));
	__m256 small = add8(mul8(mul8(p, z), a), a);
	__m256 e = exp8(add8(a, a));
	__m256 large = sub8(k8(1.0f), _mm256_div_ps(k8(2.0f), add8(e, k8(1.0f))));
	__m256 is_small = _mm256_cmp_ps(a, k8(KN_TANH_SMALL), _CMP_LT_OQ);
	return _mm256_or_ps(_mm256_blendv_ps(large, small, is_small), sign);
}

/* KN_GELU_SCALE * (x + KN_GELU_CUBE * x * x * x) */
V8 __m256 gelu_arg8(__m256 x)
{
	__m256 cube = mul8(mul8(mul8(k8(KN_GELU_CUBE), x), x), x);
	return mul8(k8(KN_GELU_SCALE), add8(x, cube));
}

__attribute__((target("avx2"))) static void gelu_forward_avx2(float *y, const float *x, long n)
{
	long i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256 xi = _mm256_loadu_ps(x + i);
		__m256 th = tanh8(gelu_arg8(xi));
		_mm256_storeu_ps(y + i, mul8(mul8(k8(0.5f), xi), add8(k8(1.0f), th)));
	}
	kn_gelu_scalar_path.forward(y + i, x + i, n - i);
}

__attribute__((target("avx2"))) static void gelu_backward_avx2(float *dx, const float *x,
                                                               const float *dy, long n)
{
	const float c3 = 3.0f * KN_GELU_CUBE; /* the scalar loop's constant fold */
	long i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256 xi = _mm256_loadu_ps(x + i);
		__m256 th = tanh8(gelu_arg8(xi));
		__m256 sech2 = sub8(k8(1.0f), mul8(th, th));
		__m256 poly = add8(k8(1.0f), mul8(mul8(k8(c3), xi), xi));
		__m256 g =
		    add8(mul8(k8(0.5f), add8(k8(1.0f), th)),
		         mul8(mul8(mul8(mul8(xi, k8(0.5f)), sech2), k8(KN_GELU_SCALE)), poly));
		__m256 d = add8(_mm256_loadu_ps(dx + i), mul8(g, _mm256_loadu_ps(dy + i)));
		_mm256_storeu_ps(dx + i, d);
	}
	kn_gelu_scalar_path.backward(dx + i, x + i, dy + i, n - i);
}

const struct kn_gelu_path kn_gelu_avx2_path = {"avx2", gelu_forward_avx2, gelu_backward_avx2};

#else

const struct kn_gelu_path kn_gelu_avx2_path = {"avx2", NULL, NULL};

#endif

/* kernels/optim_simd.c — AdamW and SGD loops in AVX2 (8 floats) and AVX-512 (16 floats).
 *
 * Each function is compiled for its instruction set with a target attribute, so
 * the rest of the build stays portable; optim.c calls one only after checking the
 * CPU. The loops are optim.c's scalar loops lane by lane: the same IEEE operations
 * in the same order (vmulps/vaddps/vsubps/vdivps/vsqrtps are correctly rounded like
 * their scalar forms; no FMA, no rsqrt), then the scalar loop for the last n % width
 * elements, so every element gets the scalar path's bits.
 */
#include "kernels/optim_impl.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

/* Software prefetch KN_PF floats (1 KiB) ahead on each stream, once per 64-byte
 * line: with 4 to 7 streams at once the hardware prefetchers alone left about a
 * third of the memory bandwidth unused on AMD EPYC (bench-optim). Prefetches never
 * fault, past the end either; they change no result. */
#define KN_PF            256
#define KN_PREFETCH(ptr) _mm_prefetch((const char *)(ptr) + KN_PF * sizeof(float), _MM_HINT_T0)

struct adamw_v8 {
	__m256 decay, step, bc2_sqrt, eps, b1, b2, c1, c2, gs;
};

__attribute__((target("avx2"), always_inline)) static inline void
adamw8(float *p, const float *g, float *m, float *v, const struct adamw_v8 *k)
{
	__m256 gi = _mm256_mul_ps(_mm256_loadu_ps(g), k->gs);
	__m256 pi = _mm256_mul_ps(_mm256_loadu_ps(p), k->decay);
	__m256 mi =
	    _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(m), k->b1), _mm256_mul_ps(k->c1, gi));
	__m256 vi = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(v), k->b2),
	                          _mm256_mul_ps(_mm256_mul_ps(k->c2, gi), gi));
	__m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), k->bc2_sqrt), k->eps);
	_mm256_storeu_ps(p, _mm256_sub_ps(pi, _mm256_mul_ps(k->step, _mm256_div_ps(mi, denom))));
	_mm256_storeu_ps(m, mi);
	_mm256_storeu_ps(v, vi);
}

__attribute__((target("avx2"))) static void adamw_avx2(float *p, const float *g, float *m, float *v,
                                                       long n, const struct kn_adamw_coef *c)
{
	const struct adamw_v8 k = {
	    _mm256_set1_ps(c->decay), _mm256_set1_ps(c->step), _mm256_set1_ps(c->bc2_sqrt),
	    _mm256_set1_ps(c->eps),   _mm256_set1_ps(c->b1),   _mm256_set1_ps(c->b2),
	    _mm256_set1_ps(c->c1),    _mm256_set1_ps(c->c2),   _mm256_set1_ps(c->gs)};
	long i = 0;
	for (; i + 16 <= n; i += 16) {
		KN_PREFETCH(p + i);
		KN_PREFETCH(g + i);
		KN_PREFETCH(m + i);
		KN_PREFETCH(v + i);
		adamw8(p + i, g + i, m + i, v + i, &k);
		adamw8(p + i + 8, g + i + 8, m + i + 8, v + i + 8, &k);
	}
	for (; i + 8 <= n; i += 8)
		adamw8(p + i, g + i, m + i, v + i, &k);
	kn_optim_scalar_path.adamw(p + i, g + i, m + i, v + i, n - i, c);
}

__attribute__((target("avx2"))) static void sgd_avx2(float *p, const float *g, float *buf, long n,
                                                     const struct kn_sgd_coef *c)
{
	const __m256 lr = _mm256_set1_ps(c->lr), mu = _mm256_set1_ps(c->mu);
	const __m256 wd = _mm256_set1_ps(c->wd), gs = _mm256_set1_ps(c->gs);
	long i = 0;
	if (buf) {
		for (; i + 8 <= n; i += 8) {
			if (!(i & 15)) {
				KN_PREFETCH(p + i);
				KN_PREFETCH(g + i);
				KN_PREFETCH(buf + i);
			}
			__m256 pi = _mm256_loadu_ps(p + i);
			__m256 d = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(g + i), gs),
			                         _mm256_mul_ps(wd, pi));
			d = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(buf + i), mu), d);
			_mm256_storeu_ps(buf + i, d);
			_mm256_storeu_ps(p + i, _mm256_sub_ps(pi, _mm256_mul_ps(lr, d)));
		}
	} else {
		for (; i + 8 <= n; i += 8) {
			if (!(i & 15)) {
				KN_PREFETCH(p + i);
				KN_PREFETCH(g + i);
			}
			__m256 pi = _mm256_loadu_ps(p + i);
			__m256 d = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(g + i), gs),
			                         _mm256_mul_ps(wd, pi));
			_mm256_storeu_ps(p + i, _mm256_sub_ps(pi, _mm256_mul_ps(lr, d)));
		}
	}
	kn_optim_scalar_path.sgd(p + i, g + i, buf ? buf + i : NULL, n - i, c);
}

__attribute__((target("avx512f"))) static void
adamw_avx512(float *p, const float *g, float *m, float *v, long n, const struct kn_adamw_coef *c)
{
	const __m512 decay = _mm512_set1_ps(c->decay), step = _mm512_set1_ps(c->step);
	const __m512 bc2_sqrt = _mm512_set1_ps(c->bc2_sqrt), eps = _mm512_set1_ps(c->eps);
	const __m512 b1 = _mm512_set1_ps(c->b1), b2 = _mm512_set1_ps(c->b2);
	const __m512 c1 = _mm512_set1_ps(c->c1), c2 = _mm512_set1_ps(c->c2);
	const __m512 gs = _mm512_set1_ps(c->gs);
	long i = 0;
	for (; i + 16 <= n; i += 16) {
		KN_PREFETCH(p + i);
		KN_PREFETCH(g + i);
		KN_PREFETCH(m + i);
		KN_PREFETCH(v + i);
		__m512 gi = _mm512_mul_ps(_mm512_loadu_ps(g + i), gs);
		__m512 pi = _mm512_mul_ps(_mm512_loadu_ps(p + i), decay);
		__m512 mi =
		    _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(m + i), b1), _mm512_mul_ps(c1, gi));
		__m512 vi = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(v + i), b2),
		                          _mm512_mul_ps(_mm512_mul_ps(c2, gi), gi));
		__m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), bc2_sqrt), eps);
		_mm512_storeu_ps(p + i,
		                 _mm512_sub_ps(pi, _mm512_mul_ps(step, _mm512_div_ps(mi, denom))));
		_mm512_storeu_ps(m + i, mi);
		_mm512_storeu_ps(v + i, vi);
	}
	kn_optim_scalar_path.adamw(p + i, g + i, m + i, v + i, n - i, c);
}

__attribute__((target("avx512f"))) static void sgd_avx512(float *p, const float *g, float *buf,
                                                          long n, const struct kn_sgd_coef *c)
{
	const __m512 lr = _mm512_set1_ps(c->lr), mu = _mm512_set1_ps(c->mu);
	const __m512 wd = _mm512_set1_ps(c->wd), gs = _mm512_set1_ps(c->gs);
	long i = 0;
	if (buf) {
		for (; i + 16 <= n; i += 16) {
			KN_PREFETCH(p + i);
			KN_PREFETCH(g + i);
			KN_PREFETCH(buf + i);
			__m512 pi = _mm512_loadu_ps(p + i);
			__m512 d = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(g + i), gs),
			                         _mm512_mul_ps(wd, pi));
			d = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(buf + i), mu), d);
			_mm512_storeu_ps(buf + i, d);
			_mm512_storeu_ps(p + i, _mm512_sub_ps(pi, _mm512_mul_ps(lr, d)));
		}
	} else {
		for (; i + 16 <= n; i += 16) {
			KN_PREFETCH(p + i);
			KN_PREFETCH(g + i);
			__m512 pi = _mm512_loadu_ps(p + i);
			__m512 d = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(g + i), gs),
			                         _mm512_mul_ps(wd, pi));
			_mm512_storeu_ps(p + i, _mm512_sub_ps(pi, _mm512_mul_ps(lr, d)));
		}
	}
	kn_optim_scalar_path.sgd(p + i, g + i, buf ? buf + i : NULL, n - i, c);
}

const struct kn_optim_path kn_optim_avx2_path = {"avx2", adamw_avx2, sgd_avx2};
const struct kn_optim_path kn_optim_avx512_path = {"avx512", adamw_avx512, sgd_avx512};
#else
const struct kn_optim_path kn_optim_avx2_path = {"avx2", NULL, NULL};
const struct kn_optim_path kn_optim_avx512_path = {"avx512", NULL, NULL};
#endif

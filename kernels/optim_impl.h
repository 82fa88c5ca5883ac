/* kernels/optim_impl.h — what optim.c and optim_simd.c share (and tests/kernels/test_optim.c
 * reaches for its knobs): the per-step scalars of each optimizer and one table of
 * loops per instruction set. Every loop gives the same bits for every element as the
 * scalar one: the same operations in the same order, IEEE mul/add/div/sqrt only, no
 * FMA (the optim files are built with -ffp-contract=off), so an element's result does
 * not depend on the path, the thread count or where a chunk starts.
 */
#ifndef SP_KERNELS_OPTIM_IMPL_H
#define SP_KERNELS_OPTIM_IMPL_H

#include "kernels/kernels.h"

/* AdamW's scalars for one step, formed once per call in double then rounded
 * to float (torch's way). Per element, with g the gradient times gs (the clip
 * scale, kn_clip_scale; 1 without clipping, which changes no bit):
 *   p' = p*decay; m = m*b1 + c1*g; v = v*b2 + (c2*g)*g;
 *   p = p' - step * (m / (sqrt(v)/bc2_sqrt + eps)). */
struct kn_adamw_coef {
	float decay, step, bc2_sqrt, eps;
	float b1, b2, c1, c2;
	float gs;
};

/* SGD's: d = g*gs + wd*p; with buf: d = buf*mu + d, buf = d; p = p - lr*d. */
struct kn_sgd_coef {
	float lr, mu, wd, gs;
};

/* One instruction set's loops over elements [0, n) of the arrays given. */
struct kn_optim_path {
	const char *name;
	void (*adamw)(float *p, const float *g, float *m, float *v, long n,
	              const struct kn_adamw_coef *c);
	void (*sgd)(float *p, const float *g, float *buf, long n, const struct kn_sgd_coef *c);
};

enum kn_optim_isa { KN_OPTIM_SCALAR, KN_OPTIM_AVX2, KN_OPTIM_AVX512, KN_OPTIM_NISA };

/* The scalar loops (optim.c) and the vector ones (optim_simd.c: x86-64 only; the
 * others' entries have NULL loops). A vector loop finishes its tail with the
 * scalar loop. */
extern const struct kn_optim_path kn_optim_scalar_path;
extern const struct kn_optim_path kn_optim_avx2_path;
extern const struct kn_optim_path kn_optim_avx512_path;

/* Whether this CPU runs isa (checked once with __builtin_cpu_supports). */
int kn_optim_isa_supported(enum kn_optim_isa isa);

/* The widest path this CPU runs, or the forced one. Never NULL. */
const struct kn_optim_path *kn_optim_path_get(void);

/* Test and bench knobs, process-wide, not thread-safe against running updates
 * (set them between calls):
 *   isa        the path to use, or -1 for the widest supported
 *   threads    threads per call, or 0 for kn_cpu_threads() (1 if never set)
 *   min_chunk  fewest elements per thread (0 for the default, KN_OPTIM_MIN_CHUNK)
 * Returns 0, or -ENOTSUP if this CPU (or build) lacks isa, -EINVAL for a bad value. */
int kn_optim_tune(int isa, int threads, long min_chunk) SP_MUST_CHECK;

#define KN_OPTIM_MIN_CHUNK   (1L << 15) /* below 32K elements a thread costs more than it saves */
#define KN_OPTIM_MAX_THREADS 64

#endif

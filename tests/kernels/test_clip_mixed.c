/* tests/kernels/test_clip_mixed.c — the clip in the mixed-precision optimizers
 * and at its edges (kernels.h, kn_clip):
 *  - kn_adamw_mixed / kn_sgd_mixed (with and without momentum) with a clip
 *    give the masters, state and rounded weights of kn_adamw / kn_sgd on the
 *    widened gradients with the same clip, bit for bit;
 *  - a threshold exactly equal to the norm (sqrt exact) is scale 1: the same
 *    bits as no clipping; one just below it really scales;
 *  - norms of zero (a parameterless layer, N = 0 sums) count as nothing;
 *    kn_grad_sumsq with N = 0 writes 0 and needs no x;
 *  - a NaN norm (a NaN gradient) leaves the scale at 1 (no clip, the NaN
 *    stays in the gradient); an infinite norm gives scale 0. */
#include "kernels/kernels.h"
#include "tests/test.h"

#include <math.h>
#include <string.h>

enum { N = 1003 };
static uint64_t rng = 99;
static float frand(void)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void mixed_against_fp32(const struct kn_clip *clip)
{
	static float master[N], p32[N], m[N], v[N], m32[N], v32[N], g32[N], buf[N], buf32[N];
	static uint16_t w[N], g[N];
	for (int opt = 0; opt < 3; opt++) { /* adamw, sgd, sgd + momentum */
		for (int i = 0; i < N; i++) {
			master[i] = p32[i] = frand();
			g[i] = kn_f32_to_bf16(frand() * 3.0f);
			g32[i] = kn_bf16_to_f32(g[i]);
			m[i] = m32[i] = v[i] = v32[i] = buf[i] = buf32[i] = 0;
		}
		for (int t = 1; t <= 3; t++) {
			if (opt == 0) {
				struct kn_adamw_mixed_args a = {.master = master,
				                                .params = w,
				                                .grads = g,
				                                .m = m,
				                                .v = v,
				                                .N = N,
				                                .lr = 1e-2f,
				                                .beta1 = 0.9f,
				                                .beta2 = 0.95f,
				                                .eps = 1e-8f,
				                                .weight_decay = 0.1f,
				                                .t = t,
				                                .clip = *clip};
				CHECK_OK(kn_adamw_mixed_check(&a));
				kn_adamw_mixed_cpu(&a);
				struct kn_adamw_args r = {.dtype = KN_F32,
				                          .params = p32,
				                          .grads = g32,
				                          .m = m32,
				                          .v = v32,
				                          .N = N,
				                          .lr = 1e-2f,
				                          .beta1 = 0.9f,
				                          .beta2 = 0.95f,
				                          .eps = 1e-8f,
				                          .weight_decay = 0.1f,
				                          .t = t,
				                          .clip = *clip};
				CHECK_OK(kn_adamw_check(&r));
				kn_adamw_cpu(&r);
			} else {
				float mu = opt == 2 ? 0.9f : 0;
				struct kn_sgd_mixed_args a = {.master = master,
				                              .params = w,
				                              .grads = g,
				                              .buf = mu != 0 ? buf : NULL,
				                              .N = N,
				                              .lr = 0.05f,
				                              .momentum = mu,
				                              .weight_decay = 0.01f,
				                              .clip = *clip};
				CHECK_OK(kn_sgd_mixed_check(&a));
				kn_sgd_mixed_cpu(&a);
				struct kn_sgd_args r = {.dtype = KN_F32,
				                        .params = p32,
				                        .grads = g32,
				                        .buf = mu != 0 ? buf32 : NULL,
				                        .N = N,
				                        .lr = 0.05f,
				                        .momentum = mu,
				                        .weight_decay = 0.01f,
				                        .clip = *clip};
				CHECK_OK(kn_sgd_check(&r));
				kn_sgd_cpu(&r);
			}
			CHECK_MSG(!memcmp(master, p32, sizeof(master)) &&
			              !memcmp(m, m32, sizeof(m)) && !memcmp(v, v32, sizeof(v)) &&
			              !memcmp(buf, buf32, sizeof(buf)),
			          "optimizer %d step %d, clip %g: mixed differs from fp32", opt, t,
			          (double)clip->clip);
			for (int i = 0; i < N; i++)
				CHECK(w[i] == kn_f32_to_bf16(p32[i]));
		}
	}
}

int main(void)
{
	CHECK_OK(kn_cpu_set_threads(1));
	/* sums of squares 4 + 0 + 5 + 0 + 7 = 16: norm 4 exactly */
	static const double norms[] = {4, 0, 5, 0, 7};
	struct kn_clip none = {0}, at = {.norms = norms, .nnorms = 5, .clip = 4.0f},
	               below = {.norms = norms, .nnorms = 5, .clip = 3.9999998f},
	               tiny = {.norms = norms, .nnorms = 5, .clip = 0.01f};
	CHECK(kn_clip_scale(&none) == 1.0f);
	CHECK_MSG(kn_clip_scale(&at) == 1.0f, "clip = norm: scale %.9g",
	          (double)kn_clip_scale(&at));
	CHECK(kn_clip_scale(&below) < 1.0f);
	CHECK(kn_clip_scale(&tiny) == (float)(0.01f / 4.0));
	mixed_against_fp32(&tiny);
	mixed_against_fp32(&below);
	mixed_against_fp32(&at);

	/* a threshold equal to the norm: the same bits as no clipping */
	static float p1[N], p2[N], g[N], m1[2 * N], m2[2 * N];
	for (int i = 0; i < N; i++) {
		p1[i] = p2[i] = frand();
		g[i] = frand();
	}
	memset(m1, 0, sizeof(m1));
	memset(m2, 0, sizeof(m2));
	struct kn_adamw_args a = {.dtype = KN_F32,
	                          .params = p1,
	                          .grads = g,
	                          .m = m1,
	                          .v = m1 + N,
	                          .N = N,
	                          .lr = 1e-2f,
	                          .beta1 = 0.9f,
	                          .beta2 = 0.95f,
	                          .eps = 1e-8f,
	                          .t = 1,
	                          .clip = at};
	kn_adamw_cpu(&a);
	a.params = p2;
	a.m = m2;
	a.v = m2 + N;
	a.clip = none;
	kn_adamw_cpu(&a);
	CHECK(!memcmp(p1, p2, sizeof(p1)) && !memcmp(m1, m2, sizeof(m1)));

	/* N = 0: 0, every part written, no x needed */
	double parts[KN_SUMSQ_PARTS], out = -1;
	for (int k = 0; k < KN_SUMSQ_PARTS; k++)
		parts[k] = -1;
	struct kn_grad_sumsq_args s = {
	    .dtype = KN_F32, .x = NULL, .N = 0, .parts = parts, .out = &out};
	CHECK_OK(kn_grad_sumsq_check(&s));
	kn_grad_sumsq_cpu(&s);
	CHECK(out == 0);
	/* NaN and Inf gradients */
	float bad[3] = {1, NAN, 2};
	s.x = bad;
	s.N = 3;
	kn_grad_sumsq_cpu(&s);
	CHECK(isnan(out));
	double nn[] = {out, 1};
	struct kn_clip cn = {.norms = nn, .nnorms = 2, .clip = 1};
	CHECK(kn_clip_scale(&cn) == 1.0f);
	bad[1] = INFINITY;
	kn_grad_sumsq_cpu(&s);
	CHECK(isinf(out));
	nn[0] = out;
	CHECK(kn_clip_scale(&cn) == 0.0f);
	printf("mixed AdamW/SGD with clips 0.01, just below and at the norm: the fp32 bits; clip = "
	       "norm changes nothing; N = 0, NaN and Inf sums as documented\n");
	TEST_PASS();
}

/* tests/kernels/test_gelu.c — the fp32 GELU's tanh and its paths: kn_gelu_tanhf
 * is within 2 ulp of tanh (double) over a sweep of every 61st float in [0, 12]
 * and its negatives, exactly +-1 beyond, odd in u; GELU forward and backward
 * match a double reference within 4 ulp (2.4e-7) of the size of their terms
 * (0.5|x| + |gelu|; 1 + |x| (1 + 3 c x^2)); and the AVX2 loops give the scalar loops' bits (memcmp) for every
 * length 0..67, misaligned, with zeros, infinities, NaNs and denormals among the
 * inputs. Prints how far the old formula (libm's tanhf) is from the new one. */
#include "kernels/gelu_impl.h"
#include "tests/kernels/util.h"
#include "tests/test.h"

#include <math.h>
#include <string.h>

static float bits_f(uint32_t b)
{
	float f;
	memcpy(&f, &b, sizeof(f));
	return f;
}

static double ulp_of(double ref)
{
	float r = fabsf((float)ref);
	return (double)nextafterf(r, INFINITY) - r;
}

static void test_tanh(void)
{
	double worst = 0, worst_at = 0;
	for (uint32_t b = 0; b <= 0x41400000u; b += 61) { /* 0 .. 12 */
		for (int s = 0; s < 2; s++) {
			float u = s ? -bits_f(b) : bits_f(b);
			double ref = tanh((double)u), got = kn_gelu_tanhf(u);
			double e = fabs(got - ref) / ulp_of(ref);
			if (e > worst)
				worst = e, worst_at = u;
			CHECK_MSG(got == -(double)kn_gelu_tanhf(-u), "tanh(%g) is not odd", u);
		}
	}
	printf("kn_gelu_tanhf: %.2f ulp at worst (at %.7g)\n", worst, worst_at);
	CHECK(worst <= 2.0);
	float big[] = {12.0f, 20.0f, 1e30f, INFINITY};
	for (size_t i = 0; i < sizeof(big) / sizeof(big[0]); i++) {
		CHECK(kn_gelu_tanhf(big[i]) == 1.0f);
		CHECK(kn_gelu_tanhf(-big[i]) == -1.0f);
	}
	CHECK(kn_gelu_tanhf(0.0f) == 0.0f && !signbit(kn_gelu_tanhf(0.0f)));
	CHECK(kn_gelu_tanhf(-0.0f) == 0.0f && signbit(kn_gelu_tanhf(-0.0f)));
}

static double gelu_ref(double x)
{
	return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

static double gelu_grad_ref(double x)
{
	double s = sqrt(2 / M_PI), th = tanh(s * (x + 0.044715 * x * x * x));
	return 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * s * (1 + 3 * 0.044715 * x * x);
}

static void test_reference(void)
{
	enum { N = 20001 };
	static float x[N], y[N], dx[N], dy[N], old[N];
	for (int i = 0; i < N; i++) {
		x[i] = -10.0f + 20.0f * (float)i / (N - 1);
		dy[i] = 1.0f;
	}
	struct kn_gelu_fwd_args f = {.out = y, .inp = x, .N = N};
	kn_gelu_forward_cpu(&f);
	struct kn_gelu_bwd_args b = {.dinp = dx, .inp = x, .dout = dy, .N = N};
	kn_gelu_backward_cpu(&b);
	/* errors scaled by the size of the formula's terms: forward 0.5 |x| (1 + tanh)
	 * cancels for x < 0, backward adds terms of size 1 and |x| (1 + 3 c x^2) */
	double ef = 0, eb = 0, of = 0, ob = 0, moved = 0;
	for (int i = 0; i < N; i++) {
		double xi = x[i], r = gelu_ref(xi), g = gelu_grad_ref(xi);
		double sf = fabs(r) + 0.5 * fabs(xi),
		       sb = 1 + fabs(xi) * (1 + 3 * 0.044715 * xi * xi);
		ef = fmax(ef, fabs(y[i] - r) / sf);
		eb = fmax(eb, fabs(dx[i] - g) / sb);
		/* the formula before gelu_impl.h: libm's tanhf */
		float xf = x[i], cube = 0.044715f * xf * xf * xf;
		float th = tanhf(0.7978845608028654f * (xf + cube));
		float sech2 = 1.0f - th * th;
		old[i] = 0.5f * xf * (1.0f + th);
		float og = 0.5f * (1.0f + th) + xf * 0.5f * sech2 * 0.7978845608028654f *
		                                    (1.0f + 3.0f * 0.044715f * xf * xf);
		of = fmax(of, fabs(old[i] - r) / sf);
		ob = fmax(ob, fabs(og - g) / sb);
		moved = fmax(moved, fabs((double)old[i] - y[i]) / sf);
	}
	printf("gelu vs double, scaled error at worst: forward %.2e (libm tanhf: %.2e), "
	       "backward %.2e (%.2e)\n",
	       ef, of, eb, ob);
	printf("gelu vs the libm tanhf formula: %.2e scaled, norm-wise %.2e\n", moved,
	       tk_rel_err(y, old, N));
	CHECK(ef < 2.4e-7 && eb < 2.4e-7);
}

static void test_paths(void)
{
	if (kn_gelu_tune(KN_OPTIM_AVX2) != 0) {
		printf("no avx2 path on this CPU or build: scalar only\n");
		CHECK_OK(kn_gelu_tune(-1));
		return;
	}
	enum { MAXN = 67, PAD = 3 };
	float x[MAXN + PAD], dy[MAXN + PAD], y[2][MAXN + PAD], dx[2][MAXN + PAD];
	struct tk_rng r = {7};
	float special[] = {0.0f,  -0.0f,  INFINITY, -INFINITY, NAN,   1e-40f, -1e-40f,
	                   30.0f, -30.0f, 0.625f,   -0.625f,   1e20f, -1e20f};
	size_t ns = sizeof(special) / sizeof(special[0]);
	for (int round = 0; round < 20; round++) {
		for (int i = 0; i < MAXN + PAD; i++) {
			x[i] = tk_unif(&r) * (round < 10 ? 6.0f : 0.7f);
			dy[i] = tk_unif(&r);
		}
		for (size_t k = 0; k < ns; k++)
			x[(size_t)(round * 5 + k * 7) % (MAXN + PAD)] = special[k];
		for (int n = 0; n <= MAXN; n++) {
			int off = n % PAD;
			for (int p = 0; p < 2; p++) {
				CHECK_OK(kn_gelu_tune(p ? KN_OPTIM_AVX2 : KN_OPTIM_SCALAR));
				memset(y[p], 0, sizeof(y[p]));
				for (int i = 0; i < MAXN + PAD; i++)
					dx[p][i] = 0.25f * (float)i;
				struct kn_gelu_fwd_args f = {
				    .out = y[p] + off, .inp = x + off, .N = n};
				kn_gelu_forward_cpu(&f);
				struct kn_gelu_bwd_args b = {
				    .dinp = dx[p] + off, .inp = x + off, .dout = dy + off, .N = n};
				kn_gelu_backward_cpu(&b);
			}
			CHECK_MSG(!memcmp(y[0], y[1], sizeof(y[0])), "forward, n %d", n);
			CHECK_MSG(!memcmp(dx[0], dx[1], sizeof(dx[0])), "backward, n %d", n);
		}
	}
	CHECK_OK(kn_gelu_tune(-1));
	CHECK(kn_gelu_tune(5) == -EINVAL);
	printf("avx2 and scalar GELU agree bit for bit\n");
}

int main(void)
{
	test_tanh();
	test_reference();
	test_paths();
	TEST_PASS();
}

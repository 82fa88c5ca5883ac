/* tests/kernels/test_optim.c — the CPU optimizers give the same bits on every path.
 *
 * For sizes with odd tails (1, 7, 15, 17, 1000003 and random ones) at unaligned
 * starts: AdamW (two steps t), SGD with and without momentum, run with every SIMD
 * path this CPU has forced in turn (kn_optim_tune), 1..4 threads, chunks forced
 * small (16 elements) and at the default, must be memcmp-identical to the scalar
 * path on one thread; the scalar result must match a double-precision formula.
 * Two callers at once (the pool busy for one of them) and a forked child (no
 * workers inherited) give the same bits too.
 */
#include "kernels/optim_impl.h"
#include "tests/kernels/util.h"
#include "tests/test.h"

#include <math.h>
#include <pthread.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static struct tk_rng rng = {0x0b7e15162a8aed2aULL};

/* One optimizer state: params, grads, two state arrays (m/v or buf/unused). */
struct st {
	long n;
	float *mem[4];
	float *a[4]; /* p, g, s1, s2 at an unaligned start */
};

static void st_alloc(struct st *s, long n, int misalign)
{
	s->n = n;
	for (int k = 0; k < 4; k++) {
		CHECK(posix_memalign((void **)&s->mem[k], 64, (size_t)(n + 16) * sizeof(float)) ==
		      0);
		s->a[k] = s->mem[k] + misalign;
	}
}

static void st_free(struct st *s)
{
	for (int k = 0; k < 4; k++)
		free(s->mem[k]);
}

static void st_copy(struct st *dst, const struct st *src)
{
	for (int k = 0; k < 4; k++)
		memcpy(dst->a[k], src->a[k], (size_t)src->n * sizeof(float));
}

static int st_same(const struct st *x, const struct st *y)
{
	for (int k = 0; k < 4; k++)
		if (memcmp(x->a[k], y->a[k], (size_t)x->n * sizeof(float)))
			return 0;
	return 1;
}

/* random state: some zero gradients, gradients spanning 1e-6..1, v >= 0 */
static void st_fill(struct st *s)
{
	for (long i = 0; i < s->n; i++) {
		float e = powf(10.0f, -6.0f * (tk_unif(&rng) * 0.5f + 0.5f));
		s->a[0][i] = tk_unif(&rng);
		s->a[1][i] = i % 11 == 3 ? 0.0f : e * tk_unif(&rng);
		s->a[2][i] = 0.1f * e * tk_unif(&rng);
		s->a[3][i] = 0.01f * e * e * (tk_unif(&rng) * 0.5f + 0.5f);
	}
}

enum op { OP_ADAMW, OP_SGD_MOMENTUM, OP_SGD, OP_N };
static const char *op_name[OP_N] = {"adamw", "sgd momentum", "sgd"};

struct hp {
	float lr, b1, b2, eps, wd, mu;
	int t;
	struct kn_clip clip; /* norms NULL: none */
};

static void run_op(enum op op, struct st *s, const struct hp *h)
{
	if (op == OP_ADAMW) {
		struct kn_adamw_args a = {.dtype = KN_F32,
		                          .params = s->a[0],
		                          .grads = s->a[1],
		                          .m = s->a[2],
		                          .v = s->a[3],
		                          .N = s->n,
		                          .lr = h->lr,
		                          .beta1 = h->b1,
		                          .beta2 = h->b2,
		                          .eps = h->eps,
		                          .weight_decay = h->wd,
		                          .t = h->t,
		                          .clip = h->clip};
		CHECK_OK(kn_adamw_check(&a));
		kn_adamw_cpu(&a);
		return;
	}
	struct kn_sgd_args a = {.dtype = KN_F32,
	                        .params = s->a[0],
	                        .grads = s->a[1],
	                        .buf = op == OP_SGD_MOMENTUM ? s->a[2] : NULL,
	                        .N = s->n,
	                        .lr = h->lr,
	                        .momentum = op == OP_SGD_MOMENTUM ? h->mu : 0.0f,
	                        .weight_decay = h->wd,
	                        .clip = h->clip};
	CHECK_OK(kn_sgd_check(&a));
	kn_sgd_cpu(&a);
}

/* The scalar result (out) against the formula in double from the inputs (in). */
static void check_fp64(enum op op, const struct st *in, const struct st *out, const struct hp *h)
{
	double lr = h->lr, wd = h->wd;
	double bc1 = 1.0 - pow(h->b1, h->t), bc2 = 1.0 - pow(h->b2, h->t);
	for (long i = 0; i < in->n; i++) {
		double p = in->a[0][i], g = in->a[1][i], s1 = in->a[2][i], s2 = in->a[3][i];
		double pd, s1d = s1, s2d = s2, tol_p, tol_s1 = 0;
		if (op == OP_ADAMW) {
			double b1 = h->b1, b2 = h->b2;
			s1d = b1 * s1 + (1 - b1) * g;
			s2d = b2 * s2 + (1 - b2) * g * g;
			double denom = sqrt(s2d) / sqrt(bc2) + h->eps;
			double upd = lr / bc1 * s1d / denom;
			pd = p * (1 - lr * wd) - upd;
			tol_s1 = 1e-6 * (fabs(b1 * s1) + fabs((1 - b1) * g));
			tol_p = 1e-6 * fabs(p) +
			        4e-6 * lr / bc1 * (fabs(b1 * s1) + fabs((1 - b1) * g)) / denom;
			CHECK_MSG(fabs(out->a[3][i] - s2d) <= 1e-6 * s2d,
			          "%s: v[%ld] = %.9g, fp64 %.9g", op_name[op], i,
			          (double)out->a[3][i], s2d);
		} else {
			double d = g + wd * p;
			if (op == OP_SGD_MOMENTUM) {
				s1d = h->mu * s1 + d;
				tol_s1 = 1e-6 * (fabs(h->mu * s1) + fabs(g) + fabs(wd * p));
				d = s1d;
			}
			pd = p - lr * d;
			tol_p = 1e-6 * fabs(p) + 4e-6 * lr * (fabs(s1) + fabs(g) + fabs(wd * p));
		}
		CHECK_MSG(fabs(out->a[0][i] - pd) <= tol_p + 1e-30, "%s: p[%ld] = %.9g, fp64 %.9g",
		          op_name[op], i, (double)out->a[0][i], pd);
		CHECK_MSG(fabs(out->a[2][i] - s1d) <= tol_s1 + 1e-30,
		          "%s: state[%ld] = %.9g, fp64 %.9g", op_name[op], i, (double)out->a[2][i],
		          s1d);
	}
}

static int npaths;
static enum kn_optim_isa paths[KN_OPTIM_NISA];

static void check_size(long n, int misalign, const struct hp *h)
{
	struct st in, ref, got;
	st_alloc(&in, n, misalign);
	st_alloc(&ref, n, misalign);
	st_alloc(&got, n, (misalign + 5) % 16);
	for (int op = 0; op < OP_N; op++) {
		st_fill(&in);
		st_copy(&ref, &in);
		CHECK_OK(kn_optim_tune(KN_OPTIM_SCALAR, 1, 0));
		run_op(op, &ref, h);
		if (h->clip.norms) {
			/* clipped = unclipped on gradients times the scale, bit for bit */
			struct hp plain = *h;
			plain.clip.norms = NULL;
			float gs = kn_clip_scale(&h->clip);
			CHECK(gs < 1.0f);
			st_copy(&got, &in);
			for (long i = 0; i < n; i++)
				got.a[1][i] *= gs;
			struct st pre;
			st_alloc(&pre, n, 0);
			st_copy(&pre, &got);
			run_op(op, &got, &plain);
			for (int k = 0; k < 4; k += 1 + (k == 0))
				CHECK_MSG(!memcmp(got.a[k], ref.a[k], (size_t)n * sizeof(float)),
				          "%s n=%ld: clipped differs from prescaled (array %d)",
				          op_name[op], n, k);
			check_fp64(op, &pre, &got, &plain);
			st_free(&pre);
		} else {
			check_fp64(op, &in, &ref, h);
		}
		for (int k = 0; k < npaths; k++)
			for (int threads = 1; threads <= 4; threads++)
				for (int small = 0; small < 2; small++) {
					st_copy(&got, &in);
					CHECK_OK(kn_optim_tune(paths[k], threads, small ? 16 : 0));
					run_op(op, &got, h);
					CHECK_MSG(st_same(&got, &ref),
					          "%s n=%ld: %s path, %d threads, chunk %s differs "
					          "from scalar",
					          op_name[op], n, kn_optim_path_get()->name,
					          threads, small ? "16" : "default");
				}
		CHECK_OK(kn_optim_tune(-1, 0, 0)); /* what training runs: widest path, kn threads */
		st_copy(&got, &in);
		run_op(op, &got, h);
		CHECK_MSG(st_same(&got, &ref), "%s n=%ld: default path differs", op_name[op], n);
	}
	st_free(&got);
	st_free(&ref);
	st_free(&in);
}

/* Two callers at once: one owns the pool, the other runs alone; same bits. */
struct caller {
	struct st s;
	const struct hp *h;
};

static void *caller_main(void *arg)
{
	struct caller *c = arg;
	for (int i = 0; i < 8; i++)
		run_op(OP_ADAMW, &c->s, c->h);
	return NULL;
}

static void check_concurrent(const struct hp *h)
{
	const long n = 300007;
	struct st in, ref;
	struct caller c[2];
	st_alloc(&in, n, 3);
	st_alloc(&ref, n, 3);
	st_fill(&in);
	st_copy(&ref, &in);
	CHECK_OK(kn_optim_tune(KN_OPTIM_SCALAR, 1, 0));
	for (int i = 0; i < 8; i++)
		run_op(OP_ADAMW, &ref, h);
	CHECK_OK(kn_optim_tune(-1, 3, 1024));
	pthread_t t[2];
	for (int k = 0; k < 2; k++) {
		st_alloc(&c[k].s, n, k);
		st_copy(&c[k].s, &in);
		c[k].h = h;
		CHECK(pthread_create(&t[k], NULL, caller_main, &c[k]) == 0);
	}
	for (int k = 0; k < 2; k++) {
		CHECK(pthread_join(t[k], NULL) == 0);
		CHECK_MSG(st_same(&c[k].s, &ref), "concurrent caller %d differs", k);
		st_free(&c[k].s);
	}
	/* a forked child has no workers: it starts its own (TSAN cannot start
	 * threads after a multi-threaded fork, so not under it) */
#ifndef __SANITIZE_THREAD__
	st_copy(&in, &ref);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		alarm(60);
		struct st x;
		st_alloc(&x, n, 3);
		st_copy(&x, &in);
		run_op(OP_ADAMW, &in, h); /* 3 threads: new workers */
		CHECK_OK(kn_optim_tune(KN_OPTIM_SCALAR, 1, 0));
		run_op(OP_ADAMW, &x, h);
		_exit(st_same(&x, &in) ? 0 : 1);
	}
	int status;
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "forked child: status %d", status);
#endif
	st_free(&ref);
	st_free(&in);
}

int main(void)
{
	for (int isa = 0; isa < KN_OPTIM_NISA; isa++)
		if (kn_optim_isa_supported(isa))
			paths[npaths++] = isa;
	CHECK_OK(kn_cpu_set_threads(2));
	printf("paths:");
	for (int k = 0; k < npaths; k++) {
		CHECK_OK(kn_optim_tune(paths[k], 0, 0));
		printf(" %s", kn_optim_path_get()->name);
	}
	CHECK_OK(kn_optim_tune(-1, 0, 0));
	printf("; default %s\n", kn_optim_path_get()->name);
	CHECK(kn_optim_tune(KN_OPTIM_NISA, 0, 0) == -EINVAL);
	CHECK(kn_optim_tune(-1, -1, 0) == -EINVAL);

	struct hp h1 = {
	    .lr = 1e-3f, .b1 = 0.9f, .b2 = 0.999f, .eps = 1e-8f, .wd = 0.01f, .mu = 0.9f, .t = 1};
	struct hp h7 = {
	    .lr = 3e-2f, .b1 = 0.8f, .b2 = 0.95f, .eps = 1e-6f, .wd = 0.1f, .mu = 0.5f, .t = 7};
	long sizes[] = {1, 7, 15, 17, 1000003, 0, 0, 0};
	for (int k = 5; k < 8; k++)
		sizes[k] = 1 + (long)(tk_u32(&rng) % 200000);
	for (int k = 0; k < 8; k++) {
		check_size(sizes[k], k % 16, k % 2 ? &h7 : &h1);
		check_size(sizes[k], (k + 9) % 16, k % 2 ? &h1 : &h7);
	}
	/* the sums of squares the norm is made of, against long double */
	long ns[] = {0, 1, 255, 257, 1000003};
	for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
		long n = ns[k];
		float *xf = malloc((size_t)n * sizeof(float) + 4);
		uint16_t *xb = malloc((size_t)n * sizeof(uint16_t) + 2);
		long double ef = 0, eb = 0;
		for (long i = 0; i < n; i++) {
			xf[i] = (tk_unif(&rng) * 2 - 1) * powf(10.0f, 3.0f * tk_unif(&rng) - 2);
			xb[i] = kn_f32_to_bf16(xf[i]);
			ef += (long double)xf[i] * xf[i];
			eb += (long double)kn_bf16_to_f32(xb[i]) * kn_bf16_to_f32(xb[i]);
		}
		double parts[KN_SUMSQ_PARTS], out = -1, out2 = -2;
		struct kn_grad_sumsq_args a = {
		    .dtype = KN_F32, .x = xf, .N = n, .parts = parts, .out = &out};
		CHECK_OK(kn_grad_sumsq_check(&a));
		kn_grad_sumsq_cpu(&a);
		CHECK_MSG(fabsl(out - ef) <= 1e-13L * ef, "sumsq f32 n=%ld: %.17g vs %.17Lg", n,
		          out, ef);
		a.out = &out2;
		kn_grad_sumsq_cpu(&a);
		CHECK(out == out2); /* deterministic */
		a.dtype = KN_BF16;
		a.x = xb;
		kn_grad_sumsq_cpu(&a);
		CHECK_MSG(fabsl(out2 - eb) <= 1e-13L * eb, "sumsq bf16 n=%ld: %.17g vs %.17Lg", n,
		          out2, eb);
		free(xf);
		free(xb);
	}
	struct kn_grad_sumsq_args bad_sq = {.dtype = KN_F32, .N = -1};
	CHECK(kn_grad_sumsq_check(&bad_sq) == -EINVAL);

	/* clipping: norm sqrt(1.5 + 2.5 + 0.7) above 0.3, a scale of 0.138... */
	static const double norms[] = {1.5, 2.5, 0.7};
	struct hp hc = h7;
	hc.clip = (struct kn_clip){.norms = norms, .nnorms = 3, .clip = 0.3f};
	check_size(1000003, 3, &hc);
	check_size(77, 0, &hc);
	hc.clip.clip = 3.0f; /* above the norm: scale 1, no change */
	CHECK(kn_clip_scale(&hc.clip) == 1.0f);
	hc.clip.clip = 0;
	float x[4] = {0};
	struct kn_adamw_args bad = {.dtype = KN_F32,
	                            .params = x,
	                            .grads = x,
	                            .m = x,
	                            .v = x,
	                            .N = 1,
	                            .lr = 1e-3f,
	                            .beta1 = 0.9f,
	                            .beta2 = 0.95f,
	                            .t = 1,
	                            .clip = hc.clip};
	CHECK(kn_adamw_check(&bad) == -EINVAL);
	check_concurrent(&h7);
	CHECK_OK(kn_optim_tune(-1, 0, 0));
	TEST_PASS();
}

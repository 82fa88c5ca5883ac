/* tests/kernels/test_grad.c — every backward kernel against central finite
 * differences computed in double precision.
 *
 * For each op: a double-precision reference forward (written here, independent
 * of the kernels) defines L = sum(out * R) for a random R; the fp32 forward must
 * match the reference (rel. error < 1e-5), and the fp32 backward, run with
 * dout = R on gradient buffers pre-filled with random values (so += is tested),
 * must match (L(x+h) - L(x-h)) / 2h for every input element to a norm-wise
 * relative error < 1e-5 (fp32 rounding gives ~1e-7; a wrong term is O(1)).
 * AdamW and the gradient buffer ops are checked against double formulas.
 */
#include "tests/kernels/util.h"
#include "tests/test.h"

#include <string.h>

#define FWD_TOL 1e-5
#define FD_TOL  1e-5
#define FD_H    1e-5

static struct tk_rng rng = {0x1234567887654321ULL};

static float *frand(size_t n, float scale)
{
	float *x = malloc(n * sizeof(float));
	CHECK(x);
	tk_fill(&rng, x, n, scale, 0);
	return x;
}

static double *to_d(const float *x, size_t n)
{
	double *d = malloc(n * sizeof(double));
	CHECK(d);
	for (size_t i = 0; i < n; i++)
		d[i] = x[i];
	return d;
}

static double rel_err_d(const float *a, const double *b, size_t n)
{
	double num = 0, den = 0;
	for (size_t i = 0; i < n; i++) {
		double d = fabs(a[i] - b[i]);
		num = d > num ? d : num;
		den = fabs(b[i]) > den ? fabs(b[i]) : den;
	}
	return den == 0 ? num : num / den;
}

typedef void (*ref_fwd)(void *ctx, double *out);

struct fd {
	ref_fwd f;
	void *ctx;
	size_t nout;
	const float *R; /* dout */
	double *out;
};

static double objective(struct fd *fd)
{
	fd->f(fd->ctx, fd->out);
	double L = 0;
	for (size_t i = 0; i < fd->nout; i++)
		L += fd->out[i] * fd->R[i];
	return L;
}

/* Checks the fp32 forward result against the reference. */
static void check_forward(const char *op, struct fd *fd, const float *got)
{
	fd->f(fd->ctx, fd->out);
	double e = rel_err_d(got, fd->out, fd->nout);
	printf("  %-22s forward       rel err %.2e\n", op, e);
	CHECK_MSG(e < FWD_TOL, "%s forward: %.3e", op, e);
}

/* analytic = after - before (the kernel accumulates); x is the double input the
 * reference reads, perturbed in place. */
static void check_grad(const char *op, const char *wrt, struct fd *fd, double *x, size_t n,
                       const float *after, const float *before)
{
	double num_max = 0, diff_max = 0;
	for (size_t i = 0; i < n; i++) {
		double save = x[i];
		x[i] = save + FD_H;
		double lp = objective(fd);
		x[i] = save - FD_H;
		double lm = objective(fd);
		x[i] = save;
		double num = (lp - lm) / (2 * FD_H);
		double ana = (double)after[i] - (double)before[i];
		num_max = fabs(num) > num_max ? fabs(num) : num_max;
		diff_max = fabs(num - ana) > diff_max ? fabs(num - ana) : diff_max;
	}
	double e = num_max == 0 ? diff_max : diff_max / num_max;
	printf("  %-22s d/d%-10s rel err %.2e (max |grad| %.2e)\n", op, wrt, e, num_max);
	CHECK_MSG(num_max > 0, "%s d/d%s: gradient is identically 0, test is vacuous", op, wrt);
	CHECK_MSG(e < FD_TOL, "%s d/d%s: relative error %.3e >= %.0e", op, wrt, e, FD_TOL);
}

static float *copy_f(const float *x, size_t n)
{
	float *c = malloc(n * sizeof(float));
	CHECK(c);
	memcpy(c, x, n * sizeof(float));
	return c;
}

/* ---- encoder ---- */
struct enc_ctx {
	int B, T, C;
	const int *tok;
	double *wte, *wpe;
};

static void enc_ref(void *p, double *out)
{
	struct enc_ctx *c = p;
	for (int bt = 0; bt < c->B * c->T; bt++)
		for (int i = 0; i < c->C; i++)
			out[bt * c->C + i] =
			    c->wte[c->tok[bt] * c->C + i] + c->wpe[(bt % c->T) * c->C + i];
}

static void test_encoder(void)
{
	int B = 2, T = 3, C = 4, V = 5, maxT = 4;
	int tok[] = {1, 3, 1, 4, 0, 1}; /* repeated tokens: scatter must accumulate */
	size_t n = (size_t)B * T * C;
	float *wte = frand((size_t)V * C, 1), *wpe = frand((size_t)maxT * C, 1);
	float *out = frand(n, 1), *R = frand(n, 1);
	float *dwte = frand((size_t)V * C, 1), *dwpe = frand((size_t)maxT * C, 1);
	float *dwte0 = copy_f(dwte, (size_t)V * C), *dwpe0 = copy_f(dwpe, (size_t)maxT * C);
	struct kn_encoder_fwd_args f = {.out = out,
	                                .inp = tok,
	                                .wte = wte,
	                                .wpe = wpe,
	                                .B = B,
	                                .T = T,
	                                .C = C,
	                                .V = V,
	                                .maxT = maxT};
	CHECK_OK(kn_encoder_forward_check(&f));
	kn_encoder_forward_cpu(&f);
	struct kn_encoder_bwd_args b = {.dwte = dwte,
	                                .dwpe = dwpe,
	                                .dout = R,
	                                .inp = tok,
	                                .B = B,
	                                .T = T,
	                                .C = C,
	                                .V = V,
	                                .maxT = maxT};
	CHECK_OK(kn_encoder_backward_check(&b));
	kn_encoder_backward_cpu(&b);
	struct enc_ctx c = {B, T, C, tok, to_d(wte, (size_t)V * C), to_d(wpe, (size_t)maxT * C)};
	struct fd fd = {enc_ref, &c, n, R, malloc(n * sizeof(double))};
	check_forward("encoder", &fd, out);
	check_grad("encoder", "wte", &fd, c.wte, (size_t)V * C, dwte, dwte0);
	check_grad("encoder", "wpe", &fd, c.wpe, (size_t)maxT * C, dwpe, dwpe0);
	free(wte), free(wpe), free(out), free(R), free(dwte), free(dwpe), free(dwte0);
	free(dwpe0), free(c.wte), free(c.wpe), free(fd.out);
}

/* ---- layernorm ---- */
struct ln_ctx {
	int rows, C;
	double *x, *w, *b;
};

static void ln_ref(void *p, double *out)
{
	struct ln_ctx *c = p;
	for (int r = 0; r < c->rows; r++) {
		const double *x = c->x + r * c->C;
		double m = 0, v = 0;
		for (int i = 0; i < c->C; i++)
			m += x[i];
		m /= c->C;
		for (int i = 0; i < c->C; i++)
			v += (x[i] - m) * (x[i] - m);
		v /= c->C;
		double rs = 1.0 / sqrt(v + 1e-5);
		for (int i = 0; i < c->C; i++)
			out[r * c->C + i] = (x[i] - m) * rs * c->w[i] + c->b[i];
	}
}

static void test_layernorm(void)
{
	int B = 2, T = 3, C = 7;
	size_t n = (size_t)B * T * C;
	float *x = frand(n, 2), *w = frand(C, 1), *bias = frand(C, 1), *out = frand(n, 1);
	float *mean = frand((size_t)B * T, 1), *rstd = frand((size_t)B * T, 1), *R = frand(n, 1);
	float *dx = frand(n, 1), *dw = frand(C, 1), *db = frand(C, 1);
	float *dx0 = copy_f(dx, n), *dw0 = copy_f(dw, C), *db0 = copy_f(db, C);
	struct kn_layernorm_fwd_args f = {.out = out,
	                                  .mean = mean,
	                                  .rstd = rstd,
	                                  .inp = x,
	                                  .weight = w,
	                                  .bias = bias,
	                                  .B = B,
	                                  .T = T,
	                                  .C = C};
	CHECK_OK(kn_layernorm_forward_check(&f));
	kn_layernorm_forward_cpu(&f);
	struct kn_layernorm_bwd_args b = {.dinp = dx,
	                                  .dweight = dw,
	                                  .dbias = db,
	                                  .dout = R,
	                                  .inp = x,
	                                  .weight = w,
	                                  .mean = mean,
	                                  .rstd = rstd,
	                                  .B = B,
	                                  .T = T,
	                                  .C = C};
	CHECK_OK(kn_layernorm_backward_check(&b));
	kn_layernorm_backward_cpu(&b);
	struct ln_ctx c = {B * T, C, to_d(x, n), to_d(w, C), to_d(bias, C)};
	struct fd fd = {ln_ref, &c, n, R, malloc(n * sizeof(double))};
	check_forward("layernorm", &fd, out);
	check_grad("layernorm", "inp", &fd, c.x, n, dx, dx0);
	check_grad("layernorm", "weight", &fd, c.w, C, dw, dw0);
	check_grad("layernorm", "bias", &fd, c.b, C, db, db0);
	free(x), free(w), free(bias), free(out), free(mean), free(rstd), free(R), free(dx);
	free(dw), free(db), free(dx0), free(dw0), free(db0), free(c.x), free(c.w), free(c.b);
	free(fd.out);
}

/* ---- matmul ---- */
struct mm_ctx {
	int BT, C, OC;
	double *x, *w, *b;
};

static void mm_ref(void *p, double *out)
{
	struct mm_ctx *c = p;
	for (int r = 0; r < c->BT; r++)
		for (int o = 0; o < c->OC; o++) {
			double s = c->b ? c->b[o] : 0;
			for (int i = 0; i < c->C; i++)
				s += c->x[r * c->C + i] * c->w[o * c->C + i];
			out[r * c->OC + o] = s;
		}
}

static void test_matmul(int with_bias)
{
	int B = 2, T = 3, C = 5, OC = 7;
	size_t nx = (size_t)B * T * C, nw = (size_t)OC * C, no = (size_t)B * T * OC;
	float *x = frand(nx, 1), *w = frand(nw, 1), *bias = frand(OC, 1), *out = frand(no, 1);
	float *R = frand(no, 1), *dx = frand(nx, 1), *dw = frand(nw, 1), *db = frand(OC, 1);
	float *dx0 = copy_f(dx, nx), *dw0 = copy_f(dw, nw), *db0 = copy_f(db, OC);
	struct kn_matmul_fwd_args f = {.out = out,
	                               .inp = x,
	                               .weight = w,
	                               .bias = with_bias ? bias : NULL,
	                               .B = B,
	                               .T = T,
	                               .C = C,
	                               .OC = OC};
	CHECK_OK(kn_matmul_forward_check(&f));
	kn_matmul_forward_cpu(&f);
	struct kn_matmul_bwd_args b = {.dinp = dx,
	                               .dweight = dw,
	                               .dbias = with_bias ? db : NULL,
	                               .dout = R,
	                               .inp = x,
	                               .weight = w,
	                               .B = B,
	                               .T = T,
	                               .C = C,
	                               .OC = OC};
	CHECK_OK(kn_matmul_backward_check(&b));
	kn_matmul_backward_cpu(&b);
	struct mm_ctx c = {B * T,       C,           OC,
	                   to_d(x, nx), to_d(w, nw), with_bias ? to_d(bias, OC) : NULL};
	struct fd fd = {mm_ref, &c, no, R, malloc(no * sizeof(double))};
	const char *op = with_bias ? "matmul" : "matmul (no bias)";
	check_forward(op, &fd, out);
	check_grad(op, "inp", &fd, c.x, nx, dx, dx0);
	check_grad(op, "weight", &fd, c.w, nw, dw, dw0);
	if (with_bias)
		check_grad(op, "bias", &fd, c.b, OC, db, db0);
	else
		CHECK_MSG(memcmp(db, db0, OC * sizeof(float)) == 0, "dbias written when NULL");
	free(x), free(w), free(bias), free(out), free(R), free(dx), free(dw), free(db);
	free(dx0), free(dw0), free(db0), free(c.x), free(c.w), free(c.b), free(fd.out);
}

/* ---- attention ---- */
struct at_ctx {
	int B, T, C, NH;
	double *x;
};

static void at_ref(void *p, double *out)
{
	struct at_ctx *c = p;
	int B = c->B, T = c->T, C = c->C, NH = c->NH, hs = C / NH;
	double sc = 1.0 / sqrt((double)hs), pre[64];
	for (int b = 0; b < B; b++)
		for (int h = 0; h < NH; h++)
			for (int t = 0; t < T; t++) {
				const double *q = c->x + (b * T + t) * 3 * C + h * hs;
				double mx = -1e300, sum = 0;
				for (int t2 = 0; t2 <= t; t2++) {
					const double *k = c->x + (b * T + t2) * 3 * C + C + h * hs;
					double s = 0;
					for (int d = 0; d < hs; d++)
						s += q[d] * k[d];
					pre[t2] = s * sc;
					mx = pre[t2] > mx ? pre[t2] : mx;
				}
				for (int t2 = 0; t2 <= t; t2++) {
					pre[t2] = exp(pre[t2] - mx);
					sum += pre[t2];
				}
				double *o = out + (b * T + t) * C + h * hs;
				for (int d = 0; d < hs; d++)
					o[d] = 0;
				for (int t2 = 0; t2 <= t; t2++) {
					const double *v =
					    c->x + (b * T + t2) * 3 * C + 2 * C + h * hs;
					for (int d = 0; d < hs; d++)
						o[d] += pre[t2] / sum * v[d];
				}
			}
}

static void test_attention(void)
{
	int B = 2, T = 5, C = 8, NH = 2;
	size_t nx = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
	float *x = frand(nx, 1.5f), *out = frand(no, 1), *att = frand(na, 1), *R = frand(no, 1);
	float *ws = malloc(kn_attention_ws_bytes(KN_F32, B, T, C, NH));
	float *dx = frand(nx, 1), *dx0 = copy_f(dx, nx);
	CHECK(ws);
	struct kn_attention_fwd_args f = {
	    .out = out, .att = att, .ws = ws, .inp = x, .B = B, .T = T, .C = C, .NH = NH};
	CHECK_OK(kn_attention_forward_check(&f));
	kn_attention_forward_cpu(&f);
	struct kn_attention_bwd_args b = {.dinp = dx,
	                                  .ws = ws,
	                                  .dout = R,
	                                  .inp = x,
	                                  .att = att,
	                                  .B = B,
	                                  .T = T,
	                                  .C = C,
	                                  .NH = NH};
	CHECK_OK(kn_attention_backward_check(&b));
	kn_attention_backward_cpu(&b);
	/* att rows are probabilities, 0 above the diagonal */
	for (size_t r = 0; r < (size_t)B * NH * T; r++) {
		double s = 0;
		int t = (int)(r % T);
		for (int t2 = 0; t2 < T; t2++) {
			s += att[r * T + t2];
			if (t2 > t)
				CHECK_MSG(att[r * T + t2] == 0.0f, "att not causal at row %zu", r);
		}
		CHECK_MSG(fabs(s - 1) < 1e-5, "att row %zu sums to %.7f", r, s);
	}
	struct at_ctx c = {B, T, C, NH, to_d(x, nx)};
	struct fd fd = {at_ref, &c, no, R, malloc(no * sizeof(double))};
	check_forward("attention", &fd, out);
	check_grad("attention", "inp", &fd, c.x, nx, dx, dx0);
	free(x), free(out), free(att), free(R), free(ws), free(dx), free(dx0), free(c.x);
	free(fd.out);
}

/* ---- GELU ---- */
struct ge_ctx {
	long n;
	double *x;
};

static void ge_ref(void *p, double *out)
{
	struct ge_ctx *c = p;
	for (long i = 0; i < c->n; i++) {
		double x = c->x[i];
		out[i] = 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
	}
}

static void test_gelu(void)
{
	long n = 64;
	float *x = frand(n, 4), *out = frand(n, 1), *R = frand(n, 1), *dx = frand(n, 1);
	float *dx0 = copy_f(dx, n);
	struct kn_gelu_fwd_args f = {.out = out, .inp = x, .N = n};
	CHECK_OK(kn_gelu_forward_check(&f));
	kn_gelu_forward_cpu(&f);
	struct kn_gelu_bwd_args b = {.dinp = dx, .inp = x, .dout = R, .N = n};
	CHECK_OK(kn_gelu_backward_check(&b));
	kn_gelu_backward_cpu(&b);
	struct ge_ctx c = {n, to_d(x, n)};
	struct fd fd = {ge_ref, &c, (size_t)n, R, malloc(n * sizeof(double))};
	check_forward("gelu", &fd, out);
	check_grad("gelu", "inp", &fd, c.x, n, dx, dx0);
	free(x), free(out), free(R), free(dx), free(dx0), free(c.x), free(fd.out);
}

/* ---- residual ---- */
struct rs_ctx {
	long n;
	double *a, *b;
};

static void rs_ref(void *p, double *out)
{
	struct rs_ctx *c = p;
	for (long i = 0; i < c->n; i++)
		out[i] = c->a[i] + c->b[i];
}

static void test_residual(void)
{
	long n = 33;
	float *a = frand(n, 1), *bb = frand(n, 1), *out = frand(n, 1), *R = frand(n, 1);
	float *da = frand(n, 1), *db = frand(n, 1), *da0 = copy_f(da, n), *db0 = copy_f(db, n);
	struct kn_residual_fwd_args f = {.out = out, .a = a, .b = bb, .N = n};
	CHECK_OK(kn_residual_forward_check(&f));
	kn_residual_forward_cpu(&f);
	struct kn_residual_bwd_args b = {.da = da, .db = db, .dout = R, .N = n};
	CHECK_OK(kn_residual_backward_check(&b));
	kn_residual_backward_cpu(&b);
	struct rs_ctx c = {n, to_d(a, n), to_d(bb, n)};
	struct fd fd = {rs_ref, &c, (size_t)n, R, malloc(n * sizeof(double))};
	check_forward("residual", &fd, out);
	check_grad("residual", "a", &fd, c.a, n, da, da0);
	check_grad("residual", "b", &fd, c.b, n, db, db0);
	free(a), free(bb), free(out), free(R), free(da), free(db), free(da0), free(db0);
	free(c.a), free(c.b), free(fd.out);
}

/* ---- cross-entropy ---- */
struct ce_ctx {
	int rows, V;
	const int *tgt;
	double *x;
};

static void ce_ref(void *p, double *out)
{
	struct ce_ctx *c = p;
	for (int r = 0; r < c->rows; r++) {
		const double *x = c->x + r * c->V;
		double mx = x[0], s = 0;
		for (int i = 1; i < c->V; i++)
			mx = x[i] > mx ? x[i] : mx;
		for (int i = 0; i < c->V; i++)
			s += exp(x[i] - mx);
		out[r] = log(s) + mx - x[c->tgt[r]];
	}
}

static void test_crossentropy(void)
{
	int B = 2, T = 3, V = 11, tgt[] = {0, 10, 3, 3, 7, 1};
	size_t n = (size_t)B * T * V, rows = (size_t)B * T;
	float *x = frand(n, 3), *probs = frand(n, 1), *losses = frand(rows, 1);
	float *dx = frand(n, 1), *dx0 = copy_f(dx, n);
	const float dloss = 0.37f;
	struct kn_crossentropy_fwd_args f = {
	    .losses = losses, .probs = probs, .logits = x, .targets = tgt, .B = B, .T = T, .V = V};
	CHECK_OK(kn_crossentropy_forward_check(&f));
	kn_crossentropy_forward_cpu(&f);
	struct kn_crossentropy_bwd_args b = {
	    .dlogits = dx, .probs = probs, .targets = tgt, .dloss = dloss, .B = B, .T = T, .V = V};
	CHECK_OK(kn_crossentropy_backward_check(&b));
	kn_crossentropy_backward_cpu(&b);
	float *R = malloc(rows * sizeof(float));
	CHECK(R);
	for (size_t i = 0; i < rows; i++)
		R[i] = dloss;
	struct ce_ctx c = {B * T, V, tgt, to_d(x, n)};
	struct fd fd = {ce_ref, &c, rows, R, malloc(rows * sizeof(double))};
	check_forward("crossentropy", &fd, losses);
	check_grad("crossentropy", "logits", &fd, c.x, n, dx, dx0);
	free(x), free(probs), free(losses), free(dx), free(dx0), free(R), free(c.x), free(fd.out);
}

/* ---- SGD, against the double formula, with and without momentum ---- */
static void test_sgd(void)
{
	long n = 50;
	for (int mom = 0; mom < 2; mom++) {
		float *p = frand(n, 1), *g = frand(n, 1), *b = frand(n, 0.1f);
		float *p0 = copy_f(p, n), *b0 = copy_f(b, n);
		struct kn_sgd_args a = {.params = p,
		                        .grads = g,
		                        .buf = mom ? b : NULL,
		                        .N = n,
		                        .lr = 0.01f,
		                        .momentum = mom ? 0.9f : 0.0f,
		                        .weight_decay = 0.1f};
		CHECK_OK(kn_sgd_check(&a));
		kn_sgd_cpu(&a);
		double ep = 0, eb = 0;
		for (long i = 0; i < n; i++) {
			double d = g[i] + (double)a.weight_decay * p0[i];
			if (mom) {
				d = a.momentum * (double)b0[i] + d;
				eb = fmax(eb, fabs(d - b[i]) / fmax(fabs(d), 1e-6));
			} else {
				CHECK(b[i] == b0[i]); /* no state touched */
			}
			double pp = p0[i] - (double)a.lr * d;
			ep = fmax(ep, fabs(pp - p[i]) / fmax(fabs(pp), 1e-3));
		}
		printf("  %-22s vs double     rel err p %.2e buf %.2e\n",
		       mom ? "sgd, momentum 0.9" : "sgd", ep, eb);
		CHECK(ep < 1e-6 && eb < 1e-6);
		free(p), free(g), free(b), free(p0), free(b0);
	}
}

/* ---- AdamW and gradient buffers, against double formulas ---- */
static void test_adamw(void)
{
	long n = 50;
	float *p = frand(n, 1), *g = frand(n, 1), *m = frand(n, 0.1f), *v = frand(n, 0.1f);
	for (long i = 0; i < n; i++)
		v[i] = fabsf(v[i]);
	float *p0 = copy_f(p, n), *m0 = copy_f(m, n), *v0 = copy_f(v, n);
	struct kn_adamw_args a = {.params = p,
	                          .grads = g,
	                          .m = m,
	                          .v = v,
	                          .N = n,
	                          .lr = 0.01f,
	                          .beta1 = 0.9f,
	                          .beta2 = 0.999f,
	                          .eps = 1e-8f,
	                          .weight_decay = 0.1f,
	                          .t = 3};
	CHECK_OK(kn_adamw_check(&a));
	kn_adamw_cpu(&a);
	double ep = 0, em = 0, ev = 0;
	for (long i = 0; i < n; i++) {
		double b1 = a.beta1, b2 = a.beta2, lr = a.lr;
		double mm = b1 * m0[i] + (1 - b1) * g[i];
		double vv = b2 * v0[i] + (1 - b2) * (double)g[i] * g[i];
		double mh = mm / (1 - pow(b1, 3)), vh = vv / (1 - pow(b2, 3));
		double pp = p0[i] * (1 - lr * a.weight_decay) - lr * mh / (sqrt(vh) + a.eps);
		ep = fmax(ep, fabs(pp - p[i]) / fmax(fabs(pp), 1e-3));
		em = fmax(em, fabs(mm - m[i]) / fmax(fabs(mm), 1e-6));
		ev = fmax(ev, fabs(vv - v[i]) / fmax(fabs(vv), 1e-9));
	}
	printf("  %-22s vs double     rel err p %.2e m %.2e v %.2e\n", "adamw", ep, em, ev);
	CHECK(ep < 1e-5 && em < 1e-5 && ev < 1e-5);
	/* gradient buffers */
	float *x = copy_f(p, n), *y = frand(n, 1);
	struct kn_grad_accumulate_args acc = {.dst = x, .src = y, .N = n};
	CHECK_OK(kn_grad_accumulate_check(&acc));
	kn_grad_accumulate_cpu(&acc);
	for (long i = 0; i < n; i++)
		CHECK(x[i] == p[i] + y[i]);
	struct kn_grad_scale_args sc = {.x = x, .scale = 0.25f, .N = n};
	CHECK_OK(kn_grad_scale_check(&sc));
	kn_grad_scale_cpu(&sc);
	for (long i = 0; i < n; i++)
		CHECK(x[i] == (p[i] + y[i]) * 0.25f);
	struct kn_grad_zero_args z = {.x = x, .N = n - 1};
	CHECK_OK(kn_grad_zero_check(&z));
	kn_grad_zero_cpu(&z);
	for (long i = 0; i < n - 1; i++)
		CHECK(x[i] == 0.0f);
	CHECK(x[n - 1] == (p[n - 1] + y[n - 1]) * 0.25f);
	free(p), free(g), free(m), free(v), free(p0), free(m0), free(v0), free(x), free(y);
}

int main(void)
{
	CHECK_OK(kn_cpu_set_threads(1));
	test_encoder();
	test_layernorm();
	test_matmul(1);
	test_matmul(0);
	test_attention();
	test_gelu();
	test_residual();
	test_crossentropy();
	test_adamw();
	test_sgd();
	TEST_PASS();
}

/* tests/kernels/test_bf16.c — the bf16 CPU kernels (KN_BF16: bf16 storage, fp32
 * arithmetic, round-to-nearest-even on store) against fp64 references of the
 * same math, op by op, forward and backward; each layer kind through the layer
 * API in bf16 against the same layer in fp32; the bf16 layer descriptors
 * (2-byte elements, no T x T attention stash); and the rounding itself (ties
 * to even, exactly).
 *
 * Tolerances, all norm-wise: max|got - ref| / max|ref| over a tensor.
 *   Inputs are bf16 values, so the reference sees exactly what the kernel
 *   sees. An op that computes in fp32 and rounds once on store errs by at most
 *   u = 2^-9 (half a bf16 ulp) relative to each element, so by <= u norm-wise,
 *   plus fp32 rounding in the sums: <= K * 2^-24 for a reduction of length K
 *   (K <= 128 here: 1e-5, negligible). TOL_ONE = 2u covers that with margin.
 *   Accumulating outputs (+=) read the bf16 value, add and round once: the same.
 *   Where a value is rounded several times before the end the bound grows:
 *   dwte (one rounding per repeated token, <= 3 here) 4u; attention backward
 *   uses the bf16-rounded forward output in D = rowsum(dout * out), which
 *   perturbs dS = P (dP - D) by u |D| per row: 8u covers it (measured ~3u).
 *   fp32 results (layernorm statistics, logsumexp, losses): 1e-5.
 *   Layers chain 10-20 such roundings, each a relative error of at most u on
 *   an intermediate, propagated through GEMMs over K = C or 4C terms that add
 *   them like random errors (sqrt(K) growth of the absolute error, against a
 *   result growing like sqrt(K) too): outputs within ~10u, gradients through
 *   the backward chain within ~30u; TOL_LAYER_OUT = 16u (3.1e-2) and
 *   TOL_LAYER_GRAD = 40u (7.8e-2) keep a margin over what this test measures
 *   (printed), and a dtype bug (bytes misread as floats, a missed +=) gives
 *   errors of order 1. */
#include "tests/kernels/bf16.h"

#include <math.h>
#include <string.h>

#define TOL_ONE        (2 * BF_U)
#define TOL_F32        1e-5
#define TOL_LAYER_OUT  (16 * BF_U)
#define TOL_LAYER_GRAD (40 * BF_U)

static double worst_op;

/* compares bf16 tensor got (n values) with the double reference */
static void expect(const char *what, const uint16_t *got, const double *ref, size_t n, double tol)
{
	float *g = malloc(n * 4 + 4);
	CHECK(g);
	bf_unpack(KN_BF16, g, got, n);
	double e = bf_err64(g, ref, n);
	printf("  %-28s n=%-6zu rel err %.3e (tol %.1e)\n", what, n, e, tol);
	CHECK_MSG(e < tol, "%s: %.3e >= %.1e", what, e, tol);
	worst_op = e > worst_op ? e : worst_op;
	free(g);
}

static void expect_f32(const char *what, const float *got, const double *ref, size_t n, double tol)
{
	double e = bf_err64(got, ref, n);
	printf("  %-28s n=%-6zu rel err %.3e (tol %.1e)\n", what, n, e, tol);
	CHECK_MSG(e < tol, "%s: %.3e >= %.1e", what, e, tol);
}

/* a bf16 tensor of n random values and its double copy */
struct bt {
	uint16_t *h;
	double *d;
	size_t n;
};

static struct bt bt_new(struct tk_rng *r, size_t n, float scale, float offset)
{
	struct bt t = {malloc(n * 2 + 2), malloc(n * 8 + 8), n};
	CHECK(t.h && t.d);
	for (size_t i = 0; i < n; i++) {
		t.h[i] = kn_f32_to_bf16(offset + scale * tk_unif(r));
		t.d[i] = kn_bf16_to_f32(t.h[i]);
	}
	return t;
}

static void bt_free(struct bt *t)
{
	free(t->h), free(t->d);
}

static double *dnew(size_t n)
{
	double *d = calloc(n + 1, sizeof(double));
	CHECK(d);
	return d;
}

static void test_rounding(void)
{
	/* 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even one */
	CHECK(kn_f32_to_bf16(1.0f + 0x1p-8f) == 0x3f80);
	CHECK(kn_f32_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82); /* odd 0x3f81 -> even 0x3f82 */
	CHECK(kn_f32_to_bf16(-(1.0f + 0x1p-8f)) == 0xbf80);
	CHECK(kn_f32_to_bf16(-(1.0f + 3 * 0x1p-8f)) == 0xbf82);
	CHECK(kn_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f) == 0x3f81); /* above the tie: up */
	CHECK(kn_f32_to_bf16(1.0f + 0x1p-8f - 0x1p-20f) == 0x3f80); /* below: down */
	CHECK(kn_f32_to_bf16(0x1p-134f) == 0x0000);                 /* tie in subnormals */
	CHECK(kn_f32_to_bf16(3 * 0x1p-134f) == 0x0002);
	CHECK(kn_f32_to_bf16(INFINITY) == 0x7f80 && kn_f32_to_bf16(-INFINITY) == 0xff80);
	CHECK(kn_f32_to_bf16(3.4e38f) == 0x7f80); /* rounds past the largest bf16 */
	CHECK(isnan(kn_bf16_to_f32(kn_f32_to_bf16(NAN))));
	for (uint32_t h = 0; h < 0x10000; h++) { /* every finite bf16 round-trips */
		float x = kn_bf16_to_f32((uint16_t)h);
		if (isfinite(x))
			CHECK_MSG(kn_f32_to_bf16(x) == h, "0x%04x", h);
	}
	/* the kernels round the same way: residual add of exact ties */
	uint16_t a[4] = {0x3f80, 0x3f81, 0xbf80, 0xbf81}, b[4], o[4];
	for (int i = 0; i < 4; i++)
		b[i] = kn_f32_to_bf16(i < 2 ? 0x1p-8f : -0x1p-8f);
	struct kn_residual_fwd_args r = {.dtype = KN_BF16, .out = o, .a = a, .b = b, .N = 4};
	CHECK_OK(kn_residual_forward_check(&r));
	kn_residual_forward_cpu(&r);
	CHECK(o[0] == 0x3f80 && o[1] == 0x3f82 && o[2] == 0xbf80 && o[3] == 0xbf82);
	printf("  round-to-nearest-even: ties exact\n");
}

static const int B = 2, T = 37, C = 48, NH = 3, V = 53, OC = 40;

static void test_encoder(struct tk_rng *r)
{
	int maxT = 40;
	size_t btc = (size_t)B * T * C;
	struct bt wte = bt_new(r, (size_t)V * C, 1, 0), wpe = bt_new(r, (size_t)maxT * C, 1, 0);
	struct bt dout = bt_new(r, btc, 1, 0);
	struct bt dwte = bt_new(r, (size_t)V * C, 0.5f, 0),
	          dwpe = bt_new(r, (size_t)maxT * C, 0.5f, 0);
	int tok[B * T];
	for (int i = 0; i < B * T; i++)
		tok[i] = (int)(tk_u32(r) % V);
	uint16_t *out = malloc(btc * 2);
	double *ref = dnew(btc), *rwte = dnew((size_t)V * C), *rwpe = dnew((size_t)maxT * C);
	CHECK(out);
	struct kn_encoder_fwd_args f = {KN_BF16, out, tok, wte.h, wpe.h, B, T, C, V, maxT};
	CHECK_OK(kn_encoder_forward_check(&f));
	kn_encoder_forward_cpu(&f);
	memcpy(rwte, dwte.d, (size_t)V * C * 8);
	memcpy(rwpe, dwpe.d, (size_t)maxT * C * 8);
	for (int bt = 0; bt < B * T; bt++)
		for (int c = 0; c < C; c++) {
			ref[(size_t)bt * C + c] =
			    wte.d[(size_t)tok[bt] * C + c] + wpe.d[(size_t)(bt % T) * C + c];
			rwte[(size_t)tok[bt] * C + c] += dout.d[(size_t)bt * C + c];
			rwpe[(size_t)(bt % T) * C + c] += dout.d[(size_t)bt * C + c];
		}
	expect("encoder_forward out", out, ref, btc, TOL_ONE);
	struct kn_encoder_bwd_args bw = {KN_BF16, dwte.h, dwpe.h, dout.h, tok, B, T, C, V, maxT};
	CHECK_OK(kn_encoder_backward_check(&bw));
	kn_encoder_backward_cpu(&bw);
	expect("encoder_backward dwte", dwte.h, rwte, (size_t)V * C, 4 * BF_U);
	expect("encoder_backward dwpe", dwpe.h, rwpe, (size_t)maxT * C, TOL_ONE);
	bt_free(&wte), bt_free(&wpe), bt_free(&dout), bt_free(&dwte), bt_free(&dwpe);
	free(out), free(ref), free(rwte), free(rwpe);
}

static void test_layernorm(struct tk_rng *r)
{
	size_t rows = (size_t)B * T, n = rows * C;
	struct bt x = bt_new(r, n, 2, 0.5f), w = bt_new(r, C, 0.2f, 1), bb = bt_new(r, C, 0.2f, 0);
	struct bt dy = bt_new(r, n, 1, 0), dx = bt_new(r, n, 0.5f, 0);
	struct bt dw = bt_new(r, C, 0.5f, 0), db = bt_new(r, C, 0.5f, 0);
	uint16_t *out = malloc(n * 2);
	float *mean = malloc(rows * 4), *rstd = malloc(rows * 4);
	double *ro = dnew(n), *rm = dnew(rows), *rr = dnew(rows), *rdx = dnew(n), *rdw = dnew(C),
	       *rdb = dnew(C);
	CHECK(out && mean && rstd);
	memcpy(rdx, dx.d, n * 8), memcpy(rdw, dw.d, C * 8), memcpy(rdb, db.d, C * 8);
	for (size_t i = 0; i < rows; i++) {
		const double *xi = x.d + i * C, *g = dy.d + i * C;
		double m = 0, v = 0;
		for (int c = 0; c < C; c++)
			m += xi[c];
		m /= C;
		for (int c = 0; c < C; c++)
			v += (xi[c] - m) * (xi[c] - m);
		v /= C;
		double rs = 1 / sqrt(v + 1e-5), dm = 0, dnm = 0;
		rm[i] = m, rr[i] = rs;
		for (int c = 0; c < C; c++) {
			double nrm = (xi[c] - m) * rs;
			ro[i * C + c] = nrm * w.d[c] + bb.d[c];
			dm += w.d[c] * g[c];
			dnm += w.d[c] * g[c] * nrm;
			rdw[c] += g[c] * nrm;
			rdb[c] += g[c];
		}
		dm /= C, dnm /= C;
		for (int c = 0; c < C; c++) {
			double nrm = (xi[c] - m) * rs;
			rdx[i * C + c] += (w.d[c] * g[c] - dm - nrm * dnm) * rs;
		}
	}
	struct kn_layernorm_fwd_args f = {KN_BF16, out, mean, rstd, x.h, w.h, bb.h, B, T, C};
	CHECK_OK(kn_layernorm_forward_check(&f));
	kn_layernorm_forward_cpu(&f);
	expect("layernorm_forward out", out, ro, n, TOL_ONE);
	expect_f32("layernorm_forward mean", mean, rm, rows, TOL_F32);
	expect_f32("layernorm_forward rstd", rstd, rr, rows, TOL_F32);
	struct kn_layernorm_bwd_args bw = {KN_BF16, dx.h, dw.h, db.h, dy.h, x.h,
	                                   w.h,     mean, rstd, B,    T,    C};
	CHECK_OK(kn_layernorm_backward_check(&bw));
	kn_layernorm_backward_cpu(&bw);
	expect("layernorm_backward dinp", dx.h, rdx, n, TOL_ONE);
	expect("layernorm_backward dweight", dw.h, rdw, C, TOL_ONE);
	expect("layernorm_backward dbias", db.h, rdb, C, TOL_ONE);
	bt_free(&x), bt_free(&w), bt_free(&bb), bt_free(&dy), bt_free(&dx), bt_free(&dw);
	bt_free(&db);
	free(out), free(mean), free(rstd), free(ro), free(rm), free(rr), free(rdx), free(rdw);
	free(rdb);
}

static void test_matmul(struct tk_rng *r)
{
	size_t bt = (size_t)B * T;
	struct bt x = bt_new(r, bt * C, 1, 0), w = bt_new(r, (size_t)OC * C, 0.2f, 0);
	struct bt bias = bt_new(r, OC, 0.5f, 0), dy = bt_new(r, bt * OC, 1, 0);
	struct bt dx = bt_new(r, bt * C, 0.5f, 0), dw = bt_new(r, (size_t)OC * C, 0.5f, 0);
	struct bt db = bt_new(r, OC, 0.5f, 0);
	uint16_t *out = malloc(bt * OC * 2);
	double *ro = dnew(bt * OC), *rdx = dnew(bt * C), *rdw = dnew((size_t)OC * C),
	       *rdb = dnew(OC);
	CHECK(out);
	memcpy(rdx, dx.d, bt * C * 8), memcpy(rdw, dw.d, (size_t)OC * C * 8);
	memcpy(rdb, db.d, OC * 8);
	for (size_t i = 0; i < bt; i++)
		for (int o = 0; o < OC; o++) {
			double s = bias.d[o], g = dy.d[i * OC + o];
			for (int c = 0; c < C; c++) {
				s += x.d[i * C + c] * w.d[(size_t)o * C + c];
				rdx[i * C + c] += g * w.d[(size_t)o * C + c];
				rdw[(size_t)o * C + c] += g * x.d[i * C + c];
			}
			ro[i * OC + o] = s;
			rdb[o] += g;
		}
	struct kn_matmul_fwd_args f = {KN_BF16, out, x.h, w.h, bias.h, B, T, C, OC};
	CHECK_OK(kn_matmul_forward_check(&f));
	kn_matmul_forward_cpu(&f);
	expect("matmul_forward out", out, ro, bt * OC, TOL_ONE);
	struct kn_matmul_bwd_args bw = {KN_BF16, dx.h, dw.h, db.h, dy.h, x.h, w.h, B, T, C, OC};
	CHECK_OK(kn_matmul_backward_check(&bw));
	kn_matmul_backward_cpu(&bw);
	expect("matmul_backward dinp", dx.h, rdx, bt * C, TOL_ONE);
	expect("matmul_backward dweight", dw.h, rdw, (size_t)OC * C, TOL_ONE);
	expect("matmul_backward dbias", db.h, rdb, OC, TOL_ONE);
	bt_free(&x), bt_free(&w), bt_free(&bias), bt_free(&dy), bt_free(&dx), bt_free(&dw);
	bt_free(&db);
	free(out), free(ro), free(rdx), free(rdw), free(rdb);
}

/* causal attention in double: out (B,T,C), lse (B,NH,T), and dinp += grads */
static void attention_ref(const double *qkv, const double *dout, int b_, int t_, int c_, int nh,
                          double *out, double *lse, double *dinp)
{
	int hs = c_ / nh;
	double scale = 1 / sqrt((double)hs);
	double *p = dnew(t_), *dp = dnew(t_);
	for (int b = 0; b < b_; b++)
		for (int h = 0; h < nh; h++) {
			const double *base = qkv + (size_t)b * t_ * 3 * c_ + (size_t)h * hs;
			double *dbase = dinp + (size_t)b * t_ * 3 * c_ + (size_t)h * hs;
			for (int t = 0; t < t_; t++) {
				const double *q = base + (size_t)t * 3 * c_;
				double mx = -INFINITY, l = 0;
				for (int s = 0; s <= t; s++) {
					const double *k = base + (size_t)s * 3 * c_ + c_;
					double d = 0;
					for (int i = 0; i < hs; i++)
						d += q[i] * k[i];
					p[s] = d * scale;
					mx = p[s] > mx ? p[s] : mx;
				}
				for (int s = 0; s <= t; s++)
					l += exp(p[s] - mx);
				for (int s = 0; s <= t; s++)
					p[s] = exp(p[s] - mx) / l;
				lse[((size_t)b * nh + h) * t_ + t] = mx + log(l);
				double *o = out + ((size_t)b * t_ + t) * c_ + (size_t)h * hs;
				const double *go =
				    dout + ((size_t)b * t_ + t) * c_ + (size_t)h * hs;
				double D = 0;
				for (int i = 0; i < hs; i++) {
					o[i] = 0;
					for (int s = 0; s <= t; s++)
						o[i] +=
						    p[s] * base[(size_t)s * 3 * c_ + 2 * c_ + i];
					D += o[i] * go[i];
				}
				for (int s = 0; s <= t; s++) {
					const double *v = base + (size_t)s * 3 * c_ + 2 * c_;
					dp[s] = 0;
					for (int i = 0; i < hs; i++)
						dp[s] += go[i] * v[i];
				}
				for (int s = 0; s <= t; s++) {
					double ds = p[s] * (dp[s] - D) * scale;
					const double *k = base + (size_t)s * 3 * c_ + c_;
					for (int i = 0; i < hs; i++) {
						dbase[(size_t)t * 3 * c_ + i] += ds * k[i];
						dbase[(size_t)s * 3 * c_ + c_ + i] += ds * q[i];
						dbase[(size_t)s * 3 * c_ + 2 * c_ + i] +=
						    p[s] * go[i];
					}
				}
			}
		}
	free(p), free(dp);
}

static void test_attention(struct tk_rng *r, int c_, int nh)
{
	size_t btc = (size_t)B * T * c_, rows = (size_t)B * nh * T;
	struct bt qkv = bt_new(r, 3 * btc, 1.5f, 0), dy = bt_new(r, btc, 1, 0);
	struct bt dqkv = bt_new(r, 3 * btc, 0.2f, 0);
	uint16_t *out = malloc(btc * 2);
	float *lse = malloc(rows * 4);
	void *ws = malloc(kn_attention_ws_bytes(KN_BF16, B, T, c_, nh));
	double *ro = dnew(btc), *rl = dnew(rows), *rd = dnew(3 * btc);
	CHECK(out && lse && ws);
	CHECK(kn_attention_att_bytes(KN_BF16, B, T, nh) == rows * 4);
	memcpy(rd, dqkv.d, 3 * btc * 8);
	attention_ref(qkv.d, dy.d, B, T, c_, nh, ro, rl, rd);
	struct kn_attention_fwd_args f = {KN_BF16, out, lse, ws, qkv.h, B, T, c_, nh};
	CHECK_OK(kn_attention_forward_check(&f));
	kn_attention_forward_cpu(&f);
	char what[64];
	snprintf(what, sizeof(what), "attention_forward hs=%d out", c_ / nh);
	expect(what, out, ro, btc, TOL_ONE);
	snprintf(what, sizeof(what), "attention_forward hs=%d lse", c_ / nh);
	expect_f32(what, lse, rl, rows, TOL_F32);
	struct kn_attention_bwd_args bw = {KN_BF16, dqkv.h, ws, dy.h, qkv.h, lse,
	                                   out,     B,      T,  c_,   nh};
	CHECK_OK(kn_attention_backward_check(&bw));
	bw.out = NULL;
	CHECK(kn_attention_backward_check(&bw) == -EINVAL); /* bf16 needs out */
	bw.out = out;
	kn_attention_backward_cpu(&bw);
	snprintf(what, sizeof(what), "attention_backward hs=%d dqkv", c_ / nh);
	expect(what, dqkv.h, rd, 3 * btc, 8 * BF_U);
	/* per part, so a wrong q, k or v gradient shows by name */
	for (int part = 0; part < 3; part++) {
		size_t n = (size_t)B * T;
		float *g = malloc(n * c_ * 4);
		double *rp = dnew(n * c_);
		CHECK(g);
		for (size_t i = 0; i < n; i++)
			for (int c = 0; c < c_; c++) {
				g[i * c_ + c] = kn_bf16_to_f32(dqkv.h[i * 3 * c_ + part * c_ + c]);
				rp[i * c_ + c] = rd[i * 3 * c_ + part * c_ + c];
			}
		double e = bf_err64(g, rp, n * c_);
		printf("    d%c rel err %.3e\n", "qkv"[part], e);
		CHECK(e < 8 * BF_U);
		free(g), free(rp);
	}
	CHECK(kn_attention_forward_check(&(struct kn_attention_fwd_args){
	          KN_BF16, out, lse, ws, qkv.h, B, T, 258, 1}) == -ENOTSUP); /* hs > 128 */
	bt_free(&qkv), bt_free(&dy), bt_free(&dqkv);
	free(out), free(lse), free(ws), free(ro), free(rl), free(rd);
}

static void test_elementwise(struct tk_rng *r)
{
	const long n = 1000;
	struct bt x = bt_new(r, n, 4, 0), y = bt_new(r, n, 1, 0), d = bt_new(r, n, 1, 0);
	struct bt acc = bt_new(r, n, 0.5f, 0), acc2 = bt_new(r, n, 0.5f, 0);
	uint16_t *out = malloc(n * 2);
	double *ref = dnew(n), *ref2 = dnew(n);
	CHECK(out);
	for (long i = 0; i < n; i++) {
		double v = x.d[i], u = 0.7978845608028654 * (v + 0.044715 * v * v * v);
		ref[i] = 0.5 * v * (1 + tanh(u));
	}
	struct kn_gelu_fwd_args gf = {KN_BF16, out, x.h, n};
	CHECK_OK(kn_gelu_forward_check(&gf));
	kn_gelu_forward_cpu(&gf);
	expect("gelu_forward", out, ref, n, TOL_ONE);
	for (long i = 0; i < n; i++) {
		double v = x.d[i], u = 0.7978845608028654 * (v + 0.044715 * v * v * v);
		double th = tanh(u);
		double g = 0.5 * (1 + th) + 0.5 * v * (1 - th * th) * 0.7978845608028654 *
		                                (1 + 3 * 0.044715 * v * v);
		ref[i] = acc.d[i] + g * d.d[i];
	}
	struct kn_gelu_bwd_args gb = {KN_BF16, acc.h, x.h, d.h, n};
	CHECK_OK(kn_gelu_backward_check(&gb));
	kn_gelu_backward_cpu(&gb);
	expect("gelu_backward", acc.h, ref, n, TOL_ONE);
	for (long i = 0; i < n; i++)
		ref[i] = x.d[i] + y.d[i];
	struct kn_residual_fwd_args rf = {KN_BF16, out, x.h, y.h, n};
	kn_residual_forward_cpu(&rf);
	expect("residual_forward", out, ref, n, TOL_ONE);
	for (long i = 0; i < n; i++) {
		ref[i] = x.d[i] + d.d[i];
		ref2[i] = y.d[i] + d.d[i];
	}
	struct kn_residual_bwd_args rb = {KN_BF16, x.h, y.h, d.h, n};
	kn_residual_backward_cpu(&rb);
	expect("residual_backward da", x.h, ref, n, TOL_ONE);
	expect("residual_backward db", y.h, ref2, n, TOL_ONE);
	for (long i = 0; i < n; i++) {
		x.d[i] = kn_bf16_to_f32(x.h[i]);
		ref[i] = acc2.d[i] + x.d[i];
	}
	struct kn_grad_accumulate_args ga = {KN_BF16, acc2.h, x.h, n};
	CHECK_OK(kn_grad_accumulate_check(&ga));
	kn_grad_accumulate_cpu(&ga);
	expect("grad_accumulate", acc2.h, ref, n, TOL_ONE);
	for (long i = 0; i < n; i++)
		ref[i] = x.d[i] * 0.3f;
	struct kn_grad_scale_args gs = {KN_BF16, x.h, 0.3f, n};
	kn_grad_scale_cpu(&gs);
	expect("grad_scale", x.h, ref, n, TOL_ONE);
	struct kn_grad_zero_args gz = {KN_BF16, x.h, n};
	kn_grad_zero_cpu(&gz);
	for (long i = 0; i < n; i++)
		CHECK(x.h[i] == 0);
	bt_free(&x), bt_free(&y), bt_free(&d), bt_free(&acc), bt_free(&acc2);
	free(out), free(ref), free(ref2);
}

static void test_crossentropy(struct tk_rng *r)
{
	size_t rows = (size_t)B * T, n = rows * V;
	struct bt logits = bt_new(r, n, 3, 0), dl = bt_new(r, n, 0.01f, 0);
	int tgt[B * T];
	for (size_t i = 0; i < rows; i++)
		tgt[i] = (int)(tk_u32(r) % V);
	uint16_t *probs = malloc(n * 2);
	float *losses = malloc(rows * 4);
	double *rp = dnew(n), *rl = dnew(rows), *rd = dnew(n);
	CHECK(probs && losses);
	for (size_t i = 0; i < rows; i++) {
		const double *x = logits.d + i * V;
		double mx = x[0], s = 0;
		for (int v = 1; v < V; v++)
			mx = x[v] > mx ? x[v] : mx;
		for (int v = 0; v < V; v++)
			s += exp(x[v] - mx);
		for (int v = 0; v < V; v++)
			rp[i * V + v] = exp(x[v] - mx) / s;
		rl[i] = log(s) + mx - x[tgt[i]];
	}
	float dloss = 1.0f / (float)rows;
	struct kn_crossentropy_fwd_args f = {KN_BF16, losses, probs, logits.h, tgt, B, T, V};
	CHECK_OK(kn_crossentropy_forward_check(&f));
	kn_crossentropy_forward_cpu(&f);
	expect("crossentropy_forward probs", probs, rp, n, TOL_ONE);
	expect_f32("crossentropy_forward losses", losses, rl, rows, TOL_F32);
	/* backward's input is the stored (bf16) probs */
	for (size_t i = 0; i < n; i++)
		rd[i] = dl.d[i] + (kn_bf16_to_f32(probs[i]) - (tgt[i / V] == (int)(i % V))) * dloss;
	struct kn_crossentropy_bwd_args bw = {KN_BF16, dl.h, probs, tgt, dloss, B, T, V};
	CHECK_OK(kn_crossentropy_backward_check(&bw));
	kn_crossentropy_backward_cpu(&bw);
	expect("crossentropy_backward", dl.h, rd, n, TOL_ONE);
	bt_free(&logits), bt_free(&dl);
	free(probs), free(losses), free(rp), free(rl), free(rd);
}

/* each layer kind in bf16 against the same layer in fp32 on the same values */
static void test_layers(int c_, int nh, int b_, int t_)
{
	struct kn_model_config cfg = {.maxT = 64, .V = 97, .L = 1, .NH = nh, .C = c_};
	for (int k = 0; k < KN_LAYER_KINDS; k++) {
		struct bf_result r32, r16;
		cfg.dtype = KN_F32;
		bf_run_layer(&bf_cpu, &cfg, k, b_, t_, 1234 + k, &r32);
		cfg.dtype = KN_BF16;
		bf_run_layer(&bf_cpu, &cfg, k, b_, t_, 1234 + k, &r16);
		char what[32];
		snprintf(what, sizeof(what), "hs=%d", c_ / nh);
		bf_compare(what, k, &r16, &r32, TOL_LAYER_OUT, TOL_LAYER_GRAD);
		bf_result_free(&r32), bf_result_free(&r16);
	}
}

static void test_describe(void)
{
	struct kn_model_config c32 = {.maxT = 1024, .V = 50257, .L = 48, .NH = 25, .C = 1600};
	struct kn_model_config c16 = c32;
	c16.dtype = KN_BF16;
	const int b_ = 8, t_ = 1024;
	double bt = (double)b_ * t_, btc = bt * c32.C;
	struct kn_layer_desc d32, d16;
	CHECK_OK(kn_layer_describe(&c32, KN_LAYER_BLOCK, b_, t_, &d32));
	CHECK_OK(kn_layer_describe(&c16, KN_LAYER_BLOCK, b_, t_, &d16));
	CHECK(d16.param_bytes * 2 == d32.param_bytes && d16.grad_bytes == d16.param_bytes);
	CHECK(d16.optim_bytes == d32.optim_bytes); /* m and v stay fp32 */
	/* 15 BTC bf16, 4 BT fp32 layernorm statistics, B NH T fp32 logsumexp: no T x T */
	CHECK(d16.stash_bytes == (uint64_t)(15 * btc * 2 + 16 * bt + 4.0 * b_ * c16.NH * t_));
	CHECK(d16.input_bytes == (uint64_t)(btc * 2) && d16.output_bytes == d16.input_bytes);
	CHECK(d16.fwd_flops < d32.fwd_flops); /* causal half of the attention GEMMs */
	printf("  describe block XL B=8 T=1024: stash fp32 %.0f MiB, bf16 %.0f MiB\n",
	       d32.stash_bytes / 1048576.0, d16.stash_bytes / 1048576.0);
	CHECK_OK(kn_layer_describe(&c16, KN_LAYER_HEAD, b_, t_, &d16));
	CHECK(d16.stash_bytes == (uint64_t)(8 * bt + (btc + bt * c16.V) * 2));
	CHECK_OK(kn_layer_describe(&c16, KN_LAYER_EMBEDDING, b_, t_, &d16));
	CHECK(d16.param_bytes == (uint64_t)((double)(c16.V + c16.maxT) * c16.C * 2));
	/* the optimizers stay fp32: a bf16 update is refused */
	struct kn_layer_mem mem = {.params = &mem, .grads = &mem, .optim = (float *)&mem};
	struct kn_optim_hparams h = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .t = 1};
	CHECK(kn_layer_update_cpu(&c16, KN_LAYER_HEAD, &mem, &h) == -ENOTSUP);
}

int main(void)
{
	CHECK_OK(kn_cpu_set_threads(1));
	struct tk_rng r = {42};
	test_rounding();
	test_encoder(&r);
	test_layernorm(&r);
	test_matmul(&r);
	test_attention(&r, C, NH);     /* hs 16 */
	test_attention(&r, 2 * 64, 2); /* hs 64 */
	test_elementwise(&r);
	test_crossentropy(&r);
	printf("max op error %.3e (u = %.3e)\n", worst_op, BF_U);
	test_layers(48, 4, 2, 24);  /* hs 12 */
	test_layers(128, 2, 2, 40); /* hs 64 */
	test_describe();
	TEST_PASS();
}

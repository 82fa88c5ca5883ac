/* tests/kernels/bf16.h — helpers for the bf16 tests (header-only): bf16
 * host buffers, norm-wise errors, and one layer (embedding, block or head) run
 * forward + backward through the layer API on a backend (CPU or CUDA) in a
 * given dtype, from inputs that are exactly representable in bf16, so fp32,
 * CPU bf16 and CUDA bf16 runs see identical values. Gradients and din start
 * from random non-zero values, so a kernel that overwrites instead of adding
 * (+=) shows. */
#ifndef SP_TESTS_KERNELS_BF16_H
#define SP_TESTS_KERNELS_BF16_H

#include "tests/kernels/util.h"
#include "tests/test.h"

#include <string.h>

/* bf16 unit roundoff: half an ulp of 1, 2^-9 */
#define BF_U (1.0 / 512)

static inline float bf_round(float x)
{
	return kn_bf16_to_f32(kn_f32_to_bf16(x));
}

/* n random values offset + scale * U(-1,1), rounded to bf16 */
static inline void bf_fill(struct tk_rng *r, float *x, size_t n, float scale, float offset)
{
	tk_fill(r, x, n, scale, offset);
	for (size_t i = 0; i < n; i++)
		x[i] = bf_round(x[i]);
}

/* the n floats of x in dtype dt at dst */
static inline void bf_pack(enum kn_dtype dt, void *dst, const float *x, size_t n)
{
	if (dt == KN_F32) {
		memcpy(dst, x, n * 4);
		return;
	}
	uint16_t *h = dst;
	for (size_t i = 0; i < n; i++)
		h[i] = kn_f32_to_bf16(x[i]);
}

static inline void bf_unpack(enum kn_dtype dt, float *x, const void *src, size_t n)
{
	if (dt == KN_F32) {
		memcpy(x, src, n * 4);
		return;
	}
	const uint16_t *h = src;
	for (size_t i = 0; i < n; i++)
		x[i] = kn_bf16_to_f32(h[i]);
}

/* max |a - b| / max |b| against a double reference */
static inline double bf_err64(const float *a, const double *b, size_t n)
{
	double num = 0, den = 0;
	for (size_t i = 0; i < n; i++) {
		if (!isfinite(a[i]) && isfinite(b[i]))
			return INFINITY;
		double d = fabs((double)a[i] - b[i]);
		num = d > num ? d : num;
		den = fabs(b[i]) > den ? fabs(b[i]) : den;
	}
	return den == 0 ? num : num / den;
}

/* max |a - b| / max |b|; a NaN or inf in a where b is finite counts as infinite */
static inline double bf_err(const float *a, const float *b, size_t n)
{
	double num = 0, den = 0;
	for (size_t i = 0; i < n; i++) {
		if (!isfinite(a[i]) && isfinite(b[i]))
			return INFINITY;
		double d = fabs((double)a[i] - b[i]);
		num = d > num ? d : num;
		den = fabs((double)b[i]) > den ? fabs((double)b[i]) : den;
	}
	return den == 0 ? num : num / den;
}

/* A backend that runs layers: memory and the layer calls. */
struct bf_backend {
	const char *name;
	void *(*alloc)(size_t bytes); /* zero-filled */
	void (*release)(void *p);
	void (*up)(void *dst, const void *src, size_t bytes);
	void (*down)(void *dst, const void *src, size_t bytes);
	int (*fwd)(void *stream, const struct kn_model_config *cfg, enum kn_layer_kind kind, int B,
	           int T, const struct kn_layer_mem *mem, const struct kn_layer_io *io);
	int (*bwd)(void *stream, const struct kn_model_config *cfg, enum kn_layer_kind kind, int B,
	           int T, const struct kn_layer_mem *mem, const struct kn_layer_io *io);
	void *stream;
};

/* What one layer run gives back (host floats). */
struct bf_result {
	float *out, *din, *grads, *tgrad;
	size_t nout, ndin, ngrads, ntgrad;
};

static inline void bf_result_free(struct bf_result *r)
{
	free(r->out), free(r->din), free(r->grads), free(r->tgrad);
	memset(r, 0, sizeof(*r));
}

static inline void *bf_upload(const struct bf_backend *be, enum kn_dtype dt, const float *x,
                              size_t n)
{
	size_t e = kn_dtype_size(dt);
	void *h = malloc(n * e + 1), *d = be->alloc(n * e);
	CHECK(h && d);
	bf_pack(dt, h, x, n);
	be->up(d, h, n * e);
	free(h);
	return d;
}

static inline float *bf_download(const struct bf_backend *be, enum kn_dtype dt, const void *d,
                                 size_t n)
{
	size_t e = kn_dtype_size(dt);
	void *h = malloc(n * e + 1);
	float *x = malloc(n * 4 + 1);
	CHECK(h && x);
	be->down(h, d, n * e);
	bf_unpack(dt, x, h, n);
	free(h);
	return x;
}

/* Runs layer kind forward then backward on be in cfg->dtype, inputs from seed. */
static inline void bf_run_layer(const struct bf_backend *be, const struct kn_model_config *cfg,
                                enum kn_layer_kind kind, int B, int T, uint64_t seed,
                                struct bf_result *res)
{
	enum kn_dtype dt = cfg->dtype;
	struct kn_layer_desc d;
	CHECK_OK(kn_layer_describe(cfg, kind, B, T, &d));
	size_t e = kn_dtype_size(dt), C = cfg->C, bt = (size_t)B * T, btc = bt * C;
	size_t np = d.param_bytes / e, nwte = (size_t)cfg->V * C;
	struct tk_rng r = {seed};
	float *p = malloc(np * 4 + 4), *g0 = malloc(np * 4 + 4);
	float *x = malloc(btc * 4), *dy = malloc(btc * 4), *dx0 = malloc(btc * 4);
	float *wte = malloc(nwte * 4), *tg0 = malloc(nwte * 4);
	int *tok = malloc(bt * sizeof(int)), *tgt = malloc(bt * sizeof(int));
	CHECK(p && g0 && x && dy && dx0 && wte && tg0 && tok && tgt);
	if (kind == KN_LAYER_BLOCK) {
		tk_init_block(&r, p, cfg->C);
		for (size_t i = 0; i < np; i++)
			p[i] = bf_round(p[i]);
	} else if (kind == KN_LAYER_EMBEDDING) {
		bf_fill(&r, p, nwte, 0.04f, 0);
		bf_fill(&r, p + nwte, (size_t)cfg->maxT * C, 0.02f, 0);
	} else {
		bf_fill(&r, p, C, 0.1f, 1.0f);
		bf_fill(&r, p + C, C, 0.02f, 0);
	}
	bf_fill(&r, g0, np, 1e-3f, 0);
	bf_fill(&r, x, btc, 1.0f, 0);
	bf_fill(&r, dy, btc, 1.0f, 0);
	bf_fill(&r, dx0, btc, 0.1f, 0);
	bf_fill(&r, wte, nwte, 0.04f, 0);
	bf_fill(&r, tg0, nwte, 1e-3f, 0);
	for (size_t i = 0; i < bt; i++) {
		tok[i] = (int)(tk_u32(&r) % (uint32_t)cfg->V);
		tgt[i] = (int)(tk_u32(&r) % (uint32_t)cfg->V);
	}
	struct kn_layer_mem mem = {
	    .params = bf_upload(be, dt, p, np),
	    .grads = bf_upload(be, dt, g0, np),
	    .stash = d.stash_bytes ? be->alloc(d.stash_bytes) : NULL,
	    .work = d.work_bytes ? be->alloc(d.work_bytes) : NULL,
	};
	CHECK(!d.stash_bytes || mem.stash);
	CHECK(!d.work_bytes || mem.work);
	void *in, *out, *dout = NULL, *din = NULL, *targets = NULL;
	size_t nout = kind == KN_LAYER_HEAD ? bt : btc;
	if (kind == KN_LAYER_EMBEDDING) {
		in = be->alloc(bt * sizeof(int));
		CHECK(in);
		be->up(in, tok, bt * sizeof(int));
	} else {
		in = bf_upload(be, dt, x, btc);
		din = bf_upload(be, dt, dx0, btc);
	}
	if (kind == KN_LAYER_HEAD) {
		out = be->alloc(bt * 4); /* losses, fp32 */
		targets = be->alloc(bt * sizeof(int));
		CHECK(out && targets);
		be->up(targets, tgt, bt * sizeof(int));
		mem.tied = bf_upload(be, dt, wte, nwte);
		mem.tied_grad = bf_upload(be, dt, tg0, nwte);
	} else {
		out = be->alloc(btc * e);
		CHECK(out);
		dout = bf_upload(be, dt, dy, btc);
	}
	struct kn_layer_io io = {.in = in,
	                         .out = out,
	                         .targets = targets,
	                         .dout = dout,
	                         .din = din,
	                         .dloss = 1.0f / (float)bt};
	CHECK_OK(be->fwd(be->stream, cfg, kind, B, T, &mem, &io));
	CHECK_OK(be->bwd(be->stream, cfg, kind, B, T, &mem, &io));
	memset(res, 0, sizeof(*res));
	if (kind == KN_LAYER_HEAD) {
		res->out = malloc(bt * 4);
		CHECK(res->out);
		be->down(res->out, out, bt * 4);
	} else {
		res->out = bf_download(be, dt, out, btc);
	}
	res->nout = nout;
	res->grads = bf_download(be, dt, mem.grads, np);
	res->ngrads = np;
	if (din) {
		res->din = bf_download(be, dt, din, btc);
		res->ndin = btc;
	}
	if (mem.tied_grad) {
		res->tgrad = bf_download(be, dt, mem.tied_grad, nwte);
		res->ntgrad = nwte;
	}
	be->release(mem.params), be->release(mem.grads), be->release(mem.stash);
	be->release(mem.work), be->release((void *)mem.tied), be->release(mem.tied_grad);
	be->release(in), be->release(out), be->release((void *)dout), be->release(din);
	be->release(targets);
	free(p), free(g0), free(x), free(dy), free(dx0), free(wte), free(tg0), free(tok), free(tgt);
}

/* ---- the CPU backend ---- */
static inline void *bf_cpu_alloc(size_t bytes)
{
	return calloc(1, bytes ? bytes : 1);
}
static inline void bf_cpu_copy(void *dst, const void *src, size_t bytes)
{
	memcpy(dst, src, bytes);
}
static inline int bf_cpu_fwd(void *stream, const struct kn_model_config *cfg,
                             enum kn_layer_kind kind, int B, int T, const struct kn_layer_mem *mem,
                             const struct kn_layer_io *io)
{
	(void)stream;
	return kn_layer_forward_cpu(cfg, kind, B, T, mem, io);
}
static inline int bf_cpu_bwd(void *stream, const struct kn_model_config *cfg,
                             enum kn_layer_kind kind, int B, int T, const struct kn_layer_mem *mem,
                             const struct kn_layer_io *io)
{
	(void)stream;
	return kn_layer_backward_cpu(cfg, kind, B, T, mem, io);
}
__attribute__((unused)) static const struct bf_backend bf_cpu = {
    "cpu", bf_cpu_alloc, free, bf_cpu_copy, bf_cpu_copy, bf_cpu_fwd, bf_cpu_bwd, NULL};

static const char *const bf_kind_names[KN_LAYER_KINDS] = {"embedding", "block", "head"};

/* Compares two runs of the same layer: out, din, grads, tied grads; prints
 * each error and fails past tol_out (out) or tol_grad (the rest). Returns the
 * largest error. */
static inline double bf_compare(const char *what, enum kn_layer_kind kind,
                                const struct bf_result *got, const struct bf_result *ref,
                                double tol_out, double tol_grad)
{
	const char *names[4] = {"out", "din", "grads", "tied grads"};
	const float *g[4] = {got->out, got->din, got->grads, got->tgrad};
	const float *rf[4] = {ref->out, ref->din, ref->grads, ref->tgrad};
	size_t n[4] = {ref->nout, ref->ndin, ref->ngrads, ref->ntgrad};
	double worst = 0;
	for (int i = 0; i < 4; i++) {
		if (!n[i])
			continue;
		double e = bf_err(g[i], rf[i], n[i]);
		double tol = i == 0 ? tol_out : tol_grad;
		printf("  %-10s %-9s %-10s n=%-8zu rel err %.3e (tol %.1e)\n", what,
		       bf_kind_names[kind], names[i], n[i], e, tol);
		CHECK_MSG(e < tol, "%s %s %s: %.3e >= %.1e", what, bf_kind_names[kind], names[i], e,
		          tol);
		worst = e > worst ? e : worst;
	}
	return worst;
}

#endif

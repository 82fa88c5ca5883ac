/* tests/kernels/util.h — helpers for the kernel tests: a seeded RNG, relative
 * error, raw file I/O and the CPU executor for gpt2.h (header-only). */
#ifndef SP_TESTS_KERNELS_UTIL_H
#define SP_TESTS_KERNELS_UTIL_H

#include "tests/kernels/gpt2.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

struct tk_rng {
	uint64_t s;
};

static inline uint32_t tk_u32(struct tk_rng *r)
{
	r->s ^= r->s >> 12;
	r->s ^= r->s << 25;
	r->s ^= r->s >> 27;
	return (uint32_t)((r->s * 0x2545F4914F6CDD1DULL) >> 32);
}

/* uniform in [-1, 1) */
static inline float tk_unif(struct tk_rng *r)
{
	return (float)(tk_u32(r) / 4294967296.0 * 2.0 - 1.0);
}

static inline void tk_fill(struct tk_rng *r, float *x, size_t n, float scale, float offset)
{
	for (size_t i = 0; i < n; i++)
		x[i] = offset + scale * tk_unif(r);
}

/* max |a - b| / max |b| (norm-wise relative error; 0 when both are 0) */
static inline double tk_rel_err(const float *a, const float *b, size_t n)
{
	double num = 0, den = 0;
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)a[i] - b[i]);
		num = d > num ? d : num;
		den = fabs((double)b[i]) > den ? fabs((double)b[i]) : den;
	}
	return den == 0 ? num : num / den;
}

static inline int tk_write(const char *dir, const char *name, const void *p, size_t bytes)
{
	char path[1024];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "wb");
	if (!f)
		return -1;
	size_t w = fwrite(p, 1, bytes, f);
	fclose(f);
	return w == bytes ? 0 : -1;
}

static inline int tk_read(const char *dir, const char *name, void *p, size_t bytes)
{
	char path[1024];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "rb");
	if (!f)
		return -1;
	size_t r = fread(p, 1, bytes, f);
	int extra = fgetc(f) != EOF;
	fclose(f);
	return r == bytes && !extra ? 0 : -1;
}

/* ---- CPU executor ---- */
static void tk_cpu_run(void *ctx, const struct dev_kernel *k, const void *args)
{
	(void)ctx;
	k->cpu(args);
}

static void *tk_cpu_alloc(void *ctx, size_t bytes)
{
	(void)ctx;
	return calloc(1, bytes ? bytes : 1);
}

static void tk_cpu_free(void *ctx, void *p)
{
	(void)ctx;
	free(p);
}

__attribute__((unused)) static const struct g2_exec tk_cpu_exec = {tk_cpu_run, tk_cpu_alloc,
                                                                   tk_cpu_free, NULL};

/* GPT-2-like initial parameters: matrices ~ U(-0.04, 0.04) (std ~0.02),
 * layernorm weights near 1, biases small but non-zero (so they are tested). */
static inline void tk_init_block(struct tk_rng *r, float *base, int C)
{
	float *p[KN_BLOCK_NPARAMS];
	size_t sz[KN_BLOCK_NPARAMS];
	g2_block_split(base, C, p);
	kn_block_param_sizes(C, sz);
	for (int i = 0; i < KN_BLOCK_NPARAMS; i++) {
		int ln_w = i == G2_LN1W || i == G2_LN2W;
		int mat = i == G2_QKVW || i == G2_PROJW || i == G2_FCW || i == G2_FCPROJW;
		tk_fill(r, p[i], sz[i], ln_w ? 0.1f : mat ? 0.04f : 0.02f, ln_w ? 1.0f : 0.0f);
	}
}

static inline void tk_init_model(struct tk_rng *r, struct g2_model *m)
{
	const struct kn_model_config *c = &m->cfg;
	tk_fill(r, m->wte, (size_t)c->V * c->C, 0.04f, 0);
	tk_fill(r, m->wpe, (size_t)c->maxT * c->C, 0.02f, 0);
	for (int l = 0; l < c->L; l++)
		tk_init_block(r, m->params + g2_block_offset(c, l), c->C);
	tk_fill(r, m->lnfw, (size_t)c->C, 0.1f, 1.0f);
	tk_fill(r, m->lnfb, (size_t)c->C, 0.02f, 0);
}

static inline double tk_mean_loss(const struct g2_model *m)
{
	double s = 0;
	for (int i = 0; i < m->B * m->T; i++)
		s += m->losses[i];
	return s / (m->B * m->T);
}

#endif

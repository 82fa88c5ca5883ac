/* tests/kernels/gpt2.h — a GPT-2 (llm.c's layer set) composed from the kn_
 * kernels, for tests and benches: one block, or embedding + L blocks + final
 * layernorm + tied LM head + cross-entropy, forward, backward and AdamW.
 *
 * The composition is backend-neutral: every op goes through g2_exec.run with
 * the op's struct dev_kernel and args (CPU: k->cpu(args); CUDA: k->cuda(args,
 * stream)), and every buffer through g2_exec.alloc (zeroed). Parameters are
 * laid out layer by layer (wte, wpe, block 0's 12 tensors in llm.c's order, ...,
 * lnfw, lnfb) so one layer's parameters are one contiguous range.
 * Header-only (static functions); no error handling beyond allocation failure.
 */
#ifndef SP_TESTS_KERNELS_GPT2_H
#define SP_TESTS_KERNELS_GPT2_H

#include "kernels/kernels.h"

#include <stdlib.h>
#include <string.h>

struct g2_exec {
	void (*run)(void *ctx, const struct dev_kernel *k, const void *args);
	void *(*alloc)(void *ctx, size_t bytes); /* zero-filled; NULL on failure */
	void (*free)(void *ctx, void *p);
	void *ctx;
};

static inline void g2_run(const struct g2_exec *ex, const struct dev_kernel *k, const void *a)
{
	ex->run(ex->ctx, k, a);
}

static inline void g2_zero(const struct g2_exec *ex, float *x, size_t n)
{
	struct kn_grad_zero_args z = {.x = x, .N = (long)n};
	g2_run(ex, &kn_grad_zero_kernel, &z);
}

/* Per-block activations kept for backward (and the block output). */
struct g2_block_acts {
	float *ln1, *ln1_mean, *ln1_rstd, *qkv, *att, *atty, *attproj, *res2;
	float *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *fcproj, *out;
};

/* Gradient scratch shared by all blocks (sized for one block). */
struct g2_scratch {
	float *ws; /* attention workspace */
	float *dres2, *dln2, *dfch, *dfch_gelu, *dattproj, *datty, *dqkv, *dln1;
};

static inline size_t g2_block_nparams(int C)
{
	return 12 * (size_t)C * C + 13 * (size_t)C;
}

/* Splits a block's contiguous parameter range into its 12 tensors. */
static inline void g2_block_split(float *base, int C, float *p[KN_BLOCK_NPARAMS])
{
	size_t sz[KN_BLOCK_NPARAMS];
	kn_block_param_sizes(C, sz);
	for (int i = 0; i < KN_BLOCK_NPARAMS; i++) {
		p[i] = base;
		base += sz[i];
	}
}

enum {
	G2_LN1W,
	G2_LN1B,
	G2_QKVW,
	G2_QKVB,
	G2_PROJW,
	G2_PROJB,
	G2_LN2W,
	G2_LN2B,
	G2_FCW,
	G2_FCB,
	G2_FCPROJW,
	G2_FCPROJB
};

static inline void *g2_alloc_f(const struct g2_exec *ex, size_t n, int *fail)
{
	void *p = ex->alloc(ex->ctx, n * sizeof(float));
	if (!p)
		*fail = 1;
	return p;
}

static inline int g2_block_acts_alloc(const struct g2_exec *ex, struct g2_block_acts *a, int B,
                                      int T, int C, int NH)
{
	size_t bt = (size_t)B * T, btc = bt * C;
	int fail = 0;
	a->ln1 = g2_alloc_f(ex, btc, &fail);
	a->ln1_mean = g2_alloc_f(ex, bt, &fail);
	a->ln1_rstd = g2_alloc_f(ex, bt, &fail);
	a->qkv = g2_alloc_f(ex, 3 * btc, &fail);
	a->att = g2_alloc_f(ex, (size_t)B * NH * T * T, &fail);
	a->atty = g2_alloc_f(ex, btc, &fail);
	a->attproj = g2_alloc_f(ex, btc, &fail);
	a->res2 = g2_alloc_f(ex, btc, &fail);
	a->ln2 = g2_alloc_f(ex, btc, &fail);
	a->ln2_mean = g2_alloc_f(ex, bt, &fail);
	a->ln2_rstd = g2_alloc_f(ex, bt, &fail);
	a->fch = g2_alloc_f(ex, 4 * btc, &fail);
	a->fch_gelu = g2_alloc_f(ex, 4 * btc, &fail);
	a->fcproj = g2_alloc_f(ex, btc, &fail);
	a->out = g2_alloc_f(ex, btc, &fail);
	return fail ? -ENOMEM : 0;
}

static inline void g2_block_acts_free(const struct g2_exec *ex, struct g2_block_acts *a)
{
	float *all[] = {a->ln1,      a->ln1_mean, a->ln1_rstd, a->qkv,    a->att,
	                a->atty,     a->attproj,  a->res2,     a->ln2,    a->ln2_mean,
	                a->ln2_rstd, a->fch,      a->fch_gelu, a->fcproj, a->out};
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		ex->free(ex->ctx, all[i]);
}

static inline int g2_scratch_alloc(const struct g2_exec *ex, struct g2_scratch *s, int B, int T,
                                   int C, int NH)
{
	size_t btc = (size_t)B * T * C;
	int fail = 0;
	s->ws = ex->alloc(ex->ctx, kn_attention_ws_bytes(KN_F32, B, T, C, NH));
	fail |= !s->ws;
	s->dres2 = g2_alloc_f(ex, btc, &fail);
	s->dln2 = g2_alloc_f(ex, btc, &fail);
	s->dfch = g2_alloc_f(ex, 4 * btc, &fail);
	s->dfch_gelu = g2_alloc_f(ex, 4 * btc, &fail);
	s->dattproj = g2_alloc_f(ex, btc, &fail);
	s->datty = g2_alloc_f(ex, btc, &fail);
	s->dqkv = g2_alloc_f(ex, 3 * btc, &fail);
	s->dln1 = g2_alloc_f(ex, btc, &fail);
	return fail ? -ENOMEM : 0;
}

static inline void g2_scratch_free(const struct g2_exec *ex, struct g2_scratch *s)
{
	float *all[] = {s->ws,       s->dres2, s->dln2, s->dfch, s->dfch_gelu,
	                s->dattproj, s->datty, s->dqkv, s->dln1};
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		ex->free(ex->ctx, all[i]);
}

/* out = block(x): pre-LN attention and MLP with residuals (GPT-2). */
static inline void g2_block_forward(const struct g2_exec *ex, float *const p[KN_BLOCK_NPARAMS],
                                    struct g2_block_acts *a, struct g2_scratch *s, const float *x,
                                    int B, int T, int C, int NH)
{
	long btc = (long)B * T * C;
	struct kn_layernorm_fwd_args ln1 = {.out = a->ln1,
	                                    .mean = a->ln1_mean,
	                                    .rstd = a->ln1_rstd,
	                                    .inp = x,
	                                    .weight = p[G2_LN1W],
	                                    .bias = p[G2_LN1B],
	                                    .B = B,
	                                    .T = T,
	                                    .C = C};
	g2_run(ex, &kn_layernorm_forward_kernel, &ln1);
	struct kn_matmul_fwd_args qkv = {.out = a->qkv,
	                                 .inp = a->ln1,
	                                 .weight = p[G2_QKVW],
	                                 .bias = p[G2_QKVB],
	                                 .B = B,
	                                 .T = T,
	                                 .C = C,
	                                 .OC = 3 * C};
	g2_run(ex, &kn_matmul_forward_kernel, &qkv);
	struct kn_attention_fwd_args at = {.out = a->atty,
	                                   .att = a->att,
	                                   .ws = s->ws,
	                                   .inp = a->qkv,
	                                   .B = B,
	                                   .T = T,
	                                   .C = C,
	                                   .NH = NH};
	g2_run(ex, &kn_attention_forward_kernel, &at);
	struct kn_matmul_fwd_args pr = {.out = a->attproj,
	                                .inp = a->atty,
	                                .weight = p[G2_PROJW],
	                                .bias = p[G2_PROJB],
	                                .B = B,
	                                .T = T,
	                                .C = C,
	                                .OC = C};
	g2_run(ex, &kn_matmul_forward_kernel, &pr);
	struct kn_residual_fwd_args r2 = {.out = a->res2, .a = x, .b = a->attproj, .N = btc};
	g2_run(ex, &kn_residual_forward_kernel, &r2);
	struct kn_layernorm_fwd_args ln2 = {.out = a->ln2,
	                                    .mean = a->ln2_mean,
	                                    .rstd = a->ln2_rstd,
	                                    .inp = a->res2,
	                                    .weight = p[G2_LN2W],
	                                    .bias = p[G2_LN2B],
	                                    .B = B,
	                                    .T = T,
	                                    .C = C};
	g2_run(ex, &kn_layernorm_forward_kernel, &ln2);
	struct kn_matmul_fwd_args fc = {.out = a->fch,
	                                .inp = a->ln2,
	                                .weight = p[G2_FCW],
	                                .bias = p[G2_FCB],
	                                .B = B,
	                                .T = T,
	                                .C = C,
	                                .OC = 4 * C};
	g2_run(ex, &kn_matmul_forward_kernel, &fc);
	struct kn_gelu_fwd_args ge = {.out = a->fch_gelu, .inp = a->fch, .N = 4 * btc};
	g2_run(ex, &kn_gelu_forward_kernel, &ge);
	struct kn_matmul_fwd_args fp = {.out = a->fcproj,
	                                .inp = a->fch_gelu,
	                                .weight = p[G2_FCPROJW],
	                                .bias = p[G2_FCPROJB],
	                                .B = B,
	                                .T = T,
	                                .C = 4 * C,
	                                .OC = C};
	g2_run(ex, &kn_matmul_forward_kernel, &fp);
	struct kn_residual_fwd_args r3 = {.out = a->out, .a = a->res2, .b = a->fcproj, .N = btc};
	g2_run(ex, &kn_residual_forward_kernel, &r3);
}

/* dx += d block(x) / dx . dout; parameter gradients g += (all accumulate). */
static inline void g2_block_backward(const struct g2_exec *ex, float *const p[KN_BLOCK_NPARAMS],
                                     float *const g[KN_BLOCK_NPARAMS], struct g2_block_acts *a,
                                     struct g2_scratch *s, const float *x, const float *dout,
                                     float *dx, int B, int T, int C, int NH)
{
	long btc = (long)B * T * C;
	g2_zero(ex, s->dres2, btc);
	g2_zero(ex, s->dln2, btc);
	g2_zero(ex, s->dfch, 4 * btc);
	g2_zero(ex, s->dfch_gelu, 4 * btc);
	g2_zero(ex, s->dattproj, btc);
	g2_zero(ex, s->datty, btc);
	g2_zero(ex, s->dqkv, 3 * btc);
	g2_zero(ex, s->dln1, btc);
	/* out = res2 + fcproj: dres2 += dout; dfcproj is dout itself */
	struct kn_grad_accumulate_args acc = {.dst = s->dres2, .src = dout, .N = btc};
	g2_run(ex, &kn_grad_accumulate_kernel, &acc);
	struct kn_matmul_bwd_args fp = {.dinp = s->dfch_gelu,
	                                .dweight = g[G2_FCPROJW],
	                                .dbias = g[G2_FCPROJB],
	                                .dout = dout,
	                                .inp = a->fch_gelu,
	                                .weight = p[G2_FCPROJW],
	                                .B = B,
	                                .T = T,
	                                .C = 4 * C,
	                                .OC = C};
	g2_run(ex, &kn_matmul_backward_kernel, &fp);
	struct kn_gelu_bwd_args ge = {
	    .dinp = s->dfch, .inp = a->fch, .dout = s->dfch_gelu, .N = 4 * btc};
	g2_run(ex, &kn_gelu_backward_kernel, &ge);
	struct kn_matmul_bwd_args fc = {.dinp = s->dln2,
	                                .dweight = g[G2_FCW],
	                                .dbias = g[G2_FCB],
	                                .dout = s->dfch,
	                                .inp = a->ln2,
	                                .weight = p[G2_FCW],
	                                .B = B,
	                                .T = T,
	                                .C = C,
	                                .OC = 4 * C};
	g2_run(ex, &kn_matmul_backward_kernel, &fc);
	struct kn_layernorm_bwd_args ln2 = {.dinp = s->dres2,
	                                    .dweight = g[G2_LN2W],
	                                    .dbias = g[G2_LN2B],
	                                    .dout = s->dln2,
	                                    .inp = a->res2,
	                                    .weight = p[G2_LN2W],
	                                    .mean = a->ln2_mean,
	                                    .rstd = a->ln2_rstd,
	                                    .B = B,
	                                    .T = T,
	                                    .C = C};
	g2_run(ex, &kn_layernorm_backward_kernel, &ln2);
	/* res2 = x + attproj */
	struct kn_residual_bwd_args r2 = {.da = dx, .db = s->dattproj, .dout = s->dres2, .N = btc};
	g2_run(ex, &kn_residual_backward_kernel, &r2);
	struct kn_matmul_bwd_args pr = {.dinp = s->datty,
	                                .dweight = g[G2_PROJW],
	                                .dbias = g[G2_PROJB],
	                                .dout = s->dattproj,
	                                .inp = a->atty,
	                                .weight = p[G2_PROJW],
	                                .B = B,
	                                .T = T,
	                                .C = C,
	                                .OC = C};
	g2_run(ex, &kn_matmul_backward_kernel, &pr);
	struct kn_attention_bwd_args at = {.dinp = s->dqkv,
	                                   .ws = s->ws,
	                                   .dout = s->datty,
	                                   .inp = a->qkv,
	                                   .att = a->att,
	                                   .B = B,
	                                   .T = T,
	                                   .C = C,
	                                   .NH = NH};
	g2_run(ex, &kn_attention_backward_kernel, &at);
	struct kn_matmul_bwd_args qkv = {.dinp = s->dln1,
	                                 .dweight = g[G2_QKVW],
	                                 .dbias = g[G2_QKVB],
	                                 .dout = s->dqkv,
	                                 .inp = a->ln1,
	                                 .weight = p[G2_QKVW],
	                                 .B = B,
	                                 .T = T,
	                                 .C = C,
	                                 .OC = 3 * C};
	g2_run(ex, &kn_matmul_backward_kernel, &qkv);
	struct kn_layernorm_bwd_args ln1 = {.dinp = dx,
	                                    .dweight = g[G2_LN1W],
	                                    .dbias = g[G2_LN1B],
	                                    .dout = s->dln1,
	                                    .inp = x,
	                                    .weight = p[G2_LN1W],
	                                    .mean = a->ln1_mean,
	                                    .rstd = a->ln1_rstd,
	                                    .B = B,
	                                    .T = T,
	                                    .C = C};
	g2_run(ex, &kn_layernorm_backward_kernel, &ln1);
}

/* ---- the whole model ---- */
struct g2_model {
	struct kn_model_config cfg;
	int B, T;
	size_t nparams;
	float *params, *grads, *m, *v; /* nparams each */
	float *wte, *wpe, *lnfw, *lnfb, *dwte, *dwpe, *dlnfw, *dlnfb;
	float *encoded, *lnf, *lnf_mean, *lnf_rstd, *logits, *probs, *losses;
	float *dlogits, *dlnf, *dres[2];
	int *tokens, *targets;      /* (B,T), in the executor's memory */
	struct g2_block_acts *acts; /* L */
	struct g2_scratch scratch;
};

static inline size_t g2_model_nparams(const struct kn_model_config *c)
{
	return (size_t)(c->V + c->maxT) * c->C + (size_t)c->L * g2_block_nparams(c->C) +
	       2 * (size_t)c->C;
}

static inline size_t g2_block_offset(const struct kn_model_config *c, int l)
{
	return (size_t)(c->V + c->maxT) * c->C + (size_t)l * g2_block_nparams(c->C);
}

static inline int g2_model_create(const struct g2_exec *ex, const struct kn_model_config *c, int B,
                                  int T, struct g2_model *m)
{
	memset(m, 0, sizeof(*m));
	m->cfg = *c;
	m->B = B;
	m->T = T;
	m->nparams = g2_model_nparams(c);
	size_t bt = (size_t)B * T, btc = bt * c->C, btv = bt * c->V;
	int fail = 0;
	m->params = g2_alloc_f(ex, m->nparams, &fail);
	m->grads = g2_alloc_f(ex, m->nparams, &fail);
	m->m = g2_alloc_f(ex, m->nparams, &fail);
	m->v = g2_alloc_f(ex, m->nparams, &fail);
	m->encoded = g2_alloc_f(ex, btc, &fail);
	m->lnf = g2_alloc_f(ex, btc, &fail);
	m->lnf_mean = g2_alloc_f(ex, bt, &fail);
	m->lnf_rstd = g2_alloc_f(ex, bt, &fail);
	m->logits = g2_alloc_f(ex, btv, &fail);
	m->probs = g2_alloc_f(ex, btv, &fail);
	m->losses = g2_alloc_f(ex, bt, &fail);
	m->dlogits = g2_alloc_f(ex, btv, &fail);
	m->dlnf = g2_alloc_f(ex, btc, &fail);
	m->dres[0] = g2_alloc_f(ex, btc, &fail);
	m->dres[1] = g2_alloc_f(ex, btc, &fail);
	m->tokens = ex->alloc(ex->ctx, bt * sizeof(int));
	m->targets = ex->alloc(ex->ctx, bt * sizeof(int));
	fail |= !m->tokens || !m->targets;
	m->acts = calloc((size_t)c->L, sizeof(*m->acts));
	fail |= !m->acts;
	for (int l = 0; !fail && l < c->L; l++)
		fail |= g2_block_acts_alloc(ex, &m->acts[l], B, T, c->C, c->NH) != 0;
	if (!fail)
		fail |= g2_scratch_alloc(ex, &m->scratch, B, T, c->C, c->NH) != 0;
	if (fail)
		return -ENOMEM;
	size_t C = c->C, vc = (size_t)c->V * C, tail = g2_block_offset(c, c->L);
	m->wte = m->params;
	m->wpe = m->params + vc;
	m->lnfw = m->params + tail;
	m->lnfb = m->lnfw + C;
	m->dwte = m->grads;
	m->dwpe = m->grads + vc;
	m->dlnfw = m->grads + tail;
	m->dlnfb = m->dlnfw + C;
	return 0;
}

static inline void g2_model_destroy(const struct g2_exec *ex, struct g2_model *m)
{
	float *all[] = {m->params, m->grads,    m->m,        m->v,       m->encoded,
	                m->lnf,    m->lnf_mean, m->lnf_rstd, m->logits,  m->probs,
	                m->losses, m->dlogits,  m->dlnf,     m->dres[0], m->dres[1]};
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		ex->free(ex->ctx, all[i]);
	ex->free(ex->ctx, m->tokens);
	ex->free(ex->ctx, m->targets);
	for (int l = 0; m->acts && l < m->cfg.L; l++)
		g2_block_acts_free(ex, &m->acts[l]);
	free(m->acts);
	g2_scratch_free(ex, &m->scratch);
}

/* Forward over m->tokens / m->targets; per-position losses land in m->losses. */
static inline void g2_model_forward(const struct g2_exec *ex, struct g2_model *m)
{
	const struct kn_model_config *c = &m->cfg;
	int B = m->B, T = m->T, C = c->C;
	struct kn_encoder_fwd_args en = {.out = m->encoded,
	                                 .inp = m->tokens,
	                                 .wte = m->wte,
	                                 .wpe = m->wpe,
	                                 .B = B,
	                                 .T = T,
	                                 .C = C,
	                                 .V = c->V,
	                                 .maxT = c->maxT};
	g2_run(ex, &kn_encoder_forward_kernel, &en);
	const float *x = m->encoded;
	for (int l = 0; l < c->L; l++) {
		float *p[KN_BLOCK_NPARAMS];
		g2_block_split(m->params + g2_block_offset(c, l), C, p);
		g2_block_forward(ex, p, &m->acts[l], &m->scratch, x, B, T, C, c->NH);
		x = m->acts[l].out;
	}
	struct kn_layernorm_fwd_args ln = {.out = m->lnf,
	                                   .mean = m->lnf_mean,
	                                   .rstd = m->lnf_rstd,
	                                   .inp = x,
	                                   .weight = m->lnfw,
	                                   .bias = m->lnfb,
	                                   .B = B,
	                                   .T = T,
	                                   .C = C};
	g2_run(ex, &kn_layernorm_forward_kernel, &ln);
	struct kn_matmul_fwd_args head = {
	    .out = m->logits, .inp = m->lnf, .weight = m->wte, .B = B, .T = T, .C = C, .OC = c->V};
	g2_run(ex, &kn_matmul_forward_kernel, &head);
	struct kn_crossentropy_fwd_args ce = {.losses = m->losses,
	                                      .probs = m->probs,
	                                      .logits = m->logits,
	                                      .targets = m->targets,
	                                      .B = B,
	                                      .T = T,
	                                      .V = c->V};
	g2_run(ex, &kn_crossentropy_forward_kernel, &ce);
}

/* Backward of the mean loss; accumulates into m->grads (zero them first). */
static inline void g2_model_backward(const struct g2_exec *ex, struct g2_model *m)
{
	const struct kn_model_config *c = &m->cfg;
	int B = m->B, T = m->T, C = c->C;
	long btc = (long)B * T * C;
	g2_zero(ex, m->dlogits, (size_t)B * T * c->V);
	g2_zero(ex, m->dlnf, btc);
	struct kn_crossentropy_bwd_args ce = {.dlogits = m->dlogits,
	                                      .probs = m->probs,
	                                      .targets = m->targets,
	                                      .dloss = 1.0f / (float)(B * T),
	                                      .B = B,
	                                      .T = T,
	                                      .V = c->V};
	g2_run(ex, &kn_crossentropy_backward_kernel, &ce);
	struct kn_matmul_bwd_args head = {.dinp = m->dlnf,
	                                  .dweight = m->dwte,
	                                  .dout = m->dlogits,
	                                  .inp = m->lnf,
	                                  .weight = m->wte,
	                                  .B = B,
	                                  .T = T,
	                                  .C = C,
	                                  .OC = c->V};
	g2_run(ex, &kn_matmul_backward_kernel, &head);
	const float *xl = c->L ? m->acts[c->L - 1].out : m->encoded;
	float *dcur = m->dres[0];
	g2_zero(ex, dcur, btc);
	struct kn_layernorm_bwd_args ln = {.dinp = dcur,
	                                   .dweight = m->dlnfw,
	                                   .dbias = m->dlnfb,
	                                   .dout = m->dlnf,
	                                   .inp = xl,
	                                   .weight = m->lnfw,
	                                   .mean = m->lnf_mean,
	                                   .rstd = m->lnf_rstd,
	                                   .B = B,
	                                   .T = T,
	                                   .C = C};
	g2_run(ex, &kn_layernorm_backward_kernel, &ln);
	for (int l = c->L - 1; l >= 0; l--) {
		float *p[KN_BLOCK_NPARAMS], *g[KN_BLOCK_NPARAMS];
		g2_block_split(m->params + g2_block_offset(c, l), C, p);
		g2_block_split(m->grads + g2_block_offset(c, l), C, g);
		const float *x = l ? m->acts[l - 1].out : m->encoded;
		float *dprev = m->dres[(c->L - l) % 2];
		g2_zero(ex, dprev, btc);
		g2_block_backward(ex, p, g, &m->acts[l], &m->scratch, x, dcur, dprev, B, T, C,
		                  c->NH);
		dcur = dprev;
	}
	struct kn_encoder_bwd_args en = {.dwte = m->dwte,
	                                 .dwpe = m->dwpe,
	                                 .dout = dcur,
	                                 .inp = m->tokens,
	                                 .B = B,
	                                 .T = T,
	                                 .C = C,
	                                 .V = c->V,
	                                 .maxT = c->maxT};
	g2_run(ex, &kn_encoder_backward_kernel, &en);
}

/* Calls fn(offset, count, decay) for each parameter tensor in layout order;
 * decay is 1 for the matrices (wte, wpe, the four block weights). */
static inline void g2_model_tensors(const struct kn_model_config *c,
                                    void (*fn)(void *ctx, size_t off, size_t n, int decay),
                                    void *ctx)
{
	size_t C = c->C, off = 0, sz[KN_BLOCK_NPARAMS];
	fn(ctx, off, (size_t)c->V * C, 1);
	off += (size_t)c->V * C;
	fn(ctx, off, (size_t)c->maxT * C, 1);
	off += (size_t)c->maxT * C;
	kn_block_param_sizes(c->C, sz);
	for (int l = 0; l < c->L; l++) {
		for (int i = 0; i < KN_BLOCK_NPARAMS; i++) {
			int decay = i == G2_QKVW || i == G2_PROJW || i == G2_FCW || i == G2_FCPROJW;
			fn(ctx, off, sz[i], decay);
			off += sz[i];
		}
	}
	fn(ctx, off, C, 0);
	fn(ctx, off + C, C, 0);
}

struct g2_adamw_ctx {
	const struct g2_exec *ex;
	float *params, *grads, *m, *v;
	float lr, beta1, beta2, eps, wd;
	int t;
};

static inline void g2_adamw_one(void *ctx, size_t off, size_t n, int decay)
{
	struct g2_adamw_ctx *u = ctx;
	struct kn_adamw_args a = {.params = u->params + off,
	                          .grads = u->grads + off,
	                          .m = u->m + off,
	                          .v = u->v + off,
	                          .N = (long)n,
	                          .lr = u->lr,
	                          .beta1 = u->beta1,
	                          .beta2 = u->beta2,
	                          .eps = u->eps,
	                          .weight_decay = decay ? u->wd : 0.0f,
	                          .t = u->t};
	g2_run(u->ex, &kn_adamw_kernel, &a);
}

/* AdamW step t (from 1) over every tensor; weight decay on matrices only. */
static inline void g2_model_update(const struct g2_exec *ex, struct g2_model *m, float lr,
                                   float beta1, float beta2, float eps, float wd, int t)
{
	struct g2_adamw_ctx u = {ex, m->params, m->grads, m->m, m->v, lr, beta1, beta2, eps, wd, t};
	g2_model_tensors(&m->cfg, g2_adamw_one, &u);
}

#endif

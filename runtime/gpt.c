/* runtime/gpt.c — the built-in GPT-2 model: the kernels' embedding, blocks and
 * head as runtime layers, GPT-2's initialization, and synthetic data.
 *
 * Sizes per sample come from kn_layer_describe at B = 1 (every activation
 * size is linear in B, checked at B = 2; work may add a constant, checked at
 * B = 4). The head is tied to the embedding:
 * it reads wte (the embedding's first V*C parameters) and accumulates dwte
 * into its own gradients after its lnf ones, so grad_bytes = (2C + VC) floats.
 * Initialization (llm.c, GPT-2): weights N(0, 0.02), the two residual
 * projections of each block N(0, 0.02/sqrt(2L)), biases 0, layernorm weights
 * 1; one counter-based stream per (seed, layer, tensor), so a layer's initial
 * values do not depend on how the model is packed.
 * bf16 (mixed precision): parameters and gradients are bf16 (the kernels'
 * descriptors in bf16 size them); the optimizer state starts with the fp32
 * master weights (master_bytes), initialized as in fp32 from the same seed,
 * and the bf16 parameters are their rounding; the update
 * (kn_layer_update_mixed) runs on the masters and rewrites the parameters.
 */
#include "runtime/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static struct kn_layer_mem mem_of(const struct rt_layer_call *c)
{
	return (struct kn_layer_mem){.params = c->params,
	                             .grads = c->grads,
	                             .optim = c->optim,
	                             .stash = c->stash,
	                             .work = c->work,
	                             .tied = c->tied,
	                             .tied_grad = c->tied_grad};
}

static int gpt_forward(const struct rt_layer_call *c)
{
	const struct rt_layer *l = c->layer;
	struct kn_layer_mem m = mem_of(c);
	struct kn_layer_io io = {.in = c->in, .out = c->out, .targets = c->targets};
	return kn_layer_forward_launch(c->s, &l->gpt, l->kind, c->B, l->T, &m, &io);
}

static int gpt_backward(const struct rt_layer_call *c)
{
	const struct rt_layer *l = c->layer;
	struct kn_layer_mem m = mem_of(c);
	struct kn_layer_io io = {
	    .in = c->in, .dout = c->dout, .din = c->din, .targets = c->targets, .dloss = c->dloss};
	return kn_layer_backward_launch(c->s, &l->gpt, l->kind, c->B, l->T, &m, &io);
}

/* The kernels' clip for a model's norms (NULL or no threshold: none). */
static struct kn_clip rt_clip_of(const struct rt_optim *o, const double *norms, int nlayers)
{
	if (!norms || !(o->grad_clip > 0))
		return (struct kn_clip){.norms = NULL, .nnorms = 0, .clip = 0};
	return (struct kn_clip){.norms = norms, .nnorms = nlayers, .clip = o->grad_clip};
}

static int gpt_update(const struct rt_layer_call *c)
{
	const struct rt_layer *l = c->layer;
	struct kn_layer_mem m = mem_of(c);
	struct kn_optim_hparams h = {.lr = c->opt->lr,
	                             .beta1 = c->opt->beta1,
	                             .beta2 = c->opt->beta2,
	                             .eps = c->opt->eps,
	                             .weight_decay = c->opt->weight_decay,
	                             .t = c->step,
	                             .kind = c->opt->kind,
	                             .momentum = c->opt->momentum,
	                             .clip = rt_clip_of(c->opt, c->norms, c->nnorms)};
	if (l->gpt.dtype == KN_BF16)
		return kn_layer_update_mixed_launch(c->s, &l->gpt, l->kind, &m, &h);
	return kn_layer_update_launch(c->s, &l->gpt, l->kind, &m, &h);
}

/* splitmix64 over a counter: uniform 64-bit words for (key, i) */
static uint64_t mix(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static double uniform(uint64_t key, uint64_t i)
{
	return ((double)(mix(key ^ mix(i)) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* n normal(0, std) floats (Box-Muller over pairs) from key. */
static void fill_normal(float *x, size_t n, uint64_t key, double std)
{
	for (size_t i = 0; i < n; i += 2) {
		double u1 = uniform(key, i), u2 = uniform(key, i + 1);
		double r = sqrt(-2.0 * log(u1)), th = 6.283185307179586 * u2;
		x[i] = (float)(std * r * cos(th));
		if (i + 1 < n)
			x[i + 1] = (float)(std * r * sin(th));
	}
}

static void fill_const(float *x, size_t n, float v)
{
	for (size_t i = 0; i < n; i++)
		x[i] = v;
}

/* The layer's fp32 initial values (param count floats), whatever its dtype. */
static int gpt_init_f32(const struct rt_layer *l, float *p, uint64_t seed)
{
	const struct kn_model_config *g = &l->gpt;
	size_t C = (size_t)g->C;
	uint64_t key = mix(seed ^ mix((uint64_t)(uintptr_t)l->arg)); /* arg: the layer index */
	switch (l->kind) {
	case KN_LAYER_EMBEDDING:
		fill_normal(p, (size_t)g->V * C, key ^ 1, 0.02);
		fill_normal(p + (size_t)g->V * C, (size_t)g->maxT * C, key ^ 2, 0.02);
		return 0;
	case KN_LAYER_HEAD:
		fill_const(p, C, 1.0f);
		fill_const(p + C, C, 0.0f);
		return 0;
	case KN_LAYER_BLOCK: {
		size_t sz[KN_BLOCK_NPARAMS];
		kn_block_param_sizes(g->C, sz);
		double proj = 0.02 / sqrt(2.0 * g->L);
		for (int i = 0; i < KN_BLOCK_NPARAMS; i++) {
			if (i == 0 || i == 6)
				fill_const(p, sz[i], 1.0f); /* ln1w, ln2w */
			else if (i % 2 == 1)
				fill_const(p, sz[i], 0.0f); /* biases */
			else
				fill_normal(p, sz[i], key ^ (uint64_t)(16 + i),
				            i == 4 || i == 10 ? proj : 0.02);
			p += sz[i];
		}
		return 0;
	}
	default: return sp_error(-EINVAL, "gpt: unknown layer kind %d", (int)l->kind);
	}
}

static int gpt_init(const struct rt_layer *l, void *params, uint64_t seed)
{
	if (l->gpt.dtype != KN_BF16)
		return gpt_init_f32(l, params, seed);
	size_t n = l->param_bytes / 2;
	float *f = malloc(n * sizeof(float) + 1);
	if (!f)
		return sp_error(-ENOMEM, "gpt: initial values of %s", l->name);
	int rc = gpt_init_f32(l, f, seed);
	uint16_t *w = params;
	for (size_t i = 0; rc == 0 && i < n; i++)
		w[i] = kn_f32_to_bf16(f[i]);
	free(f);
	return rc;
}

static const struct rt_layer_ops gpt_ops = {.forward = gpt_forward,
                                            .backward = gpt_backward,
                                            .update = gpt_update,
                                            .init = gpt_init,
                                            .simulates = 1};

static int gpt_layer(const struct kn_model_config *cfg, int T, enum kn_layer_kind kind, int index,
                     struct rt_layer *l)
{
	struct kn_layer_desc d1, d2, d4;
	SP_CHECK(kn_layer_describe(cfg, kind, 1, T, &d1));
	SP_CHECK(kn_layer_describe(cfg, kind, 2, T, &d2));
	SP_CHECK(kn_layer_describe(cfg, kind, 4, T, &d4));
	/* work may have a constant part (bf16 attention's per-head scratch) */
	uint64_t wps = d2.work_bytes - d1.work_bytes, w0 = d1.work_bytes - wps;
	if (d2.stash_bytes != 2 * d1.stash_bytes || d2.output_bytes != 2 * d1.output_bytes ||
	    d2.work_bytes < d1.work_bytes || d1.work_bytes < wps || d4.work_bytes != w0 + 4 * wps)
		return sp_error(-EINVAL, "gpt: layer %s sizes are not linear in the batch",
		                d1.name);
	memset(l, 0, sizeof(*l));
	if (kind == KN_LAYER_BLOCK)
		snprintf(l->name, sizeof(l->name), "block%d", index - 1);
	else
		snprintf(l->name, sizeof(l->name), "%s", d1.name);
	l->param_bytes = d1.param_bytes;
	l->grad_bytes = d1.grad_bytes;
	if (cfg->dtype == KN_BF16) /* fp32 masters first, then the optimizer's state */
		l->master_bytes = d1.param_bytes / 2 * sizeof(float);
	l->optim_bytes = l->master_bytes + d1.optim_bytes;
	l->std_optim = 1;
	l->stash_per_sample = d1.stash_bytes;
	l->out_per_sample = d1.output_bytes;
	l->work_per_sample = wps;
	l->work_bytes = w0;
	l->fwd_flops_per_sample = d1.fwd_flops;
	l->bwd_flops_per_sample = d1.bwd_flops;
	l->ops = &gpt_ops;
	l->arg = (void *)(uintptr_t)index;
	l->kind = kind;
	l->gpt = *cfg;
	l->T = T;
	if (kind == KN_LAYER_HEAD) { /* tied to the embedding (layer 0): dwte here */
		l->tied = 1;
		l->tied_layer = 0;
		l->grad_bytes += (uint64_t)cfg->V * cfg->C * kn_dtype_size(cfg->dtype);
	}
	return 0;
}

void rt_model_free(struct rt_model *m)
{
	if (!m)
		return;
	free(m->layers);
	memset(m, 0, sizeof(*m));
}

int rt_optimizer_parse(const char *name, enum kn_optimizer *out)
{
	if (!name || !strcmp(name, "adamw"))
		*out = KN_ADAMW;
	else if (!strcmp(name, "sgd"))
		*out = KN_SGD;
	else
		return sp_error(-EINVAL, "unknown optimizer '%s' (adamw, sgd)", name);
	return 0;
}

const char *rt_optimizer_name(enum kn_optimizer kind)
{
	return kind == KN_SGD ? "sgd" : "adamw";
}

int rt_model_set_optimizer(struct rt_model *m, enum kn_optimizer kind, float momentum)
{
	SP_CHECK_ARG(m, "rt_model_set_optimizer: NULL model");
	SP_CHECK_ARG(kind == KN_ADAMW || kind == KN_SGD, "unknown optimizer %d", (int)kind);
	SP_CHECK_ARG(momentum >= 0 && momentum < 1, "momentum %g is not in [0, 1)",
	             (double)momentum);
	SP_CHECK_ARG(kind == KN_SGD || momentum == 0, "momentum is an SGD setting (AdamW has "
	                                              "beta1)");
	/* a layer with its own state size but the built-in update must hold it */
	for (int i = 0; i < m->nlayers; i++) {
		const struct rt_layer *l = &m->layers[i];
		uint64_t need = kn_optim_state_bytes(kind, momentum, rt_layer_nparams(l));
		if (!l->std_optim && !(l->ops && l->ops->update) && l->optim_bytes < need)
			return sp_error(-EINVAL,
			                "layer %s: optim_bytes %llu is less than %s's state (%llu)",
			                l->name, (unsigned long long)l->optim_bytes,
			                rt_optimizer_name(kind), (unsigned long long)need);
	}
	m->opt.kind = kind;
	m->opt.momentum = momentum;
	for (int i = 0; i < m->nlayers; i++) {
		struct rt_layer *l = &m->layers[i];
		if (l->std_optim)
			l->optim_bytes = l->master_bytes +
			                 kn_optim_state_bytes(kind, momentum, rt_layer_nparams(l));
	}
	return 0;
}

int rt_model_gpt(const struct kn_model_config *cfg, int T, int batch, struct rt_model *out)
{
	SP_CHECK_ARG(cfg && out, "rt_model_gpt: NULL argument");
	SP_CHECK(kn_model_config_check(cfg));
	SP_CHECK_ARG(T >= 1 && T <= cfg->maxT, "gpt: sequence length %d is not in 1..%d (maxT)", T,
	             cfg->maxT);
	SP_CHECK_ARG(batch >= 1, "gpt: batch %d must be >= 1", batch);
	struct rt_model m;
	memset(&m, 0, sizeof(m));
	m.nlayers = cfg->L + 2;
	m.layers = calloc((size_t)m.nlayers, sizeof(*m.layers));
	if (!m.layers)
		return sp_error(-ENOMEM, "gpt: %d layers", m.nlayers);
	int rc = gpt_layer(cfg, T, KN_LAYER_EMBEDDING, 0, &m.layers[0]);
	for (int i = 1; rc == 0 && i <= cfg->L; i++)
		rc = gpt_layer(cfg, T, KN_LAYER_BLOCK, i, &m.layers[i]);
	if (rc == 0)
		rc = gpt_layer(cfg, T, KN_LAYER_HEAD, cfg->L + 1, &m.layers[cfg->L + 1]);
	if (rc < 0) {
		free(m.layers);
		return rc;
	}
	snprintf(m.name, sizeof(m.name), "gpt2 L%d C%d%s", cfg->L, cfg->C,
	         cfg->dtype == KN_BF16 ? " bf16" : "");
	m.batch = batch;
	m.in_per_sample = (uint64_t)T * sizeof(int);
	m.target_per_sample = (uint64_t)T * sizeof(int);
	m.loss_floats = T;
	m.opt = (struct rt_optim){
	    .lr = 3e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.0f};
	m.data = rt_gpt_synthetic_data;
	m.gpt = *cfg;
	m.T = T;
	*out = m;
	return 0;
}

int rt_gpt_synthetic_data(const struct rt_model *m, void *arg, int iter, int sample0, int n,
                          void *in, void *targets)
{
	int V = m->gpt.V, T = m->T;
	int *x = in, *y = targets;
	uint64_t seed = arg ? *(const uint64_t *)arg : 0;
	for (int s = 0; s < n; s++) {
		uint64_t key =
		    mix(mix(seed ^ (uint64_t)iter * 0x10001ull) ^ (uint64_t)(sample0 + s));
		int start = (int)(mix(key) % (uint64_t)V);
		int step = 1 + (int)(mix(key ^ 7) % 3ull); /* a few patterns to learn */
		for (int t = 0; t <= T; t++) {
			int tok = (int)((start + (int64_t)step * t) % V);
			if (t < T)
				x[s * T + t] = tok;
			if (t > 0)
				y[s * T + t - 1] = tok;
		}
	}
	return 0;
}

void rt_model_tg(const struct rt_model *m, struct tg_layer *layers, struct tg_model *out)
{
	for (int i = 0; i < m->nlayers; i++) {
		const struct rt_layer *l = &m->layers[i];
		layers[i] = (struct tg_layer){.name = l->name,
		                              .param_bytes = l->param_bytes,
		                              .grad_bytes = l->grad_bytes,
		                              .opt_bytes = l->optim_bytes,
		                              .stash_bytes_per_sample = l->stash_per_sample,
		                              .out_bytes_per_sample = l->out_per_sample,
		                              .work_bytes = l->work_bytes,
		                              .work_bytes_per_sample = l->work_per_sample,
		                              .fwd_flops_per_sample = l->fwd_flops_per_sample,
		                              .bwd_flops_per_sample = l->bwd_flops_per_sample,
		                              .tied = l->tied,
		                              .tied_layer = l->tied_layer};
		if (l->kind == KN_LAYER_BLOCK && l->gpt.tp_shards > 1) /* the exchanges of a pass */
			layers[i].xchg_bytes_per_sample =
			    (uint64_t)(KN_TP_SEGS - 1) * (uint64_t)(l->gpt.tp_shards - 1) *
			    (uint64_t)l->T * (uint64_t)l->gpt.C * sizeof(float);
	}
	*out = (struct tg_model){.id = 0,
	                         .nlayers = m->nlayers,
	                         .layers = layers,
	                         .batch = m->batch,
	                         .in_bytes_per_sample = m->in_per_sample,
	                         .target_bytes_per_sample = m->target_per_sample,
	                         .loss_bytes_per_sample = 0,
	                         .norm_bytes = rt_model_norm_bytes(m)};
}

void rt_model_tg_timed(const struct rt_model *m, double flops, struct tg_layer *layers,
                       struct tg_model *out)
{
	rt_model_tg(m, layers, out);
	for (int i = 0; i < m->nlayers; i++) {
		const struct rt_layer *l = &m->layers[i];
		if (l->fwd_s_per_sample > 0)
			layers[i].fwd_flops_per_sample = l->fwd_s_per_sample * flops;
		if (l->bwd_s_per_sample > 0)
			layers[i].bwd_flops_per_sample = l->bwd_s_per_sample * flops;
		if (l->upd_s > 0)
			layers[i].upd_flops = l->upd_s * flops;
	}
}

int rt_model_profile(struct rt_ctx *rt, struct rt_model *m, int mb)
{
	SP_CHECK_ARG(rt && m && mb >= 1, "rt_model_profile: bad arguments");
	if (dev_backend(rt->dev) != DEV_BACKEND_MODEL)
		return sp_error(-ENOTSUP, "rt_model_profile: pilot runs use the model backend");
	struct dev_stream *s = rt->compute[0];
	/* no data on the model backend: any non-NULL address will do */
	static char dummy[64];
	void *p = dummy;
	for (int i = 0; i < m->nlayers; i++) {
		struct rt_layer *l = &m->layers[i];
		struct rt_layer_call c = {.s = s,
		                          .layer = l,
		                          .B = mb,
		                          .params = p,
		                          .grads = p,
		                          .optim = (float *)p,
		                          .stash = p,
		                          .work = p,
		                          .in = p,
		                          .out = p,
		                          .dout = p,
		                          .din = i ? p : NULL,
		                          .targets = p,
		                          .tied = l->tied ? p : NULL,
		                          .tied_grad = l->tied ? p : NULL,
		                          .dloss = 1,
		                          .step = 1,
		                          .opt = &m->opt};
		double t0 = dev_now(rt->dev);
		SP_CHECK(l->ops->forward(&c));
		SP_CHECK(dev_stream_sync(s));
		double t1 = dev_now(rt->dev);
		SP_CHECK(l->ops->backward(&c));
		SP_CHECK(dev_stream_sync(s));
		double t2 = dev_now(rt->dev);
		SP_CHECK(rt_layer_update(s, m, i, p, p, (float *)p, 1, NULL));
		SP_CHECK(dev_stream_sync(s));
		double t3 = dev_now(rt->dev);
		l->fwd_s_per_sample = (t1 - t0) / mb;
		l->bwd_s_per_sample = (t2 - t1) / mb;
		l->upd_s = t3 - t2;
	}
	return 0;
}

int rt_layer_add_ties(struct dev_stream *s, const struct rt_model *m, int l, void *const *grads)
{
	for (int j = 0; j < m->nlayers; j++) {
		const struct rt_layer *t = &m->layers[j];
		if (!t->tied || t->tied_layer != l)
			continue;
		enum kn_dtype dt = rt_layer_dtype(t);
		struct kn_grad_accumulate_args a = {
		    .dtype = dt,
		    .dst = grads[l],
		    .src = (const char *)grads[j] + t->param_bytes,
		    .N = (long)((t->grad_bytes - t->param_bytes) / kn_dtype_size(dt))};
		SP_CHECK(kn_grad_accumulate_launch(s, &a));
	}
	return 0;
}

int rt_layer_update(struct dev_stream *s, const struct rt_model *m, int l, void *params,
                    void *grads, float *optim, int step, const double *norms)
{
	return rt_layer_update_opt(s, m, &m->opt, l, params, grads, optim, step, norms);
}

int rt_layer_update_opt(struct dev_stream *s, const struct rt_model *m, const struct rt_optim *opt,
                        int l, void *params, void *grads, float *optim, int step,
                        const double *norms)
{
	const struct rt_layer *ly = &m->layers[l];
	struct rt_layer_call c = {.s = s,
	                          .layer = ly,
	                          .params = params,
	                          .grads = grads,
	                          .optim = optim,
	                          .step = step,
	                          .opt = opt,
	                          .norms = norms,
	                          .nnorms = norms ? m->nlayers : 0};
	struct kn_clip clip = rt_clip_of(opt, norms, m->nlayers);
	if (ly->ops && ly->ops->update)
		return ly->ops->update(&c);
	if (!ly->param_bytes)
		return 0;
	long n = (long)(ly->param_bytes / sizeof(float));
	if (opt->kind == KN_SGD) {
		struct kn_sgd_args a = {.dtype = KN_F32,
		                        .params = params,
		                        .grads = grads,
		                        .buf = opt->momentum != 0 ? optim : NULL,
		                        .N = n,
		                        .lr = opt->lr,
		                        .momentum = opt->momentum,
		                        .weight_decay = opt->weight_decay,
		                        .clip = clip};
		return kn_sgd_launch(s, &a);
	}
	struct kn_adamw_args a = {.dtype = KN_F32,
	                          .params = params,
	                          .grads = grads,
	                          .m = optim,
	                          .v = optim + n,
	                          .N = n,
	                          .lr = opt->lr,
	                          .beta1 = opt->beta1,
	                          .beta2 = opt->beta2,
	                          .eps = opt->eps,
	                          .weight_decay = opt->weight_decay,
	                          .t = step,
	                          .clip = clip};
	return kn_adamw_launch(s, &a);
}

uint64_t rt_model_norm_bytes(const struct rt_model *m)
{
	if (!(m->opt.grad_clip > 0))
		return 0;
	return ((uint64_t)m->nlayers + KN_SUMSQ_PARTS) * sizeof(double);
}

int rt_layer_norm(struct dev_stream *s, const struct rt_model *m, int l, const void *grads,
                  double *norms)
{
	const struct rt_layer *ly = &m->layers[l];
	struct kn_grad_sumsq_args a = {.dtype = rt_layer_dtype(ly),
	                               .x = grads,
	                               .N = (long)rt_layer_nparams(ly),
	                               .parts = norms + m->nlayers,
	                               .out = norms + l};
	return kn_grad_sumsq_launch(s, &a);
}

enum kn_dtype rt_layer_dtype(const struct rt_layer *l)
{
	return l->ops == &gpt_ops ? l->gpt.dtype : KN_F32;
}

uint64_t rt_layer_nparams(const struct rt_layer *l)
{
	return l->param_bytes / kn_dtype_size(rt_layer_dtype(l));
}

int rt_precision_parse(const char *name, enum kn_dtype *out)
{
	if (!name || !strcmp(name, "fp32"))
		*out = KN_F32;
	else if (!strcmp(name, "bf16"))
		*out = KN_BF16;
	else
		return sp_error(-EINVAL, "unknown precision '%s' (fp32, bf16)", name);
	return 0;
}

const char *rt_precision_name(enum kn_dtype dtype)
{
	return dtype == KN_BF16 ? "bf16" : "fp32";
}

int rt_layer_init_optim(const struct rt_model *m, int l, void *optim, uint64_t seed)
{
	SP_CHECK_ARG(m && l >= 0 && l < m->nlayers, "rt_layer_init_optim: bad arguments");
	const struct rt_layer *ly = &m->layers[l];
	if (!ly->optim_bytes)
		return 0;
	SP_CHECK_ARG(optim, "rt_layer_init_optim: NULL state");
	memset(optim, 0, ly->optim_bytes);
	if (!ly->master_bytes)
		return 0;
	SP_CHECK_ARG(ly->ops == &gpt_ops, "layer %s: fp32 masters of a layer that is not GPT's",
	             ly->name);
	return gpt_init_f32(ly, optim, seed);
}

int rt_layer_init_member(const struct rt_model *m, int l, void *params, uint64_t seed, int member)
{
	SP_CHECK_ARG(m && params && l >= 0 && l < m->nlayers,
	             "rt_layer_init_member: bad arguments");
	const struct rt_layer *ly = &m->layers[l];
	int t = ly->gpt.tp_shards;
	if (!(ly->kind == KN_LAYER_BLOCK && ly->ops == &gpt_ops && t > 1))
		return rt_layer_init(m, l, params, seed);
	SP_CHECK_ARG(member >= 0 && member < t, "rt_layer_init_member: member %d of %d", member, t);
	size_t n[KN_BLOCK_NPARAMS], total = 0; /* the whole block's, then member's cut */
	kn_block_param_sizes(ly->gpt.C, n);
	for (int i = 0; i < KN_BLOCK_NPARAMS; i++)
		total += n[i];
	float *f = malloc(total * sizeof(float));
	if (!f)
		return sp_error(-ENOMEM, "gpt: initial values of %s", ly->name);
	int rc = gpt_init_f32(ly, f, seed);
	if (rc == 0)
		kn_block_shard_copy(ly->gpt.C, t, member, sizeof(float), f, params, 1);
	free(f);
	return rc;
}

int rt_model_gpt_members(const struct rt_model *m, int t, struct rt_model *out)
{
	SP_CHECK_ARG(m && out && m->layers, "rt_model_gpt_members: NULL argument");
	struct rt_model mm = *m;
	mm.layers = calloc((size_t)m->nlayers, sizeof(*mm.layers));
	if (!mm.layers)
		return sp_error(-ENOMEM, "tensor parallel: %d layers", m->nlayers);
	int rc = 0;
	for (int i = 0; i < m->nlayers && !rc; i++) {
		const struct rt_layer *ly = &m->layers[i];
		mm.layers[i] = *ly; /* embeddings, heads, other layers: every member's whole */
		if (ly->kind != KN_LAYER_BLOCK || ly->ops != &gpt_ops)
			continue;
		if (ly->gpt.tp_shards > 1) {
			rc = sp_error(
			    -EINVAL,
			    "tensor parallel %d: block %s is already a shard of %d (pass the "
			    "whole model in tp form)",
			    t, ly->name, ly->gpt.tp_shards);
			break;
		}
		if (!ly->gpt.tp_form) {
			rc = sp_error(-EINVAL,
			              "tensor parallel %d: block %s is not in the tensor-parallel "
			              "form (kn_model_config.tp_form)",
			              t, ly->name);
			break;
		}
		struct kn_model_config cfg = ly->gpt;
		cfg.tp_shards = t;
		rc = kn_block_tp_check(&cfg, t);
		if (!rc)
			rc = gpt_layer(&cfg, ly->T, KN_LAYER_BLOCK, (int)(uintptr_t)ly->arg,
			               &mm.layers[i]);
	}
	if (!rc) /* the shards' optimizer state, for the model's optimizer */
		rc = rt_model_set_optimizer(&mm, m->opt.kind, m->opt.momentum);
	if (rc < 0) {
		free(mm.layers);
		return rc;
	}
	*out = mm;
	return 0;
}

int rt_layer_init(const struct rt_model *m, int l, void *params, uint64_t seed)
{
	SP_CHECK_ARG(m && params && l >= 0 && l < m->nlayers, "rt_layer_init: bad arguments");
	const struct rt_layer *ly = &m->layers[l];
	SP_CHECK_ARG(!(ly->kind == KN_LAYER_BLOCK && ly->gpt.tp_shards > 1),
	             "rt_layer_init: %s is a shard of %d (rt_layer_init_member)", ly->name,
	             ly->gpt.tp_shards);
	if (ly->ops && ly->ops->init)
		return ly->ops->init(ly, params, seed);
	memset(params, 0, ly->param_bytes);
	return 0;
}

/* runtime/api.c — include/spill.h over the runtime: the only exported symbols
 * of libspill (SPILL_API; everything else is built hidden).
 *
 * A spill_ctx is an rt_ctx opened from the SPILL_* table with the options on
 * top. A spill_graph is a program of the caller's objects and tasks; its
 * callbacks get the executor's launch (a spill_launch is an rt_launch). A
 * spill_model is an rt_model (GPT-2 or the caller's layers, whose ops call
 * back into the caller's spill_layer_fn) plus the rt_run of its plan.
 */
#include "runtime/internal.h"

#include "include/spill.h"

#include "common/log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct spill_ctx {
	struct rt_ctx *rt;
	double t0;
};

/* ---- errors, context ---------------------------------------------------------- */

SPILL_API const char *spill_last_error(void)
{
	return sp_last_error();
}

SPILL_API const char *spill_version(void)
{
	return SPILL_VERSION_STRING;
}

static int apply_options(const struct spill_options *o, struct sp_params *p)
{
	if (!o)
		return 0;
	char buf[32];
	if (o->backend && o->backend[0])
		SP_CHECK(sp_params_set(p, "SPILL_BACKEND", o->backend));
	if (o->devices) {
		snprintf(buf, sizeof(buf), "%d", o->devices);
		SP_CHECK(sp_params_set(p, "SPILL_DEVICES", buf));
	}
	if (o->device_mem)
		p->device_mem = o->device_mem;
	if (o->budget)
		p->vmm_device_mem = o->budget;
	if (o->host_mem)
		p->host_mem = o->host_mem;
	if (o->disk_path)
		p->disk_path = o->disk_path;
	if (o->profile && o->profile[0])
		p->profile = o->profile;
	if (o->threads)
		p->threads = o->threads;
	if (o->prefetch)
		p->prefetch = o->prefetch < 0 ? 0 : o->prefetch;
	if (o->late_binding)
		p->late_binding = o->late_binding > 0;
	return 0;
}

SPILL_API int spill_open(const struct spill_options *opt, struct spill_ctx **out)
{
	SP_CHECK_ARG(out, "spill_open: NULL output");
	struct sp_params p;
	struct rt_config cfg;
	SP_CHECK(sp_params_load(&p, NULL));
	SP_CHECK(sp_params_apply_logging(&p));
	SP_CHECK(apply_options(opt, &p));
	SP_CHECK(rt_config_from_params(&p, &cfg));
	struct spill_ctx *c = calloc(1, sizeof(*c));
	if (!c)
		return sp_error(-ENOMEM, "spill_open: out of memory");
	int rc = rt_open(&cfg, &c->rt);
	if (rc < 0) {
		free(c);
		return rc;
	}
	c->t0 = dev_now(c->rt->dev);
	*out = c;
	return 0;
}

SPILL_API void spill_close(struct spill_ctx *ctx)
{
	if (!ctx)
		return;
	rt_close(ctx->rt);
	free(ctx);
}

SPILL_API int spill_device_count(const struct spill_ctx *ctx)
{
	return ctx ? ctx->rt->ndev : 0;
}

SPILL_API const char *spill_backend_name(const struct spill_ctx *ctx)
{
	return ctx ? dev_backend_name(dev_backend(ctx->rt->dev)) : "";
}

/* ---- streams ------------------------------------------------------------------- */

SPILL_API int spill_launch(struct spill_stream *s, void (*cpu)(const void *),
                           void (*cuda)(const void *, void *), const void *args, size_t size,
                           double flops, double bytes)
{
	SP_CHECK_ARG(s, "spill_launch: NULL stream");
	struct dev_kernel k = {"user kernel", cpu, cuda};
	return dev_launch((struct dev_stream *)s, &k, args, size,
	                  (struct dev_cost){flops, bytes, 0});
}

SPILL_API void *spill_stream_native(struct spill_stream *s)
{
	return dev_stream_native((struct dev_stream *)s);
}

SPILL_API int spill_stream_device(struct spill_stream *s)
{
	int d = dev_stream_device((struct dev_stream *)s);
	return d == DEV_HOST ? -1 : d;
}

/* ---- level 1: graphs ------------------------------------------------------------- */

struct spill_graph {
	struct spill_ctx *ctx;
	struct rt_prog prog;
	int bound, prepared, iter;
	struct spill_task_desc *desc; /* the callers' callbacks, per task */
	int ndesc, capdesc;
};

struct gtask {
	struct spill_graph *g;
	int index;
};

SPILL_API struct spill_stream *spill_launch_stream(const struct spill_launch *l)
{
	return l ? (struct spill_stream *)((const struct rt_launch *)l)->s : NULL;
}

SPILL_API void *spill_launch_ptr(const struct spill_launch *l, int i)
{
	const struct rt_launch *rl = (const struct rt_launch *)l;
	if (!rl || i < 0 || i >= rl->task->nref)
		return NULL;
	return rl->ptr[i];
}

SPILL_API int spill_launch_device(const struct spill_launch *l)
{
	const struct rt_launch *rl = (const struct rt_launch *)l;
	return !rl ? -1 : rl->dev == RT_HOST ? SPILL_CPU : rl->dev;
}

SPILL_API int spill_launch_iteration(const struct spill_launch *l)
{
	return l ? ((const struct rt_launch *)l)->iter : -1;
}

static int graph_trampoline(const struct rt_launch *l, void *arg)
{
	struct spill_graph *g = ((struct gtask *)arg)->g;
	const struct spill_task_desc *d = &g->desc[((struct gtask *)arg)->index];
	return d->fn((const struct spill_launch *)l, d->arg);
}

SPILL_API int spill_graph_create(struct spill_ctx *ctx, struct spill_graph **out)
{
	SP_CHECK_ARG(ctx && out, "spill_graph_create: NULL argument");
	struct spill_graph *g = calloc(1, sizeof(*g));
	if (!g)
		return sp_error(-ENOMEM, "spill_graph_create: out of memory");
	g->ctx = ctx;
	rt_prog_init(&g->prog);
	*out = g;
	return 0;
}

SPILL_API void spill_graph_destroy(struct spill_graph *g)
{
	if (!g)
		return;
	if (g->bound)
		rt_prog_unbind(g->ctx->rt, &g->prog);
	for (int i = 0; i < g->prog.ntask; i++)
		free(g->prog.task[i].arg);
	rt_prog_free(&g->prog);
	free(g->desc);
	free(g);
}

SPILL_API int spill_graph_obj(struct spill_graph *g, size_t bytes, enum spill_kind kind,
                              const char *name, unsigned flags, int *id)
{
	SP_CHECK_ARG(g && id, "spill_graph_obj: NULL argument");
	SP_CHECK_ARG(!g->bound, "spill_graph_obj: the graph has run; create a new one");
	SP_CHECK_ARG(bytes > 0, "spill_graph_obj: object '%s' has zero bytes", name ? name : "?");
	SP_CHECK_ARG((unsigned)kind <= SPILL_KIND_WORKSPACE, "spill_graph_obj: kind %d", (int)kind);
	SP_CHECK_ARG(!(flags & ~(SPILL_OBJ_OUTPUT | SPILL_OBJ_INPUT)), "spill_graph_obj: flags %#x",
	             flags);
	SP_CHECK(rt_prog_obj(&g->prog, bytes, (enum vmm_kind)kind, name, id));
	g->prog.obj[*id].keep = !!(flags & SPILL_OBJ_OUTPUT);
	g->prog.obj[*id].input = !!(flags & SPILL_OBJ_INPUT);
	return 0;
}

SPILL_API int spill_graph_task(struct spill_graph *g, const struct spill_task_desc *d, int *id)
{
	SP_CHECK_ARG(g && d && id, "spill_graph_task: NULL argument");
	SP_CHECK_ARG(!g->bound, "spill_graph_task: the graph has run; create a new one");
	SP_CHECK_ARG(d->fn, "spill_graph_task '%s': no callback", d->name ? d->name : "?");
	SP_CHECK_ARG(d->nrefs >= 0 && d->ndeps >= 0 && (d->refs || !d->nrefs) &&
	                 (d->deps || !d->ndeps),
	             "spill_graph_task '%s': bad refs or deps", d->name ? d->name : "?");
	int n = spill_device_count(g->ctx);
	SP_CHECK_ARG(d->device == SPILL_ANY_DEVICE || d->device == SPILL_CPU ||
	                 (d->device >= 0 && d->device < n),
	             "spill_graph_task '%s': device %d is not in 0..%d, SPILL_ANY_DEVICE or "
	             "SPILL_CPU",
	             d->name ? d->name : "?", d->device, n - 1);
	for (int i = 0; i < d->nrefs; i++)
		SP_CHECK_ARG(d->refs[i].obj >= 0 && d->refs[i].obj < g->prog.nobj &&
		                 d->refs[i].access >= SPILL_READ &&
		                 d->refs[i].access <= SPILL_OVERWRITE,
		             "spill_graph_task '%s': ref %d (object %d, access %d)",
		             d->name ? d->name : "?", i, d->refs[i].obj, (int)d->refs[i].access);
	if (g->ndesc == g->capdesc) {
		int nc = g->capdesc ? 2 * g->capdesc : 64;
		struct spill_task_desc *nd = realloc(g->desc, (size_t)nc * sizeof(*nd));
		if (!nd)
			return sp_error(-ENOMEM, "spill_graph_task: out of memory");
		g->desc = nd;
		g->capdesc = nc;
	}
	struct rt_ref *refs = malloc((size_t)(d->nrefs + 1) * sizeof(*refs));
	struct gtask *ga = malloc(sizeof(*ga));
	if (!refs || !ga) {
		free(refs);
		free(ga);
		return sp_error(-ENOMEM, "spill_graph_task: out of memory");
	}
	for (int i = 0; i < d->nrefs; i++)
		refs[i] = (struct rt_ref){d->refs[i].obj, (enum vmm_access)d->refs[i].access};
	*ga = (struct gtask){g, g->ndesc};
	struct rt_task t = {.dev = d->device == SPILL_CPU ? RT_HOST
	                           : d->device < 0        ? 0
	                                                  : d->device,
	                    .constrained = d->device != SPILL_ANY_DEVICE,
	                    .fn = graph_trampoline,
	                    .arg = ga,
	                    .flops = d->flops,
	                    .tg_task = -1};
	snprintf(t.name, sizeof(t.name), "%s", d->name ? d->name : "task");
	int rc = rt_prog_task(&g->prog, &t, refs, d->nrefs, d->deps, d->ndeps, id);
	free(refs);
	if (rc < 0) {
		free(ga);
		return rc;
	}
	g->desc[g->ndesc++] = *d;
	return 0;
}

static int graph_bind(struct spill_graph *g)
{
	if (g->bound)
		return 0;
	SP_CHECK_ARG(g->prog.ntask > 0, "spill_graph: no tasks");
	SP_CHECK(rt_prog_prepare(&g->prog));
	SP_CHECK(rt_prog_bind(g->ctx->rt, &g->prog));
	g->bound = 1;
	return 0;
}

static int graph_copy(struct spill_graph *g, int obj, void *buf, size_t bytes, int to_obj)
{
	SP_CHECK_ARG(g && buf && obj >= 0 && obj < g->prog.nobj, "spill_graph: bad object %d", obj);
	SP_CHECK_ARG(bytes <= g->prog.obj[obj].bytes,
	             "spill_graph: %zu bytes into object %s of %llu", bytes, g->prog.obj[obj].name,
	             (unsigned long long)g->prog.obj[obj].bytes);
	SP_CHECK(graph_bind(g));
	struct rt_ctx *rt = g->ctx->rt;
	SP_CHECK_ARG(rt->data, "spill_graph: the model backend holds no data");
	void *p;
	struct dev_event *ready;
	uint64_t vid = g->prog.obj[obj].vid;
	int full = bytes == g->prog.obj[obj].bytes;
	SP_CHECK(vmm_acquire(rt->vmm, vid, VMM_HOST,
	                     !to_obj ? VMM_READ
	                     : full  ? VMM_OVERWRITE
	                             : VMM_WRITE,
	                     &p, &ready));
	if (to_obj)
		memcpy(p, buf, bytes);
	else
		memcpy(buf, p, bytes);
	return vmm_release(rt->vmm, vid, VMM_HOST, NULL);
}

SPILL_API int spill_graph_write(struct spill_graph *g, int obj, const void *src, size_t bytes)
{
	return graph_copy(g, obj, (void *)src, bytes, 1);
}

SPILL_API int spill_graph_read(struct spill_graph *g, int obj, void *dst, size_t bytes)
{
	return graph_copy(g, obj, dst, bytes, 0);
}

SPILL_API int spill_graph_run(struct spill_graph *g, int iterations)
{
	SP_CHECK_ARG(g && iterations >= 1, "spill_graph_run: bad arguments");
	SP_CHECK(graph_bind(g));
	for (int i = 0; i < iterations; i++) {
		SP_CHECK(rt_exec_run(g->ctx->rt, &g->prog, g->iter));
		g->iter++;
	}
	return 0;
}

/* ---- level 2: models --------------------------------------------------------------- */

struct spill_model {
	struct spill_ctx *ctx;
	struct rt_model m;
	struct spill_layer_desc *udesc; /* the caller's layers (custom models) */
	struct rt_run *run;
	uint64_t seed;
	char plan_name[160];
	spill_data_fn udata, ueval;
	void *udata_arg;
};

static void to_user_call(const struct rt_layer_call *c, const struct rt_optim *opt,
                         struct spill_layer_call *u)
{
	const struct spill_layer_desc *d = c->layer->arg;
	*u = (struct spill_layer_call){.stream = (struct spill_stream *)c->s,
	                               .batch = c->B,
	                               .params = c->params,
	                               .grads = c->grads,
	                               .optim = c->optim,
	                               .stash = c->stash,
	                               .work = c->work,
	                               .in = c->in,
	                               .out = c->out,
	                               .dout = c->dout,
	                               .din = c->din,
	                               .targets = c->targets,
	                               .dloss = c->dloss,
	                               .step = c->step,
	                               .arg = d->arg};
	if (opt) {
		u->lr = opt->lr;
		u->beta1 = opt->beta1;
		u->beta2 = opt->beta2;
		u->eps = opt->eps;
		u->weight_decay = opt->weight_decay;
		u->optimizer = rt_optimizer_name(opt->kind);
		u->momentum = opt->momentum;
		u->norms = c->norms;
		u->nnorms = c->nnorms;
		u->grad_clip = c->norms ? opt->grad_clip : 0;
	}
}

static int user_forward(const struct rt_layer_call *c)
{
	struct spill_layer_call u;
	to_user_call(c, NULL, &u);
	return ((const struct spill_layer_desc *)c->layer->arg)->forward(&u);
}

static int user_backward(const struct rt_layer_call *c)
{
	struct spill_layer_call u;
	to_user_call(c, NULL, &u);
	return ((const struct spill_layer_desc *)c->layer->arg)->backward(&u);
}

static int user_update(const struct rt_layer_call *c)
{
	struct spill_layer_call u;
	to_user_call(c, c->opt, &u);
	return ((const struct spill_layer_desc *)c->layer->arg)->update(&u);
}

static int user_init(const struct rt_layer *l, void *params, uint64_t seed)
{
	const struct spill_layer_desc *d = l->arg;
	if (!d->init) {
		memset(params, 0, l->param_bytes);
		return 0;
	}
	return d->init(params, l->param_bytes, seed, d->arg);
}

/* the caller's kernels: not run on the model backend's twin (simulates 0) */
static const struct rt_layer_ops user_ops = {
    .forward = user_forward, .backward = user_backward, .init = user_init};
static const struct rt_layer_ops user_ops_upd = {
    .forward = user_forward, .backward = user_backward, .update = user_update, .init = user_init};

static int user_data(const struct rt_model *m, void *arg, int iter, int s0, int n, void *in,
                     void *tg)
{
	struct spill_model *sm = arg;
	return sm->udata(sm->udata_arg, iter, s0, n, in, tg);
}

static int user_eval(const struct rt_model *m, void *arg, int iter, int s0, int n, void *in,
                     void *tg)
{
	struct spill_model *sm = arg;
	return sm->ueval(sm->udata_arg, iter, s0, n, in, tg);
}

static void default_opt(struct rt_optim *o, float lr, float b1, float b2, float eps, float wd)
{
	o->lr = lr > 0 ? lr : 3e-4f;
	o->beta1 = b1 > 0 ? b1 : 0.9f;
	o->beta2 = b2 > 0 ? b2 : 0.95f;
	o->eps = eps > 0 ? eps : 1e-8f;
	o->weight_decay = wd;
}

SPILL_API int spill_model_create(struct spill_ctx *ctx, const struct spill_model_desc *d,
                                 struct spill_model **out)
{
	SP_CHECK_ARG(ctx && d && out, "spill_model_create: NULL argument");
	SP_CHECK_ARG(d->nlayers >= 1 && d->layers, "spill_model_create: no layers");
	SP_CHECK_ARG(d->batch >= 1 && d->loss_floats >= 1 && d->data,
	             "spill_model_create '%s': batch, loss_floats and data are required",
	             d->name ? d->name : "?");
	for (int i = 0; i < d->nlayers; i++) {
		const struct spill_layer_desc *l = &d->layers[i];
		SP_CHECK_ARG(l->forward && l->backward,
		             "spill_model_create: layer %d (%s) needs forward and backward", i,
		             l->name ? l->name : "?");
		SP_CHECK_ARG(l->param_bytes % sizeof(float) == 0,
		             "spill_model_create: layer %d (%s): param_bytes %zu is not fp32", i,
		             l->name ? l->name : "?", l->param_bytes);
	}
	SP_CHECK_ARG(d->layers[d->nlayers - 1].out_per_sample == d->loss_floats * sizeof(float),
	             "spill_model_create: the last layer outputs %zu bytes per sample, not the %d "
	             "fp32 losses",
	             d->layers[d->nlayers - 1].out_per_sample, d->loss_floats);
	struct spill_model *sm = calloc(1, sizeof(*sm));
	if (!sm)
		return sp_error(-ENOMEM, "spill_model_create: out of memory");
	sm->ctx = ctx;
	sm->udesc = calloc((size_t)d->nlayers, sizeof(*sm->udesc));
	sm->m.layers = calloc((size_t)d->nlayers, sizeof(*sm->m.layers));
	if (!sm->udesc || !sm->m.layers) {
		free(sm->udesc);
		free(sm->m.layers);
		free(sm);
		return sp_error(-ENOMEM, "spill_model_create: out of memory");
	}
	memcpy(sm->udesc, d->layers, (size_t)d->nlayers * sizeof(*sm->udesc));
	snprintf(sm->m.name, sizeof(sm->m.name), "%s", d->name ? d->name : "model");
	sm->m.nlayers = d->nlayers;
	for (int i = 0; i < d->nlayers; i++) {
		const struct spill_layer_desc *u = &sm->udesc[i];
		struct rt_layer *l = &sm->m.layers[i];
		snprintf(l->name, sizeof(l->name), "%s", u->name ? u->name : "layer");
		l->param_bytes = u->param_bytes;
		l->grad_bytes = u->param_bytes;
		l->optim_bytes = u->optim_bytes ? u->optim_bytes : 2 * u->param_bytes;
		l->std_optim = !u->optim_bytes; /* follows the optimizer below */
		l->stash_per_sample = u->stash_per_sample;
		l->out_per_sample = u->out_per_sample;
		l->work_per_sample = u->work_per_sample;
		l->work_bytes = u->work_bytes;
		l->fwd_flops_per_sample = u->fwd_flops_per_sample;
		l->bwd_flops_per_sample = u->bwd_flops_per_sample;
		l->ops = u->update ? &user_ops_upd : &user_ops;
		l->arg = (void *)u;
	}
	sm->m.batch = d->batch;
	sm->m.in_per_sample = d->in_per_sample;
	sm->m.target_per_sample = d->target_per_sample;
	sm->m.loss_floats = d->loss_floats;
	default_opt(&sm->m.opt, d->lr, d->beta1, d->beta2, d->eps, d->weight_decay);
	if (!(d->grad_clip >= 0)) {
		spill_model_destroy(sm);
		return sp_error(-EINVAL, "spill_model_create: grad_clip %g must be >= 0",
		                (double)d->grad_clip);
	}
	sm->m.opt.grad_clip = d->grad_clip;
	enum kn_optimizer kind;
	int rc = rt_optimizer_parse(d->optimizer, &kind);
	if (rc == 0)
		rc = rt_model_set_optimizer(&sm->m, kind, d->momentum);
	if (rc < 0) {
		rc = sp_error(rc, "spill_model_create '%s': %s", sm->m.name, sp_last_error());
		spill_model_destroy(sm);
		return rc;
	}
	sm->udata = d->data;
	sm->udata_arg = d->data_arg;
	sm->m.data = user_data;
	sm->m.data_arg = sm;
	sm->ueval = d->eval_data;
	sm->m.eval_data = d->eval_data ? user_eval : NULL;
	sm->seed = d->seed;
	*out = sm;
	return 0;
}

SPILL_API int spill_model_gpt(struct spill_ctx *ctx, const struct spill_gpt_config *cfg,
                              struct spill_model **out)
{
	SP_CHECK_ARG(ctx && cfg && out, "spill_model_gpt: NULL argument");
	struct kn_model_config kc = {.maxT = cfg->max_seq ? cfg->max_seq : cfg->seq,
	                             .V = cfg->vocab,
	                             .L = cfg->layers,
	                             .NH = cfg->heads,
	                             .C = cfg->channels};
	SP_CHECK(rt_precision_parse(cfg->precision, &kc.dtype));
	struct spill_model *sm = calloc(1, sizeof(*sm));
	if (!sm)
		return sp_error(-ENOMEM, "spill_model_gpt: out of memory");
	int rc = rt_model_gpt(&kc, cfg->seq, cfg->batch, &sm->m);
	if (rc < 0) {
		free(sm);
		return rc;
	}
	sm->ctx = ctx;
	sm->seed = cfg->seed;
	if (cfg->lr > 0)
		sm->m.opt.lr = cfg->lr;
	if (!(cfg->grad_clip >= 0) || !(cfg->weight_decay >= 0)) {
		rt_model_free(&sm->m);
		free(sm);
		return sp_error(-EINVAL,
		                "spill_model_gpt: grad_clip %g and weight_decay %g must be >= 0",
		                (double)cfg->grad_clip, (double)cfg->weight_decay);
	}
	sm->m.opt.grad_clip = cfg->grad_clip;
	sm->m.opt.weight_decay = cfg->weight_decay;
	enum kn_optimizer kind;
	rc = rt_optimizer_parse(cfg->optimizer, &kind);
	if (rc == 0)
		rc = rt_model_set_optimizer(&sm->m, kind, cfg->momentum);
	if (rc < 0) {
		rt_model_free(&sm->m);
		free(sm);
		return rc;
	}
	if (cfg->data) {
		sm->udata = cfg->data;
		sm->udata_arg = cfg->data_arg;
		sm->m.data = user_data;
		sm->m.data_arg = sm;
		sm->ueval = cfg->eval_data;
		sm->m.eval_data = cfg->eval_data ? user_eval : NULL;
	} else if (cfg->eval_data) {
		rt_model_free(&sm->m);
		free(sm);
		return sp_error(-EINVAL, "spill_model_gpt: eval_data needs data (the synthetic "
		                         "sequences have no validation split)");
	}
	*out = sm;
	return 0;
}

SPILL_API void spill_model_destroy(struct spill_model *m)
{
	if (!m)
		return;
	rt_run_close(m->run);
	if (m->udesc)
		free(m->m.layers);
	else
		rt_model_free(&m->m);
	free(m->udesc);
	free(m);
}

SPILL_API int spill_model_plan(struct spill_model *m, const struct spill_plan *p)
{
	SP_CHECK_ARG(m, "spill_model_plan: NULL model");
	struct tg_plan plan;
	struct rt_plan_request req = {.schedule = p && p->schedule ? p->schedule : "auto",
	                              .devices = p ? p->devices : 0,
	                              .microbatch = p ? p->microbatch : 0,
	                              .group = p ? p->group : 0,
	                              .packs = p ? p->packs : 0,
	                              .upd_cpu = p ? p->update_on_cpu : 0,
	                              .recompute = p ? p->recompute : 0,
	                              /* spill_model_step runs one step at a time:
	                               * 2bw's program is one step too (a program
	                               * of 8 would run 1/8 of its tasks a call) */
	                              .flush_every = 1};
	SP_CHECK_ARG(req.devices >= 0 && req.microbatch >= 0 && req.group >= 0 && req.packs >= 0,
	             "spill_model_plan: negative devices, microbatch, group or packs");
	SP_CHECK(rt_plan_choose(m->ctx->rt, &m->m, &req, &plan));
	struct rt_run *run;
	SP_CHECK(rt_run_open(m->ctx->rt, &m->m, &plan, m->seed, &run));
	rt_run_close(m->run);
	m->run = run;
	rt_plan_describe(&plan, m->plan_name, sizeof(m->plan_name));
	return 0;
}

SPILL_API const char *spill_model_plan_name(struct spill_model *m)
{
	return m && m->run ? m->plan_name : "";
}

SPILL_API int spill_model_set_lr(struct spill_model *m, float lr)
{
	SP_CHECK_ARG(m, "spill_model_set_lr: NULL model");
	SP_CHECK_ARG(lr > 0 && lr < 1e30f, "spill_model_set_lr: lr %g must be > 0", (double)lr);
	m->m.opt.lr = lr;
	return 0;
}

SPILL_API int spill_model_step(struct spill_model *m, double *loss)
{
	SP_CHECK_ARG(m, "spill_model_step: NULL model");
	if (!m->run)
		SP_CHECK(spill_model_plan(m, NULL));
	return rt_run_step(m->run, loss);
}

SPILL_API int spill_model_layers(const struct spill_model *m)
{
	return m ? m->m.nlayers : 0;
}

/* What rt_run_read_params gives: the parameters, or a bf16 layer's fp32 masters. */
static size_t param_read_bytes(const struct rt_layer *l)
{
	return l->master_bytes ? l->master_bytes : l->param_bytes;
}

SPILL_API size_t spill_model_param_bytes(const struct spill_model *m, int layer)
{
	return m && layer >= 0 && layer < m->m.nlayers ? param_read_bytes(&m->m.layers[layer]) : 0;
}

SPILL_API int spill_model_read_params(struct spill_model *m, int layer, void *dst, size_t bytes)
{
	SP_CHECK_ARG(m && dst && layer >= 0 && layer < m->m.nlayers,
	             "spill_model_read_params: bad arguments");
	SP_CHECK_ARG(bytes == param_read_bytes(&m->m.layers[layer]),
	             "spill_model_read_params: layer %d has %zu bytes of parameters, not %zu",
	             layer, param_read_bytes(&m->m.layers[layer]), bytes);
	if (!m->run)
		SP_CHECK(spill_model_plan(m, NULL));
	return rt_run_read_params(m->run, layer, dst);
}

SPILL_API size_t spill_model_state_bytes(const struct spill_model *m, int layer,
                                         enum spill_state which)
{
	if (!m || layer < 0 || layer >= m->m.nlayers)
		return 0;
	const struct rt_layer *l = &m->m.layers[layer];
	if (which == SPILL_STATE_PARAMS)
		return param_read_bytes(l);
	if (which == SPILL_STATE_PARAMS_PREV) /* a plan's: 2bw's older version */
		return m->run ? rt_run_state_bytes(m->run, layer, RT_PARAMS_PREV) : 0;
	return which == SPILL_STATE_OPTIM ? l->optim_bytes - l->master_bytes : 0;
}

static enum rt_state rt_state_of(enum spill_state which)
{
	return which == SPILL_STATE_PARAMS  ? RT_PARAMS
	       : which == SPILL_STATE_OPTIM ? RT_OPTIM
	                                    : RT_PARAMS_PREV;
}

static const char *state_name(enum spill_state which)
{
	return which == SPILL_STATE_PARAMS  ? "parameters"
	       : which == SPILL_STATE_OPTIM ? "optimizer state"
	                                    : "older (2bw) parameters";
}

/* Checks a state call and plans the model if it has no plan yet. */
static int state_args(struct spill_model *m, int layer, enum spill_state which, const void *p,
                      size_t bytes, const char *fn)
{
	SP_CHECK_ARG(m && p && layer >= 0 && layer < m->m.nlayers &&
	                 (which == SPILL_STATE_PARAMS || which == SPILL_STATE_OPTIM ||
	                  which == SPILL_STATE_PARAMS_PREV),
	             "%s: bad arguments", fn);
	if (!m->run)
		SP_CHECK(spill_model_plan(m, NULL));
	size_t want = spill_model_state_bytes(m, layer, which);
	SP_CHECK_ARG(bytes == want, "%s: layer %d has %zu bytes of %s, not %zu", fn, layer, want,
	             state_name(which), bytes);
	return 0;
}

SPILL_API int spill_model_read_state(struct spill_model *m, int layer, enum spill_state which,
                                     void *dst, size_t bytes)
{
	SP_CHECK(state_args(m, layer, which, dst, bytes, "spill_model_read_state"));
	if (!bytes)
		return 0;
	return rt_run_read_state(m->run, layer, rt_state_of(which), dst);
}

SPILL_API int spill_model_write_state(struct spill_model *m, int layer, enum spill_state which,
                                      const void *src, size_t bytes)
{
	SP_CHECK(state_args(m, layer, which, src, bytes, "spill_model_write_state"));
	if (!bytes)
		return 0;
	return rt_run_write_state(m->run, layer, rt_state_of(which), src);
}

SPILL_API int spill_model_set_step(struct spill_model *m, int step)
{
	SP_CHECK_ARG(m && step >= 0, "spill_model_set_step: bad arguments");
	if (!m->run)
		SP_CHECK(spill_model_plan(m, NULL));
	rt_run_set_step(m->run, step);
	return 0;
}

SPILL_API int spill_model_eval(struct spill_model *m, int index, double *loss)
{
	SP_CHECK_ARG(m && loss && index >= 0, "spill_model_eval: bad arguments");
	SP_CHECK_ARG(m->m.eval_data, "spill_model_eval: the model has no eval_data");
	if (!m->run)
		SP_CHECK(spill_model_plan(m, NULL));
	return rt_run_eval(m->run, index, loss);
}

/* ---- accounting ---------------------------------------------------------------------- */

SPILL_API int spill_stats(struct spill_ctx *ctx, struct spill_stats *out)
{
	SP_CHECK_ARG(ctx && out, "spill_stats: NULL argument");
	struct rt_ctx *rt = ctx->rt;
	struct spill_stats s;
	memset(&s, 0, sizeof(s));
	for (int k = 0; k < VMM_KINDS; k++)
		for (int d = 0; d < rt->ndev; d++) {
			s.bytes[SPILL_LINK_H2D][k] += vmm_link_bytes(rt->vmm, VMM_HOST, d, k);
			s.bytes[SPILL_LINK_D2H][k] += vmm_link_bytes(rt->vmm, d, VMM_HOST, k);
			for (int e = 0; e < rt->ndev; e++)
				if (e != d)
					s.bytes[SPILL_LINK_P2P][k] +=
					    vmm_link_bytes(rt->vmm, d, e, k);
		}
	for (int k = 0; k < VMM_KINDS; k++) {
		s.bytes[SPILL_LINK_H2DISK][k] = vmm_link_bytes(rt->vmm, VMM_HOST, VMM_DISK, k);
		s.bytes[SPILL_LINK_DISK2H][k] = vmm_link_bytes(rt->vmm, VMM_DISK, VMM_HOST, k);
		for (int l = 0; l < SPILL_LINKS; l++)
			s.total[l] += s.bytes[l][k];
	}
	struct vmm_stats vs;
	vmm_stats_get(rt->vmm, &vs);
	s.evictions = (uint64_t)vs.evictions.total;
	s.prefetches = rt->st.prefetches;
	s.discards = rt->st.discards;
	s.tasks = rt->st.tasks;
	s.late_bound = rt->st.late_bound;
	s.collective_bytes = rt->st.collective_p2p;
	s.seconds = dev_now(rt->dev) - ctx->t0;
	*out = s;
	return 0;
}

SPILL_API void spill_stats_print(struct spill_ctx *ctx, FILE *f, int json)
{
	if (!ctx || !f)
		return;
	vmm_stats_print(ctx->rt->vmm, f, json);
}

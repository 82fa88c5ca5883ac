/* tests/runtime/test_clip_custom.c — clipping by global norm through the
 * public API (include/spill.h) with a model of the caller's own layers: dense
 * layers (built-in AdamW or SGD), parameterless layers between them (norm 0;
 * alone in a pack with one layer per pack), and a layer whose own update
 * callback applies the clip from the norms it is handed.
 *
 * Checked where the work runs: the update callback gets nnorms = the model's
 * layers and the model's grad_clip; its own norm is the sum of squares of the
 * gradient it is handed (kn_grad_sumsq's bits); the parameterless layers'
 * norms are 0; every replica sees the same norms in a step. Across plans with
 * the same microbatch and replica structure (pipelines on 1 and 2 devices,
 * greedy or one layer per pack, recomputation, the update on the CPU, a tight
 * budget; dp-swap against harmony-dp) every loss and every weight are the same
 * bits; a clip far below the norm changes the run; one far above it is the
 * run without clipping, bit for bit. */
#include "include/spill.h"
#include "kernels/kernels.h"
#include "tests/test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define D       16
#define CLASSES 4
#define NL      5
#define BATCH   8
#define STEPS   4

struct lay {
	int in, out, kind; /* kind 0: dense + relu, 1: x * 0.5 (no params), 2: dense + loss */
};
static struct lay lays[NL] = {{D, D, 0}, {D, D, 1}, {D, D, 0}, {D, D, 1}, {D, CLASSES, 2}};

/* ---- kernels ---- */
struct fargs {
	struct lay d;
	int n;
	const float *x, *w;
	float *y, *stash;
	const int *tg;
};
static void k_forward(const void *a)
{
	const struct fargs *f = a;
	const struct lay *d = &f->d;
	for (int s = 0; s < f->n; s++) {
		const float *x = f->x + (size_t)s * d->in;
		if (d->kind == 1) {
			for (int i = 0; i < d->in; i++)
				f->y[(size_t)s * d->out + i] = x[i] * 0.5f;
			continue;
		}
		const float *b = f->w + d->in * d->out;
		float *z = f->stash + (size_t)s * d->out;
		for (int o = 0; o < d->out; o++) {
			float acc = b[o];
			for (int i = 0; i < d->in; i++)
				acc += f->w[o * d->in + i] * x[i];
			z[o] = d->kind == 0 && acc < 0 ? 0 : acc;
		}
		if (d->kind == 0) {
			memcpy(f->y + (size_t)s * d->out, z, sizeof(float) * d->out);
			continue;
		}
		float mx = z[0], sum = 0;
		for (int o = 1; o < d->out; o++)
			mx = z[o] > mx ? z[o] : mx;
		for (int o = 0; o < d->out; o++)
			sum += (z[o] = expf(z[o] - mx));
		for (int o = 0; o < d->out; o++)
			z[o] /= sum;
		f->y[s] = -logf(z[f->tg[s]] + 1e-12f);
	}
}

struct bargs {
	struct lay d;
	int n;
	const float *x, *w, *stash, *dy;
	float *dw, *dx, dloss;
	const int *tg;
};
static void k_backward(const void *a)
{
	const struct bargs *f = a;
	const struct lay *d = &f->d;
	float dz[D];
	for (int s = 0; s < f->n; s++) {
		if (d->kind == 1) {
			if (f->dx)
				for (int i = 0; i < d->in; i++)
					f->dx[(size_t)s * d->in + i] +=
					    0.5f * f->dy[(size_t)s * d->out + i];
			continue;
		}
		const float *x = f->x + (size_t)s * d->in, *z = f->stash + (size_t)s * d->out;
		float *db = f->dw + d->in * d->out;
		for (int o = 0; o < d->out; o++)
			dz[o] = d->kind == 0 ? (z[o] > 0 ? f->dy[(size_t)s * d->out + o] : 0)
			                     : (z[o] - (o == f->tg[s])) * f->dloss;
		for (int o = 0; o < d->out; o++) {
			db[o] += dz[o];
			for (int i = 0; i < d->in; i++)
				f->dw[o * d->in + i] += dz[o] * x[i];
		}
		if (f->dx)
			for (int i = 0; i < d->in; i++) {
				float acc = 0;
				for (int o = 0; o < d->out; o++)
					acc += dz[o] * f->w[o * d->in + i];
				f->dx[(size_t)s * d->in + i] += acc;
			}
	}
}

/* what the custom update saw, checked after each step */
static int upd_calls, upd_bad;
static char upd_why[256];
static double step_sum[64]; /* the global sum of squares each update saw */
static int nsums;
static float want_clip;

struct uargs {
	float *w;
	const float *g;
	const double *norms;
	int nnorms, n, step;
	float clip, lr;
};
static void k_update(const void *a)
{
	const struct uargs *u = a;
	upd_calls++;
	if (want_clip > 0 && (!u->norms || u->nnorms != NL || u->clip != want_clip)) {
		upd_bad++;
		snprintf(upd_why, sizeof(upd_why), "norms %p nnorms %d clip %g (want %d, %g)",
		         (const void *)u->norms, u->nnorms, (double)u->clip, NL, (double)want_clip);
		return;
	}
	if (want_clip == 0 && u->norms) {
		upd_bad++;
		snprintf(upd_why, sizeof(upd_why), "norms without clipping");
		return;
	}
	float gs = 1.0f;
	if (u->norms) {
		/* its own norm: the gradient it is handed, kn_grad_sumsq's bits */
		double parts[KN_SUMSQ_PARTS], own;
		struct kn_grad_sumsq_args sa = {
		    .dtype = KN_F32, .x = u->g, .N = u->n, .parts = parts, .out = &own};
		kn_grad_sumsq_cpu(&sa);
		if (own != u->norms[2] || u->norms[1] != 0 || u->norms[3] != 0) {
			upd_bad++;
			snprintf(upd_why, sizeof(upd_why),
			         "norms[2] %.17g, the gradient's %.17g; norms[1] %g norms[3] %g",
			         u->norms[2], own, u->norms[1], u->norms[3]);
		}
		double s = 0;
		for (int i = 0; i < u->nnorms; i++)
			s += u->norms[i];
		if (nsums < 64)
			step_sum[nsums++] = s;
		double norm = sqrt(s);
		gs = norm > (double)u->clip ? (float)((double)u->clip / norm) : 1.0f;
	}
	for (int i = 0; i < u->n; i++)
		u->w[i] -= u->lr * (u->g[i] * gs);
}

/* ---- callbacks ---- */
static int forward(const struct spill_layer_call *c)
{
	const struct lay *d = c->arg;
	struct fargs a = {*d, c->batch, c->in, c->params, c->out, c->stash, c->targets};
	return spill_launch(c->stream, k_forward, NULL, &a, sizeof(a), 1, 0);
}
static int backward(const struct spill_layer_call *c)
{
	const struct lay *d = c->arg;
	struct bargs a = {*d,      c->batch, c->in,  c->params, c->stash,
	                  c->dout, c->grads, c->din, c->dloss,  c->targets};
	return spill_launch(c->stream, k_backward, NULL, &a, sizeof(a), 1, 0);
}
static int update(const struct spill_layer_call *c)
{
	const struct lay *d = c->arg;
	struct uargs a = {.w = c->params,
	                  .g = c->grads,
	                  .norms = c->norms,
	                  .nnorms = c->nnorms,
	                  .n = (d->in + 1) * d->out,
	                  .step = c->step,
	                  .clip = c->grad_clip,
	                  .lr = c->lr};
	return spill_launch(c->stream, k_update, NULL, &a, sizeof(a), 1, 0);
}
static int init(void *params, size_t bytes, uint64_t seed, void *arg)
{
	float *w = params;
	uint64_t s = seed * 2654435761u + (uint64_t)(uintptr_t)((struct lay *)arg - lays);
	for (size_t i = 0; i < bytes / 4; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		w[i] = 0.5f * ((float)((s >> 33) % 2001) / 1000.0f - 1.0f);
	}
	return 0;
}
static int data(void *arg, int iter, int s0, int n, void *in, void *tg)
{
	(void)arg;
	for (int k = 0; k < n; k++) {
		uint64_t s = (uint64_t)iter * 1000003u + (uint64_t)(s0 + k) * 7919u + 1;
		float *x = (float *)in + (size_t)k * D, acc = 0;
		for (int i = 0; i < D; i++) {
			s = s * 6364136223846793005ull + 1442695040888963407ull;
			x[i] = (float)((s >> 33) % 2001) / 1000.0f - 1.0f;
			acc += x[i] * (float)(i % 3 - 1);
		}
		((int *)tg)[k] = (int)(fabsf(acc) * 3) % CLASSES;
	}
	return 0;
}

struct result {
	double loss[STEPS];
	float w[NL][(D + 1) * D];
};

static void train(const char *optimizer, float clip, const struct spill_plan *p, int devices,
                  uint64_t budget, struct result *out)
{
	struct spill_layer_desc L[NL];
	memset(L, 0, sizeof(L));
	for (int l = 0; l < NL; l++) {
		const struct lay *d = &lays[l];
		L[l].name = d->kind == 1 ? "half" : d->kind == 2 ? "loss" : "dense";
		L[l].param_bytes = d->kind == 1 ? 0 : sizeof(float) * (size_t)(d->in + 1) * d->out;
		L[l].stash_per_sample = d->kind == 1 ? 0 : sizeof(float) * d->out;
		L[l].out_per_sample = sizeof(float) * (d->kind == 2 ? 1 : d->out);
		L[l].fwd_flops_per_sample = L[l].bwd_flops_per_sample = 2.0 * d->in * d->out;
		L[l].forward = forward;
		L[l].backward = backward;
		L[l].init = d->kind == 1 ? NULL : init;
		L[l].arg = &lays[l];
	}
	L[2].update = update;
	L[2].optim_bytes = 4; /* its own: none really */
	struct spill_options o = {.backend = "host",
	                          .devices = devices,
	                          .device_mem = 64 << 20,
	                          .budget = budget,
	                          .host_mem = 64 << 20,
	                          .threads = 1};
	struct spill_ctx *c;
	CHECK_MSG(spill_open(&o, &c) == 0, "%s", spill_last_error());
	struct spill_model_desc md = {.name = "clipmlp",
	                              .layers = L,
	                              .nlayers = NL,
	                              .batch = BATCH,
	                              .in_per_sample = sizeof(float) * D,
	                              .target_per_sample = sizeof(int),
	                              .loss_floats = 1,
	                              .data = data,
	                              .lr = 0.05f,
	                              .grad_clip = clip,
	                              .seed = 3,
	                              .optimizer = optimizer,
	                              .momentum = strcmp(optimizer, "sgd") ? 0 : 0.9f};
	struct spill_model *m;
	CHECK_MSG(spill_model_create(c, &md, &m) == 0, "%s", spill_last_error());
	CHECK_MSG(spill_model_plan(m, p) == 0, "%s: %s", p->schedule, spill_last_error());
	want_clip = clip;
	upd_calls = upd_bad = 0;
	for (int s = 0; s < STEPS; s++) {
		nsums = 0;
		CHECK_MSG(spill_model_step(m, &out->loss[s]) == 0, "%s step %d: %s", p->schedule, s,
		          spill_last_error());
		CHECK_MSG(!upd_bad, "%s (%s), step %d: the update saw %s", spill_model_plan_name(m),
		          optimizer, s, upd_why);
		for (int k = 1; k < nsums; k++)
			CHECK_MSG(step_sum[k] == step_sum[0],
			          "%s step %d: replicas' norms %.17g %.17g",
			          spill_model_plan_name(m), s, step_sum[0], step_sum[k]);
	}
	CHECK_MSG(upd_calls >= STEPS, "the custom update ran %d times", upd_calls);
	memset(out->w, 0, sizeof(out->w));
	for (int l = 0; l < NL; l++) {
		size_t n = spill_model_param_bytes(m, l);
		CHECK(n == L[l].param_bytes);
		if (n)
			CHECK_MSG(spill_model_read_params(m, l, out->w[l], n) == 0, "%s",
			          spill_last_error());
	}
	printf("  %-6s clip %-6g %-55s loss %.6f -> %.6f\n", optimizer, (double)clip,
	       spill_model_plan_name(m), out->loss[0], out->loss[STEPS - 1]);
	spill_model_destroy(m);
	spill_close(c);
}

static int same(const struct result *a, const struct result *b)
{
	return !memcmp(a->loss, b->loss, sizeof(a->loss)) && !memcmp(a->w, b->w, sizeof(a->w));
}

int main(void)
{
	static const char *const optims[] = {"adamw", "sgd"};
	/* the state is tiny: 8 KiB of budget is tight for one layer per pack */
	for (int oi = 0; oi < 2; oi++) {
		const char *op = optims[oi];
		struct result base, r, noclip, loose;
		struct spill_plan p = {.schedule = "gpipe", .microbatch = 2, .packs = NL};
		train(op, 0.05f, &p, 2, 0, &base);
		/* pipelines, the same microbatch: the same bits */
		const struct spill_plan pipes[] = {
		    {.schedule = "1f1b", .microbatch = 2, .packs = NL},
		    {.schedule = "gpipe", .microbatch = 2, .packs = 2},
		    {.schedule = "harmony-pp", .microbatch = 2, .group = 2, .packs = NL},
		    {.schedule = "gpipe", .microbatch = 2, .packs = NL, .update_on_cpu = 1},
		    {.schedule = "1f1b", .microbatch = 2, .packs = 3, .recompute = 1},
		    {.schedule = "harmony-pp", .microbatch = 2, .packs = 1, .update_on_cpu = 1},
		};
		for (size_t i = 0; i < SP_ARRAY_SIZE(pipes); i++)
			for (int devs = 1; devs <= 2; devs++) {
				train(op, 0.05f, &pipes[i], devs, 0, &r);
				CHECK_MSG(same(&r, &base),
				          "%s: %s on %d devices differs from gpipe", op,
				          pipes[i].schedule, devs);
			}
		/* a tight budget */
		train(op, 0.05f, &pipes[0], 2, 24 << 10, &r);
		CHECK_MSG(same(&r, &base), "%s: 1f1b under a 24 KiB budget differs", op);
		/* the clip far below the norm did something; far above it nothing */
		train(op, 0, &p, 2, 0, &noclip);
		CHECK_MSG(noclip.loss[STEPS - 1] != base.loss[STEPS - 1],
		          "%s: clip 0.05 changed nothing", op);
		train(op, 1e30f, &p, 2, 0, &loose);
		CHECK_MSG(same(&loose, &noclip), "%s: clip 1e30 differs from no clipping", op);
		/* data parallel: 2 replicas, microbatch 2, two schedules */
		struct spill_plan dp = {.schedule = "dp-swap", .microbatch = 2, .packs = NL};
		struct result d1, d2;
		train(op, 0.05f, &dp, 2, 0, &d1);
		dp.schedule = "harmony-dp";
		dp.update_on_cpu = 1;
		train(op, 0.05f, &dp, 2, 0, &d2);
		CHECK_MSG(same(&d1, &d2), "%s: harmony-dp differs from dp-swap", op);
	}
	TEST_PASS();
}

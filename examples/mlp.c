/* examples/mlp.c — a model of your own layers, trained by spill under a memory
 * budget smaller than the model's state, so its weights, gradients and
 * optimizer state move between the (emulated) GPUs and host memory.
 *
 * The model: a multi-layer perceptron (Linear + ReLU layers, then Linear +
 * softmax cross-entropy) classifying synthetic points whose class is the
 * argmax of a fixed random linear map (a dataset of 256 points), so the loss
 * can fall. Each layer is a
 * descriptor (sizes, FLOPs) and forward/backward callbacks that launch CPU
 * kernels with spill_launch(); spill's built-in AdamW updates the weights.
 * The host backend runs them on emulated GPUs; a CUDA version would give
 * spill_launch a cuda launcher too.
 *
 * Build against an installed spill:
 *   cc -O2 mlp.c $(pkg-config --cflags --libs spill) -lm -o mlp
 * Run: ./mlp [steps]   (prints the loss per step, the plan and the swap volume;
 * exits 1 if the loss did not fall or nothing was evicted) */
#include <spill.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IN      32  /* input features */
#define HIDDEN  256 /* hidden units */
#define CLASSES 8
#define DEPTH   8  /* hidden layers */
#define BATCH   64 /* samples per step */

struct dense { /* one Linear layer: y = W x + b, W is out x in */
	int in, out, relu;
};

/* ---- the kernels (CPU), launched on the layer call's stream ---------------------- */

struct fwd_args {
	struct dense d;
	int n;
	const float *x, *w;
	float *y, *stash; /* stash: the output (ReLU) or the class probabilities (last) */
	const int *target;
};

static void dense_forward(const void *a)
{
	const struct fwd_args *f = a;
	const struct dense *d = &f->d;
	const float *b = f->w + d->in * d->out;
	for (int s = 0; s < f->n; s++) {
		const float *x = f->x + (size_t)s * d->in;
		float *z = f->stash + (size_t)s * d->out;
		for (int o = 0; o < d->out; o++) {
			float acc = b[o];
			for (int i = 0; i < d->in; i++)
				acc += f->w[o * d->in + i] * x[i];
			z[o] = d->relu && acc < 0 ? 0 : acc;
		}
		if (d->relu) {
			memcpy(f->y + (size_t)s * d->out, z, sizeof(float) * d->out);
			continue;
		}
		/* the loss layer: softmax probabilities in the stash, loss out */
		float mx = z[0], sum = 0;
		for (int o = 1; o < d->out; o++)
			mx = z[o] > mx ? z[o] : mx;
		for (int o = 0; o < d->out; o++)
			sum += (z[o] = expf(z[o] - mx));
		for (int o = 0; o < d->out; o++)
			z[o] /= sum;
		f->y[s] = -logf(z[f->target[s]] + 1e-12f);
	}
}

struct bwd_args {
	struct dense d;
	int n;
	const float *x, *w, *stash, *dy;
	float *dw, *dx, dloss;
	const int *target;
};

static void dense_backward(const void *a)
{
	const struct bwd_args *f = a;
	const struct dense *d = &f->d;
	float *db = f->dw + d->in * d->out;
	float *dz = malloc(sizeof(float) * d->out);
	for (int s = 0; s < f->n; s++) {
		const float *x = f->x + (size_t)s * d->in, *z = f->stash + (size_t)s * d->out;
		for (int o = 0; o < d->out; o++)
			if (d->relu)
				dz[o] = z[o] > 0 ? f->dy[(size_t)s * d->out + o] : 0;
			else /* d loss / d logit = p - onehot, times the objective's weight */
				dz[o] = (z[o] - (o == f->target[s])) * f->dloss;
		for (int o = 0; o < d->out; o++) {
			db[o] += dz[o]; /* gradients accumulate over microbatches */
			for (int i = 0; i < d->in; i++)
				f->dw[o * d->in + i] += dz[o] * x[i];
		}
		if (f->dx) /* add the input gradient */
			for (int i = 0; i < d->in; i++) {
				float acc = 0;
				for (int o = 0; o < d->out; o++)
					acc += dz[o] * f->w[o * d->in + i];
				f->dx[(size_t)s * d->in + i] += acc;
			}
	}
	free(dz);
}

/* ---- the layer callbacks ------------------------------------------------------------ */

static double flops(const struct dense *d, int n)
{
	return 2.0 * d->in * d->out * n;
}

static int forward(const struct spill_layer_call *c)
{
	const struct dense *d = c->arg;
	struct fwd_args a = {*d, c->batch, c->in, c->params, c->out, c->stash, c->targets};
	return spill_launch(c->stream, dense_forward, NULL, &a, sizeof(a), flops(d, c->batch), 0);
}

static int backward(const struct spill_layer_call *c)
{
	const struct dense *d = c->arg;
	struct bwd_args a = {*d,      c->batch, c->in,  c->params, c->stash,
	                     c->dout, c->grads, c->din, c->dloss,  c->targets};
	return spill_launch(c->stream, dense_backward, NULL, &a, sizeof(a), 2 * flops(d, c->batch),
	                    0);
}

static uint64_t rng(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return *s >> 33;
}

static int init(void *params, size_t bytes, uint64_t seed, void *arg)
{
	const struct dense *d = arg;
	float *w = params;
	float scale = sqrtf(2.0f / (float)d->in);
	for (size_t i = 0; i < bytes / sizeof(float); i++)
		w[i] = i < (size_t)d->in * d->out
		           ? scale * ((float)(rng(&seed) % 2001) / 1000.0f - 1.0f)
		           : 0.0f;
	return 0;
}

/* A dataset of 4 batches, one per iteration in turn: x uniform in [-1, 1],
 * class = argmax of T x. */
static int data(void *arg, int iter, int sample0, int n, void *in, void *targets)
{
	const float *T = arg;
	for (int s = 0; s < n; s++) {
		uint64_t st = (uint64_t)(iter % 4) * 1000003u + (uint64_t)(sample0 + s) * 7919u + 1;
		float *x = (float *)in + (size_t)s * IN;
		for (int i = 0; i < IN; i++)
			x[i] = (float)(rng(&st) % 2001) / 1000.0f - 1.0f;
		int best = 0;
		float bv = -1e30f;
		for (int k = 0; k < CLASSES; k++) {
			float v = 0;
			for (int i = 0; i < IN; i++)
				v += T[k * IN + i] * x[i];
			if (v > bv) {
				bv = v;
				best = k;
			}
		}
		((int *)targets)[s] = best;
	}
	return 0;
}

int main(int argc, char **argv)
{
	int steps = argc > 1 ? atoi(argv[1]) : 30;
	static float T[CLASSES * IN];
	uint64_t seed = 1;
	for (int i = 0; i < CLASSES * IN; i++)
		T[i] = (float)(rng(&seed) % 2001) / 1000.0f - 1.0f;

	struct dense dn[DEPTH + 1];
	struct spill_layer_desc layers[DEPTH + 1];
	size_t state = 0;
	memset(layers, 0, sizeof(layers));
	for (int l = 0; l <= DEPTH; l++) {
		dn[l] = (struct dense){l ? HIDDEN : IN, l < DEPTH ? HIDDEN : CLASSES, l < DEPTH};
		struct spill_layer_desc *L = &layers[l];
		L->name = l < DEPTH ? "dense" : "loss";
		L->param_bytes = sizeof(float) * (size_t)(dn[l].in + 1) * dn[l].out;
		L->stash_per_sample = sizeof(float) * dn[l].out;
		L->out_per_sample = sizeof(float) * (l < DEPTH ? dn[l].out : 1);
		L->fwd_flops_per_sample = flops(&dn[l], 1);
		L->bwd_flops_per_sample = 2 * flops(&dn[l], 1);
		L->forward = forward;
		L->backward = backward;
		L->init = init;
		L->arg = &dn[l];
		state += 4 * L->param_bytes; /* weights, gradients, AdamW's m and v */
	}
	/* two emulated GPUs whose budget holds about a third of the state */
	struct spill_options opt = {.backend = "host",
	                            .devices = 2,
	                            .device_mem = 64 << 20,
	                            .budget = state / 3,
	                            .host_mem = 64 << 20};
	struct spill_ctx *ctx;
	if (spill_open(&opt, &ctx) < 0) {
		fprintf(stderr, "mlp: %s\n", spill_last_error());
		return 1;
	}
	struct spill_model_desc md = {.name = "mlp",
	                              .layers = layers,
	                              .nlayers = DEPTH + 1,
	                              .batch = BATCH,
	                              .in_per_sample = sizeof(float) * IN,
	                              .target_per_sample = sizeof(int),
	                              .loss_floats = 1,
	                              .data = data,
	                              .data_arg = T,
	                              .lr = 1e-3f,
	                              .seed = 42};
	struct spill_model *m;
	struct spill_plan plan = {.schedule = "harmony-dp", .microbatch = 8, .group = 2};
	if (spill_model_create(ctx, &md, &m) < 0 || spill_model_plan(m, &plan) < 0) {
		fprintf(stderr, "mlp: %s\n", spill_last_error());
		spill_close(ctx);
		return 1;
	}
	printf("mlp: %d layers, %.2f MiB of state, budget %.2f MiB per device; plan: %s\n",
	       DEPTH + 1, state / 1048576.0, state / 3 / 1048576.0, spill_model_plan_name(m));
	double first = 0, last = 0;
	for (int s = 0; s < steps; s++) {
		double loss;
		if (spill_model_step(m, &loss) < 0) {
			fprintf(stderr, "mlp: step %d: %s\n", s, spill_last_error());
			spill_model_destroy(m);
			spill_close(ctx);
			return 1;
		}
		if (s == 0)
			first = loss;
		last = loss;
		printf("step %3d  loss %.4f\n", s, loss);
	}
	struct spill_stats st;
	if (spill_stats(ctx, &st) == 0)
		printf("swapped %.1f MiB to the devices, %.1f MiB back; %llu evictions, "
		       "%llu tasks\n",
		       st.total[SPILL_LINK_H2D] / 1048576.0, st.total[SPILL_LINK_D2H] / 1048576.0,
		       (unsigned long long)st.evictions, (unsigned long long)st.tasks);
	spill_model_destroy(m);
	spill_close(ctx);
	int ok = last < 0.8 * first && st.evictions > 0;
	printf("loss %.4f -> %.4f: %s\n", first, last, ok ? "ok" : "did not train under swapping");
	return ok ? 0 : 1;
}

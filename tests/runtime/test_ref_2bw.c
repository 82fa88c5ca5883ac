/* tests/runtime/test_ref_2bw.c — the reference loop's PipeDream-2BW mode
 * (rt_reference_set_2bw) against an independent loop that keeps every weight
 * version: W(t+1) = W(t) - step(grad f(W(t-1))), W(-1) = W(0).
 *
 * A toy model of the test's own layers (elementwise scale and bias, the last
 * one a squared-error loss; an update with a momentum buffer, so the
 * optimizer state follows the delayed gradients too), random shapes,
 * replicas, microbatches, rates and step counts (seeded; argv[1] the trial
 * count). The oracle calls the same kernels on plain arrays in the
 * reference's reduction order, holds versions 0..T and reads version
 * max(t-1, 0) at step t. Checked bit for bit: every step's loss, the newest
 * weights (version T) and the version the passes read (T-1), and the
 * momentum. The oracle with no delay gives the plain reference's bits (so it
 * is the reference's arithmetic), and 2BW really differs from it from the
 * second step on. */
#include "runtime/runtime.h"
#include "tests/test.h"

#include <string.h>

#define MAXD  6
#define MAXL  4
#define MAXT  6
#define MAXB  36
#define MAXNP (2 * MAXD)

struct dims {
	int D, last; /* features; 1 for the loss layer */
};

/* ---- kernels: per sample, in order ---- */
struct fargs {
	struct dims d;
	int n;
	const float *x, *w, *tg;
	float *y, *stash;
};
static void k_forward(const void *a)
{
	const struct fargs *f = a;
	int D = f->d.D;
	for (int s = 0; s < f->n; s++) {
		const float *x = f->x + (size_t)s * D;
		float z[MAXD];
		for (int i = 0; i < D; i++)
			z[i] = f->w[i] * x[i] + f->w[D + i];
		if (!f->d.last) {
			memcpy(f->y + (size_t)s * D, z, sizeof(float) * (size_t)D);
			continue;
		}
		float l = 0;
		for (int i = 0; i < D; i++) {
			float e = z[i] - f->tg[(size_t)s * D + i];
			f->stash[(size_t)s * D + i] = e;
			l += 0.5f * e * e;
		}
		f->y[s] = l;
	}
}

struct bargs {
	struct dims d;
	int n;
	const float *x, *w, *stash, *dy;
	float *dw, *dx, dloss;
};
static void k_backward(const void *a)
{
	const struct bargs *f = a;
	int D = f->d.D;
	for (int s = 0; s < f->n; s++) {
		const float *x = f->x + (size_t)s * D;
		for (int i = 0; i < D; i++) {
			float dz = f->d.last ? f->stash[(size_t)s * D + i] * f->dloss
			                     : f->dy[(size_t)s * D + i];
			f->dw[i] += dz * x[i];
			f->dw[D + i] += dz;
			if (f->dx)
				f->dx[(size_t)s * D + i] += dz * f->w[i];
		}
	}
}

struct uargs {
	int n;
	float *w, *mom;
	const float *g;
	float lr, beta;
};
static void k_update(const void *a)
{
	const struct uargs *u = a;
	for (int i = 0; i < u->n; i++) {
		u->mom[i] = u->beta * u->mom[i] + u->g[i];
		u->w[i] -= u->lr * u->mom[i];
	}
}

/* ---- the layers' callbacks ---- */
static struct dims dims[MAXL];
static float g_beta;

static int forward(const struct rt_layer_call *c)
{
	static const struct dev_kernel k = {"toy forward", k_forward, NULL};
	const struct dims *d = c->layer->arg;
	struct fargs a = {*d, c->B, c->in, c->params, c->targets, c->out, c->stash};
	return dev_launch(c->s, &k, &a, sizeof(a), (struct dev_cost){1, 1, 0});
}
static int backward(const struct rt_layer_call *c)
{
	static const struct dev_kernel k = {"toy backward", k_backward, NULL};
	const struct dims *d = c->layer->arg;
	struct bargs a = {*d,      c->B,     c->in,  c->params, c->stash,
	                  c->dout, c->grads, c->din, c->dloss};
	return dev_launch(c->s, &k, &a, sizeof(a), (struct dev_cost){1, 1, 0});
}
static int update(const struct rt_layer_call *c)
{
	static const struct dev_kernel k = {"toy update", k_update, NULL};
	const struct dims *d = c->layer->arg;
	struct uargs a = {2 * d->D, c->params, c->optim, c->grads, c->opt->lr, g_beta};
	return dev_launch(c->s, &k, &a, sizeof(a), (struct dev_cost){1, 1, 0});
}

static uint64_t rnd_state;
static uint64_t rnd(uint64_t n)
{
	rnd_state = rnd_state * 6364136223846793005ull + 1442695040888963407ull;
	return (rnd_state >> 33) % n;
}
static float val(uint64_t s)
{
	s = s * 6364136223846793005ull + 1442695040888963407ull;
	s ^= s >> 29;
	s *= 0xbf58476d1ce4e5b9ull;
	return (float)((s >> 33) % 2001) / 1000.0f - 1.0f;
}

static int init(const struct rt_layer *l, void *params, uint64_t seed)
{
	const struct dims *d = l->arg;
	float *w = params;
	for (int i = 0; i < 2 * d->D; i++)
		w[i] = 1.0f + 0.5f * val(seed * 131 + (uint64_t)(d - dims) * 17 + (uint64_t)i);
	return 0;
}

static int data(const struct rt_model *m, void *arg, int iter, int s0, int n, void *in, void *tg)
{
	(void)arg;
	int D = dims[0].D;
	(void)m;
	for (int k = 0; k < n; k++)
		for (int i = 0; i < D; i++) {
			uint64_t s =
			    ((uint64_t)iter * 1009 + (uint64_t)(s0 + k)) * 97 + (uint64_t)i;
			((float *)in)[(size_t)k * D + i] = val(2 * s);
			((float *)tg)[(size_t)k * D + i] = 0.5f * val(2 * s + 1);
		}
	return 0;
}

static const struct rt_layer_ops ops = {
    .forward = forward, .backward = backward, .update = update, .init = init};

/* The independent loop: every version kept, step t reads version
 * max(t - delay, 0). Out: losses, vers[0..T], the momentum. */
struct oracle {
	double loss[MAXT];
	float vers[MAXT + 1][MAXL][MAXNP];
	float mom[MAXL][MAXNP];
};
static void oracle(const struct rt_model *m, int nrep, int mb, int T, int delay, uint64_t seed,
                   struct oracle *o)
{
	int L = m->nlayers, D = dims[0].D, per = m->batch / nrep;
	memset(o, 0, sizeof(*o));
	for (int l = 0; l < L; l++)
		CHECK_OK(init(&m->layers[l], o->vers[0][l], seed));
	float dloss = 1.0f / ((float)m->batch * (float)m->loss_floats);
	for (int t = 0; t < T; t++) {
		int v = t - delay < 0 ? 0 : t - delay;
		float grads[4][MAXL][MAXNP];
		memset(grads, 0, sizeof(grads));
		double sum = 0;
		for (int k = 0; k < nrep; k++)
			for (int j = 0; j < per / mb; j++) {
				float in[MAXB * MAXD], tg[MAXB * MAXD];
				float act[MAXL][MAXB * MAXD], stash[MAXB * MAXD], loss[MAXB];
				float din[2][MAXB * MAXD];
				CHECK_OK(data(m, NULL, t, k * per + j * mb, mb, in, tg));
				const float *x = in;
				for (int l = 0; l < L; l++) {
					struct fargs a = {dims[l], mb,
					                  x,       o->vers[v][l],
					                  tg,      l == L - 1 ? loss : act[l],
					                  stash};
					k_forward(&a);
					x = act[l];
				}
				for (int i = 0; i < mb; i++)
					sum += loss[i];
				const float *dy = NULL;
				for (int l = L - 1; l >= 0; l--) {
					float *dx = l ? din[l & 1] : NULL;
					if (dx)
						memset(dx, 0, sizeof(din[0]));
					struct bargs a = {dims[l],       mb,    l ? act[l - 1] : in,
					                  o->vers[v][l], stash, dy,
					                  grads[k][l],   dx,    dloss};
					k_backward(&a);
					dy = dx;
				}
			}
		for (int l = 0; l < L; l++)
			for (int k = 1; k < nrep; k++)
				for (int i = 0; i < 2 * D; i++)
					grads[0][l][i] += grads[k][l][i];
		for (int l = 0; l < L; l++) {
			memcpy(o->vers[t + 1][l], o->vers[t][l], sizeof(o->vers[t][l]));
			struct uargs u = {2 * D,       o->vers[t + 1][l], o->mom[l],
			                  grads[0][l], m->opt.lr,         g_beta};
			k_update(&u);
		}
		o->loss[t] = sum / ((double)m->batch * m->loss_floats);
	}
}

int main(int argc, char **argv)
{
	int trials = argc > 1 ? atoi(argv[1]) : 40, differ = 0;
	rnd_state = 2026;
	for (int tr = 0; tr < trials; tr++) {
		int D = 1 + (int)rnd(MAXD), L = 1 + (int)rnd(MAXL), T = 2 + (int)rnd(MAXT - 1);
		int nrep = 1 + (int)rnd(2), mb = 1 + (int)rnd(3), nmb = 1 + (int)rnd(3);
		uint64_t seed = 1 + rnd(1000);
		struct rt_layer lay[MAXL];
		memset(lay, 0, sizeof(lay));
		for (int l = 0; l < L; l++) {
			dims[l] = (struct dims){D, l == L - 1};
			snprintf(lay[l].name, sizeof(lay[l].name), "toy%d", l);
			lay[l].param_bytes = lay[l].grad_bytes = lay[l].optim_bytes =
			    sizeof(float) * 2 * (uint64_t)D;
			lay[l].stash_per_sample = l == L - 1 ? sizeof(float) * (uint64_t)D : 0;
			lay[l].out_per_sample =
			    l == L - 1 ? sizeof(float) : sizeof(float) * (uint64_t)D;
			lay[l].ops = &ops;
			lay[l].arg = &dims[l];
		}
		struct rt_model m;
		memset(&m, 0, sizeof(m));
		snprintf(m.name, sizeof(m.name), "toy");
		m.nlayers = L;
		m.layers = lay;
		m.batch = nrep * mb * nmb;
		m.in_per_sample = m.target_per_sample = sizeof(float) * (uint64_t)D;
		m.loss_floats = 1;
		m.data = data;
		m.opt.lr = 0.05f + 0.2f * (float)rnd(100) / 100.0f;
		g_beta = rnd(2) ? 0.0f : 0.9f;
		struct oracle *want = calloc(1, sizeof(*want)), *plain = calloc(1, sizeof(*plain));
		CHECK(want && plain);
		oracle(&m, nrep, mb, T, 1, seed, want);
		oracle(&m, nrep, mb, T, 0, seed, plain);
		for (int two = 0; two < 2; two++) {
			const struct oracle *o = two ? want : plain;
			struct rt_reference *r;
			CHECK_OK(rt_reference_open(&m, nrep, mb, seed, &r));
			if (two)
				CHECK_OK(rt_reference_set_2bw(r));
			for (int t = 0; t < T; t++) {
				double loss;
				CHECK_OK(rt_reference_step(r, t, &loss));
				CHECK_MSG(loss == o->loss[t],
				          "trial %d (%s, D %d, %d layers, %d replicas x %d x %d "
				          "samples): step %d loss %.9g, oracle %.9g",
				          tr, two ? "2bw" : "plain", D, L, nrep, nmb, mb, t, loss,
				          o->loss[t]);
			}
			CHECK(rt_reference_set_2bw(r) == -EINVAL); /* only before a step */
			for (int l = 0; l < L; l++) {
				size_t n = lay[l].param_bytes;
				CHECK_MSG(!memcmp(r->params[l], o->vers[T][l], n),
				          "trial %d (%s): layer %d's newest weights differ", tr,
				          two ? "2bw" : "plain", l);
				CHECK_MSG(!memcmp(r->optim[l], o->mom[l], n),
				          "trial %d (%s): layer %d's momentum differs", tr,
				          two ? "2bw" : "plain", l);
				if (two)
					CHECK_MSG(
					    !memcmp(r->shadow[l], o->vers[T - 1][l], n),
					    "trial %d: layer %d's second version is not W(T-1)", tr,
					    l);
			}
			rt_reference_close(r);
		}
		/* the delay is seen: step 0 the same, a later step not */
		CHECK(want->loss[0] == plain->loss[0]);
		int d = 0;
		for (int t = 1; t < T; t++)
			d |= want->loss[t] != plain->loss[t];
		differ += d;
		free(want);
		free(plain);
	}
	CHECK_MSG(differ == trials,
	          "2bw and the plain rule gave the same losses in %d of %d trials", trials - differ,
	          trials);
	printf("%d random trials: the 2bw reference is the two-version loop bit for bit (losses, "
	       "newest and read versions, momentum); the plain reference is its no-delay case\n",
	       trials);
	TEST_PASS();
}

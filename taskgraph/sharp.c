/* taskgraph/sharp.c — SHARP's unit selection (lrtf, random, fifo) and an
 * event-driven simulator of many models on devices of any speed, with early
 * stopping, devices that join late and devices that fail.
 *
 * The choice is an indexed binary heap (lrtf: the longest remaining time,
 * fifo: the earliest to become eligible; ties: the lower model index), so a
 * decision costs O(log n) and the simulator runs millions of units a second. */
#include "taskgraph/taskgraph.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- an indexed min-heap over ids 0..n-1 (key, then id) ---------------------------- */

struct iheap {
	int n, *id, *pos; /* pos[id] = index in id[], -1 when absent */
	double *key;      /* key[id] */
};

static int ih_init(struct iheap *h, int cap)
{
	h->n = 0;
	h->id = malloc((size_t)cap * sizeof(int));
	h->pos = malloc((size_t)cap * sizeof(int));
	h->key = malloc((size_t)cap * sizeof(double));
	if (!h->id || !h->pos || !h->key)
		return -ENOMEM;
	for (int i = 0; i < cap; i++)
		h->pos[i] = -1;
	return 0;
}

static void ih_free(struct iheap *h)
{
	free(h->id);
	free(h->pos);
	free(h->key);
}

static int ih_less(const struct iheap *h, int a, int b)
{
	double ka = h->key[a], kb = h->key[b];
	return ka < kb || (ka == kb && a < b);
}

static void ih_swap(struct iheap *h, int i, int j)
{
	int a = h->id[i], b = h->id[j];
	h->id[i] = b;
	h->id[j] = a;
	h->pos[b] = i;
	h->pos[a] = j;
}

static void ih_up(struct iheap *h, int i)
{
	while (i > 0) {
		int p = (i - 1) / 2;
		if (!ih_less(h, h->id[i], h->id[p]))
			break;
		ih_swap(h, i, p);
		i = p;
	}
}

static void ih_down(struct iheap *h, int i)
{
	for (;;) {
		int l = 2 * i + 1, r = l + 1, m = i;
		if (l < h->n && ih_less(h, h->id[l], h->id[m]))
			m = l;
		if (r < h->n && ih_less(h, h->id[r], h->id[m]))
			m = r;
		if (m == i)
			return;
		ih_swap(h, i, m);
		i = m;
	}
}

/* Inserts id, or moves it to its new key. */
static void ih_set(struct iheap *h, int id, double key)
{
	int i = h->pos[id];
	h->key[id] = key;
	if (i < 0) {
		i = h->n++;
		h->id[i] = id;
		h->pos[id] = i;
	}
	ih_up(h, i);
	ih_down(h, h->pos[id]);
}

static void ih_remove(struct iheap *h, int id)
{
	int i = h->pos[id];
	if (i < 0)
		return;
	h->n--;
	if (i != h->n) {
		ih_swap(h, i, h->n);
		ih_up(h, i);
		ih_down(h, h->pos[h->id[i]]);
	}
	h->pos[id] = -1;
}

static int ih_pop(struct iheap *h)
{
	if (!h->n)
		return -1;
	int id = h->id[0];
	ih_remove(h, id);
	return id;
}

/* ---- the policy ----------------------------------------------------------------------- */

struct tg_sharp {
	enum tg_mm_policy policy;
	int nmodels;
	struct iheap h;         /* lrtf, fifo */
	int *set, nset, *where; /* random: the eligible models, where[m] in set or -1 */
	uint64_t rng, seq;
};

static const char *const policy_names[TG_MM_NPOLICY] = {"lrtf", "random", "fifo"};

const char *tg_mm_policy_name(enum tg_mm_policy p)
{
	return (unsigned)p < TG_MM_NPOLICY ? policy_names[p] : "?";
}

int tg_mm_policy_parse(const char *name, enum tg_mm_policy *out)
{
	for (int p = 0; p < TG_MM_NPOLICY; p++)
		if (name && !strcmp(name, policy_names[p])) {
			*out = (enum tg_mm_policy)p;
			return 0;
		}
	return sp_error(-EINVAL, "unknown unit-selection policy '%s' (lrtf, random, fifo)",
	                name ? name : "(null)");
}

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void tg_sharp_close(struct tg_sharp *s)
{
	if (!s)
		return;
	ih_free(&s->h);
	free(s->set);
	free(s->where);
	free(s);
}

int tg_sharp_open(int nmodels, enum tg_mm_policy policy, uint64_t seed, struct tg_sharp **out)
{
	*out = NULL;
	if (nmodels < 1 || (unsigned)policy >= TG_MM_NPOLICY)
		return sp_error(-EINVAL, "sharp: %d models, policy %d", nmodels, (int)policy);
	struct tg_sharp *s = calloc(1, sizeof(*s));
	if (!s)
		return sp_error(-ENOMEM, "sharp: scheduler for %d models", nmodels);
	s->policy = policy;
	s->nmodels = nmodels;
	s->rng = seed;
	s->set = malloc((size_t)nmodels * sizeof(int));
	s->where = malloc((size_t)nmodels * sizeof(int));
	if (ih_init(&s->h, nmodels) < 0 || !s->set || !s->where) {
		tg_sharp_close(s);
		return sp_error(-ENOMEM, "sharp: scheduler for %d models", nmodels);
	}
	for (int m = 0; m < nmodels; m++)
		s->where[m] = -1;
	*out = s;
	return 0;
}

void tg_sharp_ready(struct tg_sharp *s, int m, double remaining)
{
	if (m < 0 || m >= s->nmodels)
		return;
	switch (s->policy) {
	case TG_MM_LRTF:
		ih_set(&s->h, m, -remaining); /* a min-heap: the longest first */
		break;
	case TG_MM_FIFO:
		if (s->h.pos[m] < 0)
			ih_set(&s->h, m, (double)s->seq++);
		break;
	default:
		if (s->where[m] < 0) {
			s->where[m] = s->nset;
			s->set[s->nset++] = m;
		}
		break;
	}
}

void tg_sharp_remove(struct tg_sharp *s, int m)
{
	if (m < 0 || m >= s->nmodels)
		return;
	if (s->policy != TG_MM_RANDOM) {
		ih_remove(&s->h, m);
		return;
	}
	int i = s->where[m];
	if (i < 0)
		return;
	int last = s->set[--s->nset];
	s->set[i] = last;
	s->where[last] = i;
	s->where[m] = -1;
}

int tg_sharp_pick(struct tg_sharp *s)
{
	if (s->policy != TG_MM_RANDOM)
		return ih_pop(&s->h);
	if (!s->nset)
		return -1;
	int m = s->set[splitmix(&s->rng) % (uint64_t)s->nset];
	tg_sharp_remove(s, m);
	return m;
}

int tg_sharp_eligible(const struct tg_sharp *s)
{
	return s->policy == TG_MM_RANDOM ? s->nset : s->h.n;
}

/* ---- the simulator ---------------------------------------------------------------------- */

static int check_instance(const struct tg_mm *in)
{
	if (!in || !in->nunits || !in->dur)
		return sp_error(-EINVAL, "multi-model instance: NULL");
	if (in->nmodels < 1)
		return sp_error(-EINVAL, "multi-model instance: %d models", in->nmodels);
	if (in->ndev < 1)
		return sp_error(-EINVAL, "multi-model instance: %d devices", in->ndev);
	for (int m = 0; m < in->nmodels; m++) {
		if (in->nunits[m] < 0)
			return sp_error(-EINVAL, "model %d: %d units", m, in->nunits[m]);
		if (in->nunits[m] && !in->dur[m])
			return sp_error(-EINVAL, "model %d: no unit times", m);
		for (int j = 0; j < in->nunits[m]; j++)
			if (!(in->dur[m][j] >= 0) || !isfinite(in->dur[m][j]))
				return sp_error(-EINVAL, "model %d unit %d: time %g", m, j,
				                in->dur[m][j]);
	}
	for (int d = 0; d < in->ndev; d++) {
		if (in->speed && (!(in->speed[d] > 0) || !isfinite(in->speed[d])))
			return sp_error(-EINVAL, "device %d: speed %g", d, in->speed[d]);
		if (in->join && (!(in->join[d] >= 0) || !isfinite(in->join[d])))
			return sp_error(-EINVAL, "device %d: joins at %g", d, in->join[d]);
		if (in->fail && !(in->fail[d] >= 0))
			return sp_error(-EINVAL, "device %d: fails at %g", d, in->fail[d]);
	}
	return 0;
}

double tg_mm_lower_bound(const struct tg_mm *in)
{
	if (check_instance(in) < 0)
		return NAN;
	double total = 0, chain = 0, speed_sum = 0, speed_max = 0;
	for (int d = 0; d < in->ndev; d++) {
		double v = in->speed ? in->speed[d] : 1.0;
		speed_sum += v;
		if (v > speed_max)
			speed_max = v;
	}
	for (int m = 0; m < in->nmodels; m++) {
		double c = 0;
		for (int j = 0; j < in->nunits[m]; j++)
			c += in->dur[m][j];
		total += c;
		if (c > chain)
			chain = c;
	}
	return fmax(chain / speed_max, total / speed_sum);
}

enum { D_WAITING, D_IDLE, D_BUSY, D_GONE };

struct sim_dev {
	int state, model;
	double start, end;
};

/* Device d's event at time now: it joins, its unit completes, or it fails. */
static void sim_event(const struct tg_mm *in, struct tg_sharp *s, struct iheap *ev,
                      struct sim_dev *dev, int d, double now, double *rem, int *next, int *left,
                      struct tg_mm_result *out)
{
	double fail = in->fail ? in->fail[d] : INFINITY;
	struct sim_dev *v = &dev[d];
	if (v->state == D_WAITING) {
		v->state = D_IDLE;
		if (isfinite(fail))
			ih_set(ev, d, fail);
		return;
	}
	if (v->state == D_BUSY && v->end <= fail) { /* the unit completes */
		int m = v->model;
		out->busy_s += v->end - v->start;
		out->units++;
		rem[m] -= in->dur[m][next[m]];
		next[m]++;
		v->state = D_IDLE;
		v->model = -1;
		if (isfinite(fail))
			ih_set(ev, d, fail);
		int stop =
		    next[m] < in->nunits[m] && in->stop && in->stop(in->stop_arg, m, next[m], now);
		if (next[m] == in->nunits[m] || stop) {
			(*left)--;
			out->stopped += stop;
			if (now > out->makespan)
				out->makespan = now;
		} else {
			tg_sharp_ready(s, m, rem[m]);
		}
		return;
	}
	/* the device fails: its unit reruns elsewhere from its start */
	if (v->state == D_BUSY) {
		out->lost_s += now - v->start;
		out->reruns++;
		tg_sharp_ready(s, v->model, rem[v->model]);
	}
	v->state = D_GONE;
	v->model = -1;
}

int tg_mm_simulate(const struct tg_mm *in, enum tg_mm_policy policy, uint64_t seed,
                   struct tg_mm_result *out)
{
	memset(out, 0, sizeof(*out));
	SP_CHECK(check_instance(in));
	int M = in->nmodels, D = in->ndev, rc = 0;
	int *next = calloc((size_t)M, sizeof(int)), *idle = malloc((size_t)D * sizeof(int));
	double *rem = calloc((size_t)M, sizeof(double));
	struct sim_dev *dev = calloc((size_t)D, sizeof(*dev));
	struct tg_sharp *s = NULL;
	struct iheap ev = {0}; /* per device: its next event (join, unit end, failure) */
	if (!next || !idle || !rem || !dev || ih_init(&ev, D) < 0) {
		rc = sp_error(-ENOMEM, "sharp simulation: %d models, %d devices", M, D);
		goto out;
	}
	rc = tg_sharp_open(M, policy, seed, &s);
	if (rc < 0)
		goto out;
	int left = 0, nidle = 0;
	for (int m = 0; m < M; m++) {
		for (int j = 0; j < in->nunits[m]; j++)
			rem[m] += in->dur[m][j];
		if (in->nunits[m]) {
			left++;
			tg_sharp_ready(s, m, rem[m]);
		}
	}
	for (int d = 0; d < D; d++) {
		double fail = in->fail ? in->fail[d] : INFINITY;
		double join = in->join ? in->join[d] : 0;
		dev[d].model = -1;
		if (fail <= join) {
			dev[d].state = D_GONE;
		} else if (join > 0) {
			dev[d].state = D_WAITING;
			ih_set(&ev, d, join);
		} else {
			dev[d].state = D_IDLE;
			if (isfinite(fail))
				ih_set(&ev, d, fail);
		}
	}
	double now = 0;
	for (;;) {
		/* idle devices, fastest first (then lower index), take eligible units */
		nidle = 0;
		for (int d = 0; d < D; d++)
			if (dev[d].state == D_IDLE)
				idle[nidle++] = d;
		if (in->speed)
			for (int i = 1; i < nidle; i++) /* insertion sort: D is small */
				for (int k = i;
				     k > 0 && in->speed[idle[k]] > in->speed[idle[k - 1]]; k--) {
					int t = idle[k];
					idle[k] = idle[k - 1];
					idle[k - 1] = t;
				}
		for (int i = 0; i < nidle && tg_sharp_eligible(s); i++) {
			int d = idle[i], m = tg_sharp_pick(s);
			double v = in->speed ? in->speed[d] : 1.0;
			double fail = in->fail ? in->fail[d] : INFINITY;
			dev[d].state = D_BUSY;
			dev[d].model = m;
			dev[d].start = now;
			dev[d].end = now + in->dur[m][next[m]] / v;
			ih_set(&ev, d, fmin(dev[d].end, fail));
		}
		if (!left)
			break;
		int d = ih_pop(&ev);
		if (d < 0) {
			rc = sp_error(-EDEADLK,
			              "sharp simulation: %d models left at %.6g s and no device "
			              "(all failed or none joined)",
			              left, now);
			goto out;
		}
		now = ev.key[d];
		/* every event at this time before the next choice, so that it sees all
		 * the models that became eligible */
		for (; d >= 0; d = ev.n && ev.key[ev.id[0]] <= now ? ih_pop(&ev) : -1)
			sim_event(in, s, &ev, dev, d, now, rem, next, &left, out);
	}
out:
	tg_sharp_close(s);
	ih_free(&ev);
	free(next);
	free(idle);
	free(rem);
	free(dev);
	return rc;
}

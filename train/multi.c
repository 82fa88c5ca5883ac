/* train/multi.c — `spill tune`: model selection, many variants of a GPT trained
 * together under SHARP (runtime/sharp.c) on one context: a grid of learning
 * rates, batch sizes and shapes times several presets; a progress table, early
 * stopping by successive halving, and the final ranking by validation loss. */
#include "train/internal.h"

#include "common/log.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAXVAR TR_TUNE_MAX_MODELS

struct axis {
	char key[16];
	int n;
	double v[MAXVAR];
};

static const char *const axis_keys[] = {"lr", "batch", "seq", "layers", "channels", "heads"};

/* The grid's words, in buf (cut up in place) -> axes. */
static int parse_axes(char *buf, struct axis *ax, int *nax)
{
	char *save = NULL;
	for (char *item = strtok_r(buf, " \t", &save); item; item = strtok_r(NULL, " \t", &save)) {
		char *eq = strchr(item, '=');
		if (!eq || eq == item || !eq[1])
			return sp_error(-EINVAL,
			                "--grid: '%s' is not KEY=V1,V2,... (keys: lr, "
			                "batch, seq, layers, channels, heads)",
			                item);
		*eq = '\0';
		size_t k = 0;
		while (k < SP_ARRAY_SIZE(axis_keys) && strcmp(axis_keys[k], item))
			k++;
		if (k == SP_ARRAY_SIZE(axis_keys))
			return sp_error(-EINVAL,
			                "--grid: unknown key '%s' (lr, batch, seq, layers, "
			                "channels, heads)",
			                item);
		for (int a = 0; a < *nax; a++)
			if (!strcmp(ax[a].key, item))
				return sp_error(-EINVAL, "--grid: '%s' given twice", item);
		if (*nax == 6)
			return sp_error(-EINVAL, "--grid: too many keys");
		struct axis *x = &ax[(*nax)++];
		snprintf(x->key, sizeof(x->key), "%s", item);
		x->n = 0;
		char *s2 = NULL;
		for (char *v = strtok_r(eq + 1, ",", &s2); v; v = strtok_r(NULL, ",", &s2)) {
			char *end;
			double d = strtod(v, &end);
			int integer = k > 0;
			/* lr is a float: 1e39 would train at infinity, 1e-50 at the
			 * default (0) */
			if (*end || end == v || !((float)d > 0) || !(d <= FLT_MAX) ||
			    (integer && (d != floor(d) || d > 1 << 20)))
				return sp_error(-EINVAL, "--grid: %s=%s is not a positive %s", item,
				                v, integer ? "integer" : "number");
			if (x->n == MAXVAR)
				return sp_error(-EINVAL, "--grid: more than %d values of %s",
				                MAXVAR, item);
			x->v[x->n++] = d;
		}
		if (!x->n)
			return sp_error(-EINVAL, "--grid: %s has no values", item);
	}
	if (!*nax)
		return sp_error(-EINVAL, "--grid: empty (give KEY=V1,V2,..., e.g. lr=1e-3,3e-4)");
	return 0;
}

/* "lr=1e-3,3e-4 batch=8,16" -> axes. One clear line for what is wrong. */
static int parse_grid(const char *grid, struct axis *ax, int *nax)
{
	*nax = 0;
	if (!grid)
		return 0;
	char *buf = strdup(grid);
	if (!buf)
		return sp_error(-ENOMEM, "--grid: %zu characters", strlen(grid));
	int rc = parse_axes(buf, ax, nax);
	free(buf);
	return rc;
}

struct tune {
	const struct tr_tune_config *c;
	int n;
	struct run *v[MAXVAR];
	char label[MAXVAR][96];
	struct rt_run *runs[MAXVAR];
	int steps[MAXVAR], done[MAXVAR], stopped[MAXVAR];
	double loss[MAXVAR], val[MAXVAR];
	int *rung;         /* successive halving: per model, the last rung it reached */
	double *rung_loss; /* [model * nrungs + rung]: its loss there */
	int nrungs;
	int eval_failures;    /* devices lost during the validation pass */
	int has_eval[MAXVAR]; /* the model has validation batches */
	/* several nodes: model g trains on node g mod nodes; until the gather
	 * these arrays hold this node's models, gidx[k] the global index of k */
	int nodes, rank, gn, gidx[MAXVAR];
	char glabel[MAXVAR][96];
	int gsteps[MAXVAR];
	struct tr_data *data;
	struct rt_ctx *rt;
	FILE *out, *devnull; /* devnull: the output of nodes other than 0 */
	double t0, last_print;
};

static void table(struct tune *t, int final)
{
	fprintf(t->out, "  %-34s %6s %11s %9s  %s\n", "model", "shards", "steps", "loss", "");
	/* as spill train's progress: "-" where there is no loss (the model
	 * backend moves no data), "nan" where it diverged */
	int model = t->rt && dev_backend(t->rt->dev) == DEV_BACKEND_MODEL;
	for (int i = 0; i < t->n; i++) {
		char l[32], sh[16] = "-";
		if (t->runs[i])
			snprintf(sh, sizeof(sh), "%d", tg_plan_shards(&t->runs[i]->plan));
		if (isnan(t->loss[i]))
			snprintf(l, sizeof(l), "%s", model ? "-" : "nan");
		else
			snprintf(l, sizeof(l), "%.4f", t->loss[i]);
		fprintf(t->out, "  %-34s %6s %5d/%-5d %9s  %s\n", t->label[i], sh, t->done[i],
		        t->steps[i], l,
		        t->stopped[i]               ? "stopped (successive halving)"
		        : t->done[i] == t->steps[i] ? "done"
		        : final                     ? ""
		                                    : "training");
	}
}

/* After each step of model i but its last: progress, successive halving. */
static int on_step(void *arg, int i, int step, double loss)
{
	struct tune *t = arg;
	t->done[i] = step;
	t->loss[i] = loss;
	t->v[i]->m.opt.lr = tr_lr_at(t->v[i], step); /* the next step's (from 0: step) */
	double now = sp_now_s();
	if (now - t->last_print >= 2.0) {
		t->last_print = now;
		fprintf(t->out, "[%.0f s]\n", now - t->t0);
		table(t, 0);
		fflush(t->out);
	}
	int every = t->c->halving;
	if (every <= 0 || step % every || isnan(loss))
		return 0;
	/* asynchronous successive halving: stop a model whose loss at this rung is
	 * in the worse half of the models that reached it */
	int peers = 0, better = 0;
	for (int k = 0; k < t->n; k++)
		if (k != i && t->rung[k] >= step) {
			peers++;
			better +=
			    t->rung_loss[(size_t)k * (size_t)t->nrungs + (size_t)(step / every)] <
			    loss;
		}
	t->rung[i] = step;
	t->rung_loss[(size_t)i * (size_t)t->nrungs + (size_t)(step / every)] = loss;
	if (peers && 2 * better >= peers + 1) {
		t->stopped[i] = 1;
		return 1;
	}
	return 0;
}

static void tune_free(struct tune *t)
{
	for (int i = 0; i < t->n; i++) {
		rt_run_close(t->runs[i]);
		if (t->v[i]) {
			if (t->v[i]->m.layers)
				rt_model_free(&t->v[i]->m);
			free(t->v[i]);
		}
	}
	rt_close(t->rt);
	tr_data_close(t->data);
	if (t->devnull)
		fclose(t->devnull);
	free(t->rung);
	free(t->rung_loss);
}

/* Several nodes: keeps this node's models (g mod nodes == rank), in order,
 * and frees the others; the global labels and step counts stay. */
static void keep_mine(struct tune *t)
{
	t->gn = t->n;
	memcpy(t->glabel, t->label, sizeof(t->label));
	memcpy(t->gsteps, t->steps, sizeof(t->steps));
	int k = 0;
	for (int g = 0; g < t->gn; g++) {
		if (g % t->nodes != t->rank) {
			if (t->v[g]->m.layers)
				rt_model_free(&t->v[g]->m);
			free(t->v[g]);
			t->v[g] = NULL;
			continue;
		}
		t->v[k] = t->v[g];
		memcpy(t->label[k], t->label[g], sizeof(t->label[k]));
		t->steps[k] = t->steps[g];
		t->loss[k] = t->loss[g];
		t->val[k] = t->val[g];
		t->gidx[k++] = g;
	}
	for (int i = k; i < t->gn; i++)
		t->v[i] = NULL;
	t->n = k;
}

/* After training: every node's results into global order on every node
 * (each model's figures come from its node alone: a sum of it and zeros);
 * runs[g] and v[g] are this node's own models, NULL for the others. */
static int gather_nodes(struct tune *t)
{
	enum { DONE, LOSS, VAL, STOP, EVAL, NF };
	double *b = calloc((size_t)NF * MAXVAR, sizeof(double));
	if (!b)
		return sp_error(-ENOMEM, "tune: gathering the nodes' results");
	struct run *v[MAXVAR] = {0};
	struct rt_run *runs[MAXVAR] = {0};
	for (int k = 0; k < t->n; k++) {
		int g = t->gidx[k];
		b[DONE * MAXVAR + g] = t->done[k];
		b[LOSS * MAXVAR + g] = t->loss[k];
		b[VAL * MAXVAR + g] = t->val[k];
		b[STOP * MAXVAR + g] = t->stopped[k];
		b[EVAL * MAXVAR + g] = t->v[k]->m.eval_data != NULL;
		v[g] = t->v[k];
		runs[g] = t->runs[k];
	}
	int rc = tr_nodes_sum_doubles(t->c->base.nodes, b, NF * MAXVAR);
	for (int g = 0; g < t->gn && rc == 0; g++) {
		t->v[g] = v[g];
		t->runs[g] = runs[g];
		memcpy(t->label[g], t->glabel[g], sizeof(t->label[g]));
		t->steps[g] = t->gsteps[g];
		t->done[g] = (int)b[DONE * MAXVAR + g];
		t->loss[g] = b[LOSS * MAXVAR + g];
		t->val[g] = b[VAL * MAXVAR + g];
		t->stopped[g] = (int)b[STOP * MAXVAR + g];
		t->has_eval[g] = b[EVAL * MAXVAR + g] != 0;
	}
	if (rc == 0)
		t->n = t->gn;
	free(b);
	return rc;
}

/* The variants: every preset x the grid's cartesian product. */
static int variants(struct tune *t, const struct axis *ax, int nax)
{
	const struct tr_tune_config *c = t->c;
	int nmodels = c->nmodels > 0 ? c->nmodels : 1;
	double product = nmodels; /* (6 keys of 64 values overflow an int) */
	for (int a = 0; a < nax; a++)
		product *= ax[a].n;
	if (product > MAXVAR)
		return sp_error(-EINVAL, "--grid and --model give %.0f models; at most %d", product,
		                MAXVAR);
	int total = (int)product;
	for (int k = 0; k < total; k++) {
		struct run *v = calloc(1, sizeof(*v));
		if (!v)
			return sp_error(-ENOMEM, "tune: model %d", k);
		t->v[t->n++] = v;
		v->c = c->base;
		v->c.nodes = NULL; /* a model trains on one node (its own context) */
		v->c.model = c->nmodels > 0 ? c->models[k % nmodels] : c->base.model;
		v->data = t->data;
		int len = snprintf(t->label[k], sizeof(t->label[k]), "%s",
		                   v->c.model ? v->c.model : "tiny");
		for (int a = 0, rest = k / nmodels; a < nax; a++) {
			double x = ax[a].v[rest % ax[a].n];
			rest /= ax[a].n;
			if (!strcmp(ax[a].key, "lr"))
				v->c.lr = (float)x;
			else if (!strcmp(ax[a].key, "batch"))
				v->c.batch = (int)x;
			else if (!strcmp(ax[a].key, "seq"))
				v->c.seq = (int)x;
			else if (!strcmp(ax[a].key, "layers"))
				v->c.layers = (int)x;
			else if (!strcmp(ax[a].key, "channels"))
				v->c.channels = (int)x;
			else
				v->c.heads = (int)x;
			if (len < (int)sizeof(t->label[k]))
				len +=
				    snprintf(t->label[k] + len, sizeof(t->label[k]) - (size_t)len,
				             " %s=%g", ax[a].key, x);
		}
		int rc = tr_shape(v);
		if (rc < 0)
			return sp_error(rc, "model %s: %s", t->label[k], sp_last_error());
		rc = rt_model_gpt(&v->kc, v->T, v->batch, &v->m);
		if (rc < 0)
			return sp_error(rc, "model %s: %s", t->label[k], sp_last_error());
		snprintf(v->m.name, sizeof(v->m.name), "%.31s", t->label[k]);
		/* the trainer's recipe: the lr of each step (on_step sets the next
		 * one), clipping, weight decay */
		v->m.opt.lr = tr_lr_at(v, 0);
		v->m.opt.grad_clip = v->c.grad_clip;
		v->m.opt.weight_decay = v->c.weight_decay;
		rc = tr_set_optimizer(&v->c, &v->m);
		if (rc < 0)
			return sp_error(rc, "model %s: %s", t->label[k], sp_last_error());
		if (t->data) {
			v->m.data = tr_data_train;
			v->m.eval_data =
			    tr_data_tokens(t->data, TR_VAL) > (uint64_t)v->T ? tr_data_val : NULL;
			v->m.data_arg = v;
		} else {
			v->synth_seed = c->base.seed;
			v->m.data_arg = &v->synth_seed;
		}
		v->state = tr_training_state(&v->m);
		t->steps[k] = v->steps;
		t->loss[k] = NAN;
		t->val[k] = NAN;
	}
	return 0;
}

/* The context and each model's shards. The host backend's default budget per
 * device is half the largest model's state: no model fits one device whole. */
static int open_all(struct tune *t, double reserve)
{
	uint64_t largest = 0, sum = 0;
	for (int i = 0; i < t->n; i++) {
		largest = t->v[i]->state > largest ? t->v[i]->state : largest;
		sum += t->v[i]->state;
	}
	struct run probe = *t->v[0];
	probe.state = sum; /* the model backend's host pool holds every model */
	probe.per_device = 1;
	for (uint64_t b = largest / 2;; b += b / 2) {
		probe.quarter = 0;
		SP_CHECK(tr_open_context(&probe, b));
		t->rt = probe.rt;
		int rc = 0;
		for (int i = 0; i < t->n && !rc; i++) {
			struct tg_plan p;
			rc = rt_sharp_plan(t->rt, &t->v[i]->m, reserve, &p);
			if (rc < 0)
				rc = sp_error(rc, "%s", sp_last_error());
			else
				rc = rt_run_open(t->rt, &t->v[i]->m, &p, t->c->base.seed,
				                 &t->runs[i]);
		}
		if (rc == 0)
			return 0;
		for (int i = 0; i < t->n; i++) {
			rt_run_close(t->runs[i]);
			t->runs[i] = NULL;
		}
		rt_close(t->rt);
		t->rt = NULL;
		if (rc != -ENOMEM || !probe.quarter || b >= largest * 2)
			return rc;
	}
}

/* The validation loss of each model that has validation data, on the first
 * device alive. */
static int eval_all(struct tune *t)
{
	int nb = t->c->base.eval_batches > 0 ? t->c->base.eval_batches : 4;
	for (int i = 0; i < t->n; i++) {
		if (!t->v[i]->m.eval_data)
			continue;
		double sum = 0, l;
		for (int b = 0; b < nb; b++) {
			SP_CHECK(rt_run_eval(t->runs[i], b, &l));
			sum += l;
		}
		t->val[i] = sum / nb;
	}
	return 0;
}

/* After training: each model's validation loss. A device that fails during
 * the pass ends it with one line naming the device; with --recover the pass
 * runs again on the devices left, from each model's state as training left
 * it (saved first: what was only on the failed device is lost). */
static int validate(struct tune *t)
{
	void **saved[MAXVAR] = {0};
	unsigned known = 0; /* failed devices the vmm has forgotten already */
	int rc = 0;
	for (int d = 0; d < t->rt->ndev; d++)
		known |= (unsigned)dev_failed(t->rt->dev, d) << d;
	for (int i = 0; i < t->n && rc == 0 && t->c->recover; i++)
		if (t->v[i]->m.eval_data)
			rc = rt_run_save(t->runs[i], &saved[i]);
	while (rc == 0) {
		rc = eval_all(t);
		int d = 0, left = 0;
		while (d < t->rt->ndev && !(dev_failed(t->rt->dev, d) && !(known >> d & 1)))
			d++;
		if (rc == 0 || d == t->rt->ndev)
			break; /* done, or an error no device failure explains */
		char msg[SP_ERROR_MSG_MAX];
		snprintf(msg, sizeof(msg), "%s", sp_last_error());
		known |= 1u << d;
		for (int e = 0; e < t->rt->ndev; e++)
			left += !(known >> e & 1);
		if (!t->c->recover || !left) {
			rc = sp_error(rc, "device %d failed during the validation pass%s (%s)", d,
			              left ? "" : ", the last one", msg);
			break;
		}
		SP_WARN(RT,
		        "device %d failed during the validation pass; it runs again on %d "
		        "device%s",
		        d, left, left == 1 ? "" : "s");
		t->eval_failures++;
		rc = vmm_device_failed(t->rt->vmm, d, NULL);
		for (int k = 0; k < 64 && rc == 0 && vmm_sync(t->rt->vmm) < 0; k++)
			SP_INFO(RT, "validation recovery: %s", sp_last_error());
		for (int i = 0; i < t->n && rc == 0; i++)
			if (saved[i])
				rc = rt_run_restore(t->runs[i], saved[i]);
	}
	for (int i = 0; i < t->n; i++)
		rt_run_save_free(t->runs[i], saved[i]);
	return rc;
}

/* Several nodes: every node's rc; the first that failed says why. */
static int agree(struct tune *t, int rc)
{
	if (!t->c->base.nodes)
		return rc;
	int first = -1;
	char msg[SP_ERROR_MSG_MAX];
	snprintf(msg, sizeof(msg), "%s", sp_last_error());
	int e = tr_nodes_failed(t->c->base.nodes, rc < 0, &first);
	if (e < 0)
		return e;
	if (rc < 0)
		return sp_error(rc, "%s", msg);
	if (first >= 0)
		return sp_error(-ECANCELED, "node %d failed to start (its message above)", first);
	return 0;
}

/* Several nodes: the same models, steps and data everywhere (node 0's labels
 * are printed with every node's results). */
static int same_models(struct tune *t)
{
	const struct tr_tune_config *c = t->c;
	uint64_t h = 0xcbf29ce484222325ull;
	char buf[512];
	for (int i = 0; i < t->n; i++) {
		snprintf(buf, sizeof(buf), "%s|%d|%d|%d|%.9g|%.9g|%llu|", t->label[i], t->steps[i],
		         t->v[i]->T, t->v[i]->batch, (double)t->v[i]->lr,
		         (double)t->v[i]->c.grad_clip, (unsigned long long)c->base.seed);
		for (const char *p = buf; *p; p++)
			h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
	}
	snprintf(buf, sizeof(buf), "%s|%s|%d|%d|%.6g|%d", t->data ? tr_data_describe(t->data) : "-",
	         c->policy ? c->policy : "lrtf", c->no_double_buffer, c->recover, c->reserve,
	         c->base.eval_batches);
	for (const char *p = buf; *p; p++)
		h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
	int bad = -1;
	SP_CHECK(tr_nodes_gather_hash(c->base.nodes, h, &bad));
	if (bad < 0)
		return 0;
	return sp_error(-EINVAL,
	                "node %d was launched with other flags or data than node 0 (every node "
	                "must run the same command on the same files)",
	                bad);
}

int tr_tune_models(const struct tr_tune_config *c)
{
	SP_CHECK_ARG(c, "tr_tune_models: NULL config");
	struct tune t = {.c = c, .out = c->base.out ? c->base.out : stdout};
	struct axis ax[6];
	int nax = 0, rc;
	enum tg_mm_policy pol = TG_MM_LRTF;
	if (c->policy)
		SP_CHECK(tg_mm_policy_parse(c->policy, &pol));
	SP_CHECK(parse_grid(c->grid, ax, &nax));
	double reserve = c->reserve < 0 ? 0.15 : c->reserve;
	SP_CHECK_ARG(reserve < 1, "--reserve %g: the double-buffer reserve is a fraction in [0, 1)",
	             reserve);
	SP_CHECK_ARG(c->halving >= 0, "--halving %d: steps per rung must not be negative",
	             c->halving);
	t.nodes = tr_nodes_size(c->base.nodes);
	t.rank = tr_nodes_rank(c->base.nodes);
	if (t.rank > 0 && !(t.out = t.devnull = fopen("/dev/null", "w")))
		return sp_error(-errno, "tune: cannot open /dev/null");
	rc = 0;
	if (t.nodes > 1 && c->halving)
		rc = sp_error(-EINVAL,
		              "--halving %d: successive halving compares the models as they "
		              "reach each rung, which is not done across nodes (run it in one "
		              "process)",
		              c->halving);
	if (rc == 0 && !c->base.synthetic)
		rc = tr_data_open(c->base.data, &t.data);
	if (rc == 0)
		rc = variants(&t, ax, nax);
	rc = agree(&t, rc);
	if (rc == 0 && t.nodes > 1)
		rc = same_models(&t);
	if (rc == 0 && t.nodes > 1 && t.n < t.nodes)
		rc = sp_error(-EINVAL,
		              "%d models on %d nodes: a node would train none (give at least %d "
		              "models, or fewer processes)",
		              t.n, t.nodes, t.nodes);
	rc = agree(&t, rc); /* node 0 says it for every node */
	if (rc == 0 && t.nodes > 1)
		keep_mine(&t);
	for (int i = 0; i < t.n; i++) /* rungs: every halving-th step */
		if (c->halving > 0 && t.steps[i] / c->halving + 1 > t.nrungs)
			t.nrungs = t.steps[i] / c->halving + 1;
	t.rung = calloc((size_t)MAXVAR, sizeof(int));
	t.rung_loss = calloc((size_t)MAXVAR * (size_t)(t.nrungs + 1), sizeof(double));
	if (rc == 0 && (!t.rung || !t.rung_loss))
		rc = sp_error(-ENOMEM, "tune: successive halving state");
	if (rc == 0)
		rc = open_all(&t, reserve);
	rc = agree(&t, rc);
	if (rc < 0) {
		tune_free(&t);
		return rc;
	}
	uint64_t used, cap, largest = 0;
	if (vmm_place_usage(t.rt->vmm, 0, &used, &cap) < 0)
		cap = 0;
	for (int i = 0; i < t.n; i++)
		largest = t.v[i]->state > largest ? t.v[i]->state : largest;
	char b1[32], b2[32];
	if (t.nodes > 1)
		fprintf(t.out, "spill tune: %d models over %d nodes (model i on node i mod %d)\n",
		        t.gn, t.nodes, t.nodes);
	fprintf(t.out,
	        "%s: %d model%s on %d %s device(s), %s budget each (the largest model's "
	        "state: %s), sharp %s%s\n",
	        t.nodes > 1 ? "node 0" : "spill tune", t.n, t.n == 1 ? "" : "s", t.rt->ndev,
	        dev_backend_name(t.rt->cfg.dev.backend), sp_format_size(cap, b1, sizeof(b1)),
	        sp_format_size(largest, b2, sizeof(b2)), tg_mm_policy_name(pol),
	        c->no_double_buffer ? "" : " + double buffering");
	t.t0 = t.last_print = sp_now_s();
	struct rt_sharp_config sc = {.policy = pol,
	                             .double_buffer = !c->no_double_buffer,
	                             .seed = c->base.seed,
	                             .on_step = on_step,
	                             .arg = &t,
	                             .recover = c->recover};
	struct rt_sharp_stats st;
	rc = rt_sharp_run(t.rt, t.runs, t.steps, t.n, &sc, &st);
	for (int i = 0; i < t.n && rc == 0; i++) {
		t.done[i] = t.runs[i]->step;
		t.loss[i] = t.runs[i]->last_loss;
	}
	if (rc == 0 && t.rt->data)
		rc = validate(&t);
	for (int i = 0; i < t.n; i++)
		t.has_eval[i] = t.v[i]->m.eval_data != NULL;
	/* every node's results, each node's state once all are done (a node
	 * that failed ends the job: MPI_Abort from the caller) */
	if (rc == 0 && t.nodes > 1)
		rc = gather_nodes(&t);
	if (rc < 0) {
		char msg[SP_ERROR_MSG_MAX];
		snprintf(msg, sizeof(msg), "%s", sp_last_error());
		tune_free(&t);
		return sp_error(rc, "%s", msg);
	}
	table(&t, 1);
	double busy = 0;
	for (int d = 0; d < t.rt->ndev; d++)
		busy += st.busy_s[d];
	fprintf(t.out,
	        "%s%s %.2f s%s: %llu shard units (%llu on the device of the unit before), devices "
	        "busy %.0f%%, %d stopped early\n",
	        t.nodes > 1 ? "node 0: " : "", t.rt->data ? "trained in" : "makespan",
	        st.makespan_s, t.rt->data ? "" : " (virtual)", (unsigned long long)st.units,
	        (unsigned long long)st.same_device,
	        st.makespan_s > 0 ? 100 * busy / (st.makespan_s * t.rt->ndev) : 0, st.stopped);
	if (st.failures)
		fprintf(t.out,
		        "recovered from %d failed device(s): %llu unit(s) in flight lost, every "
		        "model went back to its last step (%llu checkpoints)\n",
		        st.failures, (unsigned long long)st.units_lost,
		        (unsigned long long)st.checkpoints);
	if (t.eval_failures)
		fprintf(t.out,
		        "%d device(s) failed during the validation pass: it ran again on the "
		        "devices left, from the state training left\n",
		        t.eval_failures);
	/* the ranking: validation loss, else the last training loss */
	int order[MAXVAR], have_val = 0;
	for (int i = 0; i < t.n; i++) {
		order[i] = i;
		have_val |= !isnan(t.val[i]);
	}
	const double *key = have_val ? t.val : t.loss;
	for (int i = 1; i < t.n; i++) /* insertion sort, NaN last */
		for (int k = i; k > 0; k--) {
			double a = key[order[k]], b = key[order[k - 1]];
			if (!(isnan(b) && !isnan(a)) && !(a < b))
				break;
			int x = order[k];
			order[k] = order[k - 1];
			order[k - 1] = x;
		}
	if (!t.rt->data) {
		fprintf(t.out, "no data on the model backend: no ranking\n");
	} else {
		fprintf(t.out, "ranking by %s loss:\n", have_val ? "validation" : "training");
		for (int i = 0; i < t.n; i++) {
			int k = order[i];
			if (have_val && !t.has_eval[k]) /* ranked last */
				fprintf(t.out,
				        "  %2d. %-34s -       (no validation batch of its sequence "
				        "length)\n",
				        i + 1, t.label[k]);
			else
				fprintf(t.out, "  %2d. %-34s %.4f%s\n", i + 1, t.label[k], key[k],
				        t.stopped[k] ? "  (stopped early)" : "");
		}
	}
	if (c->save_best && t.rt->data && !(have_val && !t.has_eval[order[0]])) {
		struct run *v = t.v[order[0]];
		fprintf(t.out, "best model: %s%s\n", t.label[order[0]],
		        t.nodes > 1 ? " (its node writes it)" : "");
		int e = 0;
		if (v) { /* trained here */
			v->c.checkpoint_dir = c->save_best;
			v->run = t.runs[order[0]];
			v->out = t.out;
			e = tr_checkpoint(v, t.done[order[0]]);
			v->run = NULL; /* tune_free closes t.runs */
		}
		if (e < 0) {
			tune_free(&t);
			return e;
		}
	} else if (c->save_best) {
		fprintf(t.out, "--save-best %s: no model ranked (no data), nothing saved\n",
		        c->save_best);
	}
	tune_free(&t);
	return 0;
}

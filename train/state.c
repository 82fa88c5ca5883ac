/* train/state.c — checkpoints and resume.
 *
 * DIR/step_NNNNNNNN.safetensors holds every parameter tensor under llm.c's
 * names (wte, wpe, h.<i>.ln1w ... h.<i>.fcprojb, lnfw, lnfb) and shapes, the
 * optimizer's state (AdamW moments as adam_m.<name> and adam_v.<name>, SGD's
 * momentum as sgd_momentum.<name>, nothing for plain SGD), and in __metadata__ the
 * format, the step, the model and run config (JSON), the precision and the data
 * position. In bf16 the parameters stored are the fp32 master weights (the
 * bf16 weights are their rounding), so a resumed bf16 run continues bit for
 * bit too; a checkpoint resumes only in the precision that wrote it. Under
 * 2bw it also holds the older weight version the next step reads
 * (2bw_prev.<name>, fp32: bf16 weights widened exactly); another schedule's
 * checkpoint resumed by 2bw starts the delay again, saying so.
 * Batches are drawn from (seed, step, sample) alone, so the step and the seed
 * are the whole data and RNG state: a resumed run continues bit for bit.
 * The config records the optimizer's hyper-parameters too (lr, beta1, beta2,
 * eps, weight decay, momentum); on resume all must match but the learning
 * rate, whose change is a warning line.
 * Checkpoints cannot lie: none holding a non-finite value is written (the run
 * diverged), one whose checksums (ckpt.c) or values are wrong is never
 * resumed from (--resume falls back to the one before it, saying so), and a
 * directory keeps one run's checkpoints only (tr_claim_dir).
 */
#include "train/internal.h"

#include "common/json.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FORMAT TR_CKPT_FORMAT

struct pt { /* one parameter tensor of a layer */
	char name[48];
	int ndim;
	int64_t shape[2];
	uint64_t off, n; /* elements into the layer's parameters */
};

/* The parameter tensors of layer l (llm.c's layout, kernels.h). */
static int layer_tensors(const struct run *r, int l, struct pt *t)
{
	int C = r->kc.C, k = 0;
	uint64_t off = 0;
	if (l == 0) {
		t[k++] = (struct pt){"wte", 2, {r->kc.V, C}, off, (uint64_t)r->kc.V * C};
		off += t[0].n;
		t[k++] = (struct pt){"wpe", 2, {r->kc.maxT, C}, off, (uint64_t)r->kc.maxT * C};
	} else if (l <= r->kc.L) {
		size_t sz[KN_BLOCK_NPARAMS];
		kn_block_param_sizes(C, sz);
		for (int i = 0; i < KN_BLOCK_NPARAMS; i++) {
			struct pt *p = &t[k++];
			snprintf(p->name, sizeof(p->name), "h.%d.%s", l - 1,
			         tr_block_tensors[i].name);
			p->off = off;
			p->n = sz[i];
			off += sz[i];
			p->ndim = tr_block_tensors[i].cols ? 2 : 1;
			p->shape[0] = (int64_t)tr_block_tensors[i].rows * C;
			p->shape[1] = (int64_t)tr_block_tensors[i].cols * C;
			if ((uint64_t)(p->shape[0] * (p->ndim == 2 ? p->shape[1] : 1)) != p->n)
				return sp_error(
				    -EINVAL, "checkpoint: %s has %zu elements, not %lld x %lld",
				    p->name, sz[i], (long long)p->shape[0], (long long)p->shape[1]);
		}
	} else {
		t[k++] = (struct pt){"lnfw", 1, {C, 0}, 0, (uint64_t)C};
		t[k++] = (struct pt){"lnfb", 1, {C, 0}, (uint64_t)C, (uint64_t)C};
	}
	return k;
}

/* The config a checkpoint must match to be resumed bit for bit (the learning
 * rate may change, with a warning), the optimizer's hyper-parameters with it. */
static void config_json(const struct run *r, char *buf, size_t n)
{
	const struct rt_optim *o = &r->m.opt;
	snprintf(buf, n,
	         "{\"layers\": %d, \"channels\": %d, \"heads\": %d, \"vocab\": %d, \"seq\": %d, "
	         "\"batch\": %d, \"seed\": %" PRIu64 ", \"lr\": %.9g, \"optimizer\": \"%s\", "
	         "\"momentum\": %.9g, \"beta1\": %.9g, \"beta2\": %.9g, \"eps\": %.9g, "
	         "\"weight_decay\": %.9g, \"precision\": \"%s\", \"lr_schedule\": \"%s\", "
	         "\"warmup\": %d, \"lr_min\": %.9g, \"steps\": %d, \"grad_clip\": %.9g}",
	         r->kc.L, r->kc.C, r->kc.NH, r->kc.V, r->T, r->batch, r->c.seed, (double)r->lr,
	         rt_optimizer_name(o->kind), (double)o->momentum, (double)o->beta1,
	         (double)o->beta2, (double)o->eps, (double)o->weight_decay,
	         rt_precision_name(r->kc.dtype), tr_lr_schedule_name(r->sched), r->warmup,
	         (double)r->c.lr_min, r->steps, (double)o->grad_clip);
}

/* What a checkpoint older than a key was trained with: AdamW in fp32, with
 * the hyper-parameters rt_model_gpt has always set (runtime/gpt.c), a
 * constant lr and no clipping (before 2026-11-27); "steps" has no old value:
 * not compared then. */
static void old_config_json(char *buf, size_t n)
{
	snprintf(buf, n,
	         "{\"optimizer\": \"adamw\", \"momentum\": 0, \"beta1\": %.9g, \"beta2\": %.9g, "
	         "\"eps\": %.9g, \"weight_decay\": 0, \"precision\": \"fp32\", "
	         "\"lr_schedule\": \"constant\", \"warmup\": 0, \"lr_min\": 1, \"grad_clip\": 0}",
	         (double)0.9f, (double)0.95f, (double)1e-8f);
}

/* "nan", "inf" or NULL: the first non-finite value of p[0..n). */
static const char *nonfinite(const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++) {
		uint32_t u;
		memcpy(&u, b + 4 * i, 4);
		if ((u & 0x7f800000u) == 0x7f800000u)
			return u & 0x007fffffu ? "nan" : "inf";
	}
	return NULL;
}

static int cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	return (x > y) - (x < y);
}

/* The steps of dir's checkpoints, ascending (*out malloc'd): the files named
 * exactly as path_of names them. what prefixes the error. */
static int list_steps(const char *what, const char *dir, int **out, int *count)
{
	DIR *d = opendir(dir);
	if (!d)
		return sp_error(-errno, "%s: cannot read %s: %s", what, dir, strerror(errno));
	int *steps = NULL, n = 0, cap = 0, rc = 0;
	for (struct dirent *e; (e = readdir(d));) {
		int k;
		char name[64];
		if (sscanf(e->d_name, "step_%d", &k) != 1 || k < 0)
			continue;
		snprintf(name, sizeof(name), "step_%08d.safetensors", k);
		if (strcmp(name, e->d_name) != 0)
			continue;
		if (n == cap) {
			int *p = realloc(steps, sizeof(*p) * (size_t)(cap = cap ? 2 * cap : 16));
			if (!p) {
				rc = sp_error(-ENOMEM, "%s: out of memory", what);
				break;
			}
			steps = p;
		}
		steps[n++] = k;
	}
	closedir(d);
	if (rc) {
		free(steps);
		return rc;
	}
	if (n)
		qsort(steps, (size_t)n, sizeof(*steps), cmp_int);
	*out = steps;
	*count = n;
	return 0;
}

/* The optimizer's state tensors per parameter tensor: their name prefixes, in
 * the order of the layer's optim range (AdamW m then v; SGD its momentum
 * buffer; plain SGD none). */
/* 2bw: the checkpoint also holds the older weight version, the one the next
 * step's passes read (PREV_PREFIX.<name>, fp32: bf16 weights widened). */
#define PREV_PREFIX "2bw_prev"
static int has_prev(const struct run *r)
{
	return r->plan.sched == TG_2BW;
}

static int state_names(const struct run *r, const char *const **prefix)
{
	static const char *const adam[] = {"adam_m", "adam_v"}, *const sgd[] = {"sgd_momentum"};
	if (r->m.opt.kind == KN_SGD) {
		*prefix = sgd;
		return r->m.opt.momentum != 0;
	}
	*prefix = adam;
	return 2;
}

static void path_of(const struct run *r, int step, char *buf, size_t n)
{
	snprintf(buf, n, "%s/step_%08d.safetensors", r->c.checkpoint_dir, step);
}

/* --keep N: removes the checkpoints older than the newest N at or before step
 * (the one of step is written and synced). A failure is a warning line. */
static void prune(struct run *r, int step)
{
	int *steps = NULL, n = 0, kept = 0;
	if (list_steps("--keep", r->c.checkpoint_dir, &steps, &n) < 0) {
		fprintf(r->out, "checkpoint: %s\n", sp_last_error());
		sp_error_clear();
		return;
	}
	for (int i = n - 1; i >= 0; i--) {
		char path[4096];
		if (steps[i] > step || ++kept <= r->c.keep)
			continue;
		path_of(r, steps[i], path, sizeof(path));
		if (unlink(path) < 0 && errno != ENOENT)
			fprintf(r->out, "checkpoint: --keep %d: cannot remove %s: %s\n", r->c.keep,
			        path, strerror(errno));
	}
	free(steps);
}

/* A fresh run's --overwrite: what earlier runs left besides their checkpoints
 * (step_N.safetensors.tmp.* of a crashed writer, .unusable files set aside by
 * --resume) goes too. Returns how many, or -errno. */
static int remove_leftovers(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return sp_error(-errno, "--overwrite: cannot read %s: %s", dir, strerror(errno));
	int n = 0, rc = 0;
	for (struct dirent *e; (e = readdir(d)) && !rc;) {
		int k;
		char name[64], path[4096];
		if (sscanf(e->d_name, "step_%d", &k) != 1 || k < 0)
			continue;
		size_t len = (size_t)snprintf(name, sizeof(name), "step_%08d.safetensors.", k);
		const char *tail = e->d_name + len;
		if (strncmp(name, e->d_name, len) != 0 ||
		    (strncmp(tail, "tmp.", 4) != 0 && strcmp(tail, "unusable") != 0))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (unlink(path) == 0)
			n++;
		else if (errno != ENOENT)
			rc = sp_error(-errno, "--overwrite: cannot remove %s: %s", path,
			              strerror(errno));
	}
	closedir(d);
	return rc ? rc : n;
}

int tr_claim_dir(struct run *r, int remove)
{
	const char *dir = r->c.checkpoint_dir;
	struct stat st;
	if (!tr_writer(r))
		return 0;
	if (stat(dir, &st) < 0)
		return 0; /* made at the first checkpoint */
	int *steps = NULL, n = 0, rc = 0, after = r->c.resume ? r->start : -1, first = 0;
	SP_CHECK(list_steps("--checkpoint", dir, &steps, &n));
	while (first < n && steps[first] <= after)
		first++;
	char path[4096];
	if (first < n && !r->c.overwrite) {
		path_of(r, steps[n - 1], path, sizeof(path));
		if (r->c.resume)
			rc = sp_error(-EEXIST,
			              "--resume %s: %s holds %s, of a step after %d: a later "
			              "--resume would continue from it (--overwrite removes the "
			              "checkpoints after step %d)",
			              r->c.resume_file, dir, path, after, after);
		else
			rc = sp_error(-EEXIST,
			              "--checkpoint %s holds %s of another run: --resume continues "
			              "it, --overwrite starts over (removing its %d checkpoint%s)",
			              dir, path, n, n > 1 ? "s" : "");
	} else if (first < n && remove) {
		for (int i = first; i < n && !rc; i++) {
			path_of(r, steps[i], path, sizeof(path));
			if (unlink(path) < 0 && errno != ENOENT)
				rc = sp_error(-errno, "--overwrite: cannot remove %s: %s", path,
				              strerror(errno));
		}
		if (!rc)
			fprintf(r->out, "--overwrite: removed %d checkpoint%s %s from %s\n",
			        n - first, n - first > 1 ? "s" : "",
			        after < 0 ? "of another run" : "after the resumed step", dir);
	}
	if (!rc && remove && r->c.overwrite && after < 0) {
		int left = remove_leftovers(dir);
		if (left > 0)
			fprintf(r->out,
			        "--overwrite: removed %d unfinished or unusable file%s from %s\n",
			        left, left > 1 ? "s" : "", dir);
		rc = left < 0 ? left : 0;
	}
	free(steps);
	return rc;
}

/* ZeRO-1: the state of layer l this node holds for node 0's checkpoint (a
 * message per layer and kind, tagged with them). */
static int state_tag(int l, enum rt_state which)
{
	return (2 * l + (which == RT_OPTIM)) % 32000;
}

static int send_owned_state(struct run *r)
{
	int rank = tr_nodes_rank(r->c.nodes), rc = 0;
	for (int l = 0; l < r->m.nlayers && !rc; l++)
		for (int k = 0; k < 2 && !rc; k++) {
			enum rt_state which = k ? RT_OPTIM : RT_PARAMS;
			if (rt_run_state_owner(r->run, l, which) != rank)
				continue;
			uint64_t bytes = rt_run_state_bytes(r->run, l, which);
			void *b = malloc(bytes + 4);
			rc = b ? rt_run_read_state(r->run, l, which, b)
			       : sp_error(-ENOMEM, "checkpoint: out of memory");
			if (!rc)
				rc = tr_nodes_send(r->c.nodes, 0, state_tag(l, which), b, bytes);
			free(b);
		}
	return rc;
}

/* Layer l's state, here or (ZeRO-1) from the node that holds it. */
static int read_state_any(struct run *r, int l, enum rt_state which, void *out)
{
	int owner = rt_run_state_owner(r->run, l, which);
	if (owner < 0 || owner == tr_nodes_rank(r->c.nodes))
		return rt_run_read_state(r->run, l, which, out);
	return tr_nodes_recv(r->c.nodes, owner, state_tag(l, which), out,
	                     rt_run_state_bytes(r->run, l, which));
}

int tr_checkpoint(struct run *r, int step)
{
	if (!tr_writer(r)) { /* node 0 writes the run's one checkpoint */
		path_of(r, step, r->last_ckpt, sizeof(r->last_ckpt));
		return r->plan.zero ? send_owned_state(r) : 0;
	}
	if (mkdir(r->c.checkpoint_dir, 0755) < 0 && errno != EEXIST)
		return sp_error(-errno, "checkpoint: cannot create %s: %s", r->c.checkpoint_dir,
		                strerror(errno));
	int L = r->m.nlayers, rc = 0, n = 0;
	struct tr_tensor *t = calloc((size_t)L * 4 * KN_BLOCK_NPARAMS, sizeof(*t));
	struct pt *pts = calloc((size_t)L * KN_BLOCK_NPARAMS, sizeof(*pts));
	float **buf = calloc((size_t)L * 3, sizeof(float *));
	char(*names)[64] = calloc((size_t)L * 3 * KN_BLOCK_NPARAMS, sizeof(*names));
	if (!t || !pts || !buf || !names) {
		rc = sp_error(-ENOMEM, "checkpoint: out of memory");
		goto out;
	}
	/* parameters first, then the optimizer's state, then (2bw) the older
	 * weight version, each in layer order */
	const char *const *sprefix, *prefix[3];
	int nstate = state_names(r, &sprefix), prev = has_prev(r);
	for (int i = 0; i < nstate; i++)
		prefix[i] = sprefix[i];
	if (prev)
		prefix[nstate] = PREV_PREFIX;
	for (int w = 0; w < 1 + nstate + prev && !rc; w++)
		for (int l = 0, np = 0; l < L && !rc; l++) {
			struct pt *lp = pts + (size_t)l * KN_BLOCK_NPARAMS;
			int k = layer_tensors(r, l, lp);
			if (k < 0) {
				rc = k;
				break;
			}
			if (w == 0) {
				for (int s = 0; s < 2 + prev && !rc; s++) {
					enum rt_state which = s == 2   ? RT_PARAMS_PREV
					                      : s == 1 ? RT_OPTIM
					                               : RT_PARAMS;
					buf[3 * l + s] =
					    malloc(rt_run_state_bytes(r->run, l, which) + 4);
					rc = buf[3 * l + s]
					         ? read_state_any(r, l, which, buf[3 * l + s])
					         : sp_error(-ENOMEM, "checkpoint: out of memory");
				}
			}
			uint64_t nparams = rt_layer_nparams(&r->m.layers[l]);
			for (int i = 0; i < k && !rc; i++, np++) {
				struct tr_tensor *x = &t[n++];
				const float *base =
				    w == 0 ? buf[3 * l]
				    : w == 1 + nstate
				        ? buf[3 * l + 2]
				        : buf[3 * l + 1] + (uint64_t)(w - 1) * nparams;
				if (w == 0) {
					x->name = lp[i].name;
				} else {
					char *nm = names[(size_t)(w - 1) * L * KN_BLOCK_NPARAMS +
					                 (size_t)np];
					snprintf(nm, 64, "%s.%s", prefix[w - 1], lp[i].name);
					x->name = nm;
				}
				x->dtype = TR_F32;
				x->ndim = lp[i].ndim;
				x->shape[0] = lp[i].shape[0];
				x->shape[1] = lp[i].shape[1];
				x->data = base + lp[i].off;
			}
		}
	if (rc)
		goto out;
	for (int i = 0; i < n; i++) {
		int64_t ne = 1;
		for (int d = 0; d < t[i].ndim; d++)
			ne *= t[i].shape[d];
		const char *bad = nonfinite(t[i].data, (size_t)ne);
		if (bad) {
			r->diverged = 1;
			rc = sp_error(-ERANGE,
			              "diverged at step %d: tensor %s holds %s (lower --lr?); not "
			              "saved: %s%s",
			              step, t[i].name, bad,
			              r->last_ckpt[0] ? "the last good checkpoint is "
			                              : "no checkpoint was written before",
			              r->last_ckpt);
			goto out;
		}
	}
	char cfg[1024], st[32], pos[32], path[4096];
	config_json(r, cfg, sizeof(cfg));
	snprintf(st, sizeof(st), "%d", step);
	snprintf(pos, sizeof(pos), "%d", step);
	const char *meta[] = {"format",        FORMAT,
	                      "step",          st,
	                      "config",        cfg,
	                      "data_position", pos,
	                      "rng",           "batches are drawn from (seed, step, sample) alone",
	                      "precision",     rt_precision_name(r->kc.dtype)};
	path_of(r, step, path, sizeof(path));
	rc = tr_ckpt_write(path, t, n, meta, 6);
	if (rc == 0) {
		fprintf(r->out, "%scheckpoint: %s\n", r->c.tty ? "\n" : "", path);
		fflush(r->out);
		snprintf(r->last_ckpt, sizeof(r->last_ckpt), "%s", path);
		if (r->c.keep > 0)
			prune(r, step);
	}
out:
	for (int i = 0; buf && i < 3 * L; i++)
		free(buf[i]);
	free(buf);
	free(t);
	free(pts);
	free(names);
	return rc;
}

/* Opens path as a checkpoint of this trainer: readable with its checksums
 * (if any) matching, the format, the step of its file name (want; want < 0:
 * any, from the metadata), no non-finite value. Every fault is the file's,
 * not the run's flags: the caller may try another. */
static int open_checked(const char *path, int want, int *step, struct tr_ckpt **out)
{
	struct tr_ckpt *ck;
	SP_CHECK(tr_ckpt_open(path, &ck));
	const char *fmt = tr_ckpt_meta(ck, "format"), *st = tr_ckpt_meta(ck, "step");
	char *end = NULL;
	long s = st ? strtol(st, &end, 10) : -1;
	int rc = 0;
	if (!fmt || strcmp(fmt, FORMAT) || !st || !*st || *end || s < 0 || s > INT_MAX ||
	    (want >= 0 && s != want)) {
		if (want >= 0)
			rc = sp_error(-EINVAL, "checkpoint %s: not a %s checkpoint of step %d",
			              path, FORMAT, want);
		else
			rc = sp_error(
			    -EINVAL,
			    "checkpoint %s: not a %s checkpoint (no format and step in its "
			    "metadata)",
			    path, FORMAT);
	}
	for (int i = 0; i < tr_ckpt_count(ck) && !rc; i++) {
		struct tr_tensor t;
		rc = tr_ckpt_get(ck, i, &t);
		int64_t ne = 1;
		for (int d = 0; d < t.ndim && !rc; d++)
			ne *= t.shape[d];
		const char *bad = rc || t.dtype != TR_F32 ? NULL : nonfinite(t.data, (size_t)ne);
		if (bad)
			rc = sp_error(-EINVAL,
			              "checkpoint %s: tensor %s holds %s (written by a run that "
			              "diverged)",
			              path, t.name, bad);
	}
	if (rc) {
		tr_ckpt_close(ck);
		return rc;
	}
	*step = (int)s;
	*out = ck;
	return 0;
}

/* The newest usable checkpoint of the run's directory; one line on the output
 * for each unusable one skipped (naming it and why). */
static int open_newest(struct run *r, char *path, size_t cap, int *step, struct tr_ckpt **out)
{
	const char *dir = r->c.checkpoint_dir;
	int *steps = NULL, n = 0, rc = 0;
	SP_CHECK(list_steps("--resume", dir, &steps, &n));
	if (!n)
		rc = sp_error(-ENOENT, "--resume: no step_*.safetensors checkpoint in %s", dir);
	char newest[SP_ERROR_MSG_MAX] = "";
	for (int i = n - 1; i >= 0; i--) {
		path_of(r, steps[i], path, cap);
		rc = open_checked(path, steps[i], step, out);
		if (rc == 0 || rc == -ENOMEM)
			break;
		if (!newest[0])
			snprintf(newest, sizeof(newest), "%s", sp_last_error());
		/* a fault of its contents: renamed out of the step_*.safetensors that
		 * --resume and --keep count, kept for a post-mortem */
		char aside[4200] = "";
		snprintf(aside, sizeof(aside), "%s.unusable", path);
		if (rc != -EINVAL || rename(path, aside) < 0)
			aside[0] = 0;
		fprintf(r->out, "resume: %s%s%s%s\n", sp_last_error(),
		        aside[0] ? "; renamed to " : "", aside,
		        i ? "; trying the checkpoint before it" : "");
	}
	if (rc && rc != -ENOMEM && n)
		rc = sp_error(rc, "--resume: no usable checkpoint in %s (the newest: %s)", dir,
		              newest);
	free(steps);
	return rc;
}

/* The learning rate's recipe (tr_lr_at) and clipping: a change is allowed,
 * with a warning (the run then no longer matches an uninterrupted one). */
static int recipe_key(const char *k)
{
	static const char *const keys[] = {"lr",     "lr_schedule", "warmup",
	                                   "lr_min", "steps",       "grad_clip"};
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (!strcmp(k, keys[i]))
			return 1;
	return 0;
}

/* The checkpoint's config against the run's: every key equal but the
 * recipe's, whose change is a warning line on f. */
static int check_config(FILE *f, const char *path, const char *have, const char *want)
{
	struct sp_json *a = NULL, *b = NULL, *old = NULL;
	char olds[512];
	int rc = 0;
	if (!have || sp_json_parse(have, strlen(have), &a) < 0)
		return sp_error(-EINVAL, "checkpoint %s: no readable config in its metadata", path);
	old_config_json(olds, sizeof(olds));
	SP_CHECK_GOTO(sp_json_parse(want, strlen(want), &b), rc, out);
	SP_CHECK_GOTO(sp_json_parse(olds, strlen(olds), &old), rc, out);
	for (int k = 0; k < b->n; k++) {
		const struct sp_json *x = sp_json_get(a, b->keys[k]), *y = &b->items[k];
		if (!x) /* a checkpoint older than the key */
			x = sp_json_get(old, b->keys[k]);
		if (!x && !strcmp(b->keys[k], "steps"))
			continue; /* older than the key: the run's length was not recorded */
		if (recipe_key(b->keys[k]) && x && x->type == y->type &&
		    (y->type == SP_JSON_STRING ? strcmp(x->str, y->str) != 0 : x->num != y->num)) {
			char was[64], now[64];
			if (y->type == SP_JSON_STRING) {
				snprintf(was, sizeof(was), "%s", x->str);
				snprintf(now, sizeof(now), "%s", y->str);
			} else {
				snprintf(was, sizeof(was), "%g", x->num);
				snprintf(now, sizeof(now), "%g", y->num);
			}
			fprintf(f,
			        "resume: warning: %s was trained with %s %s; this run goes on with "
			        "%s %s (it no longer matches an uninterrupted run)\n",
			        path, b->keys[k], was, b->keys[k], now);
			continue;
		}
		if (y->type == SP_JSON_STRING) {
			if (!x || x->type != SP_JSON_STRING || strcmp(x->str, y->str)) {
				rc =
				    sp_error(-EINVAL,
				             "checkpoint %s was written by a run with %s %s; this "
				             "run has %s",
				             path, b->keys[k],
				             x && x->type == SP_JSON_STRING ? x->str : "?", y->str);
				break;
			}
			continue;
		}
		if (!x || x->type != SP_JSON_NUMBER || x->num != y->num) {
			rc = sp_error(-EINVAL,
			              "checkpoint %s was written by a run with %s %g; this run has "
			              "%g (resume with the same model, batch, seed and optimizer)",
			              path, b->keys[k],
			              x && x->type == SP_JSON_NUMBER ? x->num : -1.0, y->num);
			break;
		}
	}
out:
	sp_json_free(a);
	sp_json_free(b);
	sp_json_free(old);
	return rc;
}

int tr_resume(struct run *r)
{
	char path[4096], want[1024];
	int step = 0, rc = 0;
	struct tr_ckpt *ck;
	if (r->c.resume_file) {
		snprintf(path, sizeof(path), "%s", r->c.resume_file);
		SP_CHECK(open_checked(path, -1, &step, &ck));
	} else {
		SP_CHECK(open_newest(r, path, sizeof(path), &step, &ck));
	}
	config_json(r, want, sizeof(want));
	SP_CHECK_GOTO(check_config(r->out, path, tr_ckpt_meta(ck, "config"), want), rc, out);
	if (step >= r->steps) {
		rc = sp_error(-EINVAL, "--steps %d: checkpoint %s is at step %d already", r->steps,
		              path, step);
		goto out;
	}
	/* 2bw's older version, if the checkpoint has it (another schedule's has
	 * not; a 2bw checkpoint resumed by another schedule leaves it unread) */
	int ck_prev = 0;
	{
		struct pt lp0[KN_BLOCK_NPARAMS];
		struct tr_tensor t0;
		char nm0[64];
		int k0 = layer_tensors(r, 0, lp0);
		snprintf(nm0, sizeof(nm0), "%s.%.47s", PREV_PREFIX, k0 > 0 ? lp0[0].name : "");
		ck_prev = k0 > 0 && tr_ckpt_find(ck, nm0, &t0) == 0;
	}
	if (ck_prev && !has_prev(r)) /* a 2bw checkpoint under another schedule */
		fprintf(r->out,
		        "resume: %s also holds 2bw's older weight version; this schedule keeps "
		        "one and trains on from the newest\n",
		        path);
	ck_prev = ck_prev && has_prev(r);
	for (int l = 0; l < r->m.nlayers && !rc; l++) {
		struct pt lp[KN_BLOCK_NPARAMS];
		int k = layer_tensors(r, l, lp);
		if (k < 0) {
			rc = k;
			break;
		}
		uint64_t np = rt_layer_nparams(&r->m.layers[l]);
		float *p = malloc(rt_run_state_bytes(r->run, l, RT_PARAMS) + 4),
		      *o = malloc(r->m.layers[l].optim_bytes + 4);
		const char *const *prefix;
		int nstate = state_names(r, &prefix);
		for (int i = 0; i < k && !rc && p && o; i++)
			for (int w = 0; w < 1 + nstate && !rc; w++) {
				char nm[64];
				if (w)
					snprintf(nm, sizeof(nm), "%s.%.47s", prefix[w - 1],
					         lp[i].name);
				else
					snprintf(nm, sizeof(nm), "%.47s", lp[i].name);
				struct tr_tensor t;
				int64_t n = lp[i].ndim == 1 ? lp[i].shape[0]
				                            : lp[i].shape[0] * lp[i].shape[1];
				rc = tr_ckpt_find(ck, nm, &t);
				if (rc < 0) {
					rc =
					    sp_error(-EINVAL, "checkpoint %s: tensor %s is missing",
					             path, nm);
					break;
				}
				int64_t have = 1;
				for (int d = 0; d < t.ndim; d++)
					have *= t.shape[d];
				if (t.dtype != TR_F32 || t.ndim != lp[i].ndim || have != n) {
					rc = sp_error(
					    -EINVAL,
					    "checkpoint %s: tensor %s has another shape or "
					    "type than this model's",
					    path, nm);
					break;
				}
				float *dst =
				    w == 0 ? p + lp[i].off : o + (uint64_t)(w - 1) * np + lp[i].off;
				memcpy(dst, t.data, (size_t)n * sizeof(float));
			}
		if (!p || !o)
			rc = sp_error(-ENOMEM, "resume: out of memory");
		if (!rc)
			rc = rt_run_write_state(r->run, l, RT_PARAMS, p);
		if (!rc)
			rc = rt_run_write_state(r->run, l, RT_OPTIM, o);
		/* 2bw: the older version, after RT_PARAMS (which set both) */
		for (int i = 0; i < k && !rc && ck_prev; i++) {
			char nm[64];
			snprintf(nm, sizeof(nm), "%s.%.47s", PREV_PREFIX, lp[i].name);
			struct tr_tensor t;
			int64_t n =
			    lp[i].ndim == 1 ? lp[i].shape[0] : lp[i].shape[0] * lp[i].shape[1];
			rc = tr_ckpt_find(ck, nm, &t);
			int64_t have = 1;
			for (int d = 0; d < t.ndim && !rc; d++)
				have *= t.shape[d];
			if (rc < 0 || t.dtype != TR_F32 || have != n)
				rc = sp_error(-EINVAL,
				              "checkpoint %s: tensor %s is missing or has another "
				              "shape or type than this model's",
				              path, nm);
			else
				memcpy(p + lp[i].off, t.data, (size_t)n * sizeof(float));
		}
		if (!rc && ck_prev)
			rc = rt_run_write_state(r->run, l, RT_PARAMS_PREV, p);
		free(p);
		free(o);
	}
	if (rc == 0 && has_prev(r) && !ck_prev)
		fprintf(r->out,
		        "resume: %s holds one weight version (another schedule wrote it): 2bw's "
		        "delay starts again, as at step 0\n",
		        path);
	if (rc == 0) {
		rt_run_set_step(r->run, step);
		r->start = step;
		if (!tr_ckpt_verified(ck))
			fprintf(r->out,
			        "resume: %s has no checksums (written before spill recorded them): "
			        "its data is not verified\n",
			        path);
		fprintf(r->out, "resumed from %s (step %d)\n", path, step);
		snprintf(r->last_ckpt, sizeof(r->last_ckpt), "%s", path);
	}
out:
	tr_ckpt_close(ck);
	return rc;
}

/* train/state.c — checkpoints and resume.
 *
 * DIR/step_NNNNNNNN.safetensors holds every parameter tensor under llm.c's
 * names (wte, wpe, h.<i>.ln1w ... h.<i>.fcprojb, lnfw, lnfb) and shapes, the
 * optimizer's state (AdamW moments as adam_m.<name> and adam_v.<name>, SGD's
 * momentum as sgd_momentum.<name>, nothing for plain SGD), and in __metadata__ the
 * format, the step, the model and run config (JSON), the precision and the data
 * position. In bf16 the parameters stored are the fp32 master weights (the
 * bf16 weights are their rounding), so a resumed bf16 run continues bit for
 * bit too; a checkpoint resumes only in the precision that wrote it.
 * Batches are drawn from (seed, step, sample) alone, so the step and the seed
 * are the whole data and RNG state: a resumed run continues bit for bit.
 */
#include "train/internal.h"

#include "common/json.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

/* The config a checkpoint must match to be resumed bit for bit. */
static void config_json(const struct run *r, char *buf, size_t n)
{
	snprintf(buf, n,
	         "{\"layers\": %d, \"channels\": %d, \"heads\": %d, \"vocab\": %d, \"seq\": %d, "
	         "\"batch\": %d, \"seed\": %" PRIu64 ", \"lr\": %.9g, \"optimizer\": \"%s\", "
	         "\"momentum\": %.9g, \"precision\": \"%s\"}",
	         r->kc.L, r->kc.C, r->kc.NH, r->kc.V, r->T, r->batch, r->c.seed, (double)r->lr,
	         rt_optimizer_name(r->m.opt.kind), (double)r->m.opt.momentum,
	         rt_precision_name(r->kc.dtype));
}

/* The optimizer's state tensors per parameter tensor: their name prefixes, in
 * the order of the layer's optim range (AdamW m then v; SGD its momentum
 * buffer; plain SGD none). */
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

int tr_checkpoint(struct run *r, int step)
{
	if (mkdir(r->c.checkpoint_dir, 0755) < 0 && errno != EEXIST)
		return sp_error(-errno, "checkpoint: cannot create %s: %s", r->c.checkpoint_dir,
		                strerror(errno));
	int L = r->m.nlayers, rc = 0, n = 0;
	struct tr_tensor *t = calloc((size_t)L * 3 * KN_BLOCK_NPARAMS, sizeof(*t));
	struct pt *pts = calloc((size_t)L * KN_BLOCK_NPARAMS, sizeof(*pts));
	float **buf = calloc((size_t)L * 2, sizeof(float *));
	char(*names)[64] = calloc((size_t)L * 2 * KN_BLOCK_NPARAMS, sizeof(*names));
	if (!t || !pts || !buf || !names) {
		rc = sp_error(-ENOMEM, "checkpoint: out of memory");
		goto out;
	}
	/* parameters first, then the optimizer's state, each in layer order */
	const char *const *prefix;
	int nstate = state_names(r, &prefix);
	for (int w = 0; w < 1 + nstate && !rc; w++)
		for (int l = 0, np = 0; l < L && !rc; l++) {
			struct pt *lp = pts + (size_t)l * KN_BLOCK_NPARAMS;
			int k = layer_tensors(r, l, lp);
			if (k < 0) {
				rc = k;
				break;
			}
			if (w == 0) {
				for (int s = 0; s < 2 && !rc; s++) {
					enum rt_state which = s ? RT_OPTIM : RT_PARAMS;
					buf[2 * l + s] =
					    malloc(rt_run_state_bytes(r->run, l, which) + 4);
					rc = buf[2 * l + s]
					         ? rt_run_read_state(r->run, l, which,
					                             buf[2 * l + s])
					         : sp_error(-ENOMEM, "checkpoint: out of memory");
				}
			}
			uint64_t nparams = rt_layer_nparams(&r->m.layers[l]);
			for (int i = 0; i < k && !rc; i++, np++) {
				struct tr_tensor *x = &t[n++];
				const float *base =
				    w == 0 ? buf[2 * l]
				           : buf[2 * l + 1] + (uint64_t)(w - 1) * nparams;
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
	char cfg[512], st[32], pos[32], path[4096];
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
	if (rc == 0)
		fprintf(r->out, "%scheckpoint: %s\n", r->c.tty ? "\n" : "", path);
out:
	for (int i = 0; buf && i < 2 * L; i++)
		free(buf[i]);
	free(buf);
	free(t);
	free(pts);
	free(names);
	return rc;
}

/* The newest step_*.safetensors in dir, or -ENOENT. */
static int latest(const char *dir, char *path, size_t n, int *step)
{
	DIR *d = opendir(dir);
	if (!d)
		return sp_error(-errno, "--resume: cannot read %s: %s", dir, strerror(errno));
	int best = -1;
	struct dirent *e;
	while ((e = readdir(d))) {
		int s;
		char tail[32];
		if (sscanf(e->d_name, "step_%d.%31s", &s, tail) == 2 &&
		    !strcmp(tail, "safetensors") && s > best)
			best = s;
	}
	closedir(d);
	if (best < 0)
		return sp_error(-ENOENT, "--resume: no step_*.safetensors checkpoint in %s", dir);
	snprintf(path, n, "%s/step_%08d.safetensors", dir, best);
	*step = best;
	return 0;
}

static int check_config(const char *path, const char *have, const char *want)
{
	struct sp_json *a = NULL, *b = NULL;
	int rc = 0;
	if (!have || sp_json_parse(have, strlen(have), &a) < 0)
		return sp_error(-EINVAL, "checkpoint %s: no readable config in its metadata", path);
	SP_CHECK_GOTO(sp_json_parse(want, strlen(want), &b), rc, out);
	/* what a checkpoint older than these keys was trained with */
	static char adamw[] = "adamw", fp32[] = "fp32";
	const struct sp_json old_optimizer = {.type = SP_JSON_STRING, .str = adamw},
	                     old_momentum = {.type = SP_JSON_NUMBER, .num = 0},
	                     old_precision = {.type = SP_JSON_STRING, .str = fp32};
	for (int k = 0; k < b->n; k++) {
		const struct sp_json *x = sp_json_get(a, b->keys[k]), *y = &b->items[k];
		if (!x && !strcmp(b->keys[k], "optimizer"))
			x = &old_optimizer;
		if (!x && !strcmp(b->keys[k], "momentum"))
			x = &old_momentum;
		if (!x && !strcmp(b->keys[k], "precision"))
			x = &old_precision;
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
		if (!x || x->type != SP_JSON_NUMBER || x->num != b->items[k].num) {
			rc = sp_error(
			    -EINVAL,
			    "checkpoint %s was written by a run with %s %g; this run has %g "
			    "(resume with the same model, batch, seed, learning rate and "
			    "optimizer)",
			    path, b->keys[k], x && x->type == SP_JSON_NUMBER ? x->num : -1.0,
			    b->items[k].num);
			break;
		}
	}
out:
	sp_json_free(a);
	sp_json_free(b);
	return rc;
}

int tr_resume(struct run *r)
{
	char path[4096], want[512];
	int step = 0, rc = 0;
	SP_CHECK(latest(r->c.checkpoint_dir, path, sizeof(path), &step));
	struct tr_ckpt *ck;
	SP_CHECK(tr_ckpt_open(path, &ck));
	const char *fmt = tr_ckpt_meta(ck, "format"), *st = tr_ckpt_meta(ck, "step");
	config_json(r, want, sizeof(want));
	if (!fmt || strcmp(fmt, FORMAT) || !st || atoi(st) != step) {
		rc = sp_error(-EINVAL, "checkpoint %s: not a %s checkpoint of step %d", path,
		              FORMAT, step);
		goto out;
	}
	SP_CHECK_GOTO(check_config(path, tr_ckpt_meta(ck, "config"), want), rc, out);
	if (step >= r->steps) {
		rc = sp_error(-EINVAL, "--steps %d: checkpoint %s is at step %d already", r->steps,
		              path, step);
		goto out;
	}
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
		free(p);
		free(o);
	}
	if (rc == 0) {
		rt_run_set_step(r->run, step);
		r->start = step;
		fprintf(r->out, "resumed from %s (step %d)\n", path, step);
	}
out:
	tr_ckpt_close(ck);
	return rc;
}

/* train/train.c — the training loop of `spill train` and `spill sim`.
 *
 * One context (rt_open from the SPILL_* table with the config on top), a GPT-2
 * of the kernels' layers fed by a corpus (or synthetic tokens on the model
 * backend), a plan (auto or named), then steps: progress, evaluation,
 * checkpoints (ckpt.c's safetensors, in report.c's naming), the tuner after the
 * first steps, and the report at the end (report.c). Everything a run
 * measures goes through struct run so that report.c and the tuner see it.
 * A run stops early, with the report, on a non-finite loss or state
 * (diverged, -ERANGE) and, with catch_signals, on SIGINT or SIGTERM (polled
 * between steps: the current step finishes and is checkpointed, -EINTR).
 */
#include "train/internal.h"

#include "common/log.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

void tr_config_defaults(struct tr_config *c)
{
	memset(c, 0, sizeof(*c));
	c->eval_batches = 4;
	c->tune = 1;
	c->seed = 1337;
	c->warmup = -1;
	c->lr_min = 0.1f;
	c->grad_clip = 1.0f;
	c->flush_every = -1; /* not given */
}

const char *tr_lr_schedule_name(int sched)
{
	return sched == TR_LR_LINEAR ? "linear" : sched == TR_LR_CONSTANT ? "constant" : "cosine";
}

/* llm.c's shape: a linear warmup, then the decay over the steps left. In double,
 * rounded once, so it is the same float on every machine. */
float tr_lr_at(const struct run *r, int step)
{
	double lr = r->lr, lo = lr * r->c.lr_min;
	if (step < r->warmup)
		return (float)(lr * (step + 1) / r->warmup);
	if (r->sched == TR_LR_CONSTANT || r->steps <= r->warmup + 1)
		return (float)lr;
	double frac = (double)(step - r->warmup) / (r->steps - r->warmup - 1);
	if (frac > 1)
		frac = 1;
	if (r->sched == TR_LR_LINEAR)
		return (float)(lr - frac * (lr - lo));
	return (float)(lo + 0.5 * (1 + cos(M_PI * frac)) * (lr - lo));
}

/* ---- presets ----------------------------------------------------------------------- */

struct preset {
	const char *name;
	int layers, channels, heads, seq, batch, steps;
	float lr;
};

static const struct preset presets[] = {
    {"tiny", 4, 128, 4, 64, 16, 200, 2e-3f},
    {"gpt2", 12, 768, 12, 1024, 8, 20, 3e-4f},
    {"gpt2-medium", 24, 1024, 16, 1024, 8, 10, 3e-4f},
    {"gpt2-xl", 48, 1600, 25, 1024, 16, 5, 3e-4f},
    {"10b", 48, 4096, 32, 1024, 16, 3, 3e-4f},
    {"40b", 96, 6144, 48, 1024, 16, 3, 3e-4f},
};

static const struct preset *preset_find(const char *name)
{
	for (size_t i = 0; i < sizeof(presets) / sizeof(presets[0]); i++)
		if (!strcasecmp(presets[i].name, name))
			return &presets[i];
	return NULL;
}

/* ---- data -------------------------------------------------------------------------- */

int tr_data_train(const struct rt_model *m, void *arg, int iter, int sample0, int n, void *in,
                  void *tg)
{
	struct run *r = arg;
	return tr_data_samples(r->data, TR_TRAIN, r->c.seed, (uint64_t)iter, sample0, n, m->T, in,
	                       tg);
}

int tr_data_val(const struct rt_model *m, void *arg, int iter, int sample0, int n, void *in,
                void *tg)
{
	struct run *r = arg;
	return tr_data_samples(r->data, TR_VAL, r->c.seed, (uint64_t)iter, sample0, n, m->T, in,
	                       tg);
}

/* ---- setup ------------------------------------------------------------------------- */

/* The model's shape from the preset, the flags and the corpus. */
int tr_set_optimizer(const struct tr_config *c, struct rt_model *m)
{
	enum kn_optimizer kind;
	SP_CHECK(rt_optimizer_parse(c->optim, &kind));
	if (c->momentum != 0 && kind != KN_SGD)
		return sp_error(-EINVAL, "--momentum is an SGD setting: add --optim sgd");
	return rt_model_set_optimizer(m, kind, c->momentum);
}

/* The shape of --init's weights: flags that say otherwise are refused; seq
 * and batch default to a spill checkpoint's run, else to every position and
 * the preset's batch. */
static int shape_from_init(struct run *r, const struct tr_weights *w, const struct preset *p,
                           int dv)
{
	const struct tr_config *c = &r->c;
	const struct {
		const char *flag;
		int given, file;
	} f[] = {{"--layers", c->layers, w->layers},
	         {"--channels", c->channels, w->channels},
	         {"--heads", c->heads, w->heads},
	         {"--vocab", c->vocab, w->vocab}};
	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
		if (f[i].given > 0 && f[i].given != f[i].file)
			return sp_error(-EINVAL, "%s %d contradicts --init %s (%s: %d)", f[i].flag,
			                f[i].given, c->init, f[i].flag + 2, f[i].file);
	if (c->seq > w->positions)
		return sp_error(-EINVAL, "--seq %d: --init %s has %d positions", c->seq, c->init,
		                w->positions);
	if (dv > w->vocab)
		return sp_error(-EINVAL,
		                "the corpus %s has tokens up to %d, beyond the vocabulary %d of "
		                "--init %s",
		                tr_data_describe(r->data), dv - 1, w->vocab, c->init);
	struct kn_model_config *k = &r->kc;
	k->L = w->layers;
	k->C = w->channels;
	k->NH = w->heads;
	k->V = w->vocab;
	k->maxT = w->positions;
	r->T = c->seq > 0 ? c->seq : w->has_run && w->seq <= w->positions ? w->seq : w->positions;
	r->batch = c->batch > 0 ? c->batch : w->has_run ? w->batch : p->batch;
	r->preset = c->init;
	return 0;
}

/* --tensor-parallel t: the blocks in the tensor-parallel form (the numerics
 * every t shares), or one line on what would work. */
static int tp_shape(struct run *r)
{
	const struct tr_config *c = &r->c;
	int t = c->tensor_parallel;
	struct kn_model_config *k = &r->kc;
	if (t == 0 || t == 1)
		return 0;
	if (t != 2 && t != 4)
		return sp_error(-EINVAL, "--tensor-parallel %d: 1, 2 or 4 devices per block", t);
	if (k->NH % KN_TP_CHUNKS || k->C % KN_TP_CHUNKS)
		return sp_error(
		    -EINVAL,
		    "--tensor-parallel %d: the model's %d heads and %d channels must be "
		    "multiples of %d (every block runs in %d fixed chunks, %d a "
		    "device; --heads, --channels)",
		    t, k->NH, k->C, KN_TP_CHUNKS, KN_TP_CHUNKS, KN_TP_CHUNKS / t);
	if (k->dtype != KN_F32)
		return sp_error(-EINVAL, "--tensor-parallel %d: fp32 only (--precision fp32)", t);
	if (c->grad_clip > 0)
		return sp_error(-EINVAL,
		                "--tensor-parallel %d: gradient clipping is not built with it "
		                "(--grad-clip 0)",
		                t);
	if (c->recompute)
		return sp_error(-EINVAL,
		                "--tensor-parallel %d: recomputation is not built with it (drop "
		                "--recompute)",
		                t);
	k->tp_form = 1;
	return 0;
}

int tr_shape(struct run *r)
{
	const struct tr_config *c = &r->c;
	const struct tr_weights *w = r->init.p ? &r->init : NULL;
	if (w && c->model)
		return sp_error(-EINVAL, "--model %s: the model comes from --init %s", c->model,
		                c->init);
	const char *name = c->model ? c->model : "tiny";
	const struct preset *p = preset_find(name);
	if (!p)
		return sp_error(
		    -EINVAL,
		    "unknown model '%s' (one of: tiny, gpt2, gpt2-medium, gpt2-xl, 10b, "
		    "40b)",
		    name);
	r->preset = p->name;
	struct kn_model_config *k = &r->kc;
	k->L = c->layers > 0 ? c->layers : p->layers;
	k->C = c->channels > 0 ? c->channels : p->channels;
	k->NH = c->heads > 0 ? c->heads : p->heads;
	r->T = c->seq > 0 ? c->seq : p->seq;
	k->maxT = r->T;
	if (rt_precision_parse(c->precision, &k->dtype) < 0)
		return sp_error(-EINVAL, "--precision %s: wants fp32 or bf16", c->precision);
	r->batch = c->batch > 0 ? c->batch : p->batch;
	r->steps = c->steps > 0 ? c->steps : p->steps;
	r->lr = c->lr > 0 ? c->lr : p->lr;
	if (!c->lr_schedule || !strcmp(c->lr_schedule, "cosine"))
		r->sched = TR_LR_COSINE;
	else if (!strcmp(c->lr_schedule, "linear"))
		r->sched = TR_LR_LINEAR;
	else if (!strcmp(c->lr_schedule, "constant"))
		r->sched = TR_LR_CONSTANT;
	else
		return sp_error(-EINVAL, "--lr-schedule %s: wants cosine, linear or constant",
		                c->lr_schedule);
	if (!(c->lr_min >= 0 && c->lr_min <= 1))
		return sp_error(-EINVAL, "--lr-min %g: wants a fraction of --lr in [0, 1]",
		                (double)c->lr_min);
	if (!(c->grad_clip >= 0) || !(c->weight_decay >= 0))
		return sp_error(-EINVAL, "--grad-clip %g, --weight-decay %g: want numbers >= 0",
		                (double)c->grad_clip, (double)c->weight_decay);
	if (c->total_batch < 0)
		return sp_error(-EINVAL, "--total-batch %d: wants tokens > 0", c->total_batch);
	if (c->total_batch > 0) {
		if (c->batch > 0 && c->batch * r->T != c->total_batch)
			return sp_error(-EINVAL,
			                "--total-batch %d and --batch %d disagree: %d sequences of "
			                "%d tokens are %d tokens",
			                c->total_batch, c->batch, c->batch, r->T, c->batch * r->T);
		if (c->total_batch % r->T)
			return sp_error(-EINVAL,
			                "--total-batch %d is not a multiple of the sequence length "
			                "%d (try %d)",
			                c->total_batch, r->T,
			                (c->total_batch / r->T > 0 ? c->total_batch / r->T : 1) *
			                    r->T);
		r->batch = c->total_batch / r->T;
	}
	r->warmup = c->warmup >= 0               ? c->warmup
	            : r->sched == TR_LR_CONSTANT ? 0
	            : r->steps / 10 < 2000       ? r->steps / 10
	                                         : 2000;
	int dv = r->data ? tr_data_vocab(r->data) : 0;
	if (c->vocab > 0 && dv && c->vocab < dv)
		return sp_error(-EINVAL, "--vocab %d is smaller than the corpus's %d tokens",
		                c->vocab, dv);
	k->V = c->vocab > 0 ? c->vocab : dv ? dv : !strcmp(p->name, "tiny") ? 256 : 50257;
	if (c->layers < 0 || c->channels < 0 || c->heads < 0 || c->seq < 0 || c->batch < 0 ||
	    c->steps < 0)
		return sp_error(-EINVAL, "sizes and steps must be positive");
	if (w)
		SP_CHECK(shape_from_init(r, w, p, dv));
	if (kn_model_config_check(k) < 0)
		return sp_error(-EINVAL, "model: %s", sp_last_error());
	return tp_shape(r);
}

int tr_run_nodes(const struct run *r)
{
	return r->c.nodes ? tr_nodes_size(r->c.nodes) : r->c.sim_nodes > 1 ? r->c.sim_nodes : 1;
}

const struct rt_nodes *tr_run_nodes_rt(struct run *r)
{
	if (r->c.nodes)
		return tr_nodes_rt(r->c.nodes);
	if (r->c.sim_nodes <= 1)
		return NULL;
	/* simulated: a node in the middle of the chain, no messages */
	r->sim_nodes = (struct rt_nodes){.rank = 0, .size = r->c.sim_nodes};
	return &r->sim_nodes;
}

/* Opens the context; budget > 0: the vmm's per-device budget on the host
 * backend when nothing set one (the default: a quarter of the state). */
int tr_open_context(struct run *r, uint64_t budget)
{
	const struct tr_config *c = &r->c;
	struct sp_params sp;
	SP_CHECK(sp_params_load(&sp, NULL));
	SP_CHECK(sp_params_apply_logging(&sp));
	char buf[32];
	if (c->backend)
		SP_CHECK(sp_params_set(&sp, "SPILL_BACKEND", c->backend));
	if (c->devices > 0) {
		snprintf(buf, sizeof(buf), "%d", c->devices);
		SP_CHECK(sp_params_set(&sp, "SPILL_DEVICES", buf));
	}
	if (c->profile)
		sp.profile = c->profile;
	if (c->device_mem)
		sp.device_mem = c->device_mem;
	if (c->host_mem)
		sp.host_mem = c->host_mem;
	if (c->disk)
		sp.disk_path = c->disk;
	if (c->budget)
		sp.vmm_device_mem = c->budget;
	struct rt_config rc;
	SP_CHECK(rt_config_from_params(&sp, &rc));
	rc.dev.net_bw = c->net_bw;
	if (c->trace_file)
		rc.vmm.trace_cap = 1u << 20;
	/* The whole state and a quarter for the pool's gaps. On the model backend
	 * the host is no limit: that much address space (no more, which sanitizers
	 * and small vm.max_map_count settings refuse). On cuda at most that much:
	 * the default pool, a quarter of physical memory, is pinned up front, once
	 * per context the budget search opens (32 GiB on a 128 GiB server).
	 * Set before any rt_open below: the demo's first context is kept. */
	uint64_t host_need = r->state + r->state / 4 + (1ull << 30);
	if (!sp.host_mem && (rc.dev.backend == DEV_BACKEND_MODEL ||
	                     (rc.dev.backend == DEV_BACKEND_CUDA && host_need < rc.vmm.host_mem)))
		rc.vmm.host_mem = host_need;
	/* The emulated GPUs, and real ones when training the built-in default
	 * model (the demo: its 48 MiB would never swap on a GPU), together hold a
	 * quarter of the training state: it swaps whatever the schedule spreads
	 * over them. A named model on a GPU gets the whole device. */
	int host = rc.dev.backend == DEV_BACKEND_HOST;
	int demo_gpu = rc.dev.backend == DEV_BACKEND_CUDA && !c->model;
	if (!c->budget && !sp.vmm_device_mem && (host || demo_gpu)) {
		int nd = rc.dev.ndevices > 0 ? rc.dev.ndevices : host ? 2 : 1;
		rc.vmm.device_mem = r->per_device ? budget : budget / (uint64_t)nd;
		if (host && (!rc.dev.device_mem || rc.dev.device_mem < rc.vmm.device_mem * 2))
			rc.dev.device_mem = rc.vmm.device_mem * 2;
		r->quarter = 1;
		if (demo_gpu && !r->per_device && rc.dev.ndevices <= 0) {
			/* every GPU by default: the share per device needs their count */
			SP_CHECK(rt_open(&rc, &r->rt));
			nd = r->rt->ndev;
			if (nd == 1) {
				rt_set_nodes(r->rt, tr_run_nodes_rt(r));
				return 0;
			}
			rt_close(r->rt);
			r->rt = NULL;
			rc.vmm.device_mem = budget / (uint64_t)nd;
		}
	}
	SP_CHECK(rt_open(&rc, &r->rt));
	rt_set_nodes(r->rt, tr_run_nodes_rt(r));
	return 0;
}

/* Bytes of everything one step keeps: parameters, gradients, optimizer state
 * and a batch's stash (what the executor manages per iteration). */
uint64_t tr_training_state(const struct rt_model *m)
{
	uint64_t s = 0;
	for (int l = 0; l < m->nlayers; l++) {
		const struct rt_layer *y = &m->layers[l];
		s += y->param_bytes + y->grad_bytes + y->optim_bytes +
		     y->stash_per_sample * (uint64_t)m->batch;
	}
	return s;
}

int tr_choose_plan(struct run *r, struct tg_plan *plan, const char *twin)
{
	const struct tr_config *c = &r->c;
	int packs = c->packs;
	enum tg_sched named;
	if (c->schedule && strcasecmp(c->schedule, "auto") &&
	    rt_sched_parse(c->schedule, &named) < 0) { /* the flag, and what would do */
		char names[128] = "auto";
		for (int s = 0; s < TG_NSCHED; s++)
			snprintf(names + strlen(names), sizeof(names) - strlen(names), ", %s",
			         tg_sched_name((enum tg_sched)s));
		return sp_error(-EINVAL, "--schedule %s: unknown schedule; one of %s", c->schedule,
		                names);
	}
	if (c->group > 1 && c->schedule && strcasecmp(c->schedule, "auto") &&
	    named != TG_HARMONY_DP && named != TG_HARMONY_PP) /* it would be ignored */
		return sp_error(-EINVAL,
		                "--group %d: %s does not group microbatches (harmony-dp and "
		                "harmony-pp do; --microbatch sizes %s's units)",
		                c->group, tg_sched_name(named), tg_sched_name(named));
	if (c->chunks > 0) { /* interleaved's v: every device holds v packs */
		if (!c->schedule || strcasecmp(c->schedule, "interleaved"))
			return sp_error(-EINVAL, "--chunks %d: only with --schedule interleaved",
			                c->chunks);
		if (c->packs > 0)
			return sp_error(-EINVAL,
			                "--chunks %d and --packs %d: give one (the packs are the "
			                "chunks x the devices)",
			                c->chunks, c->packs);
		packs = c->chunks * r->rt->ndev / (c->tensor_parallel > 1 ? c->tensor_parallel : 1);
		if (packs > r->m.nlayers)
			return sp_error(-EINVAL,
			                "--chunks %d: %d chunks on %d devices need %d packs, the "
			                "model has %d layers",
			                c->chunks, c->chunks, r->rt->ndev, packs, r->m.nlayers);
	}
	if (c->flush_every >= 0 && (!c->schedule || strcasecmp(c->schedule, "2bw") ||
	                            c->flush_every < 1 || c->flush_every > TG_MAX_FLUSH_EVERY)) {
		if (c->schedule && !strcasecmp(c->schedule, "2bw"))
			return sp_error(-EINVAL, "--flush-every %d: 1..%d steps", c->flush_every,
			                TG_MAX_FLUSH_EVERY);
		return sp_error(-EINVAL,
		                "--flush-every %d: only with --schedule 2bw (the other schedules "
		                "drain the pipeline every step)",
		                c->flush_every);
	}
	int tp = c->tensor_parallel > 1 ? c->tensor_parallel : 0;
	if (tp) {
		if (!c->schedule || !strcasecmp(c->schedule, "auto"))
			return sp_error(
			    -EINVAL,
			    "--tensor-parallel %d: name a pipeline schedule (--schedule "
			    "1f1b, gpipe, interleaved, 2bw or harmony-pp); auto does not "
			    "search it",
			    tp);
		if (named == TG_DP_SWAP || named == TG_HARMONY_DP)
			return sp_error(
			    -EINVAL,
			    "--tensor-parallel %d: %s binds tasks to devices late, which "
			    "the members' exchanges cannot follow; a pipeline schedule "
			    "(1f1b, gpipe, interleaved, 2bw, harmony-pp) takes it",
			    tp, tg_sched_name(named));
		if (r->rt->ndev % tp)
			return sp_error(-EINVAL,
			                "--tensor-parallel %d: the %d devices are not stages x %d "
			                "(--devices %d or %d)",
			                tp, r->rt->ndev, tp,
			                r->rt->ndev > tp ? r->rt->ndev / tp * tp : tp,
			                (r->rt->ndev / tp + 1) * tp);
	}
	struct rt_plan_request q = {.schedule = c->schedule,
	                            .tp = tp,
	                            .microbatch = c->microbatch,
	                            .group = c->group,
	                            .flush_every = c->flush_every > 0 ? c->flush_every : 0,
	                            .packs = packs,
	                            .upd_cpu = c->upd_cpu,
	                            .recompute = c->recompute,
	                            .twin_profile = twin};
	SP_CHECK(rt_plan_choose(r->rt, &r->m, &q, plan));
	if (c->zero1 && tr_run_nodes(r) <= 1)
		return sp_error(-EINVAL,
		                "--zero1 shards the optimizer state over the nodes of a run "
		                "(mpirun -np N, N > 1); this run has one");
	plan->zero = c->zero1;
	return 0;
}

/* ---- progress ---------------------------------------------------------------------- */

static void fmt_eta(double s, char *buf, size_t n)
{
	if (!(s >= 0) || s > 1e7) {
		snprintf(buf, n, "-");
		return;
	}
	long t = (long)(s + 0.5);
	if (t >= 3600)
		snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
	else
		snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

static void progress(struct run *r, int step, double loss, double now, int last)
{
	double dt = now - r->p_time;
	if (!last && !r->c.tty && dt < 1.0 && step != r->start + 1)
		return; /* plain lines: at most one a second */
	uint64_t h2d = vmm_xfer_bytes(r->rt->vmm, VMM_XFER_H2D),
	         d2h = vmm_xfer_bytes(r->rt->vmm, VMM_XFER_D2H);
	int ds = step - r->p_step;
	double tok = dt > 0 ? (double)ds * r->batch * r->T / dt : 0;
	/* the devices' peak since the last line: at a step's end a schedule may
	 * have written everything back */
	uint64_t used = 0, cap = 0;
	for (int d = 0; d < r->rt->ndev; d++) {
		uint64_t u, k, pk;
		if (vmm_place_usage(r->rt->vmm, d, &u, &k) == 0 &&
		    vmm_place_peak(r->rt->vmm, d, &pk) == 0) {
			used += pk;
			cap += k;
		}
	}
	sp_error_clear();
	double per = (now - r->t_first) / (step - r->start);
	char eta[32], l[32];
	fmt_eta(per * (r->steps - step), eta, sizeof(eta));
	/* no loss: the model backend moves no data ("-"); a NaN one: diverged */
	if (isnan(loss))
		snprintf(l, sizeof(l), "%-6s",
		         r->rt->dev && dev_backend(r->rt->dev) == DEV_BACKEND_MODEL ? "-" : "nan");
	else
		snprintf(l, sizeof(l), "%.4f", loss);
	/* 79 columns at most: a terminal's line, rewritten in place, must not
	 * wrap. swap is the host link's bytes both ways (H2D + D2H) (the profile at the end
	 * splits them); mem is the devices' peak since the last line against their
	 * budget, left out where the line would not fit (long step counts). */
	double swap = dt > 0 ? (double)(h2d - r->p_h2d + d2h - r->p_d2h) / dt / 1e9 : 0;
	char line[256], mem[32];
	snprintf(mem, sizeof(mem), " | mem %.0f%%", cap ? 100.0 * (double)used / (double)cap : 0);
	for (int with_mem = 1; with_mem >= 0; with_mem--) {
		snprintf(line, sizeof(line),
		         "step %*d/%d | loss %s | %4.0f tok/s | swap %.2f GB/s%s | ETA %s",
		         r->wsteps, step, r->steps, l, tok, swap, with_mem ? mem : "", eta);
		if (strlen(line) <= 79)
			break;
	}
	/* (on a terminal padded, so a shorter line covers a longer one) */
	fprintf(r->out, r->c.tty ? "\r%-79s%s" : "%s%s", line, r->c.tty && !last ? "" : "\n");
	fflush(r->out);
	r->p_time = now;
	r->p_step = step;
	r->p_h2d = h2d;
	r->p_d2h = d2h;
}

static int evaluate(struct run *r, double *loss)
{
	double sum = 0;
	int n = r->c.eval_batches > 0 ? r->c.eval_batches : 4;
	for (int i = 0; i < n; i++) {
		double l;
		SP_CHECK(rt_run_eval(r->run, i, &l));
		sum += l;
	}
	*loss = sum / n;
	return 0;
}

/* ---- the run ----------------------------------------------------------------------- */

static void run_free(struct run *r)
{
	rt_run_close(r->run);
	if (r->m.layers)
		rt_model_free(&r->m);
	rt_close(r->rt);
	tr_data_close(r->data);
	tr_weights_free(&r->init);
	tr_trace_free(&r->trace);
	free(r->t_start);
	free(r->t_end);
	free(r->losses);
	free(r->times);
}

/* Opens the run's program under plan, with the timing arrays attached. */
static int open_run(struct run *r, const struct tg_plan *plan, struct rt_run **out)
{
	SP_CHECK(rt_run_open(r->rt, &r->m, plan, r->c.seed, out));
	struct rt_prog *p = &(*out)->prog;
	free(r->t_start);
	free(r->t_end);
	r->t_start = calloc((size_t)p->ntask, sizeof(double));
	r->t_end = calloc((size_t)p->ntask, sizeof(double));
	if (!r->t_start || !r->t_end) {
		rt_run_close(*out);
		*out = NULL;
		return sp_error(-ENOMEM, "train: timing of %d tasks", p->ntask);
	}
	p->t_start = r->t_start;
	p->t_end = r->t_end;
	rt_plan_describe(plan, r->plan_name, sizeof(r->plan_name));
	r->plan = *plan;
	return 0;
}

/* Before training, not after it: can `path` be written (a file when !dir,
 * else a directory, made later if missing)? Its folder must exist; an
 * existing path must be of its kind and writable. One line naming the flag. */
static int check_output(const char *flag, const char *path, int dir)
{
	struct stat st;
	if (stat(path, &st) == 0) {
		if (dir != !!S_ISDIR(st.st_mode))
			return sp_error(-EINVAL, "%s %s: %s", flag, path,
			                dir ? "not a directory" : "is a directory");
		if (access(path, W_OK) < 0)
			return sp_error(-errno, "%s %s: cannot write: %s", flag, path,
			                strerror(errno));
		return 0;
	}
	char parent[4096];
	snprintf(parent, sizeof(parent), "%s", path);
	char *slash = strrchr(parent, '/');
	if (!slash)
		snprintf(parent, sizeof(parent), ".");
	else if (slash == parent)
		parent[1] = '\0';
	else
		*slash = '\0';
	if (stat(parent, &st) < 0 || !S_ISDIR(st.st_mode))
		return sp_error(-ENOENT, "%s %s: no directory %s to put it in", flag, path, parent);
	if (access(parent, W_OK) < 0)
		return sp_error(-errno, "%s %s: cannot write in %s: %s", flag, path, parent,
		                strerror(errno));
	return 0;
}

/* --resume FILE without --checkpoint: the run goes on in FILE's directory. */
static void resume_dir(struct run *r)
{
	const char *f = r->c.resume_file, *slash = strrchr(f, '/');
	if (!slash)
		snprintf(r->ckdir, sizeof(r->ckdir), ".");
	else
		snprintf(r->ckdir, sizeof(r->ckdir), "%.*s", slash == f ? 1 : (int)(slash - f), f);
	r->c.checkpoint_dir = r->ckdir;
}

static int setup(struct run *r)
{
	struct tr_config *c = &r->c;
	if (c->resume_file)
		c->resume = 1;
	if (c->resume_file && !c->checkpoint_dir)
		resume_dir(r);
	if (c->overwrite && !c->checkpoint_dir)
		return sp_error(-EINVAL, "--overwrite needs --checkpoint DIR");
	if (c->overwrite && c->resume && !c->resume_file)
		return sp_error(-EINVAL, "--overwrite and --resume (the newest checkpoint) "
		                         "contradict each other (--resume FILE --overwrite drops "
		                         "the checkpoints after FILE)");
	if (c->keep < 0 || (c->keep && !c->checkpoint_dir))
		return sp_error(-EINVAL, "--keep %d: wants N >= 0 and --checkpoint DIR", c->keep);
	if (c->checkpoint_dir)
		SP_CHECK(check_output("--checkpoint", c->checkpoint_dir, 1));
	if (c->checkpoint_dir && !c->resume)
		SP_CHECK(tr_claim_dir(r, 0)); /* before the work of opening anything */
	if (c->trace_file)
		SP_CHECK(check_output("--trace", c->trace_file, 0));
	if (c->stats_json)
		SP_CHECK(check_output("--stats-json", c->stats_json, 0));
	if (c->checkpoint_every && !c->checkpoint_dir)
		return sp_error(-EINVAL, "--checkpoint-every needs --checkpoint DIR");
	if (c->resume && !c->checkpoint_dir)
		return sp_error(-EINVAL, "--resume needs --checkpoint DIR");
	if (c->synthetic && c->data)
		return sp_error(-EINVAL, "--data and synthetic tokens contradict each other");
	if (c->eval_every < 0 || c->checkpoint_every < 0 || c->eval_batches < 0)
		return sp_error(-EINVAL, "--eval-every, --eval-batches and --checkpoint-every must "
		                         "not be negative");
	if (!c->synthetic)
		SP_CHECK(tr_data_open(c->data, &r->data));
	if (c->init)
		SP_CHECK(tr_weights_load(c->init, &r->init));
	SP_CHECK(tr_shape(r));
	if (r->data && tr_data_tokens(r->data, TR_TRAIN) < (uint64_t)r->T + 1)
		return sp_error(-EINVAL,
		                "corpus %s has %llu training tokens, fewer than a sequence "
		                "of %d + 1",
		                tr_data_describe(r->data),
		                (unsigned long long)tr_data_tokens(r->data, TR_TRAIN), r->T);
	int nodes = tr_run_nodes(r);
	if (r->batch % nodes)
		return sp_error(-EINVAL,
		                "--batch %d does not split over %d nodes (%s %d): give a "
		                "multiple of %d",
		                r->batch, nodes, c->nodes ? "-np" : "--nodes", nodes, nodes);
	/* this node's share of each step's samples; the loss is the whole batch's */
	SP_CHECK(rt_model_gpt(&r->kc, r->T, r->batch / nodes, &r->m));
	r->m.batch_total = r->batch;
	r->m.sample0 = tr_nodes_rank(c->nodes) * (r->batch / nodes);
	r->m.opt.lr = tr_lr_at(r, 0);
	r->m.opt.weight_decay = c->weight_decay;
	r->m.opt.grad_clip = c->grad_clip;
	SP_CHECK(tr_set_optimizer(c, &r->m));
	if (r->data) {
		r->m.data = tr_data_train;
		r->m.eval_data =
		    tr_data_tokens(r->data, TR_VAL) > (uint64_t)r->T ? tr_data_val : NULL;
		if (!r->m.eval_data && c->eval_every > 0)
			SP_WARN(RT,
			        "--eval-every %d: no validation: the corpus's validation split "
			        "has %llu tokens, not more than a sequence of %d",
			        c->eval_every, (unsigned long long)tr_data_tokens(r->data, TR_VAL),
			        r->T);
		r->m.data_arg = r;
	} else {
		r->synth_seed = c->seed;
		r->m.data_arg = &r->synth_seed;
	}
	r->state = tr_training_state(&r->m);
	char twin[2048];
	const char *tp = NULL;
	if (c->plan_profile) {
		SP_CHECK(rt_profile_text(c->plan_profile, twin, sizeof(twin)));
		tp = twin;
	}
	struct tg_plan plan;
	/* the default budget, a quarter of the state, grows where no plan fits it
	 * (a large vocabulary's embedding alone may not) */
	for (uint64_t b = r->state / 4;; b += b / 2) {
		SP_CHECK(tr_open_context(r, b));
		int rc = tr_choose_plan(r, &plan, tp);
		if (rc == 0)
			break;
		/* b is split over the devices unless per_device: stop once each
		 * device's share holds the whole state (not b: that stopped the
		 * search at half the state per device on 2 devices) */
		uint64_t share = r->per_device ? b : b / (uint64_t)r->rt->ndev;
		/* the host pool ran out, not the devices: name the flag that set it */
		if (rc == -ENOMEM && c->host_mem && strstr(sp_last_error(), "host")) {
			char h[32], st[32];
			return sp_error(rc,
			                "--host-mem %s is too small: the host pool holds every "
			                "object the devices do not (training state %s; give "
			                "more, or --disk DIR): %s",
			                sp_format_size(c->host_mem, h, sizeof(h)),
			                sp_format_size(r->state, st, sizeof(st)), sp_last_error());
		}
		if (rc != -ENOMEM || !r->quarter || share >= r->state)
			return rc;
		rt_close(r->rt);
		r->rt = NULL;
		r->grown = 1;
	}
	if (r->grown)
		r->quarter = 0;
	SP_CHECK(open_run(r, &plan, &r->run));
	if (r->init.p)
		SP_CHECK(tr_weights_put(r, &r->init));
	if (c->trace_file)
		SP_CHECK(tr_trace_init(&r->trace, r->rt));
	return 0;
}

static void banner(struct run *r)
{
	char a[32], b[32], d[32];
	uint64_t used, cap = 0;
	if (vmm_place_usage(r->rt->vmm, 0, &used, &cap) < 0)
		cap = 0;
	uint64_t params = 0;
	for (int l = 0; l < r->m.nlayers; l++)
		params += rt_layer_nparams(&r->m.layers[l]);
	fprintf(r->out,
	        "spill train: GPT-2 %s (%d layers, %d channels, %d heads, vocab %d, seq %d), "
	        "%.2fM parameters, batch %d%s\n",
	        r->preset, r->kc.L, r->kc.C, r->kc.NH, r->kc.V, r->T, params / 1e6, r->batch,
	        r->kc.dtype == KN_BF16 ? ", bf16 mixed precision (fp32 masters and optimizer "
	                                 "state)"
	                               : "");
	fprintf(r->out, "data: %s\n",
	        r->data ? tr_data_describe(r->data) : "synthetic token patterns");
	struct dev_info in;
	if (dev_info(r->rt->dev, 0, &in) < 0)
		snprintf(in.name, sizeof(in.name), "?");
	uint64_t total = cap * (uint64_t)r->rt->ndev;
	fprintf(r->out, "devices: %d x %s (%s backend), budget %s each, %s together%s\n",
	        r->rt->ndev, in.name, dev_backend_name(dev_backend(r->rt->dev)),
	        sp_format_size(cap, a, sizeof(a)), sp_format_size(total, b, sizeof(b)),
	        r->quarter ? " (a quarter of the training state)"
	        : r->grown
	            ? " (the smallest above a quarter of the training state that a plan fits)"
	            : "");
	/* The model state (weights, gradients, optimizer state) lives across
	 * steps; the activations are one batch's stash, which recomputation and
	 * microbatches never hold all at once: each against the budget apart. */
	uint64_t model = 0, act = 0;
	for (int l = 0; l < r->m.nlayers; l++) {
		const struct rt_layer *y = &r->m.layers[l];
		model += y->param_bytes + y->grad_bytes + y->optim_bytes;
		act += y->stash_per_sample * (uint64_t)r->m.batch;
	}
	double t = total ? (double)total : 1;
	fprintf(r->out,
	        "model state: %s (weights, gradients, optimizer state) = %.2fx the budget\n",
	        sp_format_size(model, b, sizeof(b)), (double)model / t);
	fprintf(r->out,
	        "activations: %s (a batch's, before recomputation) = %.2fx; training state %s = "
	        "%.2fx\n",
	        sp_format_size(act, d, sizeof(d)), (double)act / t,
	        sp_format_size(r->state, a, sizeof(a)), (double)r->state / t);
	fprintf(r->out, "plan: %s\n", r->plan_name);
	int N = tr_run_nodes(r);
	if (N > 1 && r->c.nodes)
		fprintf(r->out,
		        "nodes: %d processes (this is node 0), each on batch %d of %d; gradients "
		        "added across them in rank order%s\n",
		        N, r->batch / N, r->batch,
		        r->plan.zero ? "; ZeRO-1: each updates 1/N of the packs and sends their "
		                       "weights"
		                     : "");
	if (N > 1 && r->plan.zero) { /* what sharding saved here */
		uint64_t held = 0, all = 0;
		const struct tg_model_objs *mo = r->run->mo;
		for (int i = 0; i < mo->nrep * mo->P; i++)
			held += r->run->g.obj[mo->O[i]].bytes;
		for (int l = 0; l < r->m.nlayers; l++)
			all += r->m.layers[l].optim_bytes;
		all *= (uint64_t)mo->nrep;
		fprintf(r->out, "ZeRO-1: node 0 holds %s of the optimizer state's %s (%.0f%%)\n",
		        sp_format_size(held, a, sizeof(a)), sp_format_size(all, b, sizeof(b)),
		        all ? 100.0 * (double)held / (double)all : 0);
	} else if (N > 1)
		fprintf(r->out,
		        "nodes: %d simulated, each on batch %d of %d; inter-node link %.1f GB/s "
		        "(%.0f Gb/s) each way, %.0f us a message\n",
		        N, r->batch / N, r->batch, dev_net_bw(r->rt->dev) / 1e9,
		        dev_net_bw(r->rt->dev) * 8 / 1e9, dev_net_latency(r->rt->dev) * 1e6);
	fflush(r->out);
}

/* SIGINT and SIGTERM while a run catches them: the first sets the flag the
 * loop polls between steps and gives both back their default action, so a
 * second one kills at once. */
static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig)
{
	struct sigaction dfl;
	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	sigemptyset(&dfl.sa_mask);
	sigaction(SIGINT, &dfl, NULL);
	sigaction(SIGTERM, &dfl, NULL);
	stop_signal = sig;
}

const volatile sig_atomic_t *tr_stop_flag(void)
{
	return &stop_signal;
}

static void catch_stop_signals(struct sigaction old[2])
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART; /* the runtime's system calls go on */
	stop_signal = 0;
	sigaction(SIGINT, &sa, &old[0]);
	sigaction(SIGTERM, &sa, &old[1]);
}

/* After step `step` (1-based) of an interrupted run: its checkpoint (unless
 * written already), the report, and the -EINTR message naming them. */
static int stop_interrupted(struct run *r, int step)
{
	int sig = stop_signal;
	char ck[4200] = "";
	if (r->c.checkpoint_dir) {
		char want[4200];
		snprintf(want, sizeof(want), "%s/step_%08d.safetensors", r->c.checkpoint_dir, step);
		if (strcmp(r->last_ckpt, want) != 0)
			SP_CHECK(tr_checkpoint(r, step));
		snprintf(ck, sizeof(ck), "checkpoint %s", r->last_ckpt);
	}
	SP_CHECK(tr_report(r));
	char stats[4200] = "";
	if (r->c.stats_json)
		snprintf(stats, sizeof(stats), "%sstats %s", ck[0] ? ", " : "", r->c.stats_json);
	return sp_error(-EINTR, "interrupted by %s after step %d of %d: %s%s%s",
	                sig == SIGTERM ? "SIGTERM" : "SIGINT", step, r->steps, ck, stats,
	                ck[0] || stats[0] ? " written" : "nothing saved (no --checkpoint)");
}

static uint64_t fnv1a(uint64_t h, const char *s)
{
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return h;
}

/* Nodes launched alike: every node's setup result, then a hash of what must
 * be the same everywhere (the model, the run's recipe, the data, the plan,
 * the step it starts from, and whatever makes a node talk to the others:
 * evaluations, checkpoints). Node 0 reports what differs; the others return
 * the error quietly (tr_result.quiet). */
static int same_on_every_node(struct run *r, int rc)
{
	struct tr_nodes *n = r->c.nodes;
	int rank = tr_nodes_rank(n), first = -1;
	SP_CHECK(tr_nodes_failed(n, rc < 0, &first));
	if (first >= 0) { /* the first that failed reports (node 0: likely everyone's) */
		r->res.agreed = 1;
		if (rank != first)
			r->res.quiet = rank != 0 || rc < 0;
		return rc < 0 ? rc
		              : sp_error(-ECANCELED, "node %d failed to start (its message above)",
		                         first);
	}
	char what[4096];
	snprintf(what, sizeof(what),
	         "%s L%d C%d NH%d V%d T%d B%d %s seed %llu lr %.9g/%d/%d/%.9g wd %.9g clip "
	         "%.9g steps %d optim %s %.9g start %d data %s plan %s zero1 %d eval %d/%d "
	         "ckpt %d/%d",
	         r->preset, r->kc.L, r->kc.C, r->kc.NH, r->kc.V, r->T, r->batch,
	         r->kc.dtype == KN_BF16 ? "bf16" : "fp32", (unsigned long long)r->c.seed,
	         (double)r->lr, r->warmup, r->sched, (double)r->c.lr_min, (double)r->c.weight_decay,
	         (double)r->c.grad_clip, r->steps, rt_optimizer_name(r->m.opt.kind),
	         (double)r->m.opt.momentum, r->start,
	         r->data ? tr_data_describe(r->data) : "synthetic", r->plan_name, r->c.zero1,
	         r->c.eval_every, r->c.eval_batches, r->c.checkpoint_dir != NULL,
	         r->c.checkpoint_every);
	int bad = -1;
	SP_CHECK(tr_nodes_gather_hash(n, fnv1a(0xcbf29ce484222325ull, what), &bad));
	if (bad < 0)
		return 0;
	r->res.agreed = 1;
	r->res.quiet = rank != 0;
	return sp_error(-EINVAL,
	                "node %d was launched with other flags, data or checkpoint than node "
	                "0 (every node must run the same command on the same files): node "
	                "0 has %s",
	                bad, rank == 0 ? what : "(see node 0)");
}

/* What the loop does after `done` steps, besides the progress line. */
enum { DUE_EVAL = 1, DUE_CKPT = 2, DUE_TUNE = 4, DUE_VERIFY = 8 };
static int due_after(const struct run *r, int done)
{
	int ta = r->c.tune_after > 0 ? r->c.tune_after : 3, d = 0;
	if (r->c.eval_every && done % r->c.eval_every == 0 && r->m.eval_data)
		d |= DUE_EVAL;
	if (r->c.checkpoint_dir &&
	    ((r->c.checkpoint_every && done % r->c.checkpoint_every == 0) || done == r->steps))
		d |= DUE_CKPT;
	if (r->c.tune && done == r->start + ta && done < r->steps)
		d |= DUE_TUNE;
	if (r->switch_step && !r->verified && done == r->switch_step + 1 + ta && done < r->steps)
		d |= DUE_VERIFY;
	return d;
}

/* What follows step `step` (0-based) of the loop: its loss and progress, the
 * evaluation, checkpoint, tuning and stop it is due. Returns 0 to go on, 1 to
 * end the loop (*rc: 0 or the error), 2 to end the run at once (stopped). */
static int after_step(struct run *r, int step, double loss, double t1, double dt, int caught,
                      int block_end, int *rc)
{
	if (isnan(r->res.first_loss))
		r->res.first_loss = loss;
	r->losses[step] = loss;
	r->times[step] = dt;
	r->res.last_loss = loss;
	r->res.steps++;
	/* the model backend moves no data: its loss is always NaN */
	int diverged = !isfinite(loss) && dev_backend(r->rt->dev) != DEV_BACKEND_MODEL;
	if (block_end || diverged) /* the block's steps end together */
		progress(r, step + 1, loss, t1, step + 1 == r->steps || diverged);
	if (diverged) {
		r->diverged = 1;
		*rc = sp_error(-ERANGE, "diverged at step %d: the loss is %s (lower --lr?); %s%s",
		               step + 1, isnan(loss) ? "nan" : "inf",
		               r->last_ckpt[0] ? "the last good checkpoint is "
		                               : "no checkpoint was written",
		               r->last_ckpt);
		return 1;
	}
	int due = due_after(r, step + 1);
	if (due & DUE_EVAL) {
		double el;
		if ((*rc = evaluate(r, &el)) < 0)
			return 1;
		r->res.last_eval = el;
		fprintf(r->out, "%seval at step %d: validation loss %.4f\n", r->c.tty ? "\n" : "",
		        step + 1, el);
	}
	if ((due & DUE_CKPT) && (*rc = tr_checkpoint(r, step + 1)) < 0)
		return 1;
	if ((due & DUE_TUNE) && (*rc = tr_tune(r)) < 0)
		return 1;
	/* after the tuner: a switch it just made sets what verifies it */
	if ((due_after(r, step + 1) & DUE_VERIFY) && (*rc = tr_tune_verify(r)) < 0)
		return 1;
	/* every node stops after the same step (node 0 writes its checkpoint),
	 * the last of a block: the state is there */
	if (!block_end)
		return 0;
	int stop = caught && stop_signal;
	if (r->c.nodes && step + 1 < r->steps)
		stop = tr_nodes_any(r->c.nodes, stop);
	if (stop && step + 1 < r->steps) {
		*rc = stop_interrupted(r, step + 1);
		return 2;
	}
	return 0;
}

/* The steps the next run of the program makes from `step`: 1, or under 2bw
 * with --flush-every K up to K, ending at the next step after which the loop
 * does something (an evaluation, a checkpoint, the tuner, the last step) or
 * may stop (a signal is looked at after each block). */
static int block_steps(const struct run *r, int step)
{
	int most = r->run->mo->nstep, n = 1;
	while (n < most && step + n < r->steps && !due_after(r, step + n))
		n++;
	return n;
}

int tr_train(const struct tr_config *cfg, struct tr_result *res)
{
	SP_CHECK_ARG(cfg, "tr_train: NULL config");
	struct run *r = calloc(1, sizeof(*r));
	if (!r)
		return sp_error(-ENOMEM, "train: out of memory");
	r->c = *cfg;
	r->out = cfg->out ? cfg->out : stdout;
	FILE *devnull = NULL;
	if (!tr_writer(r)) /* node 0 prints for the run */
		r->out = devnull = fopen("/dev/null", "w");
	if (!r->out) {
		free(r);
		return sp_error(-errno, "train: cannot open /dev/null");
	}
	if (tr_run_nodes(r) > 1)
		r->c.tune = 0; /* every node must run the same plan: no tuner decides alone */
	tr_nodes_set_checkpoint(r->c.nodes, r->last_ckpt);
	int rc = setup(r), caught = 0;
	struct sigaction old_sig[2];
	if (rc == 0 && r->c.resume)
		rc = tr_resume(r);
	if (r->c.nodes) /* every node set up, then node 0 alone claims the directory */
		rc = same_on_every_node(r, rc);
	/* the directory is this run's from here on: --overwrite removes the
	 * checkpoints of the run it replaces (a resumed run only those of a
	 * resumed file's abandoned later steps) */
	if (rc == 0 && r->c.checkpoint_dir && (!r->c.resume || r->c.resume_file))
		rc = tr_claim_dir(r, 1);
	if (rc < 0)
		goto out;
	if (r->c.catch_signals) {
		catch_stop_signals(old_sig);
		caught = 1;
	}
	banner(r);
	r->wsteps = snprintf(NULL, 0, "%d", r->steps);
	r->t_first = r->p_time = dev_now(r->rt->dev);
	r->p_step = r->start;
	r->p_h2d = vmm_xfer_bytes(r->rt->vmm, VMM_XFER_H2D);
	r->p_d2h = vmm_xfer_bytes(r->rt->vmm, VMM_XFER_D2H);
	r->res.first_loss = NAN;
	r->res.last_eval = NAN;
	r->losses = calloc((size_t)r->steps + 1, sizeof(double));
	r->times = calloc((size_t)r->steps + 1, sizeof(double));
	if (!r->losses || !r->times) {
		rc = sp_error(-ENOMEM, "train: out of memory");
		goto out;
	}
	for (int step = r->start, n = 1, end = 0; step < r->steps && !end; step += n) {
		/* a block of n steps, one run of the program (2bw: up to
		 * --flush-every; it ends where something is done between steps) */
		n = block_steps(r, step);
		float lr[TG_MAX_FLUSH_EVERY];
		double losses[TG_MAX_FLUSH_EVERY];
		for (int j = 0; j < n; j++)
			lr[j] = tr_lr_at(r, step + j);
		double t0 = dev_now(r->rt->dev);
		rc = rt_run_steps(r->run, n, lr, losses);
		r->m.opt.lr = lr[n - 1]; /* the last step's, as a step by step loop leaves it */
		if (rc < 0) {
			rc = n > 1 ? sp_error(rc, "steps %d..%d: %s", step + 1, step + n,
			                      sp_last_error())
			           : sp_error(rc, "step %d: %s", step + 1, sp_last_error());
			break;
		}
		double t1 = dev_now(r->rt->dev);
		tr_account_step(r, t0, t1, n);
		if (step == r->start)
			tr_account_cold(r, n);
		if (r->c.trace_file)
			tr_trace_step(&r->trace, r, t0, n);
		for (int j = 0; j < n && !end; j++)
			end = after_step(r, step + j, losses[j], t1, (t1 - t0) / n, caught,
			                 j == n - 1, &rc);
		if (end > 1)
			goto out;
	}
	if (rc == 0) {
		rc = tr_report(r);
	} else if (r->diverged) { /* what it did until then, the NaN included */
		char why[SP_ERROR_MSG_MAX];
		snprintf(why, sizeof(why), "%s", sp_last_error());
		(void)!tr_report(r);
		sp_error(rc, "%s", why);
	}
	if (rc == 0 && r->c.trace_file && tr_writer(r))
		rc = tr_trace_write(&r->trace, r, r->c.trace_file);
out:
	if (rc == -EINTR || r->diverged) { /* every node stops at the same step */
		r->res.agreed = 1;
		r->res.quiet = !tr_writer(r);
	} else if (rc < 0 && r->c.nodes && !r->res.agreed &&
	           tr_nodes_all_failed(r->c.nodes, 10.0)) { /* the same error everywhere */
		r->res.agreed = 1;
		r->res.quiet = !tr_writer(r);
	}
	if (res) {
		r->res.seconds = r->t_total;
		r->res.step_s = r->res.steps ? r->t_total / r->res.steps : 0;
		r->res.tokens_per_s =
		    r->t_total > 0 ? (double)r->res.steps * r->batch * r->T / r->t_total : 0;
		snprintf(r->res.plan, sizeof(r->res.plan), "%s", r->plan_name);
		r->res.batch = r->batch;
		if (r->rt) {
			struct vmm_stats st;
			vmm_stats_get(r->rt->vmm, &st);
			r->res.evictions = (uint64_t)st.evictions.total;
		}
		*res = r->res;
	}
	if (caught) {
		sigaction(SIGINT, &old_sig[0], NULL);
		sigaction(SIGTERM, &old_sig[1], NULL);
	}
	char msg[SP_ERROR_MSG_MAX];
	snprintf(msg, sizeof(msg), "%s", sp_last_error());
	tr_nodes_set_checkpoint(r->c.nodes, NULL);
	run_free(r);
	free(r);
	if (devnull)
		fclose(devnull);
	return rc < 0 ? sp_error(rc, "%s", msg) : 0;
}

int tr_eval(const struct tr_config *cfg, double *loss)
{
	SP_CHECK_ARG(cfg && cfg->init && loss, "tr_eval: no weights to evaluate");
	struct run *r = calloc(1, sizeof(*r));
	if (!r)
		return sp_error(-ENOMEM, "eval: out of memory");
	r->c = *cfg;
	r->c.tune = 0;
	r->out = cfg->out ? cfg->out : stdout;
	int rc = setup(r);
	if (rc == 0 && !r->m.eval_data)
		rc = sp_error(-EINVAL,
		              "corpus %s: its validation split has %llu tokens, not more than a "
		              "sequence of %d",
		              tr_data_describe(r->data),
		              (unsigned long long)tr_data_tokens(r->data, TR_VAL), r->T);
	double l = 0;
	if (rc == 0) {
		/* the batches the training drew: a checkpoint's seed unless asked */
		if (r->init.has_run && !cfg->seed_given)
			r->c.seed = r->init.seed;
		rc = evaluate(r, &l);
	}
	if (rc == 0) {
		int n = r->c.eval_batches > 0 ? r->c.eval_batches : 4;
		fprintf(r->out,
		        "eval %s (%s: %d layers, %d channels, %d heads, vocab %d): validation loss "
		        "%.4f (%.9g) on %d batches of %d x %d tokens, seed %llu, of %s\n",
		        cfg->init, r->init.kind, r->kc.L, r->kc.C, r->kc.NH, r->kc.V, l, l, n,
		        r->batch, r->T, (unsigned long long)r->c.seed, tr_data_describe(r->data));
		*loss = l;
	}
	char msg[SP_ERROR_MSG_MAX];
	snprintf(msg, sizeof(msg), "%s", sp_last_error());
	run_free(r);
	free(r);
	return rc < 0 ? sp_error(rc, "%s", msg) : 0;
}

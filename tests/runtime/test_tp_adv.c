/* tests/runtime/test_tp_adv.c — tensor parallelism (plan.tp) against the
 * reference loop in the tensor-parallel form, beyond test_tp (an adversary's
 * test). The contract (runtime.h): every run with tp = 2 or 4 gives the bits
 * of rt_reference on the same tp-form model (2bw: rt_reference_set_2bw) —
 * every step's loss, final weights and optimizer state — under any budget
 * that runs, pack split, microbatch, stage count and pipeline schedule.
 *
 * Part 1 (fuzz): each case draws a tp-form GPT-2 (NH 4/8/12, C 16..96, T
 * 1..8, batch 1..8, AdamW / SGD / SGD with momentum, weight decay), a plan
 * (gpipe, 1f1b, interleaved, 2bw with flush_every 1..4, harmony-pp with
 * groups; t 2 or 4; 1..8/t stages; random packs, one layer each or mixing
 * embedding, blocks and head; the CPU update), executor settings (threads,
 * window, lookahead, late binding, ordered, every device's kernels jittered,
 * the disk tier) and a budget from the working set (the smallest that runs
 * from there: eviction) up to ample, and 3..9 steps in blocks of random sizes
 * with random learning rates; before each block one action:
 *   1 m->opt.lr changes (rt_run_step must follow it)
 *   2 state compared with the reference's
 *   3 evaluation: the loss a one-device run with the reference's weights gets,
 *     and later losses unchanged
 *   4 rollback: save, the block, restore, set_step, the block again
 *   5 every state read, written back and read again (a no-op)
 *   6 the state moved to a run of another plan (t 1, 2 or 4) by read/write
 *     state + set_step
 *   7 the block one step a call
 * The graph of each plan is checked against the plan's graph without tp
 * (check_widening: members, devices, objects, sets, order, tables), and the
 * bytes the first block exchanges (rt_stats.tp_bytes) against the graph's
 * tasks' xchg_bytes.
 * Part 2 (model backend): tp plans run without an error, losses NAN; the
 * state functions refuse; rt_plan_simulate predicts them.
 * Part 3 (api): rt_model_gpt_members' sizes, rt_layer_init_member's values;
 * what tp does not take is -EINVAL/-ENOTSUP with one line naming it.
 * Part 4 (bugs this test found, fixed since; they run every time): a tp run
 * ignored the caller's model changed after rt_run_open (lr, weight decay,
 * eval_data); a model of shard blocks (cfg.tp_shards) opened and its state
 * reads overflowed; rt_plan_choose gave tp plans rt_run_open refuses.
 * Part 5 (twin): runs of t 2 and 4 (or none) in one context, steps
 * interleaved.
 *
 * argv[1]: fuzz cases (default 20); argv[2]: first seed (default 1);
 * argv[3]: twin cases (default 4). TP_ADV_VERBOSE=1 prints every case;
 * TP_ADV_T=1|2|4 fixes t (1: no tp, to check the harness), TP_ADV_ACT=k
 * takes action k before every block. */
#include "kernels/kernels.h"
#include "runtime/runtime.h"
#include "tests/test.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAXSTEPS 9
#define MAXL     8

static uint64_t rng;
static uint32_t rnd(uint32_t n)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return (uint32_t)((rng >> 33) % n);
}

static uint64_t mix(uint64_t z) /* splitmix64: seeds far apart */
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static int failures, verbose, known_bugs, evicting;

struct ctxopt {
	const char *profile;
	int ndev, backend, disk;
	uint64_t budget, host_mem;
	char jitter[48];
	int exec, threads, window, lookahead, eager_wb, hints, place_hints, ordered, late, steal;
};

static char diskdir[64];

static struct rt_ctx *open_rt(const struct ctxopt *o)
{
	struct sp_params sp;
	sp_params_defaults(&sp);
	sp.host_jitter = (char *)o->jitter;
	if (o->disk)
		sp.disk_path = diskdir;
	struct rt_config c;
	CHECK_OK(rt_config_from_params(&sp, &c));
	c.dev.backend = o->backend;
	c.dev.profile = o->profile;
	c.dev.ndevices = o->ndev;
	c.dev.device_mem = o->budget > (64 << 20) ? o->budget : 64 << 20;
	c.vmm.device_mem = o->budget;
	c.vmm.host_mem = o->host_mem ? o->host_mem : 64 << 20;
	c.vmm.max_objects = 16384;
	c.threads = 1;
	if (o->exec) {
		c.threads = o->threads;
		c.exec.window = o->window;
		c.exec.lookahead = o->lookahead;
		c.exec.eager_writeback = o->eager_wb;
		c.exec.hints = o->hints;
		c.exec.place_hints = o->place_hints;
		c.exec.ordered = o->ordered;
		c.exec.late_binding = o->late;
		c.exec.steal_eager = o->steal;
	}
	struct rt_ctx *rt;
	if (rt_open(&c, &rt) < 0) {
		printf("  rt_open (%d devices, budget %" PRIu64 "): %s\n", o->ndev, o->budget,
		       sp_last_error());
		return NULL;
	}
	return rt;
}

/* ---- a model ---- */
struct mdl {
	struct kn_model_config cfg;
	int T, batch, opt;
	uint64_t dseed;
	struct rt_model m;
};

static void draw_model(struct mdl *d, uint64_t seed)
{
	static const int shapes[][2] = {{4, 16}, {4, 32},  {8, 32}, {4, 48},
	                                {8, 48}, {12, 48}, {8, 64}, {12, 96}};
	int si = (int)rnd(SP_ARRAY_SIZE(shapes));
	static const int Ts[] = {1, 2, 4, 8, 8};
	d->T = Ts[rnd(SP_ARRAY_SIZE(Ts))];
	d->cfg = (struct kn_model_config){.maxT = 8,
	                                  .V = 32 << rnd(2),
	                                  .L = 1 + (int)rnd(4),
	                                  .NH = shapes[si][0],
	                                  .C = shapes[si][1],
	                                  .tp_form = 1};
	d->batch = 1 << rnd(4);
	CHECK_OK(rt_model_gpt(&d->cfg, d->T, d->batch, &d->m));
	d->dseed = seed;
	d->m.data_arg = &d->dseed;
	d->m.eval_data = rt_gpt_synthetic_data;
	d->opt = (int)rnd(3);
	CHECK_OK(rt_model_set_optimizer(&d->m, d->opt ? KN_SGD : KN_ADAMW, d->opt == 2 ? 0.9f : 0));
	d->m.opt.lr = d->opt ? 0.05f : 3e-3f;
	d->m.opt.weight_decay = rnd(2) ? 0.1f : 0;
	d->m.opt.grad_clip = 0;
}

static void rand_packs(struct tg_plan *p, int L, int least)
{
	do {
		p->npacks = 0;
		if (rnd(4) == 0) { /* a pack a layer */
			for (int l = 0; l < L; l++)
				p->pack_end[p->npacks++] = l + 1;
		} else {
			for (int l = 0; l < L;) {
				int len = 1 + (int)rnd(rnd(4) == 0 ? (uint32_t)L : 2);
				l = l + len > L ? L : l + len;
				p->pack_end[p->npacks++] = l;
			}
		}
	} while (p->npacks < least && least <= L);
}

/* A tp plan for d (0, or -1 when none was drawn that builds). */
static int draw_plan(struct tg_plan *p, const struct mdl *d, int tp)
{
	static const int scheds[] = {TG_GPIPE, TG_1F1B, TG_INTERLEAVED, TG_2BW, TG_HARMONY_PP};
	int L = d->m.nlayers;
	memset(p, 0, sizeof(*p));
	p->sched = scheds[rnd(SP_ARRAY_SIZE(scheds))];
	p->tp = tp > 1 ? tp : 0;
	int most = 8 / (tp > 1 ? tp : 1);
	int stages = 1 + (int)rnd((uint32_t)(most < 4 ? most : 4));
	p->ndev = stages * (tp > 1 ? tp : 1);
	int mbs[4], nm = 0;
	for (int mb = 1; mb <= d->batch; mb *= 2)
		mbs[nm++] = mb;
	p->microbatch = mbs[rnd((uint32_t)nm)];
	int mm = d->batch / p->microbatch;
	p->group = 1;
	if (p->sched == TG_HARMONY_PP) {
		int g[4], ng = 0;
		for (int x = 1; x <= mm; x *= 2)
			g[ng++] = x;
		p->group = g[rnd((uint32_t)ng)];
	}
	if (p->sched == TG_INTERLEAVED) {
		if (stages == 1)
			p->sched = TG_1F1B;
		else if (L >= 2 * stages) {
			int v = 2 + (int)rnd((uint32_t)(L / stages - 1));
			if (v * stages > L)
				v = L / stages;
			p->npacks = v * stages;
			for (int i = 0; i < p->npacks; i++)
				p->pack_end[i] = L * (i + 1) / p->npacks;
		} else {
			p->sched = TG_GPIPE;
		}
	}
	if (!p->npacks)
		rand_packs(p, L, stages);
	p->upd_cpu = rnd(4) == 0;
	if (p->sched == TG_2BW)
		p->flush_every = 1 + (int)rnd(4);
	return 0;
}

static const char *plan_str(const struct tg_plan *p)
{
	static char s[160];
	int n = snprintf(s, sizeof(s), "%s %d dev tp %d mb %d, packs", tg_sched_name(p->sched),
	                 p->ndev, p->tp, p->microbatch);
	for (int i = 0; i < p->npacks && n < 120; i++)
		n += snprintf(s + n, sizeof(s) - (size_t)n, "%s%d", i ? "," : " ", p->pack_end[i]);
	snprintf(s + n, sizeof(s) - (size_t)n, "%s", p->upd_cpu ? " cpu-upd" : "");
	if (p->sched == TG_2BW)
		snprintf(s + strlen(s), sizeof(s) - strlen(s), " K %d", p->flush_every);
	if (p->group > 1)
		snprintf(s + strlen(s), sizeof(s) - strlen(s), " group %d", p->group);
	return s;
}

/* The widened graph g (plan.tp = t) against the graph of the same members'
 * model on ndev / t devices without tp (base): task i's member r is task
 * i*t + r on device dev*t + r (the host stays the host), object o's member r
 * is o*t + r, a member reads, writes and depends on its own members only, and
 * FWD and BWD members form a set (tp_set: the base task), the model's tables
 * hold member 0's ids (tg_mo_member: + r). Returns the problems found. */
static int check_widening(const struct tg_graph *g, const struct tg_graph *base, int t)
{
	int bad = 0;
#define WIDEN_CHECK(cond, ...)                                   \
	do {                                                     \
		if (!(cond) && bad++ < 3) {                      \
			printf("  widened graph: " __VA_ARGS__); \
			printf("\n");                            \
		}                                                \
	} while (0)
	WIDEN_CHECK(g->tp == t && g->ntask == base->ntask * t && g->nobj == base->nobj * t &&
	                g->ndev == base->ndev * t,
	            "%d tasks, %d objects, %d devices, tp %d; base %d, %d, %d", g->ntask, g->nobj,
	            g->ndev, g->tp, base->ntask, base->nobj, base->ndev);
	if (bad)
		return bad;
	for (int o = 0; o < g->nobj; o++)
		WIDEN_CHECK(g->obj[o].kind == base->obj[o / t].kind &&
		                g->obj[o].bytes == base->obj[o / t].bytes,
		            "object %d is not base object %d's member", o, o / t);
	for (int i = 0; i < g->ntask; i++) {
		const struct tg_task *w = &g->task[i], *b = &base->task[i / t];
		int r = i % t, fb = b->kind == TG_FWD || b->kind == TG_BWD;
		WIDEN_CHECK(w->member == r && w->kind == b->kind && w->pack == b->pack &&
		                w->mb0 == b->mb0 && w->nmb == b->nmb && w->step == b->step &&
		                w->nread == b->nread && w->nwrite == b->nwrite &&
		                w->ndep == b->ndep,
		            "task %d is not base task %d's member %d", i, i / t, r);
		WIDEN_CHECK(w->dev == (b->dev < 0 ? b->dev : b->dev * t + r),
		            "task %d (member %d) on device %d, base task on %d", i, r, w->dev,
		            b->dev);
		WIDEN_CHECK(w->tp_set == (fb ? i / t : -1), "task %d: tp_set %d", i, w->tp_set);
		for (int k = 0; k < w->nread && k < b->nread; k++)
			WIDEN_CHECK(w->read[k] == b->read[k] * t + r, "task %d read %d: %d", i, k,
			            w->read[k]);
		for (int k = 0; k < w->nwrite && k < b->nwrite; k++)
			WIDEN_CHECK(w->write[k] == b->write[k] * t + r, "task %d write %d: %d", i,
			            k, w->write[k]);
		for (int k = 0; k < w->ndep && k < b->ndep; k++)
			WIDEN_CHECK(w->dep[k] == b->dep[k] * t + r, "task %d dep %d: %d", i, k,
			            w->dep[k]);
		WIDEN_CHECK(w->work == (b->work < 0 ? -1 : b->work * t + r), "task %d work %d", i,
		            w->work);
	}
	/* the global order lists a task's members together */
	for (int i = 0; i + t <= g->ntask; i += t)
		for (int r = 0; r < t; r++)
			WIDEN_CHECK(g->order[i + r] == base->order[i / t] * t + r,
			            "order[%d] = %d, base order[%d] = %d", i + r, g->order[i + r],
			            i / t, base->order[i / t]);
	const struct tg_model_objs *mo = &g->mobj[0], *bo = &base->mobj[0];
	WIDEN_CHECK(mo->tp == t, "mobj tp %d", mo->tp);
	for (int i = 0; i < mo->nrep * mo->P; i++)
		for (int r = 0; r < t; r++) {
			WIDEN_CHECK(tg_mo_member(mo, mo->W, i, r) == bo->W[i] * t + r &&
			                tg_mo_member(mo, mo->G, i, r) == bo->G[i] * t + r &&
			                tg_mo_member(mo, mo->O, i, r) == bo->O[i] * t + r,
			            "W/G/O [%d] member %d", i, r);
		}
#undef WIDEN_CHECK
	return bad;
}

/* The working set of plan p for the members' model of m (0: it does not
 * build); xchg (may be NULL): the bytes the FWD and BWD tasks of each step of
 * the program pull from other members, as the graph predicts them. */
static uint64_t min_cap(const struct rt_model *m, const struct tg_plan *p, double *xchg)
{
	struct rt_model mm;
	const struct rt_model *use = m;
	if (p->tp > 1) {
		CHECK_OK(rt_model_gpt_members(m, p->tp, &mm));
		use = &mm;
	}
	struct tg_layer tl[MAXL];
	struct tg_model tm;
	rt_model_tg(use, tl, &tm);
	struct tg_graph g;
	uint64_t ws = 0;
	if (tg_graph_build(&tm, 1, p, &g) == 0) {
		int v = tg_graph_validate(&g);
		if (v < 0) {
			printf("  %s: tg_graph_validate: %d: %s\n", plan_str(p), v,
			       sp_last_error());
			failures++;
		}
		struct tg_plan bp = *p;
		bp.tp = 0;
		bp.ndev = p->ndev / (p->tp > 1 ? p->tp : 1);
		struct tg_graph base;
		if (p->tp > 1) {
			CHECK_OK(tg_graph_build(&tm, 1, &bp, &base));
			if (check_widening(&g, &base, p->tp)) {
				printf("  %s: the widened graph is not the base graph's members\n",
				       plan_str(p));
				failures++;
			}
			tg_graph_free(&base);
		}
		for (int i = 0; i < g.ntask && xchg; i++)
			xchg[g.task[i].step] += g.task[i].xchg_bytes;
		ws = tg_graph_min_capacity(&g, NULL);
		tg_graph_free(&g);
	}
	if (p->tp > 1)
		free(mm.layers);
	return ws;
}

static int compare(struct rt_run *run, const struct rt_reference *ref, const struct rt_model *m,
                   const char *what, int step)
{
	int bad = 0;
	for (int l = 0; l < m->nlayers; l++) {
		const struct rt_layer *ly = &m->layers[l];
		uint64_t n = rt_run_state_bytes(run, l, RT_PARAMS);
		if (n != ly->param_bytes) {
			printf("  %s: layer %s: %" PRIu64 " parameter bytes, the model has %" PRIu64
			       "\n",
			       what, ly->name, n, ly->param_bytes);
			bad++;
			continue;
		}
		char *w = malloc(n + 4);
		CHECK_OK(rt_run_read_state(run, l, RT_PARAMS, w));
		if (memcmp(w, ref->params[l], n)) {
			printf("  %s: after %d steps: layer %s weights differ\n", what, step,
			       ly->name);
			bad++;
		}
		free(w);
		if (ref->shadow) {
			n = rt_run_state_bytes(run, l, RT_PARAMS_PREV);
			w = malloc(n + 4);
			CHECK_OK(rt_run_read_state(run, l, RT_PARAMS_PREV, w));
			if (n != ly->param_bytes || memcmp(w, ref->shadow[l], n)) {
				printf("  %s: after %d steps: layer %s older weights differ\n",
				       what, step, ly->name);
				bad++;
			}
			free(w);
		}
		n = rt_run_state_bytes(run, l, RT_OPTIM);
		if (n != ly->optim_bytes) {
			printf("  %s: layer %s: %" PRIu64 " optimizer bytes, the model has %" PRIu64
			       "\n",
			       what, ly->name, n, ly->optim_bytes);
			bad++;
			continue;
		}
		if (n) {
			w = malloc(n + 4);
			CHECK_OK(rt_run_read_state(run, l, RT_OPTIM, w));
			if (memcmp(w, ref->optim[l], n)) {
				printf("  %s: after %d steps: layer %s optimizer state differs\n",
				       what, step, ly->name);
				bad++;
			}
			free(w);
		}
	}
	return bad;
}

/* Every state of run a written into run b (both of m; a == b: a no-op). A
 * layer's states are all read before any is written: writing RT_PARAMS sets
 * 2bw's both versions. */
static void move_state(struct rt_run *a, struct rt_run *b, const struct rt_model *m)
{
	for (int l = 0; l < m->nlayers; l++) {
		void *buf[3] = {NULL, NULL, NULL};
		uint64_t n[3];
		for (int w = RT_PARAMS; w <= RT_PARAMS_PREV; w++) {
			n[w] = rt_run_state_bytes(a, l, (enum rt_state)w);
			CHECK(n[w] == rt_run_state_bytes(b, l, (enum rt_state)w) ||
			      (w == RT_PARAMS_PREV && a != b));
			if (!n[w])
				continue;
			CHECK((buf[w] = malloc(n[w])) != NULL);
			CHECK_OK(rt_run_read_state(a, l, (enum rt_state)w, buf[w]));
		}
		for (int w = RT_PARAMS; w <= RT_PARAMS_PREV; w++) {
			if (buf[w] && rt_run_state_bytes(b, l, (enum rt_state)w))
				CHECK_OK(rt_run_write_state(b, l, (enum rt_state)w, buf[w]));
		}
		for (int w = RT_PARAMS; w <= RT_PARAMS_PREV && a == b; w++) {
			if (!buf[w])
				continue;
			void *back = malloc(n[w]);
			CHECK_OK(rt_run_read_state(a, l, (enum rt_state)w, back));
			if (memcmp(back, buf[w], n[w])) {
				printf("  layer %s: state %d written back reads differently\n",
				       m->layers[l].name, w);
				failures++;
			}
			free(back);
		}
		for (int w = RT_PARAMS; w <= RT_PARAMS_PREV; w++)
			free(buf[w]);
	}
}

/* The loss of evaluation batch idx with the reference's newest weights (a
 * one-device 1f1b run of the same tp-form model given them). */
static double eval_newest(const struct rt_model *m, int mb, const struct rt_reference *ref, int idx)
{
	struct tg_plan q = {.sched = TG_1F1B, .ndev = 1, .npacks = 1, .microbatch = mb, .group = 1};
	q.pack_end[0] = m->nlayers;
	struct ctxopt o = {.ndev = 1, .backend = DEV_BACKEND_HOST, .budget = 64 << 20};
	struct rt_ctx *rt = open_rt(&o);
	CHECK(rt != NULL);
	struct rt_run *r;
	CHECK_OK(rt_run_open(rt, m, &q, 42, &r));
	for (int l = 0; l < m->nlayers; l++)
		CHECK_OK(rt_run_write_state(r, l, RT_PARAMS, ref->params[l]));
	double loss;
	CHECK_OK(rt_run_eval(r, idx, &loss));
	rt_run_close(r);
	rt_close(rt);
	return loss;
}

static void draw_exec(struct ctxopt *o)
{
	o->exec = rnd(3) != 0;
	o->threads = 1 + (int)rnd(2);
	o->window = 1 + (int)rnd(4);
	o->lookahead = (int)rnd(5);
	o->eager_wb = (int)rnd(2);
	o->hints = (int)rnd(2);
	o->place_hints = (int)rnd(2);
	o->ordered = rnd(4) == 0;
	o->late = (int)rnd(2);
	o->steal = (int)rnd(2);
	/* every device's kernels start up to 300 us late: the members reach
	 * their exchanges in any order */
	if (rnd(3) == 0)
		snprintf(o->jitter, sizeof(o->jitter), "*:300:%u", rnd(1000));
	o->disk = SPILL_HAVE_URING && rnd(4) == 0;
}

/* Raises o->budget by an eighth until one step of m under p runs (0: none
 * up to 8x the start did). */
static int probe_budget(const struct rt_model *m, const struct tg_plan *p, struct ctxopt *o)
{
	for (uint64_t top = o->budget * 8; o->budget <= top; o->budget += o->budget / 8) {
		struct rt_ctx *rt = open_rt(o);
		CHECK(rt != NULL);
		struct rt_run *run;
		int rc = rt_run_open(rt, m, p, 42, &run);
		double loss;
		if (rc == 0) {
			rc = rt_run_step(run, &loss);
			rt_run_close(run);
		}
		rt_close(rt);
		if (rc == 0)
			return 1;
		if (rc != -ENOMEM) {
			printf("  %s, budget %" PRIu64 ": %d %s\n", plan_str(p), o->budget, rc,
			       sp_last_error());
			failures++;
			return 0;
		}
	}
	return 0;
}

/* ---- part 1: fuzz ---- */
static int fuzz_case(uint64_t seed)
{
	rng = mix(seed);
	rnd(2);
	struct mdl d;
	draw_model(&d, seed);
	struct rt_model *m = &d.m;
	struct tg_plan p;
	int tp0 = rnd(2) ? 2 : 4;
	if (getenv("TP_ADV_T"))
		tp0 = atoi(getenv("TP_ADV_T"));
	draw_plan(&p, &d, tp0);
	double xchg[TG_MAX_FLUSH_EVERY] = {0};
	uint64_t ws = min_cap(m, &p, xchg);
	if (!ws) {
		if (verbose)
			printf("  seed %" PRIu64 ": %s does not build: %s\n", seed, plan_str(&p),
			       sp_last_error());
		rt_model_free(m);
		return 0;
	}
	struct ctxopt o = {.ndev = p.ndev, .backend = DEV_BACKEND_HOST};
	draw_exec(&o);
	/* a budget from the working set up; the smallest that runs from there
	 * (raised by an eighth until a step runs) */
	static const double factors[] = {0.7, 0.9, 1.0, 1.0, 1.0, 1.25, 2, 64};
	double f = factors[rnd(SP_ARRAY_SIZE(factors))];
	o.budget = (uint64_t)((double)ws * f);
	if (o.disk) { /* a host pool of a third of the state: the disk tier holds the rest */
		uint64_t state = 0;
		for (int l = 0; l < m->nlayers; l++)
			state += 2 * m->layers[l].param_bytes + m->layers[l].grad_bytes +
			         m->layers[l].optim_bytes;
		o.host_mem = (state * (uint64_t)p.tp / 3 + 4095) / 4096 * 4096;
	}
	if (f < 64 && !probe_budget(m, &p, &o)) {
		printf("  seed %" PRIu64 ": %s: no budget up to 8x the working set runs\n", seed,
		       plan_str(&p));
		failures++;
		rt_model_free(m);
		return 0;
	}
	f = (double)o.budget / (double)ws;
	int steps = 3 + (int)rnd(MAXSTEPS - 2);

	char what[400];
	snprintf(what, sizeof(what),
	         "seed %" PRIu64 ": L %d NH %d C %d V %d T %d batch %d, %s wd %g; %s, %d steps, "
	         "budget %.2fx%s%s; exec %d t%d w%d la%d ewb%d h%d ph%d ord%d late%d steal%d",
	         seed, d.cfg.L, d.cfg.NH, d.cfg.C, d.cfg.V, d.T, d.batch,
	         d.opt ? (d.opt == 2 ? "sgd+mom" : "sgd") : "adamw", (double)m->opt.weight_decay,
	         plan_str(&p), steps, f, o.disk ? " disk" : "", o.jitter[0] ? " jitter" : "",
	         o.exec, o.threads, o.window, o.lookahead, o.eager_wb, o.hints, o.place_hints,
	         o.ordered, o.late, o.steal);
	if (verbose)
		printf("  %s\n", what);

	struct rt_reference *ref;
	CHECK_OK(rt_reference_open(m, 1, p.microbatch, 42, &ref));
	if (p.sched == TG_2BW)
		CHECK_OK(rt_reference_set_2bw(ref));
	struct rt_ctx *rt = open_rt(&o);
	CHECK(rt != NULL);
	struct rt_run *run;
	int rc = rt_run_open(rt, m, &p, 42, &run);
	if (rc < 0) {
		if (rc != -ENOMEM) {
			printf("  %s: rt_run_open %d: %s\n", what, rc, sp_last_error());
			failures++;
		} else if (verbose) {
			printf("    -ENOMEM at open: %s\n", sp_last_error());
		}
		rt_close(rt);
		rt_reference_close(ref);
		rt_model_free(m);
		return 0;
	}
	int ran = 1, bad = 0, fresh = 1;
	char log[512] = "";
	void **saved = NULL;
	for (int s = 0, n = 1; s < steps && !bad; s += n) {
		int act = s ? 1 + (int)rnd(8) : 0;
		if (getenv("TP_ADV_ACT"))
			act = s ? atoi(getenv("TP_ADV_ACT")) : 0;
		char a[64];
		snprintf(a, sizeof(a), " %d", act);
		strncat(log, a, sizeof(log) - strlen(log) - 1);
		switch (act) {
		case 1: m->opt.lr *= rnd(2) ? 2.0f : 0.5f; break;
		case 2: bad += compare(run, ref, m, what, s); break;
		case 3: {
			int idx = (int)rnd(5);
			double le;
			rc = rt_run_eval(run, idx, &le);
			if (rc < 0) {
				printf("  %s: eval before step %d: %d %s\n", what, s, rc,
				       sp_last_error());
				bad++;
				break;
			}
			double want = eval_newest(m, p.microbatch, ref, idx);
			if (le != want) {
				printf("  %s: eval before step %d: %.9g, the newest weights give "
				       "%.9g\n",
				       what, s, le, want);
				bad++;
			}
			break;
		}
		case 5: move_state(run, run, m); break;
		case 6: {
			/* another plan: t drawn again (1: no tp; the model stays in tp form),
			 * 2bw stays 2bw (its state has the older version) */
			struct tg_plan q;
			static const int tps[] = {1, 2, 4};
			int t2 = tps[rnd(3)];
			for (int tries = 0; tries < 8; tries++) {
				draw_plan(&q, &d, t2);
				if ((q.sched == TG_2BW) == (p.sched == TG_2BW))
					break;
			}
			if ((q.sched == TG_2BW) != (p.sched == TG_2BW))
				break;
			q.microbatch = p.microbatch; /* the reference's order of microbatches */
			q.group = 1;
			if (q.sched == TG_2BW && p.sched == TG_2BW)
				q.flush_every = 1 + (int)rnd(4);
			uint64_t ws2 = min_cap(m, &q, NULL);
			if (!ws2)
				break;
			struct ctxopt o2 = o;
			o2.ndev = q.ndev;
			o2.budget = ws2 * (rnd(2) ? 1 : 4);
			struct rt_ctx *rt2 = open_rt(&o2);
			struct rt_run *r2 = NULL;
			if (!rt2 || rt_run_open(rt2, m, &q, 99, &r2) < 0) {
				if (rt2)
					rt_close(rt2);
				break;
			}
			move_state(run, r2, m);
			rt_run_set_step(r2, s);
			if (saved)
				rt_run_save_free(run, saved);
			saved = NULL;
			rt_run_close(run);
			rt_close(rt);
			run = r2;
			rt = rt2;
			o = o2;
			p = q;
			fresh = 1;
			snprintf(a, sizeof(a), "(%s)", plan_str(&q));
			strncat(log, a, sizeof(log) - strlen(log) - 1);
			break;
		}
		default: break;
		}
		if (bad)
			break;
		int most = p.sched == TG_2BW && p.flush_every > 1 ? p.flush_every : 1;
		int left = steps - s;
		n = 1 + (int)rnd((uint32_t)(most < left ? most : left));
		float lr[TG_MAX_FLUSH_EVERY];
		double rls[TG_MAX_FLUSH_EVERY], losses[TG_MAX_FLUSH_EVERY];
		static const float lr_scale[] = {1, 1, 3, 0.25f, 0};
		for (int j = 0; j < n; j++)
			lr[j] = m->opt.lr * lr_scale[rnd(5)];
		/* act 1 under TP_ADV_KNOWN_BUGS: rt_run_step takes m->opt.lr as it
		 * is now (the runs ignore it: see live_lr) */
		int onebyone = act == 7 || (act == 1 && known_bugs);
		if (act == 1 && known_bugs)
			for (int j = 0; j < n; j++)
				lr[j] = m->opt.lr;
		float lr0 = m->opt.lr;
		for (int j = 0; j < n; j++) {
			m->opt.lr = lr[j];
			CHECK_OK(rt_reference_step(ref, s + j, &rls[j]));
		}
		m->opt.lr = lr0;
		snprintf(a, sizeof(a), "x%d", n);
		strncat(log, a, sizeof(log) - strlen(log) - 1);
		int rollback = act == 4;
		if (rollback && (rc = rt_run_save(run, &saved)) < 0) {
			printf("  %s: save before step %d: %d %s\n", what, s, rc, sp_last_error());
			bad++;
			break;
		}
		if (onebyone) {
			rc = 0;
			for (int j = 0; j < n && !rc; j++) {
				m->opt.lr = lr[j];
				rc = known_bugs ? rt_run_step(run, &losses[j])
				                : rt_run_steps(run, 1, &lr[j], &losses[j]);
			}
			m->opt.lr = lr0;
		} else {
			rc = rt_run_steps(run, n, lr, losses);
		}
		if (rc == -ENOMEM && fresh) { /* the plan does not run on this budget */
			ran = s > 0;
			strncat(log, " (-ENOMEM on a fresh run)", sizeof(log) - strlen(log) - 1);
			if (verbose)
				printf("    -ENOMEM: %s\n", sp_last_error());
			goto out;
		}
		if (rc < 0) {
			printf("  %s: steps %d..%d: %d %s\n", what, s, s + n - 1, rc,
			       sp_last_error());
			bad++;
			break;
		}
		for (int j = 0; j < n; j++)
			if (losses[j] != rls[j]) {
				printf("  %s: step %d loss %.9g, reference %.9g\n", what, s + j,
				       losses[j], rls[j]);
				bad++;
			}
		if (s == 0) { /* the exchanges' bytes: the graph's prediction */
			double want = 0;
			for (int j = 0; j < n; j++)
				want += xchg[j];
			if ((double)rt->st.tp_bytes != want) {
				printf("  %s: steps 0..%d exchanged %" PRIu64 " bytes, the graph "
				       "predicts %.0f\n",
				       what, n - 1, rt->st.tp_bytes, want);
				bad++;
			}
		}
		fresh = 0;
		if (rollback && !bad) {
			rc = rt_run_restore(run, saved);
			if (rc < 0) {
				printf("  %s: restore before step %d: %d %s\n", what, s, rc,
				       sp_last_error());
				bad++;
				break;
			}
			rt_run_set_step(run, s);
			double again[TG_MAX_FLUSH_EVERY];
			rc = rt_run_steps(run, n, lr, again);
			if (rc < 0) {
				printf("  %s: rollback rerun of %d..%d: %s\n", what, s, s + n - 1,
				       sp_last_error());
				bad++;
			}
			for (int j = 0; j < n && !rc; j++)
				if (again[j] != rls[j]) {
					printf("  %s: rerun step %d loss %.9g, reference %.9g\n",
					       what, s + j, again[j], rls[j]);
					bad++;
				}
		}
	}
	if (ran && !bad)
		bad += compare(run, ref, m, what, steps);
out:
	if (bad) {
		printf("FAIL %s; actions%s\n", what, log);
		failures++;
	} else if (verbose) {
		printf("    ok: actions%s%s\n", log, ran ? "" : " (-ENOMEM at step 0)");
	}
	struct vmm_stats st;
	vmm_stats_get(rt->vmm, &st);
	evicting += ran && st.evictions.total > 0;
	if (saved)
		rt_run_save_free(run, saved);
	rt_run_close(run);
	rt_close(rt);
	rt_reference_close(ref);
	rt_model_free(m);
	return ran;
}

/* ---- part 2: the model backend ---- */
static void model_backend(void)
{
	static const int scheds[] = {TG_GPIPE, TG_1F1B, TG_INTERLEAVED, TG_2BW, TG_HARMONY_PP};
	struct kn_model_config cfg = {.maxT = 8, .V = 64, .L = 4, .NH = 8, .C = 64, .tp_form = 1};
	struct rt_model m;
	CHECK_OK(rt_model_gpt(&cfg, 8, 8, &m));
	m.eval_data = rt_gpt_synthetic_data;
	struct ctxopt o = {
	    .profile = "gtx1080ti-x8", .ndev = 8, .backend = DEV_BACKEND_MODEL, .budget = 64 << 20};
	struct rt_ctx *rt = open_rt(&o);
	CHECK(rt != NULL);
	int runs = 0;
	for (unsigned si = 0; si < SP_ARRAY_SIZE(scheds); si++)
		for (int t = 2; t <= 4; t *= 2)
			for (int stages = 1; stages <= 8 / t; stages *= 2) {
				struct tg_plan p = {.sched = scheds[si],
				                    .ndev = stages * t,
				                    .tp = t,
				                    .microbatch = 2,
				                    .group = scheds[si] == TG_HARMONY_PP ? 2 : 1,
				                    .flush_every = scheds[si] == TG_2BW ? 3 : 0};
				if (p.sched == TG_INTERLEAVED && stages == 1)
					continue;
				p.npacks = p.sched == TG_INTERLEAVED ? 2 * stages : stages;
				if (p.npacks > m.nlayers)
					continue;
				for (int i = 0; i < p.npacks; i++)
					p.pack_end[i] = m.nlayers * (i + 1) / p.npacks;
				struct rt_run *run;
				int rc = rt_run_open(rt, &m, &p, 42, &run);
				CHECK_MSG(rc == 0, "model backend, %s: open %d: %s", plan_str(&p),
				          rc, sp_last_error());
				double loss[3] = {0, 0, 0}, le = 0;
				int n = p.sched == TG_2BW ? 3 : 1;
				rc = rt_run_steps(run, n, NULL, loss);
				CHECK_MSG(rc == 0, "model backend, %s: %d: %s", plan_str(&p), rc,
				          sp_last_error());
				for (int j = 0; j < n; j++)
					CHECK_MSG(isnan(loss[j]),
					          "model backend, %s: step %d loss %g",
					          plan_str(&p), j, loss[j]);
				rc = rt_run_eval(run, 0, &le);
				CHECK_MSG(rc == 0 && isnan(le),
				          "model backend, %s: eval %d, %g: %s", plan_str(&p), rc,
				          le, sp_last_error());
				/* no data there: the state functions refuse, nothing written */
				float x = 1.0f;
				CHECK(rt_run_read_state(run, 1, RT_PARAMS, &x) < 0 && x == 1.0f);
				rt_run_close(run);
				double sec = 0;
				CHECK_OK(rt_plan_simulate(rt, &m, &p, NULL, &sec));
				CHECK_MSG(sec > 0, "%s: simulated %g s", plan_str(&p), sec);
				runs++;
			}
	rt_close(rt);
	rt_model_free(&m);
	printf("model backend: %d tp plans ran, losses NAN\n", runs);
}

/* rt_model_gpt_members and rt_layer_init_member: blocks become shards of
 * the sizes kn_block_tp_describe gives, every other layer stays whole; a
 * member's initial values are the whole layer's, cut (kn_block_shard_copy). */
static void members_api(void)
{
	struct kn_model_config cfg = {.maxT = 8, .V = 64, .L = 3, .NH = 12, .C = 48, .tp_form = 1};
	struct rt_model m;
	CHECK_OK(rt_model_gpt(&cfg, 4, 4, &m));
	CHECK_OK(rt_model_set_optimizer(&m, KN_SGD, 0.9f));
	for (int t = 1; t <= 4; t *= 2) {
		struct rt_model mm;
		CHECK_OK(rt_model_gpt_members(&m, t, &mm));
		CHECK(mm.nlayers == m.nlayers && mm.batch == m.batch);
		for (int l = 0; l < m.nlayers; l++) {
			const struct rt_layer *a = &m.layers[l], *b = &mm.layers[l];
			uint64_t np = a->param_bytes;
			if (a->kind == KN_LAYER_BLOCK) {
				struct kn_layer_desc d;
				CHECK_OK(kn_block_tp_describe(&cfg, t, m.batch, 4, &d));
				CHECK_MSG(b->param_bytes == d.param_bytes &&
				              b->grad_bytes == d.grad_bytes,
				          "t %d: %s: %" PRIu64
				          " parameter bytes, the shard has %" PRIu64,
				          t, b->name, b->param_bytes, d.param_bytes);
				CHECK_MSG(b->optim_bytes ==
				              d.param_bytes, /* SGD momentum: one a parameter */
				          "t %d: %s: %" PRIu64 " optimizer bytes", t, b->name,
				          b->optim_bytes);
				np = a->param_bytes > b->param_bytes ? a->param_bytes
				                                     : b->param_bytes;
			} else {
				CHECK(b->param_bytes == a->param_bytes &&
				      b->optim_bytes == a->optim_bytes);
			}
			float *whole = malloc(a->param_bytes), *cut = malloc(np), *got = malloc(np);
			CHECK(whole && cut && got);
			CHECK_OK(rt_layer_init(&m, l, whole, 1234));
			for (int r = 0; r < t; r++) {
				CHECK_OK(rt_layer_init_member(&mm, l, got, 1234, r));
				if (a->kind == KN_LAYER_BLOCK)
					kn_block_shard_copy(cfg.C, t, r, 4, whole, cut, 1);
				else
					memcpy(cut, whole, a->param_bytes);
				CHECK_MSG(
				    !memcmp(got, cut, b->param_bytes),
				    "t %d: %s member %d's initial values are not the whole's cut",
				    t, b->name, r);
			}
			free(whole), free(cut), free(got);
		}
		free(mm.layers);
	}
	rt_model_free(&m);
}

/* ---- part 3: what tp does not take ---- */
static void refused(int rc, int want, const char *word, const char *what)
{
	const char *e = sp_last_error();
	if (rc != want || !strstr(e, word) || strchr(e, '\n')) {
		printf("  %s: %d (want %d): '%s' (one line naming '%s')\n", what, rc, want, e,
		       word);
		failures++;
	}
}

static void refusals(void)
{
	struct kn_model_config cfg = {.maxT = 8, .V = 32, .L = 2, .NH = 4, .C = 32, .tp_form = 1};
	struct rt_model m;
	CHECK_OK(rt_model_gpt(&cfg, 8, 4, &m));
	struct ctxopt o = {.ndev = 8, .backend = DEV_BACKEND_HOST, .budget = 64 << 20};
	struct rt_ctx *rt = open_rt(&o);
	CHECK(rt != NULL);
	struct tg_plan p = {
	    .sched = TG_1F1B, .ndev = 4, .tp = 2, .microbatch = 1, .group = 1, .npacks = 2};
	p.pack_end[0] = 2, p.pack_end[1] = m.nlayers;
	struct rt_run *run = NULL;
	struct tg_plan q = p;
	q.sched = TG_DP_SWAP;
	refused(rt_run_open(rt, &m, &q, 1, &run), -EINVAL, "dp-swap", "dp-swap");
	q.sched = TG_HARMONY_DP;
	refused(rt_run_open(rt, &m, &q, 1, &run), -EINVAL, "harmony-dp", "harmony-dp");
	q = p, q.recompute = 1;
	refused(rt_run_open(rt, &m, &q, 1, &run), -ENOTSUP, "recomputation", "recompute");
	q = p, q.tp = 3, q.ndev = 6;
	refused(rt_run_open(rt, &m, &q, 1, &run), -EINVAL, "tensor parallel 3", "tp 3");
	q = p, q.tp = 8, q.ndev = 8;
	refused(rt_run_open(rt, &m, &q, 1, &run), -EINVAL, "tensor parallel 8", "tp 8");
	q = p, q.ndev = 6, q.tp = 4;
	refused(rt_run_open(rt, &m, &q, 1, &run), -EINVAL, "divide", "tp 4 of 6 devices");
	m.opt.grad_clip = 1.0f;
	refused(rt_run_open(rt, &m, &p, 1, &run), -ENOTSUP, "clipping", "clipping");
	m.opt.grad_clip = 0;
	struct kn_model_config c2 = cfg;
	c2.tp_form = 0;
	struct rt_model plain;
	CHECK_OK(rt_model_gpt(&c2, 8, 4, &plain));
	refused(rt_run_open(rt, &plain, &p, 1, &run), -EINVAL, "tp_form", "a plain model");
	rt_model_free(&plain);
	c2.dtype = KN_BF16; /* bf16 has no tp form; its plain blocks are refused */
	CHECK_OK(rt_model_gpt(&c2, 8, 4, &plain));
	int rc = rt_run_open(rt, &plain, &p, 1, &run);
	CHECK_MSG(rc < 0, "a bf16 model under tp 2 opened");
	rt_model_free(&plain);
	c2 = cfg, c2.dtype = KN_BF16;
	refused(rt_model_gpt(&c2, 8, 4, &plain), -ENOTSUP, "bf16", "bf16 in tp form");
	c2 = cfg, c2.NH = 2, c2.C = 16;
	refused(rt_model_gpt(&c2, 8, 4, &plain), -EINVAL, "multiples of 4", "NH 2 in tp form");
	/* the planner */
	struct tg_plan out;
	struct rt_plan_request req = {.schedule = "auto", .tp = 2};
	refused(rt_plan_choose(rt, &m, &req, &out), -EINVAL, "named pipeline schedule",
	        "choose auto");
	req.schedule = "1f1b", req.devices = 6, req.tp = 4;
	refused(rt_plan_choose(rt, &m, &req, &out), -EINVAL, "does not divide", "choose 4 of 6");
	req.devices = 8;
	CHECK_OK(rt_plan_choose(rt, &m, &req, &out));
	CHECK(out.tp == 4 && out.ndev == 8 && out.sched == TG_1F1B);
	CHECK_OK(rt_run_open(rt, &m, &out, 1, &run));
	rt_run_close(run);
	rt_close(rt);
	rt_model_free(&m);
}

/* ---- part 4: known bugs (TP_ADV_KNOWN_BUGS=1) ---- */

/* A tp run reads the caller's model as a run without tp does: the learning
 * rate and weight decay set between steps (rt_run_step: "m->opt.lr"), and
 * validation data set after the open. A one-device run of the same tp-form
 * model is the control. */
static void live_model(void)
{
	struct kn_model_config cfg = {.maxT = 8, .V = 32, .L = 2, .NH = 4, .C = 32, .tp_form = 1};
	struct rt_model m;
	CHECK_OK(rt_model_gpt(&cfg, 8, 4, &m));
	m.opt.lr = 3e-3f;
	struct ctxopt o = {.ndev = 3, .backend = DEV_BACKEND_HOST, .budget = 64 << 20};
	struct rt_ctx *rt = open_rt(&o);
	CHECK(rt != NULL);
	struct tg_plan p = {
	    .sched = TG_1F1B, .ndev = 2, .tp = 2, .microbatch = 2, .group = 1, .npacks = 1};
	p.pack_end[0] = m.nlayers;
	struct tg_plan c = p;
	c.ndev = 1, c.tp = 0;
	struct rt_run *a, *b;
	CHECK_OK(rt_run_open(rt, &m, &p, 42, &a));
	CHECK_OK(rt_run_open(rt, &m, &c, 42, &b));
	int bad = 0;
	for (int s = 0; s < 4; s++) {
		double la, lb;
		CHECK_OK(rt_run_step(a, &la));
		CHECK_OK(rt_run_step(b, &lb));
		if (la != lb) {
			printf("  live model: step %d: tp 2 loss %.9g, one device %.9g\n", s, la,
			       lb);
			bad++;
		}
		m.opt.lr *= 4; /* the next step's */
		m.opt.weight_decay = s & 1 ? 0 : 0.5f;
	}
	m.eval_data = rt_gpt_synthetic_data;
	double ea = 0, eb = 0;
	int ra = rt_run_eval(a, 1, &ea), rb = rt_run_eval(b, 1, &eb);
	if (ra != rb || ea != eb) {
		printf("  live model: eval data set after the open: tp 2 %d %.9g (%s), one "
		       "device %d %.9g\n",
		       ra, ea, ra ? sp_last_error() : "", rb, eb);
		bad++;
	}
	rt_run_close(a);
	rt_run_close(b);
	rt_close(rt);
	rt_model_free(&m);
	failures += bad > 0;
}

/* A model whose blocks are already shards (cfg.tp_shards > 1) is no whole
 * model: rt_run_open must refuse it (its state functions would write the
 * whole block's bytes into the shard-sized buffers the model states). */
static void shard_model(void)
{
	struct kn_model_config cfg = {
	    .maxT = 8, .V = 32, .L = 2, .NH = 4, .C = 32, .tp_form = 1, .tp_shards = 2};
	struct rt_model m;
	CHECK_OK(rt_model_gpt(&cfg, 8, 4, &m));
	struct ctxopt o = {.ndev = 4, .backend = DEV_BACKEND_HOST, .budget = 64 << 20};
	struct rt_ctx *rt = open_rt(&o);
	CHECK(rt != NULL);
	struct tg_plan p = {
	    .sched = TG_1F1B, .ndev = 4, .tp = 4, .microbatch = 1, .group = 1, .npacks = 1};
	p.pack_end[0] = m.nlayers;
	struct rt_run *run;
	int rc = rt_run_open(rt, &m, &p, 1, &run);
	if (rc == 0) {
		uint64_t n = rt_run_state_bytes(run, 1, RT_PARAMS), pad = 1 << 16, past = 0;
		unsigned char *b = malloc(n + pad);
		CHECK(b);
		memset(b, 0xab, n + pad);
		CHECK_OK(rt_run_read_state(run, 1, RT_PARAMS, b));
		for (uint64_t i = n; i < n + pad; i++)
			past += b[i] != 0xab;
		printf("  a model of 2-shard blocks opened under tp 4: rt_run_read_state wrote "
		       "%" PRIu64 " bytes past the %" PRIu64 " rt_run_state_bytes gives\n",
		       past, n);
		free(b);
		rt_run_close(run);
		failures++;
	}
	rt_close(rt);
	rt_model_free(&m);
}

/* rt_plan_choose with tp takes "a named pipeline schedule" and no
 * recomputation: the rest is an error there, not a plan rt_run_open refuses. */
static void choose_refuses(void)
{
	struct kn_model_config cfg = {.maxT = 8, .V = 32, .L = 2, .NH = 4, .C = 32, .tp_form = 1};
	struct rt_model m;
	CHECK_OK(rt_model_gpt(&cfg, 8, 4, &m));
	struct ctxopt o = {.ndev = 4, .backend = DEV_BACKEND_HOST, .budget = 64 << 20};
	struct rt_ctx *rt = open_rt(&o);
	CHECK(rt != NULL);
	static const char *const bad[] = {"dp-swap", "harmony-dp", "1f1b"};
	for (int i = 0; i < 3; i++) {
		struct rt_plan_request req = {.schedule = bad[i], .tp = 2, .recompute = i == 2};
		struct tg_plan out;
		int rc = rt_plan_choose(rt, &m, &req, &out);
		if (rc == 0) {
			char d[160];
			rt_plan_describe(&out, d, sizeof(d));
			printf("  rt_plan_choose(%s%s, tp 2) gave a plan: %s\n", bad[i],
			       i == 2 ? ", recompute" : "", d);
			failures++;
		}
	}
	rt_close(rt);
	rt_model_free(&m);
}

/* ---- part 5: two runs of one model in one context ---- */
/* Runs of t 2 and t 4 (or none) of the same model share a context (its vmm,
 * its devices: a device can hold members of both), their steps interleaved
 * in blocks: both give the reference's bits. */
static int twin_case(uint64_t seed)
{
	rng = mix(seed ^ 0x7777);
	rnd(2);
	struct mdl d;
	draw_model(&d, seed);
	struct rt_model *m = &d.m;
	struct tg_plan pa, pb;
	draw_plan(&pa, &d, 2);
	draw_plan(&pb, &d, rnd(2) ? 4 : 1);
	pb.microbatch = pa.microbatch, pb.group = 1;
	if ((pa.sched == TG_2BW) != (pb.sched == TG_2BW)) {
		pb.sched = pa.sched == TG_2BW ? TG_2BW : TG_1F1B;
		pb.flush_every = pb.sched == TG_2BW ? 1 + (int)rnd(4) : 0;
		if (pb.npacks < pb.ndev / (pb.tp > 1 ? pb.tp : 1))
			rand_packs(&pb, m->nlayers, pb.ndev / (pb.tp > 1 ? pb.tp : 1));
	}
	uint64_t wa = min_cap(m, &pa, NULL), wb = min_cap(m, &pb, NULL);
	if (!wa || !wb) {
		rt_model_free(m);
		return 0;
	}
	int steps = 3 + (int)rnd(MAXSTEPS - 2);
	struct ctxopt o = {.ndev = pa.ndev > pb.ndev ? pa.ndev : pb.ndev,
	                   .backend = DEV_BACKEND_HOST};
	draw_exec(&o);
	o.disk = 0;
	o.budget = (uint64_t)((double)(wa > wb ? wa : wb) * (rnd(2) ? 2.5 : 64));
	struct rt_ctx *rt = open_rt(&o);
	CHECK(rt != NULL);
	/* after rt_open: the CPU kernels' threads are the run's (the bits of a
	 * GEMM depend on them) */
	float lr[MAXSTEPS];
	double rl[MAXSTEPS];
	struct rt_reference *ref;
	CHECK_OK(rt_reference_open(m, 1, pa.microbatch, 42, &ref));
	if (pa.sched == TG_2BW)
		CHECK_OK(rt_reference_set_2bw(ref));
	float lr0 = m->opt.lr;
	for (int s = 0; s < steps; s++) {
		m->opt.lr = lr[s] = lr0 * (rnd(3) ? 1.0f : 0.5f);
		CHECK_OK(rt_reference_step(ref, s, &rl[s]));
	}
	m->opt.lr = lr0;
	struct rt_run *ra = NULL, *rb = NULL;
	int ok = rt_run_open(rt, m, &pa, 42, &ra) == 0 && rt_run_open(rt, m, &pb, 42, &rb) == 0;
	char what[400];
	snprintf(what, sizeof(what), "twin seed %" PRIu64 ": %s and ", seed, plan_str(&pa));
	snprintf(what + strlen(what), sizeof(what) - strlen(what),
	         "%s, %d steps, budget %" PRIu64 "%s; exec %d t%d w%d la%d ewb%d h%d ph%d ord%d "
	         "late%d steal%d",
	         plan_str(&pb), steps, o.budget, o.jitter[0] ? " jitter" : "", o.exec, o.threads,
	         o.window, o.lookahead, o.eager_wb, o.hints, o.place_hints, o.ordered, o.late,
	         o.steal);
	if (verbose)
		printf("  %s\n", what);
	int bad = 0, sa = 0, sb = 0;
	while (ok && !bad && (sa < steps || sb < steps)) {
		struct rt_run *r = rnd(2) ? ra : rb;
		if ((r == ra && sa >= steps) || (r == rb && sb >= steps))
			r = r == ra ? rb : ra;
		int *s = r == ra ? &sa : &sb, K = r->mo->nstep, left = steps - *s;
		int n = 1 + (int)rnd((uint32_t)(K < left ? K : left));
		double ls[TG_MAX_FLUSH_EVERY];
		int rc = rt_run_steps(r, n, lr + *s, ls);
		if (rc == -ENOMEM && *s == 0) {
			ok = 0;
			break;
		}
		if (rc < 0) {
			printf("  %s: %s steps %d..%d: %s\n", what, r == ra ? "a" : "b", *s,
			       *s + n - 1, sp_last_error());
			bad++;
			break;
		}
		for (int j = 0; j < n; j++)
			if (ls[j] != rl[*s + j]) {
				printf("  %s: %s step %d loss %.9g, reference %.9g\n", what,
				       r == ra ? "a" : "b", *s + j, ls[j], rl[*s + j]);
				bad++;
			}
		*s += n;
	}
	if (ok && !bad) {
		bad += compare(ra, ref, m, "twin a", steps);
		bad += compare(rb, ref, m, "twin b", steps);
	}
	if (bad) {
		printf("FAIL %s\n", what);
		failures++;
	}
	rt_run_close(ra);
	rt_run_close(rb);
	rt_close(rt);
	rt_reference_close(ref);
	rt_model_free(m);
	return ok;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 20;
	uint64_t first = argc > 2 ? strtoull(argv[2], NULL, 10) : 1;
	int ntwin = argc > 3 ? atoi(argv[3]) : 4;
	verbose = getenv("TP_ADV_VERBOSE") != NULL;
	known_bugs = 1; /* part 4's bugs are fixed: their checks run every time */
	snprintf(diskdir, sizeof(diskdir), "/tmp/spill-tp-adv-XXXXXX");
	CHECK(mkdtemp(diskdir) != NULL);
	CHECK_OK(kn_cpu_set_threads(1));
	members_api();
	refusals();
	int f0 = failures;
	model_backend();
	if (known_bugs) {
		live_model();
		shard_model();
		choose_refuses();
		printf("known bugs: %d failures\n", failures - f0);
		f0 = failures;
	} else {
		printf("known bugs skipped (TP_ADV_KNOWN_BUGS=1 runs them)\n");
	}
	int ran = 0;
	for (int i = 0; i < n; i++)
		ran += fuzz_case(first + (uint64_t)i);
	int tran = 0;
	for (int i = 0; i < ntwin; i++)
		tran += twin_case(first + (uint64_t)i);
	rmdir(diskdir);
	printf("tp adv: fuzz %d of %d cases ran (%d under eviction), twin %d of %d; %d "
	       "failures\n",
	       ran, n, evicting, tran, ntwin, failures);
	CHECK_MSG(n < 8 || evicting > 0, "no case evicted");
	CHECK(!failures);
	TEST_PASS();
}

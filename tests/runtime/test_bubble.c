/* tests/runtime/test_bubble.c — Narayanan's Table 7.1 measured on the executor
 * (model backend, virtual time), not on the taskgraph's list schedule
 * (tests/taskgraph/test_pipeline.c does that): a model of identical layers,
 * one stage per device (v chunks per device for interleaved), memory ample
 * (nothing swaps), boundaries small next to the compute. For p devices and m
 * microbatches per step:
 *  - the bubble, the pipeline's span (first forward to last backward) less a
 *    device's forward and backward time, over that time: GPipe and 1F1B
 *    (p-1)/m, interleaved (1/v)(p-1)/m, within 2% of the pipeline's time;
 *  - stashed activations live at once on a device, counted from the tasks'
 *    times (a microbatch's stash of a chunk from its forward's start to its
 *    backward's end): GPipe m, 1F1B p on the first device (p - d on device d),
 *    interleaved the taskgraph's peak (its warm-up depth), exactly;
 *  - one weight version: a pack's update starts after every forward and
 *    backward of the step that read its weights has ended, so a microbatch's
 *    backward reads the weights its forward read;
 *  - 2bw flushing every step (flush_every 1): two weight versions (objects)
 *    per pack, exactly; its bubble is 1F1B's (p-1)/m;
 *  - 2bw without a flush (flush_every K: K steps one program): Table 7.1's
 *    0 in the steady state. The span a step adds, (span of 8 steps - span of
 *    4) / 4, against a device's forward and backward time per step: within
 *    2% of 0; two weight versions per pack; and by the times, each step's
 *    update of a pack starts after that step's passes of it ended, and the
 *    passes of the step after the next start after it ended (the version
 *    they read).
 * Before each P2P copy had a stream per source device, 1F1B on 4 devices
 * measured a bubble of 0.46 against 0.375: a prefetched boundary waiting for
 * the previous stage's forward held up, in the one stream of copies into the
 * device, the next stage's gradient behind it.
 * Last line: the largest bubble error in points of the pipeline time. */
#include "runtime/runtime.h"
#include "tests/test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NL  24
#define OUT (4u << 10)

static int kfwd(const struct rt_layer_call *c)
{
	static const struct dev_kernel k = {"synthetic forward", NULL, NULL};
	return dev_launch(c->s, &k, NULL, 0, (struct dev_cost){2e9 * c->B, 1e6, 0});
}

static int kbwd(const struct rt_layer_call *c) /* twice the forward, as in the thesis */
{
	static const struct dev_kernel k = {"synthetic backward", NULL, NULL};
	return dev_launch(c->s, &k, NULL, 0, (struct dev_cost){4e9 * c->B, 1e6, 0});
}

static int kupd(const struct rt_layer_call *c)
{
	static const struct dev_kernel k = {"synthetic update", NULL, NULL};
	return dev_launch(c->s, &k, NULL, 0, (struct dev_cost){1e6, 1e6, 0});
}

static const struct rt_layer_ops ops = {
    .forward = kfwd, .backward = kbwd, .update = kupd, .simulates = 1};

static int no_data(const struct rt_model *m, void *arg, int iter, int s0, int n, void *in, void *y)
{
	return 0;
}

static void model(struct rt_model *m, struct rt_layer *L, int batch)
{
	memset(m, 0, sizeof(*m));
	for (int i = 0; i < NL; i++)
		L[i] = (struct rt_layer){.param_bytes = 1u << 20,
		                         .grad_bytes = 1u << 20,
		                         .optim_bytes = 2u << 20,
		                         .stash_per_sample = 64u << 10,
		                         .out_per_sample = OUT,
		                         .fwd_flops_per_sample = 2e9,
		                         .bwd_flops_per_sample = 4e9,
		                         .ops = &ops};
	snprintf(m->name, sizeof(m->name), "uniform");
	m->nlayers = NL;
	m->layers = L;
	m->batch = batch;
	m->in_per_sample = OUT;
	m->target_per_sample = OUT;
	m->loss_floats = OUT / 4;
	m->data = no_data;
}

static struct rt_ctx *open_model(int ndev)
{
	struct sp_params sp;
	sp_params_defaults(&sp);
	struct rt_config c;
	CHECK_OK(rt_config_from_params(&sp, &c));
	c.dev.backend = DEV_BACKEND_MODEL;
	c.dev.ndevices = ndev;
	c.dev.profile = "gtx1080ti-x4";
	c.vmm.device_mem = 1ull << 30; /* ample: nothing swaps */
	c.vmm.host_mem = 4ull << 30;
	struct rt_ctx *rt;
	CHECK_OK(rt_open(&c, &rt));
	return rt;
}

static double worst;

/* One schedule at p devices, m microbatches, v chunks a device. */
static void one(enum tg_sched s, int p, int m, int v)
{
	struct rt_layer L[NL];
	struct rt_model md;
	model(&md, L, m);
	int P = p * v;
	struct tg_plan pl = {.sched = s, .ndev = p, .npacks = P, .microbatch = 1, .group = 1};
	for (int i = 0; i < P; i++)
		pl.pack_end[i] = (i + 1) * NL / P;
	struct rt_ctx *rt = open_model(p);
	struct rt_run *run;
	CHECK_OK(rt_run_open(rt, &md, &pl, 1, &run));
	struct rt_prog *pg = &run->prog;
	double *t0 = calloc((size_t)pg->ntask, sizeof(double));
	double *t1 = calloc((size_t)pg->ntask, sizeof(double));
	CHECK(t0 && t1);
	pg->t_start = t0;
	pg->t_end = t1;
	CHECK_OK(rt_run_step(run, NULL)); /* warm: the weights come in once */
	CHECK_OK(rt_run_step(run, NULL));
	double first = INFINITY, last = 0, busy[DEV_MAX] = {0};
	/* stash intervals per device: +1 at a forward's start, -1 at its
	 * backward's end, per (microbatch, pack) */
	int nt = pg->ntask, nev = 0;
	struct ev {
		double t;
		int d, delta;
	} *evs = calloc((size_t)nt * 2, sizeof(*evs));
	CHECK(evs);
	/* one weight version: a pack's update starts after every forward and
	 * backward of the step that read its weights has ended */
	double used_until[NL] = {0}, upd_at[NL];
	for (int k = 0; k < NL; k++)
		upd_at[k] = INFINITY;
	for (int i = 0; i < nt; i++) {
		const struct tg_task *t = &run->g.task[pg->task[i].tg_task];
		if (t->kind == TG_UPD && t0[i] < upd_at[t->pack])
			upd_at[t->pack] = t0[i];
		if ((t->kind == TG_FWD || t->kind == TG_BWD) && t1[i] > used_until[t->pack])
			used_until[t->pack] = t1[i];
		if (t->kind != TG_FWD && t->kind != TG_BWD)
			continue;
		int d = pg->ran_on[i];
		CHECK(d >= 0 && d < p);
		busy[d] += t1[i] - t0[i];
		if (t->kind == TG_FWD && t0[i] < first)
			first = t0[i];
		if (t->kind == TG_BWD && t1[i] > last)
			last = t1[i];
		evs[nev++] = (struct ev){t->kind == TG_FWD ? t0[i] : t1[i], d,
		                         t->kind == TG_FWD ? t->nmb : -t->nmb};
	}
	/* stash peaks: ends before starts at the same time */
	for (int i = 1; i < nev; i++)
		for (int k = i;
		     k > 0 && (evs[k].t < evs[k - 1].t ||
		               (evs[k].t == evs[k - 1].t && evs[k].delta < evs[k - 1].delta));
		     k--) {
			struct ev x = evs[k];
			evs[k] = evs[k - 1];
			evs[k - 1] = x;
		}
	int live[DEV_MAX] = {0}, peak[DEV_MAX] = {0};
	for (int i = 0; i < nev; i++) {
		live[evs[i].d] += evs[i].delta;
		if (live[evs[i].d] > peak[evs[i].d])
			peak[evs[i].d] = live[evs[i].d];
	}
	/* weight versions: one object per pack, two in 2BW (W, which the passes
	 * read, and Wnew, the newest) */
	int versions = 0;
	for (int o = 0; o < run->g.nobj; o++)
		versions += run->g.obj[o].kind == TG_O_WEIGHT;
	CHECK_MSG(versions == P * (s == TG_2BW ? 2 : 1), "%s: %d weight objects for %d packs",
	          tg_sched_name(s), versions, P);
	for (int k = 0; k < P; k++)
		CHECK_MSG(upd_at[k] >= used_until[k],
		          "%s: pack %d updated at %.6f s while its weights were read until %.6f s",
		          tg_sched_name(s), k, upd_at[k], used_until[k]);
	double span = last - first, b = 0;
	for (int d = 0; d < p; d++)
		b += (span - busy[d]) / busy[d] / p;
	double want = (double)(p - 1) / m / v;
	double err = fabs(b - want) / (1 + want);
	if (err > worst)
		worst = err;
	int stash_want = s == TG_GPIPE                 ? m
	                 : s == TG_1F1B || s == TG_2BW ? p
	                                               : (int)run->g.peak_stash;
	printf("%-11s p=%d m=%2d v=%d: bubble %.4f (%s: %.4f, off by %.2f%% of the "
	       "pipeline), stashes on device 0: %d (want %d)",
	       tg_sched_name(s), p, m, v, b, s == TG_2BW ? "1F1B's flush" : "Table 7.1", want,
	       100 * err, peak[0], stash_want);
	for (int d = 1; d < p; d++)
		printf(" %d", peak[d]);
	printf("; weight versions %d\n", versions / P);
	CHECK_MSG(err < 0.02, "%s p=%d m=%d v=%d: bubble %.4f, want %.4f", tg_sched_name(s), p, m,
	          v, b, want);
	CHECK_MSG(peak[0] == stash_want, "%s p=%d m=%d: %d stashes live on device 0, want %d",
	          tg_sched_name(s), p, m, peak[0], stash_want);
	if (s == TG_1F1B || s == TG_2BW)
		for (int d = 0; d < p; d++)
			CHECK_MSG(peak[d] == (p - d < m ? p - d : m),
			          "1f1b p=%d m=%d: device %d holds %d stashes, want %d", p, m, d,
			          peak[d], p - d);
	free(evs);
	pg->t_start = pg->t_end = NULL;
	free(t0);
	free(t1);
	rt_run_close(run);
	rt_close(rt);
}

/* 2bw without a flush: one program of K steps; returns the span (first
 * forward to last backward) of its second run and the busiest device's
 * forward and backward time, per step; checks the versions by time. */
static void window_run(int p, int m, int K, double *span_out, double *busy_out)
{
	struct rt_layer L[NL];
	struct rt_model md;
	model(&md, L, m);
	struct tg_plan pl = {
	    .sched = TG_2BW, .ndev = p, .npacks = p, .microbatch = 1, .group = 1, .flush_every = K};
	for (int i = 0; i < p; i++)
		pl.pack_end[i] = (i + 1) * NL / p;
	struct rt_ctx *rt = open_model(p);
	struct rt_run *run;
	CHECK_OK(rt_run_open(rt, &md, &pl, 1, &run));
	CHECK_MSG(run->mo->nstep == K, "2bw: %d steps a program, want %d", run->mo->nstep, K);
	struct rt_prog *pg = &run->prog;
	int nt = pg->ntask;
	double *t0 = calloc((size_t)nt, sizeof(double)), *t1 = calloc((size_t)nt, sizeof(double));
	CHECK(t0 && t1);
	pg->t_start = t0;
	pg->t_end = t1;
	CHECK_OK(rt_run_steps(run, K, NULL, NULL)); /* warm */
	CHECK_OK(rt_run_steps(run, K, NULL, NULL));
	double first = INFINITY, last = 0, busy[DEV_MAX] = {0};
	/* per pack and step: the passes' last end, the update's start and end,
	 * the passes' first start */
	enum { MAXK = 8 };
	double pass_end[NL][MAXK], pass_start[NL][MAXK], upd0[NL][MAXK], upd1[NL][MAXK];
	for (int k = 0; k < p; k++)
		for (int j = 0; j < K; j++) {
			pass_end[k][j] = upd1[k][j] = 0;
			pass_start[k][j] = upd0[k][j] = INFINITY;
		}
	for (int i = 0; i < nt; i++) {
		const struct tg_task *t = &run->g.task[pg->task[i].tg_task];
		int k = t->pack, j = t->step;
		if (t->kind == TG_UPD) {
			upd0[k][j] = t0[i];
			upd1[k][j] = t1[i];
		}
		if (t->kind != TG_FWD && t->kind != TG_BWD)
			continue;
		pass_end[k][j] = t1[i] > pass_end[k][j] ? t1[i] : pass_end[k][j];
		pass_start[k][j] = t0[i] < pass_start[k][j] ? t0[i] : pass_start[k][j];
		busy[pg->ran_on[i]] += t1[i] - t0[i];
		first = t0[i] < first ? t0[i] : first;
		last = t1[i] > last ? t1[i] : last;
	}
	int versions = 0;
	for (int o = 0; o < run->g.nobj; o++)
		versions += run->g.obj[o].kind == TG_O_WEIGHT;
	CHECK_MSG(versions == 2 * p, "2bw window: %d weight objects for %d packs", versions, p);
	for (int k = 0; k < p; k++)
		for (int j = 0; j < K; j++) {
			CHECK_MSG(upd0[k][j] >= pass_end[k][j],
			          "2bw window: pack %d's update of step %d at %.6f s, its passes "
			          "until %.6f s",
			          k, j, upd0[k][j], pass_end[k][j]);
			if (j + 2 < K)
				CHECK_MSG(
				    pass_start[k][j + 2] >= upd1[k][j],
				    "2bw window: pack %d's passes of step %d from %.6f s, the "
				    "update making their weights (step %d) until %.6f s",
				    k, j + 2, pass_start[k][j + 2], j, upd1[k][j]);
		}
	double most = 0;
	for (int d = 0; d < p; d++)
		most = busy[d] > most ? busy[d] : most;
	*span_out = last - first;
	*busy_out = most / K;
	pg->t_start = pg->t_end = NULL;
	free(t0);
	free(t1);
	rt_run_close(run);
	rt_close(rt);
}

static void one_window(int p, int m)
{
	double s4, s8, b4, b8;
	window_run(p, m, 4, &s4, &b4);
	window_run(p, m, 8, &s8, &b8);
	double per = (s8 - s4) / 4, b = (per - b8) / b8;
	double flush = (double)(p - 1) / m, whole = (s8 - 8 * b8) / (8 * b8);
	printf("2bw window  p=%d m=%2d: steady-state bubble %.4f (Table 7.1: 0; flushing every "
	       "step: %.4f), over a program of 8 steps %.4f; weight versions 2\n",
	       p, m, b, flush, whole);
	if (fabs(b) > worst)
		worst = fabs(b);
	CHECK_MSG(fabs(b) < 0.02, "2bw window p=%d m=%d: steady-state bubble %.4f, want 0", p, m,
	          b);
	CHECK_MSG(whole < flush / 2,
	          "2bw window p=%d m=%d: bubble over 8 steps %.4f, want below "
	          "half of the flush's %.4f",
	          p, m, whole, flush);
}

int main(void)
{
	for (int p = 2; p <= 4; p *= 2)
		for (int m = 2 * p; m <= 4 * p; m *= 2) {
			one(TG_GPIPE, p, m, 1);
			one(TG_1F1B, p, m, 1);
			one(TG_INTERLEAVED, p, m, 2);
			one(TG_INTERLEAVED, p, m, 3);
			one(TG_2BW, p, m, 1);
			one_window(p, m);
		}
	printf("largest bubble error: %.2f%% of the pipeline's time; one weight version on "
	       "every schedule but 2bw's two\n",
	       100 * worst);
	TEST_PASS();
}

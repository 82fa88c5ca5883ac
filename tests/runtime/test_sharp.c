/* tests/runtime/test_sharp.c — many models trained together under SHARP.
 *
 * Four small GPT-2 variants (different learning rates, batch sizes, data
 * seeds and step counts; one stopped early by the on_step callback) on 2 and
 * 3 emulated devices of the host backend whose budget is below one model's
 * training state (so shards really move: evictions and P2P are checked
 * nonzero): every step's loss and every final weight of every model are
 * bit-identical to training that model alone with the reference loop, under
 * lrtf with double buffering, random and fifo. Faults: an emulated device
 * killed mid-run (SPILL_HOST_FAIL's knob, at its first kernel, mid-unit and
 * late) with recovery on: the models go back to their last step boundary,
 * finish on the devices left, and their losses and weights are still those of
 * the reference loop, bit for bit; with recovery off the run stops with -EIO
 * naming the device. Bad input: a run that is not a SHARP plan, a budget below
 * one layer (the message names the layer). */
#include "runtime/runtime.h"
#include "tests/test.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NM       4
#define MAXSTEPS 4

static struct kn_model_config cfg = {.maxT = 8, .V = 64, .L = 6, .NH = 2, .C = 32};
static const int T = 8;
static const int batch[NM] = {4, 8, 4, 2};
static const float lr[NM] = {1e-3f, 3e-4f, 1e-2f, 1e-3f};
static const int steps[NM] = {3, 4, 2, 3};
static const int stop_model = 3, stop_after = 1; /* early stop */
static uint64_t data_seed[NM] = {11, 12, 13, 14};

static const char *profile; /* NULL: the default */

static struct rt_ctx *open_rt(enum dev_backend_kind b, int ndev, uint64_t budget, const char *fail)
{
	struct sp_params sp;
	sp_params_defaults(&sp);
	struct rt_config c;
	CHECK_OK(rt_config_from_params(&sp, &c));
	c.dev.backend = b;
	c.dev.ndevices = ndev;
	c.dev.device_mem = 64 << 20;
	c.dev.host_fail = fail;
	c.dev.profile = profile;
	c.vmm.device_mem = budget;
	c.vmm.host_mem = 64 << 20;
	c.vmm.max_objects = 4096;
	c.threads = 1;
	struct rt_ctx *rt;
	CHECK_OK(rt_open(&c, &rt));
	return rt;
}

struct log {
	double loss[NM][MAXSTEPS];
	int nstep[NM];
	const struct rt_sharp_stats *st;
	int left;            /* the leaving device was turned away once */
	uint64_t left_units; /* its units then */
	uint64_t joined_at;  /* units run when the joining device took its first */
};

/* Devices that come and go: join_dev takes no unit before join_after units
 * have run, leave_dev none from leave_after on (-1: no such device). */
static int join_dev = -1, leave_dev = -1;
static uint64_t join_after, leave_after;

static int device_ready(void *arg, int dev)
{
	struct log *lg = arg;
	uint64_t u = lg->st->units;
	if (dev == join_dev && u < join_after)
		return 0;
	if (dev == join_dev && !lg->joined_at)
		lg->joined_at = u;
	if (dev == leave_dev && u >= leave_after) {
		if (!lg->left)
			lg->left_units = lg->st->units_on[dev];
		lg->left = 1;
		return 0;
	}
	return 1;
}

static int on_step(void *arg, int model, int step, double loss)
{
	struct log *lg = arg;
	lg->loss[model][step - 1] = loss;
	lg->nstep[model] = step;
	return model == stop_model && step == stop_after;
}

static uint64_t state_bytes(const struct rt_model *m)
{
	uint64_t b = 0;
	for (int l = 0; l < m->nlayers; l++)
		b += m->layers[l].param_bytes + m->layers[l].grad_bytes + m->layers[l].optim_bytes;
	return b;
}

/* 1: the units keep their stash instead of recomputing (rt_sharp_plan chooses
 * recompute on these links; its packs fit either way, it checks both) */
static int keep_stash;

static int kept_packs(const struct tg_plan *p)
{
	int k = 0;
	for (int pk = 0; pk < p->npacks; pk++)
		k += p->recompute && p->keep_stash[pk];
	return k;
}

/* Every model under its SHARP plan on rt, in shards; with recompute, some of
 * the last shard's packs keep their stash (its forward and backward are one
 * unit): the weights must still be the reference loop's. */
static void open_runs(struct rt_ctx *rt, struct rt_model *m, struct rt_run **runs,
                      struct tg_plan *plan)
{
	for (int i = 0; i < NM; i++) {
		CHECK_OK(rt_sharp_plan(rt, &m[i], 0.15, &plan[i]));
		if (keep_stash)
			plan[i].recompute = 0;
		else
			CHECK_MSG(plan[i].recompute && kept_packs(&plan[i]) > 0,
			          "model %d: recompute %d, %d packs keep their stash", i,
			          plan[i].recompute, kept_packs(&plan[i]));
		/* shards of one pack per layer: a unit loads pack by pack */
		int shards = tg_plan_shards(&plan[i]);
		CHECK_MSG(shards >= 2 && plan[i].npacks == m[i].nlayers,
		          "model %d: %d layers in %d packs, %d shard(s)", i, m[i].nlayers,
		          plan[i].npacks, shards);
		CHECK_OK(rt_run_open(rt, &m[i], &plan[i], 42 + (uint64_t)i, &runs[i]));
	}
}

static void run(struct rt_model *m, int ndev, enum tg_mm_policy pol, int db, uint64_t budget,
                const char *fail, void *const ref[NM][16], const double ref_loss[NM][MAXSTEPS])
{
	struct rt_ctx *rt = open_rt(DEV_BACKEND_HOST, ndev, budget, fail);
	struct rt_run *runs[NM];
	struct tg_plan plan[NM];
	open_runs(rt, m, runs, plan);
	struct log lg = {0};
	struct rt_sharp_config sc = {.policy = pol,
	                             .double_buffer = db,
	                             .seed = 5,
	                             .on_step = on_step,
	                             .arg = &lg,
	                             .device_ready = device_ready,
	                             .recover = fail != NULL};
	struct rt_sharp_stats st;
	lg.st = &st;
	CHECK_OK(rt_sharp_run(rt, runs, steps, NM, &sc, &st));
	struct vmm_stats vs;
	vmm_stats_get(rt->vmm, &vs);
	char rc[64] = "";
	if (plan[0].recompute) /* kept: the last shard's packs whose stash stays */
		snprintf(rc, sizeof(rc), ", recompute but %d %d %d %d packs", kept_packs(&plan[0]),
		         kept_packs(&plan[1]), kept_packs(&plan[2]), kept_packs(&plan[3]));
	printf("  %-6s%s %d devices%s%s%s: %" PRIu64 " units (%" PRIu64 " on the device of the "
	       "one before), %" PRId64 " evictions, %" PRIu64 " B H2D, %" PRIu64 " B P2P",
	       tg_mm_policy_name(pol), db ? "+db" : "   ", ndev, rc, fail ? ", fail " : "",
	       fail ? fail : "", st.units, st.same_device, vs.evictions.total,
	       vmm_xfer_bytes(rt->vmm, VMM_XFER_H2D), vmm_xfer_bytes(rt->vmm, VMM_XFER_P2P));
	if (fail)
		printf(", %d failure, %" PRIu64 " unit(s) in flight lost, %" PRId64
		       " objects lost, %" PRIu64 " checkpoints",
		       st.failures, st.units_lost, vs.lost_objects.total, st.checkpoints);
	if (profile)
		printf(", %s, units per device %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64
		       ", busy %.3f %.3f %.3f %.3f s",
		       profile, st.units_on[0], st.units_on[1], st.units_on[2], st.units_on[3],
		       st.busy_s[0], st.busy_s[1], st.busy_s[2], st.busy_s[3]);
	if (join_dev >= 0)
		printf(", device %d joined after %" PRIu64 " units", join_dev, lg.joined_at);
	if (leave_dev >= 0)
		printf(", device %d left after %" PRIu64 " of its units", leave_dev, lg.left_units);
	printf("\n");
	CHECK(st.stopped == 1 && vs.evictions.total > 0);
	CHECK(join_dev < 0 || lg.joined_at >= join_after);
	CHECK_MSG(leave_dev < 0 || (lg.left && st.units_on[leave_dev] == lg.left_units),
	          "device %d: %" PRIu64 " units, %" PRIu64 " when it left", leave_dev,
	          st.units_on[leave_dev], lg.left_units);
	CHECK_MSG(st.failures == (fail != NULL), "%d failures", st.failures);
	int dead = fail ? atoi(fail) : -1;
	for (int d = 0; d < ndev; d++)
		CHECK_MSG(st.units_on[d] > 0 || d == dead, "device %d ran nothing", d);
	for (int i = 0; i < NM; i++) {
		int want = i == stop_model ? stop_after : steps[i];
		CHECK_MSG(runs[i]->step == want, "model %d: %d steps", i, runs[i]->step);
		for (int s = 0; s < want - 1; s++) /* on_step sees all but the last */
			CHECK_MSG(lg.loss[i][s] == ref_loss[i][s],
			          "model %d step %d: loss %.9g, alone %.9g", i, s, lg.loss[i][s],
			          ref_loss[i][s]);
		CHECK(runs[i]->last_loss == ref_loss[i][want - 1]);
		for (int l = 0; l < m[i].nlayers; l++) {
			uint64_t n = m[i].layers[l].param_bytes;
			void *w = malloc(n + 1);
			CHECK_OK(rt_run_read_params(runs[i], l, w));
			CHECK_MSG(!memcmp(w, ref[i][l], n), "%s: model %d layer %s differs",
			          tg_mm_policy_name(pol), i, m[i].layers[l].name);
			free(w);
		}
		rt_run_close(runs[i]);
	}
	rt_close(rt);
}

/* Makespan (virtual seconds) of the models under lrtf + double buffering on
 * the model backend: ndev devices of profile prof. */
static double makespan_on(struct rt_model *m, const char *prof, int ndev, uint64_t budget,
                          struct rt_sharp_stats *st)
{
	profile = prof;
	struct rt_ctx *rt = open_rt(DEV_BACKEND_MODEL, ndev, budget, NULL);
	profile = NULL;
	struct rt_run *runs[NM];
	struct tg_plan plan[NM];
	open_runs(rt, m, runs, plan);
	struct rt_sharp_config sc = {.policy = TG_MM_LRTF, .double_buffer = 1};
	CHECK_OK(rt_sharp_run(rt, runs, steps, NM, &sc, st));
	for (int i = 0; i < NM; i++)
		rt_run_close(runs[i]);
	rt_close(rt);
	return st->makespan_s;
}

int main(void)
{
	cfg.dtype = KN_F32;
	struct rt_model m[NM];
	void *ref[NM][16];
	double ref_loss[NM][MAXSTEPS];
	uint64_t state = 0;
	for (int i = 0; i < NM; i++) {
		CHECK_OK(rt_model_gpt(&cfg, T, batch[i], &m[i]));
		m[i].data_arg = &data_seed[i];
		m[i].opt.lr = lr[i];
		if (i == 1) /* clipped (spill tune's default): the updates wait for the norm */
			m[i].opt.grad_clip = 0.05f;
		if (state_bytes(&m[i]) > state)
			state = state_bytes(&m[i]);
		/* alone, in the reference loop: one replica, the minibatch at once */
		struct rt_reference *r;
		CHECK_OK(rt_reference_open(&m[i], 1, batch[i], 42 + (uint64_t)i, &r));
		int want = i == stop_model ? stop_after : steps[i];
		for (int s = 0; s < want; s++)
			CHECK_OK(rt_reference_step(r, s, &ref_loss[i][s]));
		for (int l = 0; l < m[i].nlayers; l++) {
			ref[i][l] = malloc(m[i].layers[l].param_bytes + 1);
			memcpy(ref[i][l], r->params[l], m[i].layers[l].param_bytes);
		}
		rt_reference_close(r);
	}
	uint64_t budget = state / 5 * 3; /* the units, as the pools round them, fit */
	printf("training state of the largest model %" PRIu64 " B, device budget %" PRIu64 " B\n",
	       state, budget);
	run(m, 2, TG_MM_LRTF, 1, budget, NULL, ref, ref_loss);
	keep_stash = 1;
	run(m, 3, TG_MM_LRTF, 0, budget, NULL, ref, ref_loss);
	keep_stash = 0;
	run(m, 2, TG_MM_RANDOM, 1, budget, NULL, ref, ref_loss);
	run(m, 3, TG_MM_FIFO, 1, budget, NULL, ref, ref_loss);

	/* devices that come and go: the third joins late, the first leaves */
	join_dev = 2;
	join_after = 30;
	leave_dev = 0;
	leave_after = 70;
	run(m, 3, TG_MM_LRTF, 1, budget, NULL, ref, ref_loss);
	join_dev = leave_dev = -1;

	/* devices of different speeds: the fourth at half speed */
	profile = "gtx1080ti-x4-mixed";
	run(m, 4, TG_MM_LRTF, 1, budget, NULL, ref, ref_loss);
	profile = NULL;

	{ /* the same on the model backend, deterministic: a half-speed fourth
	   * device must help, about as much as a full-speed one at most (a list
	   * scheduler is not monotone: Graham's anomalies, 1.3% here at most), and
	   * run fewer units */
		struct rt_sharp_stats s3, s4, sm;
		double t3 = makespan_on(m, "gtx1080ti-x4", 3, budget, &s3);
		double t4 = makespan_on(m, "gtx1080ti-x4", 4, budget, &s4);
		double tm = makespan_on(m, "gtx1080ti-x4-mixed", 4, budget, &sm);
		printf("model backend makespan: 3 devices %.6f s, 4 %.6f s, 4 with one at half "
		       "speed %.6f s (units %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 ")\n",
		       t3, t4, tm, sm.units_on[0], sm.units_on[1], sm.units_on[2], sm.units_on[3]);
		CHECK(t4 <= tm * 1.03 && tm < t3);
		for (int d = 0; d < 3; d++)
			CHECK(sm.units_on[3] < sm.units_on[d]);
	}

	/* a device dies: at its first kernel, in the middle, late */
	run(m, 2, TG_MM_LRTF, 1, budget, "1:1", ref, ref_loss);
	run(m, 2, TG_MM_LRTF, 1, budget, "1:150", ref, ref_loss);
	run(m, 3, TG_MM_RANDOM, 1, budget, "0:400", ref, ref_loss);
	run(m, 3, TG_MM_LRTF, 0, budget, "2:77", ref, ref_loss);
	{ /* without recovery the run stops, naming the device */
		struct rt_ctx *rt = open_rt(DEV_BACKEND_HOST, 2, budget, "1:60");
		struct rt_run *runs[NM];
		struct tg_plan plan[NM];
		open_runs(rt, m, runs, plan);
		struct rt_sharp_config sc = {.policy = TG_MM_LRTF, .double_buffer = 1};
		struct rt_sharp_stats st;
		int rc = rt_sharp_run(rt, runs, steps, NM, &sc, &st);
		printf("no recovery: %s\n", sp_last_error());
		CHECK(rc == -EIO && strstr(sp_last_error(), "device 1 failed"));
		for (int i = 0; i < NM; i++)
			rt_run_close(runs[i]);
		rt_close(rt);
	}

	/* bad input */
	struct rt_ctx *rt = open_rt(DEV_BACKEND_HOST, 2, budget, NULL);
	struct tg_plan p;
	CHECK(rt_sharp_plan(rt, &m[0], 1.5, &p) == -EINVAL);
	struct tg_plan two = {
	    .sched = TG_HARMONY_DP, .ndev = 2, .npacks = 1, .microbatch = 2, .group = 1};
	two.pack_end[0] = m[0].nlayers;
	struct rt_run *r2;
	CHECK_OK(rt_run_open(rt, &m[0], &two, 1, &r2));
	struct rt_sharp_config sc = {.policy = TG_MM_LRTF};
	struct rt_sharp_stats st;
	int one = 1;
	CHECK(rt_sharp_run(rt, &r2, &one, 1, &sc, &st) == -EINVAL);
	rt_run_close(r2);
	rt_close(rt);

	/* a plan of its own, no shard marked: each forward and backward task is
	 * a unit (2 packs x 2 microbatches, forward and backward) */
	rt = open_rt(DEV_BACKEND_HOST, 1, 2 * state, NULL);
	struct tg_plan own = {
	    .sched = TG_HARMONY_PP, .ndev = 1, .npacks = 2, .microbatch = batch[0] / 2, .group = 1};
	own.pack_end[0] = m[0].nlayers / 2;
	own.pack_end[1] = m[0].nlayers;
	CHECK_OK(rt_run_open(rt, &m[0], &own, 42, &r2));
	CHECK_OK(rt_sharp_run(rt, &r2, &one, 1, &sc, &st));
	CHECK_MSG(st.units == 8, "a plan with no shards: %llu units, want 8",
	          (unsigned long long)st.units);
	rt_run_close(r2);
	rt_close(rt);

	/* more layers than a plan has packs: shards split into fewer packs,
	 * nothing written past the plan */
	{
		struct kn_model_config deep = cfg;
		deep.L = 1100;
		struct rt_model dm;
		CHECK_OK(rt_model_gpt(&deep, T, 2, &dm));
		rt = open_rt(DEV_BACKEND_MODEL, 1, 8 << 20, NULL);
		struct {
			struct tg_plan p;
			unsigned char canary[64];
		} guarded;
		memset(guarded.canary, 0xa5, sizeof(guarded.canary));
		CHECK_OK(rt_sharp_plan(rt, &dm, 0.15, &guarded.p));
		for (size_t k = 0; k < sizeof(guarded.canary); k++)
			CHECK(guarded.canary[k] == 0xa5);
		CHECK_MSG(guarded.p.npacks <= TG_MAX_PACKS && tg_plan_shards(&guarded.p) >= 2 &&
		              guarded.p.microbatch == 2,
		          "%d layers: %d packs in %d shards, microbatch %d", dm.nlayers,
		          guarded.p.npacks, tg_plan_shards(&guarded.p), guarded.p.microbatch);
		printf("%d layers: %d packs in %d shards\n", dm.nlayers, guarded.p.npacks,
		       tg_plan_shards(&guarded.p));
		rt_close(rt);
		rt_model_free(&dm);
	}

	rt = open_rt(DEV_BACKEND_HOST, 2, 4096, NULL);
	int rc = rt_sharp_plan(rt, &m[1], 0.15, &p);
	printf("budget 4 KiB: %s\n", sp_last_error());
	CHECK(rc == -ENOMEM && strstr(sp_last_error(), "layer") &&
	      strstr(sp_last_error(), "short"));
	rt_close(rt);

	for (int i = 0; i < NM; i++) {
		for (int l = 0; l < m[i].nlayers; l++)
			free(ref[i][l]);
		rt_model_free(&m[i]);
	}
	TEST_PASS();
}

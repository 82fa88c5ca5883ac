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
};

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

static void run(struct rt_model *m, int ndev, enum tg_mm_policy pol, int db, uint64_t budget,
                const char *fail, void *const ref[NM][16], const double ref_loss[NM][MAXSTEPS])
{
	struct rt_ctx *rt = open_rt(DEV_BACKEND_HOST, ndev, budget, fail);
	struct rt_run *runs[NM];
	struct tg_plan plan[NM];
	for (int i = 0; i < NM; i++) {
		CHECK_OK(rt_sharp_plan(rt, &m[i], 0.15, &plan[i]));
		if (keep_stash)
			plan[i].recompute = 0;
		CHECK_MSG(plan[i].npacks >= 2, "model %d in %d shard(s)", i, plan[i].npacks);
		CHECK_OK(rt_run_open(rt, &m[i], &plan[i], 42 + (uint64_t)i, &runs[i]));
	}
	struct log lg = {0};
	struct rt_sharp_config sc = {.policy = pol,
	                             .double_buffer = db,
	                             .seed = 5,
	                             .on_step = on_step,
	                             .arg = &lg,
	                             .recover = fail != NULL};
	struct rt_sharp_stats st;
	CHECK_OK(rt_sharp_run(rt, runs, steps, NM, &sc, &st));
	struct vmm_stats vs;
	vmm_stats_get(rt->vmm, &vs);
	printf("  %-6s%s %d devices%s%s%s: %" PRIu64 " units (%" PRIu64 " on the device of the "
	       "one before), %" PRId64 " evictions, %" PRIu64 " B H2D, %" PRIu64 " B P2P",
	       tg_mm_policy_name(pol), db ? "+db" : "   ", ndev,
	       plan[0].recompute ? ", recompute" : "", fail ? ", fail " : "", fail ? fail : "",
	       st.units, st.same_device, vs.evictions.total, vmm_xfer_bytes(rt->vmm, VMM_XFER_H2D),
	       vmm_xfer_bytes(rt->vmm, VMM_XFER_P2P));
	if (fail)
		printf(", %d failure, %" PRIu64 " unit(s) in flight lost, %" PRId64
		       " objects lost, %" PRIu64 " checkpoints",
		       st.failures, st.units_lost, vs.lost_objects.total, st.checkpoints);
	printf("\n");
	CHECK(st.stopped == 1 && vs.evictions.total > 0);
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
	uint64_t budget = state / 2;
	printf("training state of the largest model %" PRIu64 " B, device budget %" PRIu64 " B\n",
	       state, budget);
	run(m, 2, TG_MM_LRTF, 1, budget, NULL, ref, ref_loss);
	keep_stash = 1;
	run(m, 3, TG_MM_LRTF, 0, budget, NULL, ref, ref_loss);
	keep_stash = 0;
	run(m, 2, TG_MM_RANDOM, 1, budget, NULL, ref, ref_loss);
	run(m, 3, TG_MM_FIFO, 1, budget, NULL, ref, ref_loss);

	/* a device dies: at its first kernel, in the middle, late */
	run(m, 2, TG_MM_LRTF, 1, budget, "1:1", ref, ref_loss);
	run(m, 2, TG_MM_LRTF, 1, budget, "1:150", ref, ref_loss);
	run(m, 3, TG_MM_RANDOM, 1, budget, "0:400", ref, ref_loss);
	run(m, 3, TG_MM_LRTF, 0, budget, "2:77", ref, ref_loss);
	{ /* without recovery the run stops, naming the device */
		struct rt_ctx *rt = open_rt(DEV_BACKEND_HOST, 2, budget, "1:60");
		struct rt_run *runs[NM];
		struct tg_plan plan[NM];
		for (int i = 0; i < NM; i++) {
			CHECK_OK(rt_sharp_plan(rt, &m[i], 0.15, &plan[i]));
			CHECK_OK(rt_run_open(rt, &m[i], &plan[i], 42 + (uint64_t)i, &runs[i]));
		}
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

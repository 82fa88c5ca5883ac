/* tests/runtime/test_transparency.c — DESIGN §9.1: under any budget that admits
 * a plan, training through the executor computes the same numbers as the plain
 * in-memory reference loop (same kernels, same reduction order).
 *
 * A small GPT-2 (embedding, 4 blocks, head tied to the embedding; V 64, T 8,
 * C 32, 2 heads), batch 8, three steps, on the host backend with 1, 2 and 4
 * emulated devices, for every schedule (dp-swap, gpipe, 1f1b, harmony-dp,
 * harmony-pp; one layer per pack), at budgets from ample down to the smallest
 * that runs: every step's loss and every final weight are bit-identical to the
 * reference's (nrep = devices in data-parallel modes, else 1), and below ample
 * the vmm really evicted; also with recomputation and with the update on the
 * CPU. The smallest budget is found by trying: halving from
 * the working set's sum until -ENOMEM, whose message must name the task and
 * the smallest budget. SGD (plain: no optimizer state at all; and with
 * momentum) is held to the same, under eviction, with recomputation and with
 * the update on the CPU. 2bw (PipeDream-2BW: two weight versions, the
 * delayed update) is held to the reference's 2BW mode (rt_reference_set_2bw),
 * which differs from the plain one from the second step. And under adversarial timing (SPILL_HOST_JITTER: one
 * device's kernels start late at random), so that late binding moves
 * microbatches: still the same bits. argv[1]: "quick" runs fewer cases. */
#include "runtime/runtime.h"
#include "tests/test.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

#define STEPS 3

static struct kn_model_config cfg = {.maxT = 8, .V = 64, .L = 4, .NH = 2, .C = 32};
static const int T = 8, BATCH = 8;

/* SPILL_HOST_JITTER for the runs ("" none), and the tasks they bound late */
static char jitter[64];
static int64_t late_total;

static struct rt_ctx *open_rt(int ndev, uint64_t budget)
{
	struct sp_params sp;
	sp_params_defaults(&sp);
	sp.host_jitter = jitter;
	struct rt_config c;
	CHECK_OK(rt_config_from_params(&sp, &c));
	c.dev.backend = DEV_BACKEND_HOST;
	c.dev.ndevices = ndev;
	c.dev.device_mem = 64 << 20;
	c.vmm.device_mem = budget;
	c.vmm.host_mem = 64 << 20;
	c.vmm.max_objects = 4096;
	c.threads = 1;
	c.exec.steal_eager = 1; /* take over whenever the backlogs allow: the hardest case */
	struct rt_ctx *rt;
	CHECK_OK(rt_open(&c, &rt));
	return rt;
}

struct ref_result {
	double loss[STEPS];
	void *params[16];
};

/* The reference of schedule sched: 2BW's delayed update for TG_2BW. */
static void reference(const struct rt_model *m, int sched, int nrep, int mb, struct ref_result *out)
{
	struct rt_reference *r;
	CHECK_OK(rt_reference_open(m, nrep, mb, 42, &r));
	if (sched == TG_2BW)
		CHECK_OK(rt_reference_set_2bw(r));
	for (int s = 0; s < STEPS; s++)
		CHECK_OK(rt_reference_step(r, s, &out->loss[s]));
	for (int l = 0; l < m->nlayers; l++) {
		out->params[l] = malloc(m->layers[l].param_bytes + 1);
		memcpy(out->params[l], r->params[l], m->layers[l].param_bytes);
	}
	rt_reference_close(r);
}

/* Runs the plan at budget; returns 0, or -ENOMEM (then nothing is compared).
 * *evictions gets the vmm's count. */
static int run(const struct rt_model *m, const struct tg_plan *plan, uint64_t budget,
               const struct ref_result *ref, int64_t *evictions)
{
	struct rt_ctx *rt = open_rt(plan->ndev, budget);
	struct rt_run *run;
	CHECK_OK(rt_run_open(rt, m, plan, 42, &run));
	int rc = 0;
	for (int s = 0; s < STEPS && !rc; s++) {
		double loss;
		rc = rt_run_step(run, &loss);
		if (rc == -ENOMEM)
			break;
		CHECK_MSG(rc == 0, "%s", sp_last_error());
		CHECK_MSG(loss == ref->loss[s],
		          "%s on %d device(s), budget %" PRIu64
		          ": step %d loss %.9g, reference %.9g",
		          tg_sched_name(plan->sched), plan->ndev, budget, s, loss, ref->loss[s]);
	}
	if (rc == -ENOMEM) {
		printf("  %-10s %d dev, budget %7" PRIu64 ": %s\n", tg_sched_name(plan->sched),
		       plan->ndev, budget, sp_last_error());
		CHECK_MSG(strstr(sp_last_error(), "smallest device budget") &&
		              strstr(sp_last_error(), "task"),
		          "%s", sp_last_error());
	} else {
		for (int l = 0; l < m->nlayers; l++) {
			uint64_t n = m->layers[l].param_bytes;
			void *w = malloc(n + 1);
			CHECK_OK(rt_run_read_params(run, l, w));
			CHECK_MSG(!memcmp(w, ref->params[l], n),
			          "%s on %d device(s), budget %" PRIu64 ": layer %s differs",
			          tg_sched_name(plan->sched), plan->ndev, budget,
			          m->layers[l].name);
			free(w);
		}
		struct vmm_stats st;
		vmm_stats_get(rt->vmm, &st);
		*evictions = st.evictions.total;
		late_total += rt->st.late_bound;
		printf("  %-10s %d dev%s%s, budget %7" PRIu64 ": %4" PRId64 " evictions, %8" PRIu64
		       " B H2D, %8" PRIu64 " B D2H, %8" PRIu64 " B P2P, %3" PRIu64 " late-bound\n",
		       tg_sched_name(plan->sched), plan->ndev, plan->recompute ? ", recompute" : "",
		       plan->upd_cpu ? ", cpu update" : "", budget, st.evictions.total,
		       vmm_xfer_bytes(rt->vmm, VMM_XFER_H2D), vmm_xfer_bytes(rt->vmm, VMM_XFER_D2H),
		       vmm_xfer_bytes(rt->vmm, VMM_XFER_P2P), rt->st.late_bound);
	}
	rt_run_close(run);
	rt_close(rt);
	return rc;
}

/* SGD: the optimizer state is none (plain) or one buffer (momentum); the
 * executor must give the reference's numbers either way, under pressure. */
static void sgd_cases(struct rt_model *m, const struct ref_result *adamw_ref)
{
	static const float moms[] = {0.0f, 0.9f};
	static const int scheds[] = {TG_HARMONY_PP, TG_DP_SWAP, TG_GPIPE};
	for (int k = 0; k < 2; k++) {
		CHECK_OK(rt_model_set_optimizer(m, KN_SGD, moms[k]));
		m->opt.lr = 0.05f;
		for (int l = 0; l < m->nlayers; l++)
			CHECK(m->layers[l].optim_bytes == (moms[k] ? m->layers[l].param_bytes : 0));
		for (size_t si = 0; si < SP_ARRAY_SIZE(scheds); si++) {
			int s = scheds[si], nd = 2, dp = s == TG_DP_SWAP;
			struct tg_plan p = {.sched = s,
			                    .ndev = nd,
			                    .npacks = m->nlayers,
			                    .microbatch = 1,
			                    .group = 1};
			for (int i = 0; i < m->nlayers; i++)
				p.pack_end[i] = i + 1;
			struct ref_result ref;
			reference(m, s, dp ? nd : 1, 1, &ref);
			if (si == 0) /* the optimizer really changed: a different second step */
				CHECK_MSG(ref.loss[0] == adamw_ref->loss[0] &&
				              ref.loss[1] != adamw_ref->loss[1],
				          "sgd losses %.9g %.9g vs adamw %.9g %.9g", ref.loss[0],
				          ref.loss[1], adamw_ref->loss[0], adamw_ref->loss[1]);
			printf(
			    "sgd momentum %.1f, %s, %d devices: reference losses %.6f %.6f %.6f\n",
			    (double)moms[k], tg_sched_name(s), nd, ref.loss[0], ref.loss[1],
			    ref.loss[2]);
			struct tg_layer tl[16];
			struct tg_model tm;
			rt_model_tg(m, tl, &tm);
			for (int v = 0; v <= 2; v++) {
				struct tg_plan q = p;
				q.recompute = v == 1;
				q.upd_cpu = v == 2;
				struct tg_graph g;
				CHECK_OK(tg_graph_build(&tm, 1, &q, &g));
				uint64_t ws = tg_graph_min_capacity(&g, NULL);
				tg_graph_free(&g);
				int64_t ev = 0;
				CHECK_OK(run(m, &q, ws * 3 / 2, &ref, &ev));
				CHECK_MSG(ev > 0, "sgd: no evictions at 1.5x the working set");
			}
			for (int l = 0; l < m->nlayers; l++)
				free(ref.params[l]);
		}
	}
	CHECK_OK(rt_model_set_optimizer(m, KN_ADAMW, 0));
	CHECK(rt_model_set_optimizer(m, KN_ADAMW, 0.9f) == -EINVAL);
	CHECK(rt_model_set_optimizer(m, KN_SGD, 1.0f) == -EINVAL);
}

/* Clipping by global norm: the NORM tasks and the updates after them give the
 * reference's bits under every schedule, packing (the norm is per layer, so
 * packs change no sum), update place and budget; a threshold the norm never
 * reaches changes no bit at all, one it always exceeds changes the run. */
static void clip_cases(struct rt_model *m, const struct ref_result *plain, int quick)
{
	struct ref_result ref, loose;
	m->opt.grad_clip = 1e30f;
	reference(m, 0, 1, 1, &loose);
	for (int s = 0; s < STEPS; s++)
		CHECK_MSG(loose.loss[s] == plain->loss[s], "clip 1e30: step %d loss %.9g, not %.9g",
		          s, loose.loss[s], plain->loss[s]);
	for (int l = 0; l < m->nlayers; l++) {
		CHECK(!memcmp(loose.params[l], plain->params[l], m->layers[l].param_bytes));
		free(loose.params[l]);
	}
	static const float clips[] = {0.05f, 1e30f};
	static const int optims[] = {KN_ADAMW, KN_SGD};
	int cases = 0;
	for (int ci = 0; ci < 2; ci++)
		for (int oi = 0; oi < 2; oi++) {
			if (quick && ci == 1)
				continue;
			CHECK_OK(
			    rt_model_set_optimizer(m, optims[oi], optims[oi] == KN_SGD ? 0.9f : 0));
			m->opt.lr = optims[oi] == KN_SGD ? 0.05f : 3e-4f;
			m->opt.grad_clip = clips[ci];
			for (int s = 0; s < TG_NSCHED; s++) {
				int dp = s == TG_DP_SWAP || s == TG_HARMONY_DP,
				    nd = s == TG_GPIPE ? 4 : 2;
				struct tg_plan p = {
				    .sched = s, .ndev = nd, .microbatch = 1, .group = 1};
				if (s == TG_HARMONY_DP || s == TG_HARMONY_PP)
					p.group = 2;
				/* packs of 1 and 2 layers, the tied head alone */
				p.npacks = 0;
				for (int l = 0; l < m->nlayers;)
					l = p.pack_end[p.npacks++] = l + (l == 1 ? 2 : 1);
				reference(m, s, dp ? nd : 1, 1, &ref);
				if (ci == 0 && s == 0) {
					struct ref_result unclipped;
					m->opt.grad_clip = 0;
					reference(m, 0, 1, 1, &unclipped);
					m->opt.grad_clip = clips[ci];
					CHECK_MSG(unclipped.loss[1] != ref.loss[1],
					          "clip %g did not change step 2 (%.9g)",
					          (double)clips[ci], ref.loss[1]);
					for (int l = 0; l < m->nlayers; l++)
						free(unclipped.params[l]);
				}
				struct tg_layer tl[16];
				struct tg_model tm;
				rt_model_tg(m, tl, &tm);
				CHECK(tm.norm_bytes > 0);
				for (int v = 0; v <= 2; v++) {
					struct tg_plan q = p;
					q.recompute = v == 1;
					q.upd_cpu = v == 2;
					struct tg_graph g;
					CHECK_OK(tg_graph_build(&tm, 1, &q, &g));
					CHECK_OK(tg_graph_validate(&g));
					uint64_t ws = tg_graph_min_capacity(&g, NULL);
					int norms = 0;
					for (int t = 0; t < g.ntask; t++)
						norms += g.task[t].kind == TG_NORM;
					CHECK_MSG(norms == q.npacks * (dp ? nd : 1),
					          "%d NORM tasks", norms);
					tg_graph_free(&g);
					int64_t ev = 0;
					CHECK_OK(run(m, &q, ws * 3 / 2, &ref, &ev));
					CHECK_OK(run(m, &q, ws * 64, &ref, &ev));
					cases += 2;
				}
				for (int l = 0; l < m->nlayers; l++)
					free(ref.params[l]);
			}
		}
	m->opt.grad_clip = 0;
	CHECK_OK(rt_model_set_optimizer(m, KN_ADAMW, 0));
	m->opt.lr = 3e-4f;
	printf("clipping: %d cases bit-identical to the reference\n", cases);
}

/* Adversarial timing (DESIGN §9.1: late binding and timing change no bit):
 * one emulated device's kernels start up to 0.8 ms late at random (seeded,
 * SPILL_HOST_JITTER), so late binding hands its microbatches to the others in
 * an order that changes from run to run; every schedule on 2 and 4 devices,
 * ample and tight budgets, must still give the reference's bits, and the data-
 * parallel schedules must really have been bound away. */
static void jitter_cases(int quick)
{
	static const int devs[] = {2, 4};
	int seed = 1;
	/* 16 samples: 4 microbatches a device on 4 devices, enough for a fast
	 * device to take over a slow one's (the executor steals from a backlog) */
	struct rt_model mj, *m = &mj;
	CHECK_OK(rt_model_gpt(&cfg, T, 2 * BATCH, m));
	uint64_t dseed = 7;
	m->data_arg = &dseed;
	for (int s = 0; s < TG_NSCHED; s++)
		for (int di = 0; di < 2; di++) {
			int nd = devs[di], dp = s == TG_DP_SWAP || s == TG_HARMONY_DP;
			struct tg_plan p = {
			    .sched = s, .ndev = nd, .npacks = m->nlayers, .microbatch = 1};
			for (int i = 0; i < m->nlayers; i++)
				p.pack_end[i] = i + 1;
			p.group = s == TG_HARMONY_PP ? 2 : 1; /* harmony-dp: 4 groups a device */
			struct ref_result ref;
			reference(m, s, dp ? nd : 1, p.microbatch, &ref);
			struct tg_layer tl[16];
			struct tg_model tm;
			rt_model_tg(m, tl, &tm);
			struct tg_graph g;
			CHECK_OK(tg_graph_build(&tm, 1, &p, &g));
			uint64_t ws = tg_graph_min_capacity(&g, NULL);
			tg_graph_free(&g);
			int64_t late0 = late_total;
			for (int k = 0; k < (quick ? 1 : 2); k++) {
				int64_t ev = 0;
				snprintf(jitter, sizeof(jitter), "%d:800:%d", seed % nd, seed);
				seed++;
				CHECK_OK(run(m, &p, k ? ws * 3 / 2 : 64 * ws, &ref, &ev));
				CHECK_MSG(!k || ev > 0, "%s on %d devices: no evictions at 1.5x",
				          tg_sched_name(s), nd);
			}
			printf("%s on %d devices under SPILL_HOST_JITTER: %" PRId64
			       " tasks bound late, bit-identical\n",
			       tg_sched_name(s), nd, late_total - late0);
			CHECK_MSG(!dp || late_total > late0,
			          "%s on %d devices: jitter bound nothing late", tg_sched_name(s),
			          nd);
			for (int l = 0; l < m->nlayers; l++)
				free(ref.params[l]);
		}
	jitter[0] = 0;
	rt_model_free(m);
}

int main(int argc, char **argv)
{
	int quick = argc > 1 && !strcmp(argv[1], "quick");
	cfg.dtype = KN_F32;
	struct rt_model m;
	CHECK_OK(rt_model_gpt(&cfg, T, BATCH, &m));
	uint64_t seed = 7;
	m.data_arg = &seed;
	static const int devs[] = {1, 2, 4};
	int cases = 0;
	for (int s = 0; s < TG_NSCHED; s++)
		for (int di = 0; di < 3; di++) {
			int nd = devs[di];
			if (quick && nd == 2)
				continue;
			int dp = s == TG_DP_SWAP || s == TG_HARMONY_DP;
			struct tg_plan p = {
			    .sched = s, .ndev = nd, .npacks = m.nlayers, .microbatch = 1};
			for (int i = 0; i < m.nlayers; i++)
				p.pack_end[i] = i + 1;
			int mper = BATCH / (dp ? nd : 1);
			p.group =
			    (s == TG_HARMONY_DP || s == TG_HARMONY_PP) ? (mper >= 2 ? 2 : 1) : 1;
			struct ref_result ref;
			reference(&m, s, dp ? nd : 1, p.microbatch, &ref);
			if (s == TG_2BW) { /* the delayed update shows from the second step */
				struct ref_result plain;
				reference(&m, TG_1F1B, 1, p.microbatch, &plain);
				CHECK_MSG(plain.loss[0] == ref.loss[0] &&
				              plain.loss[1] != ref.loss[1],
				          "2bw reference losses %.9g %.9g, plain %.9g %.9g",
				          ref.loss[0], ref.loss[1], plain.loss[0], plain.loss[1]);
				for (int l = 0; l < m.nlayers; l++)
					free(plain.params[l]);
			}
			printf("%s, %d device(s), group %d: reference losses %.6f %.6f %.6f\n",
			       tg_sched_name(s), nd, p.group, ref.loss[0], ref.loss[1],
			       ref.loss[2]);
			/* the graph's largest working set, rounded up by the vmm's alignment */
			struct tg_layer tl[16];
			struct tg_model tm;
			rt_model_tg(&m, tl, &tm);
			struct tg_graph g;
			CHECK_OK(tg_graph_build(&tm, 1, &p, &g));
			int worst;
			uint64_t ws = tg_graph_min_capacity(&g, &worst);
			tg_graph_free(&g);
			uint64_t ample = 64 * ws;
			int64_t ev = 0, ev_min = 0;
			CHECK_OK(run(&m, &p, ample, &ref, &ev));
			CHECK(ev == 0);
			uint64_t b = ws * 2, last_ok = 0;
			for (int tries = 0; tries < 8 && b >= ws / 2; tries++) {
				int rc = run(&m, &p, b, &ref, &ev);
				if (rc < 0)
					break;
				last_ok = b;
				ev_min = ev;
				b = b * 3 / 4;
			}
			CHECK_MSG(last_ok && last_ok <= ws * 2,
			          "%s: nothing between the working set %" PRIu64
			          " and twice it ran",
			          tg_sched_name(s), ws);
			CHECK_MSG(ev_min > 0,
			          "%s on %d devices: no evictions at the smallest budget",
			          tg_sched_name(s), nd);
			/* recomputation (the backward re-runs the pack's forward) and the update
			 * on the CPU (AdamW on the host copies) change no number either */
			for (int v = 1; v <= 3; v++) {
				struct tg_plan q = p;
				q.recompute = v & 1;
				q.upd_cpu = !!(v & 2);
				struct tg_graph gq;
				CHECK_OK(tg_graph_build(&tm, 1, &q, &gq));
				uint64_t wq = tg_graph_min_capacity(&gq, NULL);
				tg_graph_free(&gq);
				CHECK_OK(run(&m, &q, wq * 3 / 2, &ref, &ev));
			}
			for (int l = 0; l < m.nlayers; l++)
				free(ref.params[l]);
			cases++;
		}
	printf("%d schedule x device cases bit-identical to the reference\n", cases);
	jitter_cases(quick);
	struct ref_result adamw;
	reference(&m, 0, 1, 1, &adamw);
	clip_cases(&m, &adamw, quick);
	for (int l = 0; l < m.nlayers; l++)
		free(adamw.params[l]);
	sgd_cases(&m, &adamw);
	/* a last layer whose output cannot hold the losses is refused up front,
	 * not a copy from nowhere in the loss task */
	struct rt_layer *last = &m.layers[m.nlayers - 1];
	uint64_t out = last->out_per_sample;
	last->out_per_sample = (uint64_t)m.loss_floats * sizeof(float) - 1;
	struct tg_plan one = {.sched = TG_DP_SWAP, .ndev = 1, .npacks = 1, .microbatch = 1};
	one.pack_end[0] = m.nlayers;
	struct rt_ctx *rt = open_rt(1, 16ull << 20);
	struct rt_run *bad = NULL;
	CHECK(rt_run_open(rt, &m, &one, 42, &bad) == -EINVAL && !bad);
	CHECK_MSG(strstr(sp_last_error(), last->name) && strstr(sp_last_error(), "losses"), "%s",
	          sp_last_error());
	rt_close(rt);
	last->out_per_sample = out;
	rt_model_free(&m);
	TEST_PASS();
}

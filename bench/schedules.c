/* bench/schedules.c — make bench-schedules: the executor itself on the model
 * backend (virtual time, 4x GTX 1080 Ti profile), for transformer shapes of
 * BERT-Large, BERT-96, GPT-2 XL and GPT-2 10B built from the GPT kernels'
 * layers: simulated iteration time and swap volume of each schedule relative
 * to dp-swap as Harmony measured it (per-GPU virtual memory: on-demand
 * swapping, LRU, clean copies written back, no knowledge of dead contents),
 * of `auto`, and of a plan that copies the published Harmony runtime
 * (harmony-pp's round-robin packs, the update on the CPU, LRU, prefetch of the
 * next task only); next to the taskgraph's analytic prediction of each plan.
 * Each schedule takes its best of microbatch {1, 2, 4} x group {1, 2, 4, 8}.
 * Last line:
 *   speedup best/dp-swap=X harmony-pp/dp-swap=Y auto/harmony-published=Z predicted_err=E
 * (X, Y, Z: the best over the workloads; E: the worst error of the predicted
 * iteration time of the chosen plans). Writes bench/results/schedules.json.
 * argv: [json path] [workload filter substring] */
#include "bench/bench.h"

#include <stdint.h>
#include "runtime/runtime.h"

#include <math.h>
#include <time.h>

struct shape {
	const char *name;
	int L, C, NH, T, V, batch;
};

static const struct shape shapes[] = {
    {"BERT-Large", 24, 1024, 16, 512, 30522, 32},
    {"BERT-96", 96, 1024, 16, 512, 30522, 32},
    {"GPT-2 XL", 48, 1600, 25, 1024, 50257, 16},
    {"GPT-2 10B", 48, 4096, 32, 1024, 50257, 16},
    /* a block whose weights, gradients and AdamW state (12.9 GB) exceed one
     * device's budget: whole, each pass swaps it in; in quarters, not */
    {"wide block (C 8192)", 2, 8192, 64, 1024, 8192, 8},
};

struct result {
	int ok;
	double iter_s, pred_s, wall_s, pred_comp, pred_tr;
	uint64_t pred_bytes;
	uint64_t bytes;
	struct tg_plan plan;
	char desc[160];
};

static double wall(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

enum mode { SPILL, BASELINE, PUBLISHED };

static struct rt_ctx *open_model(enum mode mode)
{
	struct sp_params sp;
	sp_params_defaults(&sp);
	struct rt_config c;
	if (rt_config_from_params(&sp, &c) < 0)
		return NULL;
	c.dev.backend = DEV_BACKEND_MODEL;
	c.dev.profile = "gtx1080ti-x4";
	c.vmm.host_mem = 4ull << 40; /* address space only */
	c.vmm.max_objects = 1 << 16;
	c.vmm.trace_cap = 0;
	c.vmm.align = 1 << 20;
	if (mode != SPILL) /* neither orders copies on the shared host link */
		c.vmm.link_copies = -1;
	if (mode == BASELINE) { /* per-GPU virtual memory */
		c.vmm.policy = VMM_POLICY_LRU;
		c.vmm.writeback_clean = 1;
		c.exec = (struct rt_exec_config){.window = 1};
	} else if (mode == PUBLISHED) {
		c.vmm.policy = VMM_POLICY_LRU;
		c.exec = (struct rt_exec_config){.lookahead = 1, .window = 2, .discard = 1};
	}
	struct rt_ctx *rt;
	if (rt_open(&c, &rt) < 0)
		return NULL;
	return rt;
}

static uint64_t moved(struct rt_ctx *rt)
{
	return vmm_xfer_bytes(rt->vmm, VMM_XFER_H2D) + vmm_xfer_bytes(rt->vmm, VMM_XFER_D2H) +
	       vmm_xfer_bytes(rt->vmm, VMM_XFER_P2P) + rt->st.collective_p2p;
}

/* Simulates 2 iterations of m under plan and keeps the second (2bw without a
 * flush: two runs of its program of K steps, the second over K). */
static int simulate(struct rt_model *m, const struct tg_plan *plan, enum mode mode,
                    struct result *r)
{
	double w0 = wall();
	memset(r, 0, sizeof(*r));
	struct rt_ctx *rt = open_model(mode);
	if (!rt)
		return -1;
	struct rt_run *run = NULL;
	int rc = rt_run_open(rt, m, plan, 1, &run);
	double t1 = 0, t2 = 0;
	uint64_t b1 = 0;
	int K = rc == 0 ? run->mo->nstep : 1;
	if (rc == 0)
		rc = rt_run_steps(run, K, NULL, NULL);
	if (rc == 0) {
		t1 = dev_now(rt->dev);
		b1 = moved(rt);
		rc = rt_run_steps(run, K, NULL, NULL);
		t2 = dev_now(rt->dev);
	}
	if (rc == 0) {
		r->ok = 1;
		r->iter_s = (t2 - t1) / K;
		r->bytes = (moved(rt) - b1) / (uint64_t)K;
		r->plan = *plan;
		rt_plan_describe(plan, r->desc, sizeof(r->desc));
		/* the analytic prediction of the same plan, from a pilot run's layer times */
		struct tg_hw hw;
		rt_plan_hw(rt, plan->ndev, &hw);
		struct tg_layer *tl = calloc((size_t)m->nlayers, sizeof(*tl));
		struct tg_model tm;
		struct tg_graph g;
		struct tg_swap sw;
		struct tg_time tt;
		/* tensor parallelism: the members' layers, by FLOPs (a shard's pass
		 * runs in segments, which the pilot run does not time) */
		int members = plan->tp > 1; /* the run's model is the members' */
		if (tl && members)
			rt_model_tg(run->m, tl, &tm);
		if (tl && (members || rt_model_profile(rt, m, plan->microbatch) == 0)) {
			if (!members)
				rt_model_tg_timed(m, hw.flops, tl, &tm);
			if (tg_graph_build(&tm, 1, plan, &g) == 0) {
				tg_graph_set_hw(&g, &hw);
				if (tg_sim_time(&g, plan, &hw, mode == BASELINE, &sw, &tt) == 0) {
					r->pred_s = tt.iter_s;
					r->pred_comp = tt.compute_s;
					r->pred_tr = tt.transfer_s;
					for (int l = 0; l < TG_NLINK; l++)
						for (int k = 0; k < TG_NOKIND; k++)
							r->pred_bytes +=
							    sw.bytes[l][k] / (uint64_t)K;
				}
				tg_graph_free(&g);
			}
		}
		free(tl);
	}
	rt_run_close(run);
	rt_close(rt);
	r->wall_s = wall() - w0;
	return rc;
}

/* The best of microbatch x group for a schedule (mode: how the executor runs). */
static void best_of(struct rt_ctx *probe, struct rt_model *m, enum tg_sched s, int upd_cpu,
                    enum mode mode, int max_group, struct result *best)
{
	memset(best, 0, sizeof(*best));
	static const int mbs[] = {1, 2, 4};
	static const int groups[] = {1, 2, 4, 8};
	int harmony = s == TG_HARMONY_DP || s == TG_HARMONY_PP;
	for (size_t a = 0; a < 3; a++)
		for (size_t b = 0; b < (harmony ? 4u : 1u); b++)
			for (int v = 0; v < (mode == SPILL ? 4 : 1); v++) {
				if (groups[b] > max_group)
					continue;
				struct rt_plan_request req = {.schedule = tg_sched_name(s),
				                              .microbatch = mbs[a],
				                              .group = groups[b],
				                              .upd_cpu =
				                                  mode == SPILL ? v & 1 : upd_cpu,
				                              .recompute = v >> 1};
				struct tg_plan p;
				if (rt_plan_choose(probe, m, &req, &p) < 0) {
					if (!best->ok && !best->desc[0]) /* the first reason */
						snprintf(best->desc, sizeof(best->desc), "%s",
						         sp_last_error());
					continue;
				}
				struct result r;
				if (simulate(m, &p, mode, &r) == 0 &&
				    (!best->ok || r.iter_s < best->iter_s))
					*best = r;
				else if (!r.ok && !best->ok)
					snprintf(best->desc, sizeof(best->desc), "%s",
					         sp_last_error());
			}
}

/* Tensor parallelism over tp devices a stage: 1f1b on the stages, the best
 * of microbatch {1, 2, 4} x the update on the devices or the CPU (m in tp
 * form). */
static void best_tp(struct rt_ctx *probe, struct rt_model *m, int tp, struct result *best)
{
	memset(best, 0, sizeof(*best));
	static const int mbs[] = {1, 2, 4};
	for (size_t a = 0; a < 3; a++)
		for (int v = 0; v < 2; v++) {
			struct rt_plan_request req = {
			    .schedule = "1f1b", .microbatch = mbs[a], .upd_cpu = v, .tp = tp};
			struct tg_plan p;
			if (rt_plan_choose(probe, m, &req, &p) < 0) {
				if (!best->ok)
					snprintf(best->desc, sizeof(best->desc), "%s",
					         sp_last_error());
				continue;
			}
			struct result r;
			if (simulate(m, &p, SPILL, &r) == 0 &&
			    (!best->ok || r.iter_s < best->iter_s))
				*best = r;
			else if (!r.ok && !best->ok)
				snprintf(best->desc, sizeof(best->desc), "%s", sp_last_error());
		}
}

static void row(FILE *f, const char *what, const struct result *r, const struct result *base,
                int *first)
{
	if (!r->ok) {
		printf("  %-20s no plan runs: %s\n", what, r->desc);
		return;
	}
	double err = r->pred_s > 0 ? fabs(r->pred_s - r->iter_s) / r->iter_s : NAN;
	printf("  %-20s %9.3f s %8.2fx %10.1f GB %7.2fx   pred %8.3f s (%+5.1f%%) [c %.2f t %.2f v "
	       "%.0f] %s  [%.1f s]\n",
	       what, r->iter_s, base->iter_s / r->iter_s, (double)r->bytes / 1e9,
	       base->bytes ? (double)r->bytes / (double)base->bytes : 0, r->pred_s,
	       100 * (r->pred_s - r->iter_s) / r->iter_s, r->pred_comp, r->pred_tr,
	       r->pred_bytes / 1e9, r->desc, r->wall_s);
	fprintf(f,
	        "%s      {\"plan\": \"%s\", \"config\": \"%s\", \"iter_s\": %.6f, \"bytes\": %llu, "
	        "\"speedup_vs_dp_swap\": %.4f, \"predicted_s\": %.6f, \"predicted_err\": %.4f, "
	        "\"sim_wall_s\": %.3f}",
	        *first ? "" : ",\n", what, r->desc, r->iter_s, (unsigned long long)r->bytes,
	        base->iter_s / r->iter_s, r->pred_s, err, r->wall_s);
	*first = 0;
}

int main(int argc, char **argv)
{
	const char *json = argc > 1 ? argv[1] : "bench/results/schedules.json";
	const char *filter = argc > 2 ? argv[2] : "";
	FILE *f = fopen(json, "w");
	if (!f) {
		perror(json);
		return 1;
	}
	fprintf(f, "{\n");
	bench_machine_json(f);
	fprintf(f, "  \"profile\": \"gtx1080ti-x4 (model backend, virtual time)\",\n"
	           "  \"workloads\": [\n");
	double X = 0, Y = 0, Z = 0, E = 0;
	int nw = 0;
	for (size_t w = 0; w < sizeof(shapes) / sizeof(shapes[0]); w++) {
		const struct shape *sh = &shapes[w];
		if (filter[0] && !strstr(sh->name, filter))
			continue;
		struct kn_model_config cfg = {.maxT = sh->T,
		                              .V = sh->V,
		                              .L = sh->L,
		                              .NH = sh->NH,
		                              .C = sh->C,
		                              .dtype = KN_F32};
		struct rt_model m;
		if (rt_model_gpt(&cfg, sh->T, sh->batch, &m) < 0) {
			fprintf(stderr, "%s: %s\n", sh->name, sp_last_error());
			return 1;
		}
		struct rt_ctx *probe = open_model(SPILL);
		if (!probe) {
			fprintf(stderr, "%s\n", sp_last_error());
			return 1;
		}
		uint64_t params = 0;
		for (int l = 0; l < m.nlayers; l++)
			params += m.layers[l].param_bytes / 4;
		printf("%s: %d layers, %.2f B parameters, batch %d x %d tokens, 4x GTX 1080 Ti\n",
		       sh->name, m.nlayers, params / 1e9, sh->batch, sh->T);
		printf("  %-20s %11s %9s %13s %8s   %s\n", "plan", "iteration", "speedup",
		       "swap volume", "volume", "analytic prediction, plan");
		fprintf(f, "%s    {\"name\": \"%s\", \"params\": %llu, \"rows\": [\n",
		        nw ? ",\n" : "", sh->name, (unsigned long long)params);
		struct result base, res[TG_NSCHED], aut, pub;
		/* the wide block: no device holds a whole block's update, so no
		 * dp-swap; the rows are against 1f1b with whole blocks */
		int wide = strstr(sh->name, "wide") != NULL;
		struct kn_model_config tcfg = cfg;
		tcfg.tp_form = 1;
		struct rt_model mt;
		struct result tpr[2];
		int have_mt = rt_model_gpt(&tcfg, sh->T, sh->batch, &mt) == 0;
		for (int i = 0; i < 2; i++) {
			memset(&tpr[i], 0, sizeof(tpr[i]));
			if (have_mt)
				best_tp(probe, &mt, 2 << i, &tpr[i]);
			else /* the shape does not split (heads not a multiple of 4) */
				snprintf(tpr[i].desc, sizeof(tpr[i].desc), "%s", sp_last_error());
		}
		if (have_mt)
			rt_model_free(&mt);
		struct result whole;
		if (wide) { /* against 1f1b with whole blocks, else tp 2 */
			best_of(probe, &m, TG_1F1B, 0, SPILL, 1, &whole);
			base = whole.ok ? whole : tpr[0];
		} else {
			best_of(probe, &m, TG_DP_SWAP, 0, BASELINE, 1, &base);
		}
		if (!base.ok) {
			fprintf(stderr, "%s: the dp-swap baseline does not run: %s\n", sh->name,
			        base.desc);
			return 1;
		}
		int first = 1;
		row(f, wide ? "1f1b, whole blocks" : "dp-swap (baseline)", wide ? &whole : &base,
		    &base, &first);
		double best = 0, hpp = 0;
		for (int s = 0; s < TG_NSCHED && !wide; s++) {
			best_of(probe, &m, (enum tg_sched)s, 0, SPILL, 8, &res[s]);
			row(f, tg_sched_name((enum tg_sched)s), &res[s], &base, &first);
			if (res[s].ok) {
				double sp = base.iter_s / res[s].iter_s;
				if (sp > best)
					best = sp;
				if (s == TG_HARMONY_PP)
					hpp = sp;
				double e = fabs(res[s].pred_s - res[s].iter_s) / res[s].iter_s;
				if (e > E && res[s].pred_s > 0)
					E = e;
			}
		}
		/* tensor parallelism: 2 stages x 2, 1 stage x 4 (the blocks in tp
		 * form: another rounding of the same model) */
		for (int i = 0; i < 2; i++) {
			char what[32];
			snprintf(what, sizeof(what), "1f1b, tp %d", 2 << i);
			row(f, what, &tpr[i], &base, &first);
		}
		if (wide) {
			printf("\n");
			fprintf(f, "\n    ]}");
			nw++;
			rt_close(probe);
			rt_model_free(&m);
			continue;
		}
		/* auto: the planner's choice, run by the executor */
		struct rt_plan_request req = {.schedule = "auto"};
		struct tg_plan ap;
		memset(&aut, 0, sizeof(aut));
		if (rt_model_profile(probe, &m, 1) == 0 &&
		    rt_plan_choose(probe, &m, &req, &ap) == 0)
			simulate(&m, &ap, SPILL, &aut);
		row(f, "auto", &aut, &base, &first);
		/* the published Harmony runtime: harmony-pp's packs, CPU update, LRU, one
		 * task of prefetch */
		best_of(probe, &m, TG_HARMONY_PP, 1, PUBLISHED, 8, &pub);
		row(f, "harmony (published)", &pub, &base, &first);
		double z = aut.ok && pub.ok ? pub.iter_s / aut.iter_s : 0;
		if (aut.ok) {
			double e = fabs(aut.pred_s - aut.iter_s) / aut.iter_s;
			if (e > E && aut.pred_s > 0)
				E = e;
		}
		printf("  best/dp-swap %.2fx, harmony-pp/dp-swap %.2fx, auto/harmony-published "
		       "%.2fx\n\n",
		       best, hpp, z);
		fprintf(f,
		        "\n    ], \"best_vs_dp_swap\": %.4f, \"harmony_pp_vs_dp_swap\": %.4f, "
		        "\"auto_vs_published\": %.4f}",
		        best, hpp, z);
		if (best > X)
			X = best;
		if (hpp > Y)
			Y = hpp;
		if (z > Z)
			Z = z;
		nw++;
		rt_close(probe);
		rt_model_free(&m);
	}
	fprintf(f,
	        "\n  ],\n  \"best_vs_dp_swap\": %.4f, \"harmony_pp_vs_dp_swap\": %.4f, "
	        "\"auto_vs_published\": %.4f, \"predicted_err\": %.4f\n}\n",
	        X, Y, Z, E);
	fclose(f);
	printf("speedup best/dp-swap=%.2f harmony-pp/dp-swap=%.2f auto/harmony-published=%.2f "
	       "predicted_err=%.3f\n",
	       X, Y, Z, E);
	return 0;
}

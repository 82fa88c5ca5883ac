/* bench/plans.c — make bench-plans: predicted swap volume and iteration time of each
 * schedule relative to dp-swap, for 4x GTX 1080 Ti on PCIe 3 and transformer models
 * shaped like BERT-Large, BERT-96, GPT-2 XL and GPT-2 10B. Predictions only (the
 * taskgraph simulator and analytical time), no device. Every schedule gets the same
 * packs; Harmony modes take the group (microbatches per task) with the fastest
 * predicted time, as Harmony's planner does, and the table also shows them at a
 * fixed group of 4. Writes JSON. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

#include "taskgraph/taskgraph.h"

struct shape {
	const char *name;
	int layers, h, s, vocab, batch;
};

static void mk_layers(const struct shape *sh, struct tg_layer *L)
{
	double h = sh->h, s = sh->s;
	uint64_t p = (uint64_t)(12 * h * h + 13 * h) * 4; /* fp32 */
	for (int i = 0; i < sh->layers; i++)
		L[i] =
		    (struct tg_layer){.name = "block",
		                      .param_bytes = p,
		                      .grad_bytes = p,
		                      .opt_bytes = 2 * p,
		                      .stash_bytes_per_sample = (uint64_t)(s * h * 4 * 16),
		                      .out_bytes_per_sample = (uint64_t)(s * h * 4),
		                      .work_bytes_per_sample = (uint64_t)(s * h * 4 * 4),
		                      .fwd_flops_per_sample = 24 * s * h * h + 4 * s * s * h,
		                      .bwd_flops_per_sample = 2 * (24 * s * h * h + 4 * s * s * h)};
}

static double volume(const struct tg_swap *sw)
{
	double v = 0;
	for (int l = 0; l < TG_NLINK; l++)
		for (int k = 0; k < TG_NOKIND; k++)
			v += (double)sw->bytes[l][k];
	return v;
}

/* One schedule with packs sized for double buffering: half a device each, 15%
 * reserve; pipelines place pack i on GPU i mod 4 (per-stage swapping). */
static int run_plan(const struct tg_model *m, const struct tg_hw *hw, int s, int grp,
                    struct tg_plan *p, struct tg_swap *sw, struct tg_time *t)
{
	*p = (struct tg_plan){.sched = s, .ndev = hw->ndev};
	int rc = tg_pack_greedy(m, 1, hw->capacity / 2, 0.15, p);
	p->group = grp;
	struct tg_graph g;
	if (!rc)
		rc = tg_graph_build(m, 1, p, &g);
	if (!rc) {
		rc = tg_sim_swap(&g, hw->capacity, s == TG_DP_SWAP, sw);
		if (!rc)
			rc = tg_time_predict(&g, p, hw, sw, t);
		tg_graph_free(&g);
	}
	return rc;
}

int main(int argc, char **argv)
{
	const char *json = argc > 1 ? argv[1] : "bench/results/plans.json";
	struct shape shapes[] = {{"BERT-Large", 24, 1024, 512, 30522, 32},
	                         {"BERT-96 (1.2B)", 96, 1024, 512, 30522, 32},
	                         {"GPT-2 XL (1.5B)", 48, 1600, 1024, 50257, 16},
	                         {"GPT-2 10B", 48, 4096, 1024, 50257, 16}};
	struct tg_hw hw = {.ndev = 4,
	                   .capacity = 11ull << 30,
	                   .flops = 11.3e12,
	                   .mem_bw = 484e9,
	                   .h2d_bw = 12e9,
	                   .d2h_bw = 12e9,
	                   .host_link_bw = 12e9,
	                   .p2p_bw = 10e9,
	                   .disk_bw = 2e9};
	FILE *f = fopen(json, "w");
	if (!f) {
		perror(json);
		return 1;
	}
	struct utsname u;
	uname(&u);
	fprintf(
	    f,
	    "{\"machine\": \"%s %s (predictions for 4x GTX 1080 Ti, PCIe 3, 11 GiB, 11.3 TFLOP/s, "
	    "12 GB/s host link shared, 10 GB/s p2p)\", \"models\": [\n",
	    u.nodename, u.machine);
	printf("4x GTX 1080 Ti (predicted): swap volume and iteration time per schedule, relative "
	       "to dp-swap\n");
	printf("%-16s %-11s %6s %5s %3s %10s %7s %9s %7s %9s\n", "model", "schedule", "packs", "mb",
	       "grp", "swap GB", "x dp", "iter s", "x dp", "grp 4 s");
	for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
		struct shape *sh = &shapes[i];
		struct tg_layer *L = calloc((size_t)sh->layers, sizeof(*L));
		mk_layers(sh, L);
		struct tg_model m = {.id = 0,
		                     .nlayers = sh->layers,
		                     .layers = L,
		                     .batch = sh->batch,
		                     .in_bytes_per_sample = (uint64_t)sh->s * 4,
		                     .target_bytes_per_sample = (uint64_t)sh->s * 4,
		                     .loss_bytes_per_sample = (uint64_t)sh->s * sh->vocab * 4};
		double dpv = 0, dpt = 0;
		fprintf(f, "%s {\"model\": \"%s\", \"schedules\": [", i ? "," : "", sh->name);
		for (int s = 0; s < TG_NSCHED; s++) {
			int harmony = s == TG_HARMONY_DP || s == TG_HARMONY_PP;
			int per = (s == TG_DP_SWAP || s == TG_HARMONY_DP) ? 4 : 1; /* replicas */
			struct tg_plan p = {0};
			struct tg_time t = {0};
			double v = 0, t4 = 0;
			int rc = -1;
			/* Harmony modes: groups dividing the microbatches per replica, up to 16;
			 * the fastest predicted wins (less traffic, then the smaller group, on
			 * a tie) */
			for (int grp = 1; grp <= (harmony ? 16 : 1); grp *= 2) {
				struct tg_plan q;
				struct tg_swap qs;
				struct tg_time qt;
				if (sh->batch % (per * grp))
					continue;
				int qrc = run_plan(&m, &hw, s, grp, &q, &qs, &qt);
				if (qrc) {
					if (rc)
						rc = qrc;
					continue;
				}
				double qv = volume(&qs);
				if (grp == 4)
					t4 = qt.iter_s;
				if (rc || qt.iter_s < t.iter_s ||
				    (qt.iter_s == t.iter_s && qv < v)) {
					p = q;
					t = qt;
					v = qv;
					rc = 0;
				}
			}
			if (rc) {
				printf("%-16s %-11s  does not fit: %s\n", sh->name,
				       tg_sched_name(s), sp_last_error());
				continue;
			}
			if (s == TG_DP_SWAP) {
				dpv = v;
				dpt = t.iter_s;
			}
			char g4[16] = "-";
			if (harmony && t4 > 0)
				snprintf(g4, sizeof(g4), "%.3f", t4);
			printf("%-16s %-11s %6d %5d %3d %10.1f %7.3f %9.3f %7.3f %9s\n", sh->name,
			       tg_sched_name(s), p.npacks, p.microbatch, p.group, v / 1e9,
			       dpv > 0 ? v / dpv : 0, t.iter_s, dpt > 0 ? t.iter_s / dpt : 0, g4);
			fprintf(f,
			        "%s{\"schedule\": \"%s\", \"packs\": %d, \"group\": %d, "
			        "\"swap_bytes\": %.0f, "
			        "\"swap_vs_dp\": %.4f, \"iter_s\": %.4f, \"time_vs_dp\": %.4f, "
			        "\"iter_s_group4\": %.4f}",
			        s ? ", " : "", tg_sched_name(s), p.npacks, p.group, v,
			        dpv > 0 ? v / dpv : 0, t.iter_s, dpt > 0 ? t.iter_s / dpt : 0,
			        harmony ? t4 : t.iter_s);
		}
		struct tg_plan best;
		struct tg_time bt;
		if (tg_plan_auto(&m, &hw, &best, &bt) == 0)
			printf("%-16s auto: %s, %d packs, microbatch %d, group %d, update on %s: "
			       "%.3f s\n",
			       sh->name, tg_sched_name(best.sched), best.npacks, best.microbatch,
			       best.group, best.upd_cpu ? "CPU" : "GPU", bt.iter_s);
		fprintf(f, "]}\n");
		free(L);
	}
	fprintf(f, "]}\n");
	fclose(f);
	return 0;
}

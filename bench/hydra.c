/* bench/hydra.c — make bench-hydra: Hydra's end-to-end setting on the model
 * backend (virtual time, 8x GTX 1080 Ti on PCIe 3, the paper's testbed):
 * 12 BERT-Large-like models of about 1B parameters (24 blocks, C 1792,
 * sequence 128; batch 8, 16, 32 x 4 learning rates, as the paper's grid),
 * each model's training state larger than one GPU's 11 GB. Hydra's setting is
 * plain SGD (its shards build torch.optim.SGD; 8 GB of state per model), the
 * first table; the second is the same with AdamW (16 GB), for reference.
 * Side by side, in one run, for each:
 *   model parallelism  each model alone over the 8 GPUs (8 balanced packs, one
 *                      per GPU, the minibatch at once), one model after the other
 *                      (no recomputation; a row with every layer recomputed
 *                      is for reference: Hydra's GPT-2 XL mp script
 *                      checkpoints, but whether Fig. 7 measured it is unknown)
 *   spilling only      each model alone on one GPU in shards, one after the other
 *                      (no SHARP, no double buffering)
 *   SHARP, no db       SHARP + Sharded-LRTF on 8 GPUs, no double buffering
 *   SHARP              SHARP + Sharded-LRTF + double buffering
 *   SHARP random       the same with random unit selection
 * with the paper's figures (7.5x over model parallelism; Table 3: 13.05x
 * slower without SHARP and double buffering, 2.3x slower without double
 * buffering), and the floor the shared host link puts under SHARP (its bytes
 * through the link at the link's rate) with the speedup that floor allows,
 * and the ceiling recomputation puts on it (SHARP's FLOPs, recomputed
 * forwards included, at the devices' peak).
 * Then the scheduler alone: lrtf against random on Fig. 6's
 * heterogeneous setting (12 models, 8 GPUs, per-epoch 0.5-4 h, 100-10,000
 * units; mean of 5 instances) and against GLPK's MILP on small instances
 * (mean of 12). Last line:
 *   sharp_vs_model_parallel=X lrtf_vs_random=Y lrtf_vs_milp=Z
 * (X from Hydra's setting.) Writes bench/results/hydra.json.
 * Every model sees the same samples, as in the paper (Table 2: 4 epochs of
 * WikiText-2 each): an epoch here is 32 samples, so a batch-8 model runs 4x
 * the steps of a batch-32 one (equal steps would give the batch-32 models 4x
 * the work and make one of them alone the makespan's floor).
 * argv: [json path] [epochs, default 4] */
#include "bench/bench.h"

#include "runtime/runtime.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <time.h>

#define NMODELS       12
#define EPOCH_SAMPLES 32

static double wall(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static struct rt_ctx *open_model(void)
{
	struct sp_params sp;
	sp_params_defaults(&sp);
	struct rt_config c;
	if (rt_config_from_params(&sp, &c) < 0)
		return NULL;
	c.dev.backend = DEV_BACKEND_MODEL;
	c.dev.profile = "gtx1080ti-x8";
	c.vmm.host_mem = 4ull << 40; /* address space only: no data on this backend */
	c.vmm.max_objects = 1 << 18;
	c.vmm.trace_cap = 0;
	c.vmm.align = 1 << 20;
	struct rt_ctx *rt;
	if (rt_open(&c, &rt) < 0)
		return NULL;
	return rt;
}

struct res {
	double s, util, wall, h2d, d2h, p2p, flops, peak, host_link;
	double chain; /* the largest FLOPs of one model (its units run one at a time) */
	double dev_peak;
	uint64_t bytes;
	int ok;
	/* SHARP: device time inside units over makespan x devices; units that ran
	 * where their model's previous unit did */
	double busy, same;
	int sharp;
	double by_kind[TG_NOKIND][3]; /* SHARP: bytes moved H2D, D2H, P2P per object kind */
};

static struct rt_model models[NMODELS];
static int steps[NMODELS];

enum how { MODEL_PARALLEL, SPILL_ONLY, SHARP_NODB, SHARP, SHARP_RANDOM, MP_RECOMPUTE, NHOW };

static void report_err(const char *what)
{
	fprintf(stderr, "bench-hydra: %s: %s\n", what, sp_last_error());
}

/* Models [first, first + n) in one context: 0 and its time, bytes and FLOPs in r. */
static int run_models(enum how how, int first, int n, struct res *r)
{
	struct rt_ctx *rt = open_model();
	if (!rt) {
		report_err("model backend");
		return -1;
	}
	struct rt_run *runs[NMODELS] = {0};
	int rc = 0;
	double t0 = dev_now(rt->dev);
	for (int i = first; i < first + n && !rc; i++) {
		struct tg_plan p = {0};
		if (how == MODEL_PARALLEL ||
		    how == MP_RECOMPUTE) { /* 8 balanced packs, pack k on GPU k */
			struct tg_layer tl[64];
			struct tg_model tm;
			struct tg_hw hw;
			rt_model_tg(&models[i], tl, &tm);
			rt_plan_hw(rt, rt->ndev, &hw);
			rc = tg_pack_dp(&tm, models[i].batch, hw.capacity, rt->ndev, &p);
			p.sched = TG_HARMONY_PP;
			p.ndev = rt->ndev;
			p.group = 1;
			p.recompute = how == MP_RECOMPUTE;
		} else {
			rc = rt_sharp_plan(rt, &models[i], 0.15, &p);
		}
		if (rc == 0)
			rc = rt_run_open(rt, &models[i], &p, 1 + (uint64_t)i, &runs[i]);
		if (rc == 0 && i == 0 && (how == MODEL_PARALLEL || how == SHARP)) {
			char d[160];
			rt_plan_describe(&p, d, sizeof(d));
			printf("    plan of model 0: %s\n", d);
		}
	}
	if (rc) {
		report_err("plan");
	} else if (how == MODEL_PARALLEL || how == MP_RECOMPUTE) {
		for (int i = first; i < first + n && !rc; i++)
			for (int s = 0; s < steps[i] && !rc; s++)
				rc = rt_run_step(runs[i], NULL);
		if (rc)
			report_err("model parallelism");
	} else {
		struct rt_sharp_config sc = {.policy =
		                                 how == SHARP_RANDOM ? TG_MM_RANDOM : TG_MM_LRTF,
		                             .double_buffer = how == SHARP || how == SHARP_RANDOM,
		                             .seed = 3};
		struct rt_sharp_stats st;
		rc = rt_sharp_run(rt, runs + first, steps + first, n, &sc, &st);
		if (rc)
			report_err("sharp");
		double busy = 0;
		for (int d = 0; d < rt->ndev; d++)
			busy += st.busy_s[d];
		r->sharp = how != SPILL_ONLY; /* (one model alone keeps 7 devices idle) */
		r->busy = st.makespan_s > 0 ? busy / (st.makespan_s * rt->ndev) : 0;
		r->same = st.units ? (double)st.same_device / (double)st.units : 0;
		if (how == SHARP) /* what moved, by kind of object */
			for (int i = first; i < first + n; i++)
				for (int o = 0; o < runs[i]->prog.nobj && o < runs[i]->g.nobj;
				     o++) {
					struct vmm_obj_info in;
					const struct rt_obj *ob = &runs[i]->prog.obj[o];
					if (!ob->vid || vmm_obj_info(rt->vmm, ob->vid, &in) < 0)
						continue;
					for (int x = 0; x < 3; x++)
						r->by_kind[runs[i]->g.obj[o].kind][x] +=
						    (double)in.bytes_moved[x];
				}
	}
	if (!rc) {
		r->s += dev_now(rt->dev) - t0;
		r->h2d += (double)vmm_xfer_bytes(rt->vmm, VMM_XFER_H2D);
		r->d2h += (double)vmm_xfer_bytes(rt->vmm, VMM_XFER_D2H);
		r->p2p += (double)vmm_xfer_bytes(rt->vmm, VMM_XFER_P2P);
		for (int i = first; i < first + n; i++) {
			double f = 0;
			for (int t = 0; t < runs[i]->prog.ntask; t++)
				f += runs[i]->prog.task[t].flops * steps[i];
			r->flops += f;
			r->chain = fmax(r->chain, f);
		}
		struct tg_hw hw;
		rt_plan_hw(rt, 1, &hw);
		r->peak = hw.flops * rt->ndev;
		r->dev_peak = hw.flops;
		r->host_link = hw.host_link_bw;
	}
	for (int i = first; i < first + n; i++)
		rt_run_close(runs[i]);
	rt_close(rt);
	return rc;
}

/* Without SHARP each model trains alone, one after the other, as separate jobs
 * would (a context each: nothing of an earlier model left on the GPUs). */
static struct res run(enum how how)
{
	struct res r = {0};
	double w0 = wall();
	int alone = how == MODEL_PARALLEL || how == SPILL_ONLY || how == MP_RECOMPUTE, rc = 0;
	for (int i = 0; i < (alone ? NMODELS : 1) && !rc; i++)
		rc = run_models(how, alone ? i : 0, alone ? 1 : NMODELS, &r);
	if (!rc) { /* utilization: the FLOPs trained over the devices' peak */
		r.ok = 1;
		r.bytes = (uint64_t)(r.h2d + r.d2h + r.p2p);
		r.util = r.flops / (r.s * r.peak);
	}
	r.wall = wall() - w0;
	return r;
}

/* ---- the scheduler alone ---------------------------------------------------------------- */

static uint64_t rs = 0x9e3779b97f4a7c15ull;
static double urand(void)
{
	rs ^= rs << 13;
	rs ^= rs >> 7;
	rs ^= rs << 17;
	return (double)(rs >> 11) / 9007199254740992.0;
}

struct inst {
	int n[NMODELS];
	double *dur[NMODELS];
	struct tg_mm mm;
};

static void inst_make(struct inst *I, int nmodels, int ndev, int umin, int umax, double emin,
                      double emax)
{
	memset(I, 0, sizeof(*I));
	for (int m = 0; m < nmodels; m++) {
		I->n[m] = umin + (int)(urand() * (umax - umin + 1));
		double epoch = emin + urand() * (emax - emin);
		I->dur[m] = malloc((size_t)I->n[m] * sizeof(double));
		for (int j = 0; j < I->n[m]; j++)
			I->dur[m][j] = epoch / I->n[m] * (0.8 + 0.4 * urand());
	}
	I->mm = (struct tg_mm){
	    .nmodels = nmodels, .nunits = I->n, .dur = (const double *const *)I->dur, .ndev = ndev};
}

static void inst_free(struct inst *I)
{
	for (int m = 0; m < I->mm.nmodels; m++)
		free(I->dur[m]);
}

static double makespan(const struct inst *I, enum tg_mm_policy p, uint64_t seed)
{
	struct tg_mm_result r;
	if (tg_mm_simulate(&I->mm, p, seed, &r) < 0) {
		report_err("simulate");
		return NAN;
	}
	return r.makespan;
}

int main(int argc, char **argv)
{
	const char *json = argc > 1 ? argv[1] : "bench/results/hydra.json";
	int epochs = argc > 2 ? atoi(argv[2]) : 4;
	static const int batches[] = {8, 16, 32};
	static const float lrs[] = {1e-3f, 1e-4f, 1e-5f, 1e-6f};
	struct kn_model_config cfg = {.maxT = 128, .V = 30522, .L = 24, .NH = 16, .C = 1792};
	cfg.dtype = KN_F32;
	uint64_t params = 0;
	for (int i = 0; i < NMODELS; i++) {
		if (rt_model_gpt(&cfg, 128, batches[i % 3], &models[i]) < 0) {
			report_err("model");
			return 1;
		}
		models[i].opt.lr = lrs[i / 3];
		steps[i] = epochs * EPOCH_SAMPLES / batches[i % 3];
		if (!i)
			for (int l = 0; l < models[0].nlayers; l++)
				params += models[0].layers[l].param_bytes / 4;
	}
	static const char *const names[NHOW] = {
	    "model parallelism", "spilling only", "SHARP, no double buffering",
	    "SHARP (Hydra)",     "SHARP, random", "model parallelism, recomputing"};
	static const char *const optim_label[2] = {"AdamW", "SGD (Hydra's setting)"};
	static const enum kn_optimizer order[2] = {KN_SGD, KN_ADAMW};
	printf("bench-hydra: %d models of %.2fB parameters (batch 8/16/32 x 4 learning rates), "
	       "%d epochs of %d samples each (%d, %d, %d steps), 8x GTX 1080 Ti (model backend)\n",
	       NMODELS, (double)params / 1e9, epochs, EPOCH_SAMPLES, steps[0], steps[1], steps[2]);
	struct res r[2][NHOW];
	double x[2], floor_s[2], ceil_x[2];
	for (int k = 0; k < 2; k++) {
		enum kn_optimizer opt = order[k];
		for (int i = 0; i < NMODELS; i++)
			if (rt_model_set_optimizer(&models[i], opt, 0) < 0) {
				report_err("optimizer");
				return 1;
			}
		printf("%s:\n", optim_label[opt]);
		struct res *q = r[k];
		for (int h = 0; h < NHOW; h++) {
			q[h] = run((enum how)h);
			if (!q[h].ok)
				return 1;
			printf("  %-30s %8.1f s  util %5.1f%%  moved %8.1f GB (H2D %.1f, D2H %.1f, "
			       "P2P %.1f)  [%.1f s]\n",
			       names[h], q[h].s, 100 * q[h].util, (double)q[h].bytes / 1e9,
			       q[h].h2d / 1e9, q[h].d2h / 1e9, q[h].p2p / 1e9, q[h].wall);
			if (q[h].sharp)
				printf("    devices in units %.1f%% of the time; units where the "
				       "model's previous one ran %.1f%%\n",
				       100 * q[h].busy, 100 * q[h].same);
			for (int o = 0; o < TG_NOKIND && h == SHARP; o++)
				if (q[h].by_kind[o][0] + q[h].by_kind[o][1] + q[h].by_kind[o][2] >
				    0)
					printf("    %-9s H2D %6.1f  D2H %6.1f  P2P %6.1f GB\n",
					       tg_okind_name(o), q[h].by_kind[o][0] / 1e9,
					       q[h].by_kind[o][1] / 1e9, q[h].by_kind[o][2] / 1e9);
		}
		x[k] = q[MODEL_PARALLEL].s / q[SHARP].s;
		printf("  speedup over model parallelism:      spill %.2fx (paper: Hydra 7.5x); "
		       "over the recomputing one %.2fx\n",
		       x[k], q[MP_RECOMPUTE].s / q[SHARP].s);
		printf("  slowdown without SHARP and double buffering: %.2fx (paper 13.05x)\n",
		       q[SPILL_ONLY].s / q[SHARP].s);
		printf("  slowdown without double buffering:           %.2fx (paper 2.3x)\n",
		       q[SHARP_NODB].s / q[SHARP].s);
		printf("  lrtf over random, end to end:                %.3f\n",
		       q[SHARP].s / q[SHARP_RANDOM].s);
		/* what bounds SHARP: its bytes through the shared host link at the link's
		 * rate; its FLOPs (recomputed forwards included) at the devices' peak;
		 * and the largest model's, whose units run one after another */
		floor_s[k] = fmax(q[SHARP].h2d, q[SHARP].d2h) / q[SHARP].host_link;
		double compute_s = q[SHARP].flops / q[SHARP].peak;
		double chain_s = q[SHARP].chain / q[SHARP].dev_peak;
		ceil_x[k] = q[MODEL_PARALLEL].s / fmax(fmax(floor_s[k], compute_s), chain_s);
		printf(
		    "  bounds on SHARP's %.1f s: %.0f GB H2D over the shared %.0f GB/s host link "
		    "%.1f s; its FLOPs at the devices' peak %.1f s; the largest model's "
		    "units one after another at one device's peak %.1f s: at most %.2fx over "
		    "model parallelism\n",
		    q[SHARP].s, q[SHARP].h2d / 1e9, q[SHARP].host_link / 1e9, floor_s[k], compute_s,
		    chain_s, ceil_x[k]);
	}

	/* Fig. 6, heterogeneous: lrtf over random */
	double y = 0, yf = 0;
	for (int k = 0; k < 5; k++) {
		struct inst I;
		inst_make(&I, NMODELS, 8, 100, 10000, 1800, 14400);
		double l = makespan(&I, TG_MM_LRTF, k), rr = makespan(&I, TG_MM_RANDOM, k);
		y += l / rr / 5;
		yf += l / tg_mm_lower_bound(&I.mm) / 5;
		inst_free(&I);
	}
	printf("  Fig. 6 heterogeneous: lrtf/random %.4f, lrtf/lower bound %.4f\n", y, yf);

	/* small instances against GLPK's MILP */
	double z = 0, zmax = 0;
	int nz = 0, nopt = 0;
	double w0 = wall();
	for (int k = 0; k < 12; k++) {
		struct inst I;
		inst_make(&I, 3 + k % 2, 2, 2, 3, 1, 4);
		double ms, bound;
		int opt;
		int rc = tg_mm_milp(&I.mm, 10, &ms, &bound, &opt);
		if (rc == -ENOTSUP) {
			printf("  MILP: %s\n", sp_last_error());
			inst_free(&I);
			break;
		}
		if (rc == 0) {
			double l = makespan(&I, TG_MM_LRTF, k);
			z += l / ms;
			zmax = fmax(zmax, l / ms);
			nz++;
			nopt += opt;
		}
		inst_free(&I);
	}
	if (nz) {
		z /= nz;
		printf("  MILP (GLPK, %d instances of 6-12 units on 2 GPUs, %d optimal, %.1f s): "
		       "lrtf/optimum mean %.4f, worst %.4f\n",
		       nz, nopt, wall() - w0, z, zmax);
	} else {
		z = NAN;
	}

	FILE *f = fopen(json, "w");
	if (f) {
		fprintf(f, "{\n");
		bench_machine_json(f);
		fprintf(f, "  \"models\": %d, \"params\": %llu, \"epochs\": %d,\n", NMODELS,
		        (unsigned long long)params, epochs);
		for (int k = 0; k < 2; k++) {
			const struct res *q = r[k];
			fprintf(f, "  \"%s\": {\n    \"runs\": [\n", rt_optimizer_name(order[k]));
			for (int h = 0; h < NHOW; h++)
				fprintf(
				    f,
				    "      {\"what\": \"%s\", \"seconds\": %.3f, \"utilization\": "
				    "%.4f, \"bytes\": %llu}%s\n",
				    names[h], q[h].s, q[h].util, (unsigned long long)q[h].bytes,
				    h < NHOW - 1 ? "," : "");
			fprintf(f,
			        "    ],\n    \"sharp_vs_model_parallel\": %.4f, "
			        "\"sharp_vs_recomputing_model_parallel\": %.4f, "
			        "\"no_sharp_no_db_slowdown\": %.4f, \"no_db_slowdown\": %.4f,\n    "
			        "\"host_link_floor_s\": %.3f, \"sharp_vs_model_parallel_ceiling\": "
			        "%.4f\n  },\n",
			        x[k], q[MP_RECOMPUTE].s / q[SHARP].s, q[SPILL_ONLY].s / q[SHARP].s,
			        q[SHARP_NODB].s / q[SHARP].s, floor_s[k], ceil_x[k]);
		}
		fprintf(f,
		        "  \"sharp_vs_model_parallel\": %.4f, \"lrtf_vs_random\": %.4f, "
		        "\"lrtf_vs_milp\": %.4f, \"lrtf_vs_milp_worst\": %.4f\n}\n",
		        x[0], y, z, zmax);
		fclose(f);
	}
	for (int i = 0; i < NMODELS; i++)
		rt_model_free(&models[i]);
	printf("sharp_vs_model_parallel=%.2f lrtf_vs_random=%.3f lrtf_vs_milp=%.3f\n", x[0], y, z);
	return 0;
}

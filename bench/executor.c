/* bench/executor.c — make bench-executor: what the executor costs over the plain
 * in-memory reference loop on the host backend, same model (a GPT-2 of 4 blocks,
 * C 256, T 128, V 4096, batch 8), same data, same kernels and threads: wall time
 * of a training step through the executor (one emulated device, dp-swap,
 * microbatch 4, one layer per pack) with ample memory and with a vmm budget of a
 * quarter of the training state (parameters, gradients, optimizer state and the
 * stash), interleaved step by step with the reference so both see the same
 * machine; the median of the per-step ratios. Losses must match the reference's
 * bit for bit. Last line:
 *   executor_vs_reference ample=A quarter=Q
 * (targets A <= 1.05, Q <= 1.25). Writes bench/results/executor.json.
 * argv: [json path] [steps] */
#include "bench/bench.h"

#include "runtime/runtime.h"

#include <inttypes.h>
#include <time.h>

static double wall(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static struct rt_ctx *open_host(uint64_t budget)
{
	struct sp_params sp;
	sp_params_defaults(&sp);
	struct rt_config c;
	if (rt_config_from_params(&sp, &c) < 0)
		return NULL;
	c.dev.backend = DEV_BACKEND_HOST;
	c.dev.ndevices = 1;
	c.dev.device_mem = 1ull << 30;
	c.vmm.device_mem = budget;
	c.vmm.host_mem = 1ull << 30;
	c.vmm.max_objects = 4096;
	c.vmm.trace_cap = 0;
	struct rt_ctx *rt;
	return rt_open(&c, &rt) < 0 ? NULL : rt;
}

struct side {
	const char *name;
	uint64_t budget;
	struct rt_ctx *rt;
	struct rt_run *run;
	double t[BENCH_MAX_REPS], ratio[BENCH_MAX_REPS];
	uint64_t evictions, moved;
};

int main(int argc, char **argv)
{
	const char *json = argc > 1 ? argv[1] : "bench/results/executor.json";
	int steps = argc > 2 ? atoi(argv[2]) : 6;
	if (steps < 2 || steps > BENCH_MAX_REPS) {
		fprintf(stderr, "steps: 2..%d\n", BENCH_MAX_REPS);
		return 2;
	}
	struct kn_model_config cfg = {
	    .maxT = 128, .V = 4096, .L = 4, .NH = 4, .C = 256, .dtype = KN_F32};
	struct rt_model m;
	if (rt_model_gpt(&cfg, 128, 8, &m) < 0) {
		fprintf(stderr, "%s\n", sp_last_error());
		return 1;
	}
	uint64_t seed = 7;
	m.data_arg = &seed;
	struct tg_plan plan = {
	    .sched = TG_DP_SWAP, .ndev = 1, .npacks = m.nlayers, .microbatch = 4};
	for (int i = 0; i < m.nlayers; i++)
		plan.pack_end[i] = i + 1;
	/* the state: every object of the plan's graph */
	struct tg_layer tl[16];
	struct tg_model tm;
	rt_model_tg(&m, tl, &tm);
	struct tg_graph g;
	if (tg_graph_build(&tm, 1, &plan, &g) < 0) {
		fprintf(stderr, "%s\n", sp_last_error());
		return 1;
	}
	uint64_t state = 0;
	for (int o = 0; o < g.nobj; o++)
		if (g.obj[o].kind != TG_O_WORK)
			state += g.obj[o].bytes;
	uint64_t ws = tg_graph_min_capacity(&g, NULL);
	tg_graph_free(&g);
	struct side sides[2] = {{.name = "ample", .budget = 4 * state},
	                        {.name = "quarter", .budget = state / 4}};
	if (sides[1].budget < ws + ws / 8) {
		fprintf(stderr,
		        "a quarter of the state (%" PRIu64 ") is below the working set %" PRIu64
		        "\n",
		        state / 4, ws);
		return 1;
	}
	struct rt_reference *ref;
	if (rt_reference_open(&m, 1, plan.microbatch, 42, &ref) < 0) {
		fprintf(stderr, "%s\n", sp_last_error());
		return 1;
	}
	for (int k = 0; k < 2; k++) {
		sides[k].rt = open_host(sides[k].budget);
		if (!sides[k].rt || rt_run_open(sides[k].rt, &m, &plan, 42, &sides[k].run) < 0) {
			fprintf(stderr, "%s: %s\n", sides[k].name, sp_last_error());
			return 1;
		}
	}
	printf("GPT-2 %d blocks C %d T %d V %d batch 8: state %.1f MiB, largest working set "
	       "%.1f MiB, %d CPU threads\n",
	       cfg.L, cfg.C, 128, cfg.V, state / 1048576.0, ws / 1048576.0, kn_cpu_threads());
	double tref[BENCH_MAX_REPS];
	int bad = 0;
	/* step 0 warms every side up (first touches, first swaps); then each step
	 * runs the reference and both executors back to back, the order rotating
	 * so that none always runs first (on caches the previous one left) */
	for (int s = 0; s <= steps; s++) {
		double lref = 0, loss[2] = {0}, tr = 0, te[2] = {0};
		for (int j = 0; j < 3; j++) {
			int k = (j + s) % 3; /* 2: the reference */
			double t0 = wall();
			int rc = k == 2 ? rt_reference_step(ref, s, &lref)
			                : rt_run_step(sides[k].run, &loss[k]);
			if (rc < 0) {
				fprintf(stderr, "%s: %s\n", k == 2 ? "reference" : sides[k].name,
				        sp_last_error());
				return 1;
			}
			*(k == 2 ? &tr : &te[k]) = wall() - t0;
		}
		for (int k = 0; k < 2; k++) {
			if (s > 0) {
				sides[k].t[s - 1] = te[k];
				sides[k].ratio[s - 1] = te[k] / tr;
			}
			if (loss[k] != lref) {
				fprintf(stderr, "%s: step %d loss %.9g, reference %.9g\n",
				        sides[k].name, s, loss[k], lref);
				bad = 1;
			}
		}
		if (s > 0)
			tref[s - 1] = tr;
		printf("  step %d: reference %.3f s, ample %.3f s, quarter %.3f s (loss %.6f)%s\n",
		       s, tr, te[0], te[1], lref, s ? "" : " (warm-up)");
	}
	double r[2];
	for (int k = 0; k < 2; k++) {
		struct vmm_stats st;
		vmm_stats_get(sides[k].rt->vmm, &st);
		sides[k].evictions = (uint64_t)st.evictions.total;
		sides[k].moved = vmm_xfer_bytes(sides[k].rt->vmm, VMM_XFER_H2D) +
		                 vmm_xfer_bytes(sides[k].rt->vmm, VMM_XFER_D2H);
		r[k] = bench_median(sides[k].ratio, steps);
		printf(
		    "  %-8s budget %7.1f MiB: %.3f s/step (median), %6.3fx the reference, %" PRIu64
		    " evictions, %.1f MiB swapped over %d steps\n",
		    sides[k].name, sides[k].budget / 1048576.0, bench_median(sides[k].t, steps),
		    r[k], sides[k].evictions, sides[k].moved / 1048576.0, steps + 1);
		rt_run_close(sides[k].run);
		rt_close(sides[k].rt);
	}
	rt_reference_close(ref);
	rt_model_free(&m);
	if (sides[1].evictions == 0) {
		fprintf(stderr, "quarter: nothing was evicted\n");
		bad = 1;
	}
	FILE *f = fopen(json, "w");
	if (f) {
		fprintf(f, "{\n");
		bench_machine_json(f);
		fprintf(
		    f,
		    "  \"model\": \"gpt2 L4 C256 T128 V4096 batch 8\", \"plan\": \"dp-swap, 1 host "
		    "device, microbatch 4\",\n  \"state_bytes\": %" PRIu64
		    ", \"steps\": %d, \"reference_s\": %.6f,\n"
		    "  \"ample\": {\"budget\": %" PRIu64 ", \"step_s\": %.6f, \"ratio\": %.4f},\n"
		    "  \"quarter\": {\"budget\": %" PRIu64 ", \"step_s\": %.6f, \"ratio\": %.4f, "
		    "\"evictions\": %" PRIu64 ", \"swapped_bytes\": %" PRIu64 "}\n}\n",
		    state, steps, bench_median(tref, steps), sides[0].budget,
		    bench_median(sides[0].t, steps), r[0], sides[1].budget,
		    bench_median(sides[1].t, steps), r[1], sides[1].evictions, sides[1].moved);
		fclose(f);
	}
	printf("executor_vs_reference ample=%.3f quarter=%.3f\n", r[0], r[1]);
	return bad;
}

/* tests/runtime/test_2bw_adv_plan.c — rt_plan_choose's 2bw plans must run
 * (an adversary's test). rt_plan_choose: "-ENOMEM naming the layer that does
 * not fit and the smallest budget that would" — a plan it returns is one the
 * executor can run at that budget. For GPT-2s (fp32 and bf16, clipping on and
 * off) over a sweep of device budgets, 2bw with flush_every 1, 3 and 8 is
 * chosen, opened and run for K steps in one program and then 1 step; 1f1b is
 * the control. A plan that is chosen and then fails with -ENOMEM is a failure
 * (9 of 168 did, before rt_plan_choose checked its graph's largest task).
 * argv[1]: budgets, 1 MiB + 128 KiB steps (default 7: the failures were at 3..6). ADV_VERBOSE=1 prints every plan. */
#include "kernels/kernels.h"
#include "runtime/runtime.h"
#include "tests/test.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int verbose;

static int one(const struct kn_model_config *cfg, float clip, const char *sched, int K,
               uint64_t budget, int *chosen)
{
	struct rt_model m;
	CHECK_OK(rt_model_gpt(cfg, 32, 8, &m));
	uint64_t dseed = 1;
	m.data_arg = &dseed;
	m.opt.grad_clip = clip;
	struct sp_params sp;
	sp_params_defaults(&sp);
	struct rt_config c;
	CHECK_OK(rt_config_from_params(&sp, &c));
	c.dev.backend = DEV_BACKEND_HOST;
	c.dev.ndevices = 2;
	c.dev.device_mem = 64 << 20;
	c.vmm.device_mem = budget;
	c.vmm.host_mem = 64 << 20;
	c.threads = 1;
	struct rt_ctx *rt;
	CHECK_OK(rt_open(&c, &rt));
	struct rt_plan_request req = {
	    .schedule = sched, .devices = 2, .microbatch = 1, .flush_every = K};
	struct tg_plan p;
	int bad = 0;
	*chosen = 0;
	if (rt_plan_choose(rt, &m, &req, &p) == 0) {
		*chosen = 1;
		char d[128];
		rt_plan_describe(&p, d, sizeof(d));
		struct rt_run *run;
		int rc = rt_run_open(rt, &m, &p, 42, &run);
		if (rc == 0) {
			double l[TG_MAX_FLUSH_EVERY];
			int n = run->mo->nstep;
			rc = rt_run_steps(run, n, NULL, l);
			if (rc == 0)
				rc = rt_run_step(run, l);
			rt_run_close(run);
		}
		if (verbose || rc < 0)
			printf("  %s%s clip %g, budget %llu KiB: %s: %s%s\n", rc < 0 ? "FAIL " : "",
			       cfg->dtype == KN_BF16 ? "bf16" : "fp32", (double)clip,
			       (unsigned long long)(budget >> 10), d, rc < 0 ? "" : "ran",
			       rc < 0 ? sp_last_error() : "");
		bad = rc < 0;
	}
	rt_close(rt);
	rt_model_free(&m);
	return bad;
}

int main(int argc, char **argv)
{
	int nb = argc > 1 ? atoi(argv[1]) : 7;
	verbose = getenv("ADV_VERBOSE") != NULL;
	CHECK_OK(kn_cpu_set_threads(1));
	int fails = 0, chosen = 0, fails_ctl = 0;
	for (int dt = 0; dt < 2; dt++)
		for (int ci = 0; ci < 2; ci++) {
			struct kn_model_config cfg = {.maxT = 32,
			                              .V = 256,
			                              .L = 2,
			                              .NH = 4,
			                              .C = 64,
			                              .dtype = dt ? KN_BF16 : KN_F32};
			float clip = ci ? 1.0f : 0;
			for (int b = 0; b < nb; b++) {
				uint64_t budget = (uint64_t)(1024 + 128 * b) << 10;
				int ch;
				static const int Ks[] = {1, 3, 8};
				for (int k = 0; k < 3; k++) {
					fails += one(&cfg, clip, "2bw", Ks[k], budget, &ch);
					chosen += ch;
				}
				fails_ctl += one(&cfg, clip, "1f1b", 0, budget, &ch);
			}
		}
	printf("2bw plans: %d chosen, %d of them fail to run (1f1b control: %d)\n", chosen, fails,
	       fails_ctl);
	CHECK(!fails);
	TEST_PASS();
}

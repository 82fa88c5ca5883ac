/* tests/runtime/test_late_binding.c — late binding pays where devices differ
 * and costs nothing where they do not (DESIGN §7): a GPT-2 of 8 blocks (C 512,
 * T 256) in harmony-dp (microbatch 1, group 1, so each device's share is many
 * small groups), simulated on the model backend. On gtx1080ti-x4-mixed (device
 * 3 at half speed) the late-bound run must beat the same plan with every task
 * on its predicted device, and the fast devices must have taken groups from
 * the slow one; on the uniform gtx1080ti-x4 late binding must not slow the
 * iteration down. Prints the ratios.
 *
 * Taking over a chain moves the gradients it adds into (they stay with their
 * own replica, so that sums keep their order): the executor does it only when
 * the chain's compute outweighs that, here with microbatches of 4 x 256 tokens.
 *
 * Then the numbers, on the host backend with the same mixed profile (device
 * 3's kernels take twice as long): a GPT-2 of 4 blocks, batch 32, trained 3
 * steps in harmony-dp and dp-swap on 4 devices, taking over whenever the
 * backlogs allow (exec.steal_eager): losses and weights bit-identical to the
 * reference loop's (DESIGN §9.1: timing changes no bit), and tasks must
 * really have been bound away. */
#include "runtime/runtime.h"
#include "tests/test.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct result {
	double iter_s;
	int64_t late_bound;
	uint64_t tasks_on[DEV_MAX];
};

static struct result run(const char *profile, int late, const struct rt_model *m,
                         const struct tg_plan *plan)
{
	struct sp_params sp;
	sp_params_defaults(&sp);
	struct rt_config c;
	CHECK_OK(rt_config_from_params(&sp, &c));
	c.dev.backend = DEV_BACKEND_MODEL;
	c.dev.profile = profile;
	c.vmm.host_mem = 64ull << 30; /* address space only (TSAN refuses 1 TiB) */
	c.vmm.max_objects = 1 << 14;
	c.vmm.trace_cap = 0;
	c.exec.late_binding = late;
	struct rt_ctx *rt;
	CHECK_OK(rt_open(&c, &rt));
	struct rt_run *r;
	CHECK_OK(rt_run_open(rt, m, plan, 1, &r));
	CHECK_OK(rt_run_step(r, NULL)); /* warm: weights placed */
	int64_t late0 = rt->st.late_bound;
	double t0 = dev_now(rt->dev);
	CHECK_OK(rt_run_step(r, NULL));
	struct result res = {.iter_s = dev_now(rt->dev) - t0,
	                     .late_bound = rt->st.late_bound - late0};
	for (int t = 0; t < r->prog.ntask; t++)
		if (r->prog.ran_on[t] >= 0 && r->prog.ran_on[t] < DEV_MAX)
			res.tasks_on[r->prog.ran_on[t]]++;
	rt_run_close(r);
	rt_close(rt);
	return res;
}

static struct rt_ctx *open_host(const char *profile)
{
	struct sp_params sp;
	sp_params_defaults(&sp);
	struct rt_config c;
	CHECK_OK(rt_config_from_params(&sp, &c));
	c.dev.backend = DEV_BACKEND_HOST;
	c.dev.profile = profile;
	c.dev.ndevices = 4;
	c.dev.device_mem = 64 << 20;
	c.vmm.host_mem = 64 << 20;
	c.vmm.max_objects = 4096;
	c.threads = 1;
	c.exec.steal_eager = 1;
	struct rt_ctx *rt;
	CHECK_OK(rt_open(&c, &rt));
	return rt;
}

static void numbers(enum tg_sched sched)
{
	struct kn_model_config cfg = {
	    .maxT = 8, .V = 64, .L = 4, .NH = 2, .C = 32, .dtype = KN_F32};
	struct rt_model m;
	CHECK_OK(rt_model_gpt(&cfg, 8, 32, &m));
	uint64_t seed = 7;
	m.data_arg = &seed;
	struct tg_plan plan = {
	    .sched = sched, .ndev = 4, .npacks = m.nlayers, .microbatch = 1, .group = 1};
	for (int i = 0; i < m.nlayers; i++)
		plan.pack_end[i] = i + 1;
	struct rt_reference *ref;
	CHECK_OK(rt_reference_open(&m, 4, 1, 42, &ref));
	struct rt_ctx *rt = open_host("gtx1080ti-x4-mixed");
	struct rt_run *run;
	CHECK_OK(rt_run_open(rt, &m, &plan, 42, &run));
	for (int s = 0; s < 3; s++) {
		double a, b;
		CHECK_OK(rt_reference_step(ref, s, &a));
		CHECK_OK(rt_run_step(run, &b));
		CHECK_MSG(b == a, "%s step %d: loss %.9g, reference %.9g", tg_sched_name(sched), s,
		          b, a);
	}
	for (int l = 0; l < m.nlayers; l++) {
		uint64_t n = m.layers[l].param_bytes / sizeof(float);
		float *w = malloc(n * sizeof(float));
		CHECK_OK(rt_run_read_params(run, l, w));
		const float *r = ref->params[l];
		for (uint64_t i = 0; i < n; i++) {
			CHECK_MSG(w[i] == r[i], "%s: layer %s [%llu]: %.9g, reference %.9g",
			          tg_sched_name(sched), m.layers[l].name, (unsigned long long)i,
			          (double)w[i], (double)r[i]);
		}
		free(w);
	}
	printf("host, %s on 4 devices (device 3 at half speed): %" PRId64 " tasks bound away, "
	       "losses and weights bit-identical to the reference\n",
	       tg_sched_name(sched), rt->st.late_bound);
	CHECK_MSG(rt->st.late_bound > 0, "%s: nothing was bound away from a slow device",
	          tg_sched_name(sched));
	rt_run_close(run);
	rt_close(rt);
	rt_reference_close(ref);
	rt_model_free(&m);
}

int main(void)
{
	struct kn_model_config cfg = {
	    .maxT = 256, .V = 8192, .L = 8, .NH = 8, .C = 512, .dtype = KN_F32};
	struct rt_model m;
	CHECK_OK(rt_model_gpt(&cfg, 256, 64, &m));
	struct tg_plan plan = {.sched = TG_HARMONY_DP, .ndev = 4, .microbatch = 4, .group = 1};
	plan.npacks = 2; /* embedding + half the blocks, the rest + head */
	plan.pack_end[0] = m.nlayers / 2;
	plan.pack_end[1] = m.nlayers;

	struct result s = run("gtx1080ti-x4-mixed", 0, &m, &plan);
	struct result l = run("gtx1080ti-x4-mixed", 1, &m, &plan);
	double gain = s.iter_s / l.iter_s;
	printf("gtx1080ti-x4-mixed (device 3 at half speed), harmony-dp: static %.4f s, "
	       "late-bound %.4f s: %.3fx; %" PRId64 " tasks bound away from their device; "
	       "tasks per device %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n",
	       s.iter_s, l.iter_s, gain, l.late_bound, l.tasks_on[0], l.tasks_on[1], l.tasks_on[2],
	       l.tasks_on[3]);
	CHECK_MSG(gain > 1, "late binding did not pay on mixed devices: %.4f", gain);
	CHECK(l.late_bound > 0);
	CHECK(l.tasks_on[3] < l.tasks_on[0]); /* the slow device ran less */

	struct result us = run("gtx1080ti-x4", 0, &m, &plan);
	struct result ul = run("gtx1080ti-x4", 1, &m, &plan);
	double same = us.iter_s / ul.iter_s;
	printf("gtx1080ti-x4 (uniform): static %.4f s, late-bound %.4f s: %.3fx; %" PRId64
	       " bound away\n",
	       us.iter_s, ul.iter_s, same, ul.late_bound);
	CHECK_MSG(same > 0.99, "late binding slowed uniform devices down: %.4f", same);
	rt_model_free(&m);

	numbers(TG_HARMONY_DP);
	numbers(TG_DP_SWAP);
	TEST_PASS();
}

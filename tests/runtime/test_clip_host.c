/* tests/runtime/test_clip_host.c — clipping must not make a data-parallel
 * plan with the update on the CPU need every replica's gradients in the host
 * pool at once.
 *
 * The contract (taskgraph.h, runtime.h): every UPD waits for all NORMs of its
 * *replica*. With the update on the CPU, replica r's NORM and UPD both run on
 * the host; without clipping the host holds each replica's weights and
 * optimizer state plus the gradient of the replica being updated. With
 * clipping it needs the same plus one norm object: replica r can be updated
 * as soon as its own NORMs are done, after which its gradient is dead.
 *
 * What breaks (found by an adversarial pass): tg_graph_build emits every
 * replica's UPD after every replica's NORM (emit_owed_upds at the end of the
 * build), so the CPU runs NORM r0, NORM r1, ... NORM r(n-1) and only then the
 * updates: all n gradients must sit in the host pool together. A plan that
 * runs without clipping then fails at step 1 with clipping (on by default in
 * `spill train`), "task N (norm p0 ... r1) needs ... on the host0 and does
 * not fit", and the message names a device budget as the remedy.
 *
 * The test: a small GPT-2, harmony-dp and dp-swap on 4 emulated devices, one
 * pack, the update on the CPU, an ample device budget; the smallest host pool
 * (in 64 KiB steps) that runs 2 steps without clipping; with clipping the run
 * must fit in that pool plus one replica's gradient and 64 KiB. Repro with the
 * CLI (host pool 6.5 MiB: no clip runs, the default clip fails at step 1):
 *   spill train --layers 2 --channels 64 --heads 2 --seq 16 --batch 8 --vocab 256 \
 *     --no-tune --steps 2 --schedule harmony-dp --update-on-cpu --devices 4 \
 *     --packs 1 --microbatch 2 --budget 8M --host-mem 6656K [--grad-clip 0] */
#include "runtime/runtime.h"
#include "tests/test.h"

#include <inttypes.h>
#include <string.h>

static int try_run(const struct rt_model *m, const struct tg_plan *p, uint64_t host_mem)
{
	struct sp_params sp;
	sp_params_defaults(&sp);
	struct rt_config c;
	CHECK_OK(rt_config_from_params(&sp, &c));
	c.dev.backend = DEV_BACKEND_HOST;
	c.dev.ndevices = p->ndev;
	c.dev.device_mem = 64 << 20;
	c.vmm.device_mem = 32 << 20;
	c.vmm.host_mem = host_mem;
	c.vmm.max_objects = 4096;
	c.threads = 1;
	struct rt_ctx *rt;
	int rc = rt_open(&c, &rt);
	if (rc < 0)
		return rc;
	struct rt_run *run = NULL;
	rc = rt_run_open(rt, m, p, 42, &run);
	for (int s = 0; s < 2 && rc == 0; s++) {
		double loss;
		rc = rt_run_step(run, &loss);
	}
	if (run)
		rt_run_close(run);
	rt_close(rt);
	return rc;
}

int main(void)
{
	struct kn_model_config cfg = {.maxT = 16, .V = 256, .L = 2, .NH = 2, .C = 64};
	cfg.dtype = KN_F32;
	struct rt_model m;
	CHECK_OK(rt_model_gpt(&cfg, 16, 8, &m));
	uint64_t dseed = 7;
	m.data_arg = &dseed;
	uint64_t grad = 0;
	for (int l = 0; l < m.nlayers; l++)
		grad += m.layers[l].grad_bytes;
	static const enum tg_sched scheds[] = {TG_HARMONY_DP, TG_DP_SWAP};
	int fails = 0;
	for (size_t si = 0; si < SP_ARRAY_SIZE(scheds); si++) {
		struct tg_plan p = {.sched = scheds[si],
		                    .ndev = 4,
		                    .npacks = 1,
		                    .pack_end = {m.nlayers},
		                    .microbatch = 2,
		                    .group = 1,
		                    .upd_cpu = 1};
		m.opt.grad_clip = 0;
		uint64_t h = 2 << 20, step = 64 << 10;
		while (h < (64u << 20) && try_run(&m, &p, h) != 0)
			h += step;
		CHECK_MSG(h < (64u << 20), "%s: no host pool up to 64 MiB runs",
		          tg_sched_name(p.sched));
		uint64_t allow = h + grad + step;
		m.opt.grad_clip = 1.0f;
		int rc = try_run(&m, &p, allow);
		printf("%s, 4 devices, update on the CPU: without clipping a %" PRIu64
		       " KiB host pool runs; with clipping %" PRIu64
		       " KiB (+ one gradient, %" PRIu64 " KiB): %s\n",
		       tg_sched_name(p.sched), h >> 10, allow >> 10, grad >> 10,
		       rc ? sp_last_error() : "runs");
		if (rc) {
			uint64_t need = allow;
			while (need < (64u << 20) && try_run(&m, &p, need) != 0)
				need += step;
			printf("  with clipping it needs %" PRIu64 " KiB: %.2f gradients more than "
			       "without\n",
			       need >> 10, (double)(need - h) / (double)grad);
			fails++;
		}
	}
	rt_model_free(&m);
	CHECK_MSG(!fails,
	          "clipping made %d data-parallel CPU-update plan(s) hold every replica's "
	          "gradient in the host pool at once (the UPDs are emitted after all replicas' "
	          "NORMs)",
	          fails);
	TEST_PASS();
}

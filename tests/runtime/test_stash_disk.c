/* tests/runtime/test_stash_disk.c — activations to NVMe (DESIGN §10): with a
 * schedule that keeps its stashes (no recomputation) and a host pool too small
 * for them, stashes go down to the disk tier between their forward and their
 * backward and come back for it; the numbers stay the reference loop's, bit
 * for bit.
 *
 * A GPT-2 of 4 blocks (C 64, T 32), batch 16, microbatch 1, on the host
 * backend with 2 emulated devices at 1.5x the plan's largest working set, a
 * host pool of a third of the training state and a disk tier: gpipe and 1f1b
 * (every forward's stash waits for its backward) and dp-swap, 3 steps each.
 * Per-step losses and final weights equal the reference's; stash bytes really
 * crossed host->disk and disk->host. */
#include "runtime/runtime.h"
#include "tests/test.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STEPS 3

static struct kn_model_config cfg = {.maxT = 32, .V = 64, .L = 4, .NH = 2, .C = 64};
static const int T = 32, BATCH = 16;

int main(void)
{
#if !SPILL_HAVE_URING
	TEST_SKIP("the disk tier needs liburing (apt-get install liburing-dev)");
#endif
	cfg.dtype = KN_F32;
	/* the reference runs before the first rt_open sets the executor's count:
	 * one thread for both (GEMMs this size split over threads differently) */
	CHECK_OK(kn_cpu_set_threads(1));
	struct rt_model m;
	CHECK_OK(rt_model_gpt(&cfg, T, BATCH, &m));
	uint64_t seed = 7;
	m.data_arg = &seed;
	uint64_t state = 0, stash = 0;
	for (int l = 0; l < m.nlayers; l++)
		state += m.layers[l].param_bytes + m.layers[l].grad_bytes + m.layers[l].optim_bytes;
	for (int l = 0; l < m.nlayers; l++)
		stash += (m.layers[l].stash_per_sample + m.layers[l].out_per_sample) * BATCH;
	char dir[] = "/tmp/spill-stash-disk-XXXXXX";
	CHECK(mkdtemp(dir) != NULL);
	static const int scheds[] = {TG_GPIPE, TG_1F1B, TG_DP_SWAP};
	for (size_t si = 0; si < SP_ARRAY_SIZE(scheds); si++) {
		int s = scheds[si], dp = s == TG_DP_SWAP, nd = 2;
		struct tg_plan p = {
		    .sched = s, .ndev = nd, .npacks = m.nlayers, .microbatch = 1, .group = 1};
		for (int i = 0; i < m.nlayers; i++)
			p.pack_end[i] = i + 1;
		/* the reference */
		struct rt_reference *ref;
		CHECK_OK(rt_reference_open(&m, dp ? nd : 1, 1, 42, &ref));
		double rl[STEPS];
		for (int k = 0; k < STEPS; k++)
			CHECK_OK(rt_reference_step(ref, k, &rl[k]));
		/* the executor: devices at 1.5x the working set, the host a third of
		 * the state, the rest on disk */
		struct tg_layer tl[16];
		struct tg_model tm;
		rt_model_tg(&m, tl, &tm);
		struct tg_graph g;
		CHECK_OK(tg_graph_build(&tm, 1, &p, &g));
		uint64_t ws = tg_graph_min_capacity(&g, NULL);
		tg_graph_free(&g);
		struct sp_params sp;
		sp_params_defaults(&sp);
		sp.disk_path = dir;
		struct rt_config c;
		CHECK_OK(rt_config_from_params(&sp, &c));
		c.dev.backend = DEV_BACKEND_HOST;
		c.dev.ndevices = nd;
		c.dev.device_mem = 64 << 20;
		c.vmm.device_mem = ws * 3 / 2;
		c.vmm.host_mem = (state / 3 + 4095) / 4096 * 4096;
		c.vmm.max_objects = 4096;
		c.threads = 1;
		struct rt_ctx *rt;
		CHECK_OK(rt_open(&c, &rt));
		struct rt_run *run;
		CHECK_OK(rt_run_open(rt, &m, &p, 42, &run));
		for (int k = 0; k < STEPS; k++) {
			double loss;
			CHECK_MSG(rt_run_step(run, &loss) == 0, "%s step %d: %s", tg_sched_name(s),
			          k, sp_last_error());
			CHECK_MSG(loss == rl[k], "%s step %d: loss %.9g, reference %.9g",
			          tg_sched_name(s), k, loss, rl[k]);
		}
		for (int l = 0; l < m.nlayers; l++) {
			uint64_t n = m.layers[l].param_bytes;
			void *w = malloc(n + 1);
			CHECK_OK(rt_run_read_params(run, l, w));
			CHECK_MSG(!memcmp(w, ref->params[l], n), "%s: layer %s differs",
			          tg_sched_name(s), m.layers[l].name);
			free(w);
		}
		struct vmm *v = rt->vmm;
		uint64_t down = vmm_link_bytes(v, VMM_HOST, VMM_DISK, VMM_KIND_STASH);
		uint64_t up = vmm_link_bytes(v, VMM_DISK, VMM_HOST, VMM_KIND_STASH);
		uint64_t all = vmm_link_bytes(v, VMM_HOST, VMM_DISK, VMM_KINDS);
		printf("%-8s host pool %" PRIu64 " KiB (state %" PRIu64 " KiB, stashes %" PRIu64
		       " KiB a step): %" PRIu64 " KiB to disk, stashes %" PRIu64
		       " KiB down, %" PRIu64 " KiB up; bit-identical\n",
		       tg_sched_name(s), c.vmm.host_mem >> 10, state >> 10, stash >> 10, all >> 10,
		       down >> 10, up >> 10);
		if (s != TG_DP_SWAP)
			CHECK_MSG(down > 0 && up > 0, "%s: no stash went to disk and back",
			          tg_sched_name(s));
		rt_run_close(run);
		rt_close(rt);
		rt_reference_close(ref);
	}
	rmdir(dir);
	rt_model_free(&m);
	TEST_PASS();
}

/* tests/taskgraph/test_pipeline.c — pipeline invariants from the list schedule:
 * bubble (p-1)/m for gpipe and 1f1b with equal stage times; peak stashed
 * microbatches m for gpipe and p for 1f1b (on the first stage); interleaved
 * 1F1B with v chunks a device: bubble (1/v)(p-1)/m (thesis Table 7.1). */
#include <math.h>
#include <stdio.h>

#include "taskgraph/taskgraph.h"
#include "tests/test.h"

int main(void)
{
	struct tg_layer L[8];
	for (int i = 0; i < 8; i++)
		L[i] = (struct tg_layer){.name = "l",
		                         .param_bytes = 100,
		                         .stash_bytes_per_sample = 10,
		                         .out_bytes_per_sample = 1,
		                         .fwd_flops_per_sample = 1,
		                         .bwd_flops_per_sample = 2};
	for (int p = 2; p <= 8; p *= 2)
		for (int m = p; m <= 16; m *= 2)
			for (int s = TG_GPIPE; s <= TG_1F1B; s++) {
				struct tg_model md = {.nlayers = 8, .layers = L, .batch = m};
				struct tg_plan pl = {.sched = s,
				                     .ndev = p,
				                     .npacks = p,
				                     .microbatch = 1,
				                     .group = 1};
				for (int i = 0; i < p; i++)
					pl.pack_end[i] = (i + 1) * 8 / p;
				struct tg_graph g;
				CHECK_OK(tg_graph_build(&md, 1, &pl, &g));
				CHECK_OK(tg_graph_validate(&g));
				double want = (double)(p - 1) / m;
				int stash = s == TG_GPIPE ? m : p;
				printf("%-6s p=%d m=%2d bubble %.4f (want %.4f) peak stash %d "
				       "(want %d)\n",
				       tg_sched_name(s), p, m, g.bubble, want, g.peak_stash, stash);
				CHECK(fabs(g.bubble - want) < 1e-9);
				CHECK(g.peak_stash == stash);
				tg_graph_free(&g);
			}
	/* interleaved: v chunks of equal size on each of p devices, m a multiple of p */
	for (int p = 2; p <= 4; p *= 2)
		for (int v = 2; v * p <= 8; v *= 2)
			for (int m = p; m <= 16; m *= 2) {
				int P = v * p;
				struct tg_model md = {.nlayers = 8, .layers = L, .batch = m};
				struct tg_plan pl = {.sched = TG_INTERLEAVED,
				                     .ndev = p,
				                     .npacks = P,
				                     .microbatch = 1,
				                     .group = 1};
				for (int i = 0; i < P; i++)
					pl.pack_end[i] = (i + 1) * 8 / P;
				struct tg_graph g;
				CHECK_OK(tg_graph_build(&md, 1, &pl, &g));
				CHECK_OK(tg_graph_validate(&g));
				double want = (double)(p - 1) / (v * m);
				printf("interleaved p=%d v=%d m=%2d bubble %.4f (want %.4f) peak "
				       "stash %d\n",
				       p, v, m, g.bubble, want, g.peak_stash);
				CHECK_MSG(fabs(g.bubble - want) <= 0.02 * want + 1e-9,
				          "interleaved p=%d v=%d m=%d: bubble %.4f, want %.4f", p,
				          v, m, g.bubble, want);
				/* device 0 stashes its warm-up forwards and one more */
				if (m >= 2 * p)
					CHECK(g.peak_stash == 2 * (p - 1) + (v - 1) * p + 1);
				tg_graph_free(&g);
			}
	/* any packs, devices and microbatches: the order never deadlocks and the
	 * graph is valid (the padded-order argument in graph.c) */
	int built = 0;
	for (int P = 1; P <= 8; P++)
		for (int p = 1; p <= 5; p++)
			for (int m = 1; m <= 11; m++) {
				struct tg_model md = {.nlayers = 8, .layers = L, .batch = m};
				struct tg_plan pl = {.sched = TG_INTERLEAVED,
				                     .ndev = p,
				                     .npacks = P,
				                     .microbatch = 1,
				                     .group = 1};
				for (int i = 0; i < P; i++)
					pl.pack_end[i] = (i + 1) * 8 / P;
				struct tg_graph g;
				CHECK_OK(tg_graph_build(&md, 1, &pl, &g));
				CHECK_OK(tg_graph_validate(&g));
				tg_graph_free(&g);
				built++;
			}
	printf("interleaved: %d shapes of packs x devices x microbatches built and valid\n", built);
	TEST_PASS();
}

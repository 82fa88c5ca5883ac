/* tests/taskgraph/test_pipeline.c — pipeline invariants from the list schedule:
 * bubble (p-1)/m for gpipe and 1f1b with equal stage times; peak stashed
 * microbatches m for gpipe and p for 1f1b (on the first stage). */
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
	TEST_PASS();
}

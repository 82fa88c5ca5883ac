/* tests/taskgraph/test_closed_forms.c — Harmony's weight swap-volume closed forms
 * come out of the simulator (tg_sim_swap), not from formulas: R identical layers,
 * each device holds one layer, m microbatches per GPU, N GPUs, weights only.
 * The simulator's executor rules (dead objects dropped, inputs reloaded, P2P first,
 * LRU ties) leave these expressions unchanged. Weights are never dead: an UPD's W
 * is next read by a FWD. Each W lives on one device, so it never comes by P2P. Every
 * other object is 0 bytes here except the loss workspace, which is dropped after
 * LOSS instead of being evicted at the next task. harmony-pp with group = m is a
 * single pipeline unit. docs/taskgraph.md has the details. */
#include <stdio.h>
#include <string.h>

#include "taskgraph/taskgraph.h"
#include "tests/test.h"

#define R 8
static struct tg_layer L[R];

static uint64_t weight_vol(enum tg_sched s, int N, int m, uint64_t cap, int wbclean, uint64_t loss)
{
	struct tg_model md = {.id = 0, .nlayers = R, .layers = L, .loss_bytes_per_sample = loss};
	struct tg_plan p = {.sched = s, .ndev = N, .npacks = R, .microbatch = 1, .group = m};
	for (int i = 0; i < R; i++)
		p.pack_end[i] = i + 1;
	md.batch = (s == TG_DP_SWAP || s == TG_HARMONY_DP) ? m * N : m;
	struct tg_graph g;
	CHECK_OK(tg_graph_build(&md, 1, &p, &g));
	CHECK_OK(tg_graph_validate(&g));
	struct tg_swap sw;
	CHECK_OK(tg_sim_swap(&g, cap, wbclean, &sw));
	tg_graph_free(&g);
	return sw.bytes[TG_L_H2D][TG_O_WEIGHT] + sw.bytes[TG_L_D2H][TG_O_WEIGHT];
}

int main(void)
{
	const uint64_t w = 1200;
	for (int i = 0; i < R; i++)
		L[i] = (struct tg_layer){.name = "l",
		                         .param_bytes = w,
		                         .fwd_flops_per_sample = 1,
		                         .bwd_flops_per_sample = 2};
	const uint64_t W = R * w;
	for (int N = 1; N <= 4; N *= 2)
		for (int m = 1; m <= 4; m++) {
			uint64_t dp = weight_vol(TG_DP_SWAP, N, m, w, 1, w);
			uint64_t hdp = weight_vol(TG_HARMONY_DP, N, m, w, 0, w / m);
			uint64_t hpp = weight_vol(TG_HARMONY_PP, N, m, w, 0, w / m);
			/* Edge reuse the closed forms ignore, each an object that stays resident:
			 * dp-swap: layer 0 across each microbatch boundary and into the update
			 * (2w each, m per GPU); harmony-dp: layer 0 updated last and read first
			 * in the next forward (w per GPU); harmony-pp: each device's last-updated
			 * pack (N·w) and the fwd/bwd turn-around on the N-1 devices the loss
			 * workspace does not flush. */
			CHECK_MSG(dp == (uint64_t)(4 * m + 2) * N * W - 2ull * m * N * w,
			          "dp-swap N=%d m=%d", N, m);
			CHECK_MSG(hdp == 3ull * N * W - (uint64_t)N * w, "harmony-dp N=%d m=%d", N,
			          m);
			CHECK_MSG(hpp == 3ull * W - (uint64_t)(2 * N - 1) * w,
			          "harmony-pp N=%d m=%d", N, m);
			/* when the turn-around weights fit (no loss workspace to flush them),
			 * the last forward pack of every device stays resident for its backward */
			uint64_t hpp_fit = weight_vol(TG_HARMONY_PP, N, m, w, 0, 0);
			CHECK_MSG(hpp_fit == 3ull * W - (uint64_t)(2 * N) * w,
			          "harmony-pp fit N=%d m=%d: %llu", N, m,
			          (unsigned long long)hpp_fit);
			printf("N=%d m=%d dp-swap %llu (4m+2)NW %llu  harmony-dp %llu 3NW %llu  "
			       "harmony-pp %llu 3W %llu\n",
			       N, m, (unsigned long long)dp,
			       (unsigned long long)((4 * m + 2) * N * W), (unsigned long long)hdp,
			       (unsigned long long)(3 * N * W), (unsigned long long)hpp,
			       (unsigned long long)(3 * W));
		}
	TEST_PASS();
}

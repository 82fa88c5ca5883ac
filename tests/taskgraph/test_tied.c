/* tests/taskgraph/test_tied.c — tied weights (GPT-2's LM head reads the token
 * embedding): the tying pack's FWD and BWD read the tied pack's W; its BWDs
 * accumulate the tied gradient in their own pack's G (never the tied pack's:
 * the accumulation order must not depend on the schedule); the tied pack's UPD
 * reads the tying pack's G after its last BWD (and its ALLREDUCE), the graph
 * validates, and bad ties are -EINVAL with a message. Every schedule. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "taskgraph/taskgraph.h"
#include "tests/test.h"

static int has(const int *v, int n, int x)
{
	for (int i = 0; i < n; i++)
		if (v[i] == x)
			return 1;
	return 0;
}

int main(void)
{
	/* wte | block | block | lm_head (tied to wte, no weights of its own) */
	struct tg_layer L[4];
	for (int i = 0; i < 4; i++)
		L[i] = (struct tg_layer){.name = "block",
		                         .param_bytes = 100,
		                         .grad_bytes = 100,
		                         .stash_bytes_per_sample = 8,
		                         .out_bytes_per_sample = 4,
		                         .fwd_flops_per_sample = 1,
		                         .bwd_flops_per_sample = 2};
	L[0] = (struct tg_layer){.name = "wte",
	                         .param_bytes = 1000,
	                         .grad_bytes = 1000,
	                         .out_bytes_per_sample = 4,
	                         .fwd_flops_per_sample = 1,
	                         .bwd_flops_per_sample = 1};
	L[3] = (struct tg_layer){.name = "lm_head",
	                         .stash_bytes_per_sample = 8,
	                         .out_bytes_per_sample = 4,
	                         .fwd_flops_per_sample = 4,
	                         .bwd_flops_per_sample = 8,
	                         .tied = 1,
	                         .tied_layer = 0};
	struct tg_model md = {.nlayers = 4,
	                      .layers = L,
	                      .in_bytes_per_sample = 4,
	                      .target_bytes_per_sample = 4,
	                      .loss_bytes_per_sample = 16};
	for (int s = 0; s < TG_NSCHED; s++)
		for (int grp = 1; grp <= 2; grp++) {
			int dp = s == TG_DP_SWAP || s == TG_HARMONY_DP;
			struct tg_plan p = {.sched = s,
			                    .ndev = 2,
			                    .npacks = 4,
			                    .pack_end = {1, 2, 3, 4},
			                    .microbatch = 1,
			                    .group = grp};
			md.batch = 4 * (dp ? p.ndev : 1);
			struct tg_graph g;
			CHECK_OK(tg_graph_build(&md, 1, &p, &g));
			CHECK_OK(tg_graph_validate(&g));
			const struct tg_model_objs *mo = &g.mobj[0];
			CHECK(mo->tie_pack[3] == 0 && mo->tie_pack[0] == -1 &&
			      mo->tie_pack[1] == -1);
			int at[4096];
			CHECK(g.ntask <= 4096);
			for (int n = 0; n < g.ntask; n++)
				at[g.order[n]] = n;
			for (int r = 0; r < mo->nrep; r++) {
				int W0 = mo->W[r * 4 + 0], G0 = mo->G[r * 4 + 0],
				    G3 = mo->G[r * 4 + 3];
				int last_bwd3 = -1, upd0 = -1, ar3 = -1, nbwd3 = 0;
				for (int id = 0; id < g.ntask; id++) {
					const struct tg_task *t = &g.task[id];
					if (t->rep != r)
						continue;
					if (t->kind == TG_FWD && t->pack == 3)
						CHECK(t->read[0] == mo->W[r * 4 + 3] &&
						      t->read[1] == W0);
					if (t->kind == TG_UPD && t->pack == 0) {
						upd0 = id;
						CHECK(has(t->read, t->nread,
						          G3)); /* the tied gradient */
					}
					if (t->kind == TG_ALLREDUCE && t->pack == 3)
						ar3 = id;
					if (t->kind != TG_BWD || t->pack != 3)
						continue;
					if (last_bwd3 < 0 || at[id] > at[last_bwd3])
						last_bwd3 = id;
					nbwd3++;
					CHECK(t->read[0] == mo->W[r * 4 + 3] && t->read[1] == W0 &&
					      t->write[0] == G3);
					CHECK(!has(t->write, t->nwrite, G0) &&
					      !has(t->read, t->nread, G0));
				}
				CHECK_MSG(
				    nbwd3 ==
				        4 / (s == TG_HARMONY_DP || s == TG_HARMONY_PP ? grp : 1),
				    "%s: %d BWDs", tg_sched_name(s), nbwd3);
				CHECK(upd0 >= 0 && at[upd0] > at[last_bwd3]);
				if (dp)
					CHECK(ar3 >= 0 && at[ar3] > at[last_bwd3] &&
					      at[upd0] > at[ar3]);
			}
			struct tg_swap sw;
			CHECK_OK(tg_sim_swap(&g, 1ull << 40, 0, &sw));
			/* pipelines: lm_head on GPU 1, wte on GPU 0: the tied W moves over P2P */
			if (!dp)
				CHECK(sw.bytes[TG_L_P2P][TG_O_WEIGHT] >= 1000);
			printf("%-10s group %d: ties ok, P2P weights %llu grads %llu\n",
			       tg_sched_name(s), grp,
			       (unsigned long long)sw.bytes[TG_L_P2P][TG_O_WEIGHT],
			       (unsigned long long)sw.bytes[TG_L_P2P][TG_O_GRAD]);
			tg_graph_free(&g);
		}

	/* bad ties */
	struct tg_plan p = {.sched = TG_1F1B,
	                    .ndev = 1,
	                    .npacks = 3,
	                    .pack_end = {1, 2, 4},
	                    .microbatch = 1,
	                    .group = 1};
	struct tg_graph g;
	md.batch = 2;
	L[3].tied_layer = 3;
	CHECK(tg_graph_build(&md, 1, &p, &g) == -EINVAL);
	CHECK_MSG(strstr(sp_last_error(), "layer 3 of model 0 is tied to layer 3"), "%s",
	          sp_last_error());
	printf("%s\n", sp_last_error());
	L[3].tied_layer = -1;
	CHECK(tg_graph_build(&md, 1, &p, &g) == -EINVAL);
	L[3].tied_layer = 1; /* pack 2 = layers 2, 3 ties to packs 0 and 1 */
	L[2].tied = 1;
	L[2].tied_layer = 0;
	CHECK(tg_graph_build(&md, 1, &p, &g) == -EINVAL);
	CHECK_MSG(strstr(sp_last_error(), "ties to packs 0 and 1"), "%s", sp_last_error());
	printf("%s\n", sp_last_error());
	TEST_PASS();
}

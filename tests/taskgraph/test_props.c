/* tests/taskgraph/test_props.c — property test: random models and plans give valid
 * graphs for every schedule (acyclic order, written before read, one UPD per pack
 * and step that depends on every user of its W and G, any two tasks touching one
 * object, one writing it, ordered by dependencies), with ties of the last layer
 * to an earlier one, clipping's norms, several nodes (ZeRO-1 too), 2bw running
 * 1..5 steps a program, tensor parallelism (t = 2, 4: members on their
 * devices, forward and backward sets), including two models in one graph; the
 * simulators run on them. Deterministic seed; argv[1]: graphs (default 3000). */
#include <stdio.h>
#include <stdlib.h>

#include "taskgraph/taskgraph.h"
#include "tests/test.h"

static unsigned long long rs = 88172645463325252ull;
static int rnd(int n)
{
	rs ^= rs << 13;
	rs ^= rs >> 7;
	rs ^= rs << 17;
	return (int)(rs % (unsigned long long)n);
}

int main(int argc, char **argv)
{
	struct tg_layer L[2][12];
	int ngraphs = 0, nwindow = 0, ntp = 0, count = argc > 1 ? atoi(argv[1]) : 3000;
	for (int it = 0; it < count; it++) {
		int nl = 1 + rnd(12), nmod = 1 + rnd(2);
		for (int k = 0; k < nmod; k++)
			for (int i = 0; i < nl; i++)
				L[k][i] = (struct tg_layer){.name = "r",
				                            .param_bytes = 1 + rnd(1000),
				                            .grad_bytes = rnd(1000),
				                            .opt_bytes = rnd(2000),
				                            .stash_bytes_per_sample = rnd(50),
				                            .out_bytes_per_sample = 1 + rnd(20),
				                            .work_bytes = rnd(30),
				                            .fwd_flops_per_sample = 1 + rnd(9),
				                            .bwd_flops_per_sample = 1 + rnd(19)};
		if (nl >= 2 && rnd(2)) /* GPT-2 style: the last layer tied to an earlier one */
			for (int k = 0; k < nmod; k++) {
				L[k][nl - 1].tied = 1;
				L[k][nl - 1].tied_layer = rnd(nl - 1);
			}
		struct tg_plan p = {.sched = rnd(TG_NSCHED),
		                    .ndev = 1 + rnd(4),
		                    .microbatch = 1 + rnd(3),
		                    .recompute = rnd(2),
		                    .upd_cpu = rnd(2)};
		int np = 1 + rnd(nl);
		p.npacks = 0;
		for (int i = 1; i <= nl; i++) /* random split into at most np packs */
			if (i == nl || (rnd(nl) < np - 1 && p.npacks < np - 1))
				p.pack_end[p.npacks++] = i;
		int dp = p.sched == TG_DP_SWAP || p.sched == TG_HARMONY_DP;
		int m = 1 + rnd(6);
		if (p.sched == TG_2BW)
			p.flush_every = rnd(6);
		int K = p.sched == TG_2BW && p.flush_every > 1 ? p.flush_every : 1;
		nwindow += K > 1;
		if (rnd(3) == 0) { /* data parallel over nodes, ZeRO-1 half the time */
			p.nodes = 2 + rnd(2);
			p.node_rank = rnd(p.nodes);
			p.zero = rnd(2);
			for (int k = 0; k < TG_MAX_PACKS; k++)
				p.owner[k] = (unsigned char)rnd(p.nodes);
		}
		int tp = 1; /* tensor parallelism: pipeline schedules, stages x tp devices */
		if (!dp && rnd(3) == 0) {
			tp = 2 << rnd(2);
			p.tp = tp;
			p.ndev *= tp;
			for (int k = 0; k < nmod; k++)
				for (int i = 0; i < nl; i++)
					L[k][i].xchg_bytes_per_sample = (uint64_t)rnd(40);
		}
		ntp += tp > 1;
		uint64_t norm = rnd(2) ? 8 * (uint64_t)(nl + 1) : 0;
		p.group = 1;
		if (p.sched == TG_HARMONY_DP || p.sched == TG_HARMONY_PP) {
			int divs[6], nd = 0;
			for (int d = 1; d <= m; d++)
				if (m % d == 0)
					divs[nd++] = d;
			p.group = divs[rnd(nd)];
		}
		struct tg_model md[2];
		for (int k = 0; k < nmod; k++)
			md[k] = (struct tg_model){.id = k,
			                          .nlayers = nl,
			                          .layers = L[k],
			                          .batch = m * p.microbatch * (dp ? p.ndev : 1),
			                          .in_bytes_per_sample = (uint64_t)rnd(10),
			                          .loss_bytes_per_sample = (uint64_t)rnd(10),
			                          .norm_bytes = norm};
		struct tg_graph g;
		CHECK_OK(tg_graph_build(md, nmod, &p, &g));
		CHECK_OK(tg_graph_validate(&g));
		int upd = 0;
		for (int t = 0; t < g.ntask; t++)
			upd += g.task[t].kind == TG_UPD;
		CHECK_MSG(upd == nmod * p.npacks * (dp ? p.ndev : 1) * K * tp, "%d UPDs", upd);
		for (int t = 0; t < g.ntask; t++) { /* members on their devices, sets whole */
			const struct tg_task *a = &g.task[t];
			CHECK(a->member == (tp > 1 ? t % tp : 0) && g.ndev == p.ndev);
			CHECK(a->dev < 0 || a->dev % tp == a->member);
			CHECK((a->tp_set >= 0) ==
			      (tp > 1 && (a->kind == TG_FWD || a->kind == TG_BWD)));
			CHECK(a->tp_set < 0 || a->tp_set == t / tp);
		}
		CHECK(tg_graph_steps(&g) == K);
		/* every task of a window's step j, none of steps >= K */
		for (int t = 0; t < g.ntask; t++)
			CHECK(g.task[t].step >= 0 && g.task[t].step < K);
		struct tg_swap sw;
		CHECK_OK(tg_sim_swap(&g, 1ull << 40, 0, &sw));
		/* unlimited memory, GPU update: nothing moves but collectives and P2P flow */
		if (!p.upd_cpu)
			CHECK(sw.bytes[TG_L_H2D][TG_O_WEIGHT] == 0 &&
			      sw.bytes[TG_L_D2H][TG_O_WEIGHT] == 0);
		struct tg_hw hw = {.ndev = p.ndev,
		                   .capacity = 1ull << 40,
		                   .flops = 1e12,
		                   .mem_bw = 1e11,
		                   .h2d_bw = 1e10,
		                   .d2h_bw = 1e10,
		                   .p2p_bw = 1e10};
		struct tg_time tt;
		CHECK_OK(tg_sim_time(&g, &p, &hw, 0, &sw, &tt));
		CHECK(tt.iter_s > 0);
		tg_graph_free(&g);
		ngraphs++;
	}
	printf("%d random graphs valid, %d of them 2bw programs of several steps, %d tensor "
	       "parallel\n",
	       ngraphs, nwindow, ntp);
	TEST_PASS();
}

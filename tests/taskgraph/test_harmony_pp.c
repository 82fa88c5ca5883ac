/* tests/taskgraph/test_harmony_pp.c — harmony-pp is a pipeline over groups: on 4
 * packs round-robin over 2 GPUs its list-schedule makespan beats the old serial
 * emission (each group's forwards, loss and backwards before the next group's),
 * its bubble is sane, each pack's UPD comes right after its last BWD on its GPU,
 * and boundaries cross GPUs. */
#include <stdio.h>

#include "taskgraph/taskgraph.h"
#include "tests/test.h"

int main(void)
{
	/* one layer per pack: F = 1, B = 2 FLOPs per sample; microbatch 1 */
	struct tg_layer L[4];
	for (int i = 0; i < 4; i++)
		L[i] = (struct tg_layer){.name = "l",
		                         .param_bytes = 100,
		                         .grad_bytes = 100,
		                         .stash_bytes_per_sample = 10,
		                         .out_bytes_per_sample = 1,
		                         .fwd_flops_per_sample = 1,
		                         .bwd_flops_per_sample = 2};
	for (int m = 4; m <= 16; m *= 2)
		for (int grp = 1; grp <= m / 2; grp *= 2) {
			struct tg_model md = {.nlayers = 4, .layers = L, .batch = m};
			struct tg_plan p = {.sched = TG_HARMONY_PP,
			                    .ndev = 2,
			                    .npacks = 4,
			                    .pack_end = {1, 2, 3, 4},
			                    .microbatch = 1,
			                    .group = grp};
			struct tg_graph g;
			CHECK_OK(tg_graph_build(&md, 1, &p, &g));
			CHECK_OK(tg_graph_validate(&g));
			/* The old emission ran group after group: F0..F3, LOSS, B3..B0 of one
			 * group before the next group's F0, each task waiting for the one
			 * before on the other GPU, so nothing overlapped: makespan = m/grp
			 * groups x 4 packs x (F + B) x grp = 12 m, while each GPU is busy for
			 * 2 packs x 3 x m = 6 m (bubble 1). */
			double serial = 12.0 * m, busy = 6.0 * m;
			/* Sane bubble for nu = m/grp units over 4 stages, 2 per GPU: at least
			 * the interleaved pipeline's (GPUs-1)/(stages per GPU x nu) (Narayanan
			 * et al., PTD-P), at most plain 1F1B's (stages-1)/nu. */
			int nu = m / grp;
			printf("m=%2d group %d: makespan %5.1f (serial %5.1f, busy %5.1f), bubble "
			       "%.3f "
			       "in [%.3f, %.3f]\n",
			       m, grp, g.makespan_units, serial, g.busy_units, g.bubble,
			       1.0 / (2 * nu), 3.0 / nu);
			CHECK(g.busy_units == busy);
			CHECK_MSG(g.makespan_units < serial, "m=%d group %d: %.1f", m, grp,
			          g.makespan_units);
			CHECK(g.bubble >= 1.0 / (2 * nu) - 1e-12 && g.bubble <= 3.0 / nu + 1e-12);
			/* JIT update: on each GPU, a pack's UPD follows its last BWD at once */
			int last_upd = -1;
			for (int n = 0; n < g.ntask; n++) {
				const struct tg_task *t = &g.task[g.order[n]];
				CHECK(t->constrained && t->dev == t->pack % 2);
				if (t->kind == TG_UPD)
					last_upd = n;
			}
			for (int pk = 0; pk < 4; pk++) {
				int lastb = -1, upd = -1;
				for (int n = 0; n < g.ntask; n++) {
					const struct tg_task *t = &g.task[g.order[n]];
					if (t->pack == pk && t->kind == TG_BWD)
						lastb = n;
					if (t->pack == pk && t->kind == TG_UPD)
						upd = n;
				}
				CHECK(upd > lastb);
				for (int n = lastb + 1; n < upd;
				     n++) /* nothing of its GPU between */
					CHECK(g.task[g.order[n]].dev != pk % 2);
			}
			CHECK(last_upd >= 0);
			/* boundaries flow GPU to GPU: every pack's input comes over P2P */
			struct tg_swap sw;
			CHECK_OK(tg_sim_swap(&g, 1ull << 30, 0, &sw));
			CHECK(sw.bytes[TG_L_P2P][TG_O_BOUNDARY] > 0);
			CHECK(sw.bytes[TG_L_H2D][TG_O_BOUNDARY] == 0 &&
			      sw.bytes[TG_L_D2H][TG_O_BOUNDARY] == 0);
			tg_graph_free(&g);
		}
	TEST_PASS();
}

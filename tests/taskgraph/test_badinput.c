/* tests/taskgraph/test_badinput.c — bad input gives -EINVAL/-ENOMEM with a message
 * naming the layer or parameter and by how much. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "taskgraph/taskgraph.h"
#include "tests/test.h"

#define EXPECT(call, code, substr)                                                    \
	do {                                                                          \
		int rc_ = (call);                                                     \
		CHECK_MSG(rc_ == (code), "%s returned %d", #call, rc_);               \
		CHECK_MSG(strstr(sp_last_error(), substr), "message '%s' lacks '%s'", \
		          sp_last_error(), substr);                                   \
		printf("%-40.40s -> %s\n", #call, sp_last_error());                   \
	} while (0)

int main(void)
{
	struct tg_layer L[3] = {{.name = "a", .param_bytes = 100},
	                        {.name = "huge", .param_bytes = 5000},
	                        {.name = "c", .param_bytes = 100}};
	struct tg_model m = {.nlayers = 3, .layers = L, .batch = 4};
	struct tg_plan p = {.sched = TG_HARMONY_PP,
	                    .ndev = 2,
	                    .npacks = 3,
	                    .pack_end = {1, 2, 3},
	                    .microbatch = 1,
	                    .group = 8};
	struct tg_graph g;
	struct tg_plan out;
	EXPECT(tg_graph_build(&m, 1, &p, &g), -EINVAL, "group 8 larger than the 4 microbatches");
	EXPECT(tg_graph_build(&m, 1, &p, &g), -EINVAL, "by 4");
	p.group = 1;
	p.ndev = 0;
	EXPECT(tg_graph_build(&m, 1, &p, &g), -EINVAL, "devices = 0");
	p.ndev = 2;
	struct tg_model z = {.nlayers = 0, .layers = L, .batch = 4};
	EXPECT(tg_graph_build(&z, 1, &p, &g), -EINVAL, "zero layers");
	EXPECT(tg_pack_greedy(&z, 1, 1000, 0.15, &out), -EINVAL, "zero layers");
	EXPECT(tg_pack_greedy(&m, 1, 1000, 0.15, &out), -ENOMEM, "layer 1 (huge)");
	EXPECT(tg_pack_greedy(&m, 1, 1000, 0.15, &out), -ENOMEM, "short by 4.03 KiB");
	EXPECT(tg_pack_dp(&m, 1, 1000, 2, &out), -ENOMEM, "short by 3.91 KiB");
	struct tg_hw hw = {.ndev = 0};
	struct tg_time t;
	EXPECT(tg_plan_auto(&m, &hw, &out, &t), -EINVAL, "devices = 0");
	/* a graph whose task does not fit: -ENOMEM naming task, device and bytes */
	CHECK_OK(tg_graph_build(&m, 1, &p, &g));
	struct tg_swap sw;
	EXPECT(tg_sim_swap(&g, 1000, 0, &sw), -ENOMEM, "short by 3.91 KiB");
	tg_graph_free(&g);
	/* devices, host and disk together too small for the state: no plan, and
	 * the message says why; large enough: a plan whose state fits */
	struct tg_layer S[2] = {
	    {.name = "x", .param_bytes = 1000, .grad_bytes = 1000, .opt_bytes = 2000},
	    {.name = "y", .param_bytes = 1000, .grad_bytes = 1000, .opt_bytes = 2000}};
	struct tg_model sm = {.nlayers = 2, .layers = S, .batch = 4};
	struct tg_hw sh = {.ndev = 2,
	                   .capacity = 1 << 20,
	                   .flops = 1e12,
	                   .mem_bw = 1e11,
	                   .h2d_bw = 1e10,
	                   .d2h_bw = 1e10,
	                   .host_link_bw = 1e10,
	                   .p2p_bw = 1e10,
	                   .store = 4000};
	EXPECT(tg_plan_auto(&sm, &sh, &out, &t), -ENOMEM, "devices, host memory and disk");
	sh.store = 1 << 20;
	CHECK_OK(tg_plan_auto(&sm, &sh, &out, &t));
	CHECK_OK(tg_graph_build(&sm, 1, &out, &g));
	CHECK(tg_graph_state_bytes(&g) >= 8000 && tg_graph_state_bytes(&g) <= sh.store / 10 * 9);
	tg_graph_free(&g);
	TEST_PASS();
}

/* tests/runtime/test_nodes_ref.c — several nodes in one process, held to the
 * reference loop (an adversary's test).
 *
 * runtime.h's contract for nodes: "N nodes give the bits of one process with
 * the same replicas (N*d devices of a data-parallel plan; N for pipelines, a
 * replica per node)". Here each node is a thread with its own context (host
 * backend, 1 or 2 emulated GPUs, a budget that swaps, optional kernel
 * jitter), its share of the batch (rt_model.sample0, batch_total) and
 * rt_nodes whose send/recv are an in-memory mailbox; random small GPTs and
 * plans of every schedule, 2bw included (its delayed update against the
 * reference's 2BW mode, one replica per node), with ZeRO-1, recompute, the
 * CPU update and bf16. Every node's every loss, and its final parameters
 * (under 2bw in fp32 the older version too) and optimizer state (under
 * ZeRO-1 on the pack's owner alone, and bf16's masters with it), must be the
 * bits of rt_reference_* with those replicas.
 *
 * argv[1]: cases (default 60); argv[2]: the first case's seed (default 1). */
#include "kernels/kernels.h"
#include "runtime/runtime.h"
#include "tests/runtime/nodes_harness.h"
#include "tests/test.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STEPS 4
#define MAXN  3

/* ---- one case ---- */
static uint64_t rng;
static uint32_t rnd(uint32_t n)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return (uint32_t)((rng >> 33) % n);
}

struct node {
	int rank;
	struct rt_nodes nodes;
	struct kn_model_config cfg;
	int T, per, total, opt;
	float lr, wd, clip;
	uint64_t dseed;
	struct tg_plan plan;
	uint64_t budget;
	char jitter[64];
	/* results */
	int rc;
	double loss[STEPS];
	struct rt_model m;
	struct nodes_state st;
};

static void set_model(struct rt_model *m, const struct node *n)
{
	CHECK_OK(rt_model_set_optimizer(m, n->opt ? KN_SGD : KN_ADAMW, n->opt == 2 ? 0.9f : 0));
	m->opt.lr = n->lr;
	m->opt.weight_decay = n->wd;
	m->opt.grad_clip = n->clip;
}

static void *node_main(void *arg)
{
	struct node *n = arg;
	struct rt_model *m = &n->m;
	CHECK_OK(rt_model_gpt(&n->cfg, n->T, n->per, m));
	m->batch_total = n->total;
	m->sample0 = n->rank * n->per;
	m->data_arg = &n->dseed;
	set_model(m, n);
	struct sp_params sp;
	sp_params_defaults(&sp);
	sp.host_jitter = n->jitter;
	struct rt_config c;
	CHECK_OK(rt_config_from_params(&sp, &c));
	c.dev.backend = DEV_BACKEND_HOST;
	c.dev.ndevices = n->plan.ndev;
	c.dev.device_mem = 64 << 20;
	c.vmm.device_mem = n->budget;
	c.vmm.host_mem = 64 << 20;
	c.vmm.max_objects = 4096;
	c.threads = 1;
	struct rt_ctx *rt;
	CHECK_OK(rt_open(&c, &rt));
	rt_set_nodes(rt, &n->nodes);
	struct rt_run *run;
	n->rc = rt_run_open(rt, m, &n->plan, 42, &run);
	/* 2bw without a flush: blocks of its steps a program, the same on every
	 * node (each step's all-reduces meet) */
	for (int s = 0, k = 1; s < STEPS && n->rc == 0; s += k) {
		k = run->mo->nstep < STEPS - s ? run->mo->nstep : STEPS - s;
		n->rc = rt_run_steps(run, k, NULL, &n->loss[s]);
	}
	if (n->rc < 0) { /* the other nodes would wait for this one forever */
		fprintf(stderr, "FAIL node %d (%s): %s\n", n->rank, tg_sched_name(n->plan.sched),
		        sp_last_error());
		fflush(stderr);
		_exit(1);
	}
	nodes_read_state(run, m->nlayers, n->plan.zero, &n->st);
	rt_run_close(run);
	rt_close(rt);
	return NULL;
}

static int one_case(uint64_t seed, int verbose)
{
	rng = seed * 0x9e3779b97f4a7c15ull + 7;
	int N = 2 + (int)rnd(MAXN - 1);
	struct node proto = {.T = 8};
	proto.cfg = (struct kn_model_config){
	    .maxT = 8, .V = 32 << rnd(2), .L = 1 + (int)rnd(3), .NH = 2, .C = 16 << rnd(2)};
	proto.cfg.dtype = rnd(4) == 0 ? KN_BF16 : KN_F32;
	proto.opt = (int)rnd(3);
	proto.lr = proto.opt ? 0.05f : 3e-3f;
	proto.wd = rnd(2) ? 0.1f : 0;
	static const float clips[] = {0.05f, 1e30f};
	proto.clip = clips[rnd(2)];
	proto.dseed = seed;
	/* 2bw most often: the schedule this test was written for */
	enum tg_sched sched = rnd(2) ? TG_2BW : (enum tg_sched)rnd(TG_NSCHED);
	struct tg_plan p = {.sched = sched};
	p.ndev = 1 + (int)rnd(2);
	int dp = sched == TG_DP_SWAP || sched == TG_HARMONY_DP;
	int rep_node = dp ? p.ndev : 1; /* replicas on one node */
	proto.per = rep_node * (1 << rnd(3)) * (dp ? 1 : 2);
	proto.total = N * proto.per;
	int per_rep = proto.per / rep_node, mbs[4], nm = 0;
	for (int mb = 1; mb <= per_rep; mb *= 2)
		if (per_rep % mb == 0)
			mbs[nm++] = mb;
	p.microbatch = mbs[rnd((uint32_t)nm)];
	p.group = 1 + (int)rnd(2);
	p.recompute = rnd(3) == 0;
	p.upd_cpu = rnd(3) == 0;
	p.zero = rnd(3) == 0;
	if (sched == TG_2BW) /* steps a program: 1 (a flush each), 2, 3 */
		p.flush_every = 1 + (int)rnd(3);

	struct rt_model ref_m; /* the whole batch, N * rep_node replicas */
	CHECK_OK(rt_model_gpt(&proto.cfg, proto.T, proto.total, &ref_m));
	ref_m.data_arg = &proto.dseed;
	set_model(&ref_m, &proto);
	int L = ref_m.nlayers;
	p.npacks = 0;
	for (int l = 0; l < L;) {
		int len = 1 + (int)rnd(2);
		l = l + len > L ? L : l + len;
		p.pack_end[p.npacks++] = l;
	}
	struct rt_model node_m; /* one node's share: the plan must take it */
	CHECK_OK(rt_model_gpt(&proto.cfg, proto.T, proto.per, &node_m));
	struct tg_layer tl[16];
	struct tg_model tm;
	rt_model_tg(&node_m, tl, &tm);
	struct tg_graph g;
	struct tg_plan p1 = p;
	p1.zero = 0;
	int built = tg_graph_build(&tm, 1, &p1, &g);
	uint64_t ws = built == 0 ? tg_graph_min_capacity(&g, NULL) : 0;
	if (built == 0)
		tg_graph_free(&g);
	rt_model_free(&node_m);
	if (built < 0) { /* a plan this model cannot take */
		rt_model_free(&ref_m);
		return 0;
	}
	proto.plan = p;
	proto.budget = (uint64_t)((double)ws * (rnd(2) ? 1.5 : 64));
	int jit = rnd(2);

	char what[256];
	snprintf(what, sizeof(what),
	         "seed %" PRIu64 ": %d nodes of %d dev, %s, L %d C %d V %d %s, %s, batch %d/node, "
	         "mb %d, %d packs%s%s%s%s%s, flush every %d, budget %s",
	         seed, N, p.ndev, tg_sched_name(sched), proto.cfg.L, proto.cfg.C, proto.cfg.V,
	         proto.cfg.dtype == KN_BF16 ? "bf16" : "fp32",
	         proto.opt ? (proto.opt == 2 ? "sgd+mom" : "sgd") : "adamw", proto.per,
	         p.microbatch, p.npacks, p.recompute ? ", recompute" : "",
	         p.upd_cpu ? ", cpu update" : "", p.zero ? ", zero1" : "",
	         proto.clip < 1 ? ", clip" : "", jit ? ", jitter" : "",
	         p.flush_every > 1 ? p.flush_every : 1, proto.budget > 32 * ws ? "ample" : "1.5x");

	/* the reference: one replica per node (per device of a node, data parallel) */
	struct rt_reference *ref;
	CHECK_OK(rt_reference_open(&ref_m, N * rep_node, p.microbatch, 42, &ref));
	if (sched == TG_2BW)
		CHECK_OK(rt_reference_set_2bw(ref));
	double rl[STEPS];
	for (int s = 0; s < STEPS; s++)
		CHECK_OK(rt_reference_step(ref, s, &rl[s]));
	if (getenv("NODES_VERBOSE"))
		fprintf(stderr, "  %s\n", what);

	struct node nodes[MAXN];
	int ranks[MAXN];
	pthread_t th[MAXN];
	for (int r = 0; r < N; r++) {
		nodes[r] = proto;
		nodes[r].rank = ranks[r] = r;
		nodes[r].nodes = (struct rt_nodes){r, N, mb_send, mb_recv, &ranks[r]};
		if (jit)
			snprintf(nodes[r].jitter, sizeof(nodes[r].jitter), "%d:600:%d",
			         (int)rnd((uint32_t)p.ndev), (int)(seed + (uint64_t)r));
		CHECK(pthread_create(&th[r], NULL, node_main, &nodes[r]) == 0);
	}
	for (int r = 0; r < N; r++)
		CHECK(pthread_join(th[r], NULL) == 0);
	struct nodes_state st[MAXN];
	double *loss[MAXN];
	for (int r = 0; r < N; r++) {
		st[r] = nodes[r].st;
		loss[r] = nodes[r].loss;
	}
	nodes_check(ref, &ref_m, sched == TG_2BW, p.zero, N, st, loss, STEPS, rl, what);
	for (int r = 0; r < N; r++)
		rt_model_free(&nodes[r].m);
	if (verbose)
		printf("  %s\n", what);
	rt_reference_close(ref);
	rt_model_free(&ref_m);
	return 1;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 60;
	uint64_t first = argc > 2 ? strtoull(argv[2], NULL, 10) : 1;
	CHECK_OK(kn_cpu_set_threads(1));
	int ran = 0;
	for (int i = 0; i < n; i++) {
		uint64_t seed = first + (uint64_t)i;
		rng = seed * 0x9e3779b97f4a7c15ull + 7;
		int r = one_case(seed, getenv("NODES_VERBOSE") != NULL);
		ran += r;
	}
	printf("nodes: %d of %d random cases ran on 2-3 in-process nodes, bit-identical to the "
	       "reference\n",
	       ran, n);
	CHECK(ran >= n / 2);
	printf("ok\n");
	return 0;
}

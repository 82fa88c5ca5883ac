/* tests/runtime/test_predicted.c — DESIGN §9.3: the swap volume the executor
 * moves through the vmm equals the taskgraph's prediction (tg_sim_swap) for
 * the same plan and capacity.
 *
 * Model backend (gtx1080ti-x4, virtual time, deterministic). A synthetic model
 * whose objects all have one size U (parameters, gradients, optimizer state,
 * stash, boundary, input, target: U each; no workspace), so the vmm's pools
 * never fragment and the comparison is exact. Every schedule on 1, 2 and 4
 * devices at budgets that force evictions; the executor issues in program
 * order (the simulator's replay), without prefetch or eager write-back; the
 * second of three iterations is compared, bytes per link (H2D, D2H, P2P) and
 * object kind, all-reduce traffic included. Then the same with prefetch on:
 * both figures are printed (docs/runtime.md explains the difference).
 *
 * Then the host pool as a tier: a pool of 1/2, 1/3 and 1/4 of what the plan
 * stores (weights and optimizer state first, then whatever the devices write
 * back) above the simulated disk tier, with the update on the devices and on
 * the CPU: host->disk and disk->host bytes per kind equal the prediction too.
 *
 * Last, the plans tests/runtime/fuzz_predicted_disk found where they differed,
 * shrunk (packs of any size, some outputs or targets of no bytes, pools at
 * their smallest): both run with equal bytes, or both fail. */
#include "runtime/runtime.h"
#include "tests/test.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define U  (2u << 20)
#define NL 6
#define MB 1

static int kfwd(const struct rt_layer_call *c)
{
	static const struct dev_kernel k = {"synthetic", NULL, NULL};
	return dev_launch(c->s, &k, NULL, 0, (struct dev_cost){1e9 * c->B, 3.0 * U, 0});
}

static int kupd(const struct rt_layer_call *c)
{
	static const struct dev_kernel k = {"synthetic update", NULL, NULL};
	return dev_launch(c->s, &k, NULL, 0, (struct dev_cost){1e7, 4.0 * U, 0});
}

static const struct rt_layer_ops ops = {
    .forward = kfwd, .backward = kfwd, .update = kupd, .simulates = 1};

static int no_data(const struct rt_model *m, void *arg, int iter, int s0, int n, void *in, void *y)
{
	return 0;
}

static void model(struct rt_model *m, struct rt_layer *L)
{
	memset(m, 0, sizeof(*m));
	for (int i = 0; i < NL; i++)
		L[i] = (struct rt_layer){.param_bytes = U,
		                         .grad_bytes = U,
		                         .optim_bytes = U,
		                         .stash_per_sample = U / MB,
		                         .out_per_sample = U / MB,
		                         .fwd_flops_per_sample = 1e9,
		                         .bwd_flops_per_sample = 2e9,
		                         .ops = &ops};
	snprintf(m->name, sizeof(m->name), "uniform");
	m->nlayers = NL;
	m->layers = L;
	m->in_per_sample = U / MB;
	m->target_per_sample = U / MB;
	m->loss_floats = U / MB / 4;
	m->data = no_data;
}

static int mismatches;
static char disk_dir[] = "/tmp/spill-predicted-XXXXXX";

/* host: the host pool's bytes above a (simulated) disk tier; 0: 4 GiB, no disk */
static struct rt_ctx *open_model(int ndev, uint64_t budget, int prefetch, uint64_t host)
{
	struct sp_params sp;
	sp_params_defaults(&sp);
	if (host)
		sp.disk_path = disk_dir;
	struct rt_config c;
	CHECK_OK(rt_config_from_params(&sp, &c));
	c.dev.backend = DEV_BACKEND_MODEL;
	c.dev.ndevices = ndev;
	c.dev.profile = "gtx1080ti-x4";
	c.vmm.device_mem = budget;
	c.vmm.host_mem = host ? host : 4ull << 30;
	c.vmm.align = U;
	c.exec.ordered = !prefetch;
	c.exec.lookahead = prefetch ? 3 : 0;
	c.exec.eager_writeback = prefetch;
	c.exec.late_binding = 0;
	c.exec.window = 1 + prefetch;
	struct rt_ctx *rt;
	CHECK_OK(rt_open(&c, &rt));
	return rt;
}

struct vol {
	uint64_t b[TG_NLINK][TG_NOKIND];
};

static void measured(struct rt_ctx *rt, struct vol *v)
{
	memset(v, 0, sizeof(*v));
	for (int k = 0; k < TG_NOKIND; k++)
		for (int s = 0; s < rt->ndev; s++) {
			v->b[TG_L_H2D][k] += vmm_link_bytes(rt->vmm, VMM_HOST, s, k);
			v->b[TG_L_D2H][k] += vmm_link_bytes(rt->vmm, s, VMM_HOST, k);
			for (int d = 0; d < rt->ndev; d++)
				if (d != s)
					v->b[TG_L_P2P][k] += vmm_link_bytes(rt->vmm, s, d, k);
		}
	for (int k = 0; k < TG_NOKIND; k++) {
		v->b[TG_L_H2DISK][k] = vmm_link_bytes(rt->vmm, VMM_HOST, VMM_DISK, k);
		v->b[TG_L_DISK2H][k] = vmm_link_bytes(rt->vmm, VMM_DISK, VMM_HOST, k);
	}
	v->b[TG_L_P2P][TG_O_GRAD] += rt->st.collective_p2p;
}

static const char *link_name[] = {"H2D", "D2H", "P2P", "host->disk", "disk->host"};

/* Returns the bytes moved in the 2nd iteration; prints the table against sw. */
/* The uniform model under a plan of one layer per pack for sched on ndev. */
static void plan_of(int sched, int ndev, int upd_cpu, struct rt_model *m, struct rt_layer *L,
                    struct tg_plan *p)
{
	model(m, L);
	int dp = sched == TG_DP_SWAP || sched == TG_HARMONY_DP;
	m->batch = 4 * MB * (dp ? ndev : 1);
	*p = (struct tg_plan){.sched = sched,
	                      .ndev = ndev,
	                      .npacks = NL,
	                      .microbatch = MB,
	                      .group = sched >= TG_HARMONY_DP ? 2 : 1,
	                      .upd_cpu = upd_cpu};
	for (int i = 0; i < NL; i++)
		p->pack_end[i] = i + 1;
}

/* ... and its task graph. */
static void graph_of(int sched, int ndev, int upd_cpu, struct tg_graph *g)
{
	struct rt_layer L[NL];
	struct rt_model m;
	struct tg_plan p;
	plan_of(sched, ndev, upd_cpu, &m, L, &p);
	struct tg_layer tl[NL];
	struct tg_model tm;
	rt_model_tg(&m, tl, &tm);
	CHECK_OK(tg_graph_build(&tm, 1, &p, g));
}

static uint64_t one(int sched, int ndev, uint64_t budget, int prefetch, const struct tg_swap *sw,
                    int exact, uint64_t host, int upd_cpu)
{
	struct rt_layer L[NL];
	struct rt_model m;
	struct tg_plan p;
	plan_of(sched, ndev, upd_cpu, &m, L, &p);
	struct rt_ctx *rt = open_model(ndev, budget, prefetch, host);
	struct rt_run *run;
	CHECK_OK(rt_run_open(rt, &m, &p, 1, &run));
	struct vol a, b;
	CHECK_OK(rt_run_step(run, NULL));
	measured(rt, &a);
	CHECK_OK(rt_run_step(run, NULL));
	measured(rt, &b);
	CHECK_OK(rt_run_step(run, NULL));
	uint64_t total = 0;
	int ok = 1;
	for (int l = 0; l < TG_NLINK; l++)
		for (int k = 0; k < TG_NOKIND; k++) {
			uint64_t got = b.b[l][k] - a.b[l][k], want = sw->bytes[l][k];
			total += got;
			if (got != want) {
				ok = 0;
				printf("    %s %s: measured %" PRIu64 " MiB, predicted %" PRIu64
				       " MiB\n",
				       link_name[l], tg_okind_name(k), got >> 20, want >> 20);
			}
		}
	uint64_t pred = 0;
	for (int l = 0; l < TG_NLINK; l++)
		for (int k = 0; k < TG_NOKIND; k++)
			pred += sw->bytes[l][k];
	uint64_t dk = 0;
	for (int l = TG_L_H2DISK; l <= TG_L_DISK2H; l++)
		for (int k = 0; k < TG_NOKIND; k++)
			dk += sw->bytes[l][k];
	char hs[64] = "";
	if (host)
		snprintf(hs, sizeof(hs), ", host %2" PRIu64 " U%s (disk %4" PRIu64 " MiB)",
		         host / U, upd_cpu ? ", CPU update" : "", dk >> 20);
	printf("  %-10s %d dev, budget %3" PRIu64 " U, prefetch %s%s: measured %5" PRIu64
	       " MiB, predicted %5" PRIu64 " MiB%s\n",
	       tg_sched_name(sched), ndev, budget / U, prefetch ? "on " : "off", hs, total >> 20,
	       pred >> 20, ok ? " (equal)" : "");
	if (exact && host) /* every plan printed, then the count checked */
		mismatches += !ok;
	else if (exact)
		CHECK_MSG(ok, "%s on %d devices: measured != predicted", tg_sched_name(sched),
		          ndev);
	rt_run_close(run);
	rt_close(rt);
	return total;
}

/* ---- regressions: plans the fuzzer found, each object U or nothing ---------------- */
struct regress {
	const char *why;
	int sched, ndev, m, upd_cpu;
	const char *packs; /* end layer of each pack: "1,2,3" */
	const char *out;   /* per pack, its output (boundary) U or none: "101"; NULL: all U */
	const char *work;  /* per pack, U of workspace or none: "001"; NULL: none */
	int no_targets;    /* targets of no bytes */
	int extra;         /* device budget: tg_graph_min_capacity + extra U */
	int host;          /* host pool, U */
};

/* A pack's weights, gradient and optimizer state sit on its first layer, its
 * output on its last: each pack object is U (or nothing) whatever the cut. */
static void regress_model(const struct regress *r, struct rt_model *m, struct rt_layer *L,
                          struct tg_plan *p)
{
	memset(m, 0, sizeof(*m));
	memset(p, 0, sizeof(*p));
	int np = 0, lo = 0;
	for (const char *c = r->packs; *c;) {
		char *e;
		int hi = (int)strtol(c, &e, 10);
		for (int l = lo; l < hi; l++)
			L[l] = (struct rt_layer){
			    .param_bytes = l == lo ? U : 0,
			    .grad_bytes = l == lo ? U : 0,
			    .optim_bytes = l == lo ? U : 0,
			    .out_per_sample = l == hi - 1 && (!r->out || r->out[np] == '1') ? U : 0,
			    .work_bytes = l == lo && r->work && r->work[np] == '1' ? U : 0,
			    .fwd_flops_per_sample = 1e9,
			    .bwd_flops_per_sample = 2e9,
			    .ops = &ops};
		p->pack_end[np++] = hi;
		lo = hi;
		c = *e == ',' ? e + 1 : e;
	}
	snprintf(m->name, sizeof(m->name), "regress");
	m->nlayers = lo;
	m->layers = L;
	m->in_per_sample = U;
	m->target_per_sample = r->no_targets ? 0 : U;
	m->loss_floats = U / 4;
	m->data = no_data;
	int dp = r->sched == TG_DP_SWAP || r->sched == TG_HARMONY_DP;
	m->batch = r->m * (dp ? r->ndev : 1);
	p->sched = r->sched;
	p->ndev = r->ndev;
	p->npacks = np;
	p->microbatch = 1;
	p->group = 1;
	p->upd_cpu = r->upd_cpu;
}

/* Runs r on the executor and the predictor: 1 if they agree. */
static int regress_one(const struct regress *r)
{
	struct rt_layer L[16];
	struct rt_model m;
	struct tg_plan p;
	struct tg_layer tl[16];
	struct tg_model tm;
	struct tg_graph g;
	regress_model(r, &m, L, &p);
	rt_model_tg(&m, tl, &tm);
	CHECK_OK(tg_graph_build(&tm, 1, &p, &g));
	uint64_t budget = tg_graph_min_capacity(&g, NULL) + (uint64_t)r->extra * U;
	struct tg_hw hw = {.host_capacity = (uint64_t)r->host * U, .host_align = U};
	tg_graph_set_hw(&g, &hw);
	struct tg_swap sw;
	int prc = tg_sim_swap(&g, budget, 0, &sw);
	char pmsg[256];
	snprintf(pmsg, sizeof(pmsg), "%s", prc ? sp_last_error() : "");
	tg_graph_free(&g);
	struct rt_ctx *rt = open_model(r->ndev, budget, 0, (uint64_t)r->host * U);
	struct rt_run *run = NULL;
	struct vol a, b;
	int erc = rt_run_open(rt, &m, &p, 1, &run);
	for (int it = 0; it < 3 && erc == 0; it++) {
		erc = rt_run_step(run, NULL);
		if (it == 0)
			measured(rt, &a);
		if (it == 1)
			measured(rt, &b);
	}
	char emsg[256];
	snprintf(emsg, sizeof(emsg), "%s", erc ? sp_last_error() : "");
	rt_run_close(run);
	rt_close(rt);
	int ok = (prc < 0) == (erc < 0), equal = ok;
	uint64_t total = 0;
	for (int l = 0; l < TG_NLINK && ok && prc == 0; l++)
		for (int k = 0; k < TG_NOKIND; k++) {
			total += sw.bytes[l][k];
			equal &= b.b[l][k] - a.b[l][k] == sw.bytes[l][k];
		}
	printf("  %-10s %d dev, packs %s%s%s, budget %2" PRIu64 " U, host %d U%s: %s\n",
	       tg_sched_name(r->sched), r->ndev, r->packs, r->out ? ", outputs " : "",
	       r->out ? r->out : "", budget / U, r->host, r->upd_cpu ? ", CPU update" : "",
	       !ok       ? "one of them fails"
	       : prc < 0 ? "both -ENOMEM"
	       : equal   ? "measured = predicted"
	                 : "measured != predicted");
	if (!ok)
		printf("    predictor %d: %s\n    executor %d: %s\n", prc, pmsg, erc, emsg);
	for (int l = 0; l < TG_NLINK && ok && prc == 0 && !equal; l++)
		for (int k = 0; k < TG_NOKIND; k++) {
			uint64_t got = b.b[l][k] - a.b[l][k], want = sw.bytes[l][k];
			if (got != want)
				printf("    %s %s: measured %" PRIu64 " B, predicted %" PRIu64
				       " B\n",
				       link_name[l], tg_okind_name(k), got, want);
		}
	if (!ok || !equal)
		printf("    (%s)\n", r->why);
	(void)total;
	return ok && equal;
}

static const struct regress regressions[] = {
    {"the executor holds a microbatch's input while its target finds room", TG_1F1B, 1, 2, 0, "1",
     NULL, NULL, 0, 0, 3},
    {"with only copies in flight besides the pinned ones, the vmm waits for them", TG_GPIPE, 1, 1,
     0, "1,2", NULL, NULL, 0, 0, 2},
    {"3 ring members: the shares add up to 2(N-1)|G| exactly", TG_DP_SWAP, 3, 1, 0, "1", NULL, NULL,
     0, 0, 2},
    {"objects of no bytes have no copies (their write-downs landed copies in flight)",
     TG_HARMONY_PP, 1, 1, 0, "1,2,3,4", NULL, NULL, 0, 5, 2},
    {"objects of no bytes have no copies (a boundary of none)", TG_DP_SWAP, 1, 1, 0, "1,2,3,4,5,6",
     "101111", NULL, 0, 5, 3},
    {"an all-reduce's members go together, when each is next on its device", TG_DP_SWAP, 2, 1, 0,
     "1,2,3,4,5,6", NULL, NULL, 0, 0, 4},
    {"an all-reduce's members are held until the last is acquired", TG_DP_SWAP, 2, 1, 1,
     "1,2,3,4,5,6", NULL, NULL, 0, 0, 4},
    {"a victim whose write-back finds no room is passed over; then the device is emptied",
     TG_DP_SWAP, 1, 1, 0, "1,2,3", NULL, NULL, 1, 0, 1},
    {"... and the same for a pipeline", TG_GPIPE, 1, 1, 0, "1,2", "01", NULL, 1, 0, 1},
    {"a host that waits for a copy in flight finds the ones queued behind it still flying", TG_1F1B,
     2, 3, 0, "1,2,3", NULL, "001", 0, 0, 3},
    {"in strict order an all-reduce whose members are at their heads waits for a busy device",
     TG_HARMONY_DP, 2, 1, 1, "1,2,3", NULL, NULL, 0, 0, 4},
    {"... and with targets of no bytes", TG_HARMONY_DP, 2, 1, 1, "1,2", NULL, NULL, 1, 0, 4},
    {"a copy into space a copy-out frees starts when that ends, and delays its stream", TG_1F1B, 2,
     3, 0, "1,2,3", "101", NULL, 0, 0, 4},
    {"... and the same for 2bw with the update on the CPU", TG_2BW, 2, 7, 1, "4,6,7", "101", NULL,
     0, 0, 4},
};

int main(void)
{
	static const int devs[] = {1, 2, 4};
	int compared = 0;
	for (int s = 0; s < TG_NSCHED; s++)
		for (int di = 0; di < 3; di++) {
			int nd = devs[di];
			struct tg_graph g;
			graph_of(s, nd, 0, &g);
			uint64_t ws = tg_graph_min_capacity(&g, NULL);
			for (uint64_t budget = ws + U; budget <= ws + 4 * U; budget += 3 * U) {
				struct tg_swap sw;
				CHECK_OK(tg_sim_swap(&g, budget, 0, &sw));
				uint64_t got = one(s, nd, budget, 0, &sw, 1, 0, 0);
				CHECK(got > 0);
				one(s, nd, budget, 1, &sw, 0, 0, 0);
				compared++;
			}
			tg_graph_free(&g);
		}
	printf("%d plans: measured = predicted with prefetch off\n", compared);
	CHECK(mkdtemp(disk_dir) != NULL);
	int disk_plans = 0;
	uint64_t disk_bytes = 0;
	for (int s = 0; s < TG_NSCHED; s++)
		for (int di = 0; di < 3; di++)
			for (int upd_cpu = 0; upd_cpu < 2; upd_cpu++) {
				int nd = devs[di];
				struct tg_graph g;
				graph_of(s, nd, upd_cpu, &g);
				uint64_t budget = tg_graph_min_capacity(&g, NULL) + U;
				uint64_t state = tg_graph_state_bytes(&g);
				for (int frac = 2; frac <= 4; frac++) {
					uint64_t host = state / frac / U * U;
					struct tg_hw hw = {.host_capacity = host, .host_align = U};
					tg_graph_set_hw(&g, &hw);
					struct tg_swap sw;
					CHECK_OK(tg_sim_swap(&g, budget, 0, &sw));
					one(s, nd, budget, 0, &sw, 1, host, upd_cpu);
					for (int l = TG_L_H2DISK; l <= TG_L_DISK2H; l++)
						for (int k = 0; k < TG_NOKIND; k++)
							disk_bytes += sw.bytes[l][k];
					disk_plans++;
				}
				tg_graph_free(&g);
			}
	printf("%d plans with a host pool above the disk: measured = predicted, %" PRIu64
	       " MiB between host and disk\n",
	       disk_plans, disk_bytes >> 20);
	CHECK(disk_bytes > 0);
	CHECK_MSG(mismatches == 0, "%d plans with a host pool: measured != predicted", mismatches);
	int bad = 0, nreg = (int)(sizeof(regressions) / sizeof(regressions[0]));
	for (int i = 0; i < nreg; i++)
		bad += !regress_one(&regressions[i]);
	printf("%d plans the fuzzer found: %d differ\n", nreg, bad);
	CHECK_MSG(bad == 0, "%d of the fuzzer's plans: measured != predicted", bad);
	rmdir(disk_dir);
	TEST_PASS();
}

/* tests/runtime/fuzz_predicted_disk.c — randomized check of tg_sim_swap's
 * contract with a host pool above a (simulated) disk tier: the executor in its
 * strict order (ordered, no lookahead, no eager write-back, no late binding) on
 * the model backend moves, in the 2nd of 3 iterations, exactly the bytes per
 * link (H2D, D2H, P2P, host->disk, disk->host) and object kind that
 * tg_sim_swap predicts for the same plan, device budget and host pool — when
 * every object has one size U (or none), so the vmm's pools never fragment.
 * With FUZZ_SIZES set, each pack's weights, gradient and optimizer state are
 * 1..3 U instead: the device pools and the host pool then fragment, and the
 * replay places copies in them as the vmm does (dev_align and host_align;
 * FUZZ_NOPOOL=1 turns that off: about 4 cases in 10 then differ; with
 * FUZZ_HOSTALL=1 the host pool holds everything, as before the replay placed
 * host copies).
 *
 * Each case draws a schedule, 1..4 devices, 2..10 layers cut into packs, the
 * microbatches, group, CPU update, recompute and keep_stash, 2bw's steps a
 * program (an iteration is then one run of the program: all of them), which packs stash,
 * boundaries and workspaces (each U or 0 bytes, drawn so that every object is
 * U or 0), a device budget from the minimum (tg_graph_min_capacity, sometimes
 * one U below it) and a host pool from one U below the smallest the predictor
 * accepts up to the whole state. Both must fail together (-ENOMEM) or run with
 * equal bytes. A disagreement is shrunk greedily and printed as a spec that
 * `-c` replays.
 *
 *   fuzz_predicted_disk [COUNT [SEED [FIRST]]]  cases FIRST..FIRST+COUNT-1 of SEED
 *   fuzz_predicted_disk -c 'SPEC'               one case, its table printed
 * A spec with size=... (FUZZ_SIZES) replays with its sizes.
 * FUZZ_TRACE=1 (with -c) prints the objects, the order and the vmm's transfers
 * of each iteration; FUZZ_LOG=1 the library's log at INFO; FUZZ_TALLY=1 the
 * kinds of refusals both made; FUZZ_2BW=N makes every case 2bw, its steps a
 * program even, 2..2N. Returns 0 when every case agreed, 1 otherwise.
 *
 * Known disagreement (the executor, not the prediction): in its check mode the
 * executor passes over an all-reduce one of whose devices still runs a task
 * (window 1) and issues later tasks first, so the order then depends on time;
 * 73 of 20000 plans of seed 21, all harmony-dp on 2 devices with the update on
 * the CPU. runtime/exec.c waiting there instead, when every member is at the
 * head of its queue, makes them equal (20000 plans of seed 20: none differ). */
#include "common/log.h"
#include "runtime/runtime.h"
#include "tests/test.h"

#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define U      (2u << 20)
#define MAXL   10
#define NSCHED TG_NSCHED

/* One case. Layer bytes sit on a pack's first layer (its weights, gradient,
 * optimizer state, stash, workspace) and its last (its output), so each pack
 * object is U or 0 whatever the cut. */
struct fcase {
	int sched, ndev, nl, np;
	int pack_end[MAXL];
	int mb, mper, group, upd_cpu, recompute;
	unsigned char keep[MAXL];  /* keep_stash */
	unsigned char stash[MAXL]; /* the pack stashes U */
	unsigned char work[MAXL];  /* the pack's layers need U of workspace */
	unsigned char out[MAXL];   /* the pack's output (its boundary, the next pack's
	                              input gradient) is U, else 0; the last pack's
	                              always is: the losses are read from it */
	unsigned char sz[MAXL];    /* the pack's weights, gradient and optimizer state
	                              are sz U each (0 or 1: U) */
	int y;                     /* targets U, else 0 */
	int extra;                 /* budget: tg_graph_min_capacity + extra U */
	int host;                  /* host pool, U */
	int flush;                 /* 2bw: steps a program (flush_every; 2 or 4 drawn) */
};

struct vol {
	uint64_t b[TG_NLINK][TG_NOKIND];
};

struct outcome {
	int prc, erc;              /* predictor's and executor's return codes */
	char pmsg[256], emsg[256]; /* their messages */
	const char *stage;         /* where the executor failed */
	struct vol pred, meas;
	uint64_t budget, state;
	int hmin; /* the smallest host pool (U) the predictor accepts, 0: none */
};

static const char *link_name[] = {"H2D", "D2H", "P2P", "host->disk", "disk->host"};
static char disk_dir[] = "/tmp/spill-fuzzpred-XXXXXX";
static char current[512]; /* the running case, for the watchdog */

/* ---- the random source (splitmix64) ------------------------------------------- */
static uint64_t rng_state;
static uint64_t rnd(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}
static int rnd_in(int lo, int hi) /* inclusive */
{
	return lo + (int)(rnd() % (uint64_t)(hi - lo + 1));
}
static int chance(int pct)
{
	return (int)(rnd() % 100) < pct;
}

/* ---- the spec: one line, key=value ------------------------------------------ */
static void bits(char *s, const unsigned char *b, int n)
{
	for (int i = 0; i < n; i++)
		s[i] = b[i] ? '1' : '0';
	s[n] = 0;
}

static void spec_format(const struct fcase *c, char *s, size_t n)
{
	char packs[64] = "", k[MAXL + 1], st[MAXL + 1], w[MAXL + 1], ou[MAXL + 1];
	for (int i = 0, o = 0; i < c->np; i++)
		o += snprintf(packs + o, sizeof(packs) - (size_t)o, "%s%d", i ? "," : "",
		              c->pack_end[i]);
	bits(k, c->keep, c->np);
	bits(st, c->stash, c->np);
	bits(w, c->work, c->np);
	bits(ou, c->out, c->np);
	char szs[MAXL + 8] = "";
	int sized = 0;
	for (int i = 0; i < c->np; i++)
		sized |= c->sz[i] > 1;
	if (sized) {
		int o = snprintf(szs, sizeof(szs), " size=");
		for (int i = 0; i < c->np; i++)
			szs[o++] = (char)('0' + (c->sz[i] > 1 ? c->sz[i] : 1));
		szs[o] = 0;
	}
	char fl[24] = "";
	if (c->flush > 1)
		snprintf(fl, sizeof(fl), " flush=%d", c->flush);
	snprintf(s, n,
	         "sched=%s dev=%d packs=%s mb=%d m=%d group=%d cpu=%d recompute=%d keep=%s "
	         "stash=%s work=%s out=%s y=%d budget=%+d host=%d%s%s",
	         tg_sched_name(c->sched), c->ndev, packs, c->mb, c->mper, c->group, c->upd_cpu,
	         c->recompute, k, st, w, ou, c->y, c->extra, c->host, szs, fl);
}

static int parse_bits(const char *v, unsigned char *b)
{
	int n = 0;
	for (; v[n] == '0' || v[n] == '1'; n++)
		if (n < MAXL)
			b[n] = v[n] == '1';
	return n;
}

static int spec_parse(const char *s, struct fcase *c)
{
	memset(c, 0, sizeof(*c));
	c->mb = c->mper = c->group = c->ndev = c->y = 1;
	memset(c->out, 1, sizeof(c->out));
	c->sched = -1;
	char buf[512];
	snprintf(buf, sizeof(buf), "%s", s);
	for (char *save = NULL, *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
		char *v = strchr(t, '=');
		if (!v)
			return -1;
		*v++ = 0;
		if (!strcmp(t, "sched")) {
			for (int i = 0; i < NSCHED; i++)
				if (!strcmp(v, tg_sched_name(i)))
					c->sched = i;
		} else if (!strcmp(t, "dev"))
			c->ndev = atoi(v);
		else if (!strcmp(t, "packs")) {
			c->np = 0;
			for (char *q = v; *q && c->np < MAXL;) {
				c->pack_end[c->np++] = (int)strtol(q, &q, 10);
				if (*q == ',')
					q++;
			}
			c->nl = c->pack_end[c->np - 1];
		} else if (!strcmp(t, "mb"))
			c->mb = atoi(v);
		else if (!strcmp(t, "m"))
			c->mper = atoi(v);
		else if (!strcmp(t, "group"))
			c->group = atoi(v);
		else if (!strcmp(t, "cpu"))
			c->upd_cpu = atoi(v);
		else if (!strcmp(t, "recompute"))
			c->recompute = atoi(v);
		else if (!strcmp(t, "keep"))
			parse_bits(v, c->keep);
		else if (!strcmp(t, "stash"))
			parse_bits(v, c->stash);
		else if (!strcmp(t, "work"))
			parse_bits(v, c->work);
		else if (!strcmp(t, "out"))
			parse_bits(v, c->out);
		else if (!strcmp(t, "y"))
			c->y = atoi(v);
		else if (!strcmp(t, "budget"))
			c->extra = atoi(v);
		else if (!strcmp(t, "host"))
			c->host = atoi(v);
		else if (!strcmp(t, "flush"))
			c->flush = atoi(v);
		else if (!strcmp(t, "size"))
			for (int i = 0; i < MAXL && v[i] >= '1' && v[i] <= '9'; i++)
				c->sz[i] = (unsigned char)(v[i] - '0');
		else
			return -1;
	}
	return c->sched < 0 || c->np < 1 || c->host < 1 ? -1 : 0;
}

/* ---- the model and the plan --------------------------------------------------- */
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

static int is_dp(int s)
{
	return s == TG_DP_SWAP || s == TG_HARMONY_DP;
}

/* Does pack pk run its forward again in its backward? */
static int recomputes(const struct fcase *c, int pk)
{
	return c->recompute && !c->keep[pk];
}

static void model(const struct fcase *c, struct rt_model *m, struct rt_layer *L)
{
	memset(m, 0, sizeof(*m));
	uint64_t per = U / (uint64_t)c->mb;
	for (int pk = 0, lo = 0; pk < c->np; lo = c->pack_end[pk++])
		for (int l = lo; l < c->pack_end[pk]; l++) {
			int first = l == lo, last = l == c->pack_end[pk] - 1;
			uint64_t w = c->sz[pk] > 1 ? c->sz[pk] * (uint64_t)U : U;
			L[l] =
			    (struct rt_layer){.param_bytes = first ? w : 0,
			                      .grad_bytes = first ? w : 0,
			                      .optim_bytes = first ? w : 0,
			                      .stash_per_sample = first && c->stash[pk] ? per : 0,
			                      .out_per_sample = last && c->out[pk] ? per : 0,
			                      .work_bytes = first && c->work[pk] ? U : 0,
			                      .fwd_flops_per_sample = 1e9,
			                      .bwd_flops_per_sample = 2e9,
			                      .ops = &ops};
			snprintf(L[l].name, sizeof(L[l].name), "l%d", l);
		}
	snprintf(m->name, sizeof(m->name), "fuzz");
	m->nlayers = c->nl;
	m->layers = L;
	m->in_per_sample = per;
	m->target_per_sample = c->y ? per : 0;
	m->loss_floats = (int)(per / 4);
	m->data = no_data;
	m->batch = c->mper * c->mb * (is_dp(c->sched) ? c->ndev : 1);
}

static void plan(const struct fcase *c, struct tg_plan *p)
{
	memset(p, 0, sizeof(*p));
	p->sched = c->sched;
	p->ndev = c->ndev;
	p->npacks = c->np;
	p->microbatch = c->mb;
	p->group = c->group;
	p->upd_cpu = c->upd_cpu;
	p->recompute = c->recompute;
	p->flush_every = c->flush;
	for (int i = 0; i < c->np; i++) {
		p->pack_end[i] = c->pack_end[i];
		p->keep_stash[i] = c->keep[i];
	}
}

/* Makes every object U or 0: a recomputing pack's workspaces hold its stash as
 * if kept (FWD) and that plus its output (BWD), so it has at most one of them. */
static void normalize(struct fcase *c)
{
	int harmony = c->sched == TG_HARMONY_DP || c->sched == TG_HARMONY_PP;
	if (!harmony || c->group < 1 || c->mper % c->group)
		c->group = 1;
	c->out[c->np - 1] = 1;
	if (c->sched != TG_2BW)
		c->flush = 0;
	for (int pk = 0; pk < c->np; pk++) {
		if (!c->recompute)
			c->keep[pk] = 0;
		if (!recomputes(c, pk))
			continue;
		if (c->out[pk])
			c->stash[pk] = c->work[pk] = 0;
		else if (c->stash[pk] && c->work[pk])
			c->work[pk] = 0;
	}
	c->nl = c->pack_end[c->np - 1];
}

static void draw(struct fcase *c)
{
	memset(c, 0, sizeof(*c));
	c->sched = rnd_in(0, NSCHED - 1);
	c->ndev = rnd_in(1, 4);
	c->nl = rnd_in(2, MAXL);
	int cut = rnd_in(0, 9);
	if (cut < 3) { /* one layer a pack */
		c->np = c->nl;
		for (int i = 0; i < c->nl; i++)
			c->pack_end[i] = i + 1;
	} else if (cut < 5) { /* one pack */
		c->np = 1;
		c->pack_end[0] = c->nl;
	} else { /* random cuts */
		c->np = 0;
		for (int l = 1; l < c->nl; l++)
			if (chance(50))
				c->pack_end[c->np++] = l;
		c->pack_end[c->np++] = c->nl;
	}
	c->mb = chance(75) ? 1 : 2;
	c->mper = is_dp(c->sched) ? rnd_in(1, 4) : rnd_in(1, 8);
	int div[8], nd = 0;
	for (int g = 1; g <= c->mper; g++)
		if (c->mper % g == 0)
			div[nd++] = g;
	c->group = div[rnd_in(0, nd - 1)];
	c->upd_cpu = chance(40);
	c->recompute = chance(30);
	c->y = chance(85);
	int stash_all = rnd_in(0, 2); /* none, all, random */
	for (int pk = 0; pk < c->np; pk++) {
		c->keep[pk] = c->recompute && chance(30);
		c->stash[pk] = stash_all == 1 || (stash_all == 2 && chance(50));
		c->work[pk] = chance(25);
		c->out[pk] = chance(85);
	}
	int b = rnd_in(0, 19);
	c->extra = b == 0 ? -1 : b < 8 ? 0 : b < 12 ? 1 : rnd_in(2, 6);
	/* even: the replay repeats one program, whose weight versions are back
	 * in place after an even number of steps (after an odd one the runtime
	 * swaps what W and Wnew name, which the replay does not) */
	if (c->sched == TG_2BW && chance(60))
		c->flush = 2 * rnd_in(1, 2);
	/* FUZZ_2BW=N (an adversary's knob): 2bw always, K even from 2..2N */
	if (getenv("FUZZ_2BW")) {
		c->sched = TG_2BW;
		if (is_dp(TG_2BW) == 0 && c->group != 1)
			c->group = 1;
		c->flush =
		    2 * rnd_in(1, atoi(getenv("FUZZ_2BW")) > 0 ? atoi(getenv("FUZZ_2BW")) : 4);
	}
	normalize(c);
}

/* ---- one case --------------------------------------------------------------------- */
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

/* -c with FUZZ_TRACE set: the vmm's transfers of each iteration, printed */
static int tracing;
static uint64_t traced;
static void trace(struct rt_ctx *rt, int it)
{
	static struct vmm_trace_rec r[1u << 16];
	uint64_t total;
	size_t n = vmm_trace_get(rt->vmm, r, 1u << 16, &total);
	printf("  -- iteration %d: transfers %" PRIu64 "..%" PRIu64 "\n", it + 1, traced, total);
	for (size_t i = n - (size_t)(total - traced); i < n; i++)
		printf("    %-7s %-12s %d -> %d  %.9f-%.9f\n", vmm_xfer_kind_name(r[i].xfer),
		       r[i].name, r[i].src, r[i].dst, r[i].t_start, r[i].t_end);
	traced = total;
}

/* The predictor on host pool `host` U: its return code. */
static int predict(struct tg_graph *g, uint64_t budget, int host, struct tg_swap *sw)
{
	/* the device pools placed as the vmm's (align U, its default size classes) */
	struct tg_hw hw = {.host_capacity = (uint64_t)host * U,
	                   .host_align = U,
	                   .dev_align = getenv("FUZZ_NOPOOL") ? 0 : U,
	                   .size_class_bits = 2,
	                   .size_class_min = 64ull * U};
	tg_graph_set_hw(g, &hw);
	return tg_sim_swap(g, budget, 0, sw);
}

static int executor(const struct fcase *c, struct rt_model *m, const struct tg_plan *p,
                    struct outcome *o)
{
	struct sp_params sp;
	sp_params_defaults(&sp);
	sp.disk_path = disk_dir;
	struct rt_config cfg;
	CHECK_OK(rt_config_from_params(&sp, &cfg));
	cfg.dev.backend = DEV_BACKEND_MODEL;
	cfg.dev.ndevices = c->ndev;
	cfg.dev.profile = "gtx1080ti-x4";
	cfg.vmm.device_mem = o->budget;
	cfg.vmm.host_mem = (uint64_t)c->host * U;
	cfg.vmm.align = U;
	cfg.exec.ordered = 1;
	cfg.exec.lookahead = 0;
	cfg.exec.eager_writeback = 0;
	cfg.exec.late_binding = 0;
	cfg.exec.window = 1;
	if (tracing)
		cfg.vmm.trace_cap = 1u << 16;
	struct rt_ctx *rt = NULL;
	struct rt_run *run = NULL;
	struct vol a;
	int rc;
	sp_error_clear();
	o->stage = "rt_open";
	if ((rc = rt_open(&cfg, &rt)) < 0)
		goto out;
	o->stage = "rt_run_open";
	if ((rc = rt_run_open(rt, m, p, 1, &run)) < 0)
		goto out;
	for (int it = 0; it < 3; it++) {
		static const char *st[] = {"iteration 1", "iteration 2", "iteration 3"};
		o->stage = st[it];
		if ((rc = rt_run_steps(run, run->mo->nstep, NULL, NULL)) < 0)
			goto out;
		if (tracing)
			trace(rt, it);
		if (it == 0)
			measured(rt, &a);
		if (it == 1) {
			measured(rt, &o->meas);
			for (int l = 0; l < TG_NLINK; l++)
				for (int k = 0; k < TG_NOKIND; k++)
					o->meas.b[l][k] -= a.b[l][k];
		}
	}
	o->stage = "";
out:
	if (rc < 0)
		snprintf(o->emsg, sizeof(o->emsg), "%s", sp_last_error());
	rt_run_close(run);
	rt_close(rt);
	return rc;
}

/* Runs case c: 0 both agree, 1 they disagree (o says how). */
static int run_case(const struct fcase *c, struct outcome *o)
{
	memset(o, 0, sizeof(*o));
	spec_format(c, current, sizeof(current));
	struct rt_layer L[MAXL];
	struct rt_model m;
	struct tg_layer tl[MAXL];
	struct tg_model tm;
	struct tg_plan p;
	struct tg_graph g;
	model(c, &m, L);
	plan(c, &p);
	rt_model_tg(&m, tl, &tm);
	int rc = tg_graph_build(&tm, 1, &p, &g);
	if (rc < 0) { /* a plan the taskgraph refuses: the executor must too */
		o->prc = rc;
		snprintf(o->pmsg, sizeof(o->pmsg), "tg_graph_build: %s", sp_last_error());
		o->budget = 64ull * U;
		o->erc = executor(c, &m, &p, o);
		return o->erc >= 0;
	}
	for (int i = 0; i < g.nobj; i++) /* the contract's premise */
		CHECK_MSG(g.obj[i].bytes % U == 0 && g.obj[i].bytes <= 9ull * U,
		          "object %d (%s) of %" PRIu64 " bytes: not uniform: %s", i,
		          tg_okind_name(g.obj[i].kind), g.obj[i].bytes, current);
	if (tracing) {
		printf("  objects:");
		for (int i = 0; i < g.nobj; i++)
			if (g.obj[i].bytes)
				printf(" %s%d", tg_okind_name(g.obj[i].kind), i);
		printf("\n  order:");
		for (int i = 0; i < g.ntask; i++) {
			const struct tg_task *t = &g.task[g.order[i]];
			static const char *kn[] = {"F", "B", "U", "AR", "L", "N"};
			printf(" %s%d.%d@%d", kn[t->kind], t->pack, t->mb0, t->dev);
		}
		printf("\n");
	}
	uint64_t ws = tg_graph_min_capacity(&g, NULL);
	o->budget = ws + (int64_t)c->extra * U;
	o->state = tg_graph_state_bytes(&g);
	struct tg_swap sw;
	int hmax = (int)((o->state + U - 1) / U) + 2;
	for (int h = 1; h <= hmax && !o->hmin; h++)
		if (predict(&g, o->budget, h, &sw) == 0)
			o->hmin = h;
	o->prc = predict(&g, o->budget, c->host, &sw);
	if (o->prc < 0)
		snprintf(o->pmsg, sizeof(o->pmsg), "%s", sp_last_error());
	else
		memcpy(o->pred.b, sw.bytes, sizeof(o->pred.b));
	tg_graph_free(&g);
	o->erc = executor(c, &m, &p, o);
	if ((o->prc < 0) != (o->erc < 0))
		return 1;
	if (o->prc < 0)
		return 0;
	return memcmp(&o->pred, &o->meas, sizeof(o->pred)) != 0;
}

static void report(const struct fcase *c, const struct outcome *o)
{
	char s[512];
	spec_format(c, s, sizeof(s));
	printf("  spec: %s\n", s);
	printf("  budget %" PRIu64
	       " U, host %d U (smallest the predictor runs: %d U), state %" PRIu64 " U\n",
	       o->budget / U, c->host, o->hmin, o->state / U);
	printf("  predictor: %d%s%s\n", o->prc, o->prc ? ": " : "", o->pmsg);
	printf("  executor:  %d%s%s%s%s\n", o->erc, o->erc ? " at " : "", o->erc ? o->stage : "",
	       o->erc ? ": " : "", o->emsg);
	if (o->prc < 0 || o->erc < 0)
		return;
	for (int l = 0; l < TG_NLINK; l++)
		for (int k = 0; k < TG_NOKIND; k++) {
			uint64_t got = o->meas.b[l][k], want = o->pred.b[l][k];
			if (got || want)
				printf("    %-10s %-8s measured %4" PRIu64 " U, predicted %4" PRIu64
				       " U%s\n",
				       link_name[l], tg_okind_name(k), got / U, want / U,
				       got != want ? "   <-- differs" : "");
		}
}

/* Greedy shrinking: each smaller variant that still disagrees replaces c. */
static int variants(const struct fcase *c, struct fcase *v)
{
	int n = 0;
#define VAR(cond, stmt)                          \
	do {                                     \
		if (cond) {                      \
			v[n] = *c;               \
			struct fcase *x = &v[n]; \
			stmt;                    \
			normalize(x);            \
			n++;                     \
		}                                \
	} while (0)
	VAR(c->ndev > 1, x->ndev--);
	VAR(c->mper > 1, x->mper--);
	VAR(c->group > 1, x->group = 1);
	for (int i = 0; i + 1 < c->np; i++) /* merge packs i and i+1 */
		VAR(1, {
			memmove(&x->pack_end[i], &x->pack_end[i + 1],
			        (size_t)(x->np - i - 1) * sizeof(int));
			memmove(&x->keep[i + 1], &x->keep[i + 2], (size_t)(x->np - i - 2));
			memmove(&x->stash[i + 1], &x->stash[i + 2], (size_t)(x->np - i - 2));
			memmove(&x->work[i + 1], &x->work[i + 2], (size_t)(x->np - i - 2));
			memmove(&x->out[i], &x->out[i + 1], (size_t)(x->np - i - 1));
			x->np--;
		});
	for (int i = 0; i < c->np; i++) /* one layer fewer in pack i */
		VAR(c->pack_end[i] - (i ? c->pack_end[i - 1] : 0) > 1, {
			for (int j = i; j < x->np; j++)
				x->pack_end[j]--;
		});
	VAR(c->np > 1, x->np--); /* drop the last pack */
	VAR(c->upd_cpu, x->upd_cpu = 0);
	VAR(c->recompute, x->recompute = 0);
	VAR(c->mb > 1, x->mb = 1);
	for (int i = 0; i < c->np; i++) {
		VAR(c->keep[i], x->keep[i] = 0);
		VAR(c->stash[i], x->stash[i] = 0);
		VAR(c->work[i], x->work[i] = 0);
		VAR(!c->out[i], x->out[i] = 1);
	}
	VAR(!c->y, x->y = 1);
	VAR(c->extra > 0, x->extra--);
	VAR(c->host > 1, x->host--);
	VAR(1, x->host++);
#undef VAR
	return n;
}

static int same_kind(const struct outcome *a, const struct outcome *b)
{
	return (a->prc < 0) == (b->prc < 0) && (a->erc < 0) == (b->erc < 0);
}

static void shrink(struct fcase *c, struct outcome *o)
{
	struct fcase v[64];
	for (int progress = 1, rounds = 0; progress && rounds < 200; rounds++) {
		progress = 0;
		int n = variants(c, v);
		for (int i = 0; i < n && !progress; i++) {
			struct outcome w;
			if (run_case(&v[i], &w) && same_kind(o, &w)) {
				*c = v[i];
				*o = w;
				progress = 1;
			}
		}
	}
}

/* Plans both refuse, by the kind of each one's message (digits dropped) */
#define NTALLY 24
static struct {
	char key[200], spec[512];
	int n;
} tallies[NTALLY];
static int ntally;

static void squeeze(char *out, size_t n, const char *in)
{
	size_t k = 0;
	for (; *in && k + 1 < n; in++)
		if ((*in < '0' || *in > '9') && *in != '.')
			out[k++] = *in;
	out[k] = 0;
}

static void tally(const struct fcase *c, const struct outcome *o)
{
	char p[64], e[96], key[200];
	squeeze(p, sizeof(p), o->pmsg + (strncmp(o->pmsg, "taskgraph: ", 11) ? 0 : 11));
	squeeze(e, sizeof(e), o->emsg);
	snprintf(key, sizeof(key), "predictor \"%.40s\" / %s: \"%.60s\"", p, o->stage, e);
	int i = 0;
	while (i < ntally && strcmp(tallies[i].key, key))
		i++;
	if (i == ntally && ntally < NTALLY) {
		snprintf(tallies[i].key, sizeof(tallies[i].key), "%s", key);
		spec_format(c, tallies[i].spec, sizeof(tallies[i].spec));
		ntally++;
	}
	if (i < NTALLY)
		tallies[i].n++;
}

static void watchdog(int sig)
{
	static const char m[] = "TIMEOUT in case: ";
	(void)sig;
	write(2, m, sizeof(m) - 1);
	write(2, current, strlen(current));
	write(2, "\n", 1);
	_exit(3);
}

int main(int argc, char **argv)
{
	CHECK(mkdtemp(disk_dir) != NULL);
	signal(SIGALRM, watchdog);
	sp_log_configure(getenv("FUZZ_LOG") ? SP_LOG_INFO : SP_LOG_NONE, SP_SUBSYS_ALL, -1);
	if (argc >= 3 && !strcmp(argv[1], "-c")) {
		struct fcase c;
		CHECK_MSG(spec_parse(argv[2], &c) == 0, "bad spec '%s'", argv[2]);
		normalize(&c);
		tracing = getenv("FUZZ_TRACE") != NULL;
		struct outcome o;
		alarm(120);
		int bad = run_case(&c, &o);
		report(&c, &o);
		rmdir(disk_dir);
		printf("%s\n", bad ? "DISAGREE" : "agree");
		return bad;
	}
	int count = argc > 1 ? atoi(argv[1]) : 100;
	uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 0) : 1;
	int first = argc > 3 ? atoi(argv[3]) : 0;
	int bad = 0, ran = 0, both_failed = 0, disk = 0;
	int sized = getenv("FUZZ_SIZES") != NULL;
	int by_sched[NSCHED] = {0};
	for (int i = first; i < first + count; i++) {
		struct fcase c;
		rng_state = seed * 0x100000001b3ull + (uint64_t)i;
		draw(&c);
		/* the host pool: one U below the smallest the predictor accepts, that
		 * smallest, one above, or anything up to the whole state */
		if (sized) /* packs of several sizes: the device and host pools fragment */
			for (int pk = 0; pk < c.np; pk++)
				c.sz[pk] = (unsigned char)rnd_in(1, 3);
		{
			struct outcome probe;
			c.host = 1 << 20; /* everything fits: find hmin and state */
			spec_format(&c, current, sizeof(current));
			struct rt_layer L[MAXL];
			struct rt_model m;
			struct tg_layer tl[MAXL];
			struct tg_model tm;
			struct tg_plan p;
			struct tg_graph g;
			model(&c, &m, L);
			plan(&c, &p);
			rt_model_tg(&m, tl, &tm);
			memset(&probe, 0, sizeof(probe));
			int hmin = 1, hmax = 1;
			if (tg_graph_build(&tm, 1, &p, &g) == 0) {
				uint64_t budget =
				    tg_graph_min_capacity(&g, NULL) + (int64_t)c.extra * U;
				hmax = (int)((tg_graph_state_bytes(&g) + U - 1) / U);
				struct tg_swap sw;
				for (hmin = 1; hmin < hmax && predict(&g, budget, hmin, &sw);
				     hmin++)
					;
				tg_graph_free(&g);
			}
			int h = rnd_in(0, 9);
			c.host = h < 2   ? hmin - 1
			         : h < 5 ? hmin
			         : h < 6 ? hmin + 1
			                 : rnd_in(hmin, hmax > hmin ? hmax : hmin);
			if (c.host < 1)
				c.host = 1;
			if (sized && getenv("FUZZ_HOSTALL"))
				c.host = 1 << 20; /* a host pool that holds everything */
		}
		struct outcome o;
		alarm(120);
		int r = run_case(&c, &o);
		alarm(0);
		ran++;
		by_sched[c.sched]++;
		if (o.prc < 0 && o.erc < 0) {
			both_failed++;
			tally(&c, &o);
		}
		for (int k = 0; k < TG_NOKIND && o.prc == 0; k++)
			if (o.pred.b[TG_L_H2DISK][k] || o.pred.b[TG_L_DISK2H][k]) {
				disk++;
				break;
			}
		if (r) {
			bad++;
			printf("case %d of seed %" PRIu64 " disagrees:\n", i, seed);
			report(&c, &o);
			alarm(600);
			shrink(&c, &o);
			alarm(0);
			printf(" shrunk:\n");
			report(&c, &o);
			fflush(stdout);
		}
	}
	printf("%d cases (seed %" PRIu64 ", from %d): %d disagree, %d both -ENOMEM, %d with disk "
	       "traffic; per schedule:",
	       ran, seed, first, bad, both_failed, disk);
	for (int s = 0; s < NSCHED; s++)
		printf(" %s %d", tg_sched_name(s), by_sched[s]);
	printf("\n");
	if (getenv("FUZZ_TALLY"))
		for (int i = 0; i < ntally; i++)
			printf("  both refuse (%d): %s\n    e.g. %s\n", tallies[i].n,
			       tallies[i].key, tallies[i].spec);
	rmdir(disk_dir);
	return bad ? 1 : 0;
}

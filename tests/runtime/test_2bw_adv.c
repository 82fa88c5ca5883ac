/* tests/runtime/test_2bw_adv.c — 2bw without a flush against the reference's
 * 2BW mode, beyond test_2bw_hostile (an adversary's test).
 *
 * Part 1 (api): rt_run_steps with n = 0, -1, K+1 (and 2 on a K = 1 program)
 * must be a clean -EINVAL that changes nothing; lr NULL and loss NULL.
 * Part 2 (fuzz): each case draws a small GPT-2 (tied head, fp32 or bf16,
 * SGD / momentum / AdamW, clipping), a 2bw plan with flush_every K in
 * {1,2,3,4,5,6,7,8,12,16} (K larger than the steps included), 1..4 emulated
 * devices, random packs (many packs with one microbatch included), recompute,
 * the CPU update, jitter, the disk tier (sometimes with an injected passing
 * fault), every executor setting, a budget from the working set up, and
 * 6..17 steps in blocks of random sizes; before each block one action:
 *   1 m->opt.lr changes      2 state compared       3 evaluation
 *   4 rollback: save, the block, restore, set_step, the block again: same losses
 *   5 the state moved to a run of another flush_every (ndev, packs, recompute,
 *     cpu update drawn again), by read/write state + set_step
 *   6 RT_PARAMS_PREV alone written back (a no-op)
 *   7 the clipping threshold changes (when clipping)
 *   8 the block run as n calls of rt_run_step
 * A block that fails (the injected fault, or -ENOMEM) is retried after
 * restoring the save taken before it (rt_run_steps: "On an error no step
 * counts (the state may be partly updated: restore a save to retry)").
 * Part 3 (twin): two runs of different K in one context, each in its own
 * block partition, interleaved: both must give the reference's bits.
 *
 * argv[1]: fuzz cases (default 30); argv[2]: first seed (default 1);
 * argv[3]: twin cases (default 10). ADV_VERBOSE=1 prints every case. */
#include "kernels/kernels.h"
#include "runtime/runtime.h"
#include "tests/test.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAXSTEPS 17

static uint64_t rng;
static uint32_t rnd(uint32_t n)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return (uint32_t)((rng >> 33) % n);
}

static uint64_t mix(uint64_t z) /* splitmix64: seeds far apart */
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static char diskdir[64];
static int failures, verbose;

struct ctxopt {
	int ndev, disk, exec;
	uint64_t budget, host_mem;
	char jitter[64], fault[64];
	/* executor settings */
	int threads, window, lookahead, eager_wb, hints, place_hints, late, ordered;
};

static void draw_exec(struct ctxopt *o)
{
	o->threads = 1 + (int)rnd(2);
	o->window = 1 + (int)rnd(4);
	o->lookahead = (int)rnd(5);
	o->eager_wb = (int)rnd(2);
	o->hints = (int)rnd(2);
	o->place_hints = (int)rnd(2);
	o->late = (int)rnd(2);
	o->ordered = rnd(4) == 0;
	o->exec = 1;
}

static struct rt_ctx *open_rt(const struct ctxopt *o)
{
	struct sp_params sp;
	sp_params_defaults(&sp);
	sp.host_jitter = (char *)o->jitter;
	sp.disk_fault = (char *)o->fault;
	if (o->disk)
		sp.disk_path = diskdir;
	struct rt_config c;
	CHECK_OK(rt_config_from_params(&sp, &c));
	c.dev.backend = DEV_BACKEND_HOST;
	c.dev.ndevices = o->ndev;
	c.dev.device_mem = 64 << 20;
	c.vmm.device_mem = o->budget;
	c.vmm.host_mem = o->host_mem;
	c.vmm.max_objects = 8192;
	c.threads = 1;
	c.exec.steal_eager = 1;
	if (o->exec) {
		c.threads = o->threads;
		c.exec.window = o->window;
		c.exec.lookahead = o->lookahead;
		c.exec.eager_writeback = o->eager_wb;
		c.exec.hints = o->hints;
		c.exec.place_hints = o->place_hints;
		c.exec.late_binding = o->late;
		c.exec.ordered = o->ordered;
	}
	struct rt_ctx *rt;
	if (rt_open(&c, &rt) < 0)
		return NULL;
	return rt;
}

static void rand_packs(struct tg_plan *p, int L)
{
	p->npacks = 0;
	if (rnd(4) == 0) { /* a pack a layer: the most packs */
		for (int l = 0; l < L; l++)
			p->pack_end[p->npacks++] = l + 1;
		return;
	}
	for (int l = 0; l < L;) {
		int len = 1 + (int)rnd(rnd(4) == 0 ? (uint32_t)L : 2);
		l = l + len > L ? L : l + len;
		p->pack_end[p->npacks++] = l;
	}
}

/* The working set of plan p for m (0: the plan does not build). */
static uint64_t min_cap(const struct rt_model *m, const struct tg_plan *p)
{
	struct tg_layer tl[32];
	struct tg_model tm;
	rt_model_tg(m, tl, &tm);
	struct tg_graph g;
	if (tg_graph_build(&tm, 1, p, &g) < 0)
		return 0;
	int v = tg_graph_validate(&g);
	if (v < 0) {
		printf("  tg_graph_validate: %d: %s\n", v, sp_last_error());
		failures++;
	}
	uint64_t ws = tg_graph_min_capacity(&g, NULL);
	tg_graph_free(&g);
	return ws;
}

static int compare(struct rt_run *run, const struct rt_reference *ref, const struct rt_model *m,
                   const char *what, int step)
{
	int bad = 0;
	for (int l = 0; l < m->nlayers; l++) {
		const struct rt_layer *ly = &m->layers[l];
		uint64_t n = rt_run_state_bytes(run, l, RT_PARAMS);
		char *w = malloc(n + 4);
		CHECK_OK(rt_run_read_state(run, l, RT_PARAMS, w));
		const void *want = ly->master_bytes ? (const void *)ref->optim[l] : ref->params[l];
		if (memcmp(w, want, n)) {
			printf("  %s: after %d steps: layer %s newest weights differ\n", what, step,
			       ly->name);
			bad++;
		}
		free(w);
		n = rt_run_state_bytes(run, l, RT_PARAMS_PREV);
		uint64_t np = rt_layer_nparams(ly);
		if (n != np * sizeof(float)) {
			printf("  %s: layer %s: PREV has %" PRIu64 " bytes\n", what, ly->name, n);
			bad++;
			continue;
		}
		float *v = malloc(n + 4), *vw = malloc(n + 4);
		CHECK_OK(rt_run_read_state(run, l, RT_PARAMS_PREV, v));
		for (uint64_t i = 0; i < np; i++)
			vw[i] = rt_layer_dtype(ly) == KN_BF16
			            ? kn_bf16_to_f32(((uint16_t *)ref->shadow[l])[i])
			            : ((float *)ref->shadow[l])[i];
		if (memcmp(v, vw, n)) {
			printf("  %s: after %d steps: layer %s older weights differ\n", what, step,
			       ly->name);
			bad++;
		}
		free(v);
		free(vw);
		n = rt_run_state_bytes(run, l, RT_OPTIM);
		if (n) {
			w = malloc(n + 4);
			CHECK_OK(rt_run_read_state(run, l, RT_OPTIM, w));
			if (memcmp(w, (const char *)ref->optim[l] + ly->master_bytes, n)) {
				printf("  %s: after %d steps: layer %s optimizer state differs\n",
				       what, step, ly->name);
				bad++;
			}
			free(w);
		}
	}
	return bad;
}

static void move_state(struct rt_run *a, struct rt_run *b, const struct rt_model *m)
{
	for (int l = 0; l < m->nlayers; l++) {
		void *buf[3];
		for (int w = RT_PARAMS; w <= RT_PARAMS_PREV; w++) {
			buf[w] = malloc(rt_run_state_bytes(a, l, (enum rt_state)w) + 4);
			CHECK_OK(rt_run_read_state(a, l, (enum rt_state)w, buf[w]));
		}
		for (int w = RT_PARAMS; w <= RT_PARAMS_PREV; w++) {
			if (rt_run_state_bytes(b, l, (enum rt_state)w))
				CHECK_OK(rt_run_write_state(b, l, (enum rt_state)w, buf[w]));
			free(buf[w]);
		}
	}
}

/* The loss of evaluation batch idx with the reference's newest weights (a
 * 1f1b run of one device given them). */
static double eval_newest(const struct rt_model *m, int mb, const struct rt_reference *ref, int idx)
{
	struct tg_plan q = {.sched = TG_1F1B, .ndev = 1, .npacks = 1, .microbatch = mb, .group = 1};
	q.pack_end[0] = m->nlayers;
	struct ctxopt o = {.ndev = 1, .budget = 64 << 20, .host_mem = 64 << 20};
	struct rt_ctx *rt = open_rt(&o);
	CHECK(rt != NULL);
	struct rt_run *r;
	CHECK_OK(rt_run_open(rt, m, &q, 42, &r));
	for (int l = 0; l < m->nlayers; l++) {
		const struct rt_layer *ly = &m->layers[l];
		CHECK_OK(rt_run_write_state(r, l, RT_PARAMS,
		                            ly->master_bytes ? (const void *)ref->optim[l]
		                                             : ref->params[l]));
	}
	double loss;
	CHECK_OK(rt_run_eval(r, idx, &loss));
	rt_run_close(r);
	rt_close(rt);
	return loss;
}

/* ---- a model ---- */
struct mdl {
	struct kn_model_config cfg;
	int batch, opt;
	uint64_t dseed;
	struct rt_model m;
};

static void draw_model(struct mdl *d, uint64_t seed)
{
	d->cfg = (struct kn_model_config){
	    .maxT = 8, .V = 32 << rnd(2), .L = 1 + (int)rnd(3), .NH = 2, .C = 16 << rnd(2)};
	d->cfg.dtype = rnd(3) == 0 ? KN_BF16 : KN_F32;
	d->batch = 1 << rnd(4);
	CHECK_OK(rt_model_gpt(&d->cfg, 8, d->batch, &d->m));
	d->dseed = seed;
	d->m.data_arg = &d->dseed;
	d->m.eval_data = rt_gpt_synthetic_data;
	d->opt = (int)rnd(3);
	CHECK_OK(rt_model_set_optimizer(&d->m, d->opt ? KN_SGD : KN_ADAMW, d->opt == 2 ? 0.9f : 0));
	d->m.opt.lr = d->opt ? 0.05f : 3e-3f;
	d->m.opt.weight_decay = rnd(2) ? 0.1f : 0;
	static const float clips[] = {0, 1e-3f, 0.05f, 0.5f, 1e30f};
	d->m.opt.grad_clip = clips[rnd(SP_ARRAY_SIZE(clips))];
}

static void draw_plan(struct tg_plan *p, const struct mdl *d)
{
	memset(p, 0, sizeof(*p));
	p->sched = TG_2BW;
	static const int devs[] = {1, 2, 3, 4};
	p->ndev = devs[rnd(4)];
	int mbs[4], nm = 0;
	for (int mb = 1; mb <= d->batch; mb *= 2)
		if (d->batch % mb == 0)
			mbs[nm++] = mb;
	p->microbatch = rnd(4) == 0 ? d->batch : mbs[rnd((uint32_t)nm)];
	p->group = 1;
	rand_packs(p, d->m.nlayers);
	p->recompute = rnd(3) == 0;
	p->upd_cpu = rnd(3) == 0;
	static const int Ks[] = {1, 2, 3, 4, 5, 6, 7, 8, 12, 16};
	p->flush_every = Ks[rnd(SP_ARRAY_SIZE(Ks))];
}

/* ---- part 1: the API's edges ---- */
static void api_edges(void)
{
	rng = 12345;
	struct mdl d;
	d.cfg = (struct kn_model_config){.maxT = 8, .V = 32, .L = 2, .NH = 2, .C = 16};
	d.batch = 4;
	CHECK_OK(rt_model_gpt(&d.cfg, 8, d.batch, &d.m));
	d.dseed = 7;
	d.m.data_arg = &d.dseed;
	d.m.opt.lr = 3e-3f;
	d.m.opt.grad_clip = 0.05f;
	for (int K = 1; K <= 3; K += 2) {
		struct tg_plan p = {.sched = TG_2BW, .ndev = 2, .microbatch = 1, .group = 1};
		rand_packs(&p, d.m.nlayers);
		p.flush_every = K;
		struct ctxopt o = {.ndev = 2, .budget = 64 << 20, .host_mem = 64 << 20};
		struct rt_ctx *rt = open_rt(&o);
		CHECK(rt);
		struct rt_run *run;
		CHECK_OK(rt_run_open(rt, &d.m, &p, 42, &run));
		struct rt_reference *ref;
		CHECK_OK(rt_reference_open(&d.m, 1, 1, 42, &ref));
		CHECK_OK(rt_reference_set_2bw(ref));
		double ls[TG_MAX_FLUSH_EVERY + 2], rl;
		float lr[TG_MAX_FLUSH_EVERY + 2];
		for (int j = 0; j < TG_MAX_FLUSH_EVERY + 2; j++)
			lr[j] = d.m.opt.lr;
		int bad_n[] = {0, -1, K + 1, TG_MAX_FLUSH_EVERY + 1};
		for (int s = 0; s < 6; s++) {
			for (unsigned b = 0; b < SP_ARRAY_SIZE(bad_n); b++) {
				int rc = rt_run_steps(run, bad_n[b], lr, ls);
				if (rc != -EINVAL) {
					printf("  api K %d: rt_run_steps(n = %d) returned %d, not "
					       "-EINVAL\n",
					       K, bad_n[b], rc);
					failures++;
				}
			}
			/* lr NULL and loss NULL on alternate steps */
			CHECK_OK(rt_reference_step(ref, s, &rl));
			double l = NAN;
			CHECK_OK(rt_run_steps(run, 1, s & 1 ? NULL : lr, s % 3 == 2 ? NULL : &l));
			if (s % 3 != 2 && l != rl) {
				printf("  api K %d: step %d loss %.9g, reference %.9g\n", K, s, l,
				       rl);
				failures++;
			}
		}
		failures += compare(run, ref, &d.m, "api", 6) > 0;
		rt_reference_close(ref);
		rt_run_close(run);
		rt_close(rt);
	}
	rt_model_free(&d.m);
}

/* ---- part 2: fuzz ---- */
static int fuzz_case(uint64_t seed)
{
	rng = mix(seed);
	rnd(2);
	struct mdl d;
	draw_model(&d, seed);
	struct rt_model *m = &d.m;
	int L = m->nlayers;
	struct tg_plan p;
	draw_plan(&p, &d);
	uint64_t ws = min_cap(m, &p);
	if (!ws) {
		rt_model_free(m);
		return 0;
	}
	struct ctxopt o = {.ndev = p.ndev};
	draw_exec(&o);
	static const double factors[] = {1.0, 1.1, 1.25, 1.5, 2, 64};
	o.budget = (uint64_t)((double)ws * factors[rnd(SP_ARRAY_SIZE(factors))]);
	o.disk = SPILL_HAVE_URING && rnd(3) == 0;
	uint64_t state = 0;
	for (int l = 0; l < L; l++)
		state += 2 * m->layers[l].param_bytes + m->layers[l].grad_bytes +
		         m->layers[l].optim_bytes;
	o.host_mem = o.disk ? (state / 3 + 4095) / 4096 * 4096 : 64 << 20;
	if (o.disk && rnd(2))
		snprintf(o.fault, sizeof(o.fault), "%s:%d:EIO", rnd(2) ? "write" : "read",
		         1 + (int)rnd(40));
	int jit = p.ndev > 1 && rnd(3) == 0;
	if (jit)
		snprintf(o.jitter, sizeof(o.jitter), "%d:800:%d", (int)rnd((uint32_t)p.ndev),
		         (int)seed);
	int steps = 6 + (int)rnd(MAXSTEPS - 5);

	char what[400];
	snprintf(what, sizeof(what),
	         "seed %" PRIu64 ": L %d C %d V %d %s batch %d, %s wd %g clip %g; 2bw %d dev, %d "
	         "packs, mb %d%s%s%s%s%s, K %d, %d steps, budget %.2fx; exec t%d w%d la%d ewb%d "
	         "h%d ph%d late%d ord%d",
	         seed, d.cfg.L, d.cfg.C, d.cfg.V, d.cfg.dtype == KN_BF16 ? "bf16" : "fp32", d.batch,
	         d.opt ? (d.opt == 2 ? "sgd+mom" : "sgd") : "adamw", (double)m->opt.weight_decay,
	         (double)m->opt.grad_clip, p.ndev, p.npacks, p.microbatch,
	         p.recompute ? " recompute" : "", p.upd_cpu ? " cpu-update" : "",
	         jit ? " jitter" : "", o.disk ? " disk" : "", o.fault[0] ? o.fault : "",
	         p.flush_every, steps, (double)o.budget / (double)ws, o.threads, o.window,
	         o.lookahead, o.eager_wb, o.hints, o.place_hints, o.late, o.ordered);
	if (verbose)
		printf("  %s\n", what);

	struct rt_reference *ref;
	CHECK_OK(rt_reference_open(m, 1, p.microbatch, 42, &ref));
	CHECK_OK(rt_reference_set_2bw(ref));
	struct rt_ctx *rt = open_rt(&o);
	if (!rt) {
		rt_reference_close(ref);
		rt_model_free(m);
		return 0;
	}
	struct rt_run *run;
	int rc = rt_run_open(rt, m, &p, 42, &run);
	if (rc < 0) {
		if (rc != -EINVAL && rc != -ENOMEM && !(rc == -EIO && o.fault[0])) {
			printf("  %s: rt_run_open %d: %s\n", what, rc, sp_last_error());
			failures++;
		}
		rt_close(rt);
		rt_reference_close(ref);
		rt_model_free(m);
		return 0;
	}
	int ran = 1, bad = 0, retries = 0, fresh = 1, skipped_tail = 0;
	char log[512] = "";
	void **saved = NULL;
	for (int s = 0, n = 1; s < steps && !bad; s += n) {
		int act = s ? (int)rnd(9) : 0;
		char a[48];
		snprintf(a, sizeof(a), " %d", act);
		strncat(log, a, sizeof(log) - strlen(log) - 1);
		switch (act) {
		case 1: m->opt.lr *= rnd(2) ? 2.0f : 0.5f; break;
		case 2: bad += compare(run, ref, m, what, s); break;
		case 3: {
			int idx = (int)rnd(5);
			double le;
			rc = rt_run_eval(run, idx, &le);
			if (rc == -ENOMEM || (rc == -EIO && o.fault[0]))
				break;
			if (rc < 0) {
				printf("  %s: eval before step %d: %d %s\n", what, s, rc,
				       sp_last_error());
				bad++;
				break;
			}
			double want = eval_newest(m, p.microbatch, ref, idx);
			if (le != want) {
				printf("  %s: eval before step %d: %.9g, the newest weights give "
				       "%.9g\n",
				       what, s, le, want);
				bad++;
			}
			break;
		}
		case 5: {
			struct tg_plan q = p;
			static const int Ks[] = {1, 2, 3, 4, 5, 7, 8};
			q.flush_every = Ks[rnd(SP_ARRAY_SIZE(Ks))];
			q.ndev = 1 + (int)rnd(4);
			rand_packs(&q, L);
			q.recompute = rnd(3) == 0;
			q.upd_cpu = rnd(3) == 0;
			uint64_t ws2 = min_cap(m, &q);
			if (!ws2)
				break;
			struct ctxopt o2 = o;
			o2.fault[0] = 0; /* the fault is the first context's */
			o2.ndev = q.ndev;
			o2.budget = ws2 * 2;
			if (o2.jitter[0])
				snprintf(o2.jitter, sizeof(o2.jitter), "%d:800:%d",
				         (int)rnd((uint32_t)q.ndev), (int)seed);
			struct rt_ctx *rt2 = open_rt(&o2);
			struct rt_run *r2 = NULL;
			if (!rt2 || rt_run_open(rt2, m, &q, 99, &r2) < 0) {
				if (rt2)
					rt_close(rt2);
				break;
			}
			move_state(run, r2, m);
			rt_run_set_step(r2, s);
			if (saved)
				rt_run_save_free(run, saved);
			saved = NULL;
			rt_run_close(run);
			rt_close(rt);
			run = r2;
			rt = rt2;
			o = o2;
			snprintf(a, sizeof(a), "(K%d d%d p%d%s%s)", q.flush_every, q.ndev, q.npacks,
			         q.recompute ? " rc" : "", q.upd_cpu ? " cpu" : "");
			fresh = 1;
			strncat(log, a, sizeof(log) - strlen(log) - 1);
			p = q;
			break;
		}
		case 6:
			for (int l = 0; l < L; l++) {
				uint64_t nb = rt_run_state_bytes(run, l, RT_PARAMS_PREV);
				void *b = malloc(nb + 4);
				CHECK_OK(rt_run_read_state(run, l, RT_PARAMS_PREV, b));
				CHECK_OK(rt_run_write_state(run, l, RT_PARAMS_PREV, b));
				free(b);
			}
			break;
		case 7:
			if (m->opt.grad_clip > 0 && m->opt.grad_clip < 1e29f)
				m->opt.grad_clip *= rnd(2) ? 4.0f : 0.25f;
			break;
		default: break;
		}
		if (bad)
			break;
		int most = p.flush_every > 1 ? p.flush_every : 1;
		int left = steps - s;
		n = rnd(3) == 0 ? (most < left ? most : left)
		                : 1 + (int)rnd((uint32_t)(most < left ? most : left));
		float lr[TG_MAX_FLUSH_EVERY];
		double rls[TG_MAX_FLUSH_EVERY], losses[TG_MAX_FLUSH_EVERY];
		static const float lr_scale[] = {1, 1, 3, 0.25f, 0};
		for (int j = 0; j < n; j++)
			lr[j] = m->opt.lr * lr_scale[rnd(5)];
		float lr0 = m->opt.lr;
		for (int j = 0; j < n; j++) {
			m->opt.lr = lr[j];
			CHECK_OK(rt_reference_step(ref, s + j, &rls[j]));
		}
		m->opt.lr = lr0;
		snprintf(a, sizeof(a), "x%d", n);
		strncat(log, a, sizeof(log) - strlen(log) - 1);
		int rollback = act == 4, onebyone = act == 8;
		int try_save = rollback || o.fault[0] || s > 0;
		if (try_save && (rc = rt_run_save(run, &saved)) < 0) {
			printf("  %s: save before step %d: %d %s\n", what, s, rc, sp_last_error());
			bad++;
			break;
		}
	again:
		if (onebyone) {
			rc = 0;
			for (int j = 0; j < n && !rc; j++) {
				m->opt.lr = lr[j];
				rc = rt_run_step(run, &losses[j]);
			}
			m->opt.lr = lr0;
		} else {
			rc = rt_run_steps(run, n, lr, losses);
		}
		if (rc == -ENOMEM && fresh) { /* the plan does not fit this host pool */
			ran = s > 0;
			strncat(log, " (-ENOMEM on a fresh run)", sizeof(log) - strlen(log) - 1);
			skipped_tail = 1;
			break;
		}
		if (rc < 0 && retries < 4 && saved &&
		    (rc == -ENOMEM || (o.fault[0] && (rc == -EIO || rc == -EAGAIN)))) {
			snprintf(a, sizeof(a), "!%d", rc);
			strncat(log, a, sizeof(log) - strlen(log) - 1);
			if (verbose)
				printf("    step %d..%d failed (%d: %s): restore, retry\n", s,
				       s + n - 1, rc, sp_last_error());
			retries++;
			rc = rt_run_restore(run, saved);
			if (rc == -EIO && o.fault[0]) /* the fault in the restore: again */
				rc = rt_run_restore(run, saved);
			if (rc < 0) {
				printf("  %s: restore after a failed block: %s\n", what,
				       sp_last_error());
				bad++;
				break;
			}
			rt_run_set_step(run, s);
			goto again;
		}
		if (rc < 0) {
			printf("  %s: steps %d..%d: %d %s\n", what, s, s + n - 1, rc,
			       sp_last_error());
			bad++;
			break;
		}
		for (int j = 0; j < n; j++)
			if (losses[j] != rls[j]) {
				printf("  %s: step %d loss %.9g, reference %.9g\n", what, s + j,
				       losses[j], rls[j]);
				bad++;
			}
		fresh = 0;
		if (rollback && !bad) {
			rc = rt_run_restore(run, saved);
			if (rc == -EIO && o.fault[0])
				rc = rt_run_restore(run, saved);
			if (rc < 0) {
				printf("  %s: restore (rollback) before step %d: %d %s\n", what, s,
				       rc, sp_last_error());
				bad++;
				break;
			}
			rt_run_set_step(run, s);
			double again_l[TG_MAX_FLUSH_EVERY];
			rc = rt_run_steps(run, n, lr, again_l);
			for (int t = 0; t < 3 && rc == -EIO && o.fault[0]; t++) {
				rc = rt_run_restore(run, saved);
				if (rc == -EIO)
					rc = rt_run_restore(run, saved);
				rt_run_set_step(run, s);
				if (rc == 0)
					rc = rt_run_steps(run, n, lr, again_l);
			}
			if (rc < 0) {
				printf("  %s: rollback rerun of %d..%d: %s\n", what, s, s + n - 1,
				       sp_last_error());
				bad++;
			}
			for (int j = 0; j < n && !rc; j++)
				if (again_l[j] != rls[j]) {
					printf("  %s: rerun step %d loss %.9g, reference %.9g\n",
					       what, s + j, again_l[j], rls[j]);
					bad++;
				}
		}
	}
	if (ran && !bad && !skipped_tail)
		bad += compare(run, ref, m, what, steps);
	if (bad) {
		printf("FAIL %s; actions%s\n", what, log);
		failures++;
	} else if (verbose) {
		printf("    ok: actions%s%s\n", log, ran ? "" : " (-ENOMEM at step 0)");
	}
	if (saved)
		rt_run_save_free(run, saved);
	rt_run_close(run);
	rt_close(rt);
	rt_reference_close(ref);
	rt_model_free(m);
	return ran;
}

/* ---- part 3: two runs of different K in one context ---- */
static int twin_case(uint64_t seed)
{
	rng = mix(seed ^ 0x5555);
	rnd(2);
	struct mdl d;
	draw_model(&d, seed);
	struct rt_model *m = &d.m;
	struct tg_plan pa, pb;
	draw_plan(&pa, &d);
	pb = pa;
	static const int Ks[] = {1, 2, 3, 4, 5, 7};
	pb.flush_every = Ks[rnd(SP_ARRAY_SIZE(Ks))];
	if (rnd(2))
		rand_packs(&pb, m->nlayers);
	uint64_t wa = min_cap(m, &pa), wb = min_cap(m, &pb);
	if (!wa || !wb) {
		rt_model_free(m);
		return 0;
	}
	int steps = 6 + (int)rnd(MAXSTEPS - 5);
	float lr[MAXSTEPS];
	double rl[MAXSTEPS];
	struct rt_reference *ref;
	CHECK_OK(rt_reference_open(m, 1, pa.microbatch, 42, &ref));
	CHECK_OK(rt_reference_set_2bw(ref));
	float lr0 = m->opt.lr;
	for (int s = 0; s < steps; s++) {
		m->opt.lr = lr[s] = lr0 * (rnd(3) ? 1.0f : 0.5f);
		CHECK_OK(rt_reference_step(ref, s, &rl[s]));
	}
	m->opt.lr = lr0;
	struct ctxopt o = {.ndev = pa.ndev};
	draw_exec(&o);
	o.budget = (uint64_t)((double)(wa > wb ? wa : wb) * (rnd(2) ? 2.5 : 64));
	o.host_mem = 64 << 20;
	struct rt_ctx *rt = open_rt(&o);
	struct rt_run *ra = NULL, *rb = NULL;
	int ok =
	    rt && rt_run_open(rt, m, &pa, 42, &ra) == 0 && rt_run_open(rt, m, &pb, 42, &rb) == 0;
	char what[256];
	snprintf(what, sizeof(what), "twin seed %" PRIu64 ": %s, %d dev, K %d and %d, %d steps",
	         seed, d.cfg.dtype == KN_BF16 ? "bf16" : "fp32", pa.ndev, pa.flush_every,
	         pb.flush_every, steps);
	if (verbose)
		printf("  %s\n", what);
	int bad = 0, sa = 0, sb = 0;
	while (ok && !bad && (sa < steps || sb < steps)) {
		struct rt_run *r = rnd(2) ? ra : rb;
		if ((r == ra && sa >= steps) || (r == rb && sb >= steps))
			r = r == ra ? rb : ra;
		int *s = r == ra ? &sa : &sb, K = r->mo->nstep, left = steps - *s;
		int n = 1 + (int)rnd((uint32_t)(K < left ? K : left));
		double ls[TG_MAX_FLUSH_EVERY];
		int rc = rt_run_steps(r, n, lr + *s, ls);
		if (rc == -ENOMEM && *s == 0) {
			ok = 0;
			break;
		}
		if (rc < 0) {
			printf("  %s: %s steps %d..%d: %s\n", what, r == ra ? "a" : "b", *s,
			       *s + n - 1, sp_last_error());
			bad++;
			break;
		}
		for (int j = 0; j < n; j++)
			if (ls[j] != rl[*s + j]) {
				printf("  %s: %s step %d loss %.9g, reference %.9g\n", what,
				       r == ra ? "a" : "b", *s + j, ls[j], rl[*s + j]);
				bad++;
			}
		*s += n;
	}
	if (ok && !bad) {
		bad += compare(ra, ref, m, "twin a", steps);
		bad += compare(rb, ref, m, "twin b", steps);
	}
	if (bad) {
		printf("FAIL %s\n", what);
		failures++;
	}
	rt_run_close(ra);
	rt_run_close(rb);
	if (rt)
		rt_close(rt);
	rt_reference_close(ref);
	rt_model_free(m);
	return ok;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 30;
	uint64_t first = argc > 2 ? strtoull(argv[2], NULL, 10) : 1;
	int ntwin = argc > 3 ? atoi(argv[3]) : 10;
	verbose = getenv("ADV_VERBOSE") != NULL;
	CHECK_OK(kn_cpu_set_threads(1));
	snprintf(diskdir, sizeof(diskdir), "/tmp/spill-2bw-adv-XXXXXX");
	CHECK(mkdtemp(diskdir) != NULL);
	api_edges();
	int f0 = failures;
	int ran = 0, tran = 0;
	for (int i = 0; i < n; i++)
		ran += fuzz_case(first + (uint64_t)i);
	for (int i = 0; i < ntwin; i++)
		tran += twin_case(first + (uint64_t)i);
	rmdir(diskdir);
	printf("2bw adv: api %s; fuzz %d of %d cases ran; twin %d of %d ran; %d failures\n",
	       f0 ? "FAILED" : "ok", ran, n, tran, ntwin, failures);
	CHECK(!failures);
	TEST_PASS();
}

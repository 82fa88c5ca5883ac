/* tests/runtime/test_2bw_hostile.c — the 2bw schedule against the
 * reference's 2BW mode (rt_reference_set_2bw) under hostile orders of calls
 * (an adversary's test).
 *
 * Each case draws a small GPT-2 (tied head; fp32 or bf16), an optimizer and
 * a clipping threshold, and a 2bw plan: 1, 2 or 4 emulated devices, random
 * contiguous packs, microbatch, recompute, the CPU update, jitter, the disk
 * tier, a budget from the working set up, and the steps a program runs
 * without a flush (flush_every 1..4). The executor and the reference step in
 * lockstep for STEPS steps, the executor in blocks of 1..flush_every steps
 * (rt_run_steps, each step its own learning rate); before each block one
 * hostile action:
 *   1 the learning rate changes (both read m->opt.lr)
 *   2 every layer's RT_PARAMS / RT_PARAMS_PREV / RT_OPTIM read mid-run and
 *     compared with the reference's params / shadow / optim
 *   3 an evaluation (must read the newest weights: equal to a 1f1b run given
 *     the reference's newest weights), which must change nothing after
 *   4 the state read and written back (PARAMS, OPTIM, then PREV): a no-op
 *   5 rt_run_save / rt_run_restore
 *   6 the run moved to another 2bw plan (another device count and packing)
 *     by its state (PARAMS, OPTIM, PREV) and rt_run_set_step
 *   7 RT_PARAMS written alone (both versions become it, as at step 0; the
 *     reference's shadow set to its params the same way)
 * Every step's loss must be the reference's bits, and at the end every
 * layer's newest weights, older weights and optimizer state.
 *
 * argv[1]: cases (default 40); argv[2]: first seed (default 1);
 * argv[3]: force one action (0..7) before every step.
 * Environment: HOSTILE_EXEC=1 draws the executor's settings too (threads,
 * window, lookahead, eager write-back, hints, late binding, ordered);
 * HOSTILE_TWIN=1 steps a second run of the same plan in the same context
 * after each step (actions 0..3 only); HOSTILE_1F1B=1 runs 1f1b against the
 * plain reference instead (a control); HOSTILE_VERBOSE=1 prints every case.
 * Seen with HOSTILE_1F1B=1 HOSTILE_EXEC=1, argv 1 1009: 1f1b runs steps 0..1
 * or 0..2 and then fails with -ENOMEM on the host pool (76 KiB, the update on
 * the CPU needs 53 KiB) while its message blames the device budget (64x the
 * minimum): a timing-dependent failure that predates 2bw. */
#include "kernels/kernels.h"
#include "runtime/runtime.h"
#include "tests/test.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STEPS 8

static uint64_t rng;
static uint32_t rnd(uint32_t n)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return (uint32_t)((rng >> 33) % n);
}

static char jitter[64];
static char diskdir[64];
static int force = -1;
static int exec_mix;  /* HOSTILE_EXEC: random executor settings */
static int twin_mode; /* HOSTILE_TWIN: two runs in one context */
static int failures;

static struct rt_ctx *open_rt(int ndev, uint64_t budget, uint64_t host_mem, int disk)
{
	struct sp_params sp;
	sp_params_defaults(&sp);
	sp.host_jitter = jitter;
	if (disk)
		sp.disk_path = diskdir;
	struct rt_config c;
	CHECK_OK(rt_config_from_params(&sp, &c));
	c.dev.backend = DEV_BACKEND_HOST;
	c.dev.ndevices = ndev;
	c.dev.device_mem = 64 << 20;
	c.vmm.device_mem = budget;
	c.vmm.host_mem = host_mem;
	c.vmm.max_objects = 4096;
	c.threads = 1;
	c.exec.steal_eager = 1;
	if (exec_mix) { /* the executor's other settings, drawn per context */
		c.threads = 1 + (int)rnd(2);
		c.exec.window = 1 + (int)rnd(4);
		c.exec.lookahead = (int)rnd(5);
		c.exec.eager_writeback = (int)rnd(2);
		c.exec.hints = (int)rnd(2);
		c.exec.place_hints = (int)rnd(2);
		c.exec.late_binding = (int)rnd(2);
		c.exec.ordered = rnd(4) == 0;
		if (getenv("HOSTILE_VERBOSE"))
			printf(
			    "  exec: threads %d window %d lookahead %d eager_writeback %d hints %d "
			    "place_hints %d late_binding %d ordered %d; host pool %llu\n",
			    c.threads, c.exec.window, c.exec.lookahead, c.exec.eager_writeback,
			    c.exec.hints, c.exec.place_hints, c.exec.late_binding, c.exec.ordered,
			    (unsigned long long)host_mem);
	}
	struct rt_ctx *rt;
	if (rt_open(&c, &rt) < 0)
		return NULL;
	return rt;
}

/* A random contiguous packing of L layers. */
static void rand_packs(struct tg_plan *p, int L)
{
	p->npacks = 0;
	for (int l = 0; l < L;) {
		int len = 1 + (int)rnd(rnd(4) == 0 ? (uint32_t)L : 2);
		l = l + len > L ? L : l + len;
		p->pack_end[p->npacks++] = l;
	}
}

/* Compares run's state with the reference's; returns the number of layers
 * that differ (printing them). */
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
			printf("  %s: before step %d: layer %s newest weights differ\n", what, step,
			       ly->name);
			bad++;
		}
		free(w);
		n = rt_run_state_bytes(run, l, RT_PARAMS_PREV);
		CHECK_MSG(n == (ref->shadow ? rt_layer_nparams(ly) * sizeof(float) : 0),
		          "PREV bytes %" PRIu64, n);
		if (!n) { /* HOSTILE_1F1B */
			n = rt_run_state_bytes(run, l, RT_OPTIM);
			goto optim;
		}
		float *v = malloc(n + 4), *vw = malloc(n + 4);
		CHECK_OK(rt_run_read_state(run, l, RT_PARAMS_PREV, v));
		uint64_t np = rt_layer_nparams(ly);
		for (uint64_t i = 0; i < np; i++)
			vw[i] = rt_layer_dtype(ly) == KN_BF16
			            ? kn_bf16_to_f32(((uint16_t *)ref->shadow[l])[i])
			            : ((float *)ref->shadow[l])[i];
		if (memcmp(v, vw, n)) {
			printf("  %s: before step %d: layer %s older weights differ\n", what, step,
			       ly->name);
			bad++;
		}
		free(v);
		free(vw);
		n = rt_run_state_bytes(run, l, RT_OPTIM);
	optim:
		if (n) {
			w = malloc(n + 4);
			CHECK_OK(rt_run_read_state(run, l, RT_OPTIM, w));
			if (memcmp(w, (const char *)ref->optim[l] + ly->master_bytes, n)) {
				printf("  %s: before step %d: layer %s optimizer state differs\n",
				       what, step, ly->name);
				bad++;
			}
			free(w);
		}
	}
	return bad;
}

/* Copies every layer's state (PARAMS, OPTIM, PREV in that order) from a to b
 * (a == b: written back). */
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

/* The loss of evaluation batch idx with the reference's newest weights, by a
 * 1f1b run of the same packing and microbatch. */
static double eval_newest(const struct rt_model *m, const struct tg_plan *p2,
                          const struct rt_reference *ref, int idx)
{
	struct tg_plan q = *p2;
	q.sched = TG_1F1B;
	q.flush_every = 0;
	char save[64];
	memcpy(save, jitter, sizeof(save));
	jitter[0] = 0;
	struct rt_ctx *rt = open_rt(q.ndev, 64 << 20, 64 << 20, 0);
	memcpy(jitter, save, sizeof(save));
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

static int one_case(uint64_t seed)
{
	rng = seed * 0x9e3779b97f4a7c15ull + 7;
	rnd(2);
	struct kn_model_config cfg = {
	    .maxT = 8, .V = 32 << rnd(2), .L = 1 + (int)rnd(3), .NH = 2, .C = 16 << rnd(2)};
	cfg.dtype = rnd(3) == 0 ? KN_BF16 : KN_F32;
	int T = 8, batch = 1 << rnd(4); /* 1..8: m = 1 microbatch included */
	struct rt_model m;
	CHECK_OK(rt_model_gpt(&cfg, T, batch, &m));
	uint64_t dseed = seed;
	m.data_arg = &dseed;
	m.eval_data = rt_gpt_synthetic_data;
	int opt = (int)rnd(3);
	CHECK_OK(rt_model_set_optimizer(&m, opt ? KN_SGD : KN_ADAMW, opt == 2 ? 0.9f : 0));
	m.opt.lr = opt ? 0.05f : 3e-3f;
	m.opt.weight_decay = rnd(2) ? 0.1f : 0;
	static const float clips[] = {0, 1e-3f, 0.05f, 0.5f, 1e30f};
	m.opt.grad_clip = clips[rnd(SP_ARRAY_SIZE(clips))];

	struct tg_plan p = {.sched = TG_2BW};
	if (getenv("HOSTILE_1F1B")) /* the plain schedule, for comparing budgets */
		p.sched = TG_1F1B;
	static const int devs[] = {1, 2, 4};
	p.ndev = devs[rnd(3)];
	int mbs[4], nm = 0;
	for (int mb = 1; mb <= batch; mb *= 2)
		if (batch % mb == 0)
			mbs[nm++] = mb;
	p.microbatch = mbs[rnd((uint32_t)nm)];
	p.group = 1;
	int L = m.nlayers;
	rand_packs(&p, L);
	p.recompute = rnd(3) == 0;
	p.upd_cpu = rnd(3) == 0;
	if (p.sched == TG_2BW)
		p.flush_every = 1 + (int)rnd(4);
	int jit = rnd(3) == 0 && p.ndev > 1;
	if (jit)
		snprintf(jitter, sizeof(jitter), "%d:800:%d", (int)rnd((uint32_t)p.ndev),
		         (int)seed);
	else
		jitter[0] = 0;
	int disk = SPILL_HAVE_URING && rnd(4) == 0;

	struct tg_layer tl[16];
	struct tg_model tm;
	rt_model_tg(&m, tl, &tm);
	struct tg_graph g;
	int rc = tg_graph_build(&tm, 1, &p, &g);
	if (rc < 0) {
		rt_model_free(&m);
		return 0;
	}
	uint64_t ws = tg_graph_min_capacity(&g, NULL);
	tg_graph_free(&g);
	static const double factors[] = {1.0, 1.25, 1.5, 2, 64};
	uint64_t budget = (uint64_t)(ws * factors[rnd(5)]);
	uint64_t state = 0;
	for (int l = 0; l < L; l++)
		state +=
		    2 * m.layers[l].param_bytes + m.layers[l].grad_bytes + m.layers[l].optim_bytes;
	/* the disk tier: a host pool of a third of the state, so that the state
	 * really goes to disk (test_clip_fuzz's state / 2 + 1 MiB holds all of
	 * these small models: nothing reaches its disk) */
	uint64_t host_mem = disk ? (state / 3 + 4095) / 4096 * 4096 : 64 << 20;

	char what[320];
	snprintf(what, sizeof(what),
	         "seed %" PRIu64 ": L %d C %d V %d %s batch %d, %s%s wd %g clip %g; 2bw %d dev, %d "
	         "packs (first ends %d), mb %d%s%s%s%s, flush every %d, budget %.2fx",
	         seed, cfg.L, cfg.C, cfg.V, cfg.dtype == KN_BF16 ? "bf16" : "fp32", batch,
	         opt ? "sgd" : "adamw", opt == 2 ? "+mom" : "", (double)m.opt.weight_decay,
	         (double)m.opt.grad_clip, p.ndev, p.npacks, p.pack_end[0], p.microbatch,
	         p.recompute ? " recompute" : "", p.upd_cpu ? " cpu-update" : "",
	         jit ? " jitter" : "", disk ? " disk" : "", p.flush_every,
	         (double)budget / (double)ws);

	struct rt_reference *ref;
	CHECK_OK(rt_reference_open(&m, 1, p.microbatch, 42, &ref));
	if (p.sched == TG_2BW)
		CHECK_OK(rt_reference_set_2bw(ref));

	struct rt_ctx *rt = open_rt(p.ndev, budget, host_mem, disk);
	if (!rt) {
		rt_reference_close(ref);
		rt_model_free(&m);
		return 0;
	}
	struct rt_run *run;
	rc = rt_run_open(rt, &m, &p, 42, &run);
	if (rc < 0) {
		CHECK_MSG(rc == -EINVAL || rc == -ENOMEM, "%s: rt_run_open %d: %s", what, rc,
		          sp_last_error());
		rt_close(rt);
		rt_reference_close(ref);
		rt_model_free(&m);
		return 0;
	}
	/* HOSTILE_TWIN: a second run of the same model and plan in the same
	 * context, stepped after each step of the first (they share the budget);
	 * only the actions that leave the reference alone (0..3) */
	struct rt_run *twin = NULL;
	if (twin_mode && rt_run_open(rt, &m, &p, 42, &twin) < 0)
		twin = NULL;
	int ran = 1, bad = 0;
	char log[256] = "";
	void **saved = NULL;
	for (int s = 0, n = 1; s < STEPS && !bad; s += n) {
		int act = force >= 0 ? force : (s ? (int)rnd(8) : 0);
		if (twin && act > 3)
			act = 0;
		char a[32];
		snprintf(a, sizeof(a), " %d", act);
		strncat(log, a, sizeof(log) - strlen(log) - 1);
		switch (act) {
		case 1: m.opt.lr *= rnd(2) ? 3.0f : 0.25f; break;
		case 2: bad += compare(run, ref, &m, what, s); break;
		case 3: {
			int idx = (int)rnd(5);
			double le;
			rc = rt_run_eval(run, idx, &le);
			if (rc == -ENOMEM) /* eval's own working set */
				break;
			CHECK_MSG(rc == 0, "%s: eval: %s", what, sp_last_error());
			double want = eval_newest(&m, &p, ref, idx);
			if (le != want) {
				printf("  %s: eval before step %d: %.9g, the newest weights give "
				       "%.9g\n",
				       what, s, le, want);
				bad++;
			}
			break;
		}
		case 4: move_state(run, run, &m); break;
		case 5:
			CHECK_OK(rt_run_save(run, &saved));
			CHECK_OK(rt_run_restore(run, saved));
			break;
		case 6: {
			struct tg_plan q = p;
			q.ndev = devs[rnd(3)];
			rand_packs(&q, L);
			struct rt_ctx *rt2 = open_rt(q.ndev, budget * 4, host_mem, disk);
			struct rt_run *r2 = NULL;
			if (!rt2 || rt_run_open(rt2, &m, &q, 99, &r2) < 0) {
				if (rt2)
					rt_close(rt2);
				break;
			}
			move_state(run, r2, &m);
			rt_run_set_step(r2, s);
			if (saved)
				rt_run_save_free(run, saved);
			saved = NULL;
			rt_run_close(run);
			rt_close(rt);
			run = r2;
			rt = rt2;
			p = q;
			break;
		}
		case 7:
			for (int l = 0; l < L; l++) {
				const struct rt_layer *ly = &m.layers[l];
				CHECK_OK(rt_run_write_state(run, l, RT_PARAMS,
				                            ly->master_bytes
				                                ? (const void *)ref->optim[l]
				                                : ref->params[l]));
				memcpy(ref->shadow[l], ref->params[l], ly->param_bytes);
			}
			break;
		default: break;
		}
		if (bad)
			break;
		/* a block of n steps, each with its own learning rate */
		int most = p.flush_every > 1 ? p.flush_every : 1;
		n = 1 + (int)rnd((uint32_t)(most < STEPS - s ? most : STEPS - s));
		float lr[TG_MAX_FLUSH_EVERY];
		double rls[TG_MAX_FLUSH_EVERY], losses[TG_MAX_FLUSH_EVERY];
		static const float lr_scale[] = {1, 1, 3, 0.25f};
		for (int j = 0; j < n; j++)
			lr[j] = m.opt.lr * (n > 1 ? lr_scale[rnd(4)] : 1);
		float lr0 = m.opt.lr;
		for (int j = 0; j < n; j++) {
			m.opt.lr = lr[j];
			CHECK_OK(rt_reference_step(ref, s + j, &rls[j]));
		}
		m.opt.lr = lr0;
		snprintf(a, sizeof(a), "x%d", n);
		strncat(log, a, sizeof(log) - strlen(log) - 1);
		rc = n > 1 ? rt_run_steps(run, n, lr, losses) : rt_run_step(run, &losses[0]);
		if (rc == -ENOMEM && s == 0) {
			if (getenv("HOSTILE_VERBOSE"))
				printf("  -ENOMEM: %s\n", sp_last_error());
			ran = 0;
			break;
		}
		CHECK_MSG(rc == 0, "%s: step %d: %s", what, s, sp_last_error());
		for (int j = 0; j < n; j++)
			if (losses[j] != rls[j]) {
				printf("  %s: step %d loss %.9g, reference %.9g\n", what, s + j,
				       losses[j], rls[j]);
				bad++;
			}
		double rl = rls[0];
		if (twin && n > 1) { /* the twin runs the block step by step */
			for (int j = 0; j < n && !bad; j++) {
				double lt;
				m.opt.lr = lr[j];
				CHECK_OK(rt_run_step(twin, &lt));
				m.opt.lr = lr0;
				if (lt != rls[j]) {
					printf("  %s: twin step %d loss %.9g, reference %.9g\n",
					       what, s + j, lt, rls[j]);
					bad++;
				}
			}
		} else if (twin) {
			double lt;
			rc = rt_run_step(twin, &lt);
			if (rc == -ENOMEM && s == 0) { /* both do not fit together */
				rt_run_close(twin);
				twin = NULL;
			} else {
				CHECK_MSG(rc == 0, "%s: twin step %d: %s", what, s,
				          sp_last_error());
				if (lt != rl) {
					printf("  %s: twin step %d loss %.9g, reference %.9g\n",
					       what, s, lt, rl);
					bad++;
				}
			}
		}
	}
	if (ran && !bad)
		bad += compare(run, ref, &m, what, STEPS);
	if (ran && !bad && twin)
		bad += compare(twin, ref, &m, "twin", STEPS);
	rt_run_close(twin);
	if (disk && getenv("HOSTILE_VERBOSE")) {
		struct vmm_stats vs;
		vmm_stats_get(rt->vmm, &vs);
		printf("  disk: %" PRIu64 " bytes of extents, %" PRIu64 " write-backs\n",
		       (uint64_t)vs.disk_bytes.peak, (uint64_t)vs.writebacks.total);
	}
	if (bad) {
		printf("FAIL %s; actions%s\n", what, log);
		failures++;
	} else if (getenv("HOSTILE_VERBOSE") || !ran) {
		printf("  %s; actions%s%s\n", what, log, ran ? "" : " (-ENOMEM)");
	}
	if (saved)
		rt_run_save_free(run, saved);
	rt_run_close(run);
	rt_close(rt);
	rt_reference_close(ref);
	rt_model_free(&m);
	return ran;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 40;
	uint64_t first = argc > 2 ? strtoull(argv[2], NULL, 10) : 1;
	force = argc > 3 ? atoi(argv[3]) : -1;
	exec_mix = getenv("HOSTILE_EXEC") != NULL;
	twin_mode = getenv("HOSTILE_TWIN") != NULL;
	CHECK_OK(kn_cpu_set_threads(1));
	snprintf(diskdir, sizeof(diskdir), "/tmp/spill-2bw-hostile-XXXXXX");
	CHECK(mkdtemp(diskdir) != NULL);
	int ran = 0;
	for (int i = 0; i < n; i++)
		ran += one_case(first + (uint64_t)i);
	rmdir(diskdir);
	printf("2bw hostile: %d of %d cases ran, %d differ from the reference\n", ran, n, failures);
	CHECK(!failures);
	CHECK(ran > n / 2);
	TEST_PASS();
}

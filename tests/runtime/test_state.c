/* tests/runtime/test_state.c — what the trainer builds on: a run's training
 * state read out and written into another run continues it bit for bit
 * (checkpoints, moving to another plan), and evaluation is forward only.
 *
 * Host backend, 2 emulated devices at a budget that forces eviction, a small
 * GPT-2 (tied head). For harmony-dp (replicas on both devices) and harmony-pp:
 *  - run A trains 4 steps; run B trains 2, its parameters and AdamW state are
 *    copied into run C (opened from another seed) with rt_run_set_step(2), and C
 *    trains 2 more: C's losses are A's last two and its final weights and AdamW
 *    state A's, bit for bit; copied into run E under the other schedule (a plan
 *    switch), E's losses are A's within 1e-5 (the gradient sums' order differs);
 *  - rt_run_eval on a batch equals the loss the reference loop computes on the
 *    same batch before its update (the forward is the same computation), and
 *    changes no weight and no optimizer state;
 *  - 2bw (two_bw below): its older weight version is state too, and
 *    evaluation reads the newest. */
#include "runtime/runtime.h"
#include "tests/test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static struct kn_model_config cfg = {.maxT = 8, .V = 64, .L = 3, .NH = 2, .C = 32};
static uint64_t seed = 11;

static struct rt_ctx *open_rt(uint64_t budget)
{
	struct sp_params sp;
	sp_params_defaults(&sp);
	struct rt_config c;
	CHECK_OK(rt_config_from_params(&sp, &c));
	c.dev.backend = DEV_BACKEND_HOST;
	c.dev.ndevices = 2;
	c.dev.device_mem = 64 << 20;
	c.vmm.device_mem = budget;
	c.vmm.host_mem = 64 << 20;
	c.vmm.max_objects = 4096;
	c.threads = 1;
	struct rt_ctx *rt;
	CHECK_OK(rt_open(&c, &rt));
	return rt;
}

static struct tg_plan plan_of(const struct rt_model *m, enum tg_sched s)
{
	struct tg_plan p = {
	    .sched = s, .ndev = 2, .npacks = m->nlayers, .microbatch = 1, .group = 2};
	for (int i = 0; i < m->nlayers; i++)
		p.pack_end[i] = i + 1;
	return p;
}

static void **snapshot(struct rt_run *r, const struct rt_model *m, enum rt_state which)
{
	void **s = calloc((size_t)m->nlayers, sizeof(void *));
	for (int l = 0; l < m->nlayers; l++) {
		s[l] = malloc(rt_run_state_bytes(r, l, which) + 1);
		CHECK_OK(rt_run_read_state(r, l, which, s[l]));
	}
	return s;
}

static void same(void **a, void **b, struct rt_run *r, const struct rt_model *m,
                 enum rt_state which, const char *what)
{
	for (int l = 0; l < m->nlayers; l++)
		CHECK_MSG(!memcmp(a[l], b[l], rt_run_state_bytes(r, l, which)),
		          "%s: layer %s differs", what, m->layers[l].name);
}

static void drop(void **s, const struct rt_model *m)
{
	for (int l = 0; l < m->nlayers; l++)
		free(s[l]);
	free(s);
}

/* 2bw: its state is the newest weights (RT_PARAMS), the older version the
 * next step reads (RT_PARAMS_PREV) and the optimizer state; copied into
 * another run they continue it bit for bit, and without the older version they
 * do not. Evaluation reads the newest weights (a checkpoint's): a 1f1b run
 * given them evaluates to the same loss, one given the older ones does not;
 * it changes no state and no later step. */
static void two_bw(struct rt_model *m, uint64_t budget)
{
	struct tg_plan p = plan_of(m, TG_2BW), q = plan_of(m, TG_1F1B);
	struct rt_ctx *rt[6];
	struct rt_run *a, *b, *c, *nop, *dn, *dp;
	for (int i = 0; i < 6; i++)
		rt[i] = open_rt(budget);
	CHECK_OK(rt_run_open(rt[0], m, &p, 42, &a));
	CHECK_OK(rt_run_open(rt[1], m, &p, 42, &b));
	CHECK_OK(rt_run_open(rt[2], m, &p, 7, &c));
	CHECK_OK(rt_run_open(rt[3], m, &p, 7, &nop));
	CHECK_OK(rt_run_open(rt[4], m, &q, 7, &dn));
	CHECK_OK(rt_run_open(rt[5], m, &q, 7, &dp));
	double la[4], l;
	for (int s = 0; s < 4; s++)
		CHECK_OK(rt_run_step(a, &la[s]));
	for (int s = 0; s < 2; s++) {
		CHECK_OK(rt_run_step(b, &l));
		CHECK(l == la[s]);
	}
	/* b after 2 steps: eval reads the newest weights and changes nothing */
	void **w0 = snapshot(b, m, RT_PARAMS), **v0 = snapshot(b, m, RT_PARAMS_PREV);
	void **o0 = snapshot(b, m, RT_OPTIM);
	CHECK(memcmp(w0[1], v0[1], rt_run_state_bytes(b, 1, RT_PARAMS))); /* two versions */
	for (int l2 = 0; l2 < m->nlayers; l2++) {
		CHECK_OK(rt_run_write_state(dn, l2, RT_PARAMS, w0[l2]));
		CHECK_OK(rt_run_write_state(dp, l2, RT_PARAMS, v0[l2]));
	}
	double le, len, lep;
	CHECK_OK(rt_run_eval(b, 0, &le));
	CHECK_OK(rt_run_eval(dn, 0, &len));
	CHECK_OK(rt_run_eval(dp, 0, &lep));
	CHECK_MSG(le == len && le != lep,
	          "2bw eval %.9g: the newest weights give %.9g, the older %.9g", le, len, lep);
	void **w1 = snapshot(b, m, RT_PARAMS), **v1 = snapshot(b, m, RT_PARAMS_PREV);
	void **o1 = snapshot(b, m, RT_OPTIM);
	same(w0, w1, b, m, RT_PARAMS, "2bw: newest weights after eval");
	same(v0, v1, b, m, RT_PARAMS_PREV, "2bw: older weights after eval");
	same(o0, o1, b, m, RT_OPTIM, "2bw: AdamW state after eval");
	/* the state into c (all of it) and nop (not the older version) */
	for (int l2 = 0; l2 < m->nlayers; l2++)
		for (int w = RT_PARAMS; w <= RT_PARAMS_PREV; w++) {
			void *buf = malloc(rt_run_state_bytes(b, l2, (enum rt_state)w) + 1);
			CHECK_OK(rt_run_read_state(b, l2, (enum rt_state)w, buf));
			CHECK_OK(rt_run_write_state(c, l2, (enum rt_state)w, buf));
			if (w != RT_PARAMS_PREV)
				CHECK_OK(rt_run_write_state(nop, l2, (enum rt_state)w, buf));
			free(buf);
		}
	CHECK(rt_run_write_state(dn, 0, RT_PARAMS_PREV, w0[0]) == -EINVAL); /* one version */
	rt_run_set_step(c, 2);
	rt_run_set_step(nop, 2);
	double lnop[2];
	for (int s = 2; s < 4; s++) {
		CHECK_OK(rt_run_step(b, &l)); /* after the evals, as if none happened */
		CHECK_MSG(l == la[s], "2bw: step %d after eval %.9g, without %.9g", s, l, la[s]);
		CHECK_OK(rt_run_step(c, &l));
		CHECK_MSG(l == la[s], "2bw: resumed step %d loss %.9g, uninterrupted %.9g", s, l,
		          la[s]);
		CHECK_OK(rt_run_step(nop, &lnop[s - 2]));
	}
	CHECK_MSG(lnop[0] != la[2], "2bw without the older version: step 2 loss %.9g all the same",
	          lnop[0]);
	void **wa = snapshot(a, m, RT_PARAMS), **wc = snapshot(c, m, RT_PARAMS);
	void **va = snapshot(a, m, RT_PARAMS_PREV), **vc = snapshot(c, m, RT_PARAMS_PREV);
	same(wa, wc, a, m, RT_PARAMS, "2bw: newest weights after the resumed steps");
	same(va, vc, a, m, RT_PARAMS_PREV, "2bw: older weights after the resumed steps");
	printf("2bw: resumed bit for bit with its older weight version (without it step 3's loss "
	       "is %.6f, not %.6f); eval reads the newest weights = %.6f (the older give "
	       "%.6f)\n",
	       lnop[0], la[2], le, lep);
	void **all[] = {w0, v0, o0, w1, v1, o1, wa, wc, va, vc};
	for (size_t i = 0; i < SP_ARRAY_SIZE(all); i++)
		drop(all[i], m);
	rt_run_close(a);
	rt_run_close(b);
	rt_run_close(c);
	rt_run_close(nop);
	rt_run_close(dn);
	rt_run_close(dp);
	for (int i = 0; i < 6; i++)
		rt_close(rt[i]);
}

int main(void)
{
	cfg.dtype = KN_F32;
	struct rt_model m;
	CHECK_OK(rt_model_gpt(&cfg, 8, 8, &m));
	m.data_arg = &seed;
	m.eval_data = rt_gpt_synthetic_data;
	uint64_t budget = 256 << 10; /* a fraction of the state: evicts */
	enum tg_sched scheds[2] = {TG_HARMONY_DP, TG_HARMONY_PP};
	for (int k = 0; k < 2; k++) {
		struct tg_plan pa = plan_of(&m, scheds[k]), pe = plan_of(&m, scheds[1 - k]);
		struct rt_ctx *rta = open_rt(budget), *rtb = open_rt(budget),
		              *rtc = open_rt(budget), *rte = open_rt(budget);
		struct rt_run *a, *b, *c, *e;
		CHECK_OK(rt_run_open(rta, &m, &pa, 42, &a));
		CHECK_OK(rt_run_open(rtb, &m, &pa, 42, &b));
		CHECK_OK(rt_run_open(rtc, &m, &pa, 7, &c));
		CHECK_OK(rt_run_open(rte, &m, &pe, 7, &e));
		double la[4], lb, lc;
		for (int s = 0; s < 4; s++)
			CHECK_OK(rt_run_step(a, &la[s]));
		for (int s = 0; s < 2; s++) {
			CHECK_OK(rt_run_step(b, &lb));
			CHECK(lb == la[s]);
		}
		for (int l = 0; l < m.nlayers; l++)
			for (int w = 0; w < 2; w++) {
				enum rt_state which = w ? RT_OPTIM : RT_PARAMS;
				void *buf = malloc(rt_run_state_bytes(b, l, which) + 1);
				CHECK_OK(rt_run_read_state(b, l, which, buf));
				CHECK_OK(rt_run_write_state(c, l, which, buf));
				CHECK_OK(rt_run_write_state(e, l, which, buf));
				free(buf);
			}
		rt_run_set_step(c, 2);
		rt_run_set_step(e, 2);
		for (int s = 2; s < 4; s++) {
			double le_;
			CHECK_OK(rt_run_step(c, &lc));
			CHECK_MSG(lc == la[s], "%s: step %d loss %.9g, uninterrupted %.9g",
			          tg_sched_name(pa.sched), s, lc, la[s]);
			CHECK_OK(rt_run_step(e, &le_));
			CHECK_MSG(fabs(le_ - la[s]) <= 1e-5 * fabs(la[s]),
			          "%s -> %s: step %d loss %.9g, uninterrupted %.9g",
			          tg_sched_name(pa.sched), tg_sched_name(pe.sched), s, le_, la[s]);
		}
		void **wa = snapshot(a, &m, RT_PARAMS), **wc = snapshot(c, &m, RT_PARAMS);
		void **oa = snapshot(a, &m, RT_OPTIM), **oc = snapshot(c, &m, RT_OPTIM);
		same(wa, wc, a, &m, RT_PARAMS, "weights after the resumed steps");
		same(oa, oc, a, &m, RT_OPTIM, "AdamW state after the resumed steps");

		/* evaluation: the forward's loss, nothing changed */
		struct rt_reference *ref;
		CHECK_OK(rt_reference_open(&m, scheds[k] == TG_HARMONY_DP ? 2 : 1, 1, 42, &ref));
		double lr;
		CHECK_OK(rt_reference_step(ref, 0, &lr));
		rt_reference_close(ref);
		struct rt_ctx *rtd = open_rt(budget);
		struct rt_run *d;
		CHECK_OK(rt_run_open(rtd, &m, &pa, 42, &d));
		void **w0 = snapshot(d, &m, RT_PARAMS), **o0 = snapshot(d, &m, RT_OPTIM);
		double le, le2, ls;
		CHECK_OK(rt_run_eval(d, 0, &le));
		CHECK_OK(rt_run_eval(d, 0, &le2));
		CHECK_MSG(le == lr && le2 == lr, "eval %.9g %.9g, reference forward %.9g", le, le2,
		          lr);
		void **w1 = snapshot(d, &m, RT_PARAMS), **o1 = snapshot(d, &m, RT_OPTIM);
		same(w0, w1, d, &m, RT_PARAMS, "weights after eval");
		same(o0, o1, d, &m, RT_OPTIM, "AdamW state after eval");
		CHECK_OK(rt_run_step(d, &ls)); /* training goes on as if no eval happened */
		CHECK_MSG(ls == la[0], "step after eval %.9g, without %.9g", ls, la[0]);
		struct vmm_stats st;
		vmm_stats_get(rta->vmm, &st);
		printf("%s: resumed bit for bit, and within 1e-5 under %s (%lld evictions in the "
		       "uninterrupted run); eval = reference forward = %.6f\n",
		       tg_sched_name(pa.sched), tg_sched_name(pe.sched),
		       (long long)st.evictions.total, le);
		CHECK(st.evictions.total > 0);
		drop(wa, &m);
		drop(wc, &m);
		drop(oa, &m);
		drop(oc, &m);
		drop(w0, &m);
		drop(w1, &m);
		drop(o0, &m);
		drop(o1, &m);
		rt_run_close(a);
		rt_run_close(b);
		rt_run_close(c);
		rt_run_close(d);
		rt_run_close(e);
		rt_close(rte);
		rt_close(rta);
		rt_close(rtb);
		rt_close(rtc);
		rt_close(rtd);
	}
	two_bw(&m, budget * 3 / 2); /* its update holds both versions */
	rt_model_free(&m);
	TEST_PASS();
}

/* tests/runtime/test_bf16.c — bf16 mixed precision end to end (issue 30).
 *
 * 1. The mixed optimizers (kn_adamw_mixed, kn_sgd_mixed and a layer's
 *    kn_layer_update_mixed) against a scalar reference: the fp32 optimizer on
 *    the master with the bf16 gradient widened, then the weight rounded to
 *    nearest even: bit-identical masters, state and weights.
 * 2. The bf16 model's sizes come from the kernels' bf16 descriptors: half the
 *    parameter and gradient bytes of fp32, the fp32 masters in front of the
 *    optimizer state, a bf16 stash.
 * 3. Transparency (DESIGN §9.1) in bf16: the small GPT-2 of
 *    test_transparency, every schedule on 1, 2 and 4 emulated devices under
 *    eviction (1.5x the working set), with recomputation and with the update
 *    on the CPU (and SGD with momentum): every step's loss and every final
 *    fp32 master bit-identical to the bf16 reference loop. argv[1] "quick"
 *    runs 1 and 4 devices only (make test). */
#include "kernels/kernels.h"
#include "runtime/runtime.h"
#include "tests/test.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

#define STEPS 3

static struct kn_model_config cfg = {.maxT = 8, .V = 64, .L = 4, .NH = 2, .C = 32};
static const int T = 8, BATCH = 8;

static uint64_t rng = 12345;
static float frand(void)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* 1: the kernels against the fp32 optimizers on widened gradients */
static void optimizer_kernels(void)
{
	enum { N = 1000 };
	static float master[N], p32[N], m[N], v[N], m32[N], v32[N], g32[N], buf[N], buf32[N];
	static uint16_t w[N], g[N];
	for (int i = 0; i < N; i++) {
		master[i] = p32[i] = frand();
		g[i] = kn_f32_to_bf16(frand() * 0.1f);
		g32[i] = kn_bf16_to_f32(g[i]);
		m[i] = m32[i] = v[i] = v32[i] = buf[i] = buf32[i] = 0;
	}
	for (int t = 1; t <= 3; t++) {
		struct kn_adamw_mixed_args a = {.master = master,
		                                .params = w,
		                                .grads = g,
		                                .m = m,
		                                .v = v,
		                                .N = N,
		                                .lr = 1e-2f,
		                                .beta1 = 0.9f,
		                                .beta2 = 0.95f,
		                                .eps = 1e-8f,
		                                .weight_decay = 0.1f,
		                                .t = t};
		CHECK_OK(kn_adamw_mixed_check(&a));
		kn_adamw_mixed_cpu(&a);
		struct kn_adamw_args r = {.dtype = KN_F32,
		                          .params = p32,
		                          .grads = g32,
		                          .m = m32,
		                          .v = v32,
		                          .N = N,
		                          .lr = 1e-2f,
		                          .beta1 = 0.9f,
		                          .beta2 = 0.95f,
		                          .eps = 1e-8f,
		                          .weight_decay = 0.1f,
		                          .t = t};
		kn_adamw_cpu(&r);
		CHECK(!memcmp(master, p32, sizeof(master)) && !memcmp(m, m32, sizeof(m)) &&
		      !memcmp(v, v32, sizeof(v)));
		for (int i = 0; i < N; i++)
			CHECK(w[i] == kn_f32_to_bf16(p32[i]));
	}
	for (int i = 0; i < N; i++)
		master[i] = p32[i] = frand();
	for (int t = 1; t <= 3; t++) {
		struct kn_sgd_mixed_args a = {.master = master,
		                              .params = w,
		                              .grads = g,
		                              .buf = buf,
		                              .N = N,
		                              .lr = 0.05f,
		                              .momentum = 0.9f,
		                              .weight_decay = 0.01f};
		CHECK_OK(kn_sgd_mixed_check(&a));
		kn_sgd_mixed_cpu(&a);
		struct kn_sgd_args r = {.dtype = KN_F32,
		                        .params = p32,
		                        .grads = g32,
		                        .buf = buf32,
		                        .N = N,
		                        .lr = 0.05f,
		                        .momentum = 0.9f,
		                        .weight_decay = 0.01f};
		kn_sgd_cpu(&r);
		CHECK(!memcmp(master, p32, sizeof(master)) && !memcmp(buf, buf32, sizeof(buf)));
		for (int i = 0; i < N; i++)
			CHECK(w[i] == kn_f32_to_bf16(p32[i]));
	}
	struct kn_sgd_mixed_args bad = {
	    .master = master, .params = w, .grads = g, .N = N, .lr = 0.1f, .momentum = 0.9f};
	CHECK(kn_sgd_mixed_check(&bad) == -EINVAL); /* momentum without a buffer */

	/* a block's update: per-tensor decay as the fp32 layer update */
	struct kn_model_config c32 = cfg, c16 = cfg;
	c32.dtype = KN_F32;
	c16.dtype = KN_BF16;
	struct kn_layer_desc d;
	CHECK_OK(kn_layer_describe(&c16, KN_LAYER_BLOCK, 1, 1, &d));
	size_t n = d.param_bytes / 2;
	float *mo = calloc(3 * n, sizeof(float)), *p = calloc(n, 4), *o32 = calloc(2 * n, 4),
	      *gf = calloc(n, 4);
	uint16_t *wb = calloc(n, 2), *gb = calloc(n, 2);
	for (size_t i = 0; i < n; i++) {
		mo[i] = p[i] = frand();
		gb[i] = kn_f32_to_bf16(frand() * 0.1f);
		gf[i] = kn_bf16_to_f32(gb[i]);
	}
	struct kn_optim_hparams h = {.lr = 1e-3f,
	                             .beta1 = 0.9f,
	                             .beta2 = 0.95f,
	                             .eps = 1e-8f,
	                             .weight_decay = 0.1f,
	                             .t = 1,
	                             .kind = KN_ADAMW};
	struct kn_layer_mem m16 = {.params = wb, .grads = gb, .optim = mo};
	struct kn_layer_mem m32l = {.params = p, .grads = gf, .optim = o32};
	CHECK_OK(kn_layer_update_mixed_cpu(&c16, KN_LAYER_BLOCK, &m16, &h));
	CHECK_OK(kn_layer_update_cpu(&c32, KN_LAYER_BLOCK, &m32l, &h));
	CHECK(!memcmp(mo, p, n * 4) && !memcmp(mo + n, o32, 2 * n * 4));
	for (size_t i = 0; i < n; i++)
		CHECK(wb[i] == kn_f32_to_bf16(p[i]));
	CHECK(kn_layer_update_mixed_cpu(&c32, KN_LAYER_BLOCK, &m16, &h) == -EINVAL);
	free(mo), free(p), free(o32), free(gf), free(wb), free(gb);
	printf("mixed AdamW and SGD: masters, state and rounded weights match the scalar "
	       "reference\n");
}

/* 2: sizes */
static void sizes(void)
{
	struct rt_model a, b;
	struct kn_model_config c32 = cfg, c16 = cfg;
	c16.dtype = KN_BF16;
	CHECK_OK(rt_model_gpt(&c32, T, BATCH, &a));
	CHECK_OK(rt_model_gpt(&c16, T, BATCH, &b));
	for (int l = 0; l < a.nlayers; l++) {
		const struct rt_layer *x = &a.layers[l], *y = &b.layers[l];
		struct kn_layer_desc d;
		CHECK_OK(kn_layer_describe(&c16, y->kind, 1, T, &d));
		CHECK(y->param_bytes * 2 == x->param_bytes && y->grad_bytes * 2 == x->grad_bytes);
		CHECK(y->master_bytes == x->param_bytes && x->master_bytes == 0);
		CHECK(y->optim_bytes == x->optim_bytes + x->param_bytes);
		CHECK(y->stash_per_sample == d.stash_bytes && y->out_per_sample == d.output_bytes);
		CHECK(rt_layer_nparams(x) == rt_layer_nparams(y));
	}
	CHECK_OK(rt_model_set_optimizer(&b, KN_SGD, 0));
	CHECK(b.layers[1].optim_bytes == b.layers[1].master_bytes);
	rt_model_free(&a);
	rt_model_free(&b);
	enum kn_dtype dt;
	CHECK(rt_precision_parse("bf16", &dt) == 0 && dt == KN_BF16);
	CHECK(rt_precision_parse("fp16", &dt) == -EINVAL);
	CHECK(strstr(sp_last_error(), "fp32, bf16") != NULL);
}

/* 3: transparency */
static struct rt_ctx *open_rt(int ndev, uint64_t budget)
{
	struct sp_params sp;
	sp_params_defaults(&sp);
	struct rt_config c;
	CHECK_OK(rt_config_from_params(&sp, &c));
	c.dev.backend = DEV_BACKEND_HOST;
	c.dev.ndevices = ndev;
	c.dev.device_mem = 64 << 20;
	c.vmm.device_mem = budget;
	c.vmm.host_mem = 64 << 20;
	c.vmm.max_objects = 4096;
	c.threads = 1;
	c.exec.steal_eager = 1;
	struct rt_ctx *rt;
	CHECK_OK(rt_open(&c, &rt));
	return rt;
}

struct ref_result {
	double loss[STEPS];
	float *master[16];
};

static void reference(const struct rt_model *m, int nrep, int mb, struct ref_result *out)
{
	struct rt_reference *r;
	CHECK_OK(rt_reference_open(m, nrep, mb, 42, &r));
	for (int s = 0; s < STEPS; s++)
		CHECK_OK(rt_reference_step(r, s, &out->loss[s]));
	for (int l = 0; l < m->nlayers; l++) {
		const struct rt_layer *ly = &m->layers[l];
		out->master[l] = malloc(ly->master_bytes + 1);
		memcpy(out->master[l], r->optim[l], ly->master_bytes);
		/* the bf16 weights are the masters' rounding */
		const uint16_t *w = r->params[l];
		for (uint64_t i = 0; i < ly->master_bytes / 4; i++)
			CHECK(w[i] == kn_f32_to_bf16(out->master[l][i]));
	}
	rt_reference_close(r);
}

/* Runs the plan at budget: 0 and *evictions, or -ENOMEM (nothing compared). */
static int run(const struct rt_model *m, const struct tg_plan *plan, uint64_t budget,
               const struct ref_result *ref, int64_t *evictions)
{
	struct rt_ctx *rt = open_rt(plan->ndev, budget);
	struct rt_run *run;
	CHECK_OK(rt_run_open(rt, m, plan, 42, &run));
	for (int s = 0; s < STEPS; s++) {
		double loss;
		int rc = rt_run_step(run, &loss);
		if (rc == -ENOMEM && s == 0) {
			rt_run_close(run);
			rt_close(rt);
			return rc;
		}
		CHECK_MSG(rc == 0, "%s", sp_last_error());
		CHECK_MSG(loss == ref->loss[s],
		          "bf16 %s on %d device(s)%s%s: step %d loss %.9g, reference %.9g",
		          tg_sched_name(plan->sched), plan->ndev,
		          plan->recompute ? ", recompute" : "", plan->upd_cpu ? ", cpu update" : "",
		          s, loss, ref->loss[s]);
	}
	for (int l = 0; l < m->nlayers; l++) {
		uint64_t n = rt_run_state_bytes(run, l, RT_PARAMS);
		CHECK(n == m->layers[l].master_bytes);
		void *w = malloc(n + 1);
		CHECK_OK(rt_run_read_params(run, l, w));
		CHECK_MSG(!memcmp(w, ref->master[l], n),
		          "bf16 %s on %d device(s): layer %s differs", tg_sched_name(plan->sched),
		          plan->ndev, m->layers[l].name);
		free(w);
	}
	struct vmm_stats st;
	vmm_stats_get(rt->vmm, &st);
	*evictions = st.evictions.total;
	printf("  %-10s %d dev%s%s, budget %7" PRIu64 ": %4" PRId64 " evictions, %8" PRIu64
	       " B H2D, %8" PRIu64 " B D2H\n",
	       tg_sched_name(plan->sched), plan->ndev, plan->recompute ? ", recompute" : "",
	       plan->upd_cpu ? ", cpu update" : "", budget, st.evictions.total,
	       vmm_xfer_bytes(rt->vmm, VMM_XFER_H2D), vmm_xfer_bytes(rt->vmm, VMM_XFER_D2H));
	rt_run_close(run);
	rt_close(rt);
	return 0;
}

static int transparency(struct rt_model *m, int quick, const int *scheds, int nsched, int per_pack)
{
	static const int devs[] = {1, 2, 4};
	int cases = 0;
	for (int si = 0; si < nsched; si++)
		for (int di = 0; di < 3; di++) {
			int s = scheds[si], nd = devs[di];
			if (quick && nd == 2)
				continue;
			int dp = s == TG_DP_SWAP || s == TG_HARMONY_DP;
			struct tg_plan p = {.sched = s,
			                    .ndev = nd,
			                    .npacks = m->nlayers / per_pack,
			                    .microbatch = per_pack == 1 ? 1 : 2};
			for (int i = 0; i < p.npacks; i++)
				p.pack_end[i] = per_pack * (i + 1);
			int mper = BATCH / (dp ? nd : 1) / p.microbatch;
			p.group =
			    (s == TG_HARMONY_DP || s == TG_HARMONY_PP) ? (mper >= 2 ? 2 : 1) : 1;
			struct ref_result ref;
			reference(m, dp ? nd : 1, p.microbatch, &ref);
			printf("bf16 %s, %d device(s): reference losses %.6f %.6f %.6f\n",
			       tg_sched_name(s), nd, ref.loss[0], ref.loss[1], ref.loss[2]);
			struct tg_layer tl[16];
			struct tg_model tm;
			rt_model_tg(m, tl, &tm);
			for (int v = 0; v <= 3; v++) {
				struct tg_plan q = p;
				q.recompute = v & 1;
				q.upd_cpu = !!(v & 2);
				struct tg_graph g;
				CHECK_OK(tg_graph_build(&tm, 1, &q, &g));
				uint64_t ws = tg_graph_min_capacity(&g, NULL);
				tg_graph_free(&g);
				/* from 1.5x the working set down until the vmm evicts */
				int64_t ev = 0;
				uint64_t b = ws * 3 / 2;
				int rc = run(m, &q, b, &ref, &ev);
				while (v == 0 && rc == 0 && ev == 0 && b > ws / 2) {
					b = b * 3 / 4;
					rc = run(m, &q, b, &ref, &ev);
				}
				CHECK_MSG(v || ev > 0, "bf16 %s on %d device(s): no evictions",
				          tg_sched_name(s), nd);
			}
			for (int l = 0; l < m->nlayers; l++)
				free(ref.master[l]);
			cases++;
		}
	return cases;
}

/* The planner's compute rate for a bf16 model: the devices' bf16 (tensor
 * core) rate where the profile has one (h100-sxm: 989 against 67 TF), the
 * fp32 rate for an fp32 model. */
static void planner_rate(void)
{
	struct sp_params sp;
	sp_params_defaults(&sp);
	struct rt_config c;
	CHECK_OK(rt_config_from_params(&sp, &c));
	c.dev.backend = DEV_BACKEND_MODEL;
	c.dev.ndevices = 1;
	c.dev.profile = "h100-sxm";
	c.vmm.host_mem = 1ull << 30;
	struct rt_ctx *rt;
	CHECK_OK(rt_open(&c, &rt));
	struct dev_info in;
	CHECK_OK(dev_info(rt->dev, 0, &in));
	CHECK(in.bf16_flops > 10 * in.flops);
	struct rt_model m32, m16;
	struct kn_model_config k = cfg;
	k.dtype = KN_F32;
	CHECK_OK(rt_model_gpt(&k, T, BATCH, &m32));
	k.dtype = KN_BF16;
	CHECK_OK(rt_model_gpt(&k, T, BATCH, &m16));
	struct tg_hw a, b;
	rt_plan_hw(rt, 1, &a);
	b = a;
	rt_plan_hw_for(rt, &m32, &a);
	rt_plan_hw_for(rt, &m16, &b);
	CHECK(a.flops == in.flops);
	CHECK_MSG(fabs(b.flops - in.bf16_flops) <= 1e-9 * in.bf16_flops, "bf16 rate %g, want %g",
	          b.flops, in.bf16_flops);
	printf("planner rate on h100-sxm: fp32 %.0f TF, bf16 %.0f TF\n", a.flops / 1e12,
	       b.flops / 1e12);
	rt_model_free(&m32);
	rt_model_free(&m16);
	rt_close(rt);
}

int main(int argc, char **argv)
{
	int quick = argc > 1 && !strcmp(argv[1], "quick");
	optimizer_kernels();
	sizes();
	planner_rate();
	struct kn_model_config c16 = cfg;
	c16.dtype = KN_BF16;
	struct rt_model m;
	CHECK_OK(rt_model_gpt(&c16, T, BATCH, &m));
	uint64_t seed = 7;
	m.data_arg = &seed;
	static const int all[] = {TG_DP_SWAP, TG_GPIPE, TG_1F1B, TG_HARMONY_DP, TG_HARMONY_PP};
	int cases = transparency(&m, quick, all, 5, 1);
	/* packs of two layers (the tied head in the last), microbatch 2 */
	cases += transparency(&m, 1, all, 5, 2);
	printf("%d bf16 schedule x device cases bit-identical to the bf16 reference\n", cases);
	/* the fp32 reference differs (the precision really changed) */
	struct rt_model m32;
	CHECK_OK(rt_model_gpt(&cfg, T, BATCH, &m32));
	m32.data_arg = &seed;
	struct rt_reference *r32, *r16;
	double l32, l16;
	CHECK_OK(rt_reference_open(&m32, 1, 1, 42, &r32));
	CHECK_OK(rt_reference_open(&m, 1, 1, 42, &r16));
	CHECK_OK(rt_reference_step(r32, 0, &l32));
	CHECK_OK(rt_reference_step(r16, 0, &l16));
	printf("first loss fp32 %.9g, bf16 %.9g\n", l32, l16);
	CHECK(l32 != l16 && fabs(l32 - l16) < 0.02 * l32);
	rt_reference_close(r32);
	rt_reference_close(r16);
	rt_model_free(&m32);
	/* SGD with momentum: the state after the masters */
	CHECK_OK(rt_model_set_optimizer(&m, KN_SGD, 0.9f));
	m.opt.lr = 0.05f;
	static const int some[] = {TG_DP_SWAP, TG_HARMONY_PP};
	transparency(&m, 1, some, 2, 1);
	rt_model_free(&m);
	TEST_PASS();
}

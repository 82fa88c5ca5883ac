/* tests/kernels/test_tp_block.c — a block split over t = 1, 2, 4 members
 * (kernels.h, "tensor parallelism") gives the bits of the whole block in the
 * tensor-parallel form: the output, the input gradient and every member's
 * gradient shard (its cut of the block's gradients, the replicated tensors
 * equal on every member), over random shapes, with the members' segments run
 * in random orders and the slots exchanged between segments as a caller does.
 * The form computes the plain block's function (within float tolerance), the
 * tree sum adds in its stated order, shard copies round-trip, and bad calls
 * (t = 3, NH not a multiple of 4, bf16, a bad segment) are refused. */
#include "tests/kernels/util.h"
#include "tests/test.h"

#include <string.h>

static void *fill(struct tk_rng *r, size_t bytes, float scale, float offset)
{
	float *p = malloc(bytes ? bytes : 4);
	CHECK(p);
	tk_fill(r, p, bytes / 4, scale, offset);
	return p;
}

static void *dup(const void *p, size_t bytes)
{
	void *q = malloc(bytes ? bytes : 4);
	CHECK(q);
	memcpy(q, p, bytes);
	return q;
}

struct member {
	struct kn_layer_mem mem;
	float *out, *din;
};

/* Copies slot r of every member into slot r of every other member. */
static void exchange(const struct kn_model_config *cfg, int t, int B, int T, struct member *m)
{
	size_t btc = (size_t)B * T * cfg->C;
	for (int r = 0; r < t; r++) {
		const float *src = kn_block_tp_slots(cfg, t, B, T, m[r].mem.work) + r * btc;
		for (int o = 0; o < t; o++)
			if (o != r)
				memcpy(kn_block_tp_slots(cfg, t, B, T, m[o].mem.work) + r * btc,
				       src, btc * 4);
	}
}

/* Runs segment seg of every member, in a random order of the members. */
static void run_seg(struct tk_rng *rng, const struct kn_model_config *cfg, int t, int B, int T,
                    struct member *m, const float *x, const float *dout, int bwd, int seg)
{
	int order[4] = {0, 1, 2, 3};
	for (int i = t - 1; i > 0; i--) {
		int j = (int)(tk_u32(rng) % (uint32_t)(i + 1)), s = order[i];
		order[i] = order[j], order[j] = s;
	}
	for (int i = 0; i < t; i++) {
		int r = order[i];
		struct kn_layer_io io = {.in = x, .out = m[r].out, .dout = dout, .din = m[r].din};
		if (bwd)
			CHECK_OK(kn_block_tp_backward_cpu(cfg, t, r, seg, B, T, &m[r].mem, &io));
		else
			CHECK_OK(kn_block_tp_forward_cpu(cfg, t, r, seg, B, T, &m[r].mem, &io));
	}
}

static int one_case(struct tk_rng *rng, int verbose)
{
	static const int shapes[][2] = {{4, 16}, {4, 32}, {8, 32}, {4, 48}, {8, 64}, {12, 48}};
	int si = (int)(tk_u32(rng) % 6);
	struct kn_model_config cfg = {
	    .maxT = 8, .V = 16, .L = 1, .NH = shapes[si][0], .C = shapes[si][1], .tp_form = 1};
	int B = 1 + (int)(tk_u32(rng) % 3), T = 1 + (int)(tk_u32(rng) % 8);
	size_t btc = (size_t)B * T * cfg.C;
	struct kn_layer_desc d;
	CHECK_OK(kn_layer_describe(&cfg, KN_LAYER_BLOCK, B, T, &d));

	/* the whole block in tp form: the reference */
	float *params = fill(rng, d.param_bytes, 0.04f, 0.0f);
	float *x = fill(rng, btc * 4, 1.0f, 0.0f), *dout = fill(rng, btc * 4, 0.1f, 0.0f);
	float *grads0 = fill(rng, d.grad_bytes, 0.01f, 0.0f); /* backward adds to them */
	float *din0 = fill(rng, btc * 4, 0.01f, 0.0f);
	struct kn_layer_mem full = {.params = params,
	                            .grads = dup(grads0, d.grad_bytes),
	                            .stash = calloc(1, d.stash_bytes),
	                            .work = calloc(1, d.work_bytes)};
	float *out = malloc(btc * 4), *din = dup(din0, btc * 4);
	struct kn_layer_io io = {.in = x, .out = out, .dout = dout, .din = din};
	CHECK_OK(kn_layer_forward_cpu(&cfg, KN_LAYER_BLOCK, B, T, &full, &io));
	CHECK_OK(kn_layer_backward_cpu(&cfg, KN_LAYER_BLOCK, B, T, &full, &io));

	/* the same function as the plain block */
	struct kn_model_config plain = cfg;
	plain.tp_form = 0;
	struct kn_layer_desc dp;
	CHECK_OK(kn_layer_describe(&plain, KN_LAYER_BLOCK, B, T, &dp));
	CHECK(dp.param_bytes == d.param_bytes && dp.stash_bytes == d.stash_bytes);
	struct kn_layer_mem pm = {.params = params,
	                          .grads = dup(grads0, d.grad_bytes),
	                          .stash = calloc(1, dp.stash_bytes),
	                          .work = calloc(1, dp.work_bytes)};
	float *pout = malloc(btc * 4), *pdin = dup(din0, btc * 4);
	struct kn_layer_io pio = {.in = x, .out = pout, .dout = dout, .din = pdin};
	CHECK_OK(kn_layer_forward_cpu(&plain, KN_LAYER_BLOCK, B, T, &pm, &pio));
	CHECK_OK(kn_layer_backward_cpu(&plain, KN_LAYER_BLOCK, B, T, &pm, &pio));
	double e1 = tk_rel_err(out, pout, btc), e2 = tk_rel_err(din, pdin, btc),
	       e3 = tk_rel_err(full.grads, pm.grads, d.grad_bytes / 4);
	CHECK_MSG(e1 < 1e-5 && e2 < 1e-5 && e3 < 1e-5, "tp form vs plain: %g %g %g", e1, e2, e3);

	for (int t = 1; t <= 4; t *= 2) {
		struct kn_layer_desc sd;
		CHECK_OK(kn_block_tp_describe(&cfg, t, B, T, &sd));
		CHECK(sd.param_bytes * t >= d.param_bytes - 4 * 6 * cfg.C * (t - 1) - 1);
		struct member m[4];
		float *expect = malloc(sd.grad_bytes), *ps = malloc(sd.param_bytes);
		for (int r = 0; r < t; r++) {
			m[r].mem = (struct kn_layer_mem){.params = malloc(sd.param_bytes),
			                                 .grads = malloc(sd.grad_bytes),
			                                 .stash = calloc(1, sd.stash_bytes),
			                                 .work = calloc(1, sd.work_bytes)};
			kn_block_shard_copy(cfg.C, t, r, 4, params, m[r].mem.params, 1);
			kn_block_shard_copy(cfg.C, t, r, 4, grads0, m[r].mem.grads, 1);
			m[r].out = malloc(btc * 4);
			m[r].din = dup(din0, btc * 4);
		}
		for (int seg = 0; seg < KN_TP_SEGS; seg++) {
			run_seg(rng, &cfg, t, B, T, m, x, dout, 0, seg);
			if (seg < KN_TP_SEGS - 1)
				exchange(&cfg, t, B, T, m);
		}
		for (int seg = 0; seg < KN_TP_SEGS; seg++) {
			run_seg(rng, &cfg, t, B, T, m, x, dout, 1, seg);
			if (seg < KN_TP_SEGS - 1)
				exchange(&cfg, t, B, T, m);
		}
		for (int r = 0; r < t; r++) {
			CHECK_MSG(!memcmp(m[r].out, out, btc * 4),
			          "C %d NH %d B %d T %d: t = %d "
			          "member %d output",
			          cfg.C, cfg.NH, B, T, t, r);
			CHECK_MSG(!memcmp(m[r].din, din, btc * 4),
			          "C %d NH %d B %d T %d: t = %d "
			          "member %d input gradient",
			          cfg.C, cfg.NH, B, T, t, r);
			kn_block_shard_copy(cfg.C, t, r, 4, full.grads, expect, 1);
			CHECK_MSG(!memcmp(m[r].mem.grads, expect, sd.grad_bytes),
			          "C %d NH %d B %d T %d: t = %d member %d gradients", cfg.C, cfg.NH,
			          B, T, t, r);
			kn_block_shard_copy(cfg.C, t, r, 4, params, ps, 1);
			CHECK(!memcmp(m[r].mem.params, ps, sd.param_bytes));
			free(m[r].mem.params), free(m[r].mem.grads), free(m[r].mem.stash);
			free(m[r].mem.work), free(m[r].out), free(m[r].din);
		}
		free(expect), free(ps);
	}
	if (verbose)
		printf("C %d NH %d B %d T %d: t = 1, 2, 4 equal; tp vs plain %.2g\n", cfg.C, cfg.NH,
		       B, T, e1);
	free(params), free(x), free(dout), free(grads0), free(din0), free(full.grads);
	free(full.stash), free(full.work), free(out), free(din);
	free(pm.grads), free(pm.stash), free(pm.work), free(pout), free(pdin);
	return 0;
}

static void round_trip(struct tk_rng *rng)
{
	int C = 32;
	size_t n[KN_BLOCK_NPARAMS], total = 0;
	kn_block_param_sizes(C, n);
	for (int i = 0; i < KN_BLOCK_NPARAMS; i++)
		total += n[i];
	float *a = fill(rng, total * 4, 1.0f, 0.0f), *b = calloc(total, 4), *s = malloc(total * 4);
	for (int t = 1; t <= 4; t *= 2) {
		memset(b, 0, total * 4);
		for (int r = 0; r < t; r++) {
			kn_block_shard_copy(C, t, r, 4, a, s, 1);
			kn_block_shard_copy(C, t, r, 4, b, s, 0);
		}
		CHECK_MSG(!memcmp(a, b, total * 4), "t = %d: shards do not cover the block", t);
	}
	/* t = 1's shard is the block itself */
	kn_block_shard_copy(C, 1, 0, 4, a, s, 1);
	CHECK(!memcmp(a, s, total * 4));
	free(a), free(b), free(s);
}

static void tree_order(void)
{
	float in[4] = {1e8f, -1e8f, 1.0f, 1e-8f}, out[1], bias[1] = {0.5f};
	struct kn_tree_sum_args a = {.out = out, .in = in, .stride = 1, .N = 1, .n = 4};
	CHECK_OK(kn_tree_sum_check(&a));
	kn_tree_sum_cpu(&a);
	CHECK(out[0] == (in[0] + in[1]) + (in[2] + in[3]));
	a.n = 2, a.bias = bias, a.OC = 1;
	kn_tree_sum_cpu(&a);
	CHECK(out[0] == (in[0] + in[1]) + bias[0]);
	a.n = 3;
	CHECK(kn_tree_sum_check(&a) == -EINVAL);
}

static void bad_calls(void)
{
	struct kn_model_config cfg = {.maxT = 8, .V = 16, .L = 1, .NH = 4, .C = 32, .tp_form = 1};
	CHECK(kn_block_tp_check(&cfg, 3) == -EINVAL);
	CHECK(kn_block_tp_check(&cfg, 8) == -EINVAL);
	struct kn_model_config c2 = cfg;
	c2.NH = 2;
	CHECK(kn_block_tp_check(&c2, 2) == -EINVAL);
	struct kn_layer_desc d;
	CHECK(kn_layer_describe(&c2, KN_LAYER_BLOCK, 1, 1, &d) == -EINVAL);
	c2 = cfg, c2.dtype = KN_BF16;
	CHECK(kn_block_tp_check(&c2, 1) == -ENOTSUP);
	CHECK_OK(kn_block_tp_describe(&cfg, 2, 1, 2, &d));
	float *p = calloc(1, d.param_bytes), *g = calloc(1, d.grad_bytes),
	      *s = calloc(1, d.stash_bytes), *w = calloc(1, d.work_bytes), x[64] = {0};
	struct kn_layer_mem mem = {.params = p, .grads = g, .stash = s, .work = w};
	struct kn_layer_io io = {.in = x, .out = x, .dout = x, .din = x};
	CHECK(kn_block_tp_forward_cpu(&cfg, 2, 0, 3, 1, 2, &mem, &io) == -EINVAL);
	CHECK(kn_block_tp_forward_cpu(&cfg, 2, 2, 0, 1, 2, &mem, &io) == -EINVAL);
	mem.work = NULL;
	CHECK(kn_block_tp_backward_cpu(&cfg, 2, 0, 0, 1, 2, &mem, &io) == -EINVAL);
	free(p), free(g), free(s), free(w);
}

int main(int argc, char **argv)
{
	int cases = argc > 1 ? atoi(argv[1]) : 40;
	uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 10) : 11;
	CHECK_OK(kn_cpu_set_threads(1 + (int)(seed % 2)));
	struct tk_rng rng = {seed};
	tree_order();
	bad_calls();
	round_trip(&rng);
	for (int i = 0; i < cases; i++)
		one_case(&rng, i < 3);
	printf("%d cases: t = 1, 2, 4 bit-identical to the block in tp form\n", cases);
	TEST_PASS();
}

/* tests/kernels/test_tp_block_adv.c — the tensor-parallel block split over t
 * members (kernels.h, "tensor parallelism") as a runtime drives it, beyond
 * test_tp_block (an adversary's test): several microbatches through the same
 * members, each with its own stash, the members' work ranges (slots
 * included) and their outputs filled with garbage (NaN, infinities, random
 * bits) before every pass, forwards of every microbatch before the
 * backwards, the members' segments in random orders and interleaved across
 * microbatches only where the slots allow (one pass at a time per member's
 * work), the exchange copying only slot r of member r. Every microbatch's
 * output and input gradient, and every member's accumulated gradient shard,
 * must be the bits of the whole block in tp form run microbatch by
 * microbatch (forward all, then backward all, in the same order).
 * Also: the shard sizes add up to the block's (minus the replicated tensors'
 * copies), the stash and work of a smaller (B, T) fit in a larger one's, and
 * random shard copies round-trip per tensor.
 *
 * argv[1]: cases (default 30); argv[2]: seed (default 5). */
#include "tests/kernels/util.h"
#include "tests/test.h"

#include <string.h>

#define MAXMB 3

static void garbage(struct tk_rng *r, void *p, size_t bytes)
{
	uint32_t *w = p;
	for (size_t i = 0; i < bytes / 4; i++) {
		uint32_t k = tk_u32(r) % 4;
		w[i] = k == 0 ? 0x7fc00000u : k == 1 ? 0xff800000u : tk_u32(r);
	}
}

static float *fill(struct tk_rng *r, size_t bytes, float scale)
{
	float *p = malloc(bytes ? bytes : 4);
	CHECK(p);
	tk_fill(r, p, bytes / 4, scale, 0.0f);
	return p;
}

struct member {
	struct kn_layer_mem mem; /* stash: the current microbatch's */
	float *stash[MAXMB];
	float *out[MAXMB], *din[MAXMB];
};

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

static uint64_t hash(const void *p, size_t bytes)
{
	const unsigned char *c = p;
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < bytes; i++)
		h = (h ^ c[i]) * 1099511628211ull;
	return h;
}

/* One pass (bwd 0: forward) of microbatch k over the t members: garbage in
 * every member's work first (a runtime's work range is scratch shared by
 * every task of the member), then the segments, each in a random order.
 * What a segment may write (kernels.h): the forward io->out in segment 2
 * alone, the backward io->din in segments 1 and 2, the gradients in the
 * backward; never in, dout, the parameters, nor another member's anything. */
static void pass(struct tk_rng *rng, const struct kn_model_config *cfg, int t, int B, int T,
                 struct member *m, const struct kn_layer_desc *sd, int k, const float *x,
                 const float *dout, int bwd)
{
	size_t btc = (size_t)B * T * cfg->C;
	for (int r = 0; r < t; r++) {
		garbage(rng, m[r].mem.work, sd->work_bytes);
		m[r].mem.stash = m[r].stash[k];
	}
	uint64_t hx = hash(x, btc * 4), hd = hash(dout, btc * 4);
	for (int seg = 0; seg < KN_TP_SEGS; seg++) {
		int order[4] = {0, 1, 2, 3};
		for (int i = t - 1; i > 0; i--) {
			int j = (int)(tk_u32(rng) % (uint32_t)(i + 1)), s = order[i];
			order[i] = order[j], order[j] = s;
		}
		for (int i = 0; i < t; i++) {
			int r = order[i];
			uint64_t h[4][5];
			for (int o = 0; o < t; o++) {
				h[o][0] = hash(m[o].out[k], btc * 4);
				h[o][1] = hash(m[o].din[k], btc * 4);
				h[o][2] = hash(m[o].mem.params, sd->param_bytes);
				h[o][3] = hash(m[o].mem.grads, sd->grad_bytes);
				h[o][4] = hash(m[o].stash[k], sd->stash_bytes);
			}
			struct kn_layer_io io = {
			    .in = x, .out = m[r].out[k], .dout = dout, .din = m[r].din[k]};
			if (bwd)
				CHECK_OK(
				    kn_block_tp_backward_cpu(cfg, t, r, seg, B, T, &m[r].mem, &io));
			else
				CHECK_OK(
				    kn_block_tp_forward_cpu(cfg, t, r, seg, B, T, &m[r].mem, &io));
			CHECK_MSG(hash(x, btc * 4) == hx && hash(dout, btc * 4) == hd,
			          "t %d member %d %s segment %d wrote its input or dout", t, r,
			          bwd ? "backward" : "forward", seg);
			for (int o = 0; o < t; o++) {
				int me = o == r;
				CHECK_MSG(hash(m[o].out[k], btc * 4) == h[o][0] ||
				              (me && !bwd && seg == 2),
				          "t %d member %d %s segment %d wrote member %d's output",
				          t, r, bwd ? "backward" : "forward", seg, o);
				CHECK_MSG(hash(m[o].din[k], btc * 4) == h[o][1] ||
				              (me && bwd && seg > 0),
				          "t %d member %d %s segment %d wrote member %d's input "
				          "gradient",
				          t, r, bwd ? "backward" : "forward", seg, o);
				CHECK_MSG(hash(m[o].mem.params, sd->param_bytes) == h[o][2],
				          "t %d member %d segment %d wrote parameters", t, r, seg);
				CHECK_MSG(
				    hash(m[o].mem.grads, sd->grad_bytes) == h[o][3] || (me && bwd),
				    "t %d member %d %s segment %d wrote member %d's gradients", t,
				    r, bwd ? "backward" : "forward", seg, o);
				CHECK_MSG(hash(m[o].stash[k], sd->stash_bytes) == h[o][4] || me,
				          "t %d member %d segment %d wrote member %d's stash", t, r,
				          seg, o);
			}
		}
		if (seg < KN_TP_SEGS - 1)
			exchange(cfg, t, B, T, m);
	}
}

static void one_case(struct tk_rng *rng, int verbose)
{
	static const int shapes[][2] = {{4, 16},  {4, 32}, {8, 32},  {4, 48}, {8, 48},
	                                {12, 48}, {8, 64}, {12, 96}, {4, 36}, {16, 64}};
	int si = (int)(tk_u32(rng) % (sizeof(shapes) / sizeof(shapes[0])));
	struct kn_model_config cfg = {
	    .maxT = 8, .V = 16, .L = 1, .NH = shapes[si][0], .C = shapes[si][1], .tp_form = 1};
	int B = 1 + (int)(tk_u32(rng) % 3), T = 1 + (int)(tk_u32(rng) % 8);
	int nmb = 1 + (int)(tk_u32(rng) % MAXMB);
	size_t btc = (size_t)B * T * cfg.C;
	struct kn_layer_desc d;
	CHECK_OK(kn_layer_describe(&cfg, KN_LAYER_BLOCK, B, T, &d));
	float *params = fill(rng, d.param_bytes, 0.05f);
	float *grads0 = fill(rng, d.grad_bytes, 0.01f);
	float *x[MAXMB], *dout[MAXMB], *din0[MAXMB];
	for (int k = 0; k < nmb; k++) {
		x[k] = fill(rng, btc * 4, 1.0f);
		dout[k] = fill(rng, btc * 4, 0.1f);
		din0[k] = fill(rng, btc * 4, 0.01f);
	}

	/* the whole block, microbatch by microbatch: forwards, then backwards */
	float *fgrads = malloc(d.grad_bytes), *fout[MAXMB], *fdin[MAXMB], *fstash[MAXMB];
	float *fwork = calloc(1, d.work_bytes);
	memcpy(fgrads, grads0, d.grad_bytes);
	for (int k = 0; k < nmb; k++) {
		fout[k] = malloc(btc * 4);
		fdin[k] = malloc(btc * 4);
		memcpy(fdin[k], din0[k], btc * 4);
		fstash[k] = calloc(1, d.stash_bytes);
		struct kn_layer_mem mem = {
		    .params = params, .grads = fgrads, .stash = fstash[k], .work = fwork};
		struct kn_layer_io io = {
		    .in = x[k], .out = fout[k], .dout = dout[k], .din = fdin[k]};
		CHECK_OK(kn_layer_forward_cpu(&cfg, KN_LAYER_BLOCK, B, T, &mem, &io));
	}
	for (int k = 0; k < nmb; k++) {
		struct kn_layer_mem mem = {
		    .params = params, .grads = fgrads, .stash = fstash[k], .work = fwork};
		struct kn_layer_io io = {
		    .in = x[k], .out = fout[k], .dout = dout[k], .din = fdin[k]};
		CHECK_OK(kn_layer_backward_cpu(&cfg, KN_LAYER_BLOCK, B, T, &mem, &io));
	}

	for (int t = 1; t <= 4; t *= 2) {
		struct kn_layer_desc sd;
		CHECK_OK(kn_block_tp_describe(&cfg, t, B, T, &sd));
		/* a smaller call fits a larger one's ranges */
		struct kn_layer_desc small;
		CHECK_OK(kn_block_tp_describe(&cfg, t, 1, 1, &small));
		CHECK(small.stash_bytes <= sd.stash_bytes && small.work_bytes <= sd.work_bytes);
		CHECK(sd.param_bytes == sd.grad_bytes);
		size_t n[KN_BLOCK_NPARAMS], total = 0;
		kn_block_shard_param_sizes(cfg.C, t, n);
		for (int i = 0; i < KN_BLOCK_NPARAMS; i++)
			total += n[i];
		CHECK_MSG(total * 4 == sd.param_bytes, "t %d: shard sizes %zu x 4 vs %llu", t,
		          total, (unsigned long long)sd.param_bytes);
		struct member m[4];
		for (int r = 0; r < t; r++) {
			m[r].mem = (struct kn_layer_mem){.params = malloc(sd.param_bytes),
			                                 .grads = malloc(sd.grad_bytes),
			                                 .work = malloc(sd.work_bytes)};
			kn_block_shard_copy(cfg.C, t, r, 4, params, m[r].mem.params, 1);
			kn_block_shard_copy(cfg.C, t, r, 4, grads0, m[r].mem.grads, 1);
			for (int k = 0; k < nmb; k++) {
				m[r].stash[k] = malloc(sd.stash_bytes);
				garbage(rng, m[r].stash[k], sd.stash_bytes);
				m[r].out[k] = malloc(btc * 4);
				garbage(rng, m[r].out[k], btc * 4);
				m[r].din[k] = malloc(btc * 4);
				memcpy(m[r].din[k], din0[k], btc * 4);
			}
		}
		for (int k = 0; k < nmb; k++)
			pass(rng, &cfg, t, B, T, m, &sd, k, x[k], dout[k], 0);
		for (int k = 0; k < nmb; k++)
			pass(rng, &cfg, t, B, T, m, &sd, k, x[k], dout[k], 1);
		float *expect = malloc(sd.grad_bytes);
		for (int r = 0; r < t; r++) {
			for (int k = 0; k < nmb; k++) {
				CHECK_MSG(
				    !memcmp(m[r].out[k], fout[k], btc * 4),
				    "C %d NH %d B %d T %d: t %d member %d microbatch %d output",
				    cfg.C, cfg.NH, B, T, t, r, k);
				CHECK_MSG(
				    !memcmp(m[r].din[k], fdin[k], btc * 4),
				    "C %d NH %d B %d T %d: t %d member %d microbatch %d input "
				    "gradient",
				    cfg.C, cfg.NH, B, T, t, r, k);
				free(m[r].stash[k]), free(m[r].out[k]), free(m[r].din[k]);
			}
			kn_block_shard_copy(cfg.C, t, r, 4, fgrads, expect, 1);
			CHECK_MSG(!memcmp(m[r].mem.grads, expect, sd.grad_bytes),
			          "C %d NH %d B %d T %d, %d microbatches: t %d member %d gradients",
			          cfg.C, cfg.NH, B, T, nmb, t, r);
			free(m[r].mem.params), free(m[r].mem.grads), free(m[r].mem.work);
		}
		free(expect);
	}
	if (verbose)
		printf("C %d NH %d B %d T %d, %d microbatches: t = 1, 2, 4 equal\n", cfg.C, cfg.NH,
		       B, T, nmb);
	for (int k = 0; k < nmb; k++) {
		free(x[k]), free(dout[k]), free(din0[k]), free(fout[k]), free(fdin[k]);
		free(fstash[k]);
	}
	free(params), free(grads0), free(fgrads), free(fwork);
}

/* Shard copies tensor by tensor: shard r of t, written into a block of
 * garbage, then read back, gives the shard; the shards of every r cover
 * every element of the block's cut tensors once. */
static void shard_cover(struct tk_rng *rng)
{
	static const int Cs[] = {4, 8, 16, 36, 48};
	for (unsigned ci = 0; ci < sizeof(Cs) / sizeof(Cs[0]); ci++) {
		int C = Cs[ci];
		size_t n[KN_BLOCK_NPARAMS], total = 0;
		kn_block_param_sizes(C, n);
		for (int i = 0; i < KN_BLOCK_NPARAMS; i++)
			total += n[i];
		float *full = malloc(total * 4), *shard = malloc(total * 4),
		      *back = malloc(total * 4);
		unsigned char *seen = calloc(total, 1);
		for (size_t i = 0; i < total; i++)
			full[i] = (float)i; /* each element names its place */
		for (int t = 2; t <= 4; t *= 2) {
			memset(seen, 0, total);
			size_t sn[KN_BLOCK_NPARAMS], stotal = 0;
			kn_block_shard_param_sizes(C, t, sn);
			for (int i = 0; i < KN_BLOCK_NPARAMS; i++)
				stotal += sn[i];
			for (int r = 0; r < t; r++) {
				garbage(rng, shard, total * 4);
				kn_block_shard_copy(C, t, r, 4, full, shard, 1);
				for (size_t i = 0; i < stotal; i++) {
					size_t at = (size_t)shard[i];
					CHECK_MSG(
					    shard[i] == (float)at && at < total,
					    "C %d t %d r %d: shard element %zu is not the block's",
					    C, t, r, i);
					seen[at]++;
				}
				garbage(rng, back, total * 4);
				memcpy(back, full, total * 4);
				kn_block_shard_copy(C, t, r, 4, back, shard, 0);
				CHECK_MSG(!memcmp(back, full, total * 4),
				          "C %d t %d r %d: shard written back changes the block", C,
				          t, r);
			}
			/* the cut tensors once, the replicated ones (ln1, ln2, attprojb,
			 * fcprojb: 6C elements) on every member */
			size_t once = 0, every = 0;
			for (size_t i = 0; i < total; i++) {
				CHECK_MSG(seen[i] == 1 || seen[i] == t,
				          "C %d t %d: element %zu seen %d times", C, t, i, seen[i]);
				once += seen[i] == 1;
				every += seen[i] == t;
			}
			CHECK_MSG(every == (size_t)6 * C && once + every == total,
			          "C %d t %d: %zu elements replicated, %zu cut, %zu in all", C, t,
			          every, once, total);
		}
		free(full), free(shard), free(back), free(seen);
	}
}

int main(int argc, char **argv)
{
	int cases = argc > 1 ? atoi(argv[1]) : 30;
	uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 10) : 5;
	CHECK_OK(kn_cpu_set_threads(1 + (int)(seed % 2)));
	struct tk_rng rng = {seed * 0x9e3779b97f4a7c15ull + 1};
	shard_cover(&rng);
	for (int i = 0; i < cases; i++)
		one_case(&rng, i < 3);
	printf("%d cases: garbage in work, stash and outputs, several microbatches: t = 1, 2, 4 "
	       "bit-identical to the block in tp form\n",
	       cases);
	TEST_PASS();
}

/* tests/kernels/test_gpu_tp.c — the tensor-parallel block form through the
 * device layer (kn_block_tp_*_launch on streams, the exchanges as copies
 * between the members' buffers), on the host backend and, where there is one,
 * on a CUDA device: t = 2 and 4 members (on one device, a stream each) give
 * the bits of the whole block in tp form run on the same backend
 * (kn_layer_*_launch with cfg.tp_form), the output, the input gradient and
 * every member's gradient shard; on CUDA also the new ops' results within
 * 1e-5 of the CPU's (cuBLAS sums in another order). Exits 77 after the host
 * part without a CUDA device (make test-gpu runs it on one). */
#include "tests/kernels/util.h"
#include "tests/test.h"

#include <string.h>

struct buf {
	void *d;
	size_t n;
};

static struct dev_ctx *ctx;
static struct dev_stream *sm[5];

static void *up(const void *h, size_t n)
{
	void *d;
	CHECK_OK(dev_mem_alloc(ctx, 0, n ? n : 4, &d));
	if (h)
		CHECK_OK(dev_memcpy_async(sm[0], d, 0, h, DEV_HOST, n));
	else
		CHECK_OK(dev_memset_async(sm[0], d, 0, 0, n));
	CHECK_OK(dev_stream_sync(sm[0]));
	return d;
}

static void down(void *h, const void *d, size_t n)
{
	CHECK_OK(dev_memcpy_async(sm[0], h, DEV_HOST, d, 0, n));
	CHECK_OK(dev_stream_sync(sm[0]));
}

static void sync_all(int n)
{
	for (int i = 0; i <= n; i++)
		CHECK_OK(dev_stream_sync(sm[i]));
}

/* One shape on the open backend: returns the whole block's output (host) for
 * the caller's cross-backend comparison. */
static float *one_case(struct tk_rng *rng, const struct kn_model_config *cfg, int B, int T,
                       const char *backend)
{
	size_t btc = (size_t)B * T * cfg->C;
	struct kn_layer_desc d;
	CHECK_OK(kn_layer_describe(cfg, KN_LAYER_BLOCK, B, T, &d));
	float *params = malloc(d.param_bytes), *grads0 = malloc(d.grad_bytes);
	float *x = malloc(btc * 4), *dout = malloc(btc * 4), *din0 = malloc(btc * 4);
	tk_fill(rng, params, d.param_bytes / 4, 0.04f, 0.0f);
	tk_fill(rng, grads0, d.grad_bytes / 4, 0.01f, 0.0f);
	tk_fill(rng, x, btc, 1.0f, 0.0f);
	tk_fill(rng, dout, btc, 0.1f, 0.0f);
	tk_fill(rng, din0, btc, 0.01f, 0.0f);
	void *dx = up(x, btc * 4), *ddout = up(dout, btc * 4);
	struct kn_layer_mem whole = {.params = up(params, d.param_bytes),
	                             .grads = up(grads0, d.grad_bytes),
	                             .stash = up(NULL, d.stash_bytes),
	                             .work = up(NULL, d.work_bytes)};
	void *dout_w = up(NULL, btc * 4), *din_w = up(din0, btc * 4);
	struct kn_layer_io io = {.in = dx, .out = dout_w, .dout = ddout, .din = din_w};
	CHECK_OK(kn_layer_forward_launch(sm[0], cfg, KN_LAYER_BLOCK, B, T, &whole, &io));
	CHECK_OK(kn_layer_backward_launch(sm[0], cfg, KN_LAYER_BLOCK, B, T, &whole, &io));
	CHECK_OK(dev_stream_sync(sm[0]));
	float *out = malloc(btc * 4), *din = malloc(btc * 4), *g = malloc(d.grad_bytes);
	down(out, dout_w, btc * 4);
	down(din, din_w, btc * 4);
	down(g, whole.grads, d.grad_bytes);
	for (int t = 2; t <= 4; t *= 2) {
		struct kn_layer_desc sd;
		CHECK_OK(kn_block_tp_describe(cfg, t, B, T, &sd));
		struct kn_layer_mem m[4];
		void *mout[4], *mdin[4];
		float *piece = malloc(sd.grad_bytes), *got = malloc(sd.grad_bytes);
		for (int r = 0; r < t; r++) {
			kn_block_shard_copy(cfg->C, t, r, 4, params, piece, 1);
			m[r].params = up(piece, sd.param_bytes);
			kn_block_shard_copy(cfg->C, t, r, 4, grads0, piece, 1);
			m[r].grads = up(piece, sd.grad_bytes);
			m[r].stash = up(NULL, sd.stash_bytes);
			m[r].work = up(NULL, sd.work_bytes);
			mout[r] = up(NULL, btc * 4);
			mdin[r] = up(din0, btc * 4);
		}
		for (int bwd = 0; bwd <= 1; bwd++)
			for (int seg = 0; seg < KN_TP_SEGS; seg++) {
				if (seg) { /* slot r of member r into slot r of the others */
					sync_all(t);
					for (int r = 0; r < t; r++)
						for (int o = 0; o < t; o++) {
							if (o == r)
								continue;
							float *src = kn_block_tp_slots(cfg, t, B, T,
							                               m[r].work);
							float *dst = kn_block_tp_slots(cfg, t, B, T,
							                               m[o].work);
							CHECK_OK(dev_memcpy_async(
							    sm[1 + o], dst + r * btc, 0,
							    src + r * btc, 0, btc * 4));
						}
					sync_all(t);
				}
				for (int r = 0; r < t; r++) {
					struct kn_layer_io mi = {.in = dx,
					                         .out = mout[r],
					                         .dout = ddout,
					                         .din = mdin[r]};
					if (bwd)
						CHECK_OK(kn_block_tp_backward_launch(
						    sm[1 + r], cfg, t, r, seg, B, T, &m[r], &mi));
					else
						CHECK_OK(kn_block_tp_forward_launch(
						    sm[1 + r], cfg, t, r, seg, B, T, &m[r], &mi));
				}
			}
		sync_all(t);
		float *h = malloc(btc * 4);
		for (int r = 0; r < t; r++) {
			down(h, mout[r], btc * 4);
			CHECK_MSG(!memcmp(h, out, btc * 4), "%s: t = %d member %d output", backend,
			          t, r);
			down(h, mdin[r], btc * 4);
			CHECK_MSG(!memcmp(h, din, btc * 4), "%s: t = %d member %d input gradient",
			          backend, t, r);
			down(got, m[r].grads, sd.grad_bytes);
			kn_block_shard_copy(cfg->C, t, r, 4, g, piece, 1);
			CHECK_MSG(!memcmp(got, piece, sd.grad_bytes),
			          "%s: t = %d member %d gradients", backend, t, r);
		}
		free(h), free(piece), free(got);
	}
	printf("%s: C %d NH %d B %d T %d: t = 2, 4 bit-identical to the whole block\n", backend,
	       cfg->C, cfg->NH, B, T);
	free(params), free(grads0), free(x), free(dout), free(din0), free(din), free(g);
	return out;
}

static int open_backend(enum dev_backend_kind kind)
{
	struct dev_config c = {.backend = kind, .ndevices = 1, .device_mem = 256 << 20};
	if (dev_open(&c, &ctx) < 0)
		return -1;
	for (int i = 0; i < 5; i++)
		CHECK_OK(dev_stream_create(ctx, 0, &sm[i]));
	return 0;
}

static void close_backend(void)
{
	for (int i = 0; i < 5; i++)
		CHECK_OK(dev_stream_destroy(sm[i]));
	dev_close(ctx);
}

int main(void)
{
	CHECK_OK(kn_cpu_set_threads(1));
	static const struct kn_model_config cfgs[] = {
	    {.maxT = 16, .V = 16, .L = 1, .NH = 4, .C = 32, .tp_form = 1},
	    {.maxT = 16, .V = 16, .L = 1, .NH = 8, .C = 64, .tp_form = 1},
	    {.maxT = 16, .V = 16, .L = 1, .NH = 12, .C = 96, .tp_form = 1},
	    /* chunks of 9 columns: operands off 16-byte alignment, which cuBLAS
	     * may choose its kernels by, at different offsets for each t */
	    {.maxT = 16, .V = 16, .L = 1, .NH = 4, .C = 36, .tp_form = 1}};
	static const int shapes[][2] = {{2, 16}, {1, 7}, {3, 5}, {2, 9}};
	float *host_out[4];
	CHECK_OK(open_backend(DEV_BACKEND_HOST));
	for (int i = 0; i < 4; i++) {
		struct tk_rng rng = {100 + (uint64_t)i};
		host_out[i] = one_case(&rng, &cfgs[i], shapes[i][0], shapes[i][1], "host");
	}
	close_backend();
	if (!dev_cuda_available()) {
		for (int i = 0; i < 4; i++)
			free(host_out[i]);
		TEST_SKIP("host backend ok; no CUDA device for the CUDA half");
	}
	CHECK_OK(open_backend(DEV_BACKEND_CUDA));
	for (int i = 0; i < 4; i++) {
		struct tk_rng rng = {100 + (uint64_t)i};
		float *o = one_case(&rng, &cfgs[i], shapes[i][0], shapes[i][1], "cuda");
		size_t n = (size_t)shapes[i][0] * shapes[i][1] * cfgs[i].C;
		double e = tk_rel_err(o, host_out[i], n);
		CHECK_MSG(e < 1e-5, "cuda vs cpu: the whole block's output differs by %g", e);
		free(o), free(host_out[i]);
	}
	close_backend();
	TEST_PASS();
}

/* tests/kernels/test_gpu_kernels.c — the CUDA kernels agree with the CPU ones:
 * a 2-layer GPT-2, 3 training steps (forward, backward, AdamW) on both, every
 * loss, gradient and parameter compared to max|a-b|/max|b| < 1e-5; the CUDA
 * run repeated must be bit-identical (no atomics); all work runs on a created
 * non-blocking stream. Also one block through the layer API on CUDA vs CPU,
 * with one SGD-with-momentum update. Skips (77) without a CUDA device.
 *
 * bf16 (KN_BF16): each layer kind forward + backward through the layer API,
 * CUDA bf16 against CPU bf16 (the same stash layout, flash attention on both),
 * at head sizes 12, 64 and 128 (padded and unpadded flash tiles, T not a
 * multiple of the 64-row tiles), and the attention alone at T = 1024. Both
 * sides round to bf16 on every store; they differ in fp32 summation order
 * (a different rounding of a value near a tie flips one ulp, 2u relative),
 * and CUDA's flash kernels also round P and dS to bf16 before the P V, P^T dO,
 * dS K and dS^T Q products (u relative per term, adding like random errors).
 * So the bounds are those of bf16 against fp32 (tests/kernels/test_bf16.c):
 * layer outputs 16u, gradients 40u (u = 2^-9); attention alone out 8u, logsumexp
 * 1e-4 (fp32, exp2f vs expf), dqkv 24u (sums of up to 1024 rounded dS terms).
 * The CUDA bf16 block is also run twice and must be bit-identical. */
#include "tests/kernels/bf16.h"
#include "tests/test.h"

#include <string.h>

#if SPILL_HAVE_CUDA
#include <cuda_runtime.h>

#define TOL 1e-5

struct gpu_ctx {
	cudaStream_t stream;
};

static void gpu_run(void *ctx, const struct dev_kernel *k, const void *args)
{
	struct gpu_ctx *g = ctx;
	CHECK_MSG(k->cuda, "%s has no CUDA launcher", k->name);
	k->cuda(args, g->stream);
	int rc = kn_cuda_last_error();
	CHECK_MSG(rc == 0, "%s: %s", k->name, sp_last_error());
}

static void *gpu_alloc(void *ctx, size_t bytes)
{
	(void)ctx;
	void *p = NULL;
	if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess)
		return NULL;
	if (cudaMemset(p, 0, bytes) != cudaSuccess)
		return NULL;
	return p;
}

static void gpu_free(void *ctx, void *p)
{
	(void)ctx;
	if (p)
		cudaFree(p);
}

static void down(float *dst, const float *src, size_t n)
{
	CHECK(cudaMemcpy(dst, src, n * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
}

static double worst;

static void cmp(const char *what, const float *gpu_host, const float *cpu, size_t n)
{
	double e = tk_rel_err(gpu_host, cpu, n);
	worst = e > worst ? e : worst;
	printf("  %-26s n=%-8zu rel err %.3e\n", what, n, e);
	CHECK_MSG(e < TOL, "%s: %.3e >= %.0e", what, e, TOL);
}

/* 3 steps; returns losses[3], grads after step 1, params after step 3 (host). */
static void train(const struct g2_exec *ex, int on_gpu, const struct g2_model *init,
                  float losses[3], float *grads0, float *params)
{
	struct g2_model m;
	CHECK(g2_model_create(ex, &init->cfg, init->B, init->T, &m) == 0);
	size_t bt = (size_t)m.B * m.T, np = m.nparams;
	if (on_gpu) {
		enum cudaMemcpyKind k = cudaMemcpyHostToDevice;
		CHECK(cudaMemcpy(m.params, init->params, np * 4, k) == cudaSuccess);
		CHECK(cudaMemcpy(m.tokens, init->tokens, bt * 4, k) == cudaSuccess);
		CHECK(cudaMemcpy(m.targets, init->targets, bt * 4, k) == cudaSuccess);
	} else {
		memcpy(m.params, init->params, np * 4);
		memcpy(m.tokens, init->tokens, bt * 4);
		memcpy(m.targets, init->targets, bt * 4);
	}
	float *lhost = malloc(bt * 4);
	CHECK(lhost);
	for (int step = 0; step < 3; step++) {
		g2_zero(ex, m.grads, np);
		g2_model_forward(ex, &m);
		g2_model_backward(ex, &m);
		if (on_gpu) {
			CHECK(cudaDeviceSynchronize() == cudaSuccess);
			down(lhost, m.losses, bt);
		} else {
			memcpy(lhost, m.losses, bt * 4);
		}
		double s = 0;
		for (size_t i = 0; i < bt; i++)
			s += lhost[i];
		losses[step] = (float)(s / bt);
		if (step == 0) {
			if (on_gpu)
				down(grads0, m.grads, np);
			else
				memcpy(grads0, m.grads, np * 4);
		}
		g2_model_update(ex, &m, 1e-3f, 0.9f, 0.95f, 1e-3f, 0.1f, step + 1);
	}
	if (on_gpu) {
		CHECK(cudaDeviceSynchronize() == cudaSuccess);
		down(params, m.params, np);
	} else {
		memcpy(params, m.params, np * 4);
	}
	free(lhost);
	g2_model_destroy(ex, &m);
}

/* One block through the layer API: kn_layer_*_cuda vs kn_layer_*_cpu. */
static void layer_api(cudaStream_t st)
{
	struct kn_model_config cfg = {.maxT = 64, .V = 1, .L = 1, .NH = 4, .C = 64};
	const int B = 2, T = 40;
	struct kn_layer_desc d;
	CHECK_OK(kn_layer_describe(&cfg, KN_LAYER_BLOCK, B, T, &d));
	size_t btc = (size_t)B * T * cfg.C, np = d.param_bytes / 4;
	struct tk_rng r = {5};
	float *hp = malloc(d.param_bytes), *hx = malloc(btc * 4), *hdy = malloc(btc * 4);
	CHECK(hp && hx && hdy);
	tk_init_block(&r, hp, cfg.C);
	tk_fill(&r, hx, btc, 1, 0);
	tk_fill(&r, hdy, btc, 1, 0);
	struct kn_layer_mem mc = {.params = hp,
	                          .grads = calloc(1, d.grad_bytes),
	                          .stash = calloc(1, d.stash_bytes),
	                          .work = calloc(1, d.work_bytes)};
	float *yc = calloc(btc, 4), *dxc = calloc(btc, 4);
	struct kn_layer_io ioc = {.in = hx, .out = yc, .dout = hdy, .din = dxc};
	CHECK_OK(kn_layer_forward_cpu(&cfg, KN_LAYER_BLOCK, B, T, &mc, &ioc));
	CHECK_OK(kn_layer_backward_cpu(&cfg, KN_LAYER_BLOCK, B, T, &mc, &ioc));
	struct kn_layer_mem mg = {.params = gpu_alloc(NULL, d.param_bytes),
	                          .grads = gpu_alloc(NULL, d.grad_bytes),
	                          .stash = gpu_alloc(NULL, d.stash_bytes),
	                          .work = gpu_alloc(NULL, d.work_bytes)};
	float *x = gpu_alloc(NULL, btc * 4), *dy = gpu_alloc(NULL, btc * 4);
	float *y = gpu_alloc(NULL, btc * 4), *dx = gpu_alloc(NULL, btc * 4);
	CHECK(mg.params && mg.grads && mg.stash && mg.work && x && dy && y && dx);
	CHECK(cudaMemcpy(mg.params, hp, d.param_bytes, cudaMemcpyHostToDevice) == cudaSuccess);
	CHECK(cudaMemcpy(x, hx, btc * 4, cudaMemcpyHostToDevice) == cudaSuccess);
	CHECK(cudaMemcpy(dy, hdy, btc * 4, cudaMemcpyHostToDevice) == cudaSuccess);
	struct kn_layer_io iog = {.in = x, .out = y, .dout = dy, .din = dx};
	CHECK_OK(kn_layer_forward_cuda(st, &cfg, KN_LAYER_BLOCK, B, T, &mg, &iog));
	CHECK_OK(kn_layer_backward_cuda(st, &cfg, KN_LAYER_BLOCK, B, T, &mg, &iog));
	CHECK(kn_layer_forward_cuda(NULL, &cfg, KN_LAYER_BLOCK, B, T, &mg, &iog) == -EINVAL);
	CHECK(cudaStreamSynchronize(st) == cudaSuccess);
	float *gy = malloc(btc * 4), *gdx = malloc(btc * 4), *gg = malloc(d.grad_bytes);
	CHECK(gy && gdx && gg);
	down(gy, y, btc);
	down(gdx, dx, btc);
	down(gg, mg.grads, np);
	cmp("layer API block y", gy, yc, btc);
	cmp("layer API block dx", gdx, dxc, btc);
	cmp("layer API block grads", gg, mc.grads, np);
	/* SGD with momentum through the layer update, twice (the buffer carries) */
	struct kn_optim_hparams h = {
	    .lr = 1e-2f, .weight_decay = 0.1f, .t = 1, .kind = KN_SGD, .momentum = 0.9f};
	mc.optim = calloc(1, np * 4);
	mg.optim = gpu_alloc(NULL, np * 4);
	CHECK(mc.optim && mg.optim);
	CHECK(cudaMemset(mg.optim, 0, np * 4) == cudaSuccess);
	for (int k = 0; k < 2; k++) {
		CHECK_OK(kn_layer_update_cpu(&cfg, KN_LAYER_BLOCK, &mc, &h));
		CHECK_OK(kn_layer_update_cuda(st, &cfg, KN_LAYER_BLOCK, &mg, &h));
	}
	CHECK(cudaStreamSynchronize(st) == cudaSuccess);
	float *gp = malloc(d.param_bytes);
	CHECK(gp);
	down(gp, mg.params, np);
	cmp("layer API block sgd params", gp, hp, np);
	down(gp, mg.optim, np);
	cmp("layer API block sgd momentum", gp, mc.optim, np);
	free(gp), free(mc.optim);
	gpu_free(NULL, mg.optim);
	free(hp), free(hx), free(hdy), free(mc.grads), free(mc.stash), free(mc.work);
	free(yc), free(dxc), free(gy), free(gdx), free(gg);
	gpu_free(NULL, mg.params), gpu_free(NULL, mg.grads), gpu_free(NULL, mg.stash);
	gpu_free(NULL, mg.work), gpu_free(NULL, x), gpu_free(NULL, dy), gpu_free(NULL, y);
	gpu_free(NULL, dx);
}

/* Clipping on the GPU: kn_grad_sumsq (fp32 and bf16) against long double,
 * deterministic run to run; AdamW, SGD and their mixed twins with a clip
 * whose norms live on the device against the CPU's. */
static void clip_checks(struct gpu_ctx *gc)
{
	const long n = 3000017;
	float *hx = malloc((size_t)n * 4);
	uint16_t *hb = malloc((size_t)n * 2);
	CHECK(hx && hb);
	struct tk_rng r = {99};
	tk_fill(&r, hx, (size_t)n, 1, 0);
	long double ef = 0, eb = 0;
	for (long i = 0; i < n; i++) {
		hb[i] = kn_f32_to_bf16(hx[i]);
		ef += (long double)hx[i] * hx[i];
		eb += (long double)kn_bf16_to_f32(hb[i]) * kn_bf16_to_f32(hb[i]);
	}
	float *dx = gpu_alloc(NULL, (size_t)n * 4);
	uint16_t *db = gpu_alloc(NULL, (size_t)n * 2);
	double *dn = gpu_alloc(NULL, (KN_SUMSQ_PARTS + 4) * sizeof(double));
	CHECK(dx && db && dn);
	CHECK(cudaMemcpy(dx, hx, (size_t)n * 4, cudaMemcpyHostToDevice) == cudaSuccess);
	CHECK(cudaMemcpy(db, hb, (size_t)n * 2, cudaMemcpyHostToDevice) == cudaSuccess);
	struct kn_grad_sumsq_args a = {
	    .dtype = KN_F32, .x = dx, .N = n, .parts = dn + 4, .out = dn};
	gpu_run(gc, &kn_grad_sumsq_kernel, &a);
	gpu_run(gc, &kn_grad_sumsq_kernel, &a);
	a.out = dn + 1;
	gpu_run(gc, &kn_grad_sumsq_kernel, &a);
	a.dtype = KN_BF16;
	a.x = db;
	a.out = dn + 2;
	gpu_run(gc, &kn_grad_sumsq_kernel, &a);
	CHECK(cudaStreamSynchronize(gc->stream) == cudaSuccess);
	double got[3];
	CHECK(cudaMemcpy(got, dn, sizeof(got), cudaMemcpyDeviceToHost) == cudaSuccess);
	printf("grad_sumsq on the GPU: f32 %.17g (long double %.17Lg), bf16 %.17g (%.17Lg)\n",
	       got[0], ef, got[2], eb);
	CHECK(got[0] == got[1]);
	CHECK(fabsl(got[0] - ef) <= 1e-12L * ef && fabsl(got[2] - eb) <= 1e-12L * eb);
	/* the optimizers with norms on the device: {2.5, 1.5} against clip 0.3 */
	double hn[2] = {2.5, 1.5};
	CHECK(cudaMemcpy(dn, hn, sizeof(hn), cudaMemcpyHostToDevice) == cudaSuccess);
	const long m = 1000;
	float *hp = malloc(m * 4 * 4), *dp = gpu_alloc(NULL, m * 4 * 4);
	CHECK(hp && dp);
	tk_fill(&r, hp, (size_t)m * 3, 1, 0);
	for (long i = 0; i < m; i++)
		hp[3 * m + i] = 0.01f * (float)(i % 7); /* v >= 0 */
	CHECK(cudaMemcpy(dp, hp, m * 16, cudaMemcpyHostToDevice) == cudaSuccess);
	struct kn_clip cc = {.norms = hn, .nnorms = 2, .clip = 0.3f};
	struct kn_adamw_args ac = {.dtype = KN_F32,
	                           .params = hp,
	                           .grads = hp + m,
	                           .m = hp + 2 * m,
	                           .v = hp + 3 * m,
	                           .N = m,
	                           .lr = 1e-2f,
	                           .beta1 = 0.9f,
	                           .beta2 = 0.95f,
	                           .eps = 1e-8f,
	                           .t = 3,
	                           .clip = cc};
	kn_adamw_cpu(&ac);
	ac.params = dp, ac.grads = dp + m, ac.m = dp + 2 * m, ac.v = dp + 3 * m;
	ac.clip.norms = dn;
	gpu_run(gc, &kn_adamw_kernel, &ac);
	CHECK(cudaStreamSynchronize(gc->stream) == cudaSuccess);
	float *back = malloc(m * 16);
	CHECK(back);
	down(back, dp, (size_t)m * 4);
	cmp("clipped adamw params", back, hp, (size_t)m);
	cmp("clipped adamw m", back + 2 * m, hp + 2 * m, (size_t)m);
	free(back), free(hp), free(hx), free(hb);
	gpu_free(NULL, dp), gpu_free(NULL, dx), gpu_free(NULL, db), gpu_free(NULL, dn);
}

/* The fp32 checks: training steps, per-tensor gradients, determinism, layer API. */
static void fp32_checks(struct gpu_ctx *gc)
{
	struct g2_exec gpu = {gpu_run, gpu_alloc, gpu_free, gc};

	struct kn_model_config cfg = {.maxT = 64, .V = 256, .L = 2, .NH = 4, .C = 64};
	struct g2_model init;
	CHECK(g2_model_create(&tk_cpu_exec, &cfg, 4, 48, &init) == 0);
	struct tk_rng r = {777};
	tk_init_model(&r, &init);
	for (int i = 0; i < init.B * init.T; i++) {
		init.tokens[i] = (int)(tk_u32(&r) % (uint32_t)cfg.V);
		init.targets[i] = (int)(tk_u32(&r) % (uint32_t)cfg.V);
	}
	size_t np = init.nparams;
	float lc[3], lg[3], lg2[3];
	float *gc0 = malloc(np * 4), *pc = malloc(np * 4), *gg0 = malloc(np * 4);
	float *pg = malloc(np * 4), *gg1 = malloc(np * 4), *pg1 = malloc(np * 4);
	CHECK(gc0 && pc && gg0 && pg && gg1 && pg1);
	train(&tk_cpu_exec, 0, &init, lc, gc0, pc);
	train(&gpu, 1, &init, lg, gg0, pg);
	printf("losses cpu %.6f %.6f %.6f gpu %.6f %.6f %.6f\n", lc[0], lc[1], lc[2], lg[0], lg[1],
	       lg[2]);
	cmp("losses (3 steps)", lg, lc, 3);
	cmp("gradients (step 1)", gg0, gc0, np);
	cmp("parameters (after 3)", pg, pc, np);
	/* per tensor, so one wrong kernel shows by name */
	size_t off = (size_t)(cfg.V + cfg.maxT) * cfg.C;
	cmp("grad wte", gg0, gc0, (size_t)cfg.V * cfg.C);
	cmp("grad wpe", gg0 + (size_t)cfg.V * cfg.C, gc0 + (size_t)cfg.V * cfg.C,
	    (size_t)cfg.maxT * cfg.C);
	size_t sz[KN_BLOCK_NPARAMS];
	kn_block_param_sizes(cfg.C, sz);
	for (int i = 0; i < KN_BLOCK_NPARAMS; i++) {
		char what[32];
		snprintf(what, sizeof(what), "grad h0 tensor %d", i);
		cmp(what, gg0 + off, gc0 + off, sz[i]);
		off += sz[i];
	}
	/* determinism: the same run again is bit-identical */
	train(&gpu, 1, &init, lg2, gg1, pg1);
	CHECK(memcmp(lg, lg2, sizeof(lg)) == 0);
	CHECK_MSG(memcmp(gg0, gg1, np * 4) == 0, "CUDA gradients differ run to run");
	CHECK_MSG(memcmp(pg, pg1, np * 4) == 0, "CUDA parameters differ run to run");
	/* grad_scale (not used by the model) */
	float h[100], *d = gpu_alloc(NULL, sizeof(h));
	CHECK(d);
	for (int i = 0; i < 100; i++)
		h[i] = (float)i;
	CHECK(cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice) == cudaSuccess);
	struct kn_grad_scale_args sc = {.x = d, .scale = 0.5f, .N = 100};
	gpu_run(gc, &kn_grad_scale_kernel, &sc);
	CHECK(cudaStreamSynchronize(gc->stream) == cudaSuccess);
	CHECK(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost) == cudaSuccess);
	for (int i = 0; i < 100; i++)
		CHECK(h[i] == 0.5f * (float)i);
	gpu_free(NULL, d);
	free(gc0), free(pc), free(gg0), free(pg), free(gg1), free(pg1);
	g2_model_destroy(&tk_cpu_exec, &init);
	layer_api(gc->stream);
	clip_checks(gc);
	printf("max relative error CUDA vs CPU: %.3e\n", worst);
}

/* ---- bf16 ---- */
static cudaStream_t bf_stream;
static struct gpu_ctx *bf_gpu_ctx;

static void *bf_gpu_alloc(size_t bytes)
{
	return gpu_alloc(NULL, bytes);
}
static void bf_gpu_release(void *p)
{
	gpu_free(NULL, p);
}
/* the copies run on the legacy stream: fence the kernels' stream on both sides */
static void bf_gpu_up(void *dst, const void *src, size_t bytes)
{
	CHECK(cudaDeviceSynchronize() == cudaSuccess);
	CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice) == cudaSuccess);
	CHECK(cudaDeviceSynchronize() == cudaSuccess);
}
static void bf_gpu_down(void *dst, const void *src, size_t bytes)
{
	CHECK_MSG(cudaDeviceSynchronize() == cudaSuccess, "%s",
	          cudaGetErrorString(cudaGetLastError()));
	CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
}

static const struct bf_backend bf_gpu = {
    "cuda",      bf_gpu_alloc,          bf_gpu_release,         bf_gpu_up,
    bf_gpu_down, kn_layer_forward_cuda, kn_layer_backward_cuda, NULL};

static void bf16_layers(int C, int NH, int B, int T)
{
	struct kn_model_config cfg = {
	    .maxT = 128, .V = 97, .L = 1, .NH = NH, .C = C, .dtype = KN_BF16};
	struct bf_backend gpu = bf_gpu;
	gpu.stream = bf_stream;
	for (int k = 0; k < KN_LAYER_KINDS; k++) {
		struct bf_result rc, rg;
		bf_run_layer(&bf_cpu, &cfg, k, B, T, 99 + k, &rc);
		bf_run_layer(&gpu, &cfg, k, B, T, 99 + k, &rg);
		char what[32];
		snprintf(what, sizeof(what), "bf16 hs=%d T=%d", C / NH, T);
		double e = bf_compare(what, k, &rg, &rc, 16 * BF_U, 40 * BF_U);
		worst = e > worst ? e : worst;
		if (k == KN_LAYER_BLOCK) { /* deterministic: the same run, the same bits */
			struct bf_result r2;
			bf_run_layer(&gpu, &cfg, k, B, T, 99 + k, &r2);
			CHECK_MSG(memcmp(r2.out, rg.out, rg.nout * 4) == 0 &&
			              memcmp(r2.din, rg.din, rg.ndin * 4) == 0 &&
			              memcmp(r2.grads, rg.grads, rg.ngrads * 4) == 0,
			          "CUDA bf16 block differs run to run");
			bf_result_free(&r2);
		}
		bf_result_free(&rc), bf_result_free(&rg);
	}
}

/* attention alone at a long sequence: CUDA bf16 vs CPU bf16 */
static void bf16_attention(int B, int T, int C, int NH)
{
	size_t btc = (size_t)B * T * C, rows = (size_t)B * NH * T;
	size_t wsb = kn_attention_ws_bytes(KN_BF16, B, T, C, NH);
	struct tk_rng r = {31337};
	float *qkv = malloc(3 * btc * 4), *dy = malloc(btc * 4), *d0 = malloc(3 * btc * 4);
	CHECK(qkv && dy && d0);
	bf_fill(&r, qkv, 3 * btc, 2.0f, 0);
	bf_fill(&r, dy, btc, 1.0f, 0);
	bf_fill(&r, d0, 3 * btc, 0.01f, 0);
	const struct bf_backend *be[2] = {&bf_cpu, &bf_gpu};
	float *out[2], *lse[2], *dq[2];
	for (int i = 0; i < 2; i++) {
		void *in = bf_upload(be[i], KN_BF16, qkv, 3 * btc);
		void *g = bf_upload(be[i], KN_BF16, dy, btc);
		void *dinp = bf_upload(be[i], KN_BF16, d0, 3 * btc);
		void *o = be[i]->alloc(btc * 2), *l = be[i]->alloc(rows * 4),
		     *ws = be[i]->alloc(wsb);
		CHECK(o && l && ws);
		struct kn_attention_fwd_args f = {KN_BF16, o, l, ws, in, B, T, C, NH};
		struct kn_attention_bwd_args bw = {KN_BF16, dinp, ws, g, in, l, o, B, T, C, NH};
		CHECK_OK(kn_attention_forward_check(&f));
		CHECK_OK(kn_attention_backward_check(&bw));
		if (i == 0) {
			kn_attention_forward_cpu(&f);
			kn_attention_backward_cpu(&bw);
		} else {
			gpu_run(bf_gpu_ctx, &kn_attention_forward_kernel, &f);
			gpu_run(bf_gpu_ctx, &kn_attention_backward_kernel, &bw);
		}
		out[i] = bf_download(be[i], KN_BF16, o, btc);
		dq[i] = bf_download(be[i], KN_BF16, dinp, 3 * btc);
		lse[i] = malloc(rows * 4);
		CHECK(lse[i]);
		be[i]->down(lse[i], l, rows * 4);
		be[i]->release(in), be[i]->release(g), be[i]->release(dinp), be[i]->release(o);
		be[i]->release(l), be[i]->release(ws);
	}
	double eo = bf_err(out[1], out[0], btc), el = bf_err(lse[1], lse[0], rows);
	double ed = bf_err(dq[1], dq[0], 3 * btc);
	printf("  bf16 attention B=%d T=%d C=%d NH=%d: out %.3e (tol %.1e) lse %.3e (tol 1e-4) "
	       "dqkv %.3e (tol %.1e)\n",
	       B, T, C, NH, eo, 8 * BF_U, el, ed, 24 * BF_U);
	CHECK(eo < 8 * BF_U && el < 1e-4 && ed < 24 * BF_U);
	for (int i = 0; i < 2; i++)
		free(out[i]), free(lse[i]), free(dq[i]);
	free(qkv), free(dy), free(d0);
}

int main(void)
{
	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0)
		TEST_SKIP("no CUDA device");
	CHECK_OK(kn_cpu_set_threads(1));
	struct gpu_ctx gc;
	CHECK(cudaStreamCreateWithFlags(&gc.stream, cudaStreamNonBlocking) == cudaSuccess);
	bf_stream = gc.stream;
	bf_gpu_ctx = &gc;
	if (!getenv("SPILL_TEST_BF16_ONLY")) /* tools/gpu/check.sh's bf16 step: bf16 only */
		fp32_checks(&gc);
	printf("bf16: CUDA vs CPU (u = %.3e)\n", BF_U);
	bf16_layers(48, 4, 2, 40);   /* hs 12: padded tiles */
	bf16_layers(128, 2, 2, 100); /* hs 64 */
	bf16_layers(256, 2, 1, 70);  /* hs 128 */
	bf16_attention(1, 1024, 128, 2);
	bf16_attention(1, 1024, 256, 2);
	printf("max relative error CUDA vs CPU (fp32 and bf16): %.3e\n", worst);
	kn_cuda_cublas_release();
	CHECK(cudaStreamDestroy(gc.stream) == cudaSuccess);
	TEST_PASS();
}
#else
int main(void)
{
	TEST_SKIP("no CUDA device (built without CUDA)");
}
#endif

/* bench/block_gpu.c — one GPT-2 block (B=8, T=1024, C=768, NH=12 by default)
 * forward + backward with spill's CUDA kernels through the layer API
 * (kn_layer_forward/backward_cuda on the ranges kn_layer_describe sizes), timed
 * with CUDA events on a created stream, next to the same block in PyTorch eager on the same GPU
 * (bench/block_gpu.py, run through /usr/bin/python3 or $PYTHON). Prints ms per iteration,
 * achieved TFLOP/s (FLOPs from kn_layer_describe) and the time ratio spill /
 * PyTorch (target <= 1.25) in fp32; then the same in bf16 at GPT-2 XL (B 8, T 1024,
 * C 1600, NH 25) and a 7B-like block (B 4, T 2048, C 4096, NH 32) against PyTorch
 * eager bf16 with flash SDPA (target <= 1.0), ending with the line
 * `bf16_block_vs_torch xl=R 7b=R tflops_7b=X` (R = spill time / torch time).
 * Writes JSON to argv[1]. Exits 77 without a CUDA device.
 * Usage: block_gpu [json] [B T C NH iters] (the fp32 shape). */
#include "tests/kernels/gpt2.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if SPILL_HAVE_CUDA
#include <cuda_runtime.h>

static void die(const char *what)
{
	fprintf(stderr, "block_gpu: %s: %s\n", what, sp_last_error());
	exit(1);
}

static void *gpu_alloc(void *ctx, size_t bytes)
{
	(void)ctx;
	void *p = NULL;
	if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess ||
	    cudaMemset(p, 0, bytes) != cudaSuccess)
		return NULL;
	return p;
}

static void gpu_free(void *ctx, void *p)
{
	(void)ctx;
	cudaFree(p);
}

/* bf16 random values in [-scale, scale) into n elements of dtype at d */
static void fill(void *d, size_t n, enum kn_dtype dt, float scale, size_t seed)
{
	size_t e = kn_dtype_size(dt);
	void *h = malloc(n * e + 4);
	if (!h)
		die("malloc");
	for (size_t i = 0; i < n; i++) {
		float v = scale * (float)((int)((i * seed + 17) % 2001) - 1000) / 1000.0f;
		if (dt == KN_BF16)
			((uint16_t *)h)[i] = kn_f32_to_bf16(v);
		else
			((float *)h)[i] = v;
	}
	cudaMemcpy(d, h, n * e, cudaMemcpyHostToDevice);
	free(h);
}

/* ms per block forward + backward through the layer API, on stream s. */
static double spill_ms(cudaStream_t s, enum kn_dtype dt, int B, int T, int C, int NH, int iters,
                       struct kn_layer_desc *d)
{
	struct kn_model_config cfg = {.maxT = T, .V = 1, .L = 1, .NH = NH, .C = C, .dtype = dt};
	if (kn_layer_describe(&cfg, KN_LAYER_BLOCK, B, T, d) != 0)
		die("describe");
	size_t e = kn_dtype_size(dt), np = g2_block_nparams(C), btc = (size_t)B * T * C;
	/* the layer's five ranges, sized by its descriptor, as the runtime places them */
	struct kn_layer_mem mem = {
	    .params = gpu_alloc(NULL, d->param_bytes),
	    .grads = gpu_alloc(NULL, d->grad_bytes),
	    .optim = NULL,
	    .stash = gpu_alloc(NULL, d->stash_bytes),
	    .work = gpu_alloc(NULL, d->work_bytes),
	};
	void *x = gpu_alloc(NULL, btc * e), *dy = gpu_alloc(NULL, btc * e);
	void *dx = gpu_alloc(NULL, btc * e), *y = gpu_alloc(NULL, btc * e);
	if (!mem.params || !mem.grads || !mem.stash || !mem.work || !x || !dy || !dx || !y) {
		fprintf(stderr, "block_gpu: out of GPU memory\n");
		exit(1);
	}
	fill(mem.params, np, dt, 0.02f, 7919);
	fill(x, btc, dt, 1.0f, 104729);
	fill(dy, btc, dt, 1.0f, 104729);
	struct kn_layer_io io = {.in = x, .out = y, .dout = dy, .din = dx};
	cudaEvent_t e0, e1;
	cudaEventCreate(&e0);
	cudaEventCreate(&e1);
	for (int it = 0; it < iters + 3; it++) {
		if (it == 3)
			cudaEventRecord(e0, s);
		if (kn_layer_forward_cuda(s, &cfg, KN_LAYER_BLOCK, B, T, &mem, &io) ||
		    cudaMemsetAsync(dx, 0, btc * e, s) != cudaSuccess ||
		    kn_layer_backward_cuda(s, &cfg, KN_LAYER_BLOCK, B, T, &mem, &io))
			die("block");
	}
	cudaEventRecord(e1, s);
	if (cudaEventSynchronize(e1) != cudaSuccess || kn_cuda_last_error() != 0)
		die("run");
	float ms = 0;
	cudaEventElapsedTime(&ms, e0, e1);
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	gpu_free(NULL, mem.params), gpu_free(NULL, mem.grads), gpu_free(NULL, mem.stash);
	gpu_free(NULL, mem.work), gpu_free(NULL, x), gpu_free(NULL, dy), gpu_free(NULL, dx);
	gpu_free(NULL, y);
	return ms / iters;
}

/* ms of the bf16 attention alone (forward + backward) at this shape: the
 * flash kernels' share of the block. */
static double attn_ms(cudaStream_t s, int B, int T, int C, int NH, int iters)
{
	size_t btc = (size_t)B * T * C, rows = (size_t)B * NH * T;
	void *qkv = gpu_alloc(NULL, 3 * btc * 2), *dqkv = gpu_alloc(NULL, 3 * btc * 2);
	void *out = gpu_alloc(NULL, btc * 2), *dout = gpu_alloc(NULL, btc * 2);
	void *lse = gpu_alloc(NULL, rows * 4);
	void *ws = gpu_alloc(NULL, kn_attention_ws_bytes(KN_BF16, B, T, C, NH));
	if (!qkv || !dqkv || !out || !dout || !lse || !ws)
		die("attention buffers");
	fill(qkv, 3 * btc, KN_BF16, 1.0f, 104729);
	fill(dout, btc, KN_BF16, 1.0f, 7919);
	struct kn_attention_fwd_args f = {KN_BF16, out, lse, ws, qkv, B, T, C, NH};
	struct kn_attention_bwd_args b = {KN_BF16, dqkv, ws, dout, qkv, lse, out, B, T, C, NH};
	cudaEvent_t e0, e1;
	cudaEventCreate(&e0);
	cudaEventCreate(&e1);
	for (int it = 0; it < iters + 2; it++) {
		if (it == 2)
			cudaEventRecord(e0, s);
		kn_attention_forward_cuda(&f, s);
		kn_attention_backward_cuda(&b, s);
	}
	cudaEventRecord(e1, s);
	if (cudaEventSynchronize(e1) != cudaSuccess || kn_cuda_last_error() != 0)
		die("attention");
	float ms = 0;
	cudaEventElapsedTime(&ms, e0, e1);
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	gpu_free(NULL, qkv), gpu_free(NULL, dqkv), gpu_free(NULL, out), gpu_free(NULL, dout);
	gpu_free(NULL, lse), gpu_free(NULL, ws);
	return ms / iters;
}

/* PyTorch eager on the same GPU (bench/block_gpu.py); 0 when unavailable. */
static double torch_ms(const char *dtype, int B, int T, int C, int NH, int iters)
{
	/* Debian's python3 holds its torch; GPU images keep theirs elsewhere (PYTHON=). */
	const char *python = getenv("PYTHON") ? getenv("PYTHON") : "/usr/bin/python3";
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "%s bench/block_gpu.py %d %d %d %d %d %s", python, B, T, C, NH,
	         iters, dtype);
	double ms = 0;
	FILE *py = popen(cmd, "r");
	char line[256];
	while (py && fgets(line, sizeof(line), py))
		if (sscanf(line, "torch_ms %lf", &ms) == 1)
			break;
	if (py)
		pclose(py);
	if (ms <= 0)
		printf("PyTorch eager: not available (%s)\n", cmd);
	return ms;
}

/* Block FLOPs for both sides in bf16: GEMMs 2*M*N*K each, 24*B*T*C^2 forward
 * (qkv 6, attproj 2, fc 8, fcproj 8) and twice that backward; attention's
 * q k^T and P v at the causal half, 2*B*T^2*C forward, twice that backward
 * (dP, dV, dQ, dK); the flash backward's recomputation is not counted. */
static double bf16_flops(int B, int T, int C)
{
	double bt = (double)B * T;
	return 72 * bt * C * C + 6 * bt * T * C;
}

struct bf16_row {
	const char *name;
	int B, T, C, NH, iters;
	double ms, torch_ms, flops, attn_ms;
};

int main(int argc, char **argv)
{
	const char *json = argc > 1 ? argv[1] : "bench/results/block_gpu.json";
	int B = argc > 5 ? atoi(argv[2]) : 8, T = argc > 5 ? atoi(argv[3]) : 1024;
	int C = argc > 5 ? atoi(argv[4]) : 768, NH = argc > 5 ? atoi(argv[5]) : 12;
	int iters = argc > 6 ? atoi(argv[6]) : 20;
	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
		printf("SKIP: no CUDA device\n");
		return 77;
	}
	struct cudaDeviceProp prop;
	cudaGetDeviceProperties(&prop, 0);
	cudaStream_t s;
	if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
		return 1;
	struct kn_layer_desc d;
	double ms = spill_ms(s, KN_F32, B, T, C, NH, iters, &d);
	double flops = d.fwd_flops + d.bwd_flops, tflops = flops / (ms * 1e-3) / 1e12;
	double tms = torch_ms("fp32", B, T, C, NH, iters);
	printf("GPU %s, block B=%d T=%d C=%d NH=%d, fp32 (no TF32), %d iterations\n", prop.name, B,
	       T, C, NH, iters);
	printf("%-22s %10s %10s\n", "", "ms/iter", "TFLOP/s");
	printf("%-22s %10.3f %10.2f\n", "spill kernels", ms, tflops);
	if (tms > 0) {
		printf("%-22s %10.3f %10.2f\n", "PyTorch eager", tms, flops / (tms * 1e-3) / 1e12);
		printf("time ratio spill / PyTorch: %.3f (target <= 1.25)\n", ms / tms);
	}

	/* bf16: spill's cuBLASLt + flash kernels against PyTorch eager bf16 with
	 * F.scaled_dot_product_attention(is_causal=True), side by side */
	struct bf16_row rows[2] = {{"gpt2-xl", 8, 1024, 1600, 25, 20, 0, 0, 0, 0},
	                           {"7b-like", 4, 2048, 4096, 32, 10, 0, 0, 0, 0}};
	for (int i = 0; i < 2; i++) {
		struct bf16_row *r = &rows[i];
		struct kn_layer_desc d16;
		r->ms = spill_ms(s, KN_BF16, r->B, r->T, r->C, r->NH, r->iters, &d16);
		r->attn_ms = attn_ms(s, r->B, r->T, r->C, r->NH, r->iters);
		r->torch_ms = torch_ms("bf16", r->B, r->T, r->C, r->NH, r->iters);
		r->flops = bf16_flops(r->B, r->T, r->C);
	}
	printf("\nbf16 block forward+backward (FLOPs: GEMMs 2*M*N*K, 72*B*T*C^2; attention "
	       "causal half, 6*B*T^2*C)\n");
	printf("%-8s %4s %5s %5s %3s %10s %8s %9s %10s %8s %7s\n", "shape", "B", "T", "C", "NH",
	       "spill ms", "TFLOP/s", "(attn ms)", "torch ms", "TFLOP/s", "ratio");
	for (int i = 0; i < 2; i++) {
		struct bf16_row *r = &rows[i];
		double tt = r->torch_ms > 0 ? r->flops / (r->torch_ms * 1e-3) / 1e12 : 0;
		printf("%-8s %4d %5d %5d %3d %10.3f %8.1f %9.3f %10.3f %8.1f %7.3f\n", r->name,
		       r->B, r->T, r->C, r->NH, r->ms, r->flops / (r->ms * 1e-3) / 1e12, r->attn_ms,
		       r->torch_ms, tt, r->torch_ms > 0 ? r->ms / r->torch_ms : 0.0);
	}
	FILE *js = fopen(json, "w");
	if (js) {
		fprintf(js,
		        "{\n  \"bench\": \"block_gpu\",\n  \"machine\": {\"gpu\": \"%s\"},\n"
		        "  \"shape\": {\"B\": %d, \"T\": %d, \"C\": %d, \"NH\": %d},\n"
		        "  \"flops_per_iter\": %.6g,\n  \"spill_ms\": %.4f,\n  \"spill_tflops\": "
		        "%.3f,\n"
		        "  \"torch_ms\": %.4f,\n  \"ratio\": %.4f,\n  \"target_ratio\": 1.25,\n"
		        "  \"bf16\": [\n",
		        prop.name, B, T, C, NH, flops, ms, tflops, tms, tms > 0 ? ms / tms : 0.0);
		for (int i = 0; i < 2; i++) {
			struct bf16_row *r = &rows[i];
			fprintf(
			    js,
			    "    {\"shape\": \"%s\", \"B\": %d, \"T\": %d, \"C\": %d, \"NH\": %d, "
			    "\"flops_per_iter\": %.6g, \"spill_ms\": %.4f, \"torch_ms\": %.4f, "
			    "\"ratio\": %.4f}%s\n",
			    r->name, r->B, r->T, r->C, r->NH, r->flops, r->ms, r->torch_ms,
			    r->torch_ms > 0 ? r->ms / r->torch_ms : 0.0, i ? "" : ",");
		}
		fprintf(js, "  ],\n  \"bf16_target_ratio\": 1.0\n}\n");
		fclose(js);
	}
	kn_cuda_cublas_release();
	cudaStreamDestroy(s);
	printf("bf16_block_vs_torch xl=%.3f 7b=%.3f tflops_7b=%.1f\n",
	       rows[0].torch_ms > 0 ? rows[0].ms / rows[0].torch_ms : 0.0,
	       rows[1].torch_ms > 0 ? rows[1].ms / rows[1].torch_ms : 0.0,
	       rows[1].flops / (rows[1].ms * 1e-3) / 1e12);
	return 0;
}
#else
int main(void)
{
	printf("SKIP: built without CUDA\n");
	return 77;
}
#endif

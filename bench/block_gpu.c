/* bench/block_gpu.c — one GPT-2 block (B=8, T=1024, C=768, NH=12 by default)
 * forward + backward with spill's CUDA kernels through the layer API
 * (kn_layer_forward/backward_cuda on the ranges kn_layer_describe sizes), timed
 * with CUDA events on a created stream, next to the same block in PyTorch eager on the same GPU
 * (bench/block_gpu.py, run through /usr/bin/python3 or $PYTHON). Prints ms per iteration,
 * achieved TFLOP/s (FLOPs from kn_layer_describe) and the time ratio spill /
 * PyTorch (target <= 1.25); writes JSON to argv[1]. Exits 77 without a CUDA
 * device. Usage: block_gpu [json] [B T C NH iters]. */
#include "tests/kernels/gpt2.h"

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
	struct kn_model_config cfg = {.maxT = T, .V = 1, .L = 1, .NH = NH, .C = C};
	struct kn_layer_desc d;
	if (kn_layer_describe(&cfg, KN_LAYER_BLOCK, B, T, &d) != 0)
		die("describe");
	size_t np = g2_block_nparams(C), btc = (size_t)B * T * C;
	/* the layer's five ranges, sized by its descriptor, as the runtime places them */
	struct kn_layer_mem mem = {
	    .params = gpu_alloc(NULL, d.param_bytes),
	    .grads = gpu_alloc(NULL, d.grad_bytes),
	    .optim = NULL,
	    .stash = gpu_alloc(NULL, d.stash_bytes),
	    .work = gpu_alloc(NULL, d.work_bytes),
	};
	float *x = gpu_alloc(NULL, btc * 4), *dy = gpu_alloc(NULL, btc * 4);
	float *dx = gpu_alloc(NULL, btc * 4), *y = gpu_alloc(NULL, btc * 4);
	if (!mem.params || !mem.grads || !mem.stash || !mem.work || !x || !dy || !dx || !y) {
		fprintf(stderr, "block_gpu: out of GPU memory\n");
		return 1;
	}
	float *h = malloc(np > btc ? np * 4 : btc * 4);
	for (size_t i = 0; i < np; i++)
		h[i] = 0.02f * (float)((int)(i * 7919 % 2001) - 1000) / 1000.0f;
	cudaMemcpy(mem.params, h, np * 4, cudaMemcpyHostToDevice);
	for (size_t i = 0; i < btc; i++)
		h[i] = (float)((int)(i * 104729 % 2001) - 1000) / 1000.0f;
	cudaMemcpy(x, h, btc * 4, cudaMemcpyHostToDevice);
	cudaMemcpy(dy, h, btc * 4, cudaMemcpyHostToDevice);
	struct kn_layer_io io = {.in = x, .out = y, .dout = dy, .din = dx};
	cudaEvent_t e0, e1;
	cudaEventCreate(&e0);
	cudaEventCreate(&e1);
	for (int it = 0; it < iters + 3; it++) {
		if (it == 3)
			cudaEventRecord(e0, s);
		if (kn_layer_forward_cuda(s, &cfg, KN_LAYER_BLOCK, B, T, &mem, &io) ||
		    cudaMemsetAsync(dx, 0, btc * 4, s) != cudaSuccess ||
		    kn_layer_backward_cuda(s, &cfg, KN_LAYER_BLOCK, B, T, &mem, &io))
			die("block");
	}
	cudaEventRecord(e1, s);
	if (cudaEventSynchronize(e1) != cudaSuccess || kn_cuda_last_error() != 0)
		die("run");
	float ms = 0;
	cudaEventElapsedTime(&ms, e0, e1);
	ms /= iters;
	double flops = d.fwd_flops + d.bwd_flops, tflops = flops / (ms * 1e-3) / 1e12;

	/* Debian's python3 holds its torch; GPU images keep theirs elsewhere (PYTHON=). */
	const char *python = getenv("PYTHON") ? getenv("PYTHON") : "/usr/bin/python3";
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "%s bench/block_gpu.py %d %d %d %d %d", python, B, T, C, NH,
	         iters);
	double torch_ms = 0;
	FILE *py = popen(cmd, "r");
	char line[256];
	while (py && fgets(line, sizeof(line), py))
		if (sscanf(line, "torch_ms %lf", &torch_ms) == 1)
			break;
	if (py)
		pclose(py);
	printf("GPU %s, block B=%d T=%d C=%d NH=%d, fp32 (no TF32), %d iterations\n", prop.name, B,
	       T, C, NH, iters);
	printf("%-22s %10s %10s\n", "", "ms/iter", "TFLOP/s");
	printf("%-22s %10.3f %10.2f\n", "spill kernels", ms, tflops);
	if (torch_ms > 0) {
		printf("%-22s %10.3f %10.2f\n", "PyTorch eager", torch_ms,
		       flops / (torch_ms * 1e-3) / 1e12);
		printf("time ratio spill / PyTorch: %.3f (target <= 1.25)\n", ms / torch_ms);
	} else {
		printf("PyTorch eager: not available (%s)\n", cmd);
	}
	FILE *js = fopen(json, "w");
	if (js) {
		fprintf(js,
		        "{\n  \"bench\": \"block_gpu\",\n  \"machine\": {\"gpu\": \"%s\"},\n"
		        "  \"shape\": {\"B\": %d, \"T\": %d, \"C\": %d, \"NH\": %d},\n"
		        "  \"flops_per_iter\": %.6g,\n  \"spill_ms\": %.4f,\n  \"spill_tflops\": "
		        "%.3f,\n"
		        "  \"torch_ms\": %.4f,\n  \"ratio\": %.4f,\n  \"target_ratio\": 1.25\n}\n",
		        prop.name, B, T, C, NH, flops, ms, tflops, torch_ms,
		        torch_ms > 0 ? ms / torch_ms : 0.0);
		fclose(js);
	}
	free(h);
	gpu_free(NULL, mem.params), gpu_free(NULL, mem.grads), gpu_free(NULL, mem.stash);
	gpu_free(NULL, mem.work), gpu_free(NULL, x), gpu_free(NULL, dy), gpu_free(NULL, dx);
	gpu_free(NULL, y);
	kn_cuda_cublas_release();
	cudaStreamDestroy(s);
	return 0;
}
#else
int main(void)
{
	printf("SKIP: built without CUDA\n");
	return 77;
}
#endif

/* bench/gemm.c — CPU GEMM throughput through the kernels (kn_matmul_forward_cpu)
 * vs cblas_sgemm called directly with the same arguments, side by side in one
 * run (interleaved repetitions, best time of each). Prints GFLOP/s and the
 * ratio kn / direct (target >= 0.95: the kernel layer adds no overhead) and
 * writes the table with the machine to the JSON path given (argv[1]).
 * Exits 77 when built without OpenBLAS. */
#include "kernels/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#if SPILL_HAVE_BLAS
#include <cblas.h>

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void cpu_model(char *out, size_t n)
{
	snprintf(out, n, "unknown");
	FILE *f = fopen("/proc/cpuinfo", "r");
	if (!f)
		return;
	char line[512];
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "model name", 10) == 0) {
			char *c = strchr(line, ':');
			if (c) {
				c += 2;
				c[strcspn(c, "\n")] = 0;
				snprintf(out, n, "%s", c);
			}
			break;
		}
	}
	fclose(f);
}

struct shape {
	const char *what;
	int M, N, K; /* M = B*T rows, N = OC, K = C */
};

int main(int argc, char **argv)
{
	const char *json = argc > 1 ? argv[1] : "bench/results/gemm.json";
	int threads = argc > 2 ? atoi(argv[2]) : 0;
	if (kn_cpu_set_threads(threads) != 0) {
		fprintf(stderr, "%s\n", sp_last_error());
		return 1;
	}
	threads = kn_cpu_threads();
	const struct shape shapes[] = {
	    {"square 512", 512, 512, 512},           {"qkv  BT=1024 C=768", 1024, 2304, 768},
	    {"fc   BT=1024 C=768", 1024, 3072, 768}, {"proj BT=1024 4C->C", 1024, 768, 3072},
	    {"head BT=256 V=8192", 256, 8192, 768},
	};
	const int reps = 7;
	char cpu[256];
	cpu_model(cpu, sizeof(cpu));
	struct utsname un;
	uname(&un);
	FILE *js = fopen(json, "w");
	if (!js) {
		perror(json);
		return 1;
	}
	fprintf(js,
	        "{\n  \"bench\": \"gemm\",\n  \"machine\": {\"cpu\": \"%s\", \"cores\": %ld, "
	        "\"kernel\": \"%s %s\"},\n  \"threads\": %d,\n  \"results\": [\n",
	        cpu, sysconf(_SC_NPROCESSORS_ONLN), un.sysname, un.release, threads);
	printf("CPU GEMM, out (M,N) = inp (M,K) @ weight(N,K)^T, %s, %d threads, best of %d\n", cpu,
	       threads, reps);
	printf("%-20s %6s %6s %6s %12s %12s %8s\n", "shape", "M", "N", "K", "kn GFLOP/s",
	       "cblas GFLOP/s", "ratio");
	double min_ratio = 1e9;
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
		const struct shape *sh = &shapes[s];
		size_t na = (size_t)sh->M * sh->K, nw = (size_t)sh->N * sh->K,
		       nc = (size_t)sh->M * sh->N;
		float *A = malloc(na * 4), *W = malloc(nw * 4), *C1 = malloc(nc * 4),
		      *C2 = malloc(nc * 4);
		if (!A || !W || !C1 || !C2)
			return 1;
		for (size_t i = 0; i < na; i++)
			A[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
		for (size_t i = 0; i < nw; i++)
			W[i] = (float)((i * 104729) % 1000) / 1000.0f - 0.5f;
		struct kn_matmul_fwd_args a = {.out = C1,
		                               .inp = A,
		                               .weight = W,
		                               .bias = NULL,
		                               .B = 1,
		                               .T = sh->M,
		                               .C = sh->K,
		                               .OC = sh->N};
		if (kn_matmul_forward_check(&a) != 0) {
			fprintf(stderr, "%s\n", sp_last_error());
			return 1;
		}
		double best_kn = 1e30, best_bl = 1e30;
		for (int r = 0; r < reps + 1; r++) { /* first round warms up */
			double t0 = now_s();
			kn_matmul_forward_cpu(&a);
			double t1 = now_s();
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, sh->M, sh->N, sh->K,
			            1.0f, A, sh->K, W, sh->K, 0.0f, C2, sh->N);
			double t2 = now_s();
			if (r > 0) {
				best_kn = t1 - t0 < best_kn ? t1 - t0 : best_kn;
				best_bl = t2 - t1 < best_bl ? t2 - t1 : best_bl;
			}
		}
		if (memcmp(C1, C2, nc * 4) != 0) {
			fprintf(stderr, "%s: kn and cblas results differ\n", sh->what);
			return 1;
		}
		double flop = 2.0 * sh->M * sh->N * sh->K;
		double g_kn = flop / best_kn / 1e9, g_bl = flop / best_bl / 1e9,
		       ratio = g_kn / g_bl;
		min_ratio = ratio < min_ratio ? ratio : min_ratio;
		printf("%-20s %6d %6d %6d %12.1f %12.1f %8.3f\n", sh->what, sh->M, sh->N, sh->K,
		       g_kn, g_bl, ratio);
		fprintf(js,
		        "    {\"shape\": \"%s\", \"M\": %d, \"N\": %d, \"K\": %d, \"kn_gflops\": "
		        "%.2f, \"cblas_gflops\": %.2f, \"ratio\": %.4f}%s\n",
		        sh->what, sh->M, sh->N, sh->K, g_kn, g_bl, ratio,
		        s + 1 < sizeof(shapes) / sizeof(shapes[0]) ? "," : "");
		free(A), free(W), free(C1), free(C2);
	}
	fprintf(js, "  ],\n  \"min_ratio\": %.4f,\n  \"target_ratio\": 0.95\n}\n", min_ratio);
	fclose(js);
	printf("min ratio kn/cblas: %.3f (target >= 0.95) -> %s\n", min_ratio, json);
	return 0;
}
#else
int main(void)
{
	printf("SKIP: built without OpenBLAS (apt-get install libopenblas-dev)\n");
	return 77;
}
#endif

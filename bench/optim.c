/* bench/optim.c — the CPU AdamW update (kn_adamw_cpu, fp32 master weights) against the
 * memory bandwidth of the same machine, and against DeepSpeed's CPU Adam.
 *
 * For each size N (parameters): AdamW on all cores (kn_cpu_set_threads(0), widest SIMD
 * path) and a STREAM-like triad a[i] = b[i] + s*c[i] on as many threads, interleaved
 * in one run, best of REPS each. Bytes are counted the same way for both: what the
 * loop reads plus what it writes, no write-allocate (STREAM's convention): AdamW 28 B
 * per parameter (p, g, m, v read, p, m, v written, in place), the triad 12 B per
 * element over 4N/3 elements (the same 16N-byte footprint). R = AdamW GB/s / triad
 * GB/s; R_wa counts the triad's write-allocate too (16 B/elem: what its bus really
 * moves; AdamW's in-place lines have none), the stricter ratio. Then bench/optim_deepspeed.py (argv[2], a python command; "" to skip) times
 * DeepSpeedCPUAdam on the same sizes and thread count: S = its time / spill's.
 * Prints a table, writes JSON with the machine to argv[1]; the last line is
 * `optim_vs_triad=R optim_vs_deepspeed=S` (minimum over the sizes).
 */
#include "bench/bench.h"
#include "kernels/kernels.h"
#include "kernels/optim_impl.h"

#include <pthread.h>
#include <stdint.h>
#include <time.h>

#define REPS      7
#define MAX_SIZES 4

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float *alloc_floats(long n)
{
	void *p = NULL;
	if (posix_memalign(&p, 4096, (size_t)n * sizeof(float)))
		return NULL;
	return p;
}

/* ---- the triad: a persistent team, started and stopped by barriers ---- */
struct triad {
	float *a, *b, *c;
	long n;
	float s;
	int threads;
	int stop;
	pthread_barrier_t start, end;
	pthread_t th[KN_OPTIM_MAX_THREADS];
};

static void triad_part(struct triad *t, int k)
{
	long lo = t->n * k / t->threads, hi = t->n * (k + 1) / t->threads;
	float *a = t->a;
	const float *b = t->b, *c = t->c, s = t->s;
	for (long i = lo; i < hi; i++)
		a[i] = b[i] + s * c[i];
}

static struct triad *triad_team;

static void *triad_worker(void *arg)
{
	int k = (int)(intptr_t)arg;
	for (;;) {
		pthread_barrier_wait(&triad_team->start);
		if (triad_team->stop)
			return NULL;
		triad_part(triad_team, k);
		pthread_barrier_wait(&triad_team->end);
	}
}

static double triad_run(struct triad *t)
{
	double t0 = now_s();
	pthread_barrier_wait(&t->start);
	triad_part(t, 0);
	pthread_barrier_wait(&t->end);
	return now_s() - t0;
}

/* ---- DeepSpeed, through the helper: "ds N seconds" lines, or "skip why" ---- */
struct ds_result {
	int ok;
	char why[512];
	double s[MAX_SIZES];
};

static void run_deepspeed(const char *py, const long *sizes, int nsizes, int threads,
                          struct ds_result *r)
{
	memset(r, 0, sizeof(*r));
	snprintf(r->why, sizeof(r->why), "no result from bench/optim_deepspeed.py");
	if (!py || !*py) {
		snprintf(r->why, sizeof(r->why), "no python given for bench/optim_deepspeed.py");
		return;
	}
	char cmd[1024];
	int o = snprintf(cmd, sizeof(cmd), "%s bench/optim_deepspeed.py --threads %d --reps %d", py,
	                 threads, REPS);
	for (int k = 0; k < nsizes; k++)
		o += snprintf(cmd + o, sizeof(cmd) - (size_t)o, " %ld", sizes[k]);
	fflush(stdout);
	FILE *f = popen(cmd, "r");
	if (!f) {
		snprintf(r->why, sizeof(r->why), "cannot run %s", py);
		return;
	}
	char line[512];
	int got = 0;
	while (fgets(line, sizeof(line), f)) {
		long n;
		double sec;
		if (sscanf(line, "ds %ld %lf", &n, &sec) == 2) {
			for (int k = 0; k < nsizes; k++)
				if (sizes[k] == n) {
					r->s[k] = sec;
					got++;
				}
		} else if (!strncmp(line, "skip ", 5)) {
			snprintf(r->why, sizeof(r->why), "%s", line + 5);
			r->why[strcspn(r->why, "\n")] = 0;
		}
	}
	int st = pclose(f);
	r->ok = st == 0 && got == nsizes;
	if (st != 0 && !strcmp(r->why, "no result from bench/optim_deepspeed.py"))
		snprintf(r->why, sizeof(r->why), "bench/optim_deepspeed.py failed (status %d)", st);
}

int main(int argc, char **argv)
{
	const char *json = argc > 1 ? argv[1] : "bench/results/optim.json";
	const char *py = argc > 2 ? argv[2] : "";
	long sizes[MAX_SIZES] = {16L << 20, 64L << 20};
	int nsizes = 2;
	if (getenv("OPTIM_BENCH_SIZES")) { /* e.g. "1048576,4194304" for a quick run */
		char *e = getenv("OPTIM_BENCH_SIZES"), *end;
		for (nsizes = 0; nsizes < MAX_SIZES && *e; e = *end ? end + 1 : end) {
			sizes[nsizes] = strtol(e, &end, 10);
			if (sizes[nsizes] <= 0 || end == e) {
				fprintf(stderr, "OPTIM_BENCH_SIZES: bad list\n");
				return 1;
			}
			nsizes++;
		}
	}
	if (kn_cpu_set_threads(0) != 0) {
		fprintf(stderr, "%s\n", sp_last_error());
		return 1;
	}
	int threads = kn_cpu_threads();
	const char *path = kn_optim_path_get()->name;
	printf("CPU AdamW (fp32 params, grads, m, v) vs a STREAM-like triad, %d threads, %s path, "
	       "best of %d\n",
	       threads, path, REPS);
	printf(
	    "bytes: AdamW 28 B/param (16 read + 12 written, in place); triad a=b+s*c 12 B/elem "
	    "(8 read + 4 written, write-allocate not counted), 4N/3 elements (same footprint)\n");

	double adam_s[MAX_SIZES], triad_gbs[MAX_SIZES], adam_gbs[MAX_SIZES];
	for (int k = 0; k < nsizes; k++) {
		long n = sizes[k], nt = n / 3 * 4;
		float *p = alloc_floats(n), *g = alloc_floats(n), *m = alloc_floats(n),
		      *v = alloc_floats(n);
		struct triad t = {.a = alloc_floats(nt),
		                  .b = alloc_floats(nt),
		                  .c = alloc_floats(nt),
		                  .n = nt,
		                  .s = 3.0f,
		                  .threads = threads};
		if (!p || !g || !m || !v || !t.a || !t.b || !t.c) {
			fprintf(stderr, "out of memory at N = %ld\n", n);
			return 1;
		}
		for (long i = 0; i < n; i++) {
			p[i] = (float)(i % 1000) * 1e-3f - 0.5f;
			g[i] = (float)(i % 777) * 1e-5f - 3e-3f;
			m[i] = 0.0f;
			v[i] = 0.0f;
		}
		for (long i = 0; i < nt; i++) {
			t.a[i] = 0.0f;
			t.b[i] = (float)(i % 100);
			t.c[i] = 1.0f;
		}
		pthread_barrier_init(&t.start, NULL, (unsigned)threads);
		pthread_barrier_init(&t.end, NULL, (unsigned)threads);
		triad_team = &t;
		for (int w = 1; w < threads; w++)
			if (pthread_create(&t.th[w], NULL, triad_worker, (void *)(intptr_t)w)) {
				fprintf(stderr, "cannot start triad threads\n");
				return 1;
			}
		struct kn_adamw_args a = {.dtype = KN_F32,
		                          .params = p,
		                          .grads = g,
		                          .m = m,
		                          .v = v,
		                          .N = n,
		                          .lr = 1e-3f,
		                          .beta1 = 0.9f,
		                          .beta2 = 0.999f,
		                          .eps = 1e-8f,
		                          .weight_decay = 0.01f,
		                          .t = 1};
		if (kn_adamw_check(&a) != 0) {
			fprintf(stderr, "%s\n", sp_last_error());
			return 1;
		}
		double best_a = 1e30, best_t = 1e30;
		for (int r = 0; r <= REPS; r++) { /* round 0 warms up */
			double t0 = now_s();
			kn_adamw_cpu(&a);
			double ta = now_s() - t0;
			a.t++;
			double tt = triad_run(&t);
			if (r > 0) {
				best_a = ta < best_a ? ta : best_a;
				best_t = tt < best_t ? tt : best_t;
			}
		}
		t.stop = 1;
		pthread_barrier_wait(&t.start);
		for (int w = 1; w < threads; w++)
			pthread_join(t.th[w], NULL);
		pthread_barrier_destroy(&t.start);
		pthread_barrier_destroy(&t.end);
		adam_s[k] = best_a;
		adam_gbs[k] = 28.0 * n / best_a / 1e9;
		triad_gbs[k] = 12.0 * nt / best_t / 1e9;
		free(p), free(g), free(m), free(v), free(t.a), free(t.b), free(t.c);
	}

	struct ds_result ds;
	run_deepspeed(py, sizes, nsizes, threads, &ds);

	printf("%10s %12s %12s %10s %8s %8s %12s %12s %8s\n", "params", "triad GB/s", "AdamW GB/s",
	       "AdamW ms", "R", "R_wa", "DS GB/s", "DS ms", "S");
	double r_min = 1e30, s_min = 1e30;
	FILE *js = fopen(json, "w");
	if (!js) {
		perror(json);
		return 1;
	}
	fprintf(js, "{\n  \"bench\": \"optim\",\n");
	bench_machine_json(js);
	fprintf(js,
	        "  \"threads\": %d,\n  \"path\": \"%s\",\n  \"reps\": %d,\n  \"bytes\": \"AdamW 28 "
	        "B/param; triad 12 B/elem over 4N/3 elements; write-allocate not counted\",\n  "
	        "\"results\": [\n",
	        threads, path, REPS);
	for (int k = 0; k < nsizes; k++) {
		double r = adam_gbs[k] / triad_gbs[k];
		r_min = r < r_min ? r : r_min;
		char dsg[32] = "-", dsm[32] = "-", ss[32] = "-";
		double s = 0;
		if (ds.ok) {
			s = ds.s[k] / adam_s[k];
			s_min = s < s_min ? s : s_min;
			snprintf(dsg, sizeof(dsg), "%.2f", 28.0 * sizes[k] / ds.s[k] / 1e9);
			snprintf(dsm, sizeof(dsm), "%.2f", ds.s[k] * 1e3);
			snprintf(ss, sizeof(ss), "%.3f", s);
		}
		double r_wa = adam_gbs[k] / (triad_gbs[k] * 16 / 12);
		printf("%10ld %12.2f %12.2f %10.2f %8.3f %8.3f %12s %12s %8s\n", sizes[k],
		       triad_gbs[k], adam_gbs[k], adam_s[k] * 1e3, r, r_wa, dsg, dsm, ss);
		fprintf(
		    js,
		    "    {\"params\": %ld, \"triad_gbs\": %.3f, \"adamw_gbs\": %.3f, \"adamw_s\": "
		    "%.6f, \"R\": %.4f, \"R_wa\": %.4f",
		    sizes[k], triad_gbs[k], adam_gbs[k], adam_s[k], r, r_wa);
		if (ds.ok)
			fprintf(js, ", \"deepspeed_s\": %.6f, \"S\": %.4f", ds.s[k], s);
		fprintf(js, "}%s\n", k + 1 < nsizes ? "," : "");
	}
	fprintf(js, "  ],\n  \"R\": %.4f,\n  \"target_R\": 0.7,\n", r_min);
	if (ds.ok)
		fprintf(js, "  \"S\": %.4f,\n  \"target_S\": 1.0\n}\n", s_min);
	else {
		fprintf(js, "  \"S\": null,\n  \"S_skipped\": \"");
		for (const char *c = ds.why; *c; c++)
			fputc(*c == '"' || *c == '\\' ? '\'' : *c, js);
		fprintf(js, "\",\n  \"target_S\": 1.0\n}\n");
	}
	fclose(js);
	printf(
	    "R = AdamW GB/s / triad GB/s (target >= 0.7; R_wa counts the triad's write-allocate, "
	    "16 B/elem, the bytes its bus moves); S = DeepSpeed time / spill time (target >= 1.0); "
	    "last line: minimum over sizes -> %s\n",
	    json);
	if (ds.ok)
		printf("optim_vs_triad=%.3f optim_vs_deepspeed=%.3f\n", r_min, s_min);
	else
		printf("optim_vs_triad=%.3f optim_vs_deepspeed=skip (%s)\n", r_min, ds.why);
	return 0;
}

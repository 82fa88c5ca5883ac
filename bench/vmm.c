/* bench/vmm.c — what the vmm costs, measured side by side in one run.
 *
 * Host part (always): the hot path, acquire(READ) + release of a resident
 * object on the host backend, in ns per pair (target < 1 us; also with a done
 * event, which queues a fence). GPU part (when dev_cuda_available()): on device
 * 0 of the cuda backend, H2D through the vmm (acquire of an object whose only
 * valid copy is in the pinned host pool; timed to its ready event) and D2H
 * through the vmm (eviction of a dirty device copy; timed to vmm_obj_wait),
 * each next to a plain cudaMemcpyAsync of the same bytes between the same
 * pinned host and device buffers on a stream of its own; the order alternates
 * per repetition and each figure is the median. Prints a table, ends with
 * `vmm_vs_memcpy h2d=R d2h=R [p2p=R]` (target >= 0.9; p2p with two GPUs that
 * have a peer link: acquire on device 1 of a copy on device 0 vs
 * cudaMemcpyPeerAsync) and writes JSON with the
 * machine (--json). Flags: --bytes SIZE (GPU object, default 256M), --reps N,
 * --iters N (host pairs per repetition), --json FILE. Without a GPU the GPU
 * part is reported as skipped.
 */
#include "common/error.h"
#include "common/params.h"
#include "device/device.h"
#include "vmm/vmm.h"
#include "bench/bench.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#if SPILL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define MAX_REPS     BENCH_MAX_REPS
#define TARGET_NS    1000.0
#define TARGET_RATIO 0.9

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *what)
{
	fprintf(stderr, "bench-vmm: %s: %s\n", what, sp_last_error());
	exit(1);
}

#define OK(call)                    \
	do {                        \
		if ((call) != 0)    \
			die(#call); \
	} while (0)

struct host_result {
	double ns, ns_done; /* per pair: release(NULL), release(done) */
	double all[MAX_REPS], all_done[MAX_REPS];
};

/* Resident acquire + release pairs on the host backend. */
static void bench_host(int reps, long iters, struct host_result *r)
{
	struct dev_config dc = {.backend = DEV_BACKEND_HOST, .ndevices = 1, .device_mem = 64 << 20};
	struct dev_ctx *ctx;
	OK(dev_open(&dc, &ctx));
	struct vmm_config c;
	memset(&c, 0, sizeof(c));
	c.device_mem = 16 << 20;
	c.host_mem = 16 << 20;
	c.max_objects = 1024;
	c.align = 256;
	struct vmm *v;
	OK(vmm_open(ctx, &c, &v));
	/* a few neighbours, so the object is not alone in the arena */
	uint64_t id = 0;
	for (int k = 0; k < 64; k++) {
		struct vmm_obj_desc d = {4096, VMM_KIND_WEIGHT, "w", 0, 0};
		OK(vmm_obj_create(v, &d, &id));
		void *p;
		struct dev_event *ready;
		OK(vmm_acquire(v, id, 0, VMM_OVERWRITE, &p, &ready));
		OK(vmm_release(v, id, 0, NULL));
	}
	struct dev_stream *s;
	struct dev_event *done;
	OK(dev_stream_create(ctx, 0, &s));
	OK(dev_event_create(ctx, &done));
	OK(dev_event_record(done, s));
	for (int rep = 0; rep < reps; rep++) {
		void *p;
		struct dev_event *ready;
		double t0 = now_s();
		for (long i = 0; i < iters; i++) {
			if (vmm_acquire(v, id, 0, VMM_READ, &p, &ready) ||
			    vmm_release(v, id, 0, NULL))
				die("acquire/release");
		}
		double t1 = now_s();
		long n_done = iters / 10 > 0 ? iters / 10 : 1;
		for (long i = 0; i < n_done; i++) {
			if (vmm_acquire(v, id, 0, VMM_READ, &p, &ready) ||
			    vmm_release(v, id, 0, done))
				die("acquire/release(done)");
		}
		double t2 = now_s();
		r->all[rep] = (t1 - t0) * 1e9 / (double)iters;
		r->all_done[rep] = (t2 - t1) * 1e9 / (double)n_done;
		OK(vmm_sync(v));
	}
	r->ns = bench_median(r->all, reps);
	r->ns_done = bench_median(r->all_done, reps);
	OK(dev_stream_destroy(s));
	OK(dev_event_destroy(done));
	vmm_close(v);
	dev_close(ctx);
}

struct gpu_result {
	int ran;
	char name[64];
	uint64_t bytes;
	double vmm_h2d, cpy_h2d, vmm_d2h, cpy_d2h; /* bytes/s, medians */
	double all[4][MAX_REPS];
	int p2p_ran; /* two devices with a peer link */
	double vmm_p2p, cpy_p2p;
	double all_p2p[2][MAX_REPS];
};

#if SPILL_HAVE_CUDA
static void cuda_ok(cudaError_t e, const char *what)
{
	if (e != cudaSuccess) {
		fprintf(stderr, "bench-vmm: %s: %s\n", what, cudaGetErrorString(e));
		exit(1);
	}
}

/* Plain cudaMemcpyAsync of bytes on its own stream; returns bytes/s. */
static double memcpy_rate(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                          cudaStream_t cs)
{
	cuda_ok(cudaStreamSynchronize(cs), "sync");
	double t0 = now_s();
	cuda_ok(cudaMemcpyAsync(dst, src, bytes, kind, cs), "cudaMemcpyAsync");
	cuda_ok(cudaStreamSynchronize(cs), "sync");
	return (double)bytes / (now_s() - t0);
}

/* A vmm with room for one object of bytes on each device and the host, and
 * that object (*id). */
static struct vmm *open_vmm(struct dev_ctx *ctx, uint64_t bytes, const char *name, uint64_t *id)
{
	struct vmm_config c;
	memset(&c, 0, sizeof(c));
	c.device_mem = bytes + (64 << 20);
	c.host_mem = bytes + (64 << 20);
	c.max_objects = 16;
	c.align = 256;
	struct vmm *v;
	OK(vmm_open(ctx, &c, &v));
	struct vmm_obj_desc d = {bytes, VMM_KIND_WEIGHT, name, 0, 0};
	OK(vmm_obj_create(v, &d, id));
	return v;
}

static void bench_gpu(int reps, uint64_t bytes, struct gpu_result *r)
{
	struct dev_config dc = {.backend = DEV_BACKEND_CUDA, .ndevices = 1};
	struct dev_ctx *ctx;
	OK(dev_open(&dc, &ctx));
	struct dev_info inf;
	OK(dev_info(ctx, 0, &inf));
	snprintf(r->name, sizeof(r->name), "%s", inf.name);
	uint64_t id;
	struct vmm *v = open_vmm(ctx, bytes, "bench", &id);
	void *hp, *dp;
	struct dev_event *ready;
	OK(vmm_acquire(v, id, VMM_HOST, VMM_OVERWRITE, &hp, &ready));
	memset(hp, 1, bytes);
	OK(vmm_release(v, id, VMM_HOST, NULL));
	OK(vmm_acquire(v, id, 0, VMM_READ, &dp, &ready)); /* warm-up H2D */
	if (ready)
		OK(dev_event_sync(ready));
	OK(vmm_release(v, id, 0, NULL));
	OK(vmm_sync(v));
	cuda_ok(cudaSetDevice(0), "cudaSetDevice");
	cudaStream_t cs;
	cuda_ok(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking), "stream");
	for (int rep = 0; rep < reps; rep++) {
		for (int k = 0; k < 2; k++) {
			if ((k == 0) == (rep % 2 == 0)) {
				/* H2D: the only valid copy is on the host */
				OK(vmm_evict(v, id, 0)); /* clean: dropped */
				OK(vmm_obj_wait(v, id));
				double t0 = now_s();
				void *p;
				OK(vmm_acquire(v, id, 0, VMM_READ, &p, &ready));
				if (ready)
					OK(dev_event_sync(ready));
				double t1 = now_s();
				OK(vmm_release(v, id, 0, NULL));
				r->all[0][rep] = (double)bytes / (t1 - t0);
				/* D2H: evict a dirty device copy */
				OK(vmm_acquire(v, id, 0, VMM_WRITE, &p, &ready));
				OK(vmm_release(v, id, 0, NULL));
				OK(vmm_sync(v));
				t0 = now_s();
				OK(vmm_evict(v, id, 0));
				OK(vmm_obj_wait(v, id));
				t1 = now_s();
				r->all[2][rep] = (double)bytes / (t1 - t0);
				/* the same buffers for the baseline */
				OK(vmm_acquire(v, id, VMM_HOST, VMM_READ, &hp, &ready));
				OK(vmm_release(v, id, VMM_HOST, NULL));
				OK(vmm_acquire(v, id, 0, VMM_READ, &dp, &ready));
				if (ready)
					OK(dev_event_sync(ready));
				OK(vmm_release(v, id, 0, NULL));
				OK(vmm_sync(v));
			} else {
				r->all[1][rep] =
				    memcpy_rate(dp, hp, bytes, cudaMemcpyHostToDevice, cs);
				r->all[3][rep] =
				    memcpy_rate(hp, dp, bytes, cudaMemcpyDeviceToHost, cs);
			}
		}
		printf("  rep %d: h2d vmm %8.1f memcpy %8.1f MiB/s   d2h vmm %8.1f memcpy %8.1f "
		       "MiB/s\n",
		       rep + 1, r->all[0][rep] / 1048576, r->all[1][rep] / 1048576,
		       r->all[2][rep] / 1048576, r->all[3][rep] / 1048576);
		fflush(stdout);
	}
	r->vmm_h2d = bench_median(r->all[0], reps);
	r->cpy_h2d = bench_median(r->all[1], reps);
	r->vmm_d2h = bench_median(r->all[2], reps);
	r->cpy_d2h = bench_median(r->all[3], reps);
	r->bytes = bytes;
	r->ran = 1;
	cuda_ok(cudaStreamDestroy(cs), "stream destroy");
	OK(vmm_obj_destroy(v, id));
	vmm_close(v);
	dev_close(ctx);
}

/* P2P through the vmm (acquire on device 1 of an object valid on device 0 and
 * the host: the vmm takes the peer link) next to cudaMemcpyPeerAsync of the
 * same bytes between the same buffers. Skipped without 2 peer devices. */
static void bench_p2p(int reps, uint64_t bytes, struct gpu_result *r)
{
	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2)
		return;
	struct dev_config dc = {.backend = DEV_BACKEND_CUDA, .ndevices = 2};
	struct dev_ctx *ctx;
	OK(dev_open(&dc, &ctx));
	if (!dev_p2p_possible(ctx, 0, 1)) {
		dev_close(ctx);
		return;
	}
	uint64_t id;
	struct vmm *v = open_vmm(ctx, bytes, "bench-p2p", &id);
	void *p0, *p1 = NULL;
	struct dev_event *ready;
	OK(vmm_acquire(v, id, 0, VMM_OVERWRITE, &p0, &ready));
	OK(vmm_release(v, id, 0, NULL));
	OK(vmm_writeback(v, id, 0)); /* a host copy too: device 0's copy stays clean */
	OK(vmm_obj_wait(v, id));
	cuda_ok(cudaSetDevice(1), "cudaSetDevice");
	cudaStream_t cs;
	cuda_ok(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking), "stream");
	for (int rep = 0; rep < reps; rep++) {
		for (int k = 0; k < 2; k++) {
			if ((k == 0) == (rep % 2 == 0)) {
				OK(vmm_evict(v, id, 1)); /* clean: dropped */
				OK(vmm_obj_wait(v, id));
				double t0 = now_s();
				OK(vmm_acquire(v, id, 1, VMM_READ, &p1, &ready));
				if (ready)
					OK(dev_event_sync(ready));
				double t1 = now_s();
				OK(vmm_release(v, id, 1, NULL));
				r->all_p2p[0][rep] = (double)bytes / (t1 - t0);
			} else { /* rep 0 runs the vmm first: p1 is device 1's copy */
				cuda_ok(cudaStreamSynchronize(cs), "sync");
				double t0 = now_s();
				cuda_ok(cudaMemcpyPeerAsync(p1, 1, p0, 0, bytes, cs),
				        "cudaMemcpyPeerAsync");
				cuda_ok(cudaStreamSynchronize(cs), "sync");
				r->all_p2p[1][rep] = (double)bytes / (now_s() - t0);
			}
		}
		printf("  rep %d: p2p vmm %8.1f memcpy %8.1f MiB/s\n", rep + 1,
		       r->all_p2p[0][rep] / 1048576, r->all_p2p[1][rep] / 1048576);
	}
	r->vmm_p2p = bench_median(r->all_p2p[0], reps);
	r->cpy_p2p = bench_median(r->all_p2p[1], reps);
	r->p2p_ran = 1;
	cuda_ok(cudaStreamDestroy(cs), "stream destroy");
	OK(vmm_obj_destroy(v, id));
	vmm_close(v);
	dev_close(ctx);
}
#endif

static void usage(void)
{
	fprintf(stderr, "usage: bench-vmm [--bytes SIZE] [--reps N] [--iters N] [--json FILE]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	uint64_t bytes = 256ull << 20;
	int reps = 5;
	long iters = 1000000;
	const char *json = NULL;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
		if (!val)
			usage();
		i++;
		if (!strcmp(a, "--bytes") && !sp_parse_size(val, &bytes) && bytes > 0)
			continue;
		if (!strcmp(a, "--reps") && (reps = atoi(val)) > 0 && reps <= MAX_REPS)
			continue;
		if (!strcmp(a, "--iters") && (iters = atol(val)) > 0)
			continue;
		if (!strcmp(a, "--json")) {
			json = val;
			continue;
		}
		usage();
	}

	struct host_result hr;
	memset(&hr, 0, sizeof(hr));
	printf("bench-vmm: host backend, resident acquire(READ) + release, %ld pairs x %d reps\n",
	       iters, reps);
	bench_host(reps, iters, &hr);
	printf("%-34s %10.1f ns/op   target < %.0f ns: ratio %.3f\n", "acquire+release(NULL)",
	       hr.ns, TARGET_NS, hr.ns / TARGET_NS);
	printf("%-34s %10.1f ns/op   (queues a fence on the host backend's worker)\n",
	       "acquire+release(done event)", hr.ns_done);

	struct gpu_result gr;
	memset(&gr, 0, sizeof(gr));
	const char *skip = NULL;
#if SPILL_HAVE_CUDA
	if (dev_cuda_available()) {
		char sz[32];
		printf("\nbench-vmm: cuda device 0, %s object, %d reps\n",
		       sp_format_size(bytes, sz, sizeof(sz)), reps);
		bench_gpu(reps, bytes, &gr);
		printf("\n%-8s %14s %14s   (median of %d reps, %s)\n", "", "h2d MiB/s", "d2h MiB/s",
		       reps, gr.name);
		printf("%-8s %14.1f %14.1f\n", "vmm", gr.vmm_h2d / 1048576, gr.vmm_d2h / 1048576);
		printf("%-8s %14.1f %14.1f\n", "memcpy", gr.cpy_h2d / 1048576,
		       gr.cpy_d2h / 1048576);
		printf("%-8s %14.3f %14.3f   target >= %.1f\n", "ratio", gr.vmm_h2d / gr.cpy_h2d,
		       gr.vmm_d2h / gr.cpy_d2h, TARGET_RATIO);
		printf("\nbench-vmm: p2p device 0 -> 1\n");
		bench_p2p(reps, bytes, &gr);
		if (gr.p2p_ran)
			printf("p2p: vmm %.1f MiB/s, cudaMemcpyPeerAsync %.1f MiB/s, ratio %.3f   "
			       "target >= %.1f\n",
			       gr.vmm_p2p / 1048576, gr.cpy_p2p / 1048576, gr.vmm_p2p / gr.cpy_p2p,
			       TARGET_RATIO);
		else
			printf("p2p skipped: fewer than 2 devices with a peer link\n");
	} else {
		skip = "no CUDA device";
	}
#else
	skip = "built without CUDA";
#endif
	if (skip)
		printf("GPU part skipped: %s (H2D/D2H through the vmm vs cudaMemcpyAsync)\n", skip);

	if (json) {
		FILE *f = fopen(json, "w");
		if (!f) {
			fprintf(stderr, "bench-vmm: cannot write %s: %s\n", json, strerror(errno));
			return 1;
		}
		fprintf(f, "{\n  \"bench\": \"vmm\",\n");
		bench_machine_json(f);
		fprintf(f,
		        "  \"host\": {\"backend\": \"host\", \"pairs\": %ld, \"reps\": %d, "
		        "\"acquire_release_ns\": %.1f, \"acquire_release_done_ns\": %.1f, "
		        "\"target_ns\": %.0f, \"ratio\": %.3f},\n",
		        iters, reps, hr.ns, hr.ns_done, TARGET_NS, hr.ns / TARGET_NS);
		if (gr.ran)
			fprintf(f,
			        "  \"gpu\": {\"device\": \"%s\", \"bytes\": %llu, \"reps\": %d, "
			        "\"vmm_h2d_Bps\": %.0f, \"memcpy_h2d_Bps\": %.0f, \"vmm_d2h_Bps\": "
			        "%.0f, \"memcpy_d2h_Bps\": %.0f, \"vmm_p2p_Bps\": %.0f, "
			        "\"memcpy_p2p_Bps\": %.0f, \"ratio\": {\"h2d\": %.3f, "
			        "\"d2h\": %.3f, \"p2p\": %.3f}, \"target_ratio\": %.1f}\n",
			        gr.name, (unsigned long long)gr.bytes, reps, gr.vmm_h2d, gr.cpy_h2d,
			        gr.vmm_d2h, gr.cpy_d2h, gr.vmm_p2p, gr.cpy_p2p,
			        gr.vmm_h2d / gr.cpy_h2d, gr.vmm_d2h / gr.cpy_d2h,
			        gr.p2p_ran ? gr.vmm_p2p / gr.cpy_p2p : 0, TARGET_RATIO);
		else
			fprintf(f, "  \"gpu\": {\"skipped\": \"%s\"}\n", skip ? skip : "?");
		fprintf(f, "}\n");
		fclose(f);
		printf("wrote %s\n", json);
	}
	if (gr.ran && gr.p2p_ran)
		printf("vmm_vs_memcpy h2d=%.2f d2h=%.2f p2p=%.2f\n", gr.vmm_h2d / gr.cpy_h2d,
		       gr.vmm_d2h / gr.cpy_d2h, gr.vmm_p2p / gr.cpy_p2p);
	else if (gr.ran)
		printf("vmm_vs_memcpy h2d=%.2f d2h=%.2f\n", gr.vmm_h2d / gr.cpy_h2d,
		       gr.vmm_d2h / gr.cpy_d2h);
	return 0;
}

/* bench/hostpool.c — what opening the vmm's pinned host pool costs, before
 * and after it grows as needed, side by side in one run.
 *
 * Three ways to get a host pool of --host-mem bytes (default 16G), each in a
 * child process of its own (so each RSS starts from the same place): "before",
 * the one dev_host_alloc of the whole pool that vmm_open made until the pool
 * could grow; vmm_open with SPILL_HOST_GROW=0 (pinned whole at open); vmm_open
 * with SPILL_HOST_GROW=--grow (default 256M). For each: the time of the call,
 * RSS right after it, the time of the first host copy (a 1 MiB object written
 * on the host) and RSS after that, and the bytes pinned. dev_open is not
 * timed. On the host backend pinning is residency (a commit faults its pages
 * in) while a dev_host_alloc is an anonymous mapping nothing touches, so the
 * "before" row there pinned nothing in fact; on cuda (--backend cuda) it is the
 * real cudaHostAlloc. Prints the table and `hostpool open=R rss=R` (grow over
 * pinned at open), writes JSON with the machine (--json). A way refused for
 * lack of memory (the host backend will not pin more than the machine has
 * available) is reported as such.
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MiB ((uint64_t)1 << 20)

enum way { WAY_BEFORE, WAY_PIN_ALL, WAY_GROW, WAYS };

struct result {
	int ok;
	char err[256];
	double open_s, first_s;
	uint64_t rss_open, rss_first, pinned;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rss_bytes(void)
{
	unsigned long long size = 0, res = 0;
	FILE *f = fopen("/proc/self/statm", "r");
	if (!f || fscanf(f, "%llu %llu", &size, &res) != 2)
		res = 0;
	if (f)
		fclose(f);
	return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}

static void fail(struct result *r, const char *what)
{
	snprintf(r->err, sizeof(r->err), "%s: %s", what, sp_last_error());
}

/* One way, in this (child) process. */
static void measure(enum way w, enum dev_backend_kind backend, uint64_t host_mem, uint64_t grow,
                    struct result *r)
{
	memset(r, 0, sizeof(*r));
	struct dev_config dc = {.backend = backend, .ndevices = 1, .device_mem = 256 * MiB};
	struct dev_ctx *ctx;
	if (dev_open(&dc, &ctx) < 0)
		return fail(r, "dev_open");
	uint64_t rss0 = rss_bytes();
	if (w == WAY_BEFORE) {
		void *p;
		double t0 = now_s();
		if (dev_host_alloc(ctx, host_mem, &p) < 0)
			return fail(r, "dev_host_alloc");
		r->open_s = now_s() - t0;
		r->rss_open = rss_bytes() - rss0;
		t0 = now_s();
		if (backend != DEV_BACKEND_MODEL)
			memset(p, 1, MiB); /* the first host copy, as vmm_open's pool placed it */
		r->first_s = now_s() - t0;
		r->rss_first = rss_bytes() - rss0;
		r->pinned = host_mem;
		r->ok = 1;
		dev_close(ctx);
		return;
	}
	struct vmm_config c;
	memset(&c, 0, sizeof(c));
	c.host_mem = host_mem;
	c.host_grow = w == WAY_GROW ? grow : 0;
	c.device_mem = 64 * MiB;
	c.max_objects = 1024;
	c.align = 256;
	struct vmm *v;
	double t0 = now_s();
	if (vmm_open(ctx, &c, &v) < 0)
		return fail(r, "vmm_open");
	r->open_s = now_s() - t0;
	r->rss_open = rss_bytes() - rss0;
	uint64_t id;
	void *p;
	struct dev_event *ready;
	struct vmm_obj_desc d = {MiB, VMM_KIND_STASH, "first", 0, 0};
	t0 = now_s();
	if (vmm_obj_create(v, &d, &id) < 0 ||
	    vmm_acquire(v, id, VMM_HOST, VMM_OVERWRITE, &p, &ready))
		return fail(r, "the first host copy");
	if (backend != DEV_BACKEND_MODEL)
		memset(p, 1, MiB);
	if (vmm_release(v, id, VMM_HOST, NULL) < 0)
		return fail(r, "release");
	r->first_s = now_s() - t0;
	r->rss_first = rss_bytes() - rss0;
	struct vmm_stats st;
	vmm_stats_get(v, &st);
	r->pinned = (uint64_t)st.host_committed.current;
	r->ok = 1;
	vmm_close(v);
	dev_close(ctx);
}

static void run_child(enum way w, enum dev_backend_kind backend, uint64_t host_mem, uint64_t grow,
                      struct result *r)
{
	int fd[2];
	memset(r, 0, sizeof(*r));
	if (pipe(fd) < 0) {
		snprintf(r->err, sizeof(r->err), "pipe: %s", strerror(errno));
		return;
	}
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		close(fd[0]);
		struct result mine;
		measure(w, backend, host_mem, grow, &mine);
		ssize_t n = write(fd[1], &mine, sizeof(mine));
		_exit(n == (ssize_t)sizeof(mine) ? 0 : 1);
	}
	close(fd[1]);
	ssize_t n = pid > 0 ? read(fd[0], r, sizeof(*r)) : -1;
	close(fd[0]);
	int st = 0;
	if (pid > 0)
		waitpid(pid, &st, 0);
	if (n != (ssize_t)sizeof(*r))
		snprintf(r->err, sizeof(r->err), "the child died (status %#x)", st);
}

static void usage(void)
{
	fprintf(stderr, "usage: bench-hostpool [--host-mem SIZE] [--grow SIZE] "
	                "[--backend host|cuda|model] [--json FILE]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	uint64_t host_mem = 16ull << 30, grow = 256 * MiB;
	enum dev_backend_kind backend = DEV_BACKEND_HOST;
	const char *json = NULL, *bname = "host";
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
		if (!val)
			usage();
		i++;
		if (!strcmp(a, "--host-mem") && !sp_parse_size(val, &host_mem) && host_mem > 0)
			continue;
		if (!strcmp(a, "--grow") && !sp_parse_size(val, &grow) && grow > 0)
			continue;
		if (!strcmp(a, "--json")) {
			json = val;
			continue;
		}
		if (!strcmp(a, "--backend")) {
			bname = val;
			if (!strcmp(val, "host"))
				backend = DEV_BACKEND_HOST;
			else if (!strcmp(val, "cuda"))
				backend = DEV_BACKEND_CUDA;
			else if (!strcmp(val, "model"))
				backend = DEV_BACKEND_MODEL;
			else
				usage();
			continue;
		}
		usage();
	}
	char hm[32], gr[32];
	sp_format_size(host_mem, hm, sizeof(hm));
	sp_format_size(grow, gr, sizeof(gr));
	printf("bench-hostpool: a host pool of %s, %s backend (each way in a process of its "
	       "own; dev_open not timed)\n\n",
	       hm, bname);
	static const char *const names[WAYS] = {"before: one dev_host_alloc",
	                                        "vmm_open, SPILL_HOST_GROW=0", "vmm_open, grows"};
	struct result r[WAYS];
	printf("%-30s %12s %14s %14s %14s %12s\n", "", "open s", "RSS after MiB", "1st copy s",
	       "RSS after MiB", "pinned MiB");
	for (int w = 0; w < WAYS; w++) {
		run_child((enum way)w, backend, host_mem, grow, &r[w]);
		char label[64];
		snprintf(label, sizeof(label), "%s%s%s", names[w], w == WAY_GROW ? " " : "",
		         w == WAY_GROW ? gr : "");
		if (!r[w].ok) {
			printf("%-30s refused: %s\n", label, r[w].err);
			continue;
		}
		printf("%-30s %12.6f %14.1f %14.6f %14.1f %12.1f\n", label, r[w].open_s,
		       (double)r[w].rss_open / MiB, r[w].first_s, (double)r[w].rss_first / MiB,
		       (double)r[w].pinned / MiB);
	}
	if (backend == DEV_BACKEND_HOST)
		printf("(host backend: \"before\" mapped the pool and touched nothing; a commit "
		       "faults its pages in, as pinning does)\n");
	int both = r[WAY_PIN_ALL].ok && r[WAY_GROW].ok;
	if (both)
		printf("hostpool open=%.6f rss=%.6f (grows / pinned at open)\n",
		       r[WAY_GROW].open_s / r[WAY_PIN_ALL].open_s,
		       (double)r[WAY_GROW].rss_open /
		           (double)(r[WAY_PIN_ALL].rss_open ? r[WAY_PIN_ALL].rss_open : 1));
	if (json) {
		FILE *f = fopen(json, "w");
		if (!f) {
			fprintf(stderr, "bench-hostpool: cannot write %s: %s\n", json,
			        strerror(errno));
			return 1;
		}
		fprintf(f, "{\n  \"bench\": \"hostpool\",\n");
		bench_machine_json(f);
		fprintf(f,
		        "  \"backend\": \"%s\", \"host_mem\": %llu, \"grow\": %llu,\n  \"ways\": [",
		        bname, (unsigned long long)host_mem, (unsigned long long)grow);
		static const char *const keys[WAYS] = {"before", "pin_all", "grow"};
		for (int w = 0; w < WAYS; w++) {
			if (r[w].ok)
				fprintf(f,
				        "%s\n    {\"way\": \"%s\", \"open_s\": %.9f, \"rss_open\": "
				        "%llu, "
				        "\"first_s\": %.9f, \"rss_first\": %llu, \"pinned\": %llu}",
				        w ? "," : "", keys[w], r[w].open_s,
				        (unsigned long long)r[w].rss_open, r[w].first_s,
				        (unsigned long long)r[w].rss_first,
				        (unsigned long long)r[w].pinned);
			else
				fprintf(f, "%s\n    {\"way\": \"%s\", \"refused\": true}",
				        w ? "," : "", keys[w]);
		}
		fprintf(f, "\n  ]\n}\n");
		fclose(f);
		printf("wrote %s\n", json);
	}
	return 0;
}

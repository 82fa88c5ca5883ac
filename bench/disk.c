/* bench/disk.c — disk tier throughput against fio, side by side in one run.
 *
 * For each repetition (the order alternates to spread drift): fio writes then
 * reads a fresh file (io_uring engine, --direct=1, registered files and buffers,
 * same directory, block size, queue depth and total bytes), and the disk tier
 * writes then reads the same total through vmm_disk_write_async/read_async in
 * extents of --extent bytes, all tickets queued at once. Each side's figure is
 * the median of its repetitions (a shared virtual disk is noisy; every rate goes
 * to the JSON). Prints a table and ends with `disk_vs_fio read=R write=W`;
 * writes JSON with the machine (--json). Knobs: SPILL_DISK_PATH (default
 * build/bench-disk), SPILL_IO_QUEUE_DEPTH, SPILL_IO_BLOCK; flags below.
 */
#include "common/error.h"
#include "common/params.h"
#include "vmm/disk.h"
#include "bench/bench.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

struct opts {
	const char *path;
	uint64_t bytes, extent;
	int reps;
	const char *json;
	int fio;
	int read_passes;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Median of column col of the reps x 4 table (mean of the middle two if even). */
static double median(const double *all, int reps, int col)
{
	double v[BENCH_MAX_REPS];
	int n = reps < BENCH_MAX_REPS ? reps : BENCH_MAX_REPS;
	for (int i = 0; i < n; i++)
		v[i] = all[i * 4 + col];
	return bench_median(v, n);
}

static void die(const char *what)
{
	fprintf(stderr, "bench-disk: %s: %s\n", what, sp_last_error());
	exit(1);
}

/* One write pass then one read pass through the tier; rates in bytes/s. */
static void tier_run(const struct vmm_disk_config *cfg, const struct opts *o, double *wr,
                     double *rd)
{
	struct vmm_disk *d = NULL;
	if (vmm_disk_open(cfg, &d))
		die("vmm_disk_open");
	size_t n = (size_t)((o->bytes + o->extent - 1) / o->extent);
	enum { NBUF = 4 };
	uint8_t *buf[NBUF];
	for (int i = 0; i < NBUF; i++) {
		buf[i] = malloc(o->extent);
		if (!buf[i]) {
			fprintf(stderr, "bench-disk: out of memory\n");
			exit(1);
		}
		for (size_t j = 0; j < o->extent; j += 4096)
			memset(buf[i] + j, (int)(j / 4096 + (size_t)i),
			       4096 < o->extent - j ? 4096 : o->extent - j);
	}
	uint64_t *ext = calloc(n, sizeof(*ext)), *tk = calloc(n, sizeof(*tk));
	for (size_t i = 0; i < n; i++)
		if (vmm_disk_alloc(d, o->extent, &ext[i]))
			die("vmm_disk_alloc");
	for (int pass = 0; pass < 1 + o->read_passes; pass++) {
		double t0 = now_s();
		for (size_t i = 0; i < n; i++) {
			int rc =
			    pass == 0
			        ? vmm_disk_write_async(d, ext[i], buf[i % NBUF], o->extent, &tk[i])
			        : vmm_disk_read_async(d, ext[i], buf[i % NBUF], o->extent, &tk[i]);
			if (rc)
				die(pass == 0 ? "write_async" : "read_async");
		}
		for (size_t i = 0; i < n; i++) {
			if (vmm_disk_wait(d, tk[i]))
				die(pass == 0 ? "write" : "read");
			vmm_disk_ticket_release(d, tk[i]);
		}
		double rate = (double)n * (double)o->extent / (now_s() - t0);
		if (pass == 0)
			*wr = rate;
		else if (rate > *rd)
			*rd = rate;
	}
	vmm_disk_close(d);
	for (int i = 0; i < NBUF; i++)
		free(buf[i]);
	free(ext);
	free(tk);
}

/* Runs fio for one direction; returns bytes/s or a negative value on failure. */
static double fio_run(const struct opts *o, size_t block, unsigned qd, int write)
{
	char file[1200], cmd[4096];
	snprintf(file, sizeof(file), "%s/fio-bench.dat", o->path);
	if (write)
		unlink(file); /* a fresh file, preallocated by fio as the tier does */
	snprintf(cmd, sizeof(cmd),
	         "fio --name=spill-disk --filename='%s' --ioengine=io_uring --direct=1 "
	         "--fixedbufs=1 --registerfiles=1 --rw=%s --bs=%zu --iodepth=%u --size=%llu "
	         "--output-format=terse --terse-version=3 2>&1",
	         file, write ? "write" : "read", block, qd, (unsigned long long)o->bytes);
	FILE *p = popen(cmd, "r");
	if (!p)
		return -1;
	char line[8192] = "";
	double bw = -1;
	while (fgets(line, sizeof(line), p)) {
		if (strncmp(line, "3;", 2) != 0) {
			fprintf(stderr, "fio: %s", line);
			continue;
		}
		/* terse v3: field 7 read bandwidth, field 48 write bandwidth (KiB/s). */
		int field = 1;
		char *s = line;
		int want = write ? 48 : 7;
		while (field < want && (s = strchr(s, ';'))) {
			s++;
			field++;
		}
		if (s)
			bw = strtod(s, NULL) * 1024.0;
	}
	int st = pclose(p);
	if (st != 0)
		fprintf(stderr, "bench-disk: fio exited with status %d (%s)\n", st, cmd);
	return st == 0 ? bw : -1;
}

static const char *fs_name(const char *path)
{
	struct statfs s;
	if (statfs(path, &s))
		return "unknown";
	switch ((unsigned long)s.f_type) {
	case 0xEF53: return "ext4";
	case 0x58465342: return "xfs";
	case 0x9123683E: return "btrfs";
	case 0x01021994: return "tmpfs";
	case 0x794c7630: return "overlayfs";
	default: return "other";
	}
}

static void usage(void)
{
	fprintf(stderr, "usage: bench-disk [--bytes SIZE] [--extent SIZE] [--reps N] "
	                "[--read-passes N] [--json FILE] "
	                "[--no-fio]\n  directory: SPILL_DISK_PATH (default build/bench-disk); "
	                "SPILL_IO_QUEUE_DEPTH, SPILL_IO_BLOCK\n");
	exit(2);
}

int main(int argc, char **argv)
{
	struct sp_params p;
	if (sp_params_load(&p, NULL))
		die("parameters");
	struct opts o = {.path = *p.disk_path ? p.disk_path : "build/bench-disk",
	                 .bytes = 2ull << 30,
	                 .extent = 64ull << 20,
	                 .reps = 5,
	                 .json = NULL,
	                 .fio = 1,
	                 .read_passes = 1};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--no-fio")) {
			o.fio = 0;
			continue;
		}
		if (!v)
			usage();
		i++;
		if (!strcmp(a, "--bytes") && !sp_parse_size(v, &o.bytes))
			continue;
		if (!strcmp(a, "--extent") && !sp_parse_size(v, &o.extent))
			continue;
		if (!strcmp(a, "--reps") && (o.reps = atoi(v)) > 0)
			continue;
		if (!strcmp(a, "--read-passes") && (o.read_passes = atoi(v)) > 0)
			continue;
		if (!strcmp(a, "--json")) {
			o.json = v;
			continue;
		}
		usage();
	}
	if (o.extent == 0 || o.bytes < o.extent || o.extent % 4096)
		usage();
	o.bytes = o.bytes / o.extent * o.extent;

	struct vmm_disk_config cfg;
	vmm_disk_config_from_params(&p, &cfg);
	cfg.path = o.path;
	cfg.capacity = 0;
	cfg.fault = "";
	mkdir(o.path, 0700);

	char sz[32], bl[32];
	printf("bench-disk: %s (%s), %s per pass, block %s, queue depth %u, %d reps\n", o.path,
	       fs_name(o.path), sp_format_size(o.bytes, sz, sizeof(sz)),
	       sp_format_size(cfg.block, bl, sizeof(bl)), cfg.queue_depth, o.reps);
	double tw = 0, tr = 0, fw = 0, fr = 0;
	double *all = calloc((size_t)o.reps * 4, sizeof(double));
	for (int r = 0; r < o.reps; r++) {
		double w = 0, rd = 0, a = -1, b = -1;
		for (int k = 0; k < 2; k++) {
			if ((k == 0) == (r % 2 == 0)) {
				tier_run(&cfg, &o, &w, &rd);
			} else if (o.fio) {
				a = fio_run(&o, cfg.block, cfg.queue_depth, 1);
				b = fio_run(&o, cfg.block, cfg.queue_depth, 0);
			}
		}
		printf("  rep %d: tier write %7.1f MiB/s read %7.1f MiB/s", r + 1, w / 1048576,
		       rd / 1048576);
		if (o.fio)
			printf("   fio write %7.1f MiB/s read %7.1f MiB/s", a / 1048576,
			       b / 1048576);
		printf("\n");
		fflush(stdout);
		all[r * 4 + 0] = w, all[r * 4 + 1] = rd, all[r * 4 + 2] = a, all[r * 4 + 3] = b;
	}
	tw = median(all, o.reps, 0);
	tr = median(all, o.reps, 1);
	fw = median(all, o.reps, 2);
	fr = median(all, o.reps, 3);
	if (o.fio) {
		char file[1200];
		snprintf(file, sizeof(file), "%s/fio-bench.dat", o.path);
		unlink(file);
	}

	printf("\n%-8s %14s %14s   (median of %d reps)\n", "", "write MiB/s", "read MiB/s", o.reps);
	printf("%-8s %14.1f %14.1f\n", "tier", tw / 1048576, tr / 1048576);
	double rw = 0, rr = 0;
	if (o.fio && fw > 0 && fr > 0) {
		rw = tw / fw;
		rr = tr / fr;
		printf("%-8s %14.1f %14.1f\n", "fio", fw / 1048576, fr / 1048576);
		printf("%-8s %14.3f %14.3f\n", "ratio", rw, rr);
	}
	if (o.json) {
		FILE *f = fopen(o.json, "w");
		if (!f) {
			fprintf(stderr, "bench-disk: cannot write %s: %s\n", o.json,
			        strerror(errno));
			return 1;
		}
		fprintf(f, "{\n  \"bench\": \"disk\",\n");
		bench_machine_json(f);
		fprintf(f,
		        "  \"path\": \"%s\", \"fs\": \"%s\", \"bytes\": %llu, \"extent\": %llu, "
		        "\"block\": %zu, \"queue_depth\": %u, \"reps\": %d,\n",
		        o.path, fs_name(o.path), (unsigned long long)o.bytes,
		        (unsigned long long)o.extent, cfg.block, cfg.queue_depth, o.reps);
		fprintf(f, "  \"tier\": {\"write_Bps\": %.0f, \"read_Bps\": %.0f},\n", tw, tr);
		fprintf(f, "  \"fio\": {\"write_Bps\": %.0f, \"read_Bps\": %.0f},\n", fw, fr);
		fprintf(f, "  \"ratio\": {\"write\": %.3f, \"read\": %.3f},\n", rw, rr);
		fprintf(f, "  \"reps_MiBps\": [");
		for (int r = 0; r < o.reps; r++)
			fprintf(
			    f,
			    "%s\n    {\"tier_write\": %.1f, \"tier_read\": %.1f, \"fio_write\": "
			    "%.1f, \"fio_read\": %.1f}",
			    r ? "," : "", all[r * 4] / 1048576, all[r * 4 + 1] / 1048576,
			    all[r * 4 + 2] / 1048576, all[r * 4 + 3] / 1048576);
		fprintf(f, "\n  ]\n}\n");
		fclose(f);
		printf("wrote %s\n", o.json);
	}
	free(all);
	if (o.fio && fw > 0 && fr > 0)
		printf("disk_vs_fio read=%.2f write=%.2f\n", rr, rw);
	else
		printf("disk_vs_fio: no fio baseline (fio missing or failed)\n");
	return 0;
}

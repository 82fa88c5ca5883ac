/* tests/vmm/test_host_grow.c — the pinned host pool grows (cfg.host_grow,
 * SPILL_HOST_GROW) instead of being pinned whole at open. Host backend, where
 * a commit faults its pages in (pinning is residency there).
 *  grow:   a 64 GiB pool on this machine: nothing pinned at open (RSS grows by
 *          less than 16 MiB); host copies of 5 MiB from the bottom and weights
 *          from the top pin grains (1, 2, 4, 8, then 16 MiB from each end with
 *          SPILL_HOST_GROW=16M) exactly where the pool hands out space
 *          (committed = the grains touched, RSS follows), and grains stay
 *          pinned when the copies go;
 *  oracle: 1500 random operations (device and host reads and writes with
 *          pattern checks, evictions, prefetches, hints; a vmm_sync after
 *          each, and the host waiting for victims' write-downs, so every
 *          decision sees the same state) under pressure, each run twice: a 6 MiB host pool with a disk tier pinned up front and
 *          the same pool growing in 256 KiB grains; a 32 MiB pool pinned up
 *          front and a 64 GiB one growing in 1 MiB grains. Same stats (all but
 *          host_committed), same (link x kind) matrix, same bytes at the end;
 *  fail:   SPILL_HOST_PIN_LIMIT (dev_config.host_pin_limit) of 3 MiB under a
 *          64 MiB pool with a disk tier: one commit fails, the warning names
 *          the sizes, the pool holds what is pinned, copies go to disk and
 *          every read is right; without a disk tier the request that cannot
 *          fit is -ENOMEM saying the pool was cut; with SPILL_HOST_GROW=0
 *          vmm_open fails naming SPILL_HOST_MEM.
 * argv[1]: grow, oracle or fail (default: all three).
 */
#include "tests/vmm/vmm_test.h"

#include <fcntl.h>

#define MiB ((uint64_t)1 << 20)
#define GiB ((uint64_t)1 << 30)

static uint64_t rss_bytes(void)
{
	unsigned long long size = 0, res = 0;
	FILE *f = fopen("/proc/self/statm", "r");
	CHECK(f && fscanf(f, "%llu %llu", &size, &res) == 2);
	fclose(f);
	return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}

static uint64_t committed(struct vmm *v)
{
	struct vmm_stats st;
	vmm_stats_get(v, &st);
	CHECK(st.host_committed.current == st.host_committed.peak);
	return (uint64_t)st.host_committed.current;
}

/* What the pool pins at one end for used bytes there: from each end its
 * grains double from grow / 16 up to grow (vmm.c host_grains). */
static uint64_t reach(uint64_t used, uint64_t grow)
{
	uint64_t at = 0, sz = grow / 16;
	while (at < used) {
		at += sz;
		sz = 2 * sz < grow ? 2 * sz : grow;
	}
	return at;
}

/* ---- grow ----------------------------------------------------------------------------- */

static void test_grow(void)
{
	const uint64_t grain = 16 * MiB, obj = 5 * MiB;
	struct dev_ctx *ctx = vt_open_host(1, 64 * MiB);
	struct vmm_config c = vt_config(16 * MiB, 0, 64 * GiB);
	c.host_grow = grain;
	uint64_t rss0 = rss_bytes();
	struct vmm *v;
	CHECK_OK(vmm_open(ctx, &c, &v));
	uint64_t rss_open = rss_bytes() - rss0, used, cap;
	CHECK_MSG(rss_open < 16 * MiB, "RSS grew by %" PRIu64 " at open", rss_open);
	CHECK(committed(v) == 0);
	CHECK_OK(vmm_place_usage(v, VMM_HOST, &used, &cap));
	CHECK(cap == 64 * GiB && used == 0);
	printf("open: 64 GiB host pool, RSS +%.1f MiB, 0 pinned\n", (double)rss_open / MiB);
	uint64_t low[10], high[3];
	for (int i = 0; i < 10; i++) { /* activations: from the bottom */
		low[i] = vt_create(v, obj, VMM_KIND_STASH, NULL);
		vt_write_host(v, low[i], obj, 100 + (uint64_t)i);
		uint64_t want = reach((uint64_t)(i + 1) * obj, grain), got = committed(v);
		uint64_t grew = rss_bytes() - rss0;
		CHECK_MSG(got == want, "%d copies: %" PRIu64 " pinned, %" PRIu64 " expected", i + 1,
		          got, want);
		CHECK_MSG(grew + 4 * MiB >= got, "%" PRIu64 " pinned, RSS only +%" PRIu64, got,
		          grew);
	}
	uint64_t low_pinned = committed(v);
	for (int i = 0; i < 3; i++) { /* weights: from the top */
		high[i] = vt_create(v, obj, VMM_KIND_WEIGHT, NULL);
		vt_write_host(v, high[i], obj, 200 + (uint64_t)i);
		uint64_t want = low_pinned + reach((uint64_t)(i + 1) * obj, grain);
		CHECK_MSG(committed(v) == want,
		          "weight %d: %" PRIu64 " pinned, %" PRIu64 " expected", i, committed(v),
		          want);
	}
	printf("13 copies of 5 MiB (65 MiB): %" PRIu64 " MiB pinned in grains of 1, 2, 4, 8, 16, "
	       "16... MiB from each end, RSS +%.1f MiB\n",
	       committed(v) / MiB, (double)(rss_bytes() - rss0) / MiB);
	for (int i = 0; i < 10; i++)
		CHECK(vt_read_host(v, low[i], obj, 100 + (uint64_t)i) == 0);
	for (int i = 0; i < 3; i++)
		CHECK(vt_read_host(v, high[i], obj, 200 + (uint64_t)i) == 0);
	uint64_t before = committed(v);
	for (int i = 0; i < 10; i++)
		CHECK_OK(vmm_obj_destroy(v, low[i]));
	CHECK(committed(v) == before); /* grains stay pinned */
	struct vmm_stats st;
	vmm_stats_get(v, &st);
	CHECK(st.host_commit_fails.total == 0);
	vmm_close(v);
	dev_close(ctx);
}

/* ---- random traffic ----------------------------------------------------------------- */

#define NOBJ 24
#define NOPS 1500

struct traffic {
	uint64_t host_mem, host_grow, pin_limit;
	int disk;
};

struct outcome {
	struct vmm_stats st;
	uint64_t link[4][4][VMM_KINDS]; /* places 0, 1, host, disk */
	uint64_t xfer[VMM_XFER_KINDS];
	uint64_t hash; /* every object's bytes at the end */
	uint64_t host_cap;
};

static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static const int places[4] = {0, 1, VMM_HOST, VMM_DISK};

static void run_traffic(const struct traffic *t, uint64_t seed, struct outcome *out)
{
	const char *dir = t->disk ? vt_tmpdir() : NULL;
	struct dev_config dc;
	memset(&dc, 0, sizeof(dc));
	dc.backend = DEV_BACKEND_HOST;
	dc.ndevices = 2;
	dc.device_mem = 8 * MiB;
	dc.profile = "";
	dc.threads = 1;
	dc.host_pin_limit = t->pin_limit;
	struct dev_ctx *ctx;
	CHECK_OK(dev_open(&dc, &ctx));
	struct vmm_config c = vt_config(2 * MiB, 0, t->host_mem);
	c.host_grow = t->host_grow;
	/* the host waits for a victim's write-down: with stream-ordered reuse
	 * it is left in flight within the operation, and whether it has landed
	 * when the engine next looks is timing (two runs of one config differ
	 * by a host allocation now and then, 3 runs in 6) */
	c.host_waits = 1;
	if (dir)
		vt_config_disk(&c, dir, 0, "");
	struct vmm *v;
	CHECK_OK(vmm_open(ctx, &c, &v));
	struct dev_stream *s[2];
	struct dev_event *done[2];
	for (int d = 0; d < 2; d++) {
		CHECK_OK(dev_stream_create(ctx, d, &s[d]));
		CHECK_OK(dev_event_create(ctx, &done[d]));
	}
	uint64_t r = seed * 0x9e3779b97f4a7c15ull | 1, id[NOBJ], ver[NOBJ] = {0}, next = 0;
	size_t bytes[NOBJ];
	static const enum vmm_kind kinds[3] = {VMM_KIND_WEIGHT, VMM_KIND_GRAD, VMM_KIND_STASH};
	for (int i = 0; i < NOBJ; i++) {
		bytes[i] = (size_t)(1 + rng_next(&r) % 8) * (64u << 10);
		id[i] = vt_create(v, bytes[i], kinds[rng_next(&r) % 3], NULL);
	}
	for (int op = 0; op < NOPS; op++) {
		int i = (int)(rng_next(&r) % NOBJ), d = (int)(rng_next(&r) % 2);
		int what = (int)(rng_next(&r) % 10);
		switch (what) {
		case 0:
		case 1:
		case 2:
			ver[i] = ++next;
			vt_write_dev(v, id[i], d, what ? VMM_WRITE : VMM_OVERWRITE, s[d], done[d],
			             bytes[i], ver[i]);
			CHECK_OK(dev_event_sync(done[d]));
			break;
		case 3:
		case 4:
			if (ver[i])
				CHECK_MSG(
				    vt_read_dev(v, id[i], d, s[d], done[d], bytes[i], ver[i]) == 0,
				    "op %d: object %d on device %d", op, i, d);
			break;
		case 5:
			ver[i] = ++next;
			vt_write_host(v, id[i], bytes[i], ver[i]);
			break;
		case 6:
			if (ver[i])
				CHECK_MSG(vt_read_host(v, id[i], bytes[i], ver[i]) == 0,
				          "op %d: object %d on the host", op, i);
			break;
		case 7: CHECK_OK(vmm_evict(v, id[i], d)); break;
		case 8:
			if (t->disk)
				CHECK_OK(vmm_evict(v, id[i], VMM_HOST));
			else if (ver[i])
				CHECK_OK(vmm_prefetch(v, id[i], d));
			break;
		default: CHECK_OK(vmm_hint(v, id[i], rng_next(&r) % 1000)); break;
		}
		CHECK_OK(vmm_sync(v));
	}
	uint64_t h = 1469598103934665603ull;
	for (int i = 0; i < NOBJ; i++) {
		if (!ver[i])
			continue;
		void *p;
		struct dev_event *ready;
		CHECK_OK(vmm_acquire(v, id[i], VMM_HOST, VMM_READ, &p, &ready));
		CHECK(vt_check_host(p, bytes[i], ver[i]) == 0);
		const unsigned char *b = p;
		for (size_t k = 0; k < bytes[i]; k++)
			h = (h ^ b[k]) * 1099511628211ull;
		CHECK_OK(vmm_release(v, id[i], VMM_HOST, NULL));
	}
	CHECK_OK(vmm_sync(v));
	memset(out, 0, sizeof(*out));
	out->hash = h;
	vmm_stats_get(v, &out->st);
	for (int a = 0; a < 4; a++)
		for (int b = 0; b < 4; b++)
			for (int k = 0; k < VMM_KINDS; k++)
				out->link[a][b][k] = vmm_link_bytes(v, places[a], places[b], k);
	for (int k = 0; k < VMM_XFER_KINDS; k++)
		out->xfer[k] = vmm_xfer_bytes(v, (enum vmm_xfer_kind)k);
	uint64_t used;
	CHECK_OK(vmm_place_usage(v, VMM_HOST, &used, &out->host_cap));
	vt_check_accounting(v, ctx, 2);
	for (int d = 0; d < 2; d++) {
		CHECK_OK(dev_stream_destroy(s[d]));
		CHECK_OK(dev_event_destroy(done[d]));
	}
	vmm_close(v);
	dev_close(ctx);
	if (dir)
		vt_rmdir(dir);
}

/* Two runs made the same decisions: every stat equal but the pinned bytes and
 * the blocking waits (whether a transfer had landed when the vmm looked is
 * the host's timing, not a decision; two runs of one config differ there). */
static void same(const char *what, const struct outcome *a, const struct outcome *b)
{
	struct vmm_stats x = a->st, y = b->st;
	memset(&x.host_committed, 0, sizeof(x.host_committed));
	memset(&y.host_committed, 0, sizeof(y.host_committed));
	x.waits = y.waits;
	x.fence_waits = y.fence_waits;
	for (size_t k = 0; k < vmm_stats_desc_count; k++) {
		const struct sp_stat_desc *sd = &vmm_stats_desc[k];
		const int64_t *px = (const int64_t *)((const char *)&x + sd->offset);
		const int64_t *py = (const int64_t *)((const char *)&y + sd->offset);
		int n = sd->kind == SP_STAT_COUNT ? 3 : 1;
		CHECK_MSG(memcmp(px, py, sizeof(*px) * (size_t)n) == 0,
		          "%s: %s differs: %" PRId64 " vs %" PRId64, what, sd->name, px[n - 1],
		          py[n - 1]);
	}
	CHECK_MSG(memcmp(a->link, b->link, sizeof(a->link)) == 0, "%s: the link matrix differs",
	          what);
	CHECK_MSG(memcmp(a->xfer, b->xfer, sizeof(a->xfer)) == 0, "%s: the volumes differ", what);
	CHECK_MSG(a->hash == b->hash, "%s: the contents differ", what);
	printf("%s: same stats, volumes and bytes (h2d %" PRIu64 " d2h %" PRIu64 " p2p %" PRIu64
	       " host->disk %" PRIu64 " disk->host %" PRIu64 ", %" PRId64 " evictions); pinned "
	       "%.2f MiB vs %.2f MiB\n",
	       what, a->xfer[VMM_XFER_H2D], a->xfer[VMM_XFER_D2H], a->xfer[VMM_XFER_P2P],
	       a->xfer[VMM_XFER_H2DISK], a->xfer[VMM_XFER_DISK2H], a->st.evictions.total,
	       (double)a->st.host_committed.peak / MiB, (double)b->st.host_committed.peak / MiB);
}

static void test_oracle(void)
{
	for (uint64_t seed = 1; seed <= 2; seed++) {
		struct outcome up, grown;
		/* host pressure: the pool (6 MiB) holds half of the objects, the rest on disk */
		run_traffic(&(struct traffic){6 * MiB, 0, 0, 1}, seed, &up);
		run_traffic(&(struct traffic){6 * MiB, 256u << 10, 0, 1}, seed, &grown);
		CHECK(up.xfer[VMM_XFER_H2DISK] > 0 && up.xfer[VMM_XFER_DISK2H] > 0 &&
		      up.xfer[VMM_XFER_D2H] > 0);
		CHECK(up.st.host_committed.peak == (int64_t)(6 * MiB));
		CHECK(grown.st.host_committed.peak <= (int64_t)(6 * MiB));
		same("6 MiB host pool, pinned at open vs in 256 KiB grains", &up, &grown);
		/* no host pressure: a small pool pinned up front vs 64 GiB growing */
		struct outcome small, big;
		run_traffic(&(struct traffic){32 * MiB, 0, 0, 0}, seed, &small);
		run_traffic(&(struct traffic){64 * GiB, 1 * MiB, 0, 0}, seed, &big);
		CHECK(small.xfer[VMM_XFER_D2H] > 0 && small.st.evictions.total > 100);
		CHECK(big.st.host_committed.peak <= (int64_t)(32 * MiB));
		same("32 MiB host pool pinned at open vs 64 GiB growing in 1 MiB grains", &small,
		     &big);
	}
}

/* ---- commit failures ------------------------------------------------------------------- */

/* Runs fn with stderr (where warnings go) in a file; returns what was written. */
static char *capture_stderr(void (*fn)(void *), void *arg)
{
	char path[] = "/tmp/spill-test-host-grow-XXXXXX";
	int fd = mkstemp(path);
	CHECK(fd >= 0);
	unlink(path);
	fflush(stderr);
	int saved = dup(2);
	CHECK(saved >= 0 && dup2(fd, 2) == 2);
	fn(arg);
	fflush(stderr);
	CHECK(dup2(saved, 2) == 2);
	close(saved);
	off_t n = lseek(fd, 0, SEEK_END);
	char *buf = calloc(1, (size_t)n + 1);
	CHECK(buf && pread(fd, buf, (size_t)n, 0) == n);
	close(fd);
	return buf;
}

struct capped_run {
	struct outcome out;
};

static void capped_traffic(void *arg)
{
	struct capped_run *cr = arg;
	run_traffic(&(struct traffic){64 * MiB, 1 * MiB, 3 * MiB, 1}, 1, &cr->out);
}

static void test_fail(void)
{
	/* 1. a disk tier: the pool is cut to what is pinned, copies go to disk */
	struct capped_run cr;
	char *log = capture_stderr(capped_traffic, &cr);
	fputs(log, stdout);
	CHECK_MSG(strstr(log, "more of the host pool for '") &&
	              strstr(log, "pinned of SPILL_HOST_MEM 64.00 MiB") &&
	              strstr(log, "SPILL_HOST_PIN_LIMIT is 3.00 MiB") &&
	              strstr(log, "the host pool holds") && strstr(log, "goes to disk"),
	          "the warning: %s", log);
	free(log);
	CHECK(cr.out.st.host_commit_fails.total == 1);
	CHECK(cr.out.st.host_committed.peak > 0 &&
	      cr.out.st.host_committed.peak <= (int64_t)(3 * MiB));
	CHECK(cr.out.host_cap == (uint64_t)cr.out.st.host_committed.peak);
	CHECK(cr.out.xfer[VMM_XFER_H2DISK] > 0 && cr.out.xfer[VMM_XFER_DISK2H] > 0);
	printf("pin limit 3 MiB under a 64 MiB pool: cut to %.2f MiB, every read right, %" PRIu64
	       " bytes to disk, %" PRIu64 " back\n",
	       (double)cr.out.host_cap / MiB, cr.out.xfer[VMM_XFER_H2DISK],
	       cr.out.xfer[VMM_XFER_DISK2H]);

	/* 2. no disk tier: what cannot fit is -ENOMEM, saying why; nothing is lost */
	struct dev_config dc;
	memset(&dc, 0, sizeof(dc));
	dc.backend = DEV_BACKEND_HOST;
	dc.ndevices = 1;
	dc.device_mem = 8 * MiB;
	dc.profile = "";
	dc.threads = 1;
	dc.host_pin_limit = 3 * MiB;
	struct dev_ctx *ctx;
	CHECK_OK(dev_open(&dc, &ctx));
	struct vmm_config c = vt_config(2 * MiB, 0, 64 * MiB);
	c.host_grow = 1 * MiB;
	struct vmm *v;
	CHECK_OK(vmm_open(ctx, &c, &v));
	uint64_t a = vt_create(v, 1 * MiB, VMM_KIND_STASH, "a");
	uint64_t b = vt_create(v, 1 * MiB, VMM_KIND_STASH, "b");
	uint64_t x = vt_create(v, 1 * MiB, VMM_KIND_STASH, "x");
	vt_write_host(v, a, 1 * MiB, 1);
	vt_write_host(v, b, 1 * MiB, 2);
	void *p;
	struct dev_event *ready;
	int rc = vmm_acquire(v, x, VMM_HOST, VMM_OVERWRITE, &p, &ready);
	CHECK_MSG(rc == -ENOMEM && strstr(sp_last_error(), "the host pool was cut to what could "
	                                                   "be pinned"),
	          "%d: %s", rc, sp_last_error());
	printf("no disk tier: %s\n", sp_last_error());
	CHECK(vt_read_host(v, a, 1 * MiB, 1) == 0 && vt_read_host(v, b, 1 * MiB, 2) == 0);
	uint64_t used, cap;
	CHECK_OK(vmm_place_usage(v, VMM_HOST, &used, &cap));
	CHECK(cap == committed(v) && cap < 3 * MiB && used == 2 * MiB);
	/* the device still works: x written there, a read there */
	struct dev_stream *s;
	struct dev_event *done;
	CHECK_OK(dev_stream_create(ctx, 0, &s));
	CHECK_OK(dev_event_create(ctx, &done));
	vt_write_dev(v, x, 0, VMM_OVERWRITE, s, done, 1 * MiB, 3);
	CHECK(vt_read_dev(v, x, 0, s, done, 1 * MiB, 3) == 0);
	CHECK_OK(dev_stream_destroy(s));
	CHECK_OK(dev_event_destroy(done));
	vmm_close(v);

	/* 3. pinned whole at open (SPILL_HOST_GROW=0) past the limit: open fails */
	c.host_grow = 0;
	rc = vmm_open(ctx, &c, &v);
	CHECK_MSG(rc == -ENOMEM && strstr(sp_last_error(), "SPILL_HOST_MEM 64.00 MiB") &&
	              strstr(sp_last_error(), "SPILL_HOST_PIN_LIMIT"),
	          "%d: %s", rc, sp_last_error());
	printf("SPILL_HOST_GROW=0: %s\n", sp_last_error());
	dev_close(ctx);
}

int main(int argc, char **argv)
{
	const char *part = argc > 1 ? argv[1] : "";
	if (!*part || !strcmp(part, "grow"))
		test_grow();
	if (!*part || !strcmp(part, "oracle"))
		test_oracle();
	if (!*part || !strcmp(part, "fail"))
		test_fail();
	TEST_PASS();
}

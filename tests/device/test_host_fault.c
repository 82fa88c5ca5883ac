/* tests/device/test_host_fault.c — the host backend faults, as a GPU's MMU
 * would, when anything touches device memory that is not resident: a child
 * process that reads an unmapped range, one whose copy (on a stream worker)
 * writes into one, and one whose kernel reads one must each die of SIGSEGV;
 * a child that touches the same range while it is mapped exits cleanly.
 * Each child is this program re-executed (tests/child.h).
 * Then device failures (dev_fail, SPILL_HOST_FAIL): the failed device's kernels,
 * copies, memsets and callbacks do not run, its events and stream syncs fail
 * with -EIO, copies touching it on healthy streams are dropped and fail only
 * their record interval, waits keep their order, other devices and memory
 * calls are unaffected; "DEV:N" fails DEV exactly at its Nth kernel and bad
 * values are refused; the model backend answers -ENOTSUP. */
#include "common/params.h"
#include "common/stats.h"
#include "device/device.h"
#include "tests/test.h"
#include "tests/child.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile uint64_t sink;

static void read_kernel(const void *a)
{
	const uint64_t *p = *(const uint64_t *const *)a;
	sink = p[0];
}

static int child(const char *what)
{
	struct dev_config cfg = {
	    .backend = DEV_BACKEND_HOST, .ndevices = 1, .device_mem = 16 << 20};
	struct dev_ctx *ctx;
	CHECK_OK(dev_open(&cfg, &ctx));
	struct dev_info in;
	CHECK_OK(dev_info(ctx, 0, &in));
	size_t g = in.granularity;
	void *va, *h;
	struct dev_phys *ph;
	struct dev_stream *s;
	CHECK_OK(dev_va_reserve(ctx, 0, 2 * g, &va));
	CHECK_OK(dev_phys_create(ctx, 0, g, &ph));
	CHECK_OK(dev_host_alloc(ctx, g, &h));
	CHECK_OK(dev_stream_create(ctx, 0, &s));
	CHECK_OK(dev_va_map(ctx, va, g, ph, 0));
	memset(va, 1, g); /* mapped: fine */
	if (strcmp(what, "mapped") == 0) {
		sink = ((volatile uint64_t *)va)[7];
		dev_close(ctx);
		return 0;
	}
	CHECK_OK(dev_va_unmap(ctx, va, g));
	if (strcmp(what, "read") == 0)
		sink = ((volatile uint64_t *)va)[7];
	else if (strcmp(what, "never-mapped") == 0)
		sink = ((volatile uint64_t *)va)[g / 8 + 1];
	else if (strcmp(what, "copy") == 0)
		CHECK_OK(dev_memcpy_async(s, va, 0, h, DEV_HOST, g));
	else if (strcmp(what, "kernel") == 0) {
		static const struct dev_kernel k = {"read", read_kernel, NULL};
		CHECK_OK(dev_launch(s, &k, &va, sizeof(va), (struct dev_cost){0, 8, 0}));
	}
	CHECK_OK(dev_stream_sync(s));
	return 3; /* should have died */
}

/* ---- dev_fail / dev_failed / SPILL_HOST_FAIL ----------------------------------------
 * A device that fails drops the work of its streams and every copy touching
 * its memory; events covering dropped work fail with -EIO; healthy devices and
 * waits are unaffected. */

#define FB (64 << 10) /* bytes of each test buffer */

/* A host callback that blocks its stream until the test opens the gate. */
struct gate {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int open, entered;
};
static struct gate gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};

static void gate_cb(void *arg)
{
	struct gate *g = arg;
	pthread_mutex_lock(&g->mu);
	g->entered++;
	pthread_cond_broadcast(&g->cv);
	while (!g->open)
		pthread_cond_wait(&g->cv, &g->mu);
	pthread_mutex_unlock(&g->mu);
}

static void gate_close(struct gate *g)
{
	pthread_mutex_lock(&g->mu);
	g->open = 0;
	g->entered = 0;
	pthread_mutex_unlock(&g->mu);
}

static void gate_open(struct gate *g)
{
	pthread_mutex_lock(&g->mu);
	g->open = 1;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mu);
}

static void gate_wait_entered(struct gate *g, int n)
{
	pthread_mutex_lock(&g->mu);
	while (g->entered < n)
		pthread_cond_wait(&g->cv, &g->mu);
	pthread_mutex_unlock(&g->mu);
}

/* Kernels and callbacks that leave a trace in host memory. */
static int ran[128];
struct mark_args {
	int *slot;
	int value;
};
static void mark_kernel_cpu(const void *a)
{
	const struct mark_args *m = a;
	*m->slot = m->value;
}
static const struct dev_kernel mark_kernel = {"mark", mark_kernel_cpu, NULL};
static void mark_cb(void *arg)
{
	*(int *)arg = 1;
}

struct fill_args {
	unsigned char *p;
	size_t n;
	int v;
};
static void fill_kernel_cpu(const void *a)
{
	const struct fill_args *f = a;
	memset(f->p, f->v, f->n);
}
static const struct dev_kernel fill_kernel = {"fill", fill_kernel_cpu, NULL};

static void mark(struct dev_stream *s, int slot, int value)
{
	struct mark_args m = {&ran[slot], value};
	CHECK_OK(dev_launch(s, &mark_kernel, &m, sizeof(m), (struct dev_cost){0, 0, 0}));
}

static void fill(struct dev_stream *s, void *p, size_t n, int v)
{
	struct fill_args f = {p, n, v};
	CHECK_OK(dev_launch(s, &fill_kernel, &f, sizeof(f), (struct dev_cost){0, (double)n, 0}));
}

static int all_bytes(const void *p, size_t n, int v)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		if (b[i] != (unsigned char)v)
			return 0;
	return 1;
}

static int late_failures; /* checks that let the others run first */

static struct dev_ctx *open_host(int n, const char *host_fail)
{
	struct dev_config cfg = {.backend = DEV_BACKEND_HOST,
	                         .ndevices = n,
	                         .device_mem = 16 << 20,
	                         .profile = "",
	                         .threads = 1,
	                         .host_fail = host_fail};
	struct dev_ctx *ctx;
	CHECK_OK(dev_open(&cfg, &ctx));
	return ctx;
}

static void fail_semantics(void)
{
	struct dev_ctx *ctx = open_host(3, NULL);
	void *b[3], *h, *h2;
	struct dev_stream *s[3], *s0b, *sh;
	struct dev_event *e[3], *pre, *ew, *eh;
	for (int d = 0; d < 3; d++) {
		CHECK_OK(dev_mem_alloc(ctx, d, FB, &b[d]));
		memset(b[d], 0x10 + d, FB);
		CHECK_OK(dev_stream_create(ctx, d, &s[d]));
		CHECK_OK(dev_event_create(ctx, &e[d]));
	}
	CHECK_OK(dev_stream_create(ctx, 0, &s0b));
	CHECK_OK(dev_stream_create(ctx, DEV_HOST, &sh));
	CHECK_OK(dev_event_create(ctx, &pre));
	CHECK_OK(dev_event_create(ctx, &ew));
	CHECK_OK(dev_event_create(ctx, &eh));
	CHECK_OK(dev_host_alloc(ctx, FB, &h));
	CHECK_OK(dev_host_alloc(ctx, FB, &h2));
	memset(h, 0x77, FB);
	memset(h2, 0x66, FB);

	/* before: everything runs; dev_failed says 0 */
	for (int d = 0; d < 3; d++)
		CHECK(dev_failed(ctx, d) == 0);
	mark(s[0], 0, 1);
	CHECK_OK(dev_event_record(pre, s[0]));
	CHECK_OK(dev_event_sync(pre));
	CHECK(ran[0] == 1);

	/* bad indices */
	CHECK(dev_fail(ctx, -1) == -EINVAL);
	CHECK(dev_fail(ctx, 3) == -EINVAL);
	CHECK(dev_fail(ctx, DEV_HOST) == -EINVAL);
	CHECK(dev_fail(NULL, 0) == -EINVAL);
	CHECK(dev_failed(ctx, -1) == 0 && dev_failed(ctx, 3) == 0 && dev_failed(NULL, 0) == 0);
	for (int d = 0; d < 3; d++)
		CHECK(dev_failed(ctx, d) == 0);

	/* a wait queued on device 0 behind a gate on healthy device 2: the record
	 * after it must stay pending while the gate is closed ("waits still wait") */
	gate_close(&gate);
	struct dev_event *g2;
	CHECK_OK(dev_event_create(ctx, &g2));
	CHECK_OK(dev_host_callback(s[2], gate_cb, &gate));
	CHECK_OK(dev_event_record(g2, s[2]));
	gate_wait_entered(&gate, 1);

	CHECK_OK(dev_fail(ctx, 0));
	CHECK(dev_failed(ctx, 0) == 1 && dev_failed(ctx, 1) == 0 && dev_failed(ctx, 2) == 0);
	CHECK_OK(dev_fail(ctx, 0)); /* again: still failed, no error */
	CHECK(dev_failed(ctx, 0) == 1);
	/* an event completed before the failure keeps its answer */
	CHECK(dev_event_query(pre) == 0);
	CHECK(dev_event_sync(pre) == 0);

	/* work on device 0's streams: nothing runs */
	mark(s[0], 1, 1);
	fill(s[0], b[0], FB, 0xaa);
	CHECK_OK(dev_memset_async(s[0], b[0], 0, 0xbb, FB));
	CHECK_OK(dev_memcpy_async(s[0], b[0], 0, h, DEV_HOST, FB));  /* H2D */
	CHECK_OK(dev_memcpy_async(s[0], h2, DEV_HOST, b[0], 0, FB)); /* D2H */
	CHECK_OK(dev_memcpy_async(s[0], b[1], 1, b[0], 0, FB));      /* P2P out */
	CHECK_OK(dev_host_callback(s[0], mark_cb, &ran[2]));
	CHECK_OK(dev_event_record(e[0], s[0]));
	mark(s0b, 3, 1);
	CHECK_OK(dev_host_callback(s0b, mark_cb, &ran[4]));
	/* the wait on g2 (gate closed) holds what follows on s0b */
	CHECK_OK(dev_stream_wait_event(s0b, g2));
	CHECK_OK(dev_event_record(ew, s0b));
	CHECK_MSG(dev_event_sync(e[0]) == -EIO, "%s", sp_last_error());
	CHECK_MSG(strstr(sp_last_error(), "device 0") != NULL, "%s", sp_last_error());
	CHECK(dev_event_query(e[0]) == -EIO);
	CHECK(dev_event_query(e[0]) == -EIO); /* stays failed */
	CHECK(dev_stream_sync(s[0]) == -EIO);
	/* ew is behind the wait on the gated g2: still pending */
	struct timespec ts = {0, 20 * 1000 * 1000};
	nanosleep(&ts, NULL);
	CHECK_MSG(dev_event_query(ew) == -EAGAIN,
	          "a wait on a failed device's stream did not wait");
	/* a healthy stream waiting on ew keeps its order too: its kernel runs only
	 * after ew completes (with an error) */
	CHECK_OK(dev_stream_wait_event(s[1], ew));
	mark(s[1], 5, 1);
	CHECK_OK(dev_event_record(e[1], s[1]));
	nanosleep(&ts, NULL);
	CHECK(ran[5] == 0 && dev_event_query(e[1]) == -EAGAIN);
	gate_open(&gate);
	CHECK_OK(dev_event_sync(g2));
	CHECK(dev_event_sync(ew) == -EIO);
	CHECK_MSG(dev_event_sync(e[1]) == 0, "a healthy stream that waited on a failed event: %s",
	          sp_last_error());
	CHECK(ran[5] == 1);
	CHECK(ran[1] == 0 && ran[2] == 0 && ran[3] == 0 && ran[4] == 0);
	CHECK_MSG(all_bytes(b[0], FB, 0x10), "device 0's memory was written after its failure");
	CHECK_MSG(all_bytes(h2, FB, 0x66), "a D2H from the failed device ran");
	CHECK_MSG(all_bytes(b[1], FB, 0x11), "a P2P from the failed device ran");
	CHECK(dev_stream_sync(s0b) == -EIO);

	/* copies touching device 0 on healthy streams are dropped; the next event
	 * there fails, a later record on that stream succeeds */
	uint64_t p2p0 = dev_copied_bytes(ctx, DEV_COPY_P2P);
	CHECK_OK(dev_memcpy_async(s[1], b[1], 1, b[0], 0, FB)); /* P2P from 0 on 1's stream */
	CHECK_OK(dev_event_record(e[1], s[1]));
	CHECK(dev_event_sync(e[1]) == -EIO);
	CHECK(dev_event_query(e[1]) == -EIO);
	CHECK(all_bytes(b[1], FB, 0x11));
	CHECK_MSG(dev_stream_sync(s[1]) == 0, "a healthy stream's sync: %s", sp_last_error());
	CHECK_MSG(dev_copied_bytes(ctx, DEV_COPY_P2P) == p2p0,
	          "dev_copied_bytes counts a dropped copy (P2P +%" PRIu64 " bytes)",
	          dev_copied_bytes(ctx, DEV_COPY_P2P) - p2p0);
	mark(s[1], 6, 1);
	CHECK_OK(dev_event_record(e[1], s[1]));
	CHECK_MSG(dev_event_sync(e[1]) == 0, "the record after a failed one: %s", sp_last_error());
	CHECK(dev_event_query(e[1]) == 0 && ran[6] == 1);
	/* a copy into device 0 from a healthy stream, then a good copy, one record:
	 * the record fails (it covers the dropped one), the good copy ran */
	CHECK_OK(dev_memcpy_async(s[1], b[0], 0, b[1], 1, FB));
	CHECK_OK(dev_memcpy_async(s[1], b[1], 1, h, DEV_HOST, FB));
	CHECK_OK(dev_event_record(e[1], s[1]));
	CHECK(dev_event_sync(e[1]) == -EIO);
	CHECK(all_bytes(b[0], FB, 0x10) && all_bytes(b[1], FB, 0x77));
	CHECK_OK(dev_event_record(e[1], s[1])); /* nothing since: fine */
	CHECK_OK(dev_event_sync(e[1]));
	/* the host stream: a D2H from device 0 is dropped, the next one is fine */
	memset(h2, 0x66, FB);
	CHECK_OK(dev_memcpy_async(sh, h2, DEV_HOST, b[0], 0, FB));
	CHECK_OK(dev_event_record(eh, sh));
	CHECK(dev_event_sync(eh) == -EIO);
	CHECK(all_bytes(h2, FB, 0x66));
	CHECK_OK(dev_memcpy_async(sh, h2, DEV_HOST, b[2], 2, FB));
	CHECK_OK(dev_event_record(eh, sh));
	CHECK_OK(dev_event_sync(eh));
	CHECK(all_bytes(h2, FB, 0x12));
	CHECK_OK(dev_stream_sync(sh));

	/* device 2 is unaffected */
	fill(s[2], b[2], FB, 0x5a);
	CHECK_OK(dev_memcpy_async(s[2], h2, DEV_HOST, b[2], 2, FB));
	CHECK_OK(dev_memset_async(s[2], b[2], 2, 0x3c, FB / 2));
	CHECK_OK(dev_host_callback(s[2], mark_cb, &ran[7]));
	CHECK_OK(dev_memcpy_async(s[2], b[1], 1, b[2], 2, FB)); /* P2P 2 -> 1 */
	CHECK_OK(dev_event_record(e[2], s[2]));
	CHECK_OK(dev_event_sync(e[2]));
	CHECK_OK(dev_stream_sync(s[2]));
	CHECK(ran[7] == 1 && all_bytes(h2, FB, 0x5a));
	CHECK(all_bytes(b[2], FB / 2, 0x3c) && all_bytes((char *)b[2] + FB / 2, FB / 2, 0x5a));
	CHECK(all_bytes(b[1], FB / 2, 0x3c));

	CHECK(dev_stream_sync(s[0]) == -EIO); /* still */

	/* wait_any over a failed event: it counts as complete (device.h), the
	 * query tells the error */
	{
		CHECK_OK(dev_event_record(e[0], s[0]));
		struct dev_event *ev[1] = {e[0]};
		int idx = -1;
		CHECK_OK(dev_event_wait_any(ev, 1, &idx));
		CHECK(idx == 0 && dev_event_query(e[0]) == -EIO);
	}

	/* memory calls on the failed device keep working */
	struct dev_info in;
	CHECK_OK(dev_info(ctx, 0, &in));
	void *m, *va;
	struct dev_phys *ph;
	CHECK_OK(dev_mem_alloc(ctx, 0, FB, &m));
	CHECK_OK(dev_mem_free(ctx, 0, m));
	CHECK_OK(dev_va_reserve(ctx, 0, in.granularity, &va));
	CHECK_OK(dev_phys_create(ctx, 0, in.granularity, &ph));
	CHECK_OK(dev_va_map(ctx, va, in.granularity, ph, 0));
	CHECK_OK(dev_va_unmap(ctx, va, in.granularity));
	CHECK_OK(dev_phys_destroy(ctx, ph));
	CHECK_OK(dev_va_release(ctx, va, in.granularity));
	/* a stream created on the failed device drops its work too */
	struct dev_stream *late;
	int rc = dev_stream_create(ctx, 0, &late);
	if (rc == 0) {
		mark(late, 8, 1);
		CHECK(dev_stream_sync(late) == -EIO);
		CHECK(ran[8] == 0);
		CHECK_OK(dev_stream_destroy(late));
	}

	/* teardown: the failed device's streams destroy without error */
	CHECK_OK(dev_mem_free(ctx, 0, b[0]));
	CHECK_MSG(dev_stream_destroy(s[0]) == 0, "%s", sp_last_error());
	CHECK_MSG(dev_stream_destroy(s0b) == 0, "%s", sp_last_error());
	CHECK_OK(dev_stream_destroy(s[1]));
	CHECK_OK(dev_stream_destroy(s[2]));
	CHECK_OK(dev_stream_destroy(sh));
	CHECK_OK(dev_event_destroy(g2));
	CHECK_OK(dev_event_destroy(pre));
	CHECK_OK(dev_event_destroy(ew));
	CHECK_OK(dev_event_destroy(eh));
	for (int d = 0; d < 3; d++)
		CHECK_OK(dev_event_destroy(e[d]));
	CHECK_OK(dev_host_free(ctx, h));
	CHECK_OK(dev_host_free(ctx, h2));
	dev_close(ctx);
	printf("dev_fail: dropped work, failed events, healthy devices and waits: ok\n");
}

/* SPILL_HOST_FAIL "1:3": device 1 fails when its 3rd kernel is about to run,
 * counted over all of its streams; kernels of device 0, copies and memsets do
 * not count. */
static void host_fail_at(void)
{
	char spec[8];
	snprintf(spec, sizeof(spec), "1:3");
	struct dev_ctx *ctx = open_host(2, spec);
	memset(spec, 'x', sizeof(spec) - 1); /* the string need not outlive open */
	struct dev_stream *a, *b, *z;
	struct dev_event *e;
	void *buf;
	CHECK_OK(dev_stream_create(ctx, 1, &a));
	CHECK_OK(dev_stream_create(ctx, 1, &b));
	CHECK_OK(dev_stream_create(ctx, 0, &z));
	CHECK_OK(dev_event_create(ctx, &e));
	CHECK_OK(dev_mem_alloc(ctx, 1, FB, &buf));
	memset(ran, 0, sizeof(ran));
	for (int i = 0; i < 5; i++)
		mark(z, 20 + i, 1); /* device 0's kernels do not count */
	CHECK_OK(dev_stream_sync(z));
	CHECK_OK(dev_memset_async(a, buf, 1, 1, FB)); /* nor memsets and copies */
	CHECK_OK(dev_memcpy_async(a, buf, 1, buf, 1, FB));
	mark(a, 0, 1); /* kernel 1 */
	CHECK_OK(dev_event_record(e, a));
	CHECK_OK(dev_event_sync(e));
	CHECK(dev_failed(ctx, 1) == 0);
	mark(b, 1, 1); /* kernel 2, on another stream of device 1 */
	CHECK_OK(dev_host_callback(b, mark_cb, &ran[10]));
	CHECK_OK(dev_event_record(e, b));
	CHECK_OK(dev_event_sync(e));
	CHECK(dev_failed(ctx, 1) == 0 && ran[0] == 1 && ran[1] == 1 && ran[10] == 1);
	CHECK(all_bytes(buf, FB, 1));
	fill(a, buf, FB, 2); /* kernel 3: the device fails, the kernel does not run */
	CHECK_OK(dev_memset_async(a, buf, 1, 3, FB));
	CHECK_OK(dev_event_record(e, a));
	CHECK(dev_event_sync(e) == -EIO);
	CHECK(dev_failed(ctx, 1) == 1 && dev_failed(ctx, 0) == 0);
	CHECK_MSG(all_bytes(buf, FB, 1), "the 3rd kernel (or what follows) ran");
	mark(b, 2, 1);
	CHECK(dev_stream_sync(b) == -EIO && ran[2] == 0);
	CHECK(dev_stream_sync(a) == -EIO);
	mark(z, 30, 1); /* device 0 goes on */
	CHECK_OK(dev_event_record(e, z));
	CHECK_OK(dev_event_sync(e));
	CHECK(ran[30] == 1);
	CHECK_OK(dev_stream_destroy(a));
	CHECK_OK(dev_stream_destroy(b));
	CHECK_OK(dev_stream_destroy(z));
	CHECK_OK(dev_event_destroy(e));
	dev_close(ctx);

	/* "0:1": the very first kernel of device 0 */
	ctx = open_host(2, "0:1");
	CHECK_OK(dev_stream_create(ctx, 0, &z));
	CHECK(dev_failed(ctx, 0) == 0);
	mark(z, 31, 1);
	CHECK(dev_stream_sync(z) == -EIO && ran[31] == 0 && dev_failed(ctx, 0) == 1);
	CHECK_OK(dev_stream_destroy(z));
	dev_close(ctx);

	/* bad values */
	const char *bad[] = {"x",    "1",    "9:1",   "2:1", "0:0", "1:",  "1:-1",
	                     "-1:1", "1:3x", "1:3:4", ":3",  ":",   "1;3", "a:1"};
	for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
		struct dev_config cfg = {.backend = DEV_BACKEND_HOST,
		                         .ndevices = 2,
		                         .device_mem = 1 << 20,
		                         .profile = "",
		                         .threads = 1,
		                         .host_fail = bad[i]};
		struct dev_ctx *c2 = NULL;
		int rc = dev_open(&cfg, &c2);
		if (rc != -EINVAL) { /* go on with the rest; fail at the end */
			fprintf(stderr,
			        "FAIL %s:%d: host_fail '%s' with 2 devices: dev_open returned %d\n",
			        __FILE__, __LINE__, bad[i], rc);
			late_failures++;
			if (rc == 0)
				dev_close(c2);
		}
	}
	/* "" and NULL: no fault */
	ctx = open_host(2, "");
	dev_close(ctx);

	/* through the parameters: SPILL_HOST_FAIL */
	struct sp_params p;
	sp_params_defaults(&p);
	CHECK_OK(sp_params_set(&p, "SPILL_HOST_FAIL", "1:2"));
	CHECK_OK(sp_params_set(&p, "SPILL_BACKEND", "host"));
	struct dev_config cfg;
	CHECK_OK(dev_config_from_params(&p, &cfg));
	CHECK(cfg.host_fail && strcmp(cfg.host_fail, "1:2") == 0);
	cfg.ndevices = 2;
	cfg.device_mem = 1 << 20;
	cfg.threads = 1;
	CHECK_OK(dev_open(&cfg, &ctx));
	CHECK_OK(dev_stream_create(ctx, 1, &a));
	mark(a, 40, 1);
	mark(a, 41, 1);
	CHECK(dev_stream_sync(a) == -EIO && ran[40] == 1 && ran[41] == 0);
	CHECK_OK(dev_stream_destroy(a));
	dev_close(ctx);
	printf("SPILL_HOST_FAIL: the Nth kernel, parsing: ok\n");
}

/* SPILL_HOST_JITTER: the covered device's kernels start late (0..US us each),
 * the others' do not wait for it; bad values and other backends refused. */
static void host_jitter(void)
{
	const char *bad[] = {"x",     "1",      "9:10", "2:10",      "0:0",    "1:", "1:-1",
	                     "-1:10", "1:10x",  "1:3:", "1:3:x",     "*",      "*:", ":3",
	                     "1;3",   "**:100", "*:0",  "0:1000001", "1:5:7:8"};
	for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
		struct dev_config cfg = {.backend = DEV_BACKEND_HOST,
		                         .ndevices = 2,
		                         .device_mem = 1 << 20,
		                         .profile = "",
		                         .threads = 1,
		                         .host_jitter = bad[i]};
		struct dev_ctx *c2 = NULL;
		int rc = dev_open(&cfg, &c2);
		if (rc != -EINVAL || !strstr(sp_last_error(), "SPILL_HOST_JITTER")) {
			fprintf(stderr,
			        "FAIL %s:%d: host_jitter '%s' with 2 devices: dev_open returned %d "
			        "(%s)\n",
			        __FILE__, __LINE__, bad[i], rc, sp_last_error());
			late_failures++;
			if (rc == 0)
				dev_close(c2);
		}
	}
	struct dev_config mc = {
	    .backend = DEV_BACKEND_MODEL, .ndevices = 2, .profile = "", .host_jitter = "0:10"};
	struct dev_ctx *ctx = NULL;
	CHECK(dev_open(&mc, &ctx) == -EINVAL && strstr(sp_last_error(), "SPILL_HOST_JITTER"));
	/* device 1 at up to 4 ms a kernel: 20 kernels take about 40 ms there */
	struct dev_config cfg = {.backend = DEV_BACKEND_HOST,
	                         .ndevices = 2,
	                         .device_mem = 1 << 20,
	                         .profile = "",
	                         .threads = 1,
	                         .host_jitter = "1:4000:5"};
	CHECK_OK(dev_open(&cfg, &ctx));
	struct dev_stream *a, *b;
	CHECK_OK(dev_stream_create(ctx, 0, &a));
	CHECK_OK(dev_stream_create(ctx, 1, &b));
	double t0 = sp_now_s();
	for (int i = 0; i < 20; i++)
		mark(b, 50 + i, 1);
	for (int i = 0; i < 20; i++)
		mark(a, 70 + i, 1);
	CHECK_OK(dev_stream_sync(a));
	double ta = sp_now_s() - t0;
	CHECK_OK(dev_stream_sync(b));
	double tb = sp_now_s() - t0;
	for (int i = 0; i < 20; i++)
		CHECK(ran[50 + i] == 1 && ran[70 + i] == 1);
	/* a sum of 20 draws below 8 ms has probability < 1e-9; the seed is fixed */
	CHECK_MSG(tb > 0.008 && ta < tb, "jittered device %.4f s, the other %.4f s", tb, ta);
	CHECK_OK(dev_stream_destroy(a));
	CHECK_OK(dev_stream_destroy(b));
	dev_close(ctx);
	printf("SPILL_HOST_JITTER: device 1's 20 kernels %.1f ms, device 0's %.1f ms; parsing: "
	       "ok\n",
	       tb * 1e3, ta * 1e3);
}

/* The model backend has no fault injection. */
static void model_fail(void)
{
	struct dev_config cfg = {.backend = DEV_BACKEND_MODEL, .ndevices = 2, .profile = ""};
	struct dev_ctx *ctx;
	CHECK_OK(dev_open(&cfg, &ctx));
	CHECK(dev_fail(ctx, 0) == -ENOTSUP);
	CHECK(dev_failed(ctx, 0) == 0 && dev_failed(ctx, 1) == 0);
	CHECK(dev_fail(ctx, 5) == -EINVAL);
	dev_close(ctx);
	printf("model backend: dev_fail -ENOTSUP: ok\n");
}

int main(int argc, char **argv)
{
	if (argc > 1)
		return child(argv[1]);
	int st = test_run_self("mapped");
	CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "mapped access: status %#x", st);
	const char *faulting[] = {"read", "never-mapped", "copy", "kernel"};
	for (size_t i = 0; i < SP_ARRAY_SIZE(faulting); i++) {
		st = test_run_self(faulting[i]);
		CHECK_MSG(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV,
		          "%s of an unmapped range: status %#x, want SIGSEGV", faulting[i], st);
		printf("%s of an unmapped range: SIGSEGV\n", faulting[i]);
	}
	fail_semantics();
	host_fail_at();
	host_jitter();
	model_fail();
	CHECK_MSG(late_failures == 0, "%d check(s) failed above", late_failures);
	TEST_PASS();
}

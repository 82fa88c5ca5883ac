/* tests/vmm/test_device_failed.c — vmm_device_failed against an oracle.
 *
 * Host backend (emulated devices), small device pools so that evictions,
 * write-downs and P2P copies happen. A "gate" (a host callback that blocks a
 * stream until the test opens it) holds the callers' done events pending, so
 * transfers that wait on them are surely in flight when dev_fail comes.
 *
 * Targeted cases: objects only on the failed device are lost (READ/WRITE
 * acquires and prefetches -EIO naming them; OVERWRITE or discard revives
 * them), -EBUSY with nothing changed while pinned there, -ENODEV for later
 * acquires and prefetches there, nlost equals the lost_objects counter, a
 * victim's write-down in flight from the failed device, a WRITE on a healthy
 * device whose P2P source failed (released, and still pinned: its space must
 * not go to another object), a WRITE on the failed device behind an H2D, a
 * prefetch chain disk -> host -> failed device, device errors dropped but disk
 * errors kept, two failures in a row, a stable object whose home fails.
 *
 * Randomized part: many seeds of random acquires (READ/WRITE/OVERWRITE, the
 * new pattern written by a kernel or a memcpy on the device), releases with
 * done events, evictions, prefetches, write-backs, discards; at a random point
 * a device fails — after settling (exact prediction from vmm_obj_info), behind
 * a burst of gated transfers, or with whatever is in flight — and the oracle
 * checks which objects are lost (exactly the ones whose only valid copy was
 * there; bounds for those with a transfer in flight), nlost and the counter,
 * that every other object reads back its last pattern on the host and on
 * surviving devices, -ENODEV there, revival, a clean vmm_sync and teardown;
 * after every operation no copy and no space on a failed device. Contract
 * violations found in the random part are counted per kind (the run goes on)
 * and fail the test at the end; DF_VERBOSE=1 prints each of them.
 *
 * argv: [seeds] [first seed] [ops per seed] */
#include "tests/vmm/vmm_test.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>

#define KiB 1024ull

/* ---- the gate ------------------------------------------------------------------ */

struct gate {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int open;
	int forced; /* the watchdog opened it: a vmm call waited on gated work */
	double closed_at;
};
static struct gate gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 1, 0, 0};
static int watchdog_stop;
static long watchdog_fires;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void gate_cb(void *arg)
{
	struct gate *g = arg;
	pthread_mutex_lock(&g->mu);
	while (!g->open)
		pthread_cond_wait(&g->cv, &g->mu);
	pthread_mutex_unlock(&g->mu);
}

static void gate_close(void)
{
	pthread_mutex_lock(&gate.mu);
	gate.open = 0;
	gate.forced = 0;
	gate.closed_at = now_s();
	pthread_mutex_unlock(&gate.mu);
}

static void gate_open(void)
{
	pthread_mutex_lock(&gate.mu);
	gate.open = 1;
	pthread_cond_broadcast(&gate.cv);
	pthread_mutex_unlock(&gate.mu);
}

/* Opens a gate left closed too long (a vmm call blocked on gated work). */
static void *watchdog(void *arg)
{
	(void)arg;
	for (;;) {
		struct timespec ts = {0, 20 * 1000 * 1000};
		nanosleep(&ts, NULL);
		pthread_mutex_lock(&gate.mu);
		int stop = watchdog_stop;
		if (!gate.open && now_s() - gate.closed_at > 0.25) {
			gate.open = 1;
			gate.forced = 1;
			watchdog_fires++;
			pthread_cond_broadcast(&gate.cv);
		}
		pthread_mutex_unlock(&gate.mu);
		if (stop)
			return NULL;
	}
}

static void delay_cpu(const void *a)
{
	struct timespec ts = {0, *(const long *)a};
	nanosleep(&ts, NULL);
}
static const struct dev_kernel delay_kernel = {"delay", delay_cpu, NULL};

static void gate_stream(struct dev_stream *s)
{
	CHECK_OK(dev_host_callback(s, gate_cb, &gate));
}

/* ---- small helpers -------------------------------------------------------------- */

static void ignore_rc(int rc)
{
	(void)rc;
}

static uint32_t dbit(int d)
{
	return 1u << d;
}

static int popcount(uint32_t m)
{
	return __builtin_popcount(m);
}

static struct vmm_obj_info info(struct vmm *v, uint64_t id)
{
	struct vmm_obj_info in;
	CHECK_OK(vmm_obj_info(v, id, &in));
	return in;
}

static int64_t lost_counter(struct vmm *v)
{
	struct vmm_stats s;
	vmm_stats_get(v, &s);
	return s.lost_objects.total;
}

/* READ acquire on the host: 1 for -EIO naming the object (lost), 0 for the
 * bytes of seed (seed 0: not checked), 2 for other bytes with no error. */
static int host_probe_soft(struct vmm *v, uint64_t id, const char *name, size_t bytes,
                           uint64_t seed)
{
	void *p;
	struct dev_event *ready;
	int rc = vmm_acquire(v, id, VMM_HOST, VMM_READ, &p, &ready);
	if (rc == -EIO) {
		CHECK_MSG(strstr(sp_last_error(), name) != NULL,
		          "-EIO for '%s' does not name it: %s", name, sp_last_error());
		return 1;
	}
	CHECK_MSG(rc == 0, "host read of '%s': %d %s", name, rc, sp_last_error());
	CHECK(ready == NULL);
	int bad = seed ? vt_check_host(p, bytes, seed) : 0;
	CHECK_OK(vmm_release(v, id, VMM_HOST, NULL));
	return bad ? 2 : 0;
}

/* The same; other bytes fail the test. Returns 1 if lost. */
static int host_probe(struct vmm *v, uint64_t id, const char *name, size_t bytes, uint64_t seed)
{
	int r = host_probe_soft(v, id, name, bytes, seed);
	CHECK_MSG(r != 2, "'%s' read back on the host: not its last write (and no error)", name);
	return r;
}

/* The ways in which a lost object refuses reads, on every usable place. */
static void check_refuses(struct vmm *v, uint64_t id, const char *name, int ndev, int failed_mask)
{
	void *p;
	struct dev_event *ready;
	for (int q = -1; q < ndev; q++) {
		int place = q < 0 ? VMM_HOST : q;
		int want = q >= 0 && (failed_mask & (1 << q)) ? -ENODEV : -EIO;
		int rc = vmm_acquire(v, id, place, VMM_READ, &p, &ready);
		CHECK_MSG(rc == want, "lost '%s': READ on %d returned %d, want %d (%s)", name,
		          place, rc, want, sp_last_error());
		if (want == -EIO)
			CHECK_MSG(strstr(sp_last_error(), name), "%s", sp_last_error());
		rc = vmm_acquire(v, id, place, VMM_WRITE, &p, &ready);
		CHECK_MSG(rc == want, "lost '%s': WRITE on %d returned %d, want %d (%s)", name,
		          place, rc, want, sp_last_error());
		rc = vmm_prefetch(v, id, place);
		CHECK_MSG(rc == want, "lost '%s': prefetch to %d returned %d, want %d (%s)", name,
		          place, rc, want, sp_last_error());
		if (want == -EIO)
			CHECK_MSG(strstr(sp_last_error(), name), "%s", sp_last_error());
	}
}

/* ---- targeted cases ---------------------------------------------------------------- */

#define T_OBJ (16 * KiB)

struct tenv {
	struct dev_ctx *ctx;
	struct vmm *v;
	int ndev;
	struct dev_stream *s[4];
	struct dev_event *done[4];
	const char *dir;
};

static void t_open(struct tenv *t, int ndev, int dev_slots, int host_slots, const char *dir,
                   const char *fault, uint64_t stable)
{
	memset(t, 0, sizeof(*t));
	t->ndev = ndev;
	t->ctx = vt_open_host(ndev, 1 << 20);
	struct vmm_config c =
	    vt_config((uint64_t)dev_slots * T_OBJ + stable, stable, (uint64_t)host_slots * T_OBJ);
	c.max_objects = 64;
	c.policy = VMM_POLICY_LRU;
	if (dir)
		vt_config_disk(&c, dir, 0, fault);
	CHECK_OK(vmm_open(t->ctx, &c, &t->v));
	for (int d = 0; d < ndev; d++) {
		CHECK_OK(dev_stream_create(t->ctx, d, &t->s[d]));
		CHECK_OK(dev_event_create(t->ctx, &t->done[d]));
	}
}

static void t_close(struct tenv *t, uint64_t *ids, int n)
{
	for (int i = 0; i < n; i++)
		CHECK_OK(vmm_obj_destroy(t->v, ids[i]));
	vmm_close(t->v);
	for (int d = 0; d < t->ndev; d++) {
		CHECK_MSG(dev_stream_destroy(t->s[d]) == 0, "%s", sp_last_error());
		CHECK_OK(dev_event_destroy(t->done[d]));
	}
	dev_close(t->ctx);
}

static int t_read_dev(struct tenv *t, uint64_t id, int d, uint64_t seed)
{
	return vt_read_dev(t->v, id, d, t->s[d], t->done[d], T_OBJ, seed);
}

/* Settled: only-on-d objects are lost, nothing else; -EBUSY first; -ENODEV;
 * revival by OVERWRITE and by discard; a second call. */
static void t_basic(void)
{
	struct tenv t;
	t_open(&t, 2, 8, 8, NULL, NULL, 0);
	struct vmm *v = t.v;
	const char *names[] = {"A.only0", "B.wb", "C.on1", "D.both", "E.empty", "F.disc", "G.pin"};
	enum { A, B, C, D, E, F, G, N };
	uint64_t id[N], seed[N] = {0};
	for (int i = 0; i < N; i++)
		id[i] = vt_create(v, T_OBJ, VMM_KIND_STASH, names[i]);
	for (int i = 0; i < N; i++) {
		if (i == E)
			continue;
		seed[i] = 1000 + (uint64_t)i;
		vt_write_dev(v, id[i], i == C ? 1 : 0, VMM_OVERWRITE, t.s[i == C], t.done[i == C],
		             T_OBJ, seed[i]);
	}
	CHECK_OK(vmm_writeback(v, id[B], 0));
	CHECK(t_read_dev(&t, id[D], 1, seed[D]) == 0);
	CHECK_OK(vmm_discard(v, id[F]));
	seed[F] = 0;
	CHECK_OK(vmm_sync(v));
	CHECK_OK(dev_stream_sync(t.s[0]));
	CHECK(info(v, id[A]).valid_mask == 1 && info(v, id[G]).valid_mask == 1);
	CHECK(info(v, id[B]).valid_mask == (1 | VMM_INFO_HOST));
	CHECK(info(v, id[D]).valid_mask == 3 && info(v, id[C]).valid_mask == 2);
	CHECK(info(v, id[E]).valid_mask == 0 && info(v, id[F]).valid_mask == 0);

	void *pg;
	struct dev_event *rg;
	CHECK_OK(vmm_acquire(v, id[G], 0, VMM_READ, &pg, &rg));
	CHECK_OK(dev_fail(t.ctx, 0));
	struct vmm_obj_info before[N];
	uint64_t used0, cap0, used0b;
	for (int i = 0; i < N; i++)
		before[i] = info(v, id[i]);
	CHECK_OK(vmm_place_usage(v, 0, &used0, &cap0));
	uint32_t nl = 99;
	int rc = vmm_device_failed(v, 0, &nl);
	CHECK_MSG(rc == -EBUSY, "vmm_device_failed with G pinned on 0: %d", rc);
	CHECK_MSG(strstr(sp_last_error(), "G.pin"), "%s", sp_last_error());
	CHECK(lost_counter(v) == 0);
	for (int i = 0; i < N; i++) {
		struct vmm_obj_info a = info(v, id[i]);
		CHECK_MSG(a.valid_mask == before[i].valid_mask &&
		              a.pinned_mask == before[i].pinned_mask,
		          "-EBUSY changed '%s'", names[i]);
	}
	CHECK_OK(vmm_place_usage(v, 0, &used0b, &cap0));
	CHECK(used0b == used0);
	/* G pinned on the host does not block; only device 0 pins do */
	CHECK_OK(dev_event_record(t.done[0], t.s[0]));
	CHECK_OK(vmm_release(v, id[G], 0, t.done[0]));
	void *pc;
	struct dev_event *rc1;
	CHECK_OK(vmm_acquire(v, id[C], VMM_HOST, VMM_READ, &pc, &rc1)); /* pinned elsewhere */
	rc = vmm_device_failed(v, 0, &nl);
	CHECK_MSG(rc == 0, "vmm_device_failed: %d %s", rc, sp_last_error());
	CHECK_OK(vmm_release(v, id[C], VMM_HOST, NULL));
	CHECK_MSG(nl == 2, "nlost %u, want 2 (A, G)", nl);
	CHECK(lost_counter(v) == 2);
	CHECK_OK(vmm_sync(v));
	CHECK_OK(vmm_place_usage(v, 0, &used0b, &cap0));
	CHECK_MSG(used0b == 0, "device 0 still holds %" PRIu64 " bytes", used0b);
	for (int i = 0; i < N; i++)
		CHECK((info(v, id[i]).valid_mask & 1) == 0);
	check_refuses(v, id[A], names[A], 2, 1);
	check_refuses(v, id[G], names[G], 2, 1);
	/* -ENODEV for every object, lost or not, every mode */
	for (int i = 0; i < N; i++)
		for (int acc = VMM_READ; acc <= VMM_OVERWRITE; acc++) {
			void *p;
			struct dev_event *r;
			CHECK(vmm_acquire(v, id[i], 0, (enum vmm_access)acc, &p, &r) == -ENODEV);
			CHECK(vmm_prefetch(v, id[i], 0) == -ENODEV);
		}
	/* survivors */
	CHECK(host_probe(v, id[B], names[B], T_OBJ, seed[B]) == 0);
	CHECK(t_read_dev(&t, id[B], 1, seed[B]) == 0);
	CHECK(t_read_dev(&t, id[C], 1, seed[C]) == 0);
	CHECK(host_probe(v, id[D], names[D], T_OBJ, seed[D]) == 0);
	CHECK(host_probe(v, id[E], names[E], T_OBJ, 0) == 0);
	CHECK(host_probe(v, id[F], names[F], T_OBJ, 0) == 0);
	/* a second call: nothing more */
	CHECK_OK(vmm_device_failed(v, 0, &nl));
	CHECK(nl == 0 && lost_counter(v) == 2);
	CHECK_OK(vmm_device_failed(v, 0, NULL));
	/* revival: OVERWRITE on device 1, discard */
	vt_write_dev(v, id[A], 1, VMM_OVERWRITE, t.s[1], t.done[1], T_OBJ, 77);
	CHECK(t_read_dev(&t, id[A], 1, 77) == 0);
	CHECK(host_probe(v, id[A], names[A], T_OBJ, 77) == 0);
	CHECK_OK(vmm_discard(v, id[G]));
	CHECK(host_probe(v, id[G], names[G], T_OBJ, 0) == 0);
	vt_write_host(v, id[G], T_OBJ, 78);
	CHECK(t_read_dev(&t, id[G], 1, 78) == 0);
	CHECK_OK(vmm_sync(v));
	CHECK(lost_counter(v) == 2);
	t_close(&t, id, N);
	printf("basic: lost only-on-0 objects, -EBUSY, -ENODEV, revival: ok\n");
}

/* A victim's write-down from the failed device in flight (its space already
 * handed on): the victim's only copy was there, so it is lost and counted. */
static void t_writedown_in_flight(int *bugs)
{
	struct tenv t;
	t_open(&t, 2, 4, 8, NULL, NULL, 0);
	struct vmm *v = t.v;
	enum { N = 5 };
	uint64_t id[N];
	char name[N][8];
	for (int i = 0; i < N; i++) {
		snprintf(name[i], sizeof(name[i]), "W%d", i);
		id[i] = vt_create(v, T_OBJ, VMM_KIND_STASH, name[i]);
	}
	gate_close();
	gate_stream(t.s[0]);
	for (int i = 0; i < N; i++) /* W4 makes W0 (LRU) a victim: D2H, space handed on */
		vt_write_dev(v, id[i], 0, VMM_OVERWRITE, t.s[0], t.done[0], T_OBJ,
		             500 + (uint64_t)i);
	struct vmm_obj_info w0 = info(v, id[0]);
	CHECK_MSG(w0.in_flight == VMM_XFER_D2H && w0.valid_mask == VMM_INFO_HOST,
	          "setup: W0 in flight %d valid %#x", w0.in_flight, w0.valid_mask);
	CHECK_OK(dev_fail(t.ctx, 0));
	gate_open();
	CHECK(!gate.forced);
	uint32_t nl = 0;
	CHECK_OK(vmm_device_failed(v, 0, &nl));
	int lost = 0;
	for (int i = 0; i < N; i++)
		lost += host_probe(v, id[i], name[i], T_OBJ, 500 + (uint64_t)i);
	CHECK(lost == N); /* W0's D2H read device 0: it failed */
	if (nl != (uint32_t)lost || lost_counter(v) != lost) {
		fprintf(stderr,
		        "FAIL t_writedown_in_flight: %d objects lost (all had their only copy on "
		        "device 0), nlost %u, lost_objects %" PRId64 "\n",
		        lost, nl, lost_counter(v));
		(*bugs)++;
	}
	CHECK_MSG(vmm_sync(v) == 0, "%s", sp_last_error());
	for (int i = 0; i < N; i++) {
		vt_write_dev(v, id[i], 1, VMM_OVERWRITE, t.s[1], t.done[1], T_OBJ,
		             600 + (uint64_t)i);
		CHECK(host_probe(v, id[i], name[i], T_OBJ, 600 + (uint64_t)i) == 0);
	}
	CHECK_OK(vmm_sync(v));
	t_close(&t, id, N);
	printf("write-down in flight from the failed device: checked\n");
}

/* WRITE on healthy device 1 of an object whose only copy is on device 0 (its
 * P2P gated), then device 0 fails. After vmm_device_failed the object is
 * either lost (-EIO) or holds what the writer wrote: never other bytes with no
 * error. With keep_pinned the writer still holds it on device 1 during
 * vmm_device_failed: its copy must not be freed under it. */
static void t_write_from_failed(int keep_pinned, int *bugs)
{
	struct tenv t;
	t_open(&t, 2, 4, 8, NULL, NULL, 0);
	struct vmm *v = t.v;
	uint64_t a = vt_create(v, T_OBJ, VMM_KIND_STASH, "P2Pw");
	uint64_t others[3] = {0, 0, 0};
	gate_close();
	gate_stream(t.s[0]);
	vt_write_dev(v, a, 0, VMM_OVERWRITE, t.s[0], t.done[0], T_OBJ, 11);
	void *p;
	struct dev_event *ready;
	CHECK_OK(vmm_acquire(v, a, 1, VMM_WRITE, &p, &ready));
	CHECK(ready != NULL);
	struct vmm_obj_info in = info(v, a);
	CHECK_MSG(in.in_flight == VMM_XFER_P2P && in.valid_mask == 2, "setup: %d %#x", in.in_flight,
	          in.valid_mask);
	CHECK_OK(dev_stream_wait_event(t.s[1], ready));
	CHECK_OK(vt_fill_async(t.s[1], p, T_OBJ, 12)); /* every byte */
	CHECK_OK(dev_event_record(t.done[1], t.s[1]));
	if (!keep_pinned)
		CHECK_OK(vmm_release(v, a, 1, t.done[1]));
	CHECK_OK(dev_fail(t.ctx, 0));
	gate_open();
	uint32_t nl = 0;
	CHECK_OK(vmm_device_failed(v, 0, &nl));
	ignore_rc(dev_event_sync(t.done[1]));
	in = info(v, a);
	if (keep_pinned) {
		/* its input failed: the copy holds no valid data (not valid), but
		 * the space stays the acquirer's until release (vmm.h) */
		int freed = !(in.pinned_mask & 2);
		/* does new device-1 space overlap the pinned copy? */
		int overlap = 0;
		for (int i = 0; i < 3; i++) {
			char nm[8];
			snprintf(nm, sizeof(nm), "X%d", i);
			others[i] = vt_create(v, T_OBJ, VMM_KIND_STASH, nm);
			void *q;
			struct dev_event *r;
			CHECK_OK(vmm_acquire(v, others[i], 1, VMM_OVERWRITE, &q, &r));
			vt_wait_ready(t.s[1], r);
			CHECK_OK(vt_fill_async(t.s[1], q, T_OBJ, 900 + (uint64_t)i));
			if ((char *)q < (char *)p + T_OBJ && (char *)p < (char *)q + T_OBJ)
				overlap = 1;
			CHECK_OK(dev_event_record(t.done[1], t.s[1]));
			CHECK_OK(vmm_release(v, others[i], 1, t.done[1]));
		}
		/* the writer, still holding its acquire, writes once more */
		CHECK_OK(vt_fill_async(t.s[1], p, T_OBJ, 12));
		CHECK_OK(dev_event_record(t.done[1], t.s[1]));
		CHECK_OK(vmm_release(v, a, 1, t.done[1]));
		int clobbered = 0;
		for (int i = 0; i < 3; i++)
			clobbered += t_read_dev(&t, others[i], 1, 900 + (uint64_t)i) != 0;
		if (freed || overlap || clobbered) {
			fprintf(stderr,
			        "FAIL t_write_from_failed(pinned): the copy acquired (WRITE) on "
			        "healthy device 1 was freed by vmm_device_failed while still "
			        "pinned (pinned %#x valid %#x); another object got the same "
			        "device space: %s; objects whose bytes the writer overwrote: %d\n",
			        in.pinned_mask, in.valid_mask, overlap ? "yes" : "no", clobbered);
			(*bugs)++;
		}
	}
	int lost = host_probe_soft(v, a, "P2Pw", T_OBJ, 12);
	if (lost == 2 || (uint32_t)(lost == 1) != nl || lost_counter(v) != nl) {
		fprintf(stderr,
		        "FAIL t_write_from_failed(%s): WRITE on device 1 behind a P2P from failed "
		        "device 0: %s; nlost %u, lost_objects %" PRId64 " (valid %#x after)\n",
		        keep_pinned ? "pinned" : "released",
		        lost == 2   ? "READ succeeds with bytes that are neither the old nor the "
		                      "new contents (no error: silent loss)"
		        : lost == 1 ? "lost"
		                    : "kept the new bytes",
		        nl, lost_counter(v), in.valid_mask);
		(*bugs)++;
	}
	CHECK_MSG(vmm_sync(v) == 0, "%s", sp_last_error());
	uint64_t all[4] = {a, others[0], others[1], others[2]};
	t_close(&t, all, keep_pinned ? 4 : 1);
	printf("WRITE on a healthy device behind a P2P from the failed one (%s): checked\n",
	       keep_pinned ? "pinned" : "released");
}

/* A prefetch to device 0 of an object on disk only: disk -> host now, host ->
 * device 0 later (vmm_progress). Device 0 fails in between: the chain must
 * not go on to it (no copy there, no stale error from a dropped H2D). */
static void t_chain(const char *dir, int *bugs)
{
	struct tenv t;
	t_open(&t, 2, 4, 8, dir, "", 0);
	struct vmm *v = t.v;
	uint64_t a = vt_create(v, T_OBJ, VMM_KIND_WEIGHT, "chain");
	vt_write_host(v, a, T_OBJ, 21);
	CHECK_OK(vmm_writeback(v, a, 1));
	CHECK_OK(vmm_obj_wait(v, a));
	CHECK_OK(vmm_evict(v, a, VMM_HOST));
	CHECK(info(v, a).valid_mask == VMM_INFO_DISK);
	CHECK_OK(vmm_prefetch(v, a, 0));
	CHECK_OK(dev_fail(t.ctx, 0));
	uint32_t nl = 9;
	CHECK_OK(vmm_device_failed(v, 0, &nl));
	CHECK(nl == 0);
	CHECK_OK(vmm_progress(v));
	int rc = vmm_sync(v);
	struct vmm_obj_info in = info(v, a);
	uint64_t used, cap;
	CHECK_OK(vmm_place_usage(v, 0, &used, &cap));
	if (rc != 0 || (in.valid_mask & 1) || used) {
		fprintf(stderr,
		        "FAIL t_chain: a prefetch chain (disk -> host -> device 0) went on to "
		        "device 0 after vmm_device_failed(0): vmm_sync %d (%s), valid %#x, "
		        "device 0 holds %" PRIu64 " bytes\n",
		        rc, rc ? sp_last_error() : "-", in.valid_mask, used);
		(*bugs)++;
		ignore_rc(vmm_sync(v));
	}
	CHECK(host_probe(v, a, "chain", T_OBJ, 21) == 0);
	CHECK(t_read_dev(&t, a, 1, 21) == 0);
	CHECK_OK(vmm_sync(v));
	t_close(&t, &a, 1);
	printf("prefetch chain towards the failed device: checked\n");
}

/* Errors pending report: device transfers that failed with device 0 are
 * dropped by vmm_device_failed; a disk write error stays for vmm_sync. */
static void t_errors(const char *dir)
{
	struct tenv t;
	t_open(&t, 2, 4, 8, dir, "write:1:EIO", 0);
	struct vmm *v = t.v;
	uint64_t a = vt_create(v, T_OBJ, VMM_KIND_OPTIM, "diskerr");
	uint64_t b = vt_create(v, T_OBJ, VMM_KIND_GRAD, "d2hfail");
	uint64_t c = vt_create(v, T_OBJ, VMM_KIND_WEIGHT, "p2pfail");
	vt_write_dev(v, c, 0, VMM_OVERWRITE, t.s[0], t.done[0], T_OBJ, 43);
	CHECK_OK(vmm_writeback(v, c, 0)); /* c: host + device 0 */
	CHECK_OK(vmm_sync(v));
	CHECK_OK(dev_stream_sync(t.s[0]));
	vt_write_host(v, a, T_OBJ, 41);
	gate_close();
	gate_stream(t.s[0]);
	vt_write_dev(v, b, 0, VMM_OVERWRITE, t.s[0], t.done[0], T_OBJ, 42);
	CHECK_OK(vmm_writeback(v, b, 0)); /* D2H behind the gate */
	void *p;
	struct dev_event *r;
	CHECK_OK(vmm_acquire(v, c, 0, VMM_READ, &p, &r)); /* c's copy on 0: gated fence */
	CHECK_OK(dev_event_record(t.done[0], t.s[0]));
	CHECK_OK(vmm_release(v, c, 0, t.done[0]));
	CHECK_OK(vmm_acquire(v, c, 1, VMM_READ, &p, &r)); /* P2P from 0, behind the fence */
	CHECK(r != NULL && info(v, c).in_flight == VMM_XFER_P2P);
	CHECK_OK(vmm_release(v, c, 1, NULL));
	int wb = vmm_writeback(v, a, 1); /* the disk write fails */
	CHECK_OK(dev_fail(t.ctx, 0));
	gate_open();
	CHECK_OK(vmm_progress(v)); /* retires the failures: kept in b and c */
	uint32_t nl = 0;
	CHECK_OK(vmm_device_failed(v, 0, &nl));
	CHECK_MSG(nl == 1, "nlost %u, want 1 (d2hfail)", nl);
	CHECK_MSG(vmm_obj_wait(v, c) == 0, "p2pfail: a device error kept: %s", sp_last_error());
	CHECK(host_probe(v, c, "p2pfail", T_OBJ, 43) == 0);
	CHECK(t_read_dev(&t, c, 1, 43) == 0);
	CHECK(host_probe(v, b, "d2hfail", T_OBJ, 42) == 1);
	if (wb == 0) {
		int rc = vmm_sync(v);
		CHECK_MSG(rc == -EIO && strstr(sp_last_error(), "diskerr"),
		          "the disk error of 'diskerr' was not kept: vmm_sync %d (%s)", rc,
		          sp_last_error());
	}
	CHECK_MSG(vmm_sync(v) == 0, "%s", sp_last_error());
	CHECK(host_probe(v, a, "diskerr", T_OBJ, 41) == 0);
	uint64_t ids[3] = {a, b, c};
	t_close(&t, ids, 3);
	printf("pending errors: device ones dropped, the disk one kept: ok\n");
}

/* Three devices: an object on 0 and 1 survives the failure of 0 and is lost
 * with 1; a stable object whose home (2) fails is lost, then revived on the
 * host. */
static void t_two_failures(void)
{
	struct tenv t;
	t_open(&t, 3, 4, 8, NULL, NULL, 2 * T_OBJ);
	struct vmm *v = t.v;
	uint64_t a = vt_create(v, T_OBJ, VMM_KIND_WEIGHT, "on01");
	uint64_t b = vt_create(v, T_OBJ, VMM_KIND_WEIGHT, "on1");
	uint64_t s;
	struct vmm_obj_desc sd = {T_OBJ, VMM_KIND_WEIGHT, "stable2", VMM_OBJ_STABLE, 2};
	CHECK_OK(vmm_obj_create(v, &sd, &s));
	vt_write_dev(v, a, 0, VMM_OVERWRITE, t.s[0], t.done[0], T_OBJ, 51);
	CHECK(t_read_dev(&t, a, 1, 51) == 0);
	vt_write_dev(v, b, 1, VMM_OVERWRITE, t.s[1], t.done[1], T_OBJ, 52);
	vt_write_dev(v, s, 2, VMM_OVERWRITE, t.s[2], t.done[2], T_OBJ, 53);
	CHECK_OK(vmm_sync(v));
	CHECK(info(v, a).valid_mask == 3 && info(v, s).valid_mask == 4);
	uint32_t nl;
	CHECK_OK(dev_fail(t.ctx, 0));
	CHECK_OK(vmm_device_failed(v, 0, &nl));
	CHECK(nl == 0 && info(v, a).valid_mask == 2);
	CHECK(t_read_dev(&t, a, 1, 51) == 0);
	CHECK_OK(dev_fail(t.ctx, 1));
	CHECK_OK(vmm_device_failed(v, 1, &nl));
	CHECK_MSG(nl == 2, "nlost %u, want 2", nl);
	CHECK(lost_counter(v) == 2);
	check_refuses(v, a, "on01", 3, 3);
	check_refuses(v, b, "on1", 3, 3);
	CHECK(t_read_dev(&t, s, 2, 53) == 0);
	CHECK(host_probe(v, s, "stable2", T_OBJ, 53) == 0);
	CHECK_OK(dev_fail(t.ctx, 2));
	CHECK_OK(vmm_device_failed(v, 2, &nl));
	CHECK(nl == 0); /* the stable one had a host copy */
	vt_write_host(v, a, T_OBJ, 61);
	CHECK(host_probe(v, a, "on01", T_OBJ, 61) == 0);
	CHECK_OK(vmm_sync(v));
	uint64_t ids[3] = {a, b, s};
	t_close(&t, ids, 3);

	/* a stable object lost with its home */
	t_open(&t, 2, 4, 8, NULL, NULL, 2 * T_OBJ);
	v = t.v;
	sd.home = 0;
	CHECK_OK(vmm_obj_create(v, &sd, &s));
	vt_write_dev(v, s, 0, VMM_OVERWRITE, t.s[0], t.done[0], T_OBJ, 54);
	CHECK_OK(vmm_sync(v));
	CHECK_OK(dev_fail(t.ctx, 0));
	CHECK_OK(vmm_device_failed(v, 0, &nl));
	CHECK(nl == 1);
	CHECK(host_probe(v, s, "stable2", T_OBJ, 0) == 1);
	void *p;
	struct dev_event *r;
	CHECK(vmm_acquire(v, s, 0, VMM_OVERWRITE, &p, &r) == -ENODEV);
	vt_write_host(v, s, T_OBJ, 55);
	CHECK(host_probe(v, s, "stable2", T_OBJ, 55) == 0);
	CHECK_OK(vmm_sync(v));
	t_close(&t, &s, 1);
	printf("two failures, stable objects: ok\n");
}

/* WRITE on device 0 of an object whose only copy is on the host (the H2D
 * gated: the host copy's fence is a pending done event), then device 0
 * fails: the object's only valid copy was on device 0, so it is lost. */
static void t_write_h2d_failed(int *bugs)
{
	struct tenv t;
	t_open(&t, 2, 4, 8, NULL, NULL, 0);
	struct vmm *v = t.v;
	uint64_t a = vt_create(v, T_OBJ, VMM_KIND_STASH, "H2Dw");
	void *p;
	struct dev_event *ready;
	gate_close();
	gate_stream(t.s[1]);
	CHECK_OK(vmm_acquire(v, a, VMM_HOST, VMM_OVERWRITE, &p, &ready));
	vt_fill_host(p, T_OBJ, 71);
	CHECK_OK(dev_event_record(t.done[1], t.s[1])); /* pending behind the gate */
	CHECK_OK(vmm_release(v, a, VMM_HOST, t.done[1]));
	CHECK_OK(vmm_acquire(v, a, 0, VMM_WRITE, &p, &ready));
	struct vmm_obj_info in = info(v, a);
	CHECK_MSG(in.in_flight == VMM_XFER_H2D && in.valid_mask == 1, "setup: %d %#x", in.in_flight,
	          in.valid_mask);
	CHECK_OK(dev_stream_wait_event(t.s[0], ready));
	CHECK_OK(vt_fill_async(t.s[0], p, T_OBJ, 72));
	CHECK_OK(dev_event_record(t.done[0], t.s[0]));
	CHECK_OK(vmm_release(v, a, 0, t.done[0]));
	CHECK_OK(dev_fail(t.ctx, 0));
	gate_open();
	uint32_t nl = 0;
	CHECK_OK(vmm_device_failed(v, 0, &nl));
	int r = host_probe_soft(v, a, "H2Dw", T_OBJ, 72);
	if (r != 1 || nl != 1 || lost_counter(v) != 1) {
		fprintf(stderr,
		        "FAIL t_write_h2d_failed: WRITE on device 0 (its H2D in flight, the host "
		        "copy already dropped), device 0 fails: host READ %s; nlost %u, "
		        "lost_objects %" PRId64 ", want lost (-EIO) and 1\n",
		        r == 0   ? "returns the new bytes"
		        : r == 1 ? "-EIO"
		                 : "returns 0 with other bytes",
		        nl, lost_counter(v));
		(*bugs)++;
	}
	CHECK_MSG(vmm_sync(v) == 0, "%s", sp_last_error());
	t_close(&t, &a, 1);
	printf("WRITE on the failed device behind an H2D: checked\n");
}

/* ---- the randomized part ---------------------------------------------------------- */

#define R_NOBJ   14
#define R_MAXDEV 3
#define MAXBAD   512
#define NSTAGE   32
#define MAXSZ    (24 * KiB)

struct robj {
	uint64_t id;
	size_t bytes;
	char name[16];
	uint64_t seed;  /* pattern of the last write, 0 = unspecified bytes */
	int lost;       /* the oracle's: lost by a failure, not revived yet */
	int chain_mask; /* devices a prefetch went to since the last write: its last
	                   hop (host -> device) may still be pending (pending_dev) */
};

/* where each object was after the last operation, and what the last change
 * that added a place gained and dropped: an in-flight transfer goes into a
 * gained place, from a dropped one or one still valid */
static uint32_t where_prev[R_NOBJ], gained[R_NOBJ], dropped[R_NOBJ];

struct slot {
	int k, dev, verify, had_ready;
	uint64_t seed;
};

static struct robj ro[R_NOBJ];
static int rndev, failed_mask, in_burst, use_disk;
static struct dev_ctx *rctx;
static struct vmm *rv;
static struct dev_stream *rs[R_MAXDEV];
static struct dev_event *rdone[R_MAXDEV];
static int *bad;
static struct slot slots[MAXBAD];
static int nbad;
static void *stage[NSTAGE];
static struct dev_event *stage_ev[NSTAGE];
static int stage_used[NSTAGE], stage_next;
static uint64_t rng, cur_seed;
static long n_ops, n_fail_settled, n_fail_burst, n_fail_racy, n_lost, n_revived, n_maybe;
static long n_inflight_at_fail;

/* soft failures: counted per kind, the run goes on, the test fails at the end */
enum {
	SF_NLOST,
	SF_NLOST_WD,
	SF_BOUNDS,
	SF_DATA,
	SF_DATA_WR,
	SF_DEVMASK,
	SF_SYNC,
	SF_CHAIN,
	SF_KINDS
};
static const char *sf_names[SF_KINDS] = {
    "nlost/counter",
    "nlost/counter (lost through a failed write-down from the device, not counted)",
    "lost set",
    "bytes with no error",
    "bytes with no error (a write acquire's H2D/P2P failed with the device: no copy left, "
    "not lost)",
    "copy on a failed device",
    "stale error",
    "a prefetch chain (disk -> host -> device) went on to its failed device"};
static long sf[SF_KINDS];
static int verbose; /* DF_VERBOSE=1: every soft failure, not the first 6 of each kind */

#define SOFT(kind, ...)                                                                          \
	do {                                                                                     \
		if (sf[kind]++ < 6 || verbose) {                                                 \
			fprintf(stderr, "FAIL (seed %" PRIu64 ", op %ld) %s: ", cur_seed, n_ops, \
			        sf_names[kind]);                                                 \
			fprintf(stderr, __VA_ARGS__);                                            \
			fprintf(stderr, "\n");                                                   \
		}                                                                                \
	} while (0)

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}
static int rnd_n(int n)
{
	return (int)(rnd() % (uint64_t)n);
}

static int healthy(int d)
{
	return !(failed_mask & (1 << d));
}

static int pick_healthy(void)
{
	for (;;) {
		int d = rnd_n(rndev);
		if (healthy(d))
			return d;
	}
}

static uint64_t new_seed(void)
{
	return (rnd() | 1) & 0xffffffffffffull;
}

static void r_create(int k)
{
	static const size_t sizes[] = {8 * KiB, 16 * KiB, 16 * KiB, 24 * KiB};
	struct robj *o = &ro[k];
	o->bytes = sizes[rnd_n(4)];
	o->seed = 0;
	o->lost = 0;
	o->chain_mask = 0;
	snprintf(o->name, sizeof(o->name), "r%d.%d", k, rnd_n(1000));
	o->id = vt_create(rv, o->bytes, (enum vmm_kind)(k % 5), o->name);
	where_prev[k] = gained[k] = dropped[k] = 0;
}

/* Waits for the callers' streams and checks the reads' results. */
static void flush(void)
{
	CHECK(!in_burst);
	for (int d = 0; d < rndev; d++) {
		int rc = dev_stream_sync(rs[d]);
		CHECK_MSG(rc == (healthy(d) ? 0 : -EIO), "stream sync of device %d: %d", d, rc);
	}
	for (int i = 0; i < nbad; i++) {
		struct slot *s = &slots[i];
		if (bad[i] == -1 && !healthy(s->dev))
			continue; /* dropped with its device */
		CHECK_MSG(bad[i] != -1, "a check kernel on healthy device %d did not run", s->dev);
		if (s->verify && bad[i] != 0)
			SOFT(SF_DATA, "'%s' read on device %d: %d words differ from its last write",
			     ro[s->k].name, s->dev, bad[i]);
	}
	nbad = 0;
}

/* A device transfer's error reported after vmm_device_failed (the contract
 * drops those): of a chain that went on to the failed device, or another. */
static void stale_error(const char *what)
{
	const char *m = sp_last_error(), *q = strstr(m, "object '");
	for (int k = 0; q && k < R_NOBJ; k++) {
		size_t n = strlen(ro[k].name);
		if (strncmp(q + 8, ro[k].name, n) == 0 && q[8 + n] == '\'' &&
		    (ro[k].chain_mask & failed_mask)) {
			SOFT(SF_CHAIN, "%s: %s", what, m);
			return;
		}
	}
	SOFT(SF_SYNC, "%s: %s", what, m);
}

/* 0, or (soft) a device transfer's error reported after vmm_device_failed:
 * the contract drops those; anything else fails the test. */
static void op_rc(int rc, int k, const char *what)
{
	if (rc == 0)
		return;
	if (rc == -EIO && failed_mask && strstr(sp_last_error(), "Input/output error") &&
	    (strstr(sp_last_error(), "h2d") || strstr(sp_last_error(), "p2p") ||
	     strstr(sp_last_error(), "d2h"))) {
		stale_error(what);
		return;
	}
	CHECK_MSG(0, "seed %" PRIu64 " op %ld: %s '%s': %d %s", cur_seed, n_ops, what, ro[k].name,
	          rc, sp_last_error());
}

static void expect_lost_rc(int rc, int k, const char *what)
{
	CHECK_MSG(rc == -EIO, "lost '%s': %s returned %d (%s)", ro[k].name, what, rc,
	          sp_last_error());
	CHECK_MSG(strstr(sp_last_error(), ro[k].name), "%s", sp_last_error());
}

/* An acquire on healthy device d; writes fill a new pattern (kernel or memcpy
 * from pinned host memory), reads check it with a kernel. */
static void dev_use(int k, int d, enum vmm_access acc)
{
	struct robj *o = &ro[k];
	void *p;
	struct dev_event *ready;
	if (nbad >= MAXBAD)
		flush();
	int rc = vmm_acquire(rv, o->id, d, acc, &p, &ready);
	if (o->lost && acc != VMM_OVERWRITE) {
		expect_lost_rc(rc, k, acc == VMM_READ ? "READ" : "WRITE");
		return;
	}
	op_rc(rc, k, "acquire");
	if (rc)
		return;
	vt_wait_ready(rs[d], ready);
	if (rnd_n(5) == 0) {
		long ns = 50000 + 50000 * rnd_n(4);
		CHECK_OK(
		    dev_launch(rs[d], &delay_kernel, &ns, sizeof(ns), (struct dev_cost){0, 0, 0}));
	}
	if (acc == VMM_READ) {
		if (o->seed) {
			CHECK(nbad < MAXBAD);
			bad[nbad] = -1;
			slots[nbad] =
			    (struct slot){k, d, !(in_burst && ready), ready != NULL, o->seed};
			CHECK_OK(vt_check_async(rs[d], p, o->bytes, o->seed, &bad[nbad]));
			nbad++;
		}
	} else {
		o->seed = new_seed();
		o->lost = 0;
		if (rnd_n(2)) {
			CHECK_OK(vt_fill_async(rs[d], p, o->bytes, o->seed));
		} else {
			int i = stage_next++ % NSTAGE;
			if (stage_used[i])
				ignore_rc(dev_event_sync(
				    stage_ev[i])); /* -EIO: dropped with its device */
			vt_fill_host(stage[i], o->bytes, o->seed);
			CHECK_OK(dev_memcpy_async(rs[d], p, d, stage[i], DEV_HOST, o->bytes));
			CHECK_OK(dev_event_record(stage_ev[i], rs[d]));
			stage_used[i] = 1;
		}
	}
	CHECK_OK(dev_event_record(rdone[d], rs[d]));
	CHECK_OK(vmm_release(rv, o->id, d, rdone[d]));
}

static void host_use(int k, enum vmm_access acc)
{
	struct robj *o = &ro[k];
	void *p;
	struct dev_event *ready;
	int rc = vmm_acquire(rv, o->id, VMM_HOST, acc, &p, &ready);
	if (o->lost && acc != VMM_OVERWRITE) {
		expect_lost_rc(rc, k, "host acquire");
		return;
	}
	op_rc(rc, k, "host acquire");
	if (rc)
		return;
	CHECK(ready == NULL);
	if (acc == VMM_READ) {
		if (o->seed) {
			int b = vt_check_host(p, o->bytes, o->seed);
			if (b)
				SOFT(SF_DATA, "'%s' read on the host: %d words differ", o->name, b);
		}
	} else {
		o->seed = new_seed();
		o->lost = 0;
		vt_fill_host(p, o->bytes, o->seed);
	}
	CHECK_OK(vmm_release(rv, o->id, VMM_HOST, NULL));
}

static void track_where(void)
{
	for (int k = 0; k < R_NOBJ; k++) {
		uint32_t w = vmm_obj_where(rv, ro[k].id);
		if (w & ~where_prev[k]) {
			gained[k] = w & ~where_prev[k];
			dropped[k] = where_prev[k] & ~w;
		}
		where_prev[k] = w;
	}
}

/* vmm_prefetch, noting a chain that may go on later (disk -> host -> place) */
static int prefetch(int k, int place)
{
	if (place != VMM_HOST) /* a transfer into the host in flight: pending_dev */
		ro[k].chain_mask |= 1 << place;
	return vmm_prefetch(rv, ro[k].id, place);
}

static void one_op(void)
{
	int k = rnd_n(R_NOBJ), d = pick_healthy(), r = rnd_n(100);
	struct robj *o = &ro[k];
	int rc;
	n_ops++;
	if (r < 16)
		dev_use(k, d, VMM_READ);
	else if (r < 26)
		dev_use(k, d, VMM_WRITE);
	else if (r < 36)
		dev_use(k, d, VMM_OVERWRITE);
	else if (r < 42)
		host_use(k, VMM_READ);
	else if (r < 46)
		host_use(k, (enum vmm_access)(VMM_WRITE + rnd_n(2)));
	else if (r < 56) {
		int place = rnd_n(4) ? d : VMM_HOST;
		rc = prefetch(k, place);
		if (o->lost)
			expect_lost_rc(rc, k, "prefetch");
		else
			op_rc(rc, k, "prefetch");
	} else if (r < 68) {
		int place = rnd_n(4) ? d : VMM_HOST;
		rc = vmm_evict(rv, o->id, place);
		/* no disk tier: a host copy that is the only one cannot leave */
		if (!(rc == -ENOMEM && place == VMM_HOST && !use_disk))
			op_rc(rc, k, "evict");
	} else if (r < 76) {
		rc = vmm_writeback(rv, o->id, use_disk && rnd_n(2));
		op_rc(rc, k, "writeback");
	} else if (r < 80) {
		CHECK_OK(vmm_discard(rv, o->id));
		o->seed = 0;
		o->lost = 0;
		o->chain_mask = 0;
	} else if (r < 82) {
		CHECK_OK(vmm_obj_destroy(rv, o->id));
		r_create(k);
	} else if (r < 86) {
		CHECK_OK(vmm_hint(rv, o->id, rnd_n(3) ? (uint64_t)rnd_n(1000) : VMM_NO_HINT));
	} else if (r < 94) {
		CHECK_OK(vmm_progress(rv));
	} else if (r < 97) {
		rc = vmm_obj_wait(rv, o->id);
		op_rc(rc, k, "obj_wait");
	} else {
		rc = vmm_sync(rv);
		if (rc)
			stale_error("vmm_sync");
	}
}

/* Operations that start transfers touching device fd while the callers' done
 * events are held by the gate (so they wait): objects with a transfer in
 * flight are left alone (a call on them would wait for it). */
static void burst_op(int fd)
{
	int k = rnd_n(R_NOBJ);
	struct robj *o = &ro[k];
	if (o->lost || info(rv, o->id).in_flight >= 0)
		return;
	int d = rnd_n(2) ? fd : pick_healthy(), r = rnd_n(100), rc;
	n_ops++;
	if (r < 25)
		dev_use(k, d, VMM_READ);
	else if (r < 45)
		dev_use(k, d, VMM_WRITE);
	else if (r < 60)
		dev_use(k, d, VMM_OVERWRITE);
	else if (r < 75) {
		rc = prefetch(k, d);
		CHECK_MSG(rc == 0, "prefetch: %d %s", rc, sp_last_error());
	} else if (r < 90) {
		rc = vmm_evict(rv, o->id, d);
		CHECK_MSG(rc == 0, "evict: %d %s", rc, sp_last_error());
	} else {
		rc = vmm_writeback(rv, o->id, 0);
		CHECK_MSG(rc == 0, "writeback: %d %s", rc, sp_last_error());
	}
}

/* Device fd fails; mode 0: settled, 1: behind a gated burst, 2: as it is. */
static void fail_device(int fd, int mode)
{
	struct vmm_obj_info sn[R_NOBJ];
	int was_lost[R_NOBJ];
	if (mode == 0) {
		flush();
		int rc = vmm_sync(rv);
		if (rc)
			stale_error("vmm_sync before the failure");
		n_fail_settled++;
	} else if (mode == 1) {
		flush();
		gate_close();
		for (int d = 0; d < rndev; d++)
			if (healthy(d))
				gate_stream(rs[d]);
		in_burst = 1;
		for (int i = 4 + rnd_n(10); i > 0; i--) {
			burst_op(fd);
			track_where();
		}
		n_fail_burst++;
	} else {
		for (int i = rnd_n(4); i > 0; i--) { /* start a few more */
			int k = rnd_n(R_NOBJ);
			if (!ro[k].lost)
				CHECK_OK(prefetch(k, rnd_n(2) ? fd : VMM_HOST));
			track_where();
		}
		n_fail_racy++;
	}
	/* one object pinned on fd, if one is there and idle */
	int pinned = -1;
	for (int k = 0; k < R_NOBJ && pinned < 0; k++) {
		struct vmm_obj_info in = info(rv, ro[k].id);
		if (!ro[k].lost && (in.valid_mask & dbit(fd)) && in.in_flight < 0 && rnd_n(2)) {
			void *p;
			struct dev_event *r;
			CHECK_OK(vmm_acquire(rv, ro[k].id, fd, VMM_READ, &p, &r));
			pinned = k;
		}
	}
	track_where();
	for (int k = 0; k < R_NOBJ; k++) {
		sn[k] = info(rv, ro[k].id);
		was_lost[k] = ro[k].lost;
		n_inflight_at_fail += sn[k].in_flight >= 0;
	}
	int64_t lc0 = lost_counter(rv);
	if (verbose)
		fprintf(stderr, "seed %" PRIu64 " op %ld: device %d fails (mode %d)\n", cur_seed,
		        n_ops, fd, mode);
	/* a read not flushed yet that waited on a ready event (a copy that may
	 * come from fd) may see what a dropped copy left: not checked */
	for (int i = 0; i < nbad; i++)
		if (slots[i].had_ready)
			slots[i].verify = 0;
	CHECK_OK(dev_fail(rctx, fd));
	uint32_t nl = 12345;
	if (pinned >= 0) {
		int rc = vmm_device_failed(rv, fd, &nl);
		CHECK_MSG(rc == -EBUSY, "vmm_device_failed with '%s' pinned on %d: %d %s",
		          ro[pinned].name, fd, rc, sp_last_error());
		CHECK(lost_counter(rv) == lc0);
		CHECK_OK(dev_event_record(rdone[fd], rs[fd]));
		CHECK_OK(vmm_release(rv, ro[pinned].id, fd, rdone[fd]));
	}
	if (mode == 1) {
		gate_open();
		in_burst = 0;
	}
	int rc = vmm_device_failed(rv, fd, &nl);
	CHECK_MSG(rc == 0, "vmm_device_failed(%d): %d %s", fd, rc, sp_last_error());
	failed_mask |= 1 << fd;
	CHECK_MSG(dev_failed(rctx, fd) == 1, "dev_failed");
	int64_t dl = lost_counter(rv) - lc0;
	if ((int64_t)nl != dl)
		SOFT(SF_NLOST, "nlost %u but lost_objects grew by %" PRId64, nl, dl);
	flush();
	rc = vmm_sync(rv);
	if (rc)
		stale_error("vmm_sync after vmm_device_failed");
	/* which objects are lost now: exactly those whose only valid copy was on
	 * fd; with a transfer in flight, possibly the one whose other copy was
	 * being filled from fd */
	int newly = 0, named_dev = 0;
	for (int k = 0; k < R_NOBJ; k++) {
		struct robj *o = &ro[k];
		struct vmm_obj_info in = info(rv, o->id);
		if (in.valid_mask & dbit(fd))
			SOFT(SF_DEVMASK, "'%s' still valid on failed device %d (%#x)", o->name, fd,
			     in.valid_mask);
		CHECK(in.pinned_mask == 0);
		uint32_t rest = sn[k].valid_mask & ~dbit(fd);
		int lmin = (sn[k].valid_mask & dbit(fd)) && rest == 0;
		/* in flight: lost only if the transfer may touch fd (fd valid, or
		 * dropped when it started) and fills the one other copy */
		int touches = (sn[k].valid_mask & dbit(fd)) || (dropped[k] & dbit(fd));
		int lmax = lmin || (sn[k].in_flight >= 0 && popcount(rest) == 1 &&
		                    (rest & gained[k]) && touches);
		int r = host_probe_soft(rv, o->id, o->name, o->bytes, o->seed);
		if (r == 2) {
			int wr =
			    (sn[k].in_flight == VMM_XFER_H2D || sn[k].in_flight == VMM_XFER_P2P) &&
			    popcount(sn[k].valid_mask) == 1;
			SOFT(
			    wr ? SF_DATA_WR : SF_DATA,
			    "'%s' (valid %#x, in flight %d at the failure of %d) reads other bytes "
			    "than its last write, with no error",
			    o->name, sn[k].valid_mask, sn[k].in_flight, fd);
			o->seed = 0;
			continue;
		}
		int lost = r == 1;
		if (lost && !was_lost[k] && strstr(sp_last_error(), "which failed"))
			named_dev++;
		if (was_lost[k]) {
			CHECK_MSG(lost, "'%s' was lost and is not any more", o->name);
			continue;
		}
		n_maybe += lmax && !lmin;
		if (lost && !lmax)
			SOFT(SF_BOUNDS,
			     "'%s' lost, but it had copies %#x (in flight %d) at the failure of %d",
			     o->name, sn[k].valid_mask, sn[k].in_flight, fd);
		if (!lost && lmin)
			SOFT(SF_BOUNDS, "'%s' not lost, but its only copy (%#x) was on failed %d",
			     o->name, sn[k].valid_mask, fd);
		if (lost) {
			newly++;
			o->lost = 1;
		}
	}
	if ((uint32_t)newly != nl) {
		/* the ones lost through their failed write-down say so, not "device" */
		if ((uint32_t)named_dev == nl)
			SOFT(SF_NLOST_WD,
			     "failure of %d (mode %d): %d objects became lost, nlost %u", fd, mode,
			     newly, nl);
		else
			SOFT(SF_NLOST, "failure of %d (mode %d): %d objects became lost, nlost %u",
			     fd, mode, newly, nl);
	}
	n_lost += newly;
	/* the survivors read back on a surviving device too; -ENODEV on fd */
	for (int k = 0; k < R_NOBJ; k++) {
		struct robj *o = &ro[k];
		void *p;
		struct dev_event *r;
		CHECK_MSG(vmm_acquire(rv, o->id, fd, (enum vmm_access)(1 + rnd_n(3)), &p, &r) ==
		              -ENODEV,
		          "acquire on failed %d: %s", fd, sp_last_error());
		CHECK(vmm_prefetch(rv, o->id, fd) == -ENODEV);
		if (o->lost) {
			if (rnd_n(3) == 0)
				check_refuses(rv, o->id, o->name, rndev, failed_mask);
			if (rnd_n(2)) { /* revive now (else later, by the random ops) */
				n_revived++;
				if (rnd_n(3) == 0) {
					CHECK_OK(vmm_discard(rv, o->id));
					o->seed = 0;
					o->lost = 0;
				} else if (rnd_n(2)) {
					dev_use(k, pick_healthy(), VMM_OVERWRITE);
				} else {
					host_use(k, VMM_OVERWRITE);
				}
			}
		} else if (o->seed) {
			dev_use(k, pick_healthy(), VMM_READ);
		}
	}
	flush();
	track_where();
}

/* No copy (valid or being filled) and no space on a failed device. */
static void check_failed_empty(const char *when)
{
	for (int d = 0; d < rndev; d++) {
		if (healthy(d))
			continue;
		uint64_t used, cap;
		CHECK_OK(vmm_place_usage(rv, d, &used, &cap));
		for (int k = 0; k < R_NOBJ; k++) {
			if (!(vmm_obj_where(rv, ro[k].id) & dbit(d)))
				continue;
			if (ro[k].chain_mask & (1 << d)) {
				SOFT(SF_CHAIN, "%s: '%s' has a copy on failed device %d", when,
				     ro[k].name, d);
				used = 0;
			} else {
				SOFT(SF_DEVMASK, "%s: '%s' has a copy on failed device %d", when,
				     ro[k].name, d);
			}
		}
		if (used)
			SOFT(SF_DEVMASK, "%s: failed device %d holds %" PRIu64 " bytes", when, d,
			     used);
	}
}

static void run_seed(uint64_t seed, long ops, const char *dir)
{
	cur_seed = seed;
	rng = seed * 0x9e3779b97f4a7c15ull + 7;
	rndev = 2 + (int)(seed % 2);
	use_disk = seed % 3 != 2;
	failed_mask = 0;
	nbad = 0;
	rctx = vt_open_host(rndev, 2 << 20);
	/* device pools of about 4 objects, a host pool of 8 with a disk tier (all
	 * of them without: host copies that are the only copy cannot leave) */
	struct vmm_config c =
	    vt_config(72 * KiB, 0, use_disk ? 160 * KiB : R_NOBJ * MAXSZ + 64 * KiB);
	c.max_objects = 64;
	c.policy = (enum vmm_policy)rnd_n(3);
	if (use_disk)
		vt_config_disk(&c, dir, 0, "");
	CHECK_OK(vmm_open(rctx, &c, &rv));
	for (int d = 0; d < rndev; d++) {
		CHECK_OK(dev_stream_create(rctx, d, &rs[d]));
		CHECK_OK(dev_event_create(rctx, &rdone[d]));
	}
	for (int i = 0; i < NSTAGE; i++) {
		CHECK_OK(dev_host_alloc(rctx, MAXSZ, &stage[i]));
		CHECK_OK(dev_event_create(rctx, &stage_ev[i]));
		stage_used[i] = 0;
	}
	for (int k = 0; k < R_NOBJ; k++)
		r_create(k);
	int nfail = rndev == 3 && rnd_n(2) ? 2 : 1;
	long at[2] = {10 + rnd_n((int)ops / 2), 0};
	at[1] = at[0] + 10 + rnd_n((int)ops / 2);
	int f = 0;
	for (long i = 0; i < ops; i++) {
		if (f < nfail && i == at[f]) {
			fail_device(pick_healthy(), rnd_n(3));
			f++;
		}
		one_op();
		track_where();
		check_failed_empty("after an operation");
	}
	flush();
	int rc = vmm_sync(rv);
	if (rc)
		stale_error("final vmm_sync");
	for (int k = 0; k < R_NOBJ; k++) {
		struct robj *o = &ro[k];
		if (o->lost) {
			CHECK(host_probe_soft(rv, o->id, o->name, o->bytes, 0) == 1);
			continue;
		}
		int r = host_probe_soft(rv, o->id, o->name, o->bytes, o->seed);
		if (r)
			SOFT(SF_DATA, "final read of '%s': %s", o->name, r == 1 ? "-EIO" : "bytes");
	}
	for (int k = 0; k < R_NOBJ; k++)
		CHECK_OK(vmm_obj_destroy(rv, ro[k].id));
	CHECK_MSG(vmm_sync(rv) == 0, "%s", sp_last_error());
	vmm_close(rv);
	for (int d = 0; d < rndev; d++) {
		CHECK_MSG(dev_stream_destroy(rs[d]) == 0, "%s", sp_last_error());
		CHECK_OK(dev_event_destroy(rdone[d]));
	}
	for (int i = 0; i < NSTAGE; i++) {
		CHECK_OK(dev_host_free(rctx, stage[i]));
		CHECK_OK(dev_event_destroy(stage_ev[i]));
	}
	dev_close(rctx);
}

int main(int argc, char **argv)
{
	verbose = getenv("DF_VERBOSE") && atoi(getenv("DF_VERBOSE"));
	int nseeds = argc > 1 ? atoi(argv[1]) : 150;
	uint64_t seed0 = argc > 2 ? strtoull(argv[2], NULL, 0) : 1;
	long ops = argc > 3 ? atol(argv[3]) : 250;
	const char *dir = vt_tmpdir();
	pthread_t wd;
	CHECK(pthread_create(&wd, NULL, watchdog, NULL) == 0);
	bad = calloc(MAXBAD, sizeof(int));
	CHECK(bad);
	int bugs = 0;

	t_basic();
	t_writedown_in_flight(&bugs);
	t_write_from_failed(0, &bugs);
	t_write_from_failed(1, &bugs);
	t_write_h2d_failed(&bugs);
	t_chain(dir, &bugs);
	t_errors(dir);
	t_two_failures();

	double t0 = now_s();
	for (int i = 0; i < nseeds; i++)
		run_seed(seed0 + (uint64_t)i, ops, dir);
	printf("random: %d seeds, %ld ops, failures: %ld settled, %ld behind a gated burst, %ld "
	       "as they came (%ld transfers in flight at them); %ld objects lost (%ld with a "
	       "transfer in flight that could go either way), %ld revived at once; watchdog %ld; "
	       "%.1f s\n",
	       nseeds, n_ops, n_fail_settled, n_fail_burst, n_fail_racy, n_inflight_at_fail, n_lost,
	       n_maybe, n_revived, watchdog_fires, now_s() - t0);
	pthread_mutex_lock(&gate.mu);
	watchdog_stop = 1;
	pthread_mutex_unlock(&gate.mu);
	pthread_join(wd, NULL);
	free(bad);
	vt_rmdir(dir);
	long soft = 0;
	for (int i = 0; i < SF_KINDS; i++) {
		if (sf[i])
			fprintf(stderr, "FAIL random: %ld x %s\n", sf[i], sf_names[i]);
		soft += sf[i];
	}
	CHECK_MSG(bugs == 0 && soft == 0, "%d targeted case(s) and %ld random check(s) failed",
	          bugs, soft);
	TEST_PASS();
}

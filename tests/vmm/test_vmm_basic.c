/* tests/vmm/test_vmm_basic.c — the vmm's state machine step by step on the host
 * backend with 2 emulated devices: data written by kernels on device streams
 * survives device -> host -> device and P2P moves (checked by kernels that wait
 * on the acquire's ready event and release with a done event); clean copies are
 * dropped and dirty ones written back; prefetch, writeback, hint, obj_wait and
 * the info masks; a stable object keeps its address across evict/re-acquire and
 * a child process touching it while evicted dies of SIGSEGV; fragmentation
 * evicts a window; a dirty victim's space is reused in stream order while its
 * write-down and its last reader are still pending, and a WRITE acquire and a
 * write-back of a copy still arriving do not block; discard drops dead
 * contents without writing them; a prefetch evicts only what is needed after
 * its object; -ENOMEM names the object, the device and the bytes; bad
 * calls are errors; the vmm's byte counts equal the device layer's copies. */
#include "tests/vmm/vmm_test.h"
#include "tests/child.h"

#include <signal.h>
#include <stdint.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/wait.h>

#define KiB 1024ull
#define MiB (1024ull * 1024)

static struct dev_ctx *ctx;
static struct vmm *v;
static struct dev_stream *st[2];
static struct dev_event *done[2];

static void open_all(void)
{
	ctx = vt_open_host(2, 8 * MiB);
	struct vmm_config c = vt_config(1 * MiB, 256 * KiB, 4 * MiB);
	CHECK_OK(vmm_open(ctx, &c, &v));
	for (int d = 0; d < 2; d++) {
		CHECK_OK(dev_stream_create(ctx, d, &st[d]));
		CHECK_OK(dev_event_create(ctx, &done[d]));
	}
}

static void close_all(void)
{
	vmm_close(v);
	dev_close(ctx);
	v = NULL;
	ctx = NULL;
}

static struct vmm_obj_info info(uint64_t id)
{
	struct vmm_obj_info i;
	CHECK_OK(vmm_obj_info(v, id, &i));
	return i;
}

static struct vmm_stats stats(void)
{
	struct vmm_stats s;
	vmm_stats_get(v, &s);
	return s;
}

#define DEV(d) (1u << (d))

/* device -> host -> device, P2P, drops and write-backs, prefetch, writeback. */
static void test_moves(void)
{
	const size_t n = 64 * KiB;
	uint64_t a = vt_create(v, n, VMM_KIND_WEIGHT, "a");
	struct vmm_obj_info i = info(a);
	CHECK(i.valid_mask == 0 && i.in_flight == -1 && i.bytes == n);

	/* the first write on host; reads on device 0 (H2D) and device 1 (P2P) */
	vt_write_host(v, a, n, 1);
	i = info(a);
	CHECK(i.valid_mask == VMM_INFO_HOST && i.dirty_mask == VMM_INFO_HOST);
	void *p;
	struct dev_event *ready;
	CHECK_OK(vmm_acquire(v, a, 0, VMM_READ, &p, &ready));
	CHECK_MSG(ready != NULL, "a copy that had to be brought needs a ready event");
	CHECK(info(a).pinned_mask == DEV(0));
	CHECK(vmm_release(v, a, 0, NULL) == 0);
	CHECK(vmm_release(v, a, 0, NULL) == -EINVAL); /* not acquired any more */
	CHECK(strstr(sp_last_error(), "'a'") && strstr(sp_last_error(), "not acquired"));
	CHECK_OK(vmm_obj_wait(v, a));
	CHECK(vt_read_dev(v, a, 0, st[0], done[0], n, 1) == 0);
	CHECK(vt_read_dev(v, a, 1, st[1], done[1], n, 1) == 0);
	i = info(a);
	CHECK_MSG(i.valid_mask == (DEV(0) | DEV(1) | VMM_INFO_HOST), "valid %#x", i.valid_mask);
	CHECK(i.dirty_mask == VMM_INFO_HOST); /* device copies are clean */
	CHECK_MSG(i.bytes_moved[VMM_XFER_H2D] == n && i.bytes_moved[VMM_XFER_P2P] == n,
	          "h2d %" PRIu64 " p2p %" PRIu64, i.bytes_moved[VMM_XFER_H2D],
	          i.bytes_moved[VMM_XFER_P2P]);
	CHECK(i.moves[VMM_XFER_H2D] == 1 && i.moves[VMM_XFER_P2P] == 1);

	/* clean device copies are dropped: nothing moves */
	struct vmm_stats s0 = stats();
	CHECK_OK(vmm_evict(v, a, 0));
	CHECK_OK(vmm_evict(v, a, 1));
	CHECK_OK(vmm_evict(v, a, 1)); /* no copy there: fine */
	i = info(a);
	CHECK(i.valid_mask == VMM_INFO_HOST && i.bytes_moved[VMM_XFER_D2H] == 0);
	CHECK(stats().drops.total == s0.drops.total + 2);

	/* a write on device 1 makes it the only, dirty copy; eviction writes it back */
	vt_write_dev(v, a, 1, VMM_WRITE, st[1], done[1], n, 2);
	i = info(a);
	CHECK(i.valid_mask == DEV(1) && i.dirty_mask == DEV(1));
	CHECK_OK(vmm_evict(v, a, 1)); /* D2H waits for the fill through done */
	CHECK_OK(vmm_obj_wait(v, a));
	i = info(a);
	CHECK(i.valid_mask == VMM_INFO_HOST && i.bytes_moved[VMM_XFER_D2H] == n);
	CHECK(vt_read_host(v, a, n, 2) == 0);
	CHECK(vt_read_dev(v, a, 0, st[0], done[0], n, 2) == 0); /* host -> device 0 */

	/* overwrite on device 1 (nothing brought), P2P to device 0 */
	uint64_t h2d = info(a).bytes_moved[VMM_XFER_H2D];
	vt_write_dev(v, a, 1, VMM_OVERWRITE, st[1], done[1], n, 3);
	CHECK(info(a).bytes_moved[VMM_XFER_H2D] == h2d);
	CHECK(info(a).valid_mask == DEV(1));
	CHECK(vt_read_dev(v, a, 0, st[0], done[0], n, 3) == 0);
	i = info(a);
	CHECK(i.valid_mask == (DEV(0) | DEV(1)) && i.dirty_mask == 0);
	CHECK(i.bytes_moved[VMM_XFER_P2P] == 2 * n);

	/* writeback: a host copy appears, the device copies stay */
	CHECK_OK(vmm_writeback(v, a, 0));
	CHECK_OK(vmm_obj_wait(v, a));
	i = info(a);
	CHECK(i.valid_mask == (DEV(0) | DEV(1) | VMM_INFO_HOST));
	CHECK(vt_read_host(v, a, n, 3) == 0);
	CHECK(vmm_writeback(v, a, 1) == -EINVAL); /* no disk tier */

	/* prefetch: the copy is there (or arriving) when acquired */
	CHECK_OK(vmm_evict(v, a, 0));
	CHECK_OK(vmm_evict(v, a, 1));
	s0 = stats();
	CHECK_OK(vmm_prefetch(v, a, 1));
	CHECK(stats().prefetches.total == s0.prefetches.total + 1);
	CHECK_OK(vmm_prefetch(v, a, 1)); /* already arriving: nothing new */
	CHECK(stats().prefetches.total == s0.prefetches.total + 1);
	CHECK(info(a).valid_mask & DEV(1));
	CHECK(vt_read_dev(v, a, 1, st[1], done[1], n, 3) == 0);
	CHECK(stats().hits.total == s0.hits.total + 1);
	CHECK_OK(vmm_progress(v));
	CHECK_OK(vmm_hint(v, a, 42));
	CHECK(info(a).next_use == 42);
	CHECK_OK(vmm_hint(v, a, VMM_NO_HINT));

	/* several readers on one device share the copy; a write elsewhere is refused */
	void *p2;
	CHECK_OK(vmm_acquire(v, a, 1, VMM_READ, &p, &ready));
	CHECK_OK(vmm_acquire(v, a, 1, VMM_READ, &p2, &ready));
	CHECK(p == p2 && ready == NULL);
	CHECK(vmm_acquire(v, a, 0, VMM_WRITE, &p2, &ready) == -EBUSY);
	CHECK(strstr(sp_last_error(), "'a'"));
	CHECK(vmm_evict(v, a, 1) == -EBUSY);
	CHECK(vmm_obj_destroy(v, a) == -EBUSY);
	CHECK_OK(vmm_release(v, a, 1, NULL));
	CHECK_OK(vmm_release(v, a, 1, NULL));
	/* while written on one place, the object is not read or written back elsewhere */
	CHECK_OK(vmm_acquire(v, a, 1, VMM_WRITE, &p, &ready));
	CHECK(vmm_acquire(v, a, 0, VMM_READ, &p2, &ready) == -EBUSY);
	CHECK(vmm_acquire(v, a, VMM_HOST, VMM_READ, &p2, &ready) == -EBUSY);
	CHECK(vmm_prefetch(v, a, 0) == -EBUSY);
	CHECK(vmm_writeback(v, a, 0) == -EBUSY);
	CHECK_OK(vmm_release(v, a, 1, NULL));
	CHECK(vt_read_dev(v, a, 0, st[0], done[0], n, 3) == 0);

	CHECK_OK(vmm_obj_destroy(v, a));
	CHECK(vmm_obj_destroy(v, a) == -EINVAL);
	CHECK(vmm_acquire(v, a, 0, VMM_READ, &p, &ready) == -EINVAL);
	CHECK(vmm_obj_info(v, a, &i) == -EINVAL);
}

/* Under pressure: victims are chosen, dirty ones written back, clean dropped. */
static void test_pressure(void)
{
	const size_t n = 192 * KiB; /* 4 fit in the 768 KiB pool of a device */
	uint64_t o[8];
	char name[16];
	for (int k = 0; k < 8; k++) {
		snprintf(name, sizeof(name), "p%d", k);
		o[k] = vt_create(v, n, k % 2 ? VMM_KIND_GRAD : VMM_KIND_WEIGHT, name);
		if (k % 2)
			vt_write_dev(v, o[k], 0, VMM_OVERWRITE, st[0], done[0], n, 100 + k);
		else
			vt_write_host(v, o[k], n, 100 + k);
	}
	for (int round = 0; round < 3; round++)
		for (int k = 0; k < 8; k++)
			CHECK_MSG(vt_read_dev(v, o[k], round % 2, st[round % 2], done[round % 2], n,
			                      100 + k) == 0,
			          "round %d object %d", round, k);
	struct vmm_stats s = stats();
	CHECK(s.evictions.total > 0 && s.drops.total > 0 && s.writebacks.total > 0);
	for (int k = 0; k < 8; k += 2) /* weights: never copied back */
		CHECK(info(o[k]).bytes_moved[VMM_XFER_D2H] == 0);
	for (int k = 0; k < 8; k++)
		CHECK_OK(vmm_obj_destroy(v, o[k]));
}

/* A pool with enough free bytes but no hole: the cheapest window goes. */
static void test_fragmentation(void)
{
	const size_t q = 256 * KiB; /* the 768 KiB pool holds 3 */
	uint64_t o[3];
	for (int k = 0; k < 3; k++) {
		o[k] = vt_create(v, q, VMM_KIND_INTERMEDIATE, NULL);
		vt_write_dev(v, o[k], 0, VMM_OVERWRITE, st[0], done[0], q, 200 + k);
	}
	CHECK_OK(vmm_writeback(v, o[1], 0)); /* o[1] gets a host copy: cheaper to drop */
	CHECK_OK(vmm_obj_wait(v, o[1]));
	CHECK_OK(vmm_evict(v, o[0], 0)); /* holes at 0 and 512 KiB: 512 KiB free */
	CHECK_OK(vmm_obj_wait(v, o[0]));
	CHECK_OK(vmm_evict(v, o[2], 0));
	CHECK_OK(vmm_obj_wait(v, o[2]));
	uint64_t big = vt_create(v, 2 * q, VMM_KIND_INTERMEDIATE, "big");
	struct vmm_stats s0 = stats();
	vt_write_dev(v, big, 0, VMM_OVERWRITE, st[0], done[0], 2 * q, 299);
	struct vmm_stats s1 = stats();
	CHECK_MSG(s1.frag_evictions.total == s0.frag_evictions.total + 1, "frag evictions %" PRIu64,
	          s1.frag_evictions.total - s0.frag_evictions.total);
	CHECK(s1.drops.total == s0.drops.total + 1); /* o[1] was clean */
	CHECK(!(info(o[1]).valid_mask & DEV(0)));
	for (int k = 0; k < 3; k++)
		CHECK(vt_read_dev(v, o[k], 1, st[1], done[1], q, 200 + k) == 0);
	CHECK(vt_read_dev(v, big, 0, st[0], done[0], 2 * q, 299) == 0);
	for (int k = 0; k < 3; k++)
		CHECK_OK(vmm_obj_destroy(v, o[k]));
	CHECK_OK(vmm_obj_destroy(v, big));
}

static void sleep_ms_fn(void *arg)
{
	struct timespec ts = {0, (long)(intptr_t)arg * 1000000L};
	nanosleep(&ts, NULL);
}

/* Stream-ordered reuse: a dirty victim evicted to make room is written down
 * while the host goes on. Its fill is still queued behind a 200 ms sleep, so
 * its fence, its D2H and the reuse of its space are all pending when the new
 * object's acquire returns: no blocking wait was made, the acquire's ready
 * event is not complete, and the bytes written into the reused space after
 * waiting on it do not reach the victim's copy on the host. */
static void test_ordered_reuse(void)
{
	const size_t n = 384 * KiB; /* 2 fit in the 768 KiB pool of a device */
	struct dev_stream *other;
	struct dev_event *done2;
	CHECK_OK(dev_stream_create(ctx, 0, &other));
	CHECK_OK(dev_event_create(ctx, &done2));
	uint64_t g1 = vt_create(v, n, VMM_KIND_GRAD, "g1");
	uint64_t g2 = vt_create(v, n, VMM_KIND_GRAD, "g2");
	uint64_t g3 = vt_create(v, n, VMM_KIND_GRAD, "g3");
	CHECK_OK(dev_host_callback(st[0], sleep_ms_fn, (void *)(intptr_t)200));
	vt_write_dev(v, g1, 0, VMM_OVERWRITE, st[0], done[0], n, 401);
	vt_write_dev(v, g2, 0, VMM_OVERWRITE, other, done2, n, 402);
	CHECK_OK(dev_event_sync(done2));
	CHECK_OK(vmm_hint(v, g1, 10)); /* Belady: g1 (used later) is the victim */
	CHECK_OK(vmm_hint(v, g2, 5));
	struct vmm_stats s0 = stats();
	void *p;
	struct dev_event *ready;
	CHECK_OK(vmm_acquire(v, g3, 0, VMM_OVERWRITE, &p, &ready));
	struct vmm_stats s1 = stats();
	CHECK(ready != NULL && dev_event_query(ready) == -EAGAIN);
	CHECK_MSG(s1.waits.total == s0.waits.total && s1.fence_waits.total == s0.fence_waits.total,
	          "the acquire waited: %" PRIu64 " transfer and %" PRIu64 " fence waits",
	          s1.waits.total - s0.waits.total, s1.fence_waits.total - s0.fence_waits.total);
	CHECK(s1.ordered_reuses.total == s0.ordered_reuses.total + 1);
	CHECK(s1.writebacks.total == s0.writebacks.total + 1);
	struct vmm_obj_info i = info(g1);
	CHECK(i.valid_mask == VMM_INFO_HOST && i.in_flight == VMM_XFER_D2H);
	vt_wait_ready(other, ready);
	CHECK_OK(vt_fill_async(other, p, n, 403));
	CHECK_OK(dev_event_record(done2, other));
	CHECK_OK(vmm_release(v, g3, 0, done2));
	CHECK(vt_read_host(v, g1, n, 401) == 0);
	CHECK(vt_read_dev(v, g3, 0, other, done2, n, 403) == 0);
	CHECK(vt_read_dev(v, g1, 1, st[1], done[1], n, 401) == 0);
	CHECK(vt_read_dev(v, g2, 0, other, done2, n, 402) == 0);
	CHECK_OK(vmm_obj_destroy(v, g1));
	CHECK_OK(vmm_obj_destroy(v, g2));
	CHECK_OK(vmm_obj_destroy(v, g3));

	/* With the H2D of a prefetched weight held back the same way (it waits
	 * for its space), a WRITE acquire of it and a write-back of it return at
	 * once: the caller's kernel waits on the ready event, and the write-back
	 * starts when the H2D lands; vmm_obj_wait sees both through. */
	uint64_t w = vt_create(v, n, VMM_KIND_WEIGHT, "w");
	vt_write_host(v, w, n, 410);
	g1 = vt_create(v, n, VMM_KIND_GRAD, "g1");
	g2 = vt_create(v, n, VMM_KIND_GRAD, "g2");
	CHECK_OK(dev_host_callback(st[0], sleep_ms_fn, (void *)(intptr_t)200));
	vt_write_dev(v, g1, 0, VMM_OVERWRITE, st[0], done[0], n, 411);
	vt_write_dev(v, g2, 0, VMM_OVERWRITE, other, done2, n, 412);
	CHECK_OK(dev_event_sync(done2));
	CHECK_OK(vmm_hint(v, g1, 10));
	CHECK_OK(vmm_hint(v, g2, 5));
	s0 = stats();
	CHECK_OK(vmm_prefetch(v, w, 0));
	CHECK(info(w).in_flight == VMM_XFER_H2D);
	CHECK_OK(vmm_acquire(v, w, 0, VMM_WRITE, &p, &ready));
	CHECK(ready != NULL && dev_event_query(ready) == -EAGAIN);
	i = info(w);
	CHECK(i.valid_mask == DEV(0) &&
	      i.in_flight == VMM_XFER_H2D); /* host copy goes on landing */
	vt_wait_ready(other, ready);
	CHECK_OK(vt_fill_async(other, p, n, 413));
	CHECK_OK(dev_event_record(done2, other));
	CHECK_OK(vmm_release(v, w, 0, done2));
	CHECK_OK(vmm_writeback(v, w, 0));
	s1 = stats();
	CHECK_MSG(s1.waits.total == s0.waits.total && s1.fence_waits.total == s0.fence_waits.total,
	          "blocking waits: %" PRIu64, s1.waits.total - s0.waits.total);
	CHECK_OK(vmm_obj_wait(v, w));
	i = info(w);
	CHECK(i.valid_mask == (DEV(0) | VMM_INFO_HOST) && i.in_flight < 0);
	CHECK(vt_read_host(v, w, n, 413) == 0);
	CHECK(vt_read_dev(v, g1, 1, st[1], done[1], n, 411) == 0);

	/* discard: dead contents are dropped everywhere, nothing is written */
	uint64_t d2h = vmm_xfer_bytes(v, VMM_XFER_D2H);
	vt_write_dev(v, g2, 0, VMM_OVERWRITE, other, done2, n, 414);
	CHECK_OK(vmm_acquire(v, g2, 0, VMM_READ, &p, &ready));
	CHECK(vmm_discard(v, g2) == -EBUSY);
	CHECK_OK(vmm_release(v, g2, 0, NULL));
	s0 = stats();
	CHECK_OK(vmm_discard(v, g2));
	CHECK(stats().discards.total == s0.discards.total + 1);
	CHECK(info(g2).valid_mask == 0);
	CHECK_OK(vmm_evict(v, g2, 0)); /* nothing there: fine */
	CHECK(vmm_xfer_bytes(v, VMM_XFER_D2H) == d2h);
	vt_write_dev(v, g2, 1, VMM_OVERWRITE, st[1], done[1], n, 415); /* reused at once */
	CHECK(vt_read_dev(v, g2, 1, st[1], done[1], n, 415) == 0);
	CHECK(vmm_discard(v, 12345) == -EINVAL);
	CHECK_OK(vmm_obj_destroy(v, w));
	CHECK_OK(vmm_obj_destroy(v, g1));
	CHECK_OK(vmm_obj_destroy(v, g2));
	CHECK_OK(dev_stream_destroy(other));
	CHECK_OK(dev_event_destroy(done2));
}

/* Belady with prefetching: a prefetch makes room only by evicting copies
 * needed after its own object; otherwise it starts nothing and says 0. An
 * acquire still evicts whatever Belady picks. */
static void test_prefetch_rule(void)
{
	const size_t n = 384 * KiB; /* 2 fit in the 768 KiB pool of a device */
	uint64_t a = vt_create(v, n, VMM_KIND_WEIGHT, "pa");
	uint64_t b = vt_create(v, n, VMM_KIND_WEIGHT, "pb");
	uint64_t c = vt_create(v, n, VMM_KIND_WEIGHT, "pc");
	vt_write_host(v, c, n, 500);
	vt_write_dev(v, a, 0, VMM_OVERWRITE, st[0], done[0], n, 501);
	vt_write_dev(v, b, 0, VMM_OVERWRITE, st[0], done[0], n, 502);
	CHECK_OK(vmm_hint(v, a, 10));
	CHECK_OK(vmm_hint(v, b, 20));
	CHECK_OK(vmm_hint(v, c, 30)); /* needed after both: not worth either */
	struct vmm_stats s0 = stats();
	CHECK_OK(vmm_prefetch(v, c, 0));
	struct vmm_stats s1 = stats();
	CHECK(s1.prefetch_skips.total == s0.prefetch_skips.total + 1);
	CHECK(s1.prefetches.total == s0.prefetches.total &&
	      s1.evictions.total == s0.evictions.total);
	CHECK(!(info(c).valid_mask & DEV(0)) && (info(a).valid_mask & info(b).valid_mask & DEV(0)));
	CHECK_OK(vmm_hint(v, c, 15)); /* now before b: b goes */
	CHECK_OK(vmm_prefetch(v, c, 0));
	CHECK(stats().prefetches.total == s0.prefetches.total + 1);
	CHECK((info(c).valid_mask & DEV(0)) && !(info(b).valid_mask & DEV(0)));
	CHECK(info(a).valid_mask & DEV(0));
	CHECK(vt_read_dev(v, c, 0, st[0], done[0], n, 500) == 0);
	CHECK(vt_read_dev(v, b, 0, st[0], done[0], n, 502) == 0); /* an acquire evicts */
	CHECK(vt_read_dev(v, a, 1, st[1], done[1], n, 501) == 0);
	CHECK_OK(vmm_obj_destroy(v, a));
	CHECK_OK(vmm_obj_destroy(v, b));
	CHECK_OK(vmm_obj_destroy(v, c));
}

/* -ENOMEM names the object, the device and the bytes. */
static void test_enomem(void)
{
	uint64_t a = vt_create(v, 512 * KiB, VMM_KIND_STASH, "layer7.act");
	uint64_t b = vt_create(v, 384 * KiB, VMM_KIND_STASH, "layer8.act");
	uint64_t huge = vt_create(v, 2 * MiB, VMM_KIND_WEIGHT, "huge");
	void *p, *pb;
	struct dev_event *ready;
	CHECK_OK(vmm_acquire(v, a, 1, VMM_OVERWRITE, &p, &ready));
	struct vmm_stats s0 = stats();
	int rc = vmm_acquire(v, b, 1, VMM_OVERWRITE, &pb, &ready);
	CHECK_MSG(rc == -ENOMEM, "rc %d", rc);
	const char *m = sp_last_error();
	printf("enomem: %s\n", m);
	CHECK_MSG(strstr(m, "'layer8.act'") && strstr(m, "device 1") && strstr(m, "384.00 KiB"),
	          "message: %s", m);
	CHECK(stats().enomem.total == s0.enomem.total + 1);
	CHECK(vmm_prefetch(v, b, 1) == -ENOMEM);
	CHECK_OK(vmm_release(v, a, 1, NULL));
	CHECK_OK(vmm_acquire(v, b, 1, VMM_OVERWRITE, &pb, &ready)); /* a can go now */
	CHECK_OK(vmm_release(v, b, 1, NULL));

	rc = vmm_acquire(v, huge, 0, VMM_READ, &p, &ready);
	CHECK(rc == -ENOMEM);
	m = sp_last_error();
	printf("enomem: %s\n", m);
	CHECK_MSG(strstr(m, "'huge'") && strstr(m, "device 0") && strstr(m, "2.00 MiB"),
	          "message: %s", m);
	vt_write_host(v, huge, 2 * MiB, 7); /* it still lives on the host */
	CHECK(vt_read_host(v, huge, 2 * MiB, 7) == 0);

	uint64_t id;
	struct vmm_obj_desc d = {8 * MiB, VMM_KIND_WEIGHT, "too-big", 0, 0};
	CHECK(vmm_obj_create(v, &d, &id) == -ENOMEM); /* larger than the host pool */
	CHECK(strstr(sp_last_error(), "'too-big'"));
	CHECK_OK(vmm_obj_destroy(v, a));
	CHECK_OK(vmm_obj_destroy(v, b));
	CHECK_OK(vmm_obj_destroy(v, huge));
}

/* Stable address: same pointer across evict / re-acquire; off-home refused. */
static void test_stable(void)
{
	const size_t n = 128 * KiB;
	uint64_t s;
	struct vmm_obj_desc d = {n, VMM_KIND_WEIGHT, "stable", VMM_OBJ_STABLE, 1};
	CHECK_OK(vmm_obj_create(v, &d, &s));
	void *p, *p2;
	struct dev_event *ready;
	CHECK_OK(vmm_acquire(v, s, 1, VMM_OVERWRITE, &p, &ready));
	CHECK_OK(vt_fill_async(st[1], p, n, 77));
	CHECK_OK(dev_event_record(done[1], st[1]));
	CHECK_OK(vmm_release(v, s, 1, done[1]));
	CHECK_OK(vmm_evict(v, s, 1));
	CHECK_OK(vmm_obj_wait(v, s));
	CHECK(info(s).valid_mask == VMM_INFO_HOST);
	CHECK(vt_read_host(v, s, n, 77) == 0);
	CHECK_OK(vmm_acquire(v, s, 1, VMM_READ, &p2, &ready));
	CHECK_MSG(p2 == p, "stable address moved: %p -> %p", p, p2);
	CHECK_OK(vmm_release(v, s, 1, NULL));
	CHECK(vt_read_dev(v, s, 1, st[1], done[1], n, 77) == 0);
	CHECK(vmm_acquire(v, s, 0, VMM_READ, &p2, &ready) == -EINVAL); /* not its home */
	CHECK(vmm_prefetch(v, s, 0) == -EINVAL);
	/* the stable budget is separate: 256 KiB holds two of these */
	uint64_t t[2];
	for (int k = 0; k < 2; k++) {
		CHECK_OK(vmm_obj_create(v, &d, &t[k]));
		vt_write_dev(v, t[k], 1, VMM_OVERWRITE, st[1], done[1], n, 80 + k);
	}
	CHECK(!(info(s).valid_mask & DEV(1))); /* s was the victim */
	CHECK(vt_read_dev(v, s, 1, st[1], done[1], n, 77) == 0);
	for (int k = 0; k < 2; k++) {
		CHECK(vt_read_dev(v, t[k], 1, st[1], done[1], n, 80 + k) == 0);
		CHECK_OK(vmm_obj_destroy(v, t[k]));
	}
	struct vmm_obj_desc big = {512 * KiB, VMM_KIND_WEIGHT, "stable-big", VMM_OBJ_STABLE, 1};
	uint64_t id;
	CHECK(vmm_obj_create(v, &big, &id) == -ENOMEM);
	struct vmm_obj_desc bad = {n, VMM_KIND_WEIGHT, "stable-nohome", VMM_OBJ_STABLE, 5};
	CHECK(vmm_obj_create(v, &bad, &id) == -EINVAL);
	CHECK_OK(vmm_obj_destroy(v, s));
}

/* The child: a stable object written, evicted, then touched at its address. */
static int child(const char *what)
{
	open_all();
	const size_t n = 64 * KiB;
	uint64_t s;
	struct vmm_obj_desc d = {n, VMM_KIND_WEIGHT, "stable", VMM_OBJ_STABLE, 0};
	CHECK_OK(vmm_obj_create(v, &d, &s));
	void *p;
	struct dev_event *ready;
	vt_write_dev(v, s, 0, VMM_OVERWRITE, st[0], done[0], n, 5);
	CHECK_OK(vmm_acquire(v, s, 0, VMM_READ, &p, &ready));
	CHECK_OK(vmm_release(v, s, 0, NULL));
	CHECK(vt_read_dev(v, s, 0, st[0], done[0], n, 5) == 0);
	if (strcmp(what, "evicted") == 0) {
		CHECK_OK(vmm_evict(v, s, 0));
		CHECK_OK(vmm_obj_wait(v, s));
	}
	volatile uint64_t *w = p;
	uint64_t x = w[3];
	CHECK(x == vt_word(5, 3));
	close_all();
	return 0;
}

static void test_fault(void)
{
	int status = test_run_self("resident");
	CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "resident: status %#x", status);
	status = test_run_self("evicted");
	CHECK_MSG(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV,
	          "touching an evicted stable object: status %#x, want SIGSEGV", status);
	printf("touching an evicted stable object: SIGSEGV\n");
}

/* Bad arguments are errors with messages. */
static void test_bad_calls(void)
{
	uint64_t id;
	void *p;
	struct dev_event *ready;
	struct vmm_obj_desc zero = {0, VMM_KIND_WEIGHT, "zero", 0, 0};
	CHECK(vmm_obj_create(v, &zero, &id) == -EINVAL);
	struct vmm_obj_desc badkind = {64, (enum vmm_kind)99, "k", 0, 0};
	CHECK(vmm_obj_create(v, &badkind, &id) == -EINVAL);
	id = vt_create(v, 4096, VMM_KIND_INPUT, "in");
	CHECK(vmm_acquire(v, id, 2, VMM_READ, &p, &ready) == -EINVAL);
	CHECK(strstr(sp_last_error(), "place 2"));
	CHECK(vmm_acquire(v, id, VMM_DISK, VMM_READ, &p, &ready) == -EINVAL);
	CHECK(vmm_acquire(v, id, 0, (enum vmm_access)9, &p, &ready) == -EINVAL);
	CHECK(vmm_release(v, id, 0, NULL) == -EINVAL);
	CHECK(vmm_acquire(v, 12345, 0, VMM_READ, &p, &ready) == -EINVAL);
	CHECK(vmm_evict(v, id, -7) == -EINVAL);
	CHECK(vmm_hint(v, 0, 1) == -EINVAL);
	uint64_t used, cap;
	CHECK(vmm_place_usage(v, 5, &used, &cap) == -EINVAL);
	CHECK(vmm_place_peak(v, 5, &used) == -EINVAL);
	CHECK(vmm_place_peak(v, VMM_DISK, &used) == -EINVAL);
	CHECK_OK(vmm_obj_destroy(v, id));
}

int main(int argc, char **argv)
{
	if (argc > 1)
		return child(argv[1]);
	open_all();
	test_moves();
	test_pressure();
	test_fragmentation();
	test_ordered_reuse();
	test_prefetch_rule();
	test_enomem();
	test_stable();
	test_bad_calls();
	CHECK_OK(vmm_sync(v));
	vt_check_accounting(v, ctx, 2);
	vt_check_capacity(v, 2);
	vmm_stats_print(v, stdout, 0);
	close_all();
	test_fault();
	TEST_PASS();
}

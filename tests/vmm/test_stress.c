/* tests/vmm/test_stress.c — randomized stress of the whole vmm on the host
 * backend: 3 emulated devices, tiny tiers (device pools, host pool, a disk tier
 * in a temp dir), objects of many sizes (some with stable addresses), 2 threads
 * each issuing thousands of random operations — reads and writes from kernels on
 * several streams per device, host reads and writes, prefetches, evictions,
 * write-backs, hints, waits, discards, destroy/re-create — plus operations on the other
 * thread's objects (which may be refused with -EBUSY or -EINVAL, never crash).
 * Reproducible per thread: fixed seeds (argv: [ops per thread] [seed]).
 *
 * Invariants: every read (check kernels on device streams, and the CPU on host
 * copies) sees the last write's pattern; no place ever exceeds its capacity;
 * a stable object is touched only while mapped (the host backend would fault);
 * after vmm_sync the vmm's byte counts per transfer kind and over its (link x
 * kind) matrix equal the device layer's dev_copied_bytes, and its host<->disk
 * bytes equal the disk tier's. Each thread owns its objects, so the order of
 * operations on one object is the thread's; operations on one object wait for
 * the previous one through a per-object event (the dependency a runtime keeps). */
#include "tests/vmm/vmm_test.h"

#include <pthread.h>
#include <time.h>

#define KiB      1024ull
#define NDEV     3
#define NTHREADS 2
#define NOBJ     240 /* per all threads */
#define NSTREAMS 2   /* per device and thread */
#define BATCH    64  /* ops between verifications of the check kernels */

static struct dev_ctx *ctx;
static struct vmm *v;
static uint64_t ids[NOBJ]; /* read by the other thread: atomic access */

struct obj_state {
	size_t bytes;
	uint64_t seed; /* of the last write, 0 = no data yet */
	int stable, home;
	struct dev_event *last; /* after the last op's kernel */
};
static struct obj_state objs[NOBJ];

struct pending {
	int obj;
	uint64_t seed;
	int dev;
};

struct worker {
	int t;
	uint64_t rng;
	long ops;
	struct dev_stream *s[NDEV][NSTREAMS];
	struct dev_event *done[NDEV][NSTREAMS];
	int *bad; /* BATCH slots written by check kernels */
	struct pending pend[BATCH];
	int npend;
	long n_read, n_write, n_host, n_foreign_refused, n_recreate, n_check;
};

static uint64_t rnd(struct worker *w)
{
	w->rng ^= w->rng << 13;
	w->rng ^= w->rng >> 7;
	w->rng ^= w->rng << 17;
	return w->rng;
}

static int rnd_n(struct worker *w, int n)
{
	return (int)(rnd(w) % (uint64_t)n);
}

/* A kernel that only takes time: the next kernel on its stream (and the done
 * event after it) lands late, so evictions and transfers out of the copy run
 * while the caller's fence is still pending. */
static void delay_cpu(const void *a)
{
	struct timespec ts = {0, *(const long *)a};
	nanosleep(&ts, NULL);
}
static const struct dev_kernel delay_kernel = {"delay", delay_cpu, NULL};

static uint64_t obj_id(int k)
{
	return __atomic_load_n(&ids[k], __ATOMIC_ACQUIRE);
}

static size_t pick_size(struct worker *w)
{
	static const size_t sizes[] = {8, 256, 1000, 4096, 6000, 16 * KiB, 24 * KiB, 48 * KiB};
	size_t b = sizes[rnd_n(w, (int)SP_ARRAY_SIZE(sizes))];
	return b & ~(size_t)7;
}

static void create_obj(struct worker *w, int k)
{
	struct obj_state *o = &objs[k];
	o->stable = rnd_n(w, 8) == 0;
	o->home = rnd_n(w, NDEV);
	o->bytes = o->stable ? 64 * KiB - 8 * (size_t)rnd_n(w, 100) : pick_size(w);
	o->seed = 0;
	char name[32];
	snprintf(name, sizeof(name), "t%d.obj%d", w->t, k);
	static const enum vmm_kind kinds[] = {VMM_KIND_WEIGHT, VMM_KIND_GRAD, VMM_KIND_OPTIM,
	                                      VMM_KIND_STASH, VMM_KIND_INTERMEDIATE};
	struct vmm_obj_desc d = {o->bytes, kinds[k % 5], name, o->stable ? VMM_OBJ_STABLE : 0,
	                         o->home};
	uint64_t id;
	CHECK_OK(vmm_obj_create(v, &d, &id));
	__atomic_store_n(&ids[k], id, __ATOMIC_RELEASE);
}

static uint64_t new_seed(struct worker *w)
{
	return (rnd(w) | 1) & 0xffffffffffffull;
}

/* The check kernels of the batch ran: every one saw its pattern. */
static void verify(struct worker *w)
{
	for (int d = 0; d < NDEV; d++)
		for (int i = 0; i < NSTREAMS; i++)
			CHECK_OK(dev_stream_sync(w->s[d][i]));
	for (int i = 0; i < w->npend; i++)
		CHECK_MSG(
		    w->bad[i] == 0,
		    "thread %d: object %d read on device %d: %d words differ from seed %#" PRIx64
		    " (its last write)",
		    w->t, w->pend[i].obj, w->pend[i].dev, w->bad[i], w->pend[i].seed);
	w->n_check += w->npend;
	w->npend = 0;
}

static int pick_dev(struct worker *w, int k)
{
	return objs[k].stable ? objs[k].home : rnd_n(w, NDEV);
}

/* A kernel on a device stream reads (check) or writes (fill) object k. */
static void dev_op(struct worker *w, int k, int write)
{
	struct obj_state *o = &objs[k];
	uint64_t id = obj_id(k);
	int d = pick_dev(w, k), si = rnd_n(w, NSTREAMS);
	struct dev_stream *s = w->s[d][si];
	struct dev_event *done = w->done[d][si];
	enum vmm_access acc = !write ? VMM_READ : rnd_n(w, 2) ? VMM_WRITE : VMM_OVERWRITE;
	void *p;
	struct dev_event *ready;
	if (w->npend >= BATCH - 1) /* room for two checks */
		verify(w);
	CHECK_OK(vmm_acquire(v, id, d, acc, &p, &ready));
	if (o->stable)
		CHECK(p != NULL);
	CHECK_OK(dev_stream_wait_event(s, o->last)); /* the previous op on k */
	vt_wait_ready(s, ready);
	if (rnd_n(w, 8) == 0) {
		long ns = 20000 + 10000 * rnd_n(w, 10);
		CHECK_OK(dev_launch(s, &delay_kernel, &ns, sizeof(ns), (struct dev_cost){0, 0, 0}));
	}
	if (write) {
		o->seed = new_seed(w);
		CHECK_OK(vt_fill_async(s, p, o->bytes, o->seed));
		w->n_write++;
	} else {
		w->bad[w->npend] = -1;
		CHECK_OK(vt_check_async(s, p, o->bytes, o->seed, &w->bad[w->npend]));
		w->pend[w->npend++] = (struct pending){k, o->seed, d};
		w->n_read++;
	}
	CHECK_OK(dev_event_record(done, s));
	CHECK_OK(dev_event_record(o->last, s));
	/* a second reader on another device at the same time; a write elsewhere
	 * is refused while either holds it */
	if (!write && !o->stable && rnd_n(w, 8) == 0) {
		int d2 = (d + 1) % NDEV;
		void *p2;
		struct dev_event *r2;
		CHECK_OK(vmm_acquire(v, id, d2, VMM_READ, &p2, &r2));
		CHECK(vmm_acquire(v, id, d, VMM_WRITE, &p, &ready) == -EBUSY);
		struct dev_stream *s2 = w->s[d2][0];
		CHECK_OK(dev_stream_wait_event(s2, o->last));
		vt_wait_ready(s2, r2);
		w->bad[w->npend] = -1;
		CHECK_OK(vt_check_async(s2, p2, o->bytes, o->seed, &w->bad[w->npend]));
		w->pend[w->npend++] = (struct pending){k, o->seed, d2};
		CHECK_OK(dev_event_record(w->done[d2][0], s2));
		CHECK_OK(dev_event_record(o->last, s2));
		CHECK_OK(vmm_release(v, id, d2, w->done[d2][0]));
		w->n_read++;
	}
	CHECK_OK(vmm_release(v, id, d, done));
}

static void host_op(struct worker *w, int k, int write)
{
	struct obj_state *o = &objs[k];
	uint64_t id = obj_id(k);
	void *p;
	struct dev_event *ready;
	CHECK_OK(vmm_acquire(v, id, VMM_HOST, write ? VMM_OVERWRITE : VMM_READ, &p, &ready));
	CHECK(ready == NULL);
	if (write) {
		o->seed = new_seed(w);
		vt_fill_host(p, o->bytes, o->seed);
	} else {
		int bad = vt_check_host(p, o->bytes, o->seed);
		CHECK_MSG(bad == 0, "thread %d: object %d read on the host: %d words differ", w->t,
		          k, bad);
	}
	CHECK_OK(vmm_release(v, id, VMM_HOST, NULL));
	w->n_host++;
}

static int random_place(struct worker *w, int k)
{
	int r = rnd_n(w, NDEV + 1);
	return r == NDEV ? VMM_HOST : objs[k].stable ? objs[k].home : r;
}

/* Operations on objects of the other thread: they may be refused (-EBUSY while
 * written, -EINVAL for an id destroyed meanwhile), never crash. */
static void foreign_op(struct worker *w)
{
	int k = rnd_n(w, NOBJ);
	uint64_t id = obj_id(k);
	int place = rnd_n(w, NDEV + 1);
	if (place == NDEV)
		place = VMM_HOST;
	int rc;
	switch (rnd_n(w, 4)) {
	case 0: rc = vmm_evict(v, id, place); break;
	case 1: rc = vmm_prefetch(v, id, place); break;
	case 2: rc = vmm_writeback(v, id, rnd_n(w, 2)); break;
	default: rc = vmm_hint(v, id, rnd(w) % 1000); break;
	}
	/* a stable object off its home is -EINVAL too */
	CHECK_MSG(rc == 0 || rc == -EBUSY || rc == -EINVAL, "foreign op: rc %d: %s", rc,
	          sp_last_error());
	if (rc)
		w->n_foreign_refused++;
}

static void check_invariants(struct worker *w, int k)
{
	vt_check_capacity(v, NDEV);
	struct vmm_obj_info in;
	CHECK_OK(vmm_obj_info(v, obj_id(k), &in));
	CHECK_MSG(in.pinned_mask == 0, "object %d pinned after its release: %#x", k,
	          in.pinned_mask); /* only its own thread acquires it */
	if (objs[k].seed)
		CHECK_MSG(in.valid_mask != 0, "object %d has data but no valid copy", k);
	if (objs[k].stable)
		CHECK_MSG(!(in.valid_mask & ((1u << NDEV) - 1) & ~(1u << objs[k].home)),
		          "stable object %d valid off its home: %#x", k, in.valid_mask);
	CHECK(in.in_flight >= -1 && in.in_flight < VMM_XFER_KINDS);
}

static void *run(void *arg)
{
	struct worker *w = arg;
	for (int d = 0; d < NDEV; d++)
		for (int i = 0; i < NSTREAMS; i++) {
			CHECK_OK(dev_stream_create(ctx, d, &w->s[d][i]));
			CHECK_OK(dev_event_create(ctx, &w->done[d][i]));
		}
	w->bad = calloc(BATCH, sizeof(*w->bad));
	CHECK(w->bad);
	int lo = w->t * NOBJ / NTHREADS, hi = (w->t + 1) * NOBJ / NTHREADS;
	for (int k = lo; k < hi; k++) {
		create_obj(w, k);
		CHECK_OK(dev_event_create(ctx, &objs[k].last));
	}
	for (long i = 0; i < w->ops; i++) {
		int k = lo + rnd_n(w, hi - lo);
		struct obj_state *o = &objs[k];
		uint64_t id = obj_id(k);
		int r = rnd_n(w, 100);
		if (!o->seed) { /* first op: a write, on a device or the host */
			if (r < 50)
				dev_op(w, k, 1);
			else
				host_op(w, k, 1);
		} else if (r < 30) {
			dev_op(w, k, 0);
		} else if (r < 45) {
			dev_op(w, k, 1);
		} else if (r < 50) {
			host_op(w, k, 0);
		} else if (r < 53) {
			host_op(w, k, 1);
		} else if (r < 62) {
			CHECK_OK(vmm_prefetch(v, id, random_place(w, k)));
		} else if (r < 72) {
			CHECK_OK(vmm_evict(v, id, random_place(w, k)));
		} else if (r < 77) {
			CHECK_OK(vmm_writeback(v, id, rnd_n(w, 2)));
		} else if (r < 82) {
			CHECK_OK(vmm_hint(v, id, rnd_n(w, 4) ? rnd(w) % 1000 : VMM_NO_HINT));
		} else if (r < 85) {
			CHECK_OK(vmm_obj_wait(v, id));
		} else if (r < 87) {
			CHECK_OK(vmm_progress(v));
		} else if (r < 88) {
			/* destroy and re-create: the old id is stale from now on */
			CHECK_OK(dev_event_sync(o->last));
			CHECK_OK(vmm_obj_destroy(v, id));
			CHECK(vmm_obj_destroy(v, id) == -EINVAL);
			create_obj(w, k);
			void *p;
			struct dev_event *ready;
			CHECK(vmm_acquire(v, id, VMM_HOST, VMM_READ, &p, &ready) == -EINVAL);
			w->n_recreate++;
		} else if (r < 89) {
			/* the contents die: the next op on k is a write */
			CHECK_OK(vmm_discard(v, id));
			o->seed = 0;
		} else {
			foreign_op(w);
		}
		check_invariants(w, k);
	}
	verify(w);
	for (int k = lo; k < hi; k++) { /* everything, once more, from a device */
		if (!objs[k].seed)
			continue;
		dev_op(w, k, 0);
	}
	verify(w);
	for (int k = lo; k < hi; k++)
		if (objs[k].seed)
			host_op(w, k, 0);
	return NULL;
}

int main(int argc, char **argv)
{
	long ops = argc > 1 ? atol(argv[1]) : 8000;
	uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 0) : 0x5eed;
	const char *dir = vt_tmpdir();
	ctx = vt_open_host(NDEV, 4 << 20);
	struct vmm_config c = vt_config(640 * KiB, 128 * KiB, 1024 * KiB);
	c.max_objects = NOBJ + 8;
	c.trace_cap = 64;
	vt_config_disk(&c, dir, 6 << 20, "");
	CHECK_OK(vmm_open(ctx, &c, &v));
	struct worker w[NTHREADS];
	pthread_t th[NTHREADS];
	memset(w, 0, sizeof(w));
	for (int t = 0; t < NTHREADS; t++) {
		w[t].t = t;
		w[t].rng = seed * 0x9e3779b97f4a7c15ull + (uint64_t)t * 7919 + 1;
		w[t].ops = ops;
		CHECK(pthread_create(&th[t], NULL, run, &w[t]) == 0);
	}
	for (int t = 0; t < NTHREADS; t++)
		CHECK(pthread_join(th[t], NULL) == 0);
	CHECK_OK(vmm_sync(v));
	vt_check_accounting(v, ctx, NDEV);
	vt_check_capacity(v, NDEV);

	struct vmm_stats st;
	vmm_stats_get(v, &st);
	struct vmm_disk_stats_snapshot ds;
	vmm_disk_stats_get(v, &ds);
	for (int t = 0; t < NTHREADS; t++)
		printf("thread %d: %ld ops: %ld device reads, %ld device writes, %ld host ops, "
		       "%ld re-creates, %ld foreign ops refused, %ld kernel checks\n",
		       t, w[t].ops, w[t].n_read, w[t].n_write, w[t].n_host, w[t].n_recreate,
		       w[t].n_foreign_refused, w[t].n_check);
	vmm_stats_print(v, stdout, 0);
	printf("disk tier: %" PRIu64 " bytes written, %" PRIu64 " read, %" PRIu64 " errors\n",
	       ds.bytes_written, ds.bytes_read, ds.errors);
	/* pressure really happened, on every tier */
	CHECK(st.evictions.total > 0 && st.writebacks.total > 0 && st.drops.total > 0);
	CHECK(st.ordered_reuses.total > 0); /* device space handed on in stream order */
	CHECK(vmm_xfer_bytes(v, VMM_XFER_P2P) > 0 && vmm_xfer_bytes(v, VMM_XFER_D2H) > 0);
	CHECK(ds.bytes_written > 0 && ds.bytes_read > 0);
	CHECK(st.enomem.total == 0 && st.disk_errors.total == 0);
	struct vmm_trace_rec tr[64];
	uint64_t total;
	size_t n = vmm_trace_get(v, tr, 64, &total);
	CHECK(n == 64 && total > 64);
	for (size_t i = 0; i < n; i++)
		CHECK(tr[i].t_end >= tr[i].t_start && tr[i].bytes > 0);
	for (int k = 0; k < NOBJ; k++) {
		CHECK_OK(vmm_obj_destroy(v, obj_id(k)));
		CHECK_OK(dev_event_destroy(objs[k].last));
	}
	vmm_close(v);
	dev_close(ctx);
	vt_rmdir(dir);
	for (int t = 0; t < NTHREADS; t++)
		free(w[t].bad);
	TEST_PASS();
}

/* tests/vmm/test_fuzz.c — a random driver of the whole vmm API with bad input
 * mixed in: zero and huge sizes, bad kinds, flags and homes, objects larger than
 * a device or the host pool, stale, double-destroyed and made-up ids, unknown
 * devices and places, bad access modes, NULL out-parameters, releases of what
 * is not acquired, write acquires while another place holds the object, reads
 * elsewhere while it is written, and injected disk errors. Every call must
 * return 0 or a negative errno with a message (never crash; run it with
 * ASAN=1 UBSAN=1); the inputs whose answer is certain are checked exactly, and
 * host reads check the bytes of the last write. At the end everything is
 * released and destroyed, and the accounting still equals the device layer's.
 * argv: [calls] [seed]. */
#include "tests/vmm/vmm_test.h"

#define NDEV    2
#define MAXLIVE 48
#define MAXHELD 16
#define KiB     1024ull

static struct dev_ctx *ctx;
static struct vmm *v;
static struct dev_stream *st[NDEV];
static struct dev_event *done[NDEV];
static uint64_t rng;

struct live {
	uint64_t id;
	size_t bytes;
	uint64_t seed; /* last write's pattern, 0 = unknown */
	int home;      /* stable objects: their device, else -1 */
};
static struct live live[MAXLIVE];
static int nlive;
static uint64_t stale[64];
static int nstale;

struct held {
	uint64_t id;
	int place, write;
};
static struct held held[MAXHELD];
static int nheld;
static long calls, errors;

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

/* Every result is 0 or a negative errno that comes with a message. */
static int ok(int rc, const char *what)
{
	calls++;
	CHECK_MSG(rc == 0 || (rc < 0 && rc > -4096), "%s returned %d", what, rc);
	if (rc < 0) {
		errors++;
		CHECK_MSG(sp_last_error()[0], "%s returned %d without a message", what, rc);
	}
	sp_error_clear();
	return rc;
}

/* A live id, a stale one or a made-up one. */
static uint64_t any_id(int *li)
{
	*li = -1;
	int r = rnd_n(10);
	if (r < 7 && nlive) {
		*li = rnd_n(nlive);
		return live[*li].id;
	}
	if (r < 9 && nstale)
		return stale[rnd_n(nstale)];
	static const uint64_t junk[] = {0, 1, 0xffffffffull, ~0ull, 0xdead00000005ull, 1ull << 40};
	return junk[rnd_n((int)SP_ARRAY_SIZE(junk))];
}

/* A device, the host, the disk or nonsense. */
static int any_place(void)
{
	static const int places[] = {0,        1, 0, 1,        0,        1, VMM_HOST, VMM_HOST,
	                             VMM_HOST, 0, 1, VMM_HOST, VMM_DISK, 2, -3,       99};
	return places[rnd_n((int)SP_ARRAY_SIZE(places))];
}

static int valid_place(int p)
{
	return p == VMM_HOST || (p >= 0 && p < NDEV);
}

static int held_count(uint64_t id)
{
	int n = 0;
	for (int i = 0; i < nheld; i++)
		n += held[i].id == id;
	return n;
}

static int held_write(uint64_t id)
{
	for (int i = 0; i < nheld; i++)
		if (held[i].id == id && held[i].write)
			return 1;
	return 0;
}

static void op_create(void)
{
	static const size_t sizes[] = {0,       1,       7,          8,         100,
	                               4096,    12345,   64 * KiB,   200 * KiB, 300 * KiB,
	                               1 << 20, 4 << 20, ~(size_t)0, 96 * KiB,  3 * KiB};
	struct vmm_obj_desc d;
	d.bytes = sizes[rnd_n((int)SP_ARRAY_SIZE(sizes))];
	d.kind = (enum vmm_kind)(rnd_n(10) ? rnd_n(VMM_KINDS) : 7 + rnd_n(3));
	d.name = rnd_n(4) ? "fuzz" : NULL;
	d.flags = rnd_n(6) == 0 ? VMM_OBJ_STABLE : rnd_n(20) == 0 ? 4u : 0;
	d.home = rnd_n(5) - 1;
	uint64_t id = 0;
	int rc = ok(vmm_obj_create(v, &d, &id), "create");
	int bad = d.bytes == 0 || (unsigned)d.kind >= VMM_KINDS || (d.flags & ~VMM_OBJ_STABLE) ||
	          ((d.flags & VMM_OBJ_STABLE) && (d.home < 0 || d.home >= NDEV));
	if (bad)
		CHECK_MSG(rc == -EINVAL, "bad create: %d", rc);
	if (d.bytes > (1u << 20) && !bad)
		CHECK_MSG(rc == -ENOMEM, "create larger than the host pool: %d", rc);
	if (rc == 0) {
		uint64_t total = d.bytes;
		for (int i = 0; i < nlive; i++)
			total += live[i].bytes;
		/* at most what the host pool and the disk tier hold together, so the
		 * final reads on the host always find room */
		if (nlive == MAXLIVE || total > (2u << 20)) {
			CHECK(vmm_obj_destroy(v, id) == 0);
			return;
		}
		live[nlive++] =
		    (struct live){id, d.bytes, 0, (d.flags & VMM_OBJ_STABLE) ? d.home : -1};
	}
}

static void op_destroy(void)
{
	int li;
	uint64_t id = any_id(&li);
	int rc = ok(vmm_obj_destroy(v, id), "destroy");
	if (li < 0)
		CHECK_MSG(rc == -EINVAL, "destroy of a stale id: %d", rc);
	else if (held_count(id))
		CHECK_MSG(rc == -EBUSY, "destroy while acquired: %d", rc);
	else
		CHECK_MSG(rc == 0, "destroy: %d", rc);
	if (rc == 0) {
		stale[nstale++ % 64] = id;
		if (nstale > 64)
			nstale = 64;
		live[li] = live[--nlive];
		CHECK(ok(vmm_obj_destroy(v, id), "destroy twice") == -EINVAL);
	}
}

static void op_acquire(void)
{
	int li;
	uint64_t id = any_id(&li);
	int place = any_place();
	static const int accs[] = {VMM_READ,      VMM_READ,  VMM_READ, VMM_READ, VMM_WRITE,
	                           VMM_OVERWRITE, VMM_WRITE, 0,        4,        -1};
	enum vmm_access acc = (enum vmm_access)accs[rnd_n((int)SP_ARRAY_SIZE(accs))];
	void *p = NULL;
	struct dev_event *ready = NULL;
	int null_out = rnd_n(30) == 0;
	int rc = ok(vmm_acquire(v, id, place, acc, null_out ? NULL : &p, &ready), "acquire");
	int bad_acc = acc != VMM_READ && acc != VMM_WRITE && acc != VMM_OVERWRITE;
	if (li < 0 || !valid_place(place) || null_out || bad_acc)
		CHECK_MSG(rc == -EINVAL, "acquire with bad input: %d (li %d place %d acc %d)", rc,
		          li, place, (int)acc);
	if (rc < 0)
		return;
	int write = acc != VMM_READ;
	if (nheld == MAXHELD) { /* keep it simple: give it back at once */
		CHECK(vmm_release(v, id, place, NULL) == 0);
		if (write)
			live[li].seed = 0; /* the vmm cannot know we did not write */
		return;
	}
	held[nheld++] = (struct held){id, place, write};
	struct live *L = &live[li];
	CHECK(p != NULL);
	if (place == VMM_HOST) {
		CHECK(ready == NULL);
		if (write) {
			L->seed = rnd() | 1;
			vt_fill_host(p, L->bytes, L->seed);
		} else if (L->seed) {
			CHECK_MSG(vt_check_host(p, L->bytes, L->seed) == 0,
			          "host read: wrong bytes");
		}
		return;
	}
	if (ready)
		CHECK(ok(dev_stream_wait_event(st[place], ready), "wait ready") == 0);
	if (write) {
		L->seed = rnd() | 1;
		CHECK_OK(vt_fill_async(st[place], p, L->bytes, L->seed));
	}
}

static void op_release(void)
{
	if (nheld && rnd_n(4)) { /* one we hold, with or without a done event */
		int i = rnd_n(nheld);
		struct held h = held[i];
		struct dev_event *e = NULL;
		if (h.place >= 0) {
			CHECK_OK(dev_event_record(done[h.place], st[h.place]));
			e = done[h.place];
		}
		CHECK(ok(vmm_release(v, h.id, h.place, e), "release") == 0);
		held[i] = held[--nheld];
		return;
	}
	int li;
	uint64_t id = any_id(&li);
	int place = any_place();
	int is_held = -1;
	for (int i = 0; i < nheld; i++)
		if (held[i].id == id && held[i].place == place)
			is_held = i;
	if (is_held >= 0 && place >= 0) /* NULL = our work is complete: make it so */
		CHECK_OK(dev_stream_sync(st[place]));
	int rc = ok(vmm_release(v, id, place, NULL), "release");
	if (is_held < 0) {
		CHECK_MSG(rc == -EINVAL, "release of what is not acquired: %d", rc);
	} else {
		CHECK_MSG(rc == 0, "release: %d", rc);
		held[is_held] = held[--nheld];
	}
}

static void op_misc(void)
{
	int li;
	uint64_t id = any_id(&li);
	int place = any_place(), rc;
	switch (rnd_n(13)) {
	case 11:
		rc = ok(vmm_discard(v, id), "discard");
		if (li < 0)
			CHECK(rc == -EINVAL);
		else
			CHECK(rc == (held_count(id) ? -EBUSY : 0));
		if (rc == 0)
			live[li].seed = 0; /* dead contents */
		break;
	case 0:
		rc = ok(vmm_prefetch(v, id, place), "prefetch");
		if (li < 0 || !valid_place(place))
			CHECK(rc == -EINVAL);
		break;
	case 1:
		rc = ok(vmm_evict(v, id, place), "evict");
		if (li < 0 || !valid_place(place))
			CHECK(rc == -EINVAL);
		break;
	case 2:
		rc = ok(vmm_writeback(v, id, rnd_n(3) - (rnd_n(5) == 0)), "writeback");
		if (li < 0)
			CHECK(rc == -EINVAL);
		else if (held_write(id))
			CHECK(rc == -EBUSY);
		break;
	case 3: rc = ok(vmm_hint(v, id, rnd()), "hint"); break;
	case 4: rc = ok(vmm_obj_wait(v, id), "obj_wait"); break;
	case 5: rc = ok(vmm_progress(v), "progress"); break;
	case 6: rc = ok(vmm_sync(v), "sync"); break;
	case 7: {
		struct vmm_obj_info in;
		rc = ok(vmm_obj_info(v, id, rnd_n(20) ? &in : NULL), "obj_info");
		if (rc == 0)
			CHECK((unsigned)held_count(id) >=
			      (unsigned)__builtin_popcount(in.pinned_mask));
		break;
	}
	case 8: {
		uint64_t used, cap;
		rc = ok(vmm_place_usage(v, place, &used, &cap), "place_usage");
		if (rc == 0)
			CHECK(used <= cap);
		else
			CHECK(place != VMM_DISK && !valid_place(place));
		break;
	}
	case 9:
		(void)vmm_link_bytes(v, any_place(), any_place(), rnd_n(VMM_KINDS + 3) - 1);
		(void)vmm_xfer_bytes(v, (enum vmm_xfer_kind)(rnd_n(VMM_XFER_KINDS + 2) - 1));
		(void)vmm_xfer_kind_name((enum vmm_xfer_kind)(rnd_n(8) - 1));
		(void)vmm_kind_name((enum vmm_kind)(rnd_n(10) - 1));
		break;
	case 10: {
		struct vmm_trace_rec tr[8];
		uint64_t total;
		CHECK(vmm_trace_get(v, tr, (size_t)rnd_n(9), rnd_n(2) ? &total : NULL) <= 8);
		break;
	}
	default: {
		/* a write elsewhere while held somewhere */
		if (!nheld)
			break;
		struct held h = held[rnd_n(nheld)];
		struct live *L = NULL;
		for (int i = 0; i < nlive; i++)
			if (live[i].id == h.id)
				L = &live[i];
		CHECK(L);
		int other = h.place != VMM_HOST ? VMM_HOST : L->home >= 0 ? L->home : 0;
		void *p;
		struct dev_event *ready;
		rc = ok(vmm_acquire(v, h.id, other, VMM_WRITE, &p, &ready), "write elsewhere");
		if (other == 0 && L->bytes > 384 * KiB) /* never fits the device: said first */
			CHECK_MSG(rc == -ENOMEM,
			          "write acquire of an object larger than a device: %d", rc);
		else
			CHECK_MSG(rc == -EBUSY, "write acquire while held elsewhere: %d", rc);
		if (h.write) {
			rc =
			    ok(vmm_acquire(v, h.id, other, VMM_READ, &p, &ready), "read elsewhere");
			CHECK_MSG(rc == (other == 0 && L->bytes > 384 * KiB ? -ENOMEM : -EBUSY),
			          "read while written elsewhere: %d", rc);
		}
	}
	}
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 20000;
	rng = argc > 2 ? strtoull(argv[2], NULL, 0) : 0xf022;
	const char *dir = vt_tmpdir();
	ctx = vt_open_host(NDEV, 4u << 20);
	struct vmm_config c = vt_config(512 * KiB, 128 * KiB, 1u << 20);
	vt_config_disk(&c, dir, 2u << 20, "write:97:EIO,write:300:ENOSPC,read:150:EIO");
	c.max_objects = 40; /* fewer than MAXLIVE: creates also run out of slots */
	CHECK_OK(vmm_open(ctx, &c, &v));
	for (int d = 0; d < NDEV; d++) {
		CHECK_OK(dev_stream_create(ctx, d, &st[d]));
		CHECK_OK(dev_event_create(ctx, &done[d]));
	}
	for (long i = 0; i < n; i++) {
		int r = rnd_n(100);
		if (r < 15)
			op_create();
		else if (r < 22)
			op_destroy();
		else if (r < 50)
			op_acquire();
		else if (r < 72)
			op_release();
		else
			op_misc();
	}
	while (nheld) {
		struct held h = held[--nheld];
		if (h.place >= 0)
			CHECK_OK(dev_event_record(done[h.place], st[h.place]));
		CHECK_OK(vmm_release(v, h.id, h.place, h.place >= 0 ? done[h.place] : NULL));
	}
	/* may report injected disk errors, one failure per call */
	int rc, nsync = 0;
	while ((rc = vmm_sync(v)) != 0 && nsync++ < 1000)
		CHECK(rc == -EIO || rc == -ENOSPC);
	for (int i = 0; i < nlive; i++) {
		if (!live[i].seed)
			continue;
		void *p;
		struct dev_event *ready;
		rc = vmm_acquire(v, live[i].id, VMM_HOST, VMM_READ, &p, &ready);
		if (rc == -EIO || rc == -ENOSPC) /* an injected fault: nothing lost, again */
			rc = vmm_acquire(v, live[i].id, VMM_HOST, VMM_READ, &p, &ready);
		CHECK_OK(rc);
		CHECK_MSG(vt_check_host(p, live[i].bytes, live[i].seed) == 0, "object %d", i);
		CHECK_OK(vmm_release(v, live[i].id, VMM_HOST, NULL));
	}
	CHECK_OK(vmm_sync(v));
	vt_check_accounting(v, ctx, NDEV);
	vt_check_capacity(v, NDEV);
	for (int i = 0; i < nlive; i++)
		CHECK_OK(vmm_obj_destroy(v, live[i].id));
	struct vmm_stats s;
	vmm_stats_get(v, &s);
	printf("%ld calls, %ld errors (as expected), %" PRId64 " acquires, %" PRId64
	       " evictions, %" PRId64 " disk errors\n",
	       calls, errors, s.acquires.total, s.evictions.total, s.disk_errors.total);
	vmm_close(v);
	dev_close(ctx);
	vt_rmdir(dir);
	TEST_PASS();
}

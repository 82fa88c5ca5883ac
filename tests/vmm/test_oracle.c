/* tests/vmm/test_oracle.c — the vmm against an exact oracle, then under
 * hostile multi-threaded use.
 *
 * Phase 1 (single thread, exact): host backend, 2 emulated devices whose pools
 * hold 4 objects each, a host pool of 6, a disk tier of 12, 16 objects of one
 * size (the disk fills; every other seed favours the ops that keep it full).
 * Random operations: acquires of every access mode on devices and the host with
 * kernels that fill or check a pattern (some behind a delay, so the release's
 * done event is still pending at the next operation), prefetches, evictions,
 * write-backs, discards, destroy + re-create (also right after a release with a
 * pending done), new next-use hints, and pairs that meet a transfer in flight
 * (prefetch then acquire READ/WRITE, prefetch then write-back). Transfers are
 * settled after each operation (vmm_sync, vmm_progress, vmm_sync; caller fences
 * stay pending), and the oracle — a model of the vmm's rules: where a copy
 * comes from, which victim goes (Belady on unique hints, or LRU on the vmm's
 * clock), what is dropped and what is written down, the prefetch rule, which
 * disk copy a full disk gives up —
 * predicts every object's valid places, dirty places, bytes moved per transfer
 * kind and the (link x kind) matrix, compared with vmm_obj_info and the
 * accounting after every operation. Every read checks its bytes. Before that,
 * rules checked on the vmm's own counts (check_rules): the objects an op did
 * not name lost no disk copy it did not need, and none had a clean copy
 * written down.
 *
 * Phase 2 (3 threads): each thread's readers check their bytes with slow
 * kernels while the same thread destroys or discards objects right after
 * releasing them with the pending done event, and all threads evict, write
 * back and prefetch: device space must never be handed on under a reader.
 *
 * argv: [phase-1 ops per seed] [first seed] [seeds] [phase-2 ops per thread] */
#include "tests/vmm/vmm_test.h"

#include <pthread.h>
#include <time.h>

#define KiB        1024ull
#define NDEV       2
#define OBJ        (16 * KiB)
#define DEV_SLOTS  4
#define HOST_SLOTS 6
#define NOBJ       16
/* The disk fills (12 of 16 objects), but a host copy going down always finds
 * a disk copy to reclaim: a full disk of at most one extent in flight and the
 * rest disk-only copies, plus a full host pool of other objects, plus the
 * object that needs room there, would be more than NOBJ objects. Only an
 * explicit eviction or write-back to disk may find none (-ENOSPC). */
#define DISK_SLOTS 12
#define PH         NDEV       /* the oracle's place index of the host */
#define PD         (NDEV + 1) /* of the disk */
#define NPL        (NDEV + 2)
#define MAXBAD     256

static uint64_t rng;
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

static void delay_cpu(const void *a)
{
	struct timespec ts = {0, *(const long *)a};
	nanosleep(&ts, NULL);
}
static const struct dev_kernel delay_kernel = {"delay", delay_cpu, NULL};

/* ---- the oracle --------------------------------------------------------------- */

struct oxfer {
	int src, dst, drop_src;
};

struct oobj {
	int live;
	uint64_t id;
	int kind;
	uint64_t hint;
	int valid[NPL], mem[NPL];
	uint64_t last_use[NPL];
	uint64_t seed; /* pattern of the last write; 0 = unspecified bytes */
	int busy, inflight, pending_dev;
	int reclaimed; /* this op: rank + 1 of the reclaim of its disk copy, 0 none */
	struct oxfer x;
	uint64_t moved[VMM_XFER_KINDS], nmoves[VMM_XFER_KINDS];
};

static struct oobj ob[NOBJ];
static uint64_t olink[NPL][NPL][VMM_KINDS];
static uint64_t oclock;
static int pf_place = -1;
static uint64_t pf_next;
static int stack[4 * NOBJ], nstack; /* objects in flight, most recent last */
static enum vmm_policy policy;
static int p2p;

/* the vmm under test */
static struct dev_ctx *ctx;
static struct vmm *v;
static struct dev_stream *st[NDEV];
static struct dev_event *done[NDEV];
static int *bad; /* check-kernel results, MAXBAD slots */
static int nbad;
static uint64_t bad_seed[MAXBAD];
static long n_ops, n_evictions, n_skips;
static long n_reclaims, n_sole, n_nospace; /* disk copies reclaimed, of those
                                             leaving one copy; -ENOSPC returns */
static long tot_reclaims;

static int vplace(int p) /* the vmm's name of an oracle place */
{
	return p == PH ? VMM_HOST : p == PD ? VMM_DISK : p;
}

static int o_nvalid(const struct oobj *o)
{
	int n = 0;
	for (int p = 0; p < NPL; p++)
		n += o->valid[p];
	return n;
}

static int o_used(int p)
{
	int n = 0;
	for (int k = 0; k < NOBJ; k++)
		n += ob[k].live && ob[k].mem[p];
	return n;
}

static void o_move(int k, int kind, int src, int dst)
{
	ob[k].moved[kind] += OBJ;
	ob[k].nmoves[kind]++;
	olink[src][dst][ob[k].kind] += OBJ;
}

static void o_alloc(int k, int p)
{
	ob[k].mem[p] = 1;
	ob[k].last_use[p] = ++oclock;
}

static void o_free(int k, int p)
{
	ob[k].mem[p] = ob[k].valid[p] = 0;
}

static void o_start(int k, int kind, int src, int dst, int drop_src)
{
	struct oobj *o = &ob[k];
	CHECK(!o->inflight);
	o->inflight = 1;
	o->x = (struct oxfer){src, dst, drop_src};
	o->valid[dst] = 1;
	if (dst == PD)
		o->mem[PD] = 1;
	stack[nstack++] = k;
	o_move(k, kind, src, dst);
}

static void o_retire(int k)
{
	struct oobj *o = &ob[k];
	if (!o->inflight)
		return;
	o->inflight = 0;
	for (int i = 0; i < nstack; i++)
		if (stack[i] == k) {
			memmove(&stack[i], &stack[i + 1], (size_t)(nstack - i - 1) * sizeof(int));
			nstack--;
			break;
		}
	if (o->x.drop_src)
		o_free(k, o->x.src);
}

static int o_evictable(int k, int p)
{
	const struct oobj *o = &ob[k];
	if (!o->live || o->busy || o->inflight || !o->mem[p])
		return 0;
	if (p == pf_place && o->hint <= pf_next)
		return 0;
	/* nor one it could not evict without a write to disk: a host copy with no
	 * disk copy, a device copy that is the only one while the host is full */
	if (p == pf_place && p == PH && !o->valid[PD])
		return 0;
	if (p == pf_place && p < NDEV && o_nvalid(o) == o->valid[p] && o_used(PH) >= HOST_SLOTS)
		return 0;
	return 1;
}

static int o_pick(int p)
{
	int best = -1;
	for (int k = 0; k < NOBJ; k++) {
		if (!o_evictable(k, p))
			continue;
		if (best < 0)
			best = k;
		else if (policy != VMM_POLICY_LRU && ob[k].hint != ob[best].hint)
			best = ob[k].hint > ob[best].hint ? k : best;
		else if (ob[k].last_use[p] < ob[best].last_use[p])
			best = k;
	}
	return best;
}

static int o_make_space(int k, int p);

/* The disk's reclaim order (vmm.h, "A full disk tier"): what freeing the disk
 * copy costs its object. No stale disk copies here (no host fallback). */
enum { R_SPARE_HOST, R_SPARE, R_LAST_HOST, R_LAST_DEVICE, R_NEVER };
static int o_reclaim_rank(int k, int except)
{
	const struct oobj *o = &ob[k];
	if (k == except || !o->live || o->inflight || !o->mem[PD])
		return R_NEVER;
	int above = o_nvalid(o) - o->valid[PD];
	if (above >= 2)
		return o->valid[PH] ? R_SPARE_HOST : R_SPARE;
	if (above == 1)
		return o->valid[PH] ? R_LAST_HOST : R_LAST_DEVICE;
	return R_NEVER;
}

/* A disk extent for k: when the disk is full, the disk copy of the lowest
 * rank goes, and among those the one whose copies above the policy would
 * evict last (nearest hint, or newest use). -ENOSPC when none can go. */
static int o_disk_alloc(int k)
{
	if (o_used(PD) < DISK_SLOTS) {
		ob[k].mem[PD] = 1;
		return 0;
	}
	int best = -1, best_rank = R_NEVER;
	uint64_t best_use = 0;
	for (int j = 0; j < NOBJ; j++) {
		int r = o_reclaim_rank(j, k);
		uint64_t use = 0;
		for (int p = 0; p <= PH; p++)
			if (ob[j].valid[p] && ob[j].last_use[p] > use)
				use = ob[j].last_use[p];
		if (r == R_NEVER || r > best_rank)
			continue;
		if (r < best_rank ||
		    (policy != VMM_POLICY_LRU ? ob[j].hint < ob[best].hint : use > best_use)) {
			best = j;
			best_rank = r;
			best_use = use;
		}
	}
	if (best < 0)
		return -ENOSPC;
	o_free(best, PD);
	ob[best].reclaimed = best_rank + 1;
	n_reclaims++;
	n_sole += best_rank >= R_LAST_HOST;
	ob[k].mem[PD] = 1;
	return 0;
}

/* vmm_swap_evict: drop a clean copy, write a dirty one down one tier. */
static int o_evict(int k, int p)
{
	struct oobj *o = &ob[k];
	if (!o->mem[p])
		return 0;
	int others = o_nvalid(o) - o->valid[p];
	int droppable = p == PH ? o->valid[PD] : others > 0;
	if (!o->valid[p] || droppable) {
		n_evictions++;
		o_free(k, p);
		return 0;
	}
	if (p == PH) {
		if (!o->mem[PD] && o_disk_alloc(k) < 0)
			return -ENOSPC;
		n_evictions++;
		o_start(k, VMM_XFER_H2DISK, PH, PD, 1);
		return 0;
	}
	n_evictions++;
	o->busy = 1;
	CHECK_MSG(o_make_space(k, PH) == 0, "oracle: no host room for a write-down");
	o_start(k, VMM_XFER_D2H, p, PH, 1);
	o->busy = 0;
	return 0;
}

/* vmm_swap_make_space with one object size: one victim frees one slot. */
static int o_make_space(int k, int p)
{
	int cap = p == PH ? HOST_SLOTS : DEV_SLOTS;
	for (;;) {
		if (o_used(p) < cap) {
			o_alloc(k, p);
			return 0;
		}
		int victim = o_pick(p);
		if (victim >= 0) {
			CHECK_MSG(o_evict(victim, p) == 0,
			          "oracle: the disk is full of copies that cannot go (DISK_SLOTS)");
			struct oobj *w = &ob[victim];
			if (w->inflight && p < NDEV) {
				/* a D2H write-down: the space is handed on in stream order */
				w->x.drop_src = 0;
				o_free(victim, p);
			} else {
				o_retire(victim); /* a disk write-down is waited for */
			}
			continue;
		}
		int w = -1;
		for (int i = nstack - 1; i >= 0 && w < 0; i--)
			if (stack[i] != k && ob[stack[i]].mem[p])
				w = stack[i];
		if (w < 0) {
			CHECK_MSG(p == pf_place, "oracle: object %d finds no room on place %d", k,
			          p);
			return -EAGAIN;
		}
		o_retire(w);
	}
}

static int o_first_dev(const struct oobj *o)
{
	for (int d = 0; d < NDEV; d++)
		if (o->valid[d])
			return d;
	return -1;
}

/* bring_host: from the first device holding it, else from disk. */
static int o_bring_host(int k, int nonblock)
{
	struct oobj *o = &ob[k];
	int src = o_first_dev(o);
	int rc = o_make_space(k, PH);
	if (rc)
		return rc;
	if (src >= 0) {
		o_start(k, VMM_XFER_D2H, src, PH, 0);
	} else if (o->valid[PD]) {
		o_start(k, VMM_XFER_DISK2H, PD, PH, 0);
		if (!nonblock)
			o_retire(k);
	} else {
		o->valid[PH] = 1; /* no data yet */
	}
	return 0;
}

/* vmm_swap_bring to a device or the host. */
static int o_bring(int k, int p)
{
	struct oobj *o = &ob[k];
	int rc = 0;
	if (o->valid[p])
		return 0;
	o_retire(k);
	o->busy = 1;
	if (p == PH) {
		rc = o_bring_host(k, 0);
		goto out;
	}
	int peer = -1, any = -1;
	for (int d = 0; d < NDEV; d++) {
		if (d == p || !o->valid[d])
			continue;
		if (any < 0)
			any = d;
		if (peer < 0 && p2p)
			peer = d;
	}
	int src = peer >= 0 ? peer : o->valid[PH] ? PH : any;
	if (src < 0 && o->valid[PD]) {
		CHECK_OK(o_bring_host(k, 0));
		src = PH;
	}
	rc = o_make_space(k, p);
	if (rc)
		goto out;
	if (src < 0)
		o->valid[p] = 1;
	else
		o_start(k, src == PH ? VMM_XFER_H2D : VMM_XFER_P2P, src, p, 0);
out:
	o->busy = 0;
	return rc;
}

/* vmm_acquire followed by the release (the bytes are the caller's business). */
static void o_acquire(int k, int p, enum vmm_access acc)
{
	struct oobj *o = &ob[k];
	if (acc == VMM_READ) {
		if (!o->valid[p] || (o->inflight && o->x.dst != p)) {
			if (!o->valid[p])
				CHECK_OK(o_bring(k, p));
		}
		if (p == PH)
			o_retire(k);
	} else {
		o->pending_dev = -1;
		int arriving = acc == VMM_WRITE && p < NDEV && o->inflight && o->x.dst == p;
		if (!arriving)
			o_retire(k);
		if (acc == VMM_WRITE && !arriving) {
			CHECK_OK(o_bring(k, p));
			if (p == PH)
				o_retire(k);
		} else if (acc == VMM_OVERWRITE && !o->mem[p]) {
			o->busy = 1;
			CHECK_OK(o_make_space(k, p));
			o->busy = 0;
		}
		o->valid[p] = 1;
		for (int q = 0; q <= PH; q++) {
			if (q == p)
				continue;
			if (o->inflight && o->x.src == q) {
				o->valid[q] = 0;
				o->x.drop_src = 1;
				continue;
			}
			o_free(k, q);
		}
		o_free(k, PD);
	}
	o->last_use[p] = ++oclock;
}

/* vmm_swap_prefetch. */
static void o_prefetch(int k, int p)
{
	struct oobj *o = &ob[k];
	int room = p;
	if (!o->valid[PH] && o->valid[PD] && o_first_dev(o) < 0 && !o->inflight)
		room = PH;
	if (policy != VMM_POLICY_LRU) {
		pf_place = room;
		pf_next = o->hint;
	}
	int rc = 0;
	if (o->valid[p]) {
		if (o->inflight && o->x.src == p)
			o->x.drop_src = 0;
	} else if (!o->valid[PH] && o->valid[PD] && o_first_dev(o) < 0) {
		o->busy = 1;
		rc = o_bring_host(k, 1);
		o->busy = 0;
		if (rc == 0 && p != PH)
			o->pending_dev = p;
	} else {
		rc = o_bring(k, p);
	}
	if (rc == -EAGAIN)
		n_skips++;
	pf_place = -1;
}

/* vmm_swap_writeback (with nothing in flight). */
static int o_writeback(int k, int to_disk)
{
	struct oobj *o = &ob[k];
	o_retire(k);
	if (!to_disk && (o->valid[PH] || o->valid[PD]))
		return 0;
	if (to_disk && o->valid[PD])
		return 0;
	if (!o->valid[PH]) {
		if (o_first_dev(o) < 0)
			return 0;
		o->busy = 1;
		CHECK_OK(o_bring_host(k, 0));
		o->busy = 0;
		if (!to_disk)
			return 0;
		o_retire(k);
	}
	if (!o->mem[PD] && o_disk_alloc(k) < 0)
		return -ENOSPC;
	o_start(k, VMM_XFER_H2DISK, PH, PD, 0);
	return 0;
}

static void o_drop_all(int k)
{
	o_retire(k);
	for (int p = 0; p < NPL; p++)
		o_free(k, p);
	ob[k].pending_dev = -1;
	ob[k].seed = 0;
}

/* vmm_sync, vmm_progress (a pending prefetch chain goes on), vmm_sync. */
static void o_settle(void)
{
	while (nstack)
		o_retire(stack[nstack - 1]);
	for (int k = 0; k < NOBJ; k++) {
		if (!ob[k].live || ob[k].pending_dev < 0)
			continue;
		int d = ob[k].pending_dev;
		ob[k].pending_dev = -1;
		o_prefetch(k, d);
	}
	while (nstack)
		o_retire(stack[nstack - 1]);
}

/* ---- the operations, on the vmm and the oracle ------------------------------------ */

static uint64_t unique_hint(void)
{
	for (;;) {
		uint64_t h = rnd() % 1000000;
		int dup = 0;
		for (int k = 0; k < NOBJ; k++)
			dup |= ob[k].live && ob[k].hint == h;
		if (!dup)
			return h;
	}
}

static void create(int k)
{
	static const enum vmm_kind kinds[] = {VMM_KIND_WEIGHT, VMM_KIND_GRAD, VMM_KIND_OPTIM,
	                                      VMM_KIND_STASH, VMM_KIND_INTERMEDIATE};
	struct oobj *o = &ob[k];
	memset(o, 0, sizeof(*o));
	o->kind = kinds[k % 5];
	o->pending_dev = -1;
	char name[16];
	snprintf(name, sizeof(name), "o%d", k);
	o->id = vt_create(v, OBJ, (enum vmm_kind)o->kind, name);
	o->live = 1;
	o->hint = unique_hint();
	CHECK_OK(vmm_hint(v, o->id, o->hint));
}

static void flush_checks(void)
{
	for (int d = 0; d < NDEV; d++)
		CHECK_OK(dev_stream_sync(st[d]));
	for (int i = 0; i < nbad; i++)
		CHECK_MSG(bad[i] == 0, "check %d (seed %#" PRIx64 "): %d words differ", i,
		          bad_seed[i], bad[i]);
	nbad = 0;
}

static void maybe_delay(int d)
{
	if (rnd_n(3) == 0) {
		long ns = 200000 + 100000 * rnd_n(6);
		CHECK_OK(
		    dev_launch(st[d], &delay_kernel, &ns, sizeof(ns), (struct dev_cost){0, 0, 0}));
	}
}

/* acquire on device d with a kernel that checks (READ) or fills (writes). */
static void dev_use(int k, int d, enum vmm_access acc, int destroy_after)
{
	struct oobj *o = &ob[k];
	void *p;
	struct dev_event *ready;
	if (nbad >= MAXBAD)
		flush_checks();
	CHECK_OK(vmm_acquire(v, o->id, d, acc, &p, &ready));
	vt_wait_ready(st[d], ready);
	maybe_delay(d);
	if (acc == VMM_READ) {
		if (o->seed) {
			bad[nbad] = -1;
			bad_seed[nbad] = o->seed;
			CHECK_OK(vt_check_async(st[d], p, OBJ, o->seed, &bad[nbad]));
			nbad++;
		}
	} else {
		o->seed = (rnd() | 1) & 0xffffffffffffull;
		CHECK_OK(vt_fill_async(st[d], p, OBJ, o->seed));
	}
	CHECK_OK(dev_event_record(done[d], st[d]));
	CHECK_OK(vmm_release(v, o->id, d, done[d]));
	o_acquire(k, d, acc);
	if (destroy_after) { /* right after the release, its done still pending */
		CHECK_OK(vmm_obj_destroy(v, o->id));
		o_drop_all(k);
		o->live = 0;
		create(k);
	}
}

static void host_use(int k, enum vmm_access acc)
{
	struct oobj *o = &ob[k];
	void *p;
	struct dev_event *ready;
	CHECK_OK(vmm_acquire(v, o->id, VMM_HOST, acc, &p, &ready));
	CHECK(ready == NULL);
	if (acc == VMM_READ) {
		if (o->seed)
			CHECK_MSG(vt_check_host(p, OBJ, o->seed) == 0, "host read of o%d", k);
	} else {
		o->seed = (rnd() | 1) & 0xffffffffffffull;
		vt_fill_host(p, OBJ, o->seed);
	}
	CHECK_OK(vmm_release(v, o->id, VMM_HOST, NULL));
	o_acquire(k, PH, acc);
}

static void settle(void)
{
	CHECK_OK(vmm_sync(v));
	CHECK_OK(vmm_progress(v));
	CHECK_OK(vmm_sync(v));
	o_settle();
}

static const char *mask_str(uint32_t m, char *buf)
{
	int n = 0;
	for (int d = 0; d < NDEV; d++)
		if (m & (1u << d))
			n += sprintf(buf + n, "d%d ", d);
	if (m & VMM_INFO_HOST)
		n += sprintf(buf + n, "host ");
	if (m & VMM_INFO_DISK)
		n += sprintf(buf + n, "disk ");
	if (!n)
		sprintf(buf, "-");
	return buf;
}

static void compare(const char *what)
{
	char a[64], b[64];
	for (int k = 0; k < NOBJ; k++) {
		struct oobj *o = &ob[k];
		struct vmm_obj_info in;
		CHECK_OK(vmm_obj_info(v, o->id, &in));
		uint32_t valid = 0, dirty = 0;
		int nv = o_nvalid(o);
		for (int p = 0; p < NPL; p++) {
			uint32_t bit = p == PH ? VMM_INFO_HOST : p == PD ? VMM_INFO_DISK : 1u << p;
			if (o->valid[p])
				valid |= bit;
			if (o->valid[p] && p != PD && (p == PH ? !o->valid[PD] : nv == 1))
				dirty |= bit;
		}
		CHECK_MSG(in.valid_mask == valid, "op %ld (%s): o%d valid on %s, oracle says %s",
		          n_ops, what, k, mask_str(in.valid_mask, a), mask_str(valid, b));
		CHECK_MSG(in.dirty_mask == dirty, "op %ld (%s): o%d dirty on %s, oracle says %s",
		          n_ops, what, k, mask_str(in.dirty_mask, a), mask_str(dirty, b));
		CHECK(in.pinned_mask == 0 && in.in_flight == -1);
		for (int x = 0; x < VMM_XFER_KINDS; x++)
			CHECK_MSG(in.bytes_moved[x] == o->moved[x] && in.moves[x] == o->nmoves[x],
			          "op %ld (%s): o%d %s: %" PRIu64 " bytes in %" PRIu64
			          " moves, oracle says %" PRIu64 " in %" PRIu64,
			          n_ops, what, k, vmm_xfer_kind_name((enum vmm_xfer_kind)x),
			          in.bytes_moved[x], in.moves[x], o->moved[x], o->nmoves[x]);
	}
	for (int s = 0; s < NPL; s++)
		for (int d = 0; d < NPL; d++)
			for (int kind = 0; kind < VMM_KINDS; kind++) {
				uint64_t got = vmm_link_bytes(v, vplace(s), vplace(d), kind);
				CHECK_MSG(got == olink[s][d][kind],
				          "op %ld (%s): link %d->%d %s: %" PRIu64
				          " bytes, oracle says %" PRIu64,
				          n_ops, what, vplace(s), vplace(d),
				          vmm_kind_name((enum vmm_kind)kind), got,
				          olink[s][d][kind]);
			}
	struct vmm_stats s;
	vmm_stats_get(v, &s);
	CHECK_MSG(s.disk_reclaims.total == n_reclaims && s.reclaim_sole.total == n_sole,
	          "op %ld (%s): %" PRId64 " disk copies reclaimed, %" PRId64
	          " leaving one copy; oracle says %ld, %ld",
	          n_ops, what, s.disk_reclaims.total, s.reclaim_sole.total, n_reclaims, n_sole);
	uint64_t dused, dcap;
	CHECK_OK(vmm_place_usage(v, VMM_DISK, &dused, &dcap));
	CHECK_MSG(dused == (uint64_t)o_used(PD) * OBJ && dcap == DISK_SLOTS * OBJ,
	          "op %ld (%s): the disk holds %" PRIu64 " of %" PRIu64 " bytes, oracle says %d "
	          "objects",
	          n_ops, what, dused, dcap, o_used(PD));
	for (int p = 0; p <= PH; p++) {
		uint64_t used, cap;
		CHECK_OK(vmm_place_usage(v, vplace(p), &used, &cap));
		CHECK_MSG(used == (uint64_t)o_used(p) * OBJ,
		          "op %ld (%s): place %d holds %" PRIu64 " bytes, oracle says %d objects",
		          n_ops, what, vplace(p), used, o_used(p));
		/* the peak since the last check is at least what is held now and
		 * within the capacity; read again it restarts from what is held */
		uint64_t pk, pk2;
		CHECK_OK(vmm_place_peak(v, vplace(p), &pk));
		CHECK_OK(vmm_place_peak(v, vplace(p), &pk2));
		CHECK_MSG(pk >= used && pk <= cap && pk2 == used,
		          "op %ld (%s): place %d peak %" PRIu64 " then %" PRIu64 ", holds %" PRIu64,
		          n_ops, what, vplace(p), pk, pk2, used);
	}
}

/* The first half of a pair: a prefetch of k. Victims' write-downs it started
 * are waited for, so that whether a later step retires them early (a
 * non-blocking vmm_progress inside it) cannot change its choices; k's own
 * transfer stays in flight for the second half to meet. */
static void pair_prefetch(int k, int d)
{
	CHECK_OK(vmm_prefetch(v, ob[k].id, d));
	o_prefetch(k, d);
	for (int i = nstack - 1; i >= 0; i--)
		if (stack[i] != k) {
			int w = stack[i];
			CHECK_OK(vmm_obj_wait(v, ob[w].id));
			o_retire(w);
		}
	if (ob[k].pending_dev >= 0) { /* a disk read first: the chain is the vmm's */
		settle();
		compare("prefetch chain");
	}
}

static const char *op_names[] = {"read dev",    "write dev",      "overwrite dev", "read host",
                                 "write host",  "overwrite host", "prefetch dev",  "prefetch host",
                                 "evict dev",   "evict host",     "writeback",     "discard",
                                 "re-create",   "hint",           "prefetch+read", "prefetch+write",
                                 "prefetch+wb", "read+destroy"};
#define NOPS ((int)SP_ARRAY_SIZE(op_names))

static void expect_rc(const char *what, int k, int rc, int orc)
{
	CHECK_MSG(rc == orc, "op %ld (%s of o%d): %d, oracle says %d (%s)", n_ops, what, k, rc, orc,
	          rc ? sp_last_error() : "");
	n_nospace += orc == -ENOSPC;
}

/* What the op may not do to the objects it did not name (the rule of the
 * disk's reclaim, checked on the vmm's own counts): lose a disk copy that the
 * op's disk writes did not need (one each: objects have one size), or write a
 * copy down that was clean when the op began, unless the reclaim took its
 * disk copy, and a clean device copy's only as a last resort. */
struct before {
	uint64_t id;
	uint32_t valid;
	uint64_t d2h, h2disk;
};

static void snapshot(struct before *b)
{
	for (int j = 0; j < NOBJ; j++) {
		struct vmm_obj_info in;
		CHECK_OK(vmm_obj_info(v, ob[j].id, &in));
		b[j] = (struct before){ob[j].id, in.valid_mask, in.moves[VMM_XFER_D2H],
		                       in.moves[VMM_XFER_H2DISK]};
		ob[j].reclaimed = 0;
	}
}

static void check_rules(const struct before *b, int k, const char *what, const struct vmm_stats *s0)
{
	int lost = 0, writes = 0, last_device = 0;
	for (int j = 0; j < NOBJ; j++) {
		struct vmm_obj_info in;
		if (ob[j].id != b[j].id)
			continue; /* destroyed and created again */
		CHECK_OK(vmm_obj_info(v, ob[j].id, &in));
		writes += (int)(in.moves[VMM_XFER_H2DISK] - b[j].h2disk);
		if (j == k)
			continue;
		int ndev = __builtin_popcount(b[j].valid & ((1u << NDEV) - 1));
		int had_host = !!(b[j].valid & VMM_INFO_HOST),
		    had_disk = !!(b[j].valid & VMM_INFO_DISK);
		lost += had_disk && !(in.valid_mask & VMM_INFO_DISK);
		last_device += ob[j].reclaimed == R_LAST_DEVICE + 1;
		CHECK_MSG(!had_disk || (in.valid_mask & VMM_INFO_DISK) || ob[j].reclaimed,
		          "op %ld (%s of o%d): o%d lost its disk copy to no reclaim", n_ops, what,
		          k, j);
		if (in.moves[VMM_XFER_D2H] > b[j].d2h)
			CHECK_MSG(!had_host && (!had_disk || (ndev == 1 && ob[j].reclaimed ==
			                                                       R_LAST_DEVICE + 1)),
			          "op %ld (%s of o%d): o%d was copied back from a device, clean "
			          "(on %#x) when the op began",
			          n_ops, what, k, j, b[j].valid);
		if (in.moves[VMM_XFER_H2DISK] > b[j].h2disk)
			CHECK_MSG(
			    !had_disk || ob[j].reclaimed,
			    "op %ld (%s of o%d): o%d was written to disk again (on %#x when the "
			    "op began)",
			    n_ops, what, k, j, b[j].valid);
	}
	CHECK_MSG(lost <= writes, "op %ld (%s of o%d): %d disk copies freed for %d disk writes",
	          n_ops, what, k, lost, writes);
	struct vmm_stats s;
	vmm_stats_get(v, &s);
	CHECK_MSG(s.reclaim_sole.total - s0->reclaim_sole.total >= last_device,
	          "op %ld (%s of o%d): a clean device copy was made the only one uncounted", n_ops,
	          what, k);
}

/* Ops that drop disk copies (writes, discards, destroys): a disk-heavy seed
 * turns 3 in 4 of them into reads, host evictions and write-backs, so that
 * the disk stays full and its reclaim order is what decides. */
static int disk_heavy;
static const int keeps_disk[] = {0, 3, 9, 10, 14, 16};

static void one_op(void)
{
	int k = rnd_n(NOBJ), d = rnd_n(NDEV), op = rnd_n(NOPS);
	int drops_disk = op == 1 || op == 2 || op == 4 || op == 5 || op == 11 || op == 12 ||
	                 op == 15 || op == 17;
	if (disk_heavy && drops_disk && rnd_n(4))
		op = keeps_disk[rnd_n((int)SP_ARRAY_SIZE(keeps_disk))];
	struct oobj *o = &ob[k];
	struct before b[NOBJ];
	struct vmm_stats s0;
	snapshot(b);
	vmm_stats_get(v, &s0);
	switch (op) {
	case 0: dev_use(k, d, VMM_READ, 0); break;
	case 1: dev_use(k, d, VMM_WRITE, 0); break;
	case 2: dev_use(k, d, VMM_OVERWRITE, 0); break;
	case 3: host_use(k, VMM_READ); break;
	case 4: host_use(k, VMM_WRITE); break;
	case 5: host_use(k, VMM_OVERWRITE); break;
	case 6:
		CHECK_OK(vmm_prefetch(v, o->id, d));
		o_prefetch(k, d);
		break;
	case 7:
		CHECK_OK(vmm_prefetch(v, o->id, VMM_HOST));
		o_prefetch(k, PH);
		break;
	case 8:
		CHECK_OK(vmm_evict(v, o->id, d));
		CHECK_OK(o_evict(k, d));
		break;
	case 9: {
		int rc = vmm_evict(v, o->id, VMM_HOST), orc = o_evict(k, PH);
		expect_rc("evict host", k, rc, orc);
		break;
	}
	case 10: {
		int to_disk = rnd_n(2);
		int rc = vmm_writeback(v, o->id, to_disk), orc = o_writeback(k, to_disk);
		expect_rc("writeback", k, rc, orc);
		break;
	}
	case 11:
		CHECK_OK(vmm_discard(v, o->id));
		o_drop_all(k);
		break;
	case 12:
		CHECK_OK(vmm_obj_destroy(v, o->id));
		o_drop_all(k);
		o->live = 0;
		create(k);
		break;
	case 13:
		o->hint = unique_hint();
		CHECK_OK(vmm_hint(v, o->id, o->hint));
		break;
	case 14:
	case 15:
		/* the acquire meets the prefetch's transfer in flight */
		pair_prefetch(k, d);
		dev_use(k, d, op == 14 ? VMM_READ : VMM_WRITE, 0);
		break;
	case 16: {
		int to_disk = rnd_n(2);
		pair_prefetch(k, d);
		/* immediate or deferred behind the transfer: the same end state;
		 * a deferred one that finds no disk room tells vmm_obj_wait */
		int rc = vmm_writeback(v, o->id, to_disk), orc = o_writeback(k, to_disk);
		if (orc < 0 && rc == 0)
			rc = vmm_obj_wait(v, o->id);
		expect_rc("writeback behind a prefetch", k, rc, orc);
		break;
	}
	default: dev_use(k, d, VMM_READ, 1); break;
	}
	settle();
	n_ops++;
	check_rules(b, k, op_names[op], &s0);
	compare(op_names[op]);
}

static void phase_exact(uint64_t seed, long ops, enum vmm_policy pol, int heavy, const char *dir)
{
	rng = seed * 0x9e3779b97f4a7c15ull + 1;
	policy = pol;
	disk_heavy = heavy;
	memset(olink, 0, sizeof(olink));
	oclock = 0;
	nstack = 0;
	n_ops = n_evictions = n_skips = 0;
	n_reclaims = n_sole = n_nospace = 0;
	ctx = vt_open_host(NDEV, 1 << 20);
	p2p = dev_p2p_possible(ctx, 0, 1);
	struct vmm_config c = vt_config(DEV_SLOTS * OBJ, 0, HOST_SLOTS * OBJ);
	c.policy = pol;
	c.max_objects = 64;
	vt_config_disk(&c, dir, DISK_SLOTS * OBJ, "");
	CHECK_OK(vmm_open(ctx, &c, &v));
	for (int d = 0; d < NDEV; d++) {
		CHECK_OK(dev_stream_create(ctx, d, &st[d]));
		CHECK_OK(dev_event_create(ctx, &done[d]));
	}
	for (int k = 0; k < NOBJ; k++)
		create(k);
	for (long i = 0; i < ops; i++)
		one_op();
	flush_checks();
	/* every object with data, read back on the host */
	for (int k = 0; k < NOBJ; k++)
		if (ob[k].seed) {
			host_use(k, VMM_READ);
			settle();
			compare("final read");
		}
	struct vmm_stats s;
	vmm_stats_get(v, &s);
	printf("seed %" PRIu64 " %s%s: %ld ops, %" PRId64 " evictions (oracle %ld), %" PRId64
	       " write-backs, %" PRId64 " ordered reuses, %" PRId64 " prefetch skips (oracle "
	       "%ld), %" PRId64 " disk reclaims (%" PRId64 " leaving one copy), %ld full-disk "
	       "refusals, %" PRIu64 " bytes moved\n",
	       seed, pol == VMM_POLICY_LRU ? "lru" : "belady", heavy ? " disk-heavy" : "", n_ops,
	       s.evictions.total, n_evictions, s.writebacks.total, s.ordered_reuses.total,
	       s.prefetch_skips.total, n_skips, s.disk_reclaims.total, s.reclaim_sole.total,
	       n_nospace,
	       vmm_xfer_bytes(v, VMM_XFER_H2D) + vmm_xfer_bytes(v, VMM_XFER_D2H) +
	           vmm_xfer_bytes(v, VMM_XFER_P2P) + vmm_xfer_bytes(v, VMM_XFER_H2DISK) +
	           vmm_xfer_bytes(v, VMM_XFER_DISK2H));
	CHECK(s.evictions.total == n_evictions && s.prefetch_skips.total == n_skips);
	tot_reclaims += n_reclaims;
	CHECK(s.evictions.total > 0 && s.writebacks.total > 0 && s.ordered_reuses.total > 0);
	vt_check_accounting(v, ctx, NDEV);
	for (int k = 0; k < NOBJ; k++)
		CHECK_OK(vmm_obj_destroy(v, ob[k].id));
	vmm_close(v);
	dev_close(ctx);
}

/* ---- phase 2: threads ------------------------------------------------------------- */

#define MT_THREADS 3
#define MT_OBJ     8 /* per thread */
#define MT_BATCH   64

struct mt_obj {
	uint64_t id;
	size_t bytes;
	uint64_t seed;
};

struct mt_worker {
	int t;
	uint64_t rng;
	long ops;
	struct mt_obj o[MT_OBJ];
	struct dev_stream *s[NDEV];
	struct dev_event *done[NDEV];
	int *bad;
	uint64_t bad_seed[MT_BATCH];
	int nbad;
	long n_destroyed_pending, n_discarded_pending, n_reads;
};

static uint64_t mt_rnd(struct mt_worker *w)
{
	w->rng ^= w->rng << 13;
	w->rng ^= w->rng >> 7;
	w->rng ^= w->rng << 17;
	return w->rng;
}

static void mt_create(struct mt_worker *w, int k)
{
	static const size_t sizes[] = {8 * KiB, 16 * KiB, 24 * KiB, 40 * KiB};
	char name[24];
	snprintf(name, sizeof(name), "t%d.o%d", w->t, k);
	w->o[k].bytes = sizes[mt_rnd(w) % 4];
	w->o[k].seed = 0;
	struct vmm_obj_desc d = {w->o[k].bytes, VMM_KIND_STASH, name, 0, 0};
	CHECK_OK(vmm_obj_create(v, &d, &w->o[k].id));
}

static void mt_flush(struct mt_worker *w)
{
	for (int d = 0; d < NDEV; d++)
		CHECK_OK(dev_stream_sync(w->s[d]));
	for (int i = 0; i < w->nbad; i++)
		CHECK_MSG(w->bad[i] == 0,
		          "thread %d: a reader saw %d words of its object change under it", w->t,
		          w->bad[i]);
	w->nbad = 0;
}

/* Another thread's pinned copies can leave no hole big enough for a while
 * (-ENOMEM): as a runtime would, let the others release and try again. */
static int mt_acquire(struct mt_obj *o, int d, enum vmm_access acc, void **p,
                      struct dev_event **ready)
{
	int rc;
	for (int tries = 0; (rc = vmm_acquire(v, o->id, d, acc, p, ready)) == -ENOMEM; tries++) {
		CHECK_MSG(tries < 10000, "%s", sp_last_error());
		struct timespec ts = {0, 100000};
		nanosleep(&ts, NULL);
	}
	return rc;
}

static void mt_write(struct mt_worker *w, int k, int d)
{
	struct mt_obj *o = &w->o[k];
	void *p;
	struct dev_event *ready;
	enum vmm_access acc = o->seed && mt_rnd(w) % 2 ? VMM_WRITE : VMM_OVERWRITE;
	CHECK_OK(mt_acquire(o, d, acc, &p, &ready));
	vt_wait_ready(w->s[d], ready);
	o->seed = (mt_rnd(w) | 1) & 0xffffffffffffull;
	CHECK_OK(vt_fill_async(w->s[d], p, o->bytes, o->seed));
	CHECK_OK(dev_event_record(w->done[d], w->s[d]));
	CHECK_OK(vmm_release(v, o->id, d, w->done[d]));
}

static void mt_read(struct mt_worker *w, int k, int d)
{
	struct mt_obj *o = &w->o[k];
	void *p;
	struct dev_event *ready;
	if (w->nbad == MT_BATCH)
		mt_flush(w);
	CHECK_OK(mt_acquire(o, d, VMM_READ, &p, &ready));
	vt_wait_ready(w->s[d], ready);
	long ns = 100000 + 50000 * (long)(mt_rnd(w) % 8); /* a slow reader */
	CHECK_OK(dev_launch(w->s[d], &delay_kernel, &ns, sizeof(ns), (struct dev_cost){0, 0, 0}));
	w->bad[w->nbad] = -1;
	w->bad_seed[w->nbad] = o->seed;
	CHECK_OK(vt_check_async(w->s[d], p, o->bytes, o->seed, &w->bad[w->nbad]));
	w->nbad++;
	CHECK_OK(dev_event_record(w->done[d], w->s[d]));
	CHECK_OK(vmm_release(v, o->id, d, w->done[d]));
	w->n_reads++;
	switch (mt_rnd(w) % 4) { /* its contents die at once, the reader still running */
	case 0:
		CHECK_OK(vmm_obj_destroy(v, o->id));
		mt_create(w, k);
		w->n_destroyed_pending++;
		break;
	case 1:
		CHECK_OK(vmm_discard(v, o->id));
		o->seed = 0;
		w->n_discarded_pending++;
		break;
	default: break;
	}
}

static void *mt_run(void *arg)
{
	struct mt_worker *w = arg;
	for (int d = 0; d < NDEV; d++) {
		CHECK_OK(dev_stream_create(ctx, d, &w->s[d]));
		CHECK_OK(dev_event_create(ctx, &w->done[d]));
	}
	w->bad = calloc(MT_BATCH, sizeof(int));
	CHECK(w->bad);
	for (int k = 0; k < MT_OBJ; k++)
		mt_create(w, k);
	for (long i = 0; i < w->ops; i++) {
		int k = (int)(mt_rnd(w) % MT_OBJ), d = (int)(mt_rnd(w) % NDEV);
		struct mt_obj *o = &w->o[k];
		int r = (int)(mt_rnd(w) % 100), place = r % 3 == 2 ? VMM_HOST : d;
		if (!o->seed || r < 25)
			mt_write(w, k, d);
		else if (r < 60)
			mt_read(w, k, d);
		else if (r < 72)
			CHECK_OK(vmm_evict(v, o->id, place));
		else if (r < 82)
			CHECK_OK(vmm_writeback(v, o->id, (int)(mt_rnd(w) % 2)));
		else if (r < 92) {
			int rc = vmm_prefetch(v, o->id, place); /* -ENOMEM: as above */
			CHECK_MSG(rc == 0 || rc == -ENOMEM, "%s", sp_last_error());
		} else if (r < 96)
			CHECK_OK(vmm_progress(v));
		else
			CHECK_OK(vmm_obj_wait(v, o->id));
	}
	mt_flush(w);
	for (int k = 0; k < MT_OBJ; k++) {
		if (w->o[k].seed)
			CHECK(vt_read_host(v, w->o[k].id, w->o[k].bytes, w->o[k].seed) == 0);
		CHECK_OK(vmm_obj_destroy(v, w->o[k].id));
	}
	return NULL;
}

static void phase_threads(uint64_t seed, long ops, const char *dir)
{
	ctx = vt_open_host(NDEV, 1 << 20);
	struct vmm_config c = vt_config(160 * KiB, 0, 192 * KiB);
	c.max_objects = 64;
	vt_config_disk(&c, dir, 0, "");
	CHECK_OK(vmm_open(ctx, &c, &v));
	struct mt_worker w[MT_THREADS];
	pthread_t th[MT_THREADS];
	memset(w, 0, sizeof(w));
	for (int t = 0; t < MT_THREADS; t++) {
		w[t].t = t;
		w[t].rng = seed * 0x9e3779b97f4a7c15ull + (uint64_t)t * 7919 + 3;
		w[t].ops = ops;
		CHECK(pthread_create(&th[t], NULL, mt_run, &w[t]) == 0);
	}
	for (int t = 0; t < MT_THREADS; t++)
		CHECK(pthread_join(th[t], NULL) == 0);
	CHECK_OK(vmm_sync(v));
	vt_check_accounting(v, ctx, NDEV);
	struct vmm_stats s;
	vmm_stats_get(v, &s);
	long destroyed = 0, discarded = 0, reads = 0;
	for (int t = 0; t < MT_THREADS; t++) {
		destroyed += w[t].n_destroyed_pending;
		discarded += w[t].n_discarded_pending;
		reads += w[t].n_reads;
		for (int d = 0; d < NDEV; d++)
			CHECK_OK(dev_event_destroy(w[t].done[d]));
		free(w[t].bad);
	}
	printf("threads, seed %" PRIu64 ": %d x %ld ops, %ld slow reads (%ld destroyed and %ld "
	       "discarded right after the release), %" PRId64 " ordered reuses, %" PRId64
	       " evictions\n",
	       seed, MT_THREADS, ops, reads, destroyed, discarded, s.ordered_reuses.total,
	       s.evictions.total);
	CHECK(s.ordered_reuses.total > 0 && s.evictions.total > 0 && destroyed > 0);
	vmm_close(v);
	dev_close(ctx);
}

int main(int argc, char **argv)
{
	long ops = argc > 1 ? atol(argv[1]) : 400;
	uint64_t seed0 = argc > 2 ? strtoull(argv[2], NULL, 0) : 1;
	int nseeds = argc > 3 ? atoi(argv[3]) : 6;
	long mt_ops = argc > 4 ? atol(argv[4]) : 1500;
	const char *dir = vt_tmpdir();
	bad = calloc(MAXBAD, sizeof(int));
	CHECK(bad);
	for (int i = 0; i < nseeds; i++)
		phase_exact(seed0 + (uint64_t)i, ops,
		            i % 3 == 2 ? VMM_POLICY_LRU : VMM_POLICY_BELADY, i % 2, dir);
	CHECK_MSG(tot_reclaims > 0 || ops * nseeds < 400, "the disk never filled");
	for (int i = 0; i < (nseeds + 2) / 3; i++)
		phase_threads(seed0 + (uint64_t)i, mt_ops, dir);
	free(bad);
	vt_rmdir(dir);
	TEST_PASS();
}

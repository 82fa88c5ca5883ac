/* tests/vmm/test_disk_reclaim.c — a full disk tier gives up only the disk
 * copies it needs, in the order of vmm.h ("A full disk tier"), and never
 * makes a clean copy the only one while another choice remains.
 *
 * 1. The hostile order of the issue (host backend, 2 devices, LRU, objects of
 *    S = 64 KiB, device pools 2S, host pool 2S, disk 2S): weights W and Y are
 *    on disk only; D is dirty on device 0; W is read on device 0, Y on device
 *    1 (disk full); H1 and H2 fill the host with dirty copies; an OVERWRITE of
 *    T (2S) on device 0 must write D down, hence H1, hence reclaim one disk
 *    copy: Y's (its device copy was used last), not W's and not both. W then
 *    leaves device 0 by a drop: disk-only, 0 D2H bytes. Before the fix every
 *    disk copy with another copy was freed and W went back (one D2H).
 * 2. The same with vmm_prefetch of a host-only T (S): W keeps its disk copy,
 *    stays clean on device 0, and an eviction then drops it.
 * 3. The order itself: a disk full of one extent of each kind; dirty host
 *    copies evicted one by one take the disk copy of the object that keeps a
 *    host and a device copy, then two device copies, then the host copy alone
 *    (counted in reclaim_sole), then one device copy alone (counted); a
 *    disk-only object is never taken; an extent that would not fit even after
 *    every candidate is freed is -ENOSPC and frees nothing.
 * Every object's bytes are read back at the end. argv: [acquire|prefetch|order]
 * runs one part. */
#include "tests/vmm/vmm_test.h"

#define S (64u << 10)

struct env {
	const char *dir;
	struct dev_ctx *ctx;
	struct vmm *v;
	struct dev_stream *s[2];
	struct dev_event *done[2];
};

static void env_open(struct env *e, uint64_t dev_mem, uint64_t host_mem, uint64_t disk_mem)
{
	e->dir = vt_tmpdir();
	e->ctx = vt_open_host(2, 4u << 20);
	struct vmm_config c = vt_config(dev_mem, 0, host_mem);
	c.policy = VMM_POLICY_LRU;
	vt_config_disk(&c, e->dir, disk_mem, "");
	CHECK_OK(vmm_open(e->ctx, &c, &e->v));
	for (int d = 0; d < 2; d++) {
		CHECK_OK(dev_stream_create(e->ctx, d, &e->s[d]));
		CHECK_OK(dev_event_create(e->ctx, &e->done[d]));
	}
}

/* accounting: 0 after vmm_read_disk (its reads are not the vmm's transfers) */
static void env_close(struct env *e, int accounting)
{
	CHECK_OK(vmm_sync(e->v));
	if (accounting)
		vt_check_accounting(e->v, e->ctx, 2);
	for (int d = 0; d < 2; d++) {
		CHECK_OK(dev_event_destroy(e->done[d]));
		CHECK_OK(dev_stream_destroy(e->s[d]));
	}
	vmm_close(e->v);
	dev_close(e->ctx);
	vt_rmdir(e->dir);
}

static struct vmm_obj_info info(struct vmm *v, uint64_t id)
{
	struct vmm_obj_info in;
	CHECK_OK(vmm_obj_info(v, id, &in));
	return in;
}

/* A weight written on the host and pushed to disk: its only copy is there. */
static uint64_t disk_weight(struct env *e, const char *name, uint64_t seed)
{
	uint64_t id = vt_create(e->v, S, VMM_KIND_WEIGHT, name);
	vt_write_host(e->v, id, S, seed);
	CHECK_OK(vmm_writeback(e->v, id, 1));
	CHECK_OK(vmm_obj_wait(e->v, id));
	CHECK_OK(vmm_evict(e->v, id, VMM_HOST));
	CHECK(info(e->v, id).valid_mask == VMM_INFO_DISK);
	return id;
}

/* Reads obj's disk copy (S bytes) and returns the words that differ. */
static int disk_read(struct vmm *v, uint64_t id, uint64_t seed)
{
	uint64_t *buf = malloc(S);
	CHECK(buf);
	CHECK_OK(vmm_read_disk(v, id, buf));
	int bad = vt_check_host(buf, S, seed);
	free(buf);
	return bad;
}

static struct vmm_stats stats(struct vmm *v)
{
	struct vmm_stats s;
	vmm_stats_get(v, &s);
	return s;
}

/* The prefix both orders of the issue share: W, Y on disk only, D dirty on
 * device 0, W read on device 0 and Y on device 1, their host copies gone. */
static void hostile_prefix(struct env *e, uint64_t *w, uint64_t *y, uint64_t *dd)
{
	*w = disk_weight(e, "W", 11);
	*y = disk_weight(e, "Y", 12);
	*dd = vt_create(e->v, S, VMM_KIND_GRAD, "D");
	vt_write_dev(e->v, *dd, 0, VMM_OVERWRITE, e->s[0], e->done[0], S, 13);
	CHECK(vt_read_dev(e->v, *w, 0, e->s[0], e->done[0], S, 11) == 0);
	CHECK(vt_read_dev(e->v, *y, 1, e->s[1], e->done[1], S, 12) == 0);
	CHECK_OK(vmm_evict(e->v, *w, VMM_HOST));
	CHECK_OK(vmm_evict(e->v, *y, VMM_HOST));
	CHECK_OK(vmm_sync(e->v));
	CHECK(info(e->v, *w).valid_mask == (1u | VMM_INFO_DISK));
	CHECK(info(e->v, *y).valid_mask == (2u | VMM_INFO_DISK));
	uint64_t used, cap;
	CHECK_OK(vmm_place_usage(e->v, VMM_DISK, &used, &cap));
	CHECK_MSG(used == cap, "the disk holds %" PRIu64 " of %" PRIu64 " bytes", used, cap);
}

static void hostile_acquire(void)
{
	struct env e;
	env_open(&e, 2 * S, 2 * S, 2 * S);
	uint64_t w, y, dd;
	hostile_prefix(&e, &w, &y, &dd);
	uint64_t h1 = vt_create(e.v, S, VMM_KIND_INTERMEDIATE, "H1");
	uint64_t h2 = vt_create(e.v, S, VMM_KIND_INTERMEDIATE, "H2");
	vt_write_host(e.v, h1, S, 21);
	vt_write_host(e.v, h2, S, 22);
	uint64_t t = vt_create(e.v, 2 * S, VMM_KIND_STASH, "T");
	struct vmm_stats s0 = stats(e.v);
	vt_write_dev(e.v, t, 0, VMM_OVERWRITE, e.s[0], e.done[0], 2 * S, 23);
	CHECK_OK(vmm_sync(e.v));
	struct vmm_stats s1 = stats(e.v);
	struct vmm_obj_info wi = info(e.v, w), yi = info(e.v, y);
	printf("acquire: W on %#x after %" PRIu64 " D2H bytes, Y on %#x; %" PRId64
	       " disk copies reclaimed, %" PRId64 " left a single copy\n",
	       wi.valid_mask, wi.bytes_moved[VMM_XFER_D2H], yi.valid_mask,
	       s1.disk_reclaims.total - s0.disk_reclaims.total,
	       s1.reclaim_sole.total - s0.reclaim_sole.total);
	CHECK_MSG(wi.bytes_moved[VMM_XFER_D2H] == 0 && wi.bytes_moved[VMM_XFER_H2DISK] == S,
	          "W went back: %" PRIu64 " D2H bytes, %" PRIu64 " host->disk bytes",
	          wi.bytes_moved[VMM_XFER_D2H], wi.bytes_moved[VMM_XFER_H2DISK]);
	CHECK_MSG(wi.valid_mask == VMM_INFO_DISK, "W is on %#x, not on disk only", wi.valid_mask);
	CHECK(vmm_link_bytes(e.v, 0, VMM_HOST, VMM_KIND_WEIGHT) == 0);
	/* one extent was needed (H1's): Y gave its disk copy, as a last resort */
	CHECK(yi.valid_mask == 2u && yi.dirty_mask == 2u);
	CHECK(info(e.v, h1).valid_mask == VMM_INFO_DISK);
	CHECK(info(e.v, dd).valid_mask == VMM_INFO_HOST);
	CHECK(s1.disk_reclaims.total - s0.disk_reclaims.total == 1);
	CHECK(s1.reclaim_sole.total - s0.reclaim_sole.total == 1);
	vt_check_accounting(e.v, e.ctx, 2);
	/* the host holds D and H2, dirty, and the disk W and H1, alone: those
	 * two are read from disk with no host space */
	CHECK(disk_read(e.v, w, 11) == 0);
	CHECK(disk_read(e.v, h1, 21) == 0);
	CHECK(vt_read_dev(e.v, y, 1, e.s[1], e.done[1], S, 12) == 0);
	CHECK(vt_read_host(e.v, dd, S, 13) == 0);
	CHECK(vt_read_host(e.v, h2, S, 22) == 0);
	env_close(&e, 0);
}

static void hostile_prefetch(void)
{
	struct env e;
	env_open(&e, 2 * S, 2 * S, 2 * S);
	uint64_t w, y, dd;
	hostile_prefix(&e, &w, &y, &dd);
	uint64_t h1 = vt_create(e.v, S, VMM_KIND_INTERMEDIATE, "H1");
	uint64_t t = vt_create(e.v, S, VMM_KIND_INPUT, "T");
	vt_write_host(e.v, h1, S, 21);
	vt_write_host(e.v, t, S, 23);
	struct vmm_stats s0 = stats(e.v);
	CHECK_OK(vmm_prefetch(e.v, t, 0));
	CHECK_OK(vmm_sync(e.v));
	struct vmm_stats s1 = stats(e.v);
	struct vmm_obj_info wi = info(e.v, w);
	printf("prefetch: W on %#x (dirty on %#x), Y on %#x; %" PRId64
	       " disk copies reclaimed, %" PRId64 " left a single copy\n",
	       wi.valid_mask, wi.dirty_mask, info(e.v, y).valid_mask,
	       s1.disk_reclaims.total - s0.disk_reclaims.total,
	       s1.reclaim_sole.total - s0.reclaim_sole.total);
	CHECK_MSG(wi.valid_mask == (1u | VMM_INFO_DISK) && wi.dirty_mask == 0,
	          "W is on %#x, dirty on %#x: it lost its disk copy", wi.valid_mask, wi.dirty_mask);
	CHECK(info(e.v, t).valid_mask == (1u | VMM_INFO_HOST));
	CHECK(s1.disk_reclaims.total - s0.disk_reclaims.total == 1);
	CHECK_OK(vmm_evict(e.v, w, 0)); /* a drop */
	CHECK_OK(vmm_sync(e.v));
	wi = info(e.v, w);
	CHECK_MSG(wi.valid_mask == VMM_INFO_DISK && wi.bytes_moved[VMM_XFER_D2H] == 0,
	          "W is on %#x after %" PRIu64 " D2H bytes", wi.valid_mask,
	          wi.bytes_moved[VMM_XFER_D2H]);
	vt_check_accounting(e.v, e.ctx, 2);
	/* the host holds D and T, dirty; W and H1 are on disk alone */
	CHECK(disk_read(e.v, w, 11) == 0);
	CHECK(disk_read(e.v, h1, 21) == 0);
	CHECK(vt_read_dev(e.v, y, 1, e.s[1], e.done[1], S, 12) == 0);
	CHECK(vt_read_dev(e.v, t, 0, e.s[0], e.done[0], S, 23) == 0);
	CHECK(vt_read_host(e.v, dd, S, 13) == 0);
	env_close(&e, 0);
}

/* Evicts a dirty host copy to disk and returns the stats after. */
static struct vmm_stats push(struct env *e, uint64_t id)
{
	CHECK_OK(vmm_evict(e->v, id, VMM_HOST));
	CHECK_OK(vmm_obj_wait(e->v, id));
	CHECK(info(e->v, id).valid_mask == VMM_INFO_DISK);
	return stats(e->v);
}

static void rank_order(void)
{
	struct env e;
	env_open(&e, 4 * S, 12 * S, 5 * S);
	/* one disk copy of each kind; the disk is full */
	uint64_t f = disk_weight(&e, "F", 31);  /* disk only: never */
	uint64_t b = disk_weight(&e, "B", 32);  /* + device 0: a last device copy */
	uint64_t a = disk_weight(&e, "A", 33);  /* + host: a last host copy */
	uint64_t c = disk_weight(&e, "C", 34);  /* + devices 0 and 1: spare */
	uint64_t hd = disk_weight(&e, "E", 35); /* + host + device 1: spare, host */
	CHECK(vt_read_dev(e.v, b, 0, e.s[0], e.done[0], S, 32) == 0);
	CHECK(vt_read_host(e.v, a, S, 33) == 0);
	CHECK(vt_read_dev(e.v, c, 0, e.s[0], e.done[0], S, 34) == 0);
	CHECK(vt_read_dev(e.v, c, 1, e.s[1], e.done[1], S, 34) == 0);
	CHECK(vt_read_dev(e.v, hd, 1, e.s[1], e.done[1], S, 35) == 0);
	CHECK_OK(vmm_evict(e.v, b, VMM_HOST));
	CHECK_OK(vmm_evict(e.v, c, VMM_HOST));
	CHECK_OK(vmm_sync(e.v));
	CHECK(info(e.v, f).valid_mask == VMM_INFO_DISK);
	CHECK(info(e.v, b).valid_mask == (1u | VMM_INFO_DISK));
	CHECK(info(e.v, a).valid_mask == (VMM_INFO_HOST | VMM_INFO_DISK));
	CHECK(info(e.v, c).valid_mask == (3u | VMM_INFO_DISK));
	CHECK(info(e.v, hd).valid_mask == (2u | VMM_INFO_HOST | VMM_INFO_DISK));
	uint64_t g[6];
	for (int i = 0; i < 6; i++) {
		char name[8];
		snprintf(name, sizeof(name), "G%d", i);
		g[i] = vt_create(e.v, S, VMM_KIND_GRAD, name);
		vt_write_host(e.v, g[i], S, 40 + (uint64_t)i);
	}
	struct vmm_stats s0 = stats(e.v), s;
	/* each push frees exactly one disk copy, the cheapest */
	s = push(&e, g[0]);
	CHECK_MSG(info(e.v, hd).valid_mask == (2u | VMM_INFO_HOST), "E on %#x",
	          info(e.v, hd).valid_mask);
	CHECK(s.disk_reclaims.total == s0.disk_reclaims.total + 1 &&
	      s.reclaim_sole.total == s0.reclaim_sole.total);
	s = push(&e, g[1]);
	CHECK_MSG(info(e.v, c).valid_mask == 3u, "C on %#x", info(e.v, c).valid_mask);
	CHECK(s.disk_reclaims.total == s0.disk_reclaims.total + 2 &&
	      s.reclaim_sole.total == s0.reclaim_sole.total);
	s = push(&e, g[2]);
	CHECK_MSG(info(e.v, a).valid_mask == VMM_INFO_HOST, "A on %#x", info(e.v, a).valid_mask);
	CHECK(s.disk_reclaims.total == s0.disk_reclaims.total + 3 &&
	      s.reclaim_sole.total == s0.reclaim_sole.total + 1);
	CHECK(info(e.v, b).valid_mask == (1u | VMM_INFO_DISK)); /* still clean */
	s = push(&e, g[3]);
	CHECK_MSG(info(e.v, b).valid_mask == 1u && info(e.v, b).dirty_mask == 1u, "B on %#x",
	          info(e.v, b).valid_mask);
	CHECK(s.disk_reclaims.total == s0.disk_reclaims.total + 4 &&
	      s.reclaim_sole.total == s0.reclaim_sole.total + 2);
	/* the disk: F and G0..G3, each the only copy. G0 comes back to the host
	 * and device 0 (a spare disk copy of S); Z needs 2S: no room even with
	 * G0's, so nothing is freed */
	CHECK(vt_read_dev(e.v, g[0], 0, e.s[0], e.done[0], S, 40) == 0);
	uint64_t z = vt_create(e.v, 2 * S, VMM_KIND_GRAD, "Z");
	vt_write_host(e.v, z, 2 * S, 50);
	int rc = vmm_evict(e.v, z, VMM_HOST);
	CHECK_MSG(rc == -ENOSPC, "evicting Z: %d (%s)", rc, sp_last_error());
	CHECK(info(e.v, g[0]).valid_mask == (1u | VMM_INFO_HOST | VMM_INFO_DISK));
	CHECK(info(e.v, z).valid_mask == VMM_INFO_HOST);
	CHECK(stats(e.v).disk_reclaims.total == s0.disk_reclaims.total + 4);
	/* G4 fits in G0's extent; then G5 finds only disk-only copies */
	s = push(&e, g[4]);
	CHECK(info(e.v, g[0]).valid_mask == (1u | VMM_INFO_HOST));
	CHECK(s.disk_reclaims.total == s0.disk_reclaims.total + 5 &&
	      s.reclaim_sole.total == s0.reclaim_sole.total + 2);
	rc = vmm_evict(e.v, g[5], VMM_HOST);
	CHECK_MSG(rc == -ENOSPC, "evicting G5: %d (%s)", rc, sp_last_error());
	CHECK(info(e.v, g[5]).valid_mask == VMM_INFO_HOST);
	CHECK(info(e.v, f).valid_mask == VMM_INFO_DISK);
	CHECK(stats(e.v).disk_reclaims.total == s0.disk_reclaims.total + 5);
	printf("order: E, C, A (sole), B (sole), then G0 for G4; Z (2S) and G5: -ENOSPC, "
	       "nothing freed\n");
	CHECK(vt_read_host(e.v, f, S, 31) == 0);
	CHECK(vt_read_host(e.v, b, S, 32) == 0);
	CHECK(vt_read_host(e.v, a, S, 33) == 0);
	CHECK(vt_read_host(e.v, c, S, 34) == 0);
	CHECK(vt_read_host(e.v, hd, S, 35) == 0);
	for (int i = 0; i < 6; i++)
		CHECK(vt_read_host(e.v, g[i], S, 40 + (uint64_t)i) == 0);
	CHECK(vt_read_host(e.v, z, 2 * S, 50) == 0);
	env_close(&e, 1);
}

int main(int argc, char **argv)
{
	const char *only = argc > 1 ? argv[1] : "";
	if (!*only || !strcmp(only, "acquire"))
		hostile_acquire();
	if (!*only || !strcmp(only, "prefetch"))
		hostile_prefetch();
	if (!*only || !strcmp(only, "order"))
		rank_order();
	TEST_PASS();
}

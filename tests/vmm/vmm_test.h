/* tests/vmm/vmm_test.h — helpers shared by the vmm tests: opening the host
 * backend, CPU kernels that fill an object with a pattern derived from a seed
 * and count the words that differ from it (run on device streams, so every
 * access goes through what the vmm made resident), acquire/kernel/release
 * round trips, the accounting check against the device layer, and a temporary
 * directory for the disk tier. Header-only (static functions); tests include
 * it once. Sizes given to the fill/check helpers are multiples of 8. */
#ifndef SP_TESTS_VMM_TEST_H
#define SP_TESTS_VMM_TEST_H

#include "common/error.h"
#include "device/device.h"
#include "tests/test.h"
#include "vmm/vmm.h"

#include <dirent.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static inline uint64_t vt_word(uint64_t seed, size_t i)
{
	uint64_t z = seed * 0x9e3779b97f4a7c15ull + i + 1;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

struct vt_fill_args {
	uint64_t *p;
	size_t words;
	uint64_t seed;
};

struct vt_check_args {
	const uint64_t *p;
	size_t words;
	uint64_t seed;
	int *bad; /* host memory owned by the test */
};

static void vt_fill_cpu(const void *a)
{
	const struct vt_fill_args *f = a;
	for (size_t i = 0; i < f->words; i++)
		f->p[i] = vt_word(f->seed, i);
}

static void vt_check_cpu(const void *a)
{
	const struct vt_check_args *c = a;
	int bad = 0;
	for (size_t i = 0; i < c->words; i++)
		bad += c->p[i] != vt_word(c->seed, i);
	*c->bad = bad;
}

static const struct dev_kernel vt_fill_kernel = {"vt_fill", vt_fill_cpu, NULL};
static const struct dev_kernel vt_check_kernel = {"vt_check", vt_check_cpu, NULL};

static inline int vt_fill_async(struct dev_stream *s, void *p, size_t bytes, uint64_t seed)
{
	struct vt_fill_args a = {p, bytes / 8, seed};
	struct dev_cost c = {0, (double)bytes, 0};
	return dev_launch(s, &vt_fill_kernel, &a, sizeof(a), c);
}

static inline int vt_check_async(struct dev_stream *s, const void *p, size_t bytes, uint64_t seed,
                                 int *bad)
{
	struct vt_check_args a = {p, bytes / 8, seed, bad};
	struct dev_cost c = {0, (double)bytes, 0};
	return dev_launch(s, &vt_check_kernel, &a, sizeof(a), c);
}

static inline void vt_fill_host(void *p, size_t bytes, uint64_t seed)
{
	struct vt_fill_args a = {p, bytes / 8, seed};
	vt_fill_cpu(&a);
}

static inline int vt_check_host(const void *p, size_t bytes, uint64_t seed)
{
	int bad = 0;
	struct vt_check_args a = {p, bytes / 8, seed, &bad};
	vt_check_cpu(&a);
	return bad;
}

/* Opens the host backend with n emulated devices of mem bytes each. */
static inline struct dev_ctx *vt_open_host(int n, uint64_t mem)
{
	struct dev_config dc;
	memset(&dc, 0, sizeof(dc));
	dc.backend = DEV_BACKEND_HOST;
	dc.ndevices = n;
	dc.device_mem = mem;
	dc.profile = "";
	dc.threads = 1;
	struct dev_ctx *ctx = NULL;
	CHECK_OK(dev_open(&dc, &ctx));
	return ctx;
}

/* Opens the model backend (virtual time) with n devices of a profile. */
static inline struct dev_ctx *vt_open_model(int n, const char *profile)
{
	struct dev_config dc;
	memset(&dc, 0, sizeof(dc));
	dc.backend = DEV_BACKEND_MODEL;
	dc.ndevices = n;
	dc.profile = profile;
	struct dev_ctx *ctx = NULL;
	CHECK_OK(dev_open(&dc, &ctx));
	return ctx;
}

/* A vmm config with no disk tier. */
static inline struct vmm_config vt_config(uint64_t device_mem, uint64_t stable_mem,
                                          uint64_t host_mem)
{
	struct vmm_config c;
	memset(&c, 0, sizeof(c));
	c.device_mem = device_mem;
	c.stable_mem = stable_mem;
	c.host_mem = host_mem;
	c.policy = VMM_POLICY_AUTO;
	c.max_objects = 1024;
	c.trace_cap = 256;
	c.align = 256;
	return c;
}

/* Adds a disk tier in dir with capacity bytes (0 = free space) and a fault
 * spec ("" = none). Skips the test when built without liburing. */
static inline void vt_config_disk(struct vmm_config *c, const char *dir, uint64_t capacity,
                                  const char *fault)
{
#if !SPILL_HAVE_URING
	TEST_SKIP("the disk tier needs liburing (apt-get install liburing-dev)");
#endif
	c->use_disk = 1;
	c->disk.path = dir;
	c->disk.capacity = capacity;
	c->disk.queue_depth = 8;
	c->disk.block = 64 << 10;
	c->disk.fault = fault ? fault : "";
}

/* Creates a fresh directory for the disk tier under $TMPDIR (default /tmp);
 * returns a static path. */
static inline const char *vt_tmpdir(void)
{
	static char path[256];
	const char *t = getenv("TMPDIR");
	snprintf(path, sizeof(path), "%s/spill-vmm-test-XXXXXX", t && *t ? t : "/tmp");
	CHECK(mkdtemp(path) != NULL);
	return path;
}

/* Removes a directory made by vt_tmpdir and the files left in it. */
static inline void vt_rmdir(const char *path)
{
	DIR *d = opendir(path);
	if (d) {
		struct dirent *e;
		char f[512];
		while ((e = readdir(d)))
			if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
				snprintf(f, sizeof(f), "%s/%s", path, e->d_name);
				unlink(f);
			}
		closedir(d);
	}
	rmdir(path);
}

/* Waits for an acquire's ready event (NULL: nothing to wait for). */
static inline void vt_wait_ready(struct dev_stream *s, struct dev_event *ready)
{
	if (ready)
		CHECK_OK(dev_stream_wait_event(s, ready));
}

/* Creates an object of bytes and kind named name. */
static inline uint64_t vt_create(struct vmm *v, size_t bytes, enum vmm_kind kind, const char *name)
{
	uint64_t id;
	struct vmm_obj_desc d = {bytes, kind, name, 0, 0};
	CHECK_OK(vmm_obj_create(v, &d, &id));
	return id;
}

/* Writes seed's pattern into obj from a kernel on stream s (device dev):
 * acquire (access WRITE or OVERWRITE), wait for ready, fill, record done,
 * release(done). Asynchronous: done is complete when the fill is. */
static inline void vt_write_dev(struct vmm *v, uint64_t obj, int dev, enum vmm_access access,
                                struct dev_stream *s, struct dev_event *done, size_t bytes,
                                uint64_t seed)
{
	void *p;
	struct dev_event *ready;
	CHECK_OK(vmm_acquire(v, obj, dev, access, &p, &ready));
	vt_wait_ready(s, ready);
	CHECK_OK(vt_fill_async(s, p, bytes, seed));
	CHECK_OK(dev_event_record(done, s));
	CHECK_OK(vmm_release(v, obj, dev, done));
}

/* Reads obj on device dev with a check kernel on s and returns the number of
 * words that differ from seed's pattern (waits for the kernel). */
static inline int vt_read_dev(struct vmm *v, uint64_t obj, int dev, struct dev_stream *s,
                              struct dev_event *done, size_t bytes, uint64_t seed)
{
	void *p;
	struct dev_event *ready;
	int *bad = malloc(sizeof(*bad));
	CHECK(bad);
	*bad = -1;
	CHECK_OK(vmm_acquire(v, obj, dev, VMM_READ, &p, &ready));
	vt_wait_ready(s, ready);
	CHECK_OK(vt_check_async(s, p, bytes, seed, bad));
	CHECK_OK(dev_event_record(done, s));
	CHECK_OK(vmm_release(v, obj, dev, done));
	CHECK_OK(dev_event_sync(done));
	int r = *bad;
	free(bad);
	return r;
}

/* Writes seed's pattern into obj's host copy (OVERWRITE, filled by the CPU). */
static inline void vt_write_host(struct vmm *v, uint64_t obj, size_t bytes, uint64_t seed)
{
	void *p;
	struct dev_event *ready;
	CHECK_OK(vmm_acquire(v, obj, VMM_HOST, VMM_OVERWRITE, &p, &ready));
	CHECK(ready == NULL);
	vt_fill_host(p, bytes, seed);
	CHECK_OK(vmm_release(v, obj, VMM_HOST, NULL));
}

/* Reads obj's host copy and returns the words that differ from seed's pattern. */
static inline int vt_read_host(struct vmm *v, uint64_t obj, size_t bytes, uint64_t seed)
{
	void *p;
	struct dev_event *ready;
	CHECK_OK(vmm_acquire(v, obj, VMM_HOST, VMM_READ, &p, &ready));
	CHECK(ready == NULL);
	int bad = vt_check_host(p, bytes, seed);
	CHECK_OK(vmm_release(v, obj, VMM_HOST, NULL));
	return bad;
}

/* After vmm_sync(): the vmm's byte counts equal the device layer's copies, per
 * transfer kind and summed over the (link x kind) matrix; with a disk tier,
 * host<->disk bytes equal what the tier wrote and read. */
static inline void vt_check_accounting(struct vmm *v, struct dev_ctx *ctx, int ndev)
{
	uint64_t h2d = vmm_xfer_bytes(v, VMM_XFER_H2D), d2h = vmm_xfer_bytes(v, VMM_XFER_D2H);
	uint64_t p2p = vmm_xfer_bytes(v, VMM_XFER_P2P);
	CHECK_MSG(h2d == dev_copied_bytes(ctx, DEV_COPY_H2D), "h2d: vmm %" PRIu64 " dev %" PRIu64,
	          h2d, dev_copied_bytes(ctx, DEV_COPY_H2D));
	CHECK_MSG(d2h == dev_copied_bytes(ctx, DEV_COPY_D2H), "d2h: vmm %" PRIu64 " dev %" PRIu64,
	          d2h, dev_copied_bytes(ctx, DEV_COPY_D2H));
	CHECK_MSG(p2p == dev_copied_bytes(ctx, DEV_COPY_P2P), "p2p: vmm %" PRIu64 " dev %" PRIu64,
	          p2p, dev_copied_bytes(ctx, DEV_COPY_P2P));
	CHECK(dev_copied_bytes(ctx, DEV_COPY_D2D) == 0);
	uint64_t lh2d = 0, ld2h = 0, lp2p = 0;
	for (int d = 0; d < ndev; d++) {
		lh2d += vmm_link_bytes(v, VMM_HOST, d, VMM_KINDS);
		ld2h += vmm_link_bytes(v, d, VMM_HOST, VMM_KINDS);
		for (int e = 0; e < ndev; e++)
			lp2p += vmm_link_bytes(v, d, e, VMM_KINDS);
	}
	CHECK_MSG(lh2d == h2d && ld2h == d2h && lp2p == p2p,
	          "links: h2d %" PRIu64 "/%" PRIu64 " d2h %" PRIu64 "/%" PRIu64 " p2p %" PRIu64
	          "/%" PRIu64,
	          lh2d, h2d, ld2h, d2h, lp2p, p2p);
	uint64_t per_kind = 0;
	for (int k = 0; k < VMM_KINDS; k++)
		per_kind += vmm_link_bytes(v, VMM_HOST, 0, k);
	CHECK(per_kind == vmm_link_bytes(v, VMM_HOST, 0, VMM_KINDS));
	struct vmm_disk_stats_snapshot ds;
	vmm_disk_stats_get(v, &ds);
	uint64_t w = vmm_xfer_bytes(v, VMM_XFER_H2DISK), r = vmm_xfer_bytes(v, VMM_XFER_DISK2H);
	CHECK_MSG(w == ds.bytes_written && r == ds.bytes_read,
	          "disk: vmm wrote %" PRIu64 " read %" PRIu64 ", tier wrote %" PRIu64
	          " read %" PRIu64,
	          w, r, ds.bytes_written, ds.bytes_read);
	CHECK(vmm_link_bytes(v, VMM_HOST, VMM_DISK, VMM_KINDS) == w);
	CHECK(vmm_link_bytes(v, VMM_DISK, VMM_HOST, VMM_KINDS) == r);
}

/* Every place's use is within its capacity. */
static inline void vt_check_capacity(struct vmm *v, int ndev)
{
	for (int p = -2; p < ndev; p++) {
		uint64_t used, cap;
		CHECK_OK(vmm_place_usage(v, p, &used, &cap));
		CHECK_MSG(used <= cap, "place %d: %" PRIu64 " bytes used of %" PRIu64, p, used,
		          cap);
	}
}

#endif

/* tests/vmm/test_host_fallback.c — cfg.host_fallback on the host backend: a
 * stable object whose only copies are on the host has its host chunk mapped at
 * its device address, so a kernel that reaches it unannounced reads and writes
 * host memory (the preload shim's safety net) instead of faulting.
 *
 * Whether an address is mapped is probed with process_vm_readv on ourselves
 * (EFAULT, not a crash, for a PROT_NONE range). Cases:
 *   - evict: the address stays readable with the contents; a write through it
 *     is what the device sees after the object comes back;
 *   - disk: a stray write made while the object was on the host survives the
 *     host copy going to disk (which was up to date before the write) and the
 *     way back; an object only on disk is unmapped (a stray access faults);
 *   - random: 100 seeds x 300 operations (device writes and reads, stray
 *     writes, evictions to host and disk, prefetches, discards) on 6 objects
 *     over 3 device slots and 6 host slots, each object's contents predicted
 *     exactly and checked at every read; after every operation, every object is
 *     mapped at its address exactly when it has a device or host copy;
 *   - a backend without host chunks (model) refuses the config with -ENOTSUP.
 */
#include "tests/vmm/vmm_test.h"

#include <errno.h>
#include <sys/uio.h>

#define KiB 1024ull
#define G   (64 * KiB) /* the host backend's granularity */

static struct dev_ctx *ctx;
static struct dev_stream *s;
static struct dev_event *done;
static const char *dir;

/* 1 if [p, p + 8) can be read (mapped), 0 if not, without faulting. */
static int mapped(const void *p)
{
	uint64_t x;
	struct iovec local = {&x, sizeof(x)}, remote = {(void *)p, sizeof(x)};
	ssize_t n = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
	if (n < 0)
		CHECK_MSG(errno == EFAULT, "process_vm_readv: %s", strerror(errno));
	return n == (ssize_t)sizeof(x);
}

/* A fresh context per vmm: the accounting check compares with its copies. */
static struct vmm *open_vmm(uint64_t stable, uint64_t host, int disk)
{
	ctx = vt_open_host(1, 64 * G);
	CHECK_OK(dev_stream_create(ctx, 0, &s));
	CHECK_OK(dev_event_create(ctx, &done));
	struct vmm_config c = vt_config(stable, stable, host);
	c.host_fallback = 1;
	c.max_objects = 64;
	if (disk)
		vt_config_disk(&c, dir, 0, "");
	struct vmm *v;
	CHECK_OK(vmm_open(ctx, &c, &v));
	return v;
}

static void close_vmm(struct vmm *v)
{
	CHECK_OK(vmm_sync(v));
	vt_check_accounting(v, ctx, 1);
	vmm_close(v);
	CHECK_OK(dev_event_destroy(done));
	CHECK_OK(dev_stream_destroy(s));
	dev_close(ctx);
}

static uint64_t create_stable(struct vmm *v, size_t bytes, const char *name)
{
	uint64_t id;
	struct vmm_obj_desc d = {bytes, VMM_KIND_WEIGHT, name, VMM_OBJ_STABLE, 0};
	CHECK_OK(vmm_obj_create(v, &d, &id));
	return id;
}

static uint64_t fallbacks(struct vmm *v)
{
	struct vmm_stats st;
	vmm_stats_get(v, &st);
	return st.host_fallbacks.total;
}

static void test_evict(void)
{
	struct vmm *v = open_vmm(2 * G, 4 * G, 0);
	const size_t n = 100 * KiB; /* not a multiple of the granularity */
	uint64_t a = create_stable(v, n, "a");
	char *va = vmm_obj_stable_addr(v, a);
	CHECK(!mapped(va));
	vt_write_dev(v, a, 0, VMM_OVERWRITE, s, done, n, 11);
	CHECK_OK(vmm_sync(v));
	CHECK(mapped(va) && fallbacks(v) == 0);
	CHECK_OK(vmm_evict(v, a, 0));
	CHECK_OK(vmm_sync(v));
	CHECK(vmm_obj_where(v, a) == VMM_INFO_HOST);
	CHECK_MSG(mapped(va), "evicted to the host, the address is not mapped");
	CHECK(fallbacks(v) == 1);
	CHECK(vt_check_host(va, n, 11) == 0); /* the contents, at the device address */
	vt_fill_host(va, n, 12);              /* a kernel the vmm was not told about */
	CHECK(vt_read_host(v, a, n, 12) == 0);
	CHECK(vt_read_dev(v, a, 0, s, done, n, 12) == 0); /* back on the device */
	CHECK(vmm_obj_where(v, a) == (VMM_INFO_HOST | 1u));
	CHECK(mapped(va));
	/* a discard drops every copy: nothing at the address */
	CHECK_OK(vmm_discard(v, a));
	CHECK(!mapped(va));
	vt_write_dev(v, a, 0, VMM_OVERWRITE, s, done, n, 13);
	CHECK_OK(vmm_evict(v, a, 0));
	CHECK_OK(vmm_sync(v));
	CHECK(mapped(va) && vt_check_host(va, n, 13) == 0);
	CHECK_OK(vmm_obj_destroy(v, a));
	close_vmm(v);
	printf("evict: the address keeps the contents on the host, a stray write comes back\n");
}

static void test_disk(void)
{
	struct vmm *v = open_vmm(2 * G, 2 * G, 1);
	const size_t n = 2 * G;
	uint64_t a = create_stable(v, n, "a");
	char *va = vmm_obj_stable_addr(v, a);
	vt_write_dev(v, a, 0, VMM_OVERWRITE, s, done, n, 21);
	CHECK_OK(vmm_writeback(v, a, 1)); /* host and disk both up to date */
	CHECK_OK(vmm_sync(v));
	CHECK_OK(vmm_evict(v, a, 0));
	CHECK_OK(vmm_sync(v));
	CHECK(vmm_obj_where(v, a) & VMM_INFO_HOST);
	CHECK(mapped(va));
	vt_fill_host(va, n, 22); /* the disk copy is now stale */
	CHECK_OK(vmm_evict(v, a, VMM_HOST));
	CHECK_OK(vmm_sync(v));
	CHECK(vmm_obj_where(v, a) == VMM_INFO_DISK);
	CHECK_MSG(!mapped(va), "only on disk, the address is still mapped");
	CHECK(vt_read_dev(v, a, 0, s, done, n, 22) == 0);
	CHECK_OK(vmm_obj_destroy(v, a));
	close_vmm(v);
	printf("disk: a stray write on the host survives the way to disk and back\n");
}

static uint64_t rng;
static uint64_t rnd(uint64_t n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng % n;
}

#define NOBJ 6

static void run_seed(uint64_t seed, uint64_t *ops_done, uint64_t *strays)
{
	rng = seed * 0x9e3779b97f4a7c15ull | 1;
	struct vmm *v = open_vmm(3 * G, 6 * G, 1);
	uint64_t id[NOBJ], want[NOBJ];
	size_t bytes[NOBJ];
	char *va[NOBJ];
	int live[NOBJ]; /* 1: has contents (want[] is right) */
	for (int i = 0; i < NOBJ; i++) {
		bytes[i] = (1 + rnd(2)) * G - rnd(2) * 8 * KiB;
		char name[8];
		snprintf(name, sizeof(name), "o%d", i);
		id[i] = create_stable(v, bytes[i], name);
		va[i] = vmm_obj_stable_addr(v, id[i]);
		live[i] = 0;
	}
	uint64_t next_seed = seed * 1000;
	for (int step = 0; step < 300; step++) {
		int i = (int)rnd(NOBJ), op = (int)rnd(8);
		char what[64];
		snprintf(what, sizeof(what), "seed %llu step %d op %d on o%d",
		         (unsigned long long)seed, step, op, i);
		switch (op) {
		case 0: /* write new contents on the device */
		case 1: {
			enum vmm_access acc = live[i] && rnd(2) ? VMM_WRITE : VMM_OVERWRITE;
			want[i] = ++next_seed;
			vt_write_dev(v, id[i], 0, acc, s, done, bytes[i], want[i]);
			live[i] = 1;
			break;
		}
		case 2: /* read and check on the device */
			if (live[i])
				CHECK_MSG(vt_read_dev(v, id[i], 0, s, done, bytes[i], want[i]) == 0,
				          "%s: the device read wrong contents", what);
			break;
		case 3: /* a stray kernel writes it where it is mapped without a device copy */
			CHECK_OK(vmm_sync(v));
			if (live[i] && !(vmm_obj_where(v, id[i]) & 1u) && mapped(va[i])) {
				CHECK_MSG(vt_check_host(va[i], bytes[i], want[i]) == 0,
				          "%s: the host copy at the address is wrong", what);
				want[i] = ++next_seed;
				vt_fill_host(va[i], bytes[i], want[i]);
				(*strays)++;
			}
			break;
		case 4: CHECK_OK(vmm_evict(v, id[i], 0)); break;
		case 5: {
			int rc = vmm_evict(v, id[i], VMM_HOST);
			CHECK_MSG(rc == 0, "%s: evict host: %s", what, sp_last_error());
			break;
		}
		case 6: CHECK_OK(vmm_prefetch(v, id[i], rnd(2) ? 0 : VMM_HOST)); break;
		case 7:
			if (rnd(4) == 0) {
				CHECK_OK(vmm_discard(v, id[i]));
				live[i] = 0;
			} else if (live[i]) {
				CHECK_MSG(vt_read_host(v, id[i], bytes[i], want[i]) == 0,
				          "%s: the host read wrong contents", what);
			}
			break;
		}
		CHECK_OK(vmm_sync(v));
		for (int k = 0; k < NOBJ; k++) {
			uint32_t w = vmm_obj_where(v, id[k]);
			int expect = (w & (1u | VMM_INFO_HOST)) != 0;
			CHECK_MSG(mapped(va[k]) == expect,
			          "%s: o%d is %smapped at its address with copies 0x%x", what, k,
			          expect ? "not " : "", w);
		}
		(*ops_done)++;
	}
	for (int i = 0; i < NOBJ; i++) {
		if (live[i])
			CHECK_MSG(vt_read_dev(v, id[i], 0, s, done, bytes[i], want[i]) == 0,
			          "seed %llu: o%d wrong at the end", (unsigned long long)seed, i);
		CHECK_OK(vmm_obj_destroy(v, id[i]));
	}
	close_vmm(v);
}

static void test_random(void)
{
	uint64_t ops = 0, strays = 0;
	for (uint64_t seed = 1; seed <= 100; seed++)
		run_seed(seed, &ops, &strays);
	printf("random: 100 seeds, %llu operations, %llu stray writes through host mappings\n",
	       (unsigned long long)ops, (unsigned long long)strays);
	CHECK(strays > 500);
}

static void test_unsupported(void)
{
	struct dev_ctx *m = vt_open_model(1, "h100-sxm");
	struct vmm_config c = vt_config(64ull << 20, 8ull << 20, 64ull << 20);
	c.host_fallback = 1;
	struct vmm *v;
	int rc = vmm_open(m, &c, &v);
	CHECK_MSG(rc == -ENOTSUP, "%d: %s", rc, sp_last_error());
	printf("model backend: %s\n", sp_last_error());
	dev_close(m);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	dir = vt_tmpdir();
	test_evict();
	test_disk();
	test_random();
	test_unsupported();
	vt_rmdir(dir);
	TEST_PASS();
}

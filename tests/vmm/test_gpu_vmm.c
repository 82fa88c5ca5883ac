/* tests/vmm/test_gpu_vmm.c — the vmm on the cuda backend, under real memory
 * pressure: 24 pool objects of 8 MiB and 4 stable objects of 4 MiB against a
 * 128 MiB device budget (48 MiB of it stable), random reads and writes for
 * several rounds. Writes fill an object with a byte derived from (object,
 * version) by a "kernel" (cudaMemsetAsync on the compute stream, after the
 * acquire's ready event); reads copy it to pinned staging on that stream and
 * check every byte. Checks: every read sees the last write; stable objects
 * keep their device address across evictions; evictions and write-backs
 * happened; the vmm's H2D/D2H byte counts equal the device layer's (less the
 * test's own staging copies). Exits 77 (skip) without a CUDA device;
 * `test_gpu_vmm host` runs it on the host backend. */
#include "device/device.h"
#include "tests/test.h"
#include "vmm/vmm.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if SPILL_HAVE_CUDA
#include <cuda_runtime_api.h>

#define NPOOL   24
#define NSTABLE 4
#define NOBJ    (NPOOL + NSTABLE)
#define POOL_B  (8u << 20)
#define STAB_B  (4u << 20)
#define ROUNDS  12

struct fill_args {
	void *p;
	size_t bytes;
	int value;
};

static void fill_cuda(const void *a, void *stream)
{
	const struct fill_args *f = a;
	cudaMemsetAsync(f->p, f->value, f->bytes, (cudaStream_t)stream);
}

static void fill_cpu(const void *a)
{
	const struct fill_args *f = a;
	memset(f->p, f->value, f->bytes);
}

static const struct dev_kernel fill_kernel = {"fill", fill_cpu, fill_cuda};

static int byte_of(int obj, int version)
{
	return (obj * 37 + version * 11 + 1) & 0xff;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static unsigned rnd(unsigned n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (unsigned)(rng % n);
}

int main(int argc, char **argv)
{
	/* `test_gpu_vmm host` runs the same on the host backend (to debug the test). */
	int host = argc > 1 && strcmp(argv[1], "host") == 0;
	if (!host && !dev_cuda_available())
		TEST_SKIP("no CUDA device");
	struct dev_config dc = {.backend = host ? DEV_BACKEND_HOST : DEV_BACKEND_CUDA,
	                        .ndevices = 1,
	                        .device_mem = 1ull << 30};
	struct dev_ctx *ctx;
	CHECK_OK(dev_open(&dc, &ctx));
	struct vmm_config vc;
	memset(&vc, 0, sizeof(vc));
	vc.device_mem = 128u << 20;
	vc.stable_mem = 48u << 20;
	vc.host_mem = 512u << 20;
	vc.policy = VMM_POLICY_AUTO;
	vc.max_objects = 256;
	vc.trace_cap = 1024;
	vc.align = 256;
	struct vmm *v;
	CHECK_OK(vmm_open(ctx, &vc, &v));

	struct dev_stream *s;
	struct dev_event *done;
	void *staging;
	CHECK_OK(dev_stream_create(ctx, 0, &s));
	CHECK_OK(dev_event_create(ctx, &done));
	CHECK_OK(dev_host_alloc(ctx, POOL_B, &staging));

	uint64_t id[NOBJ];
	int version[NOBJ];
	void *stable_addr[NOBJ] = {0};
	for (int i = 0; i < NOBJ; i++) {
		int stable = i >= NPOOL;
		struct vmm_obj_desc d = {.bytes = stable ? STAB_B : POOL_B,
		                         .kind = stable ? VMM_KIND_WEIGHT : VMM_KIND_STASH,
		                         .flags = stable ? VMM_OBJ_STABLE : 0,
		                         .home = 0};
		CHECK_OK(vmm_obj_create(v, &d, &id[i]));
		version[i] = 0;
	}
	uint64_t staged_d2h = 0;
	double t0 = dev_now(ctx);
	for (int r = 0; r < ROUNDS; r++) {
		for (int k = 0; k < NOBJ; k++) {
			int i = (int)rnd(NOBJ);
			size_t bytes = i >= NPOOL ? STAB_B : POOL_B;
			int write = version[i] == 0 || rnd(3) == 0;
			void *p;
			struct dev_event *ready;
			CHECK_OK(
			    vmm_acquire(v, id[i], 0, write ? VMM_OVERWRITE : VMM_READ, &p, &ready));
			if (i >= NPOOL) {
				if (!stable_addr[i])
					stable_addr[i] = p;
				CHECK_MSG(p == stable_addr[i], "stable object %d moved: %p -> %p",
				          i, stable_addr[i], p);
			}
			if (ready)
				CHECK_OK(dev_stream_wait_event(s, ready));
			if (write) {
				version[i]++;
				struct fill_args a = {p, bytes, byte_of(i, version[i])};
				CHECK_OK(dev_launch(s, &fill_kernel, &a, sizeof(a),
				                    (struct dev_cost){0, (double)bytes, 0}));
			} else {
				CHECK_OK(dev_memcpy_async(s, staging, DEV_HOST, p, 0, bytes));
				staged_d2h += bytes;
			}
			CHECK_OK(dev_event_record(done, s));
			CHECK_OK(vmm_release(v, id[i], 0, done));
			if (!write) {
				CHECK_OK(dev_stream_sync(s));
				const unsigned char *c = staging;
				int want = byte_of(i, version[i]);
				for (size_t b = 0; b < bytes; b += 4093)
					CHECK_MSG(c[b] == want, "object %d byte %zu: %d, want %d",
					          i, b, c[b], want);
				CHECK(c[bytes - 1] == want);
			}
			if (rnd(8) == 0 && i >= NPOOL)
				CHECK_OK(vmm_evict(v, id[i], 0));
		}
	}
	CHECK_OK(vmm_sync(v));
	CHECK_OK(dev_stream_sync(s));
	double secs = dev_now(ctx) - t0;

	struct vmm_stats st;
	vmm_stats_get(v, &st);
	uint64_t h2d = vmm_xfer_bytes(v, VMM_XFER_H2D), d2h = vmm_xfer_bytes(v, VMM_XFER_D2H);
	printf("%d rounds in %.3f s: %lld acquires, %lld hits, %lld evictions (%lld write-backs, "
	       "%lld drops); H2D %.1f MiB, D2H %.1f MiB\n",
	       ROUNDS, secs, (long long)st.acquires.total, (long long)st.hits.total,
	       (long long)st.evictions.total, (long long)st.writebacks.total,
	       (long long)st.drops.total, h2d / 1048576.0, d2h / 1048576.0);
	CHECK_MSG(st.evictions.total > 0 && st.writebacks.total > 0, "no memory pressure");
	CHECK_MSG(h2d == dev_copied_bytes(ctx, DEV_COPY_H2D), "vmm H2D %llu, device layer %llu",
	          (unsigned long long)h2d, (unsigned long long)dev_copied_bytes(ctx, DEV_COPY_H2D));
	CHECK_MSG(d2h + staged_d2h == dev_copied_bytes(ctx, DEV_COPY_D2H),
	          "vmm D2H %llu + staging %llu, device layer %llu", (unsigned long long)d2h,
	          (unsigned long long)staged_d2h,
	          (unsigned long long)dev_copied_bytes(ctx, DEV_COPY_D2H));
	uint64_t used, cap;
	CHECK_OK(vmm_place_usage(v, 0, &used, &cap));
	CHECK(used <= cap);

	for (int i = 0; i < NOBJ; i++)
		CHECK_OK(vmm_obj_destroy(v, id[i]));
	CHECK_OK(dev_host_free(ctx, staging));
	CHECK_OK(dev_event_destroy(done));
	CHECK_OK(dev_stream_destroy(s));
	vmm_close(v);
	dev_close(ctx);
	TEST_PASS();
}

#else
int main(void)
{
	TEST_SKIP("built without CUDA");
}
#endif

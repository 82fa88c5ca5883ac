/* tests/vmm/test_kept_space.c — a device copy kept while invalid is refilled
 * only after its holder's last use of the space.
 *
 * When a transfer into a device copy fails while a caller holds that copy
 * acquired, the copy keeps its space (the caller has its address) but holds
 * no valid data (vmm.h, vmm_device_failed: a P2P from the failed device into
 * a copy "while acquired, keeps its space"). The holder may have launched work
 * on that space and releases with a done event. A later acquire of the object
 * on the same device refills the kept space from a valid copy; that fill must
 * wait for the holder's work (its fence), else a slow kernel of the holder
 * writes over the refilled bytes and the next reader sees the holder's bytes
 * instead of the object's.
 *
 * Host backend, two devices with a peer link: the object is on the host and
 * device 0; device 0 fails (dev_fail) and a READ acquire on device 1 starts a
 * P2P from it, which the device layer drops. vmm_device_failed(0) retires it
 * while device 1's copy is still held. The holder's kernel on device 1 waits
 * for a flag, then writes another pattern into the space; the holder releases
 * with its done event. A second READ acquire on device 1 gets the same space,
 * refilled from the host: its ready event must stay pending while the holder's
 * kernel is held back, and the space must read back as the host's bytes once
 * the kernel and the refill are done. Then a host copy released with a done
 * event while device 0 is failed: its fence must not go on device 0's stream
 * (waiting for it failed, "fence wait failed"). */
#include "tests/vmm/vmm_test.h"

#include "common/log.h"

#include <stdatomic.h>
#include <string.h>
#include <time.h>

#define MiB     (1024ull * 1024)
#define OBJ     (1 * MiB)
#define SEED_H  7  /* the object's bytes (its host copy) */
#define SEED_K  99 /* what the holder's kernel writes */
#define HOLD_MS 300

static atomic_int go;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_ms(long ms)
{
	struct timespec ts = {0, ms * 1000 * 1000};
	nanosleep(&ts, NULL);
}

/* The holder's slow kernel: waits until the test lets it go (at most 10 s, so
 * a wrong ordering cannot hang the test), then writes its pattern. */
static void held_fill_cpu(const void *a)
{
	double t0 = now_s();
	while (!atomic_load(&go) && now_s() - t0 < 10)
		sleep_ms(1);
	vt_fill_cpu(a);
}
static const struct dev_kernel held_fill = {"held_fill", held_fill_cpu, NULL};

int main(void)
{
	struct dev_ctx *ctx = vt_open_host(2, 64 * MiB);
	if (!dev_p2p_possible(ctx, 0, 1)) {
		dev_close(ctx);
		TEST_SKIP("the default profile has no peer link between devices 0 and 1");
	}
	struct vmm_config cfg = vt_config(16 * MiB, 0, 16 * MiB);
	struct vmm *v;
	CHECK_OK(vmm_open(ctx, &cfg, &v));
	struct dev_stream *s0, *s1;
	struct dev_event *done0, *done1, *done2;
	CHECK_OK(dev_stream_create(ctx, 0, &s0));
	CHECK_OK(dev_stream_create(ctx, 1, &s1));
	CHECK_OK(dev_event_create(ctx, &done0));
	CHECK_OK(dev_event_create(ctx, &done1));
	CHECK_OK(dev_event_create(ctx, &done2));

	/* the object: valid on the host and on device 0 */
	uint64_t a = vt_create(v, OBJ, VMM_KIND_WEIGHT, "kept");
	vt_write_host(v, a, OBJ, SEED_H);
	CHECK(vt_read_dev(v, a, 0, s0, done0, OBJ, SEED_H) == 0);
	CHECK_OK(vmm_sync(v));
	struct vmm_obj_info in;
	CHECK_OK(vmm_obj_info(v, a, &in));
	CHECK_MSG(in.valid_mask == (VMM_INFO_HOST | 1u), "valid %#x", in.valid_mask);

	/* device 0 fails; a READ on device 1 comes by P2P from it and fails */
	CHECK_OK(dev_fail(ctx, 0));
	void *p;
	struct dev_event *ready;
	CHECK_OK(vmm_acquire(v, a, 1, VMM_READ, &p, &ready));
	CHECK_MSG(ready != NULL, "the copy on device 1 was not brought");
	CHECK_MSG(dev_event_sync(ready) == -EIO, "the P2P from the failed device 0 did not fail");
	/* the holder launched work on its space: held back until `go` */
	struct vt_fill_args fa = {p, OBJ / 8, SEED_K};
	CHECK_OK(dev_launch(s1, &held_fill, &fa, sizeof(fa), (struct dev_cost){0, (double)OBJ, 0}));
	CHECK_OK(dev_event_record(done1, s1));
	uint32_t nlost = 9;
	CHECK_OK(vmm_device_failed(v, 0, &nlost));
	CHECK_MSG(nlost == 0, "nlost %u: the host copy is valid", nlost);
	CHECK_OK(vmm_obj_info(v, a, &in));
	CHECK_MSG(in.valid_mask == VMM_INFO_HOST && in.pinned_mask == 2u,
	          "after the failed P2P: valid %#x pinned %#x, want the host valid and device 1 "
	          "held (the space kept, not valid)",
	          in.valid_mask, in.pinned_mask);
	CHECK_OK(vmm_release(v, a, 1, done1));

	/* the next READ on device 1 refills the kept space from the host */
	void *q;
	struct dev_event *ready2;
	CHECK_OK(vmm_acquire(v, a, 1, VMM_READ, &q, &ready2));
	CHECK_MSG(q == p, "the space was not kept (%p, then %p): not the path under test", p, q);
	CHECK_MSG(ready2 != NULL, "the refill from the host was not started");
	int early = 0;
	double t0 = now_s();
	while (now_s() - t0 < HOLD_MS / 1000.0) {
		int rc = dev_event_query(ready2);
		if (rc != -EAGAIN) {
			CHECK_OK(rc);
			early = 1;
			break;
		}
		sleep_ms(1);
	}
	atomic_store(&go, 1);
	CHECK_OK(dev_event_sync(done1));
	CHECK_OK(dev_event_sync(ready2));
	int *bad = malloc(sizeof(*bad));
	CHECK(bad);
	*bad = -1;
	CHECK_OK(dev_stream_wait_event(s1, ready2));
	CHECK_OK(vt_check_async(s1, q, OBJ, SEED_H, bad));
	CHECK_OK(dev_event_record(done2, s1));
	CHECK_OK(vmm_release(v, a, 1, done2));
	CHECK_OK(dev_event_sync(done2));
	int nbad = *bad;
	free(bad);
	printf("refill of the kept space: %s the holder's kernel; %d of %llu words differ from "
	       "the host copy\n",
	       early ? "landed before" : "waited for", nbad, (unsigned long long)(OBJ / 8));
	CHECK_MSG(!early && nbad == 0,
	          "the refill of device 1's kept space did not wait for the holder's done event "
	          "(ready %s while its kernel was held back; %d words are not the object's)",
	          early ? "completed" : "stayed pending", nbad);

	CHECK(vt_read_host(v, a, OBJ, SEED_H) == 0);
	CHECK_OK(vmm_sync(v));

	/* a host copy released with a done event while device 0 is failed: its
	 * fence goes on a live device's stream, so waiting for it (the destroy
	 * frees the host copy) succeeds: no "fence wait failed" */
	FILE *log = tmpfile();
	CHECK(log);
	sp_log_configure(SP_LOG_WARN, SP_SUBSYS_ALL, fileno(log));
	void *hp;
	struct dev_event *hr;
	CHECK_OK(vmm_acquire(v, a, VMM_HOST, VMM_READ, &hp, &hr));
	if (hr)
		CHECK_OK(dev_event_sync(hr));
	CHECK_OK(dev_event_record(done2, s1));
	CHECK_OK(vmm_release(v, a, VMM_HOST, done2));
	CHECK_OK(vmm_obj_destroy(v, a));
	sp_log_configure(SP_LOG_WARN, SP_SUBSYS_ALL, 2);
	char text[4096] = {0};
	rewind(log);
	size_t got = fread(text, 1, sizeof(text) - 1, log);
	fclose(log);
	CHECK_MSG(!strstr(text, "fence wait failed"),
	          "a host copy's fence was recorded on the failed device's stream: %.*s", (int)got,
	          text);
	vmm_close(v);
	CHECK_OK(dev_event_destroy(done0));
	CHECK_OK(dev_event_destroy(done1));
	CHECK_OK(dev_event_destroy(done2));
	CHECK_OK(dev_stream_destroy(s0));
	CHECK_OK(dev_stream_destroy(s1));
	dev_close(ctx);
	printf("ok\n");
	return 0;
}

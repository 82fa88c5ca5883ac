/* tests/vmm/test_reuse_race.c — device space of an object destroyed (or
 * discarded) right after its release with a slow pending done event is not
 * handed to a new object until the reader is done, even when an unrelated
 * write-back runs in between (issue: a stream wait released by a later record
 * of its event let the vmm reuse the space under a running kernel).
 *
 * Host backend, one emulated device whose pool holds two objects. Each round:
 * A is read by a kernel that first sleeps (so its done event is pending for
 * 100 ms) and then counts the words that differ from A's pattern; A is released
 * with that done event and destroyed (or discarded) at once; B, dirty on the
 * device and never moved yet, is written back (a D2H recorded on the idle
 * "out" stream with a fresh event from the vmm's free list: A's fence, on top
 * of it, unless the vmm holds pending events back); C takes A's space (OVERWRITE) and a kernel on another
 * stream fills it with another pattern as soon as C's ready event allows. The
 * reader must see A's pattern intact. */
#include "tests/vmm/vmm_test.h"

#include <time.h>

#define KiB 1024ull
#define OBJ (64 * KiB)

static void sleep_cpu(const void *a)
{
	struct timespec ts = {0, *(const long *)a};
	nanosleep(&ts, NULL);
}
static const struct dev_kernel sleep_kernel = {"sleep", sleep_cpu, NULL};

static int round_trip(int discard, int use_writeback)
{
	struct dev_ctx *ctx = vt_open_host(1, 4 << 20);
	struct vmm_config c = vt_config(2 * OBJ, 0, 8 * OBJ);
	struct vmm *v;
	CHECK_OK(vmm_open(ctx, &c, &v));
	struct dev_stream *rd, *wr;
	struct dev_event *rd_done, *wr_done;
	CHECK_OK(dev_stream_create(ctx, 0, &rd));
	CHECK_OK(dev_stream_create(ctx, 0, &wr));
	CHECK_OK(dev_event_create(ctx, &rd_done));
	CHECK_OK(dev_event_create(ctx, &wr_done));
	int *bad = malloc(sizeof(*bad));
	CHECK(bad);

	uint64_t a = vt_create(v, OBJ, VMM_KIND_STASH, "A");
	uint64_t b = vt_create(v, OBJ, VMM_KIND_GRAD, "B");
	vt_write_dev(v, a, 0, VMM_OVERWRITE, wr, wr_done, OBJ, 101);
	vt_write_dev(v, b, 0, VMM_OVERWRITE, wr, wr_done, OBJ, 202);
	CHECK_OK(dev_stream_sync(wr));

	/* the slow reader of A */
	void *pa;
	struct dev_event *ready;
	CHECK_OK(vmm_acquire(v, a, 0, VMM_READ, &pa, &ready));
	vt_wait_ready(rd, ready);
	long ns = 100 * 1000 * 1000;
	CHECK_OK(dev_launch(rd, &sleep_kernel, &ns, sizeof(ns), (struct dev_cost){0, 0, 0}));
	*bad = -1;
	CHECK_OK(vt_check_async(rd, pa, OBJ, 101, bad));
	CHECK_OK(dev_event_record(rd_done, rd));
	CHECK_OK(vmm_release(v, a, 0, rd_done));
	if (discard)
		CHECK_OK(vmm_discard(v, a));
	else
		CHECK_OK(vmm_obj_destroy(v, a));
	/* an unrelated write-back: a D2H on the idle "out" stream */
	if (use_writeback) {
		CHECK_OK(vmm_writeback(v, b, 0));
		CHECK_OK(vmm_obj_wait(v, b));
	}
	/* C takes A's space and is filled at once (as early as ready allows) */
	uint64_t cc = vt_create(v, OBJ, VMM_KIND_STASH, "C");
	void *pc;
	CHECK_OK(vmm_acquire(v, cc, 0, VMM_OVERWRITE, &pc, &ready));
	int reused = pc == pa;
	vt_wait_ready(wr, ready);
	CHECK_OK(vt_fill_async(wr, pc, OBJ, 303));
	CHECK_OK(dev_event_record(wr_done, wr));
	CHECK_OK(vmm_release(v, cc, 0, wr_done));
	CHECK_OK(dev_stream_sync(rd));
	CHECK_OK(dev_stream_sync(wr));
	int seen = *bad;
	printf("%s%s: C %s A's space; the reader of A saw %d of %llu words changed\n",
	       discard ? "discard" : "destroy", use_writeback ? " + write-back" : "",
	       reused ? "took" : "did not take", seen, (unsigned long long)(OBJ / 8));
	CHECK_MSG(reused, "C did not reuse A's space: the test shows nothing");
	CHECK(vt_read_dev(v, cc, 0, rd, rd_done, OBJ, 303) == 0);
	CHECK(vt_read_dev(v, b, 0, rd, rd_done, OBJ, 202) == 0);

	CHECK_OK(vmm_sync(v));
	vt_check_accounting(v, ctx, 1);
	free(bad);
	vmm_close(v);
	CHECK_OK(dev_event_destroy(wr_done));
	CHECK_OK(dev_event_destroy(rd_done));
	dev_close(ctx);
	return seen;
}

int main(void)
{
	for (int discard = 0; discard < 2; discard++)
		for (int wb = 0; wb < 2; wb++)
			CHECK_MSG(round_trip(discard, wb) == 0,
			          "a new object's writer changed bytes a kernel was still reading");
	TEST_PASS();
}

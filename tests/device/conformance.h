/* tests/device/conformance.h — the device conformance suite, run against every
 * backend (test_conformance: host and model; test_gpu_device: cuda).
 *
 * It checks what everything above the device layer relies on: allocation
 * within and beyond capacity (-ENOMEM naming the numbers), bad frees, map and
 * unmap of chunks into reserved ranges (bytes survive a remap elsewhere), copies
 * of every kind and memset with their contents, stream order, events across
 * streams (a wait really waits; query, sync and times agree; a re-record
 * does not release a wait queued before it), peer copies,
 * host callbacks, the copied-bytes counters, bad arguments, growing pinned
 * host regions (commits, overlapping commits, copies and CPU writes across
 * the boundary of two commits, bad calls); and closing a context with live
 * mappings and a region with commits (conformance_close: every mapping is
 * unmapped whole, with no warning).
 * The model backend has no data: contents are not checked there, times are.
 * Header-only; a test includes it once.
 */
#ifndef SP_TESTS_DEVICE_CONFORMANCE_H
#define SP_TESTS_DEVICE_CONFORMANCE_H

#include "device/device.h"
#include "tests/test.h"

#include "common/log.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if SPILL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

/* A "kernel" that fills bytes with a value: memset on the CPU, cudaMemsetAsync
 * on the stream it is given for CUDA. Enough to test launch order. */
struct cf_fill {
	void *p;
	size_t bytes;
	int value;
};

static void cf_fill_cpu(const void *a)
{
	const struct cf_fill *f = a;
	memset(f->p, f->value, f->bytes);
}

#if SPILL_HAVE_CUDA
static void cf_fill_cuda(const void *a, void *stream)
{
	const struct cf_fill *f = a;
	cudaMemsetAsync(f->p, f->value, f->bytes, (cudaStream_t)stream);
}
#else
#define cf_fill_cuda NULL
#endif

static const struct dev_kernel cf_fill_kernel = {"cf_fill", cf_fill_cpu, cf_fill_cuda};

static int cf_launch_fill(struct dev_stream *s, void *p, size_t bytes, int value)
{
	struct cf_fill f = {p, bytes, value};
	struct dev_cost c = {0, (double)bytes, 0};
	return dev_launch(s, &cf_fill_kernel, &f, sizeof(f), c);
}

/* A host callback that sleeps, then stores a word into host memory. */
struct cf_slow_store {
	volatile uint32_t *dst;
	uint32_t value;
	int ms;
};

static void cf_slow_store_fn(void *arg)
{
	struct cf_slow_store *a = arg;
	struct timespec ts = {0, (long)a->ms * 1000000L};
	nanosleep(&ts, NULL);
	*a->dst = a->value;
}

static int cf_all_bytes(const void *p, size_t n, int v)
{
	const unsigned char *c = p;
	for (size_t i = 0; i < n; i++)
		if (c[i] != (unsigned char)v)
			return 0;
	return 1;
}

static void cf_pattern(void *p, size_t n, uint32_t seed)
{
	uint32_t *w = p;
	for (size_t i = 0; i < n / 4; i++)
		w[i] = seed * 2654435761u + (uint32_t)i;
}

static int cf_pattern_ok(const void *p, size_t n, uint32_t seed)
{
	const uint32_t *w = p;
	for (size_t i = 0; i < n / 4; i++)
		if (w[i] != seed * 2654435761u + (uint32_t)i)
			return 0;
	return 1;
}

static void cf_memory(struct dev_ctx *ctx)
{
	struct dev_info in;
	CHECK_OK(dev_info(ctx, 0, &in));
	CHECK(in.capacity > 0 && in.granularity > 0 && in.used == 0);
	void *a = NULL, *b = NULL;
	size_t half = in.capacity / 2;
	CHECK_OK(dev_mem_alloc(ctx, 0, half, &a));
	CHECK_OK(dev_info(ctx, 0, &in));
	CHECK(in.used == half);
	/* Beyond capacity: -ENOMEM, the numbers in the message, output untouched. */
	b = (void *)0x1;
	CHECK(dev_mem_alloc(ctx, 0, in.capacity - half + 1, &b) == -ENOMEM);
	CHECK_MSG(strstr(sp_last_error(), "in use") && strstr(sp_last_error(), "device 0"), "%s",
	          sp_last_error());
	CHECK(b == (void *)0x1);
	CHECK_OK(dev_mem_alloc(ctx, 0, in.capacity - half, &b)); /* exactly full */
	CHECK_OK(dev_mem_free(ctx, 0, b));
	/* Bad frees. */
	CHECK(dev_mem_free(ctx, 0, (char *)a + 8) == -EINVAL);
	if (dev_count(ctx) > 1)
		CHECK(dev_mem_free(ctx, 1, a) == -EINVAL); /* wrong device */
	CHECK_OK(dev_mem_free(ctx, 0, a));
	CHECK(dev_mem_free(ctx, 0, a) == -EINVAL); /* double free */
	CHECK_OK(dev_mem_free(ctx, 0, NULL));
	CHECK_OK(dev_info(ctx, 0, &in));
	CHECK(in.used == 0);
	/* Bad arguments. */
	CHECK(dev_mem_alloc(ctx, 0, 0, &a) == -EINVAL);
	CHECK(dev_mem_alloc(ctx, dev_count(ctx), 64, &a) == -EINVAL);
	CHECK(strstr(sp_last_error(), "does not exist"));
	CHECK(dev_mem_alloc(ctx, -1, 64, &a) == -EINVAL);
	CHECK(dev_info(ctx, 99, &in) == -EINVAL);
	void *h;
	CHECK_OK(dev_host_alloc(ctx, 4096, &h));
	CHECK(dev_mem_free(ctx, 0, h) == -EINVAL); /* pinned host, not device */
	CHECK_OK(dev_host_free(ctx, h));
	CHECK(dev_host_free(ctx, h) == -EINVAL);
}

static void cf_map(struct dev_ctx *ctx, struct dev_stream *s, int data)
{
	struct dev_info in;
	CHECK_OK(dev_info(ctx, 0, &in));
	size_t g = in.granularity;
	void *va, *pin;
	struct dev_phys *ph, *ph2;
	CHECK_OK(dev_va_reserve(ctx, 0, 4 * g, &va));
	CHECK(dev_va_reserve(ctx, 0, g + 1, &pin) == -EINVAL); /* not a multiple */
	CHECK_OK(dev_phys_create(ctx, 0, 2 * g, &ph));
	CHECK_OK(dev_info(ctx, 0, &in));
	CHECK(in.used == 2 * g); /* chunks count, reservations do not */
	CHECK(dev_phys_create(ctx, 0, g / 2, &ph2) == -EINVAL);
	CHECK_OK(dev_host_alloc(ctx, 2 * g, &pin));

	/* Map at the start, write through the mapping, unmap, map at the end: the
	 * chunk's bytes survive. */
	CHECK_OK(dev_va_map(ctx, va, 2 * g, ph, 0));
	CHECK(dev_va_map(ctx, (char *)va + g, 2 * g, ph, 0) == -EBUSY); /* overlaps */
	CHECK(dev_phys_destroy(ctx, ph) == -EBUSY);
	CHECK(dev_va_release(ctx, va, 4 * g) == -EBUSY);
	if (data)
		cf_pattern(pin, 2 * g, 7);
	CHECK_OK(dev_memcpy_async(s, va, 0, pin, DEV_HOST, 2 * g));
	CHECK_OK(dev_stream_sync(s));
	CHECK_OK(dev_va_unmap(ctx, va, 2 * g));
	CHECK(dev_va_unmap(ctx, va, g) == -EINVAL); /* not mapped */
	CHECK_OK(dev_va_map(ctx, (char *)va + 2 * g, 2 * g, ph, 0));
	if (data)
		memset(pin, 0, 2 * g);
	CHECK_OK(dev_memcpy_async(s, pin, DEV_HOST, (char *)va + 2 * g, 0, 2 * g));
	CHECK_OK(dev_stream_sync(s));
	if (data)
		CHECK_MSG(cf_pattern_ok(pin, 2 * g, 7), "a chunk's bytes did not survive a remap");

	/* Outside any reservation, beyond the chunk, misaligned. */
	CHECK(dev_va_map(ctx, (char *)va + 8 * g, g, ph, 0) == -EINVAL);
	CHECK(dev_va_map(ctx, va, g, ph, 2 * g) == -EINVAL);
	CHECK(dev_va_map(ctx, (char *)va + 1, g, ph, 0) == -EINVAL);
	CHECK(dev_va_release(ctx, (char *)va + g, 3 * g) == -EINVAL);

	/* A chunk counts against capacity: one larger than what is left fails. */
	size_t left = (size_t)(in.capacity - in.used);
	size_t too_big = (left / g + 1) * g;
	CHECK(dev_phys_create(ctx, 0, too_big, &ph2) == -ENOMEM);

	/* Unmaps take whole mappings, as cuMemUnmap: not part of one; two
	 * adjacent ones at once are fine. */
	CHECK(dev_va_unmap(ctx, (char *)va + 2 * g, g) == -EINVAL);
	CHECK(dev_va_unmap(ctx, (char *)va + 3 * g, g) == -EINVAL);
	CHECK_OK(dev_va_unmap(ctx, (char *)va + 2 * g, 2 * g));
	CHECK_OK(dev_phys_create(ctx, 0, g, &ph2));
	CHECK_OK(dev_va_map(ctx, va, 2 * g, ph, 0));
	CHECK_OK(dev_va_map(ctx, (char *)va + 2 * g, g, ph2, 0));
	CHECK(dev_va_unmap(ctx, (char *)va + g, 2 * g) == -EINVAL); /* half of the first */
	CHECK_OK(dev_va_unmap(ctx, va, 3 * g));
	CHECK_OK(dev_phys_destroy(ctx, ph2));
	CHECK_OK(dev_phys_destroy(ctx, ph));
	CHECK_OK(dev_va_release(ctx, va, 4 * g));
	CHECK_OK(dev_host_free(ctx, pin));
	CHECK_OK(dev_info(ctx, 0, &in));
	CHECK(in.used == 0);
}

static void cf_copies(struct dev_ctx *ctx, struct dev_stream *s, int data)
{
	const size_t n = 1 << 20;
	int nd = dev_count(ctx);
	void *h1, *h2, *d0a, *d0b, *d1 = NULL;
	CHECK_OK(dev_host_alloc(ctx, n, &h1));
	CHECK_OK(dev_host_alloc(ctx, n, &h2));
	CHECK_OK(dev_mem_alloc(ctx, 0, n, &d0a));
	CHECK_OK(dev_mem_alloc(ctx, 0, n, &d0b));
	if (nd > 1)
		CHECK_OK(dev_mem_alloc(ctx, 1, n, &d1));
	uint64_t before[DEV_COPY_KINDS];
	for (int k = 0; k < DEV_COPY_KINDS; k++)
		before[k] = dev_copied_bytes(ctx, (enum dev_copy_kind)k);
	if (data) {
		cf_pattern(h1, n, 11);
		memset(h2, 0, n);
	}
	/* H2D, D2D, (P2P there and back), D2H, all on one stream: order matters. */
	CHECK_OK(dev_memcpy_async(s, d0a, 0, h1, DEV_HOST, n));
	CHECK_OK(dev_memcpy_async(s, d0b, 0, d0a, 0, n));
	void *last = d0b;
	int last_dev = 0;
	if (nd > 1) {
		CHECK_OK(dev_memset_async(s, d0a, 0, 0, n));
		CHECK_OK(dev_memcpy_async(s, d1, 1, d0b, 0, n));
		CHECK_OK(dev_memcpy_async(s, d0a, 0, d1, 1, n));
		last = d0a;
	}
	CHECK_OK(dev_memcpy_async(s, h2, DEV_HOST, last, last_dev, n));
	CHECK_OK(dev_stream_sync(s));
	if (data)
		CHECK_MSG(cf_pattern_ok(h2, n, 11), "content lost along H2D, D2D, P2P, D2H");
	CHECK(dev_copied_bytes(ctx, DEV_COPY_H2D) - before[DEV_COPY_H2D] == n);
	CHECK(dev_copied_bytes(ctx, DEV_COPY_D2D) - before[DEV_COPY_D2D] == n);
	CHECK(dev_copied_bytes(ctx, DEV_COPY_D2H) - before[DEV_COPY_D2H] == n);
	CHECK(dev_copied_bytes(ctx, DEV_COPY_P2P) - before[DEV_COPY_P2P] == (nd > 1 ? 2 * n : 0));

	/* memset on the device and on pinned host memory, a kernel, in order. */
	CHECK_OK(dev_memset_async(s, d0a, 0, 0x5a, n));
	CHECK_OK(cf_launch_fill(s, d0a, n / 2, 0x33));
	CHECK_OK(dev_memset_async(s, h2, DEV_HOST, 0x11, n));
	CHECK_OK(dev_memcpy_async(s, h2, DEV_HOST, d0a, 0, n));
	CHECK_OK(dev_stream_sync(s));
	if (data) {
		CHECK(cf_all_bytes(h2, n / 2, 0x33));
		CHECK(cf_all_bytes((char *)h2 + n / 2, n / 2, 0x5a));
	}

	/* Bad copies. */
	CHECK(dev_memcpy_async(s, h2, DEV_HOST, h1, DEV_HOST, n) == -EINVAL);
	CHECK(dev_memcpy_async(s, d0a, nd, h1, DEV_HOST, n) == -EINVAL);
	CHECK(dev_memcpy_async(s, NULL, 0, h1, DEV_HOST, n) == -EINVAL);
	CHECK(dev_memcpy_async(NULL, d0a, 0, h1, DEV_HOST, n) == -EINVAL);
	CHECK_OK(dev_memcpy_async(s, d0a, 0, h1, DEV_HOST, 0)); /* nothing to do */
	CHECK(dev_launch(s, &cf_fill_kernel, NULL, 16, (struct dev_cost){0, 0, 0}) == -EINVAL);

	if (nd > 1)
		CHECK_OK(dev_mem_free(ctx, 1, d1));
	CHECK_OK(dev_mem_free(ctx, 0, d0b));
	CHECK_OK(dev_mem_free(ctx, 0, d0a));
	CHECK_OK(dev_host_free(ctx, h2));
	CHECK_OK(dev_host_free(ctx, h1));
}

/* A growing pinned host region: nothing pinned at the reserve (unless the
 * backend can only pin it whole), commits of whole units, an overlapping
 * commit that adds only the gap, and a copy in and out of the device across
 * the boundary between two commits. */
static void cf_host_grow(struct dev_ctx *ctx, struct dev_stream *s, int data)
{
	size_t cg = dev_host_commit_granularity(ctx);
	CHECK(cg >= 4096 && !(cg & (cg - 1)));
	void *r, *d, *h;
	CHECK(dev_host_reserve(ctx, 0, &r) == -EINVAL);
	CHECK_OK(dev_host_reserve(ctx, 8 * cg + 1, &r)); /* rounded up: 9 units */
	uint64_t c0 = dev_host_committed(ctx, r);
	int whole = c0 == 9 * cg;
	CHECK_MSG(c0 == 0 || whole, "%" PRIu64 " bytes pinned at the reserve", c0);
	CHECK_OK(dev_host_commit(ctx, r, cg, 2 * cg));
	CHECK(dev_host_committed(ctx, r) == (whole ? 9 * cg : 2 * cg));
	CHECK_OK(dev_host_commit(ctx, r, 2 * cg, 3 * cg)); /* [cg, 3cg) is there already */
	CHECK(dev_host_committed(ctx, r) == (whole ? 9 * cg : 4 * cg));
	CHECK_OK(dev_host_commit(ctx, r, cg, 4 * cg)); /* all there: nothing to do */
	CHECK(dev_host_committed(ctx, r) == (whole ? 9 * cg : 4 * cg));
	/* bad calls */
	CHECK(dev_host_commit(ctx, r, cg / 2, cg) == -EINVAL);
	CHECK(dev_host_commit(ctx, r, cg, cg + 1) == -EINVAL);
	CHECK(dev_host_commit(ctx, r, 8 * cg, 2 * cg) == -EINVAL); /* beyond */
	CHECK(dev_host_commit(ctx, (char *)r + cg, 0, cg) == -EINVAL);
	CHECK_OK(dev_host_alloc(ctx, cg, &h));
	CHECK(dev_host_commit(ctx, h, 0, cg) == -EINVAL); /* not a region */
	CHECK(dev_host_committed(ctx, h) == 0);
	/* [2.5 cg, 3.5 cg) spans the two commits: to the device and back */
	char *across = (char *)r + 2 * cg + cg / 2, *back = (char *)r + cg;
	CHECK_OK(dev_mem_alloc(ctx, 0, cg, &d));
	if (data) {
		cf_pattern(across, cg, 23);
		memset(back, 0, cg);
	}
	CHECK_OK(dev_memcpy_async(s, d, 0, across, DEV_HOST, cg));
	CHECK_OK(dev_memcpy_async(s, back, DEV_HOST, d, 0, cg));
	CHECK_OK(dev_stream_sync(s));
	if (data)
		CHECK_MSG(cf_pattern_ok(back, cg, 23), "a copy across two commits lost bytes");
	CHECK_OK(dev_mem_free(ctx, 0, d));
	CHECK_OK(dev_host_free(ctx, h));
	CHECK_OK(dev_host_free(ctx, r));
	CHECK(dev_host_free(ctx, r) == -EINVAL);
	CHECK(dev_host_committed(ctx, r) == 0);
}

/* Stream A: a slow host callback stores a flag, then records E. Stream B waits
 * for E, then copies the flag to the device and back. B must see the flag. */
static void cf_events(struct dev_ctx *ctx, int data, int real_time)
{
	int nd = dev_count(ctx);
	struct dev_stream *a, *b;
	struct dev_event *e, *e2, *never;
	CHECK_OK(dev_stream_create(ctx, 0, &a));
	CHECK_OK(dev_stream_create(ctx, nd - 1, &b));
	CHECK_OK(dev_event_create(ctx, &e));
	CHECK_OK(dev_event_create(ctx, &e2));
	CHECK_OK(dev_event_create(ctx, &never));
	CHECK(dev_event_query(never) == 0); /* never recorded: complete */
	void *hflag, *hout, *dflag;
	CHECK_OK(dev_host_alloc(ctx, 4096, &hflag));
	CHECK_OK(dev_host_alloc(ctx, 4096, &hout));
	CHECK_OK(dev_mem_alloc(ctx, nd - 1, 4096, &dflag));
	if (data) {
		memset(hflag, 0, 4096);
		memset(hout, 0, 4096);
	}
	struct cf_slow_store st = {data ? (volatile uint32_t *)hflag : NULL, 0xC0FFEE, 100};
	uint32_t sink; /* the model's host memory has no bytes to store into */
	if (!data)
		st.dst = &sink;
	/* The model backend charges a 1 MiB H2D before the record, so E has a time. */
	void *dbig;
	CHECK_OK(dev_mem_alloc(ctx, 0, 1 << 20, &dbig));
	void *hbig;
	CHECK_OK(dev_host_alloc(ctx, 1 << 20, &hbig));
	CHECK_OK(dev_host_callback(a, cf_slow_store_fn, &st));
	CHECK_OK(dev_memcpy_async(a, dbig, 0, hbig, DEV_HOST, 1 << 20));
	CHECK_OK(dev_event_record(e, a));
	CHECK_OK(dev_stream_wait_event(b, e));
	CHECK_OK(dev_memcpy_async(b, dflag, nd - 1, hflag, DEV_HOST, 4096));
	CHECK_OK(dev_memcpy_async(b, hout, DEV_HOST, dflag, nd - 1, 4096));
	CHECK_OK(dev_event_record(e2, b));
	if (real_time) /* the callback sleeps 100 ms: E cannot be complete yet */
		CHECK(dev_event_query(e) == -EAGAIN);
	double t_e, t_e2;
	if (real_time)
		CHECK(dev_event_time(e, &t_e) == -EAGAIN);
	CHECK_OK(dev_event_sync(e2));
	CHECK(dev_event_query(e) == 0);
	CHECK(dev_event_query(e2) == 0);
	CHECK_OK(dev_event_time(e, &t_e));
	CHECK_OK(dev_event_time(e2, &t_e2));
	CHECK_MSG(t_e <= t_e2, "event times out of order: %.9f > %.9f", t_e, t_e2);
	CHECK_MSG(t_e2 <= dev_now(ctx) + 1e-6, "event time %.9f after now %.9f", t_e2,
	          dev_now(ctx));
	if (data)
		CHECK_MSG(*(volatile uint32_t *)hout == 0xC0FFEE,
		          "stream B did not wait for the event (read %#x)", *(uint32_t *)hout);
	/* A re-record replaces the capture; sync on it waits for the new work. */
	CHECK_OK(dev_memcpy_async(a, dbig, 0, hbig, DEV_HOST, 1 << 20));
	CHECK_OK(dev_event_record(e, a));
	CHECK_OK(dev_event_sync(e));
	double t_e3;
	CHECK_OK(dev_event_time(e, &t_e3));
	CHECK(t_e3 >= t_e);
	/* Polling a pending event makes progress (the model's clock moves on). */
	CHECK_OK(dev_memcpy_async(a, dbig, 0, hbig, DEV_HOST, 1 << 20));
	CHECK_OK(dev_event_record(e, a));
	int polls = 0;
	while (dev_event_query(e) == -EAGAIN && polls < 1000000)
		polls++;
	CHECK(dev_event_query(e) == 0);
	/* An event may be destroyed while a wait on it is still queued behind
	 * other work (CUDA allows it): the wait orders its stream all the same and
	 * nothing reads freed memory (ASAN watches the emulations). */
	struct dev_event *gone;
	CHECK_OK(dev_event_create(ctx, &gone));
	struct cf_slow_store st2 = {st.dst, 0xBEEF, 30};
	CHECK_OK(dev_host_callback(b, cf_slow_store_fn, &st2));
	CHECK_OK(dev_memcpy_async(a, dbig, 0, hbig, DEV_HOST, 1 << 20));
	CHECK_OK(dev_event_record(gone, a));
	CHECK_OK(dev_stream_wait_event(b, gone));
	CHECK_OK(dev_event_destroy(gone));
	CHECK_OK(dev_memcpy_async(b, dflag, nd - 1, hflag, DEV_HOST, 4096));
	CHECK_OK(dev_stream_sync(b));

	CHECK_OK(dev_mem_free(ctx, 0, dbig));
	CHECK_OK(dev_host_free(ctx, hbig));
	CHECK_OK(dev_mem_free(ctx, nd - 1, dflag));
	CHECK_OK(dev_host_free(ctx, hout));
	CHECK_OK(dev_host_free(ctx, hflag));
	CHECK_OK(dev_event_destroy(never));
	CHECK_OK(dev_event_destroy(e2));
	CHECK_OK(dev_event_destroy(e));
	CHECK_OK(dev_stream_destroy(b));
	CHECK_OK(dev_stream_destroy(a));
}

/* A wait holds the work its event captured when the wait was queued: stream A
 * runs slow work (a 300 ms callback storing a flag, then a kernel costing 0.3 s
 * on the model backend) and records E; stream C waits for E; E is then
 * re-recorded on idle stream B. C's later work must still come after A's: it
 * sees the flag, and on the model backend it completes exactly when A's kernel
 * does, not at once. */
static void cf_rerecord(struct dev_ctx *ctx, int data, int real_time)
{
	int nd = dev_count(ctx);
	struct dev_stream *a, *b, *c;
	struct dev_event *e, *e_a, *e_c, *e_w;
	CHECK_OK(dev_stream_create(ctx, 0, &a));
	CHECK_OK(dev_stream_create(ctx, 0, &b));
	CHECK_OK(dev_stream_create(ctx, nd - 1, &c));
	CHECK_OK(dev_event_create(ctx, &e));
	CHECK_OK(dev_event_create(ctx, &e_a));
	CHECK_OK(dev_event_create(ctx, &e_c));
	CHECK_OK(dev_event_create(ctx, &e_w));
	void *hflag, *hout, *dflag;
	CHECK_OK(dev_host_alloc(ctx, 4096, &hflag));
	CHECK_OK(dev_host_alloc(ctx, 4096, &hout));
	CHECK_OK(dev_mem_alloc(ctx, nd - 1, 4096, &dflag));
	uint32_t sink;
	if (data) {
		memset(hflag, 0, 4096);
		memset(hout, 0, 4096);
	}
	struct cf_slow_store st = {data ? (volatile uint32_t *)hflag : &sink, 0xFEED, 300};
	struct dev_info in;
	CHECK_OK(dev_info(ctx, 0, &in));
	struct cf_fill f = {dflag, 0, 0}; /* no bytes: the cost is what counts */
	struct dev_cost slow = {0.3 * in.flops, 0, 0};
	void *dk;
	CHECK_OK(dev_mem_alloc(ctx, 0, 4096, &dk));
	f.p = dk;
	double t0 = dev_now(ctx);
	CHECK_OK(dev_host_callback(a, cf_slow_store_fn, &st));
	CHECK_OK(dev_launch(a, &cf_fill_kernel, &f, sizeof(f), slow));
	CHECK_OK(dev_event_record(e_a, a)); /* completes no later than E's capture */
	CHECK_OK(dev_event_record(e, a));
	CHECK_OK(dev_stream_wait_event(c, e));
	CHECK_OK(dev_event_record(e_w, c)); /* when the wait let C go on */
	CHECK_OK(dev_event_record(e, b));   /* b is idle: this capture completes at once */
	CHECK_OK(dev_memcpy_async(c, dflag, nd - 1, hflag, DEV_HOST, 4096));
	CHECK_OK(dev_memcpy_async(c, hout, DEV_HOST, dflag, nd - 1, 4096));
	CHECK_OK(dev_event_record(e_c, c));
	CHECK_OK(dev_event_sync(e)); /* the latest capture: B's, empty */
	double now = dev_now(ctx);
	CHECK_MSG(dev_event_peek(e_a) == -EAGAIN, "A's 300 ms of work ended already");
	CHECK(real_time || dev_now(ctx) == now); /* a peek does not move virtual time */
	CHECK_OK(dev_stream_sync(c));
	CHECK_MSG(dev_event_query(e_a) == 0, "C ran before the work its wait captured ended");
	double ta, tc, tw;
	CHECK_OK(dev_event_time(e_a, &ta));
	CHECK_OK(dev_event_time(e_c, &tc));
	CHECK_OK(dev_event_time(e_w, &tw));
	if (data)
		CHECK_MSG(*(volatile uint32_t *)hout == 0xFEED,
		          "a re-record released a queued wait early (C read %#x)",
		          *(volatile uint32_t *)hout);
	if (real_time)
		CHECK_MSG(tc >= ta, "C's work ended at %.6f, before A's at %.6f", tc, ta);
	else
		CHECK_MSG(tw == ta && tc > ta && ta >= t0 + 0.3,
		          "model: C's wait ended at %.9f, A's kernel at %.9f", tw, ta);
	/* The capture a wait holds survives its event's destruction and a re-record. */
	CHECK_OK(dev_host_callback(a, cf_slow_store_fn, &st));
	CHECK_OK(dev_event_record(e, a));
	CHECK_OK(dev_stream_wait_event(c, e));
	CHECK_OK(dev_event_record(e, b));
	CHECK_OK(dev_event_destroy(e));
	CHECK_OK(dev_stream_sync(c));
	CHECK_OK(dev_mem_free(ctx, 0, dk));
	CHECK_OK(dev_mem_free(ctx, nd - 1, dflag));
	CHECK_OK(dev_host_free(ctx, hout));
	CHECK_OK(dev_host_free(ctx, hflag));
	CHECK_OK(dev_event_destroy(e_w));
	CHECK_OK(dev_event_destroy(e_c));
	CHECK_OK(dev_event_destroy(e_a));
	CHECK_OK(dev_stream_destroy(c));
	CHECK_OK(dev_stream_destroy(b));
	CHECK_OK(dev_stream_destroy(a));
}

/* A DEV_HOST stream runs CPU kernels on pinned host memory in stream order and
 * connects with device streams through events; wait_any returns the first
 * event to complete (on the model backend time runs only to it). */
static void cf_host_stream(struct dev_ctx *ctx, int data, int real_time)
{
	struct dev_stream *hs, *ds;
	struct dev_event *eh, *e_slow, *e_fast;
	CHECK_OK(dev_stream_create(ctx, DEV_HOST, &hs));
	CHECK(dev_stream_device(hs) == DEV_HOST);
	CHECK_OK(dev_stream_create(ctx, 0, &ds));
	CHECK_OK(dev_event_create(ctx, &eh));
	CHECK_OK(dev_event_create(ctx, &e_slow));
	CHECK_OK(dev_event_create(ctx, &e_fast));
	const size_t n = 1 << 16;
	void *h, *h2, *d;
	CHECK_OK(dev_host_alloc(ctx, n, &h));
	CHECK_OK(dev_host_alloc(ctx, n, &h2));
	CHECK_OK(dev_mem_alloc(ctx, 0, n, &d));
	if (data)
		memset(h2, 0, n);
	double t0 = dev_now(ctx);
	struct cf_fill f = {h, n, 0x42};
	struct dev_cost cost = {0, 2e9, 0}; /* 2 GB of CPU memory traffic: 0.1 s at 20 GB/s */
	CHECK_OK(dev_launch(hs, &cf_fill_kernel, &f, sizeof(f), cost));
	CHECK_OK(dev_event_record(eh, hs));
	CHECK_OK(dev_stream_wait_event(ds, eh));
	CHECK_OK(dev_memcpy_async(ds, d, 0, h, DEV_HOST, n));
	CHECK_OK(dev_memcpy_async(ds, h2, DEV_HOST, d, 0, n));
	CHECK_OK(dev_stream_sync(ds));
	if (data)
		CHECK_MSG(cf_all_bytes(h2, n, 0x42), "a device stream did not wait for the host "
		                                     "stream's kernel");
	double th;
	CHECK_OK(dev_event_time(eh, &th));
	if (!real_time) /* the model's default CPU: 20 GB/s of memory traffic */
		CHECK_MSG(th - t0 > 0.0999 && th - t0 < 0.1001, "host kernel took %.6f s", th - t0);
	/* wait_any: a slow and a fast event; the fast one is first */
	struct cf_slow_store slow = {data ? (volatile uint32_t *)h2 : NULL, 7, 150};
	uint32_t sink;
	if (!data)
		slow.dst = &sink;
	struct dev_info in;
	CHECK_OK(dev_info(ctx, 0, &in));
	struct cf_fill k = {d, 0, 0};
	CHECK_OK(dev_host_callback(hs, cf_slow_store_fn, &slow));
	CHECK_OK(dev_launch(hs, &cf_fill_kernel, &k, sizeof(k), (struct dev_cost){0, 2e10, 0}));
	CHECK_OK(dev_event_record(e_slow, hs));
	CHECK_OK(dev_launch(ds, &cf_fill_kernel, &k, sizeof(k),
	                    (struct dev_cost){in.flops * 0.01, 0, 0}));
	CHECK_OK(dev_event_record(e_fast, ds));
	struct dev_event *both[2] = {e_slow, e_fast};
	int idx = -1;
	double before = dev_now(ctx);
	CHECK_OK(dev_event_wait_any(both, 2, &idx));
	CHECK_MSG(idx == 1, "wait_any returned event %d, not the fast one", idx);
	if (!real_time)
		CHECK_MSG(dev_now(ctx) - before < 0.02, "model: wait_any ran time to %.6f",
		          dev_now(ctx) - before);
	CHECK(dev_event_peek(e_slow) == -EAGAIN);
	CHECK_OK(dev_event_wait_any(both, 1, &idx));
	CHECK(idx == 0 && dev_event_query(e_slow) == 0);
	CHECK(dev_event_wait_any(both, 0, &idx) == -EINVAL);
	CHECK_OK(dev_stream_sync(hs));
	CHECK_OK(dev_mem_free(ctx, 0, d));
	CHECK_OK(dev_host_free(ctx, h2));
	CHECK_OK(dev_host_free(ctx, h));
	CHECK_OK(dev_event_destroy(e_fast));
	CHECK_OK(dev_event_destroy(e_slow));
	CHECK_OK(dev_event_destroy(eh));
	CHECK_OK(dev_stream_destroy(ds));
	CHECK_OK(dev_stream_destroy(hs));
}

/* Host callbacks run in stream order, after the work before them. */
struct cf_order {
	int seen[4];
	int n;
};
struct cf_order_arg {
	struct cf_order *o;
	int id;
};
static void cf_order_fn(void *arg)
{
	struct cf_order_arg *a = arg;
	a->o->seen[a->o->n++] = a->id;
}

static void cf_callbacks(struct dev_ctx *ctx, struct dev_stream *s)
{
	struct cf_order o = {{0}, 0};
	struct cf_order_arg args[4];
	for (int i = 0; i < 4; i++) {
		args[i] = (struct cf_order_arg){&o, i + 1};
		CHECK_OK(dev_host_callback(s, cf_order_fn, &args[i]));
	}
	CHECK_OK(dev_stream_sync(s));
	CHECK(o.n == 4);
	for (int i = 0; i < 4; i++)
		CHECK(o.seen[i] == i + 1);
	CHECK(dev_host_callback(s, NULL, NULL) == -EINVAL);
}

static void cf_topology(struct dev_ctx *ctx)
{
	int nd = dev_count(ctx);
	CHECK(nd >= 1 && nd <= DEV_MAX);
	for (int d = 0; d < nd; d++) {
		struct dev_info in;
		CHECK_OK(dev_info(ctx, d, &in));
		CHECK(in.name[0] && in.flops > 0 && in.mem_bw > 0);
		CHECK(dev_link_bw(ctx, DEV_HOST, d) > 0 && dev_link_bw(ctx, d, DEV_HOST) > 0);
		for (int e = 0; e < nd; e++)
			if (e != d && dev_p2p_possible(ctx, d, e))
				CHECK(dev_link_bw(ctx, d, e) > 0);
	}
	CHECK(dev_host_link_bw(ctx) > 0);
	CHECK(dev_link_bw(ctx, DEV_DISK, DEV_HOST) > 0);
	CHECK(dev_link_bw(ctx, nd, 0) == 0);
	CHECK(dev_p2p_possible(ctx, 0, 0) == 0);
}

/* Runs the whole suite on an open context; data = 0 for the model backend,
 * real_time = 0 where time is virtual. */
static void conformance_run(struct dev_ctx *ctx, int data, int real_time)
{
	struct dev_stream *s;
	printf("conformance: backend %s, %d device(s)\n", dev_backend_name(dev_backend(ctx)),
	       dev_count(ctx));
	cf_topology(ctx);
	cf_memory(ctx);
	CHECK_OK(dev_stream_create(ctx, 0, &s));
	CHECK(dev_stream_device(s) == 0);
	CHECK(dev_stream_create(ctx, dev_count(ctx), &s) == -EINVAL);
	cf_map(ctx, s, data);
	cf_copies(ctx, s, data);
	cf_host_grow(ctx, s, data);
	cf_callbacks(ctx, s);
	CHECK_OK(dev_stream_destroy(s));
	cf_events(ctx, data, real_time);
	cf_rerecord(ctx, data, real_time);
	cf_host_stream(ctx, data, real_time);
	printf("conformance: backend %s ok\n", dev_backend_name(dev_backend(ctx)));
}

/* Closes ctx with mappings left in place: one of two granules and one of a
 * granule right after it, and a growing host region with two commits.
 * dev_close must unmap each whole (cuMemUnmap refuses part of a mapping), undo
 * the commits and free the region, and so print no warning. */
static void conformance_close(struct dev_ctx *ctx)
{
	struct dev_info in;
	CHECK_OK(dev_info(ctx, 0, &in));
	size_t g = in.granularity;
	void *va;
	struct dev_phys *a, *b;
	CHECK_OK(dev_va_reserve(ctx, 0, 4 * g, &va));
	CHECK_OK(dev_phys_create(ctx, 0, 2 * g, &a));
	CHECK_OK(dev_phys_create(ctx, 0, g, &b));
	CHECK_OK(dev_va_map(ctx, va, 2 * g, a, 0));
	CHECK_OK(dev_va_map(ctx, (char *)va + 2 * g, g, b, 0));
	void *r; /* a growing host region with two commits */
	size_t cg = dev_host_commit_granularity(ctx);
	CHECK_OK(dev_host_reserve(ctx, 4 * cg, &r));
	CHECK_OK(dev_host_commit(ctx, r, 0, cg));
	CHECK_OK(dev_host_commit(ctx, r, 2 * cg, 2 * cg));
	FILE *log = tmpfile();
	CHECK(log);
	int level = sp_log_level_now;
	unsigned mask = sp_log_subsys_mask;
	sp_log_configure(SP_LOG_WARN, SP_SUBSYS_ALL, fileno(log));
	dev_close(ctx);
	sp_log_configure((enum sp_log_level)level, mask, STDERR_FILENO);
	char buf[512] = "";
	rewind(log);
	size_t n = fread(buf, 1, sizeof(buf) - 1, log);
	buf[n] = 0;
	fclose(log);
	CHECK_MSG(n == 0, "dev_close with live mappings warned: %s", buf);
	printf("conformance: closed with live mappings, no warning\n");
}

#endif

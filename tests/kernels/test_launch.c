/* tests/kernels/test_launch.c — the launch path on the host backend:
 * kn_<op>_launch runs the same CPU kernel as the direct call (same bytes), a bad
 * shape returns -EINVAL before anything is queued (the output, read back after a
 * stream sync, is untouched), a NULL stream is refused, args are copied at launch. */
#include "tests/kernels/util.h"
#include "tests/test.h"

#include <string.h>

#define SENTINEL 777.0f

static void *dalloc(struct dev_ctx *ctx, size_t bytes)
{
	void *p = NULL;
	CHECK_OK(dev_mem_alloc(ctx, 0, bytes, &p));
	return p;
}

static void up(struct dev_stream *s, void *dst, const void *src, size_t bytes, void *pinned)
{
	memcpy(pinned, src, bytes);
	CHECK_OK(dev_memcpy_async(s, dst, 0, pinned, DEV_HOST, bytes));
	CHECK_OK(dev_stream_sync(s));
}

static void down(struct dev_stream *s, void *dst, const void *src, size_t bytes, void *pinned)
{
	CHECK_OK(dev_memcpy_async(s, pinned, DEV_HOST, src, 0, bytes));
	CHECK_OK(dev_stream_sync(s));
	memcpy(dst, pinned, bytes);
}

int main(void)
{
	const int B = 2, T = 16, C = 32, OC = 48;
	size_t nx = (size_t)B * T * C, nw = (size_t)OC * C, no = (size_t)B * T * OC;
	struct dev_config cfg = {
	    .backend = DEV_BACKEND_HOST, .ndevices = 1, .device_mem = 64u << 20};
	struct dev_ctx *ctx;
	CHECK_OK(dev_open(&cfg, &ctx));
	CHECK_OK(kn_cpu_set_threads(1));
	struct dev_stream *s;
	CHECK_OK(dev_stream_create(ctx, 0, &s));
	void *pinned;
	CHECK_OK(dev_host_alloc(ctx, 1 << 20, &pinned));

	struct tk_rng r = {99};
	float *x = malloc(nx * 4), *w = malloc(nw * 4), *bias = malloc(OC * 4);
	float *ref = malloc(no * 4), *got = malloc(no * 4), *sent = malloc(no * 4);
	CHECK(x && w && bias && ref && got && sent);
	tk_fill(&r, x, nx, 1, 0);
	tk_fill(&r, w, nw, 1, 0);
	tk_fill(&r, bias, OC, 1, 0);
	for (size_t i = 0; i < no; i++)
		sent[i] = SENTINEL;
	struct kn_matmul_fwd_args direct = {
	    .out = ref, .inp = x, .weight = w, .bias = bias, .B = B, .T = T, .C = C, .OC = OC};
	kn_matmul_forward_cpu(&direct);

	float *dx = dalloc(ctx, nx * 4), *dw = dalloc(ctx, nw * 4), *db = dalloc(ctx, OC * 4);
	float *dout = dalloc(ctx, no * 4);
	up(s, dx, x, nx * 4, pinned);
	up(s, dw, w, nw * 4, pinned);
	up(s, db, bias, OC * 4, pinned);
	up(s, dout, sent, no * 4, pinned);
	struct kn_matmul_fwd_args a = {
	    .out = dout, .inp = dx, .weight = dw, .bias = db, .B = B, .T = T, .C = C, .OC = OC};
	/* a bad shape: refused, nothing queued, output untouched */
	struct kn_matmul_fwd_args bad = a;
	bad.OC = 0;
	CHECK(kn_matmul_forward_launch(s, &bad) == -EINVAL);
	printf("bad shape: %s\n", sp_last_error());
	struct kn_attention_fwd_args badat = {
	    .out = dout, .att = dout, .ws = dout, .inp = dx, .B = B, .T = T, .C = C, .NH = 5};
	CHECK(kn_attention_forward_launch(s, &badat) == -EINVAL);
	printf("bad heads: %s\n", sp_last_error());
	CHECK(kn_matmul_forward_launch(NULL, &a) == -EINVAL);
	down(s, got, dout, no * 4, pinned);
	CHECK_MSG(memcmp(got, sent, no * 4) == 0, "output written by a refused launch");
	/* a good launch: same bytes as the direct call */
	CHECK_OK(kn_matmul_forward_launch(s, &a));
	down(s, got, dout, no * 4, pinned);
	CHECK_MSG(memcmp(got, ref, no * 4) == 0, "launch and direct call differ");
	/* args are copied at launch: changing them afterwards has no effect */
	struct kn_grad_scale_args sc = {.x = dout, .scale = 2.0f, .N = (long)no};
	CHECK_OK(kn_grad_scale_launch(s, &sc));
	sc.scale = 100.0f;
	down(s, got, dout, no * 4, pinned);
	for (size_t i = 0; i < no; i++)
		CHECK(got[i] == 2.0f * ref[i]);
	CHECK_OK(dev_mem_free(ctx, 0, dx));
	CHECK_OK(dev_mem_free(ctx, 0, dw));
	CHECK_OK(dev_mem_free(ctx, 0, db));
	CHECK_OK(dev_mem_free(ctx, 0, dout));
	CHECK_OK(dev_host_free(ctx, pinned));
	CHECK_OK(dev_stream_destroy(s));
	dev_close(ctx);
	free(x), free(w), free(bias), free(ref), free(got), free(sent);
	TEST_PASS();
}

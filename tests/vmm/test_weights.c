/* tests/vmm/test_weights.c — dirty tracking: weights that are only read are
 * never copied back. 16 weights (written once, on the host) are read by kernels
 * on two devices whose pools hold 4 objects each, interleaved with gradients
 * that kernels rewrite every time (read-modify-write), for 40 passes: many
 * evictions. Every weight's D2H and host->disk bytes are exactly 0 (per object
 * and in the (link x kind) matrix): its device copies are dropped, never
 * written. Gradients are written back (D2H on eviction, host->disk on
 * vmm_writeback) and hold their last values. A disk tier is open so that
 * host->disk would show if it happened. */
#include "tests/vmm/vmm_test.h"

#define OBJ     (64u << 10)
#define NW      16
#define NG      8
#define NPASSES 40

int main(void)
{
	const char *dir = vt_tmpdir();
	struct dev_ctx *ctx = vt_open_host(2, 4u << 20);
	struct vmm_config c = vt_config(4 * OBJ, 0, (NW + NG + 2) * OBJ);
	vt_config_disk(&c, dir, 0, "");
	struct vmm *v;
	CHECK_OK(vmm_open(ctx, &c, &v));
	struct dev_stream *s[2];
	struct dev_event *done[2];
	for (int d = 0; d < 2; d++) {
		CHECK_OK(dev_stream_create(ctx, d, &s[d]));
		CHECK_OK(dev_event_create(ctx, &done[d]));
	}
	uint64_t w[NW], g[NG], gseed[NG];
	for (int i = 0; i < NW; i++) {
		w[i] = vt_create(v, OBJ, VMM_KIND_WEIGHT, NULL);
		vt_write_host(v, w[i], OBJ, 1000 + (uint64_t)i);
	}
	for (int i = 0; i < NG; i++) {
		g[i] = vt_create(v, OBJ, VMM_KIND_GRAD, NULL);
		gseed[i] = 0;
	}
	uint64_t seed = 1;
	for (int pass = 0; pass < NPASSES; pass++) {
		for (int l = 0; l < NW; l++) {
			int d = (l + pass) % 2, k = (l + pass) % NG;
			/* forward/backward of layer l reads its weight, writes a gradient */
			CHECK_MSG(vt_read_dev(v, w[l], d, s[d], done[d], OBJ, 1000 + (uint64_t)l) ==
			              0,
			          "pass %d weight %d on device %d", pass, l, d);
			if (gseed[k])
				CHECK(vt_read_dev(v, g[k], d, s[d], done[d], OBJ, gseed[k]) == 0);
			gseed[k] = ++seed;
			vt_write_dev(v, g[k], d, gseed[k] % 2 ? VMM_WRITE : VMM_OVERWRITE, s[d],
			             done[d], OBJ, gseed[k]);
		}
		if (pass % 8 == 7)
			for (int k = 0; k < NG; k++)
				CHECK_OK(vmm_writeback(v, g[k], 1));
	}
	CHECK_OK(vmm_sync(v));
	struct vmm_stats st;
	vmm_stats_get(v, &st);
	CHECK_MSG(st.evictions.total > 100 && st.drops.total > 0 && st.writebacks.total > 0,
	          "evictions %" PRId64 " drops %" PRId64 " writebacks %" PRId64, st.evictions.total,
	          st.drops.total, st.writebacks.total);
	uint64_t w_h2d = 0;
	for (int i = 0; i < NW; i++) {
		struct vmm_obj_info in;
		CHECK_OK(vmm_obj_info(v, w[i], &in));
		CHECK_MSG(in.bytes_moved[VMM_XFER_D2H] == 0 && in.bytes_moved[VMM_XFER_H2DISK] == 0,
		          "weight %d went back: D2H %" PRIu64 " host->disk %" PRIu64, i,
		          in.bytes_moved[VMM_XFER_D2H], in.bytes_moved[VMM_XFER_H2DISK]);
		CHECK(in.dirty_mask == VMM_INFO_HOST); /* the host copy is the reference */
		w_h2d += in.bytes_moved[VMM_XFER_H2D] + in.bytes_moved[VMM_XFER_P2P];
	}
	for (int d = 0; d < 2; d++)
		CHECK(vmm_link_bytes(v, d, VMM_HOST, VMM_KIND_WEIGHT) == 0);
	CHECK(vmm_link_bytes(v, VMM_HOST, VMM_DISK, VMM_KIND_WEIGHT) == 0);
	uint64_t g_d2h = vmm_link_bytes(v, 0, VMM_HOST, VMM_KIND_GRAD) +
	                 vmm_link_bytes(v, 1, VMM_HOST, VMM_KIND_GRAD);
	uint64_t g_disk = vmm_link_bytes(v, VMM_HOST, VMM_DISK, VMM_KIND_GRAD);
	CHECK(g_d2h > 0 && g_disk > 0);
	for (int k = 0; k < NG; k++) {
		CHECK_OK(vmm_writeback(v, g[k], 1));
		CHECK_OK(vmm_obj_wait(v, g[k]));
		struct vmm_obj_info in;
		CHECK_OK(vmm_obj_info(v, g[k], &in));
		CHECK(in.valid_mask & VMM_INFO_DISK);
		CHECK(vt_read_host(v, g[k], OBJ, gseed[k]) == 0);
	}
	vt_check_accounting(v, ctx, 2);
	printf("weights: %d x %u KiB read %d times on 2 devices (pools of 4): %" PRIu64
	       " bytes brought in, 0 written back\n",
	       NW, OBJ >> 10, NPASSES, w_h2d);
	printf("gradients: %" PRIu64 " bytes D2H, %" PRIu64 " bytes host->disk\n", g_d2h, g_disk);
	printf("evictions %" PRId64 ", drops %" PRId64 ", write-backs %" PRId64 "\n",
	       st.evictions.total, st.drops.total, st.writebacks.total);
	vmm_close(v);
	dev_close(ctx);
	vt_rmdir(dir);
	TEST_PASS();
}

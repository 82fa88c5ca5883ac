/* tests/kernels/test_shapes.c — bad shapes are refused: zero or negative dims,
 * NH not dividing C, T beyond the position table, NULL tensors and dtypes not
 * implemented return -EINVAL (-ENOTSUP for bf16 optimizers) with a message naming the
 * field, and the outputs stay untouched; valid shapes pass; token ids out of
 * range give NaN, not out-of-bounds accesses. Also checks the
 * layer descriptors' byte and FLOP accounting on a GPT-2 small shape. */
#include "tests/kernels/util.h"
#include "tests/test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SENTINEL 12345.0f

static float out[4096];

static void fill_sentinel(void)
{
	for (size_t i = 0; i < SP_ARRAY_SIZE(out); i++)
		out[i] = SENTINEL;
}

static void untouched(void)
{
	for (size_t i = 0; i < SP_ARRAY_SIZE(out); i++)
		CHECK_MSG(out[i] == SENTINEL, "output written at %zu", i);
}

#define EXPECT(call, rc, needle)                                                           \
	do {                                                                               \
		fill_sentinel();                                                           \
		sp_error_clear();                                                          \
		int r_ = (call);                                                           \
		CHECK_MSG(r_ == (rc), "%s returned %d, expected %d (%s)", #call, r_, (rc), \
		          sp_last_error());                                                \
		if ((rc) != 0) {                                                           \
			CHECK_MSG(strstr(sp_last_error(), (needle)) != NULL,               \
			          "message '%s' lacks '%s'", sp_last_error(), (needle));   \
			printf("  %-40s -> %s\n", #call, sp_last_error());                 \
		}                                                                          \
		untouched();                                                               \
	} while (0)

/* Token ids outside [0, V) — what a kernel reads when the copy of its inputs
 * was dropped with a failed device — give NaN rows and losses and no
 * gradient, never an access out of bounds (buffers of exact size: ASAN). */
static void bad_tokens(void)
{
	enum { B = 2, T = 3, C = 4, V = 5 };
	int tok[B * T] = {0, 1, 1 << 30, 4, -7, 2};
	float *wte = calloc(V * C, sizeof(float)), *wpe = calloc(T * C, sizeof(float));
	float *o = malloc(B * T * C * sizeof(float)), *dout = malloc(B * T * C * sizeof(float));
	for (int i = 0; i < B * T * C; i++)
		dout[i] = 1;
	struct kn_encoder_fwd_args f = {.out = o,
	                                .inp = tok,
	                                .wte = wte,
	                                .wpe = wpe,
	                                .B = B,
	                                .T = T,
	                                .C = C,
	                                .V = V,
	                                .maxT = T};
	CHECK_OK(kn_encoder_forward_check(&f));
	kn_encoder_forward_cpu(&f);
	for (int r = 0; r < B * T; r++)
		CHECK_MSG(isnan(o[r * C]) == (r == 2 || r == 4), "row %d (token %d): %g", r, tok[r],
		          o[r * C]);
	struct kn_encoder_bwd_args b = {.dwte = wte,
	                                .dwpe = wpe,
	                                .dout = dout,
	                                .inp = tok,
	                                .B = B,
	                                .T = T,
	                                .C = C,
	                                .V = V,
	                                .maxT = T};
	CHECK_OK(kn_encoder_backward_check(&b));
	kn_encoder_backward_cpu(&b);
	CHECK(wte[1 * C] == 1 && wte[0] == 1 && wte[4 * C] == 1 && wte[2 * C] == 1 &&
	      wte[3 * C] == 0);
	CHECK(wpe[0] == 2 && wpe[2 * C] == 2); /* positions take every row's gradient */
	float *logits = calloc(B * T * V, sizeof(float)),
	      *probs = malloc(B * T * V * sizeof(float));
	float losses[B * T];
	struct kn_crossentropy_fwd_args x = {.losses = losses,
	                                     .probs = probs,
	                                     .logits = logits,
	                                     .targets = tok,
	                                     .B = B,
	                                     .T = T,
	                                     .V = V};
	kn_crossentropy_forward_cpu(&x);
	for (int r = 0; r < B * T; r++)
		CHECK_MSG(isnan(losses[r]) == (r == 2 || r == 4), "loss %d (target %d): %g", r,
		          tok[r], losses[r]);
	free(wte);
	free(wpe);
	free(o);
	free(dout);
	free(logits);
	free(probs);
	printf("  tokens outside [0, V): NaN rows and losses, no gradient, in bounds\n");
}

int main(void)
{
	bad_tokens();
	static float in[4096], w[4096], ws[8192];
	static int tok[64];
	float mean[64], rstd[64];

	/* encoder */
	struct kn_encoder_fwd_args e = {
	    .out = out, .inp = tok, .wte = w, .wpe = w, .B = 2, .T = 4, .C = 8, .V = 16, .maxT = 4};
	EXPECT(kn_encoder_forward_check(&e), 0, "");
	e.T = 5;
	EXPECT(kn_encoder_forward_check(&e), -EINVAL, "maxT = 4");
	e.T = 4, e.B = 0;
	EXPECT(kn_encoder_forward_check(&e), -EINVAL, "B = 0");
	e.B = 2, e.C = -3;
	EXPECT(kn_encoder_forward_check(&e), -EINVAL, "C = -3");
	e.C = 8, e.V = 0;
	EXPECT(kn_encoder_forward_check(&e), -EINVAL, "V = 0");
	e.V = 16, e.wpe = NULL;
	EXPECT(kn_encoder_forward_check(&e), -EINVAL, "wpe is NULL");
	e.wpe = w, e.dtype = KN_BF16;
	CHECK_OK(kn_encoder_forward_check(&e));
	e.dtype = (enum kn_dtype)7;
	EXPECT(kn_encoder_forward_check(&e), -EINVAL, "dtype 7");
	struct kn_encoder_bwd_args eb = {.dwte = out,
	                                 .dwpe = out,
	                                 .dout = in,
	                                 .inp = tok,
	                                 .B = 2,
	                                 .T = 9,
	                                 .C = 8,
	                                 .V = 16,
	                                 .maxT = 8};
	EXPECT(kn_encoder_backward_check(&eb), -EINVAL, "exceeds the position table");

	/* layernorm */
	struct kn_layernorm_fwd_args l = {.out = out,
	                                  .mean = mean,
	                                  .rstd = rstd,
	                                  .inp = in,
	                                  .weight = w,
	                                  .bias = w,
	                                  .B = 2,
	                                  .T = 4,
	                                  .C = 8};
	EXPECT(kn_layernorm_forward_check(&l), 0, "");
	l.C = 0;
	EXPECT(kn_layernorm_forward_check(&l), -EINVAL, "C = 0");
	struct kn_layernorm_bwd_args lb = {.dinp = out,
	                                   .dweight = out,
	                                   .dbias = out,
	                                   .dout = in,
	                                   .inp = in,
	                                   .weight = w,
	                                   .mean = mean,
	                                   .rstd = rstd,
	                                   .B = -1,
	                                   .T = 4,
	                                   .C = 8};
	EXPECT(kn_layernorm_backward_check(&lb), -EINVAL, "B = -1");

	/* matmul */
	struct kn_matmul_fwd_args m = {
	    .out = out, .inp = in, .weight = w, .B = 2, .T = 4, .C = 8, .OC = 16};
	EXPECT(kn_matmul_forward_check(&m), 0, "");
	m.OC = 0;
	EXPECT(kn_matmul_forward_check(&m), -EINVAL, "OC = 0");
	struct kn_matmul_bwd_args mb = {
	    .dinp = out, .dout = in, .weight = NULL, .B = 2, .T = 4, .C = 8, .OC = 16};
	EXPECT(kn_matmul_backward_check(&mb), -EINVAL, "weight is NULL");

	/* attention */
	struct kn_attention_fwd_args a = {
	    .out = out, .att = out, .ws = ws, .inp = in, .B = 2, .T = 4, .C = 8, .NH = 2};
	EXPECT(kn_attention_forward_check(&a), 0, "");
	a.NH = 3;
	EXPECT(kn_attention_forward_check(&a), -EINVAL, "NH = 3 does not divide C = 8");
	a.NH = 0;
	EXPECT(kn_attention_forward_check(&a), -EINVAL, "NH = 0");
	struct kn_attention_bwd_args ab = {.dinp = out,
	                                   .ws = ws,
	                                   .dout = in,
	                                   .inp = in,
	                                   .att = in,
	                                   .B = 2,
	                                   .T = 0,
	                                   .C = 8,
	                                   .NH = 2};
	EXPECT(kn_attention_backward_check(&ab), -EINVAL, "T = 0");

	/* elementwise, loss, optimizer */
	struct kn_gelu_fwd_args g = {.out = out, .inp = in, .N = 0};
	EXPECT(kn_gelu_forward_check(&g), -EINVAL, "N = 0");
	struct kn_residual_fwd_args r = {.out = out, .a = in, .b = in, .N = -5};
	EXPECT(kn_residual_forward_check(&r), -EINVAL, "N = -5");
	struct kn_crossentropy_fwd_args c = {
	    .losses = out, .probs = out, .logits = in, .targets = tok, .B = 2, .T = 4, .V = 0};
	EXPECT(kn_crossentropy_forward_check(&c), -EINVAL, "V = 0");
	struct kn_adamw_args ad = {.params = out,
	                           .grads = in,
	                           .m = w,
	                           .v = w,
	                           .N = 16,
	                           .lr = 1e-3f,
	                           .beta1 = 0.9f,
	                           .beta2 = 0.999f,
	                           .eps = 1e-8f,
	                           .t = 1};
	EXPECT(kn_adamw_check(&ad), 0, "");
	ad.t = 0;
	EXPECT(kn_adamw_check(&ad), -EINVAL, "t = 0");
	ad.t = 1, ad.beta1 = 1.0f;
	EXPECT(kn_adamw_check(&ad), -EINVAL, "betas");
	ad.beta1 = 0.9f, ad.dtype = KN_BF16; /* the optimizers stay fp32 */
	EXPECT(kn_adamw_check(&ad), -ENOTSUP, "bf16");
	ad.dtype = KN_F32;
	float buf[4] = {0};
	struct kn_sgd_args sg = {.params = out, .grads = out, .buf = NULL, .N = 4, .lr = 0.1f};
	EXPECT(kn_sgd_check(&sg), 0, "");
	sg.momentum = 0.9f;
	EXPECT(kn_sgd_check(&sg), -EINVAL, "needs buf");
	sg.buf = buf;
	EXPECT(kn_sgd_check(&sg), 0, "");
	sg.momentum = 1.0f;
	EXPECT(kn_sgd_check(&sg), -EINVAL, "momentum");
	sg.momentum = 0.5f;
	sg.lr = -1;
	EXPECT(kn_sgd_check(&sg), -EINVAL, "lr");
	struct kn_grad_zero_args z = {.x = out, .N = 0};
	EXPECT(kn_grad_zero_check(&z), -EINVAL, "N = 0");

	/* layer descriptors */
	struct kn_model_config cfg = {.maxT = 1024, .V = 50257, .L = 12, .NH = 12, .C = 768};
	struct kn_layer_desc d;
	CHECK_OK(kn_layer_describe(&cfg, KN_LAYER_BLOCK, 4, 1024, &d));
	CHECK(d.param_bytes == 4ull * (12ull * 768 * 768 + 13 * 768));
	CHECK(d.grad_bytes == d.param_bytes && d.optim_bytes == 2 * d.param_bytes);
	/* GEMMs 24 B T C^2 plus attention 4 B T^2 C (full T x T), elementwise < 1% */
	double gemm = 24.0 * 4 * 1024 * 768 * 768 + 4.0 * 4 * 1024 * 1024 * 768;
	CHECK_MSG(d.fwd_flops > gemm && d.fwd_flops < 1.01 * gemm, "fwd %.4g vs %.4g", d.fwd_flops,
	          gemm);
	CHECK(d.bwd_flops > 1.9 * d.fwd_flops && d.bwd_flops < 2.1 * d.fwd_flops);
	CHECK(d.recompute_stash_bytes == 0 && d.needs_input);
	CHECK(d.input_bytes == 4ull * 4 * 1024 * 768 && d.output_bytes == d.input_bytes);
	/* 15 BTC + att (B NH T^2) + 4 fp32 statistics of BT */
	CHECK(d.stash_bytes ==
	      4ull * (15ull * 4 * 1024 * 768 + 4ull * 12 * 1024 * 1024) + 16ull * 4 * 1024);
	printf("  GPT-2 small block, B=4 T=1024: params %.1f MB, stash %.1f MB, fwd %.1f GFLOP\n",
	       d.param_bytes / 1e6, d.stash_bytes / 1e6, d.fwd_flops / 1e9);
	CHECK_OK(kn_layer_describe(&cfg, KN_LAYER_EMBEDDING, 4, 1024, &d));
	CHECK(d.param_bytes == 4ull * (50257 + 1024) * 768);
	CHECK_OK(kn_layer_describe(&cfg, KN_LAYER_HEAD, 4, 1024, &d));
	CHECK(d.stash_bytes >= 4ull * 4 * 1024 * 50257);
	EXPECT(kn_layer_describe(&cfg, KN_LAYER_BLOCK, 4, 2048, &d), -EINVAL, "maxT = 1024");
	cfg.NH = 7;
	EXPECT(kn_layer_describe(&cfg, KN_LAYER_BLOCK, 4, 1024, &d), -EINVAL, "NH = 7");
	TEST_PASS();
}

/* tests/kernels/test_layer.c — the layer API (kn_layer_forward/backward/update
 * /zero_grad on struct kn_layer_mem ranges sized by kn_layer_describe) runs a
 * 2-layer GPT-2 for 2 training steps bit-identically to the reference
 * composition of tests/kernels/gpt2.h (which test_torch checks against
 * PyTorch); bad calls return -EINVAL and run nothing. */
#include "tests/kernels/util.h"
#include "tests/test.h"

#include <string.h>

#define NL (2 + 2) /* embedding, 2 blocks, head */

static const struct kn_optim_hparams HP = {.lr = 1e-3f,
                                           .beta1 = 0.9f,
                                           .beta2 = 0.95f,
                                           .eps = 1e-8f,
                                           .weight_decay = 0.1f,
                                           .kind = KN_ADAMW};

int main(void)
{
	CHECK_OK(kn_cpu_set_threads(1));
	struct kn_model_config cfg = {.maxT = 32, .V = 96, .L = 2, .NH = 4, .C = 48};
	const int B = 3, T = 24;
	size_t bt = (size_t)B * T, btc = bt * cfg.C;
	const struct g2_exec *ex = &tk_cpu_exec;
	struct g2_model ref;
	CHECK(g2_model_create(ex, &cfg, B, T, &ref) == 0);
	struct tk_rng r = {2024};
	tk_init_model(&r, &ref);
	for (size_t i = 0; i < bt; i++) {
		ref.tokens[i] = (int)(tk_u32(&r) % (uint32_t)cfg.V);
		ref.targets[i] = (int)(tk_u32(&r) % (uint32_t)cfg.V);
	}

	/* the layer API's memory, one set of ranges per layer */
	enum kn_layer_kind kinds[NL] = {KN_LAYER_EMBEDDING, KN_LAYER_BLOCK, KN_LAYER_BLOCK,
	                                KN_LAYER_HEAD};
	size_t param_off[NL] = {0, g2_block_offset(&cfg, 0), g2_block_offset(&cfg, 1),
	                        g2_block_offset(&cfg, 2)};
	struct kn_layer_mem mem[NL];
	struct kn_layer_desc d[NL];
	size_t total = 0;
	for (int l = 0; l < NL; l++) {
		CHECK_OK(kn_layer_describe(&cfg, kinds[l], B, T, &d[l]));
		CHECK(param_off[l] * 4 == total);
		total += d[l].param_bytes;
		mem[l] = (struct kn_layer_mem){
		    .params = malloc(d[l].param_bytes),
		    .grads = calloc(1, d[l].grad_bytes),
		    .optim = calloc(1, d[l].optim_bytes),
		    .stash = d[l].stash_bytes ? calloc(1, d[l].stash_bytes) : NULL,
		    .work = d[l].work_bytes ? calloc(1, d[l].work_bytes) : NULL,
		};
		CHECK(mem[l].params && mem[l].grads && mem[l].optim);
		memcpy(mem[l].params, ref.params + param_off[l], d[l].param_bytes);
	}
	CHECK(total == ref.nparams * 4);
	mem[NL - 1].tied = mem[0].params;
	mem[NL - 1].tied_grad = mem[0].grads;
	float *x[3], *dx[3], *losses = calloc(bt, 4);
	for (int i = 0; i < 3; i++) {
		x[i] = calloc(btc, 4);
		dx[i] = calloc(btc, 4);
		CHECK(x[i] && dx[i]);
	}

	/* bad calls run nothing */
	struct kn_layer_io bad = {.in = x[0], .out = x[1]};
	struct kn_layer_mem nostash = mem[1];
	nostash.stash = NULL;
	CHECK(kn_layer_forward_cpu(&cfg, KN_LAYER_BLOCK, B, T, &nostash, &bad) == -EINVAL);
	printf("NULL stash: %s\n", sp_last_error());
	CHECK(kn_layer_forward_cpu(&cfg, KN_LAYER_BLOCK, B, cfg.maxT + 1, &mem[1], &bad) ==
	      -EINVAL);
	printf("T > maxT: %s\n", sp_last_error());
	struct kn_layer_io nodin = {.in = x[0], .dout = x[1]};
	CHECK(kn_layer_backward_cpu(&cfg, KN_LAYER_BLOCK, B, T, &mem[1], &nodin) == -EINVAL);
	for (size_t i = 0; i < btc; i++)
		CHECK(x[1][i] == 0.0f);

	for (int step = 1; step <= 2; step++) {
		/* reference */
		g2_zero(ex, ref.grads, ref.nparams);
		g2_model_forward(ex, &ref);
		g2_model_backward(ex, &ref);
		g2_model_update(ex, &ref, HP.lr, HP.beta1, HP.beta2, HP.eps, HP.weight_decay, step);
		/* layer API */
		for (int l = 0; l < NL; l++)
			CHECK_OK(kn_layer_zero_grad_cpu(&cfg, kinds[l], &mem[l]));
		struct kn_layer_io io = {.in = ref.tokens, .out = x[0]};
		CHECK_OK(kn_layer_forward_cpu(&cfg, KN_LAYER_EMBEDDING, B, T, &mem[0], &io));
		for (int l = 1; l <= 2; l++) {
			io = (struct kn_layer_io){.in = x[l - 1], .out = x[l]};
			CHECK_OK(kn_layer_forward_cpu(&cfg, KN_LAYER_BLOCK, B, T, &mem[l], &io));
		}
		struct kn_layer_io head = {.in = x[2],
		                           .out = losses,
		                           .targets = ref.targets,
		                           .din = dx[2],
		                           .dloss = 1.0f / (float)bt};
		CHECK_OK(kn_layer_forward_cpu(&cfg, KN_LAYER_HEAD, B, T, &mem[3], &head));
		memset(dx[2], 0, btc * 4);
		CHECK_OK(kn_layer_backward_cpu(&cfg, KN_LAYER_HEAD, B, T, &mem[3], &head));
		for (int l = 2; l >= 1; l--) {
			memset(dx[l - 1], 0, btc * 4);
			io = (struct kn_layer_io){.in = x[l - 1], .dout = dx[l], .din = dx[l - 1]};
			CHECK_OK(kn_layer_backward_cpu(&cfg, KN_LAYER_BLOCK, B, T, &mem[l], &io));
		}
		io = (struct kn_layer_io){.in = ref.tokens, .dout = dx[0]};
		CHECK_OK(kn_layer_backward_cpu(&cfg, KN_LAYER_EMBEDDING, B, T, &mem[0], &io));
		/* reference losses are from this step's forward (before its update) */
		CHECK_MSG(memcmp(losses, ref.losses, bt * 4) == 0, "losses differ at step %d",
		          step);
		for (int l = 0; l < NL; l++)
			CHECK_MSG(memcmp(mem[l].grads, ref.grads + param_off[l], d[l].grad_bytes) ==
			              0,
			          "layer %d gradients differ at step %d", l, step);
		struct kn_optim_hparams h = HP;
		h.t = step;
		for (int l = 0; l < NL; l++) {
			CHECK_OK(kn_layer_update_cpu(&cfg, kinds[l], &mem[l], &h));
			CHECK_MSG(
			    memcmp(mem[l].params, ref.params + param_off[l], d[l].param_bytes) == 0,
			    "layer %d parameters differ after step %d", l, step);
		}
		printf("step %d: loss %.6f, layer API == reference (bit for bit)\n", step,
		       tk_mean_loss(&ref));
	}
	for (int l = 0; l < NL; l++) {
		free(mem[l].params), free(mem[l].grads), free(mem[l].optim);
		free(mem[l].stash), free(mem[l].work);
	}
	for (int i = 0; i < 3; i++)
		free(x[i]), free(dx[i]);
	free(losses);
	g2_model_destroy(ex, &ref);
	TEST_PASS();
}

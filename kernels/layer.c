/* kernels/layer.c — layer descriptors for the task graph: bytes of parameters,
 * gradients, AdamW state, stashed activations, outputs and scratch, and FLOPs,
 * for the three GPT-2 layer kinds at microbatch (B, T).
 *
 * The byte counts are exactly the ranges kn_layer_forward/backward use
 * (layer_exec.c lays them out); FLOPs count GEMMs (2 per multiply-add,
 * attention over the full T x T as the fp32 kernels compute it, the causal half
 * for bf16's flash kernels) plus the elementwise ops' small terms. Backward =
 * 2x forward GEMMs (bf16 attention: 3.5x, it recomputes the probabilities).
 */
#include "kernels/internal.h"

void kn_block_param_sizes(int C, size_t out[KN_BLOCK_NPARAMS])
{
	size_t c = (size_t)C;
	size_t sizes[KN_BLOCK_NPARAMS] = {c, c, 3 * c * c, 3 * c, c * c,     c,
	                                  c, c, 4 * c * c, 4 * c, 4 * c * c, c};
	for (int i = 0; i < KN_BLOCK_NPARAMS; i++)
		out[i] = sizes[i];
}

int kn_model_config_check(const struct kn_model_config *cfg)
{
	if (!cfg)
		return sp_error(-EINVAL, "kn_model_config: NULL config");
	if (cfg->maxT <= 0 || cfg->V <= 0 || cfg->L <= 0 || cfg->NH <= 0 || cfg->C <= 0)
		return sp_error(
		    -EINVAL,
		    "kn_model_config: sizes must be > 0, got maxT = %d, V = %d, L = %d, "
		    "NH = %d, C = %d",
		    cfg->maxT, cfg->V, cfg->L, cfg->NH, cfg->C);
	if (cfg->C % cfg->NH != 0)
		return sp_error(-EINVAL, "kn_model_config: NH = %d does not divide C = %d", cfg->NH,
		                cfg->C);
	if (cfg->dtype != KN_F32 && cfg->dtype != KN_BF16)
		return sp_error(-EINVAL, "kn_model_config: unknown dtype %d", (int)cfg->dtype);
	return 0;
}

int kn_layer_describe(const struct kn_model_config *cfg, enum kn_layer_kind kind, int B, int T,
                      struct kn_layer_desc *out)
{
	SP_CHECK(kn_model_config_check(cfg));
	if (B <= 0 || T <= 0)
		return sp_error(-EINVAL, "kn_layer_describe: B = %d and T = %d must be > 0", B, T);
	if (T > cfg->maxT)
		return sp_error(-EINVAL,
		                "kn_layer_describe: T = %d exceeds the position table (maxT = %d)",
		                T, cfg->maxT);
	double e = (double)kn_dtype_size(cfg->dtype);
	double C = cfg->C, V = cfg->V, NH = cfg->NH, bt = (double)B * T, btc = bt * C;
	double att = (double)B * NH * T * T;
	struct kn_layer_desc d = {.kind = kind, .needs_input = 1};
	double params = 0;
	switch (kind) {
	case KN_LAYER_EMBEDDING:
		d.name = "embedding";
		params = (V + cfg->maxT) * C;
		d.input_bytes = (uint64_t)(4 * bt); /* token ids */
		d.output_bytes = (uint64_t)(btc * e);
		d.fwd_flops = btc;
		d.bwd_flops = 2 * btc;
		d.stash_names = "";
		break;
	case KN_LAYER_BLOCK: {
		if (cfg->tp_form || cfg->tp_shards > 1) { /* the tensor-parallel form */
			SP_CHECK(kn_block_tp_describe(cfg, cfg->tp_shards > 1 ? cfg->tp_shards : 1,
			                              B, T, out));
			out->stash_names = "ln1,qkv,att,atty,residual2,ln2,fch,fch_gelu,ln1_mean,"
			                   "ln1_rstd,ln2_mean,ln2_rstd";
			return 0;
		}
		d.name = "block";
		params = 12 * C * C + 13 * C;
		/* ln1, qkv(3), att, atty, res2, ln2, fch(4), fch_gelu(4) = 15 BTC + att,
		 * then ln1/ln2 mean and rstd (fp32) */
		d.stash_bytes = (uint64_t)(15 * btc * e + 4 * 4 * bt) +
		                kn_attention_att_bytes(cfg->dtype, B, T, cfg->NH);
		d.input_bytes = (uint64_t)(btc * e);
		d.output_bytes = (uint64_t)(btc * e);
		/* attention ws; forward attproj, fcproj; backward 16 BTC of gradients */
		d.work_bytes = kn_attention_ws_bytes(cfg->dtype, B, T, cfg->C, cfg->NH) +
		               (uint64_t)(16 * btc * e);
		double gemm = 24 * btc * C; /* qkv 6, proj 2, fc 8, fcproj 8 (x BTC^2) */
		double attn = 4 * btc * T;  /* q k^T and att v over the full T x T */
		double elem = 60 * btc + 5 * att;
		d.fwd_flops = gemm + attn + elem;
		d.bwd_flops = 2 * gemm + 2 * attn + 2 * elem;
		d.stash_names = "ln1,qkv,att,atty,residual2,ln2,fch,fch_gelu,ln1_mean,ln1_rstd,"
		                "ln2_mean,ln2_rstd";
		if (cfg->dtype == KN_BF16) {
			/* flash attention: the causal half only; backward recomputes the
			 * scores and probabilities (q k^T twice, dp twice): 3.5x forward */
			attn /= 2;
			elem = 60 * btc + 2.5 * att;
			d.fwd_flops = gemm + attn + elem;
			d.bwd_flops = 2 * gemm + 3.5 * attn + 2 * elem;
			d.stash_names = "ln1_mean,ln1_rstd,ln2_mean,ln2_rstd,lse,ln1,qkv,atty,"
			                "residual2,ln2,fch,fch_gelu";
		}
		break;
	}
	case KN_LAYER_HEAD:
		d.name = "head";
		params = 2 * C; /* lnf; the LM head is wte, owned by the embedding */
		d.stash_bytes = (uint64_t)((btc + bt * V) * e + 2 * 4 * bt);
		d.input_bytes = (uint64_t)(btc * e);
		d.output_bytes = (uint64_t)(4 * bt);           /* per-position losses, fp32 */
		d.work_bytes = (uint64_t)((bt * V + btc) * e); /* logits; dlogits + dlnf */
		d.fwd_flops = 2 * btc * V + 5 * bt * V + 8 * btc;
		d.bwd_flops = 4 * btc * V + 3 * bt * V + 16 * btc;
		d.stash_names = cfg->dtype == KN_BF16 ? "lnf_mean,lnf_rstd,lnf,probs"
		                                      : "lnf,probs,lnf_mean,lnf_rstd";
		break;
	default: return sp_error(-EINVAL, "kn_layer_describe: unknown layer kind %d", (int)kind);
	}
	d.param_bytes = (uint64_t)(params * e);
	d.grad_bytes = d.param_bytes;
	d.optim_bytes = (uint64_t)(params * 8); /* m and v, fp32 */
	*out = d;
	return 0;
}

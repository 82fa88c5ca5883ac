/* kernels/kernels.h — GPT-2 layer math: forward, backward, optimizer (prefix kn_).
 *
 * One args struct per operation and direction; the same struct drives two
 * implementations with identical meaning: kn_<op>_<dir>_cpu(args) (C, OpenBLAS
 * for GEMMs, plain loops without it) and kn_<op>_<dir>_cuda(args, cudaStream_t)
 * (CUDA, cuBLAS; only with SPILL_HAVE_CUDA). kn_<op>_<dir>_launch(stream, args)
 * validates the shapes and queues the kernel on a dev_stream of any backend.
 *
 * Layouts follow llm.c (row-major, letters B, T, C, V, NH, hs = C/NH, OC):
 * activations (B,T,C); linear weight (OC,C) as torch.nn.Linear; qkv (B,T,3C)
 * ordered q|k|v, head h at columns h*hs..; attention probabilities (B,NH,T,T).
 * Tensors are void pointers of element type args->dtype: KN_F32, or KN_BF16
 * (storage bf16, arithmetic fp32, round-to-nearest-even on every store; the
 * optimizers stay fp32-only); token ids and targets are int32; layernorm
 * statistics (mean, rstd), attention's logsumexp and the losses are always fp32.
 *
 * Gradient convention: every backward ACCUMULATES (+=) into all its outputs,
 * input gradients and parameter gradients alike (llm.c's convention), so
 * residual branches and microbatches sum without extra copies; zero them first
 * with kn_grad_zero. Direct calls do not validate (pass valid shapes); launch
 * calls do, and leave every output untouched on failure.
 * CPU kernels are deterministic for a fixed thread count (kn_cpu_set_threads):
 * fixed reduction orders, no atomics; GEMMs and the optimizer updates are
 * multi-threaded (the updates elementwise: the same bits for any count).
 */
#ifndef SP_KERNELS_KERNELS_H
#define SP_KERNELS_KERNELS_H

#include "common/error.h"
#include "device/device.h"

#include <stddef.h>
#include <stdint.h>

enum kn_dtype { KN_F32 = 0, KN_BF16 = 1 };

/* Bytes of one element of dtype (4 for KN_F32, 2 for KN_BF16). */
size_t kn_dtype_size(enum kn_dtype dtype);

/* bf16 <-> fp32 as the kernels convert (bf16 is the top half of an fp32):
 * widening is exact; narrowing rounds to nearest, ties to even (a NaN stays
 * a quiet NaN, overflow gives inf), as CUDA's __float2bfloat16_rn. */
static inline float kn_bf16_to_f32(uint16_t h)
{
	union {
		uint32_t u;
		float f;
	} v = {.u = (uint32_t)h << 16};
	return v.f;
}
static inline uint16_t kn_f32_to_bf16(float f)
{
	union {
		float f;
		uint32_t u;
	} v = {.f = f};
	if ((v.u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep the sign, set quiet */
		return (uint16_t)((v.u >> 16) | 0x40u);
	v.u += 0x7fffu + ((v.u >> 16) & 1u);
	return (uint16_t)(v.u >> 16);
}

/* Sets the CPU kernels' thread count (OpenBLAS threads); 0 = number of cores.
 * Results are bit-identical run to run for a fixed count. Not thread-safe with
 * kernels in flight. Returns 0, or -EINVAL for a negative count. */
int kn_cpu_set_threads(int threads) SP_MUST_CHECK;
int kn_cpu_threads(void);

/* ---- token + position embedding ------------------------------------------
 * out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]; wte (V,C), wpe (maxT,C). */
struct kn_encoder_fwd_args {
	enum kn_dtype dtype;
	void *out;       /* (B,T,C) */
	const int *inp;  /* (B,T) token ids in [0,V) */
	const void *wte; /* (V,C) */
	const void *wpe; /* (maxT,C) */
	int B, T, C, V, maxT;
};
/* dwte[inp[b,t]] += dout[b,t]; dwpe[t] += dout[b,t] (serial over b,t). */
struct kn_encoder_bwd_args {
	enum kn_dtype dtype;
	void *dwte;       /* (V,C) */
	void *dwpe;       /* (maxT,C) */
	const void *dout; /* (B,T,C) */
	const int *inp;   /* (B,T) */
	int B, T, C, V, maxT;
};

/* ---- layernorm (eps 1e-5, biased variance, as torch) -----------------------
 * out = (inp - mean) * rstd * weight + bias over the last dimension C. */
struct kn_layernorm_fwd_args {
	enum kn_dtype dtype;
	void *out;          /* (B,T,C) */
	float *mean;        /* (B,T) saved for backward */
	float *rstd;        /* (B,T) saved for backward */
	const void *inp;    /* (B,T,C) */
	const void *weight; /* (C) */
	const void *bias;   /* (C) */
	int B, T, C;
};
struct kn_layernorm_bwd_args {
	enum kn_dtype dtype;
	void *dinp;         /* (B,T,C) += */
	void *dweight;      /* (C) += */
	void *dbias;        /* (C) += */
	const void *dout;   /* (B,T,C) */
	const void *inp;    /* (B,T,C) */
	const void *weight; /* (C) */
	const float *mean;  /* (B,T) */
	const float *rstd;  /* (B,T) */
	int B, T, C;
};

/* ---- linear: out = inp @ weight^T + bias ----------------------------------
 * inp (B,T,C), weight (OC,C), bias (OC) or NULL, out (B,T,OC). */
struct kn_matmul_fwd_args {
	enum kn_dtype dtype;
	void *out;
	const void *inp;
	const void *weight;
	const void *bias; /* NULL: no bias */
	int B, T, C, OC;
};
/* dinp += dout @ weight; dweight += dout^T @ inp; dbias += sum over (B,T) of dout.
 * dinp, dweight or dbias may be NULL to skip that gradient. */
struct kn_matmul_bwd_args {
	enum kn_dtype dtype;
	void *dinp;       /* (B,T,C) */
	void *dweight;    /* (OC,C) */
	void *dbias;      /* (OC) */
	const void *dout; /* (B,T,OC) */
	const void *inp;  /* (B,T,C) */
	const void *weight;
	int B, T, C, OC;
};

/* ---- causal multi-head self-attention --------------------------------------
 * inp (B,T,3C) = q|k|v; P = softmax(q k^T / sqrt(hs)) with the causal mask
 * (P[.,.,t,t2] = 0 for t2 > t); out (B,T,C) = P @ v with heads concatenated.
 * What forward saves in att for backward depends on the dtype:
 *   KN_F32   att (B,NH,T,T) fp32: P itself;
 *   KN_BF16  att (B,NH,T) fp32: the logsumexp of each row of scaled logits
 *            (flash attention: P is never stored, backward recomputes it from
 *            q, k and this; backward also reads out). Head size hs <= 128.
 * ws is scratch of kn_attention_ws_bytes(). */
struct kn_attention_fwd_args {
	enum kn_dtype dtype;
	void *out;       /* (B,T,C) */
	void *att;       /* saved for backward: (B,NH,T,T), bf16: (B,NH,T) fp32 */
	void *ws;        /* scratch, kn_attention_ws_bytes(B,T,C,NH) */
	const void *inp; /* (B,T,3C) */
	int B, T, C, NH;
};
struct kn_attention_bwd_args {
	enum kn_dtype dtype;
	void *dinp;       /* (B,T,3C) += */
	void *ws;         /* scratch, kn_attention_ws_bytes(B,T,C,NH) */
	const void *dout; /* (B,T,C) */
	const void *inp;  /* (B,T,3C) */
	const void *att;  /* from forward: (B,NH,T,T), bf16: logsumexp (B,NH,T) fp32 */
	const void *out;  /* (B,T,C) forward's output; read by bf16 only (may be NULL for fp32) */
	int B, T, C, NH;
};
/* Scratch bytes the attention kernels need (both directions, both backends). */
size_t kn_attention_ws_bytes(enum kn_dtype dtype, int B, int T, int C, int NH);
/* Bytes forward saves in att: B*NH*T*T*4 (fp32), B*NH*T*4 (bf16). */
size_t kn_attention_att_bytes(enum kn_dtype dtype, int B, int T, int NH);

/* ---- GELU, tanh approximation (GPT-2; torch approximate='tanh') ----------- */
struct kn_gelu_fwd_args {
	enum kn_dtype dtype;
	void *out;
	const void *inp;
	long N;
};
struct kn_gelu_bwd_args {
	enum kn_dtype dtype;
	void *dinp; /* += */
	const void *inp;
	const void *dout;
	long N;
};

/* ---- residual: out = a + b; backward da += dout, db += dout --------------- */
struct kn_residual_fwd_args {
	enum kn_dtype dtype;
	void *out;
	const void *a;
	const void *b;
	long N;
};
struct kn_residual_bwd_args {
	enum kn_dtype dtype;
	void *da; /* += */
	void *db; /* += */
	const void *dout;
	long N;
};

/* ---- softmax cross-entropy over the vocabulary -----------------------------
 * probs = softmax(logits) over V (statistics in fp32, probs stored in dtype); losses[b,t] = -log probs[b,t,targets[b,t]].
 * The mean loss is the caller's sum over losses / (B*T). */
struct kn_crossentropy_fwd_args {
	enum kn_dtype dtype;
	float *losses;      /* (B,T) fp32 */
	void *probs;        /* (B,T,V) saved for backward */
	const void *logits; /* (B,T,V) */
	const int *targets; /* (B,T) in [0,V) */
	int B, T, V;
};
/* dlogits += (probs - onehot(target)) * dloss, with dloss the gradient of the
 * objective w.r.t. each position's loss (1/(B*T) for the mean). */
struct kn_crossentropy_bwd_args {
	enum kn_dtype dtype;
	void *dlogits;     /* (B,T,V) += */
	const void *probs; /* (B,T,V) */
	const int *targets;
	float dloss;
	int B, T, V;
};

/* ---- gradient clipping by global norm (llm.c's, torch's clip_grad_norm_) --------
 * The optimizers below multiply each gradient element by kn_clip_scale(clip)
 * before their step: norms are the per-layer sums of squares of every
 * gradient of the model (kn_grad_sumsq), added in their order in double; with
 * norm = sqrt(sum), the scale is clip / norm where norm > clip, else 1 (the
 * same bits as no clipping). norms NULL: no clipping. The norms are read when
 * the kernel runs, so an earlier kernel may still be writing them at launch. */
struct kn_clip {
	const double *norms; /* nnorms doubles on the kernel's place, or NULL */
	int nnorms;
	float clip; /* > 0 */
};
#ifdef __CUDACC__
#define KN_HOST_DEVICE __host__ __device__
#else
#define KN_HOST_DEVICE
#endif
static inline KN_HOST_DEVICE float kn_clip_scale(const struct kn_clip *c)
{
	if (!c->norms)
		return 1.0f;
	double s = 0;
	for (int i = 0; i < c->nnorms; i++)
		s += c->norms[i];
	double norm = __builtin_sqrt(s);
	return norm > (double)c->clip ? (float)((double)c->clip / norm) : 1.0f;
}

/* ---- AdamW (torch.optim.AdamW semantics) -------------------------------------
 * p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 * p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps). step t counts from 1.
 * m and v are fp32 whatever dtype the parameters have. */
struct kn_adamw_args {
	enum kn_dtype dtype;
	void *params;
	const void *grads;
	float *m;
	float *v;
	long N;
	float lr, beta1, beta2, eps, weight_decay;
	int t;
	struct kn_clip clip;
};

/* ---- SGD (torch.optim.SGD semantics: dampening 0, not Nesterov) ---------------
 * d = g + wd p; with momentum: buf = momentum buf + d, d = buf; p -= lr d.
 * buf starts at zero, which is torch's first step (buf = d) exactly. Without
 * momentum there is no state and buf may be NULL. Hydra trains with this. */
struct kn_sgd_args {
	enum kn_dtype dtype;
	void *params;
	const void *grads;
	float *buf; /* fp32 momentum buffer (N floats); NULL when momentum is 0 */
	long N;
	float lr, momentum, weight_decay;
	struct kn_clip clip;
};

/* ---- mixed precision: fp32 masters, bf16 weights and gradients ------------------
 * The optimizers above on an fp32 master copy with bf16 gradients, then the
 * bf16 weights the devices compute with: g = bf16 -> fp32 (exact); the fp32
 * op on master (same order of operations, same scalars); params[i] =
 * round-to-nearest-even(master[i]) (kn_f32_to_bf16). State stays fp32. */
struct kn_adamw_mixed_args {
	float *master;     /* fp32 (N), updated */
	void *params;      /* bf16 (N), overwritten with the rounded master */
	const void *grads; /* bf16 (N) */
	float *m;
	float *v;
	long N;
	float lr, beta1, beta2, eps, weight_decay;
	int t;
	struct kn_clip clip;
};
struct kn_sgd_mixed_args {
	float *master;     /* fp32 (N), updated */
	void *params;      /* bf16 (N), overwritten with the rounded master */
	const void *grads; /* bf16 (N) */
	float *buf;        /* fp32 momentum buffer; NULL when momentum is 0 */
	long N;
	float lr, momentum, weight_decay;
	struct kn_clip clip;
};

/* ---- gradient buffers -------------------------------------------------------- */
struct kn_grad_zero_args { /* x = 0 */
	enum kn_dtype dtype;
	void *x;
	long N;
};
struct kn_grad_accumulate_args { /* dst += src */
	enum kn_dtype dtype;
	void *dst;
	const void *src;
	long N;
};
struct kn_grad_scale_args { /* x *= scale */
	enum kn_dtype dtype;
	void *x;
	float scale;
	long N;
};
/* *out = the sum of x[i]^2 (N >= 0 elements, widened to double) in a fixed
 * order: x cut in KN_SUMSQ_PARTS equal chunks, each summed into parts[k] (its
 * own order per implementation), then parts added in order. Deterministic for
 * an implementation (CPU, or CUDA on one GPU model), whatever the threads. */
#define KN_SUMSQ_PARTS 256
struct kn_grad_sumsq_args {
	enum kn_dtype dtype;
	const void *x;
	long N;
	double *parts; /* KN_SUMSQ_PARTS doubles of scratch */
	double *out;
};

/* ---- strided products and sums (fp32; the tensor-parallel block form) ----------
 * gemm: row-major C (M,N) = op(A) @ op(B) + beta * C with beta 0 or 1, then
 * C[m,n] += bias[n] when bias is set; A, B and C have row strides lda, ldb,
 * ldc (op(A) is M x K, op(B) K x N; trans_a/trans_b 1 transposes). */
struct kn_gemm_args {
	float *c;
	const float *a, *b;
	const float *bias; /* (N) or NULL */
	int trans_a, trans_b, M, N, K, lda, ldb, ldc;
	float beta;
};
/* colsum: out[n] += the sum over rows m of in[m * ld + n], n < N. */
struct kn_colsum_args {
	float *out;
	const float *in;
	int M, N, ld;
};
/* tree_sum: out[i] = the sum of n pieces (n = 1, 2 or 4) in[p * stride + i]
 * in one fixed tree: in0; in0 + in1; (in0 + in1) + (in2 + in3); then
 * + bias[i % OC] when bias is set. out may not overlap the pieces. */
struct kn_tree_sum_args {
	float *out;
	const float *in;
	const float *bias; /* (OC) or NULL */
	long stride, N;
	int n, OC;
};

/* The operation list, X(name, args struct). One line each gives, per op:
 *   void kn_<name>_cpu(const struct <args> *a);                 direct CPU call
 *   void kn_<name>_cuda(const struct <args> *a, void *stream);  SPILL_HAVE_CUDA only
 *   int  kn_<name>_check(const struct <args> *a);   0 or -EINVAL/-ENOTSUP + message
 *   struct dev_cost kn_<name>_cost(const struct <args> *a);     FLOPs and bytes
 *   extern const struct dev_kernel kn_<name>_kernel;            {name, cpu, cuda}
 *   int  kn_<name>_launch(struct dev_stream *s, const struct <args> *a);
 * _launch checks, then dev_launch()es with the cost; it returns the check's
 * error (nothing queued, nothing written) or dev_launch's. The args are copied
 * at launch; the tensors must stay valid until the kernel completes.
 * The direct calls assume a successful check (no validation). */
#define KN_OPS(X)                                          \
	X(encoder_forward, kn_encoder_fwd_args)            \
	X(encoder_backward, kn_encoder_bwd_args)           \
	X(layernorm_forward, kn_layernorm_fwd_args)        \
	X(layernorm_backward, kn_layernorm_bwd_args)       \
	X(matmul_forward, kn_matmul_fwd_args)              \
	X(matmul_backward, kn_matmul_bwd_args)             \
	X(attention_forward, kn_attention_fwd_args)        \
	X(attention_backward, kn_attention_bwd_args)       \
	X(gelu_forward, kn_gelu_fwd_args)                  \
	X(gelu_backward, kn_gelu_bwd_args)                 \
	X(residual_forward, kn_residual_fwd_args)          \
	X(residual_backward, kn_residual_bwd_args)         \
	X(crossentropy_forward, kn_crossentropy_fwd_args)  \
	X(crossentropy_backward, kn_crossentropy_bwd_args) \
	X(adamw, kn_adamw_args)                            \
	X(sgd, kn_sgd_args)                                \
	X(adamw_mixed, kn_adamw_mixed_args)                \
	X(sgd_mixed, kn_sgd_mixed_args)                    \
	X(grad_zero, kn_grad_zero_args)                    \
	X(grad_accumulate, kn_grad_accumulate_args)        \
	X(grad_scale, kn_grad_scale_args)                  \
	X(grad_sumsq, kn_grad_sumsq_args)                  \
	X(gemm, kn_gemm_args)                              \
	X(colsum, kn_colsum_args)                          \
	X(tree_sum, kn_tree_sum_args)

#define KN_DECLARE_OP_(name, args)                                 \
	struct args;                                               \
	void kn_##name##_cpu(const struct args *a);                \
	void kn_##name##_cuda(const struct args *a, void *stream); \
	int kn_##name##_check(const struct args *a) SP_MUST_CHECK; \
	struct dev_cost kn_##name##_cost(const struct args *a);    \
	extern const struct dev_kernel kn_##name##_kernel;         \
	int kn_##name##_launch(struct dev_stream *s, const struct args *a) SP_MUST_CHECK;
KN_OPS(KN_DECLARE_OP_)
#undef KN_DECLARE_OP_

/* ---- CUDA support (SPILL_HAVE_CUDA builds only) ---------------------------------
 * The cuBLAS handle used for a stream: one handle per (device, stream), created on
 * first use and kept in a small cache (KN_CUBLAS_CACHE entries, then -ENOSPC).
 * Thread-safe. Returns 0 and *out (a cublasHandle_t), or -EIO with cuBLAS's error. */
#define KN_CUBLAS_CACHE 64
int kn_cuda_cublas_handle(void *stream, void **out) SP_MUST_CHECK;
/* Destroys every cached handle (call after the streams are done). */
void kn_cuda_cublas_release(void);
/* The last error seen by a CUDA kernel launcher on this thread (0 if none):
 * launchers return void (dev_kernel's shape), so they park errors here. */
int kn_cuda_last_error(void);

/* ---- layer descriptors for the task graph ------------------------------------ */
enum kn_layer_kind {
	KN_LAYER_EMBEDDING, /* token + position embedding: params wte (V,C), wpe (maxT,C) */
	KN_LAYER_BLOCK,     /* one GPT-2 transformer block (pre-LN, attention + MLP 4C) */
	KN_LAYER_HEAD,      /* final layernorm + LM head tied to wte + softmax cross-entropy */
	KN_LAYER_KINDS
};

/* What one layer (a task graph node) holds and costs, at a microbatch of B
 * sequences of T tokens. A layer's memory is five contiguous ranges the vmm can
 * place independently (struct kn_layer_mem): params, grads, optim (AdamW m then
 * v, fp32), stash (activations forward leaves for backward) and work (scratch
 * used only during one forward or backward call). Besides its stash, backward
 * reads the layer's input (needs_input): the previous layer's output (or the
 * token ids), which the caller keeps alive until then. With recomputation the
 * stash need not survive between forward and backward: backward is preceded by
 * forward again on the kept input (recompute_stash_bytes is what must survive
 * then: 0, the input alone suffices). */
struct kn_layer_desc {
	enum kn_layer_kind kind;
	const char *name;
	uint64_t param_bytes;
	uint64_t grad_bytes;
	uint64_t optim_bytes;           /* AdamW m and v (fp32): kn_optim_state_bytes */
	uint64_t stash_bytes;           /* activations forward keeps for backward */
	uint64_t recompute_stash_bytes; /* what must survive with recomputation (0) */
	uint64_t input_bytes;           /* the input (tokens, or the previous output) */
	uint64_t output_bytes;          /* output: block activations, or head losses */
	uint64_t work_bytes;            /* scratch of one forward or backward call */
	int needs_input;                /* backward reads the input (all three kinds) */
	double fwd_flops;
	double bwd_flops;
	/* Names of the stashed activations, comma-separated, in stash order. */
	const char *stash_names;
};

/* Model hyper-parameters (llm.c's GPT2Config). */
struct kn_model_config {
	int maxT; /* position table length */
	int V;    /* vocabulary */
	int L;    /* layers */
	int NH;   /* heads */
	int C;    /* channels */
	enum kn_dtype dtype;
	/* 1: blocks compute in the tensor-parallel form (below), the numerics
	 * every --tensor-parallel t shares; 0: llm.c's one GEMM per product */
	int tp_form;
	/* > 1: a block's ranges are one member's shard of that many (tp form):
	 * kn_layer_describe, _update and _zero_grad size the shard; its passes
	 * run through kn_block_tp_forward/backward (kn_layer_forward refuses) */
	int tp_shards;
};

/* Fills *out for a layer of this kind at microbatch (B,T). The embedding's
 * parameters are shared with the head (weight tying): the head reports wte as 0
 * parameter bytes but reads it (the caller ties the two). Returns 0, or -EINVAL for
 * bad shapes (same rules as the kernels' checks). */
int kn_layer_describe(const struct kn_model_config *cfg, enum kn_layer_kind kind, int B, int T,
                      struct kn_layer_desc *out) SP_MUST_CHECK;
/* Checks a model config: positive sizes, NH divides C. Returns 0 or -EINVAL. */
int kn_model_config_check(const struct kn_model_config *cfg) SP_MUST_CHECK;

/* The parameter tensors of one block in the order kn_block_param_sizes lists
 * them (llm.c's order): ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b,
 * fcw, fcb, fcprojw, fcprojb. */
#define KN_BLOCK_NPARAMS 12
/* Element counts of a block's parameters. */
void kn_block_param_sizes(int C, size_t out[KN_BLOCK_NPARAMS]);

/* ---- running a layer ------------------------------------------------------------
 * The memory of one layer, each range as kn_layer_describe sizes it, on the
 * device the layer runs on. params layout: embedding wte (V,C) then wpe
 * (maxT,C); block its 12 tensors (kn_block_param_sizes order); head lnfw, lnfb.
 * grads and optim (m, then v) mirror params. The head also reads wte and adds
 * to dwte (weight tying): pass the embedding's params/grads as tied/tied_grad. */
struct kn_layer_mem {
	void *params;
	void *grads;
	float *optim;
	void *stash;
	void *work;
	const void *tied;
	void *tied_grad;
};

/* What the layer functions take besides the memory.
 *   in       token ids (int32, (B,T)) for the embedding, else the previous
 *            layer's output (B,T,C); forward reads it, backward reads it again.
 *   out      forward's output: (B,T,C), or the head's per-position fp32 losses (B,T).
 *   targets  the head's target ids (B,T).
 *   dout     backward: the gradient of out (embedding, block); the head ignores
 *            it, its objective being the losses scaled by dloss.
 *   din      backward ADDS the gradient of in here (block, head; zero it
 *            first); unused by the embedding.
 *   dloss    the head's gradient per position loss (1/(B*T) for the mean). */
struct kn_layer_io {
	const void *in;
	void *out;
	const int *targets;
	const void *dout;
	void *din;
	float dloss;
};

/* Forward, backward and update of one layer, as a sequence of kernels. The
 * _cpu variants call the CPU kernels on this thread; the _launch variants queue
 * them on stream s (any backend) and return once queued. Parameter gradients
 * accumulate (zero them with kn_layer_zero_grad at the start of a step).
 * Returns 0, or -EINVAL (bad config/shape, a NULL range the call needs) with
 * nothing run, or a launch's error. */
int kn_layer_forward_cpu(const struct kn_model_config *cfg, enum kn_layer_kind kind, int B, int T,
                         const struct kn_layer_mem *mem,
                         const struct kn_layer_io *io) SP_MUST_CHECK;
int kn_layer_backward_cpu(const struct kn_model_config *cfg, enum kn_layer_kind kind, int B, int T,
                          const struct kn_layer_mem *mem,
                          const struct kn_layer_io *io) SP_MUST_CHECK;
int kn_layer_forward_launch(struct dev_stream *s, const struct kn_model_config *cfg,
                            enum kn_layer_kind kind, int B, int T, const struct kn_layer_mem *mem,
                            const struct kn_layer_io *io) SP_MUST_CHECK;
int kn_layer_backward_launch(struct dev_stream *s, const struct kn_model_config *cfg,
                             enum kn_layer_kind kind, int B, int T, const struct kn_layer_mem *mem,
                             const struct kn_layer_io *io) SP_MUST_CHECK;

/* The same on a cudaStream_t directly, without the device layer (benches,
 * tests): kernels run k->cuda on stream (NULL, the default stream, is refused);
 * returns the first CUDA error seen (kn_cuda_last_error), -ENODEV without CUDA. */
int kn_layer_forward_cuda(void *stream, const struct kn_model_config *cfg, enum kn_layer_kind kind,
                          int B, int T, const struct kn_layer_mem *mem,
                          const struct kn_layer_io *io) SP_MUST_CHECK;
int kn_layer_backward_cuda(void *stream, const struct kn_model_config *cfg, enum kn_layer_kind kind,
                           int B, int T, const struct kn_layer_mem *mem,
                           const struct kn_layer_io *io) SP_MUST_CHECK;

/* The optimizers a layer update runs. Their state per parameter (fp32):
 * AdamW m then v (8 bytes), SGD its momentum buffer (4 bytes, none without
 * momentum). */
enum kn_optimizer { KN_ADAMW = 0, KN_SGD = 1 };
/* Bytes of optimizer state for nparams parameters. */
uint64_t kn_optim_state_bytes(enum kn_optimizer kind, float momentum, uint64_t nparams);

/* Optimizer hyper-parameters; weight decay applies to matrices and embeddings
 * only (wte, wpe, qkvw, attprojw, fcw, fcprojw), as GPT-2 trains. AdamW uses
 * beta1, beta2, eps and t; SGD uses momentum. mem->optim holds the state
 * (kn_optim_state_bytes of the layer's parameters; NULL when that is 0). */
struct kn_optim_hparams {
	float lr, beta1, beta2, eps, weight_decay;
	int t; /* step, from 1 */
	enum kn_optimizer kind;
	float momentum;
	struct kn_clip clip; /* norms NULL: none */
};
int kn_layer_update_cpu(const struct kn_model_config *cfg, enum kn_layer_kind kind,
                        const struct kn_layer_mem *mem,
                        const struct kn_optim_hparams *h) SP_MUST_CHECK;
int kn_layer_update_launch(struct dev_stream *s, const struct kn_model_config *cfg,
                           enum kn_layer_kind kind, const struct kn_layer_mem *mem,
                           const struct kn_optim_hparams *h) SP_MUST_CHECK;
/* Mixed-precision update of a bf16 layer (cfg->dtype KN_BF16): mem->params and
 * mem->grads are bf16, mem->optim holds the fp32 master weights (param count
 * floats, the params' layout) followed by the optimizer state as above; each
 * tensor's master and state are updated (kn_adamw_mixed / kn_sgd_mixed, the
 * same decay rules) and its bf16 params rewritten from the master. Returns 0,
 * -EINVAL (not bf16, NULL ranges, bad hparams) with nothing run, or a launch's
 * error. */
int kn_layer_update_mixed_cpu(const struct kn_model_config *cfg, enum kn_layer_kind kind,
                              const struct kn_layer_mem *mem,
                              const struct kn_optim_hparams *h) SP_MUST_CHECK;
int kn_layer_update_mixed_launch(struct dev_stream *s, const struct kn_model_config *cfg,
                                 enum kn_layer_kind kind, const struct kn_layer_mem *mem,
                                 const struct kn_optim_hparams *h) SP_MUST_CHECK;
int kn_layer_zero_grad_cpu(const struct kn_model_config *cfg, enum kn_layer_kind kind,
                           const struct kn_layer_mem *mem) SP_MUST_CHECK;
int kn_layer_zero_grad_launch(struct dev_stream *s, const struct kn_model_config *cfg,
                              enum kn_layer_kind kind,
                              const struct kn_layer_mem *mem) SP_MUST_CHECK;
int kn_layer_update_cuda(void *stream, const struct kn_model_config *cfg, enum kn_layer_kind kind,
                         const struct kn_layer_mem *mem,
                         const struct kn_optim_hparams *h) SP_MUST_CHECK;
int kn_layer_zero_grad_cuda(void *stream, const struct kn_model_config *cfg,
                            enum kn_layer_kind kind, const struct kn_layer_mem *mem) SP_MUST_CHECK;

/* ---- tensor parallelism: a block split over t devices (Megatron) -----------------
 * With cfg->tp_form, a block computes every product in KN_TP_CHUNKS fixed
 * chunks (NH/4 heads; C of the MLP's 4C columns), whatever t:
 *   column-parallel QKV and FC: per chunk its own GEMMs (QKV: q, k and v
 *   apiece), its bias, then attention over the chunk's heads and GELU;
 *   row-parallel projections (attention's and the MLP's): one partial product
 *   per chunk, summed ((c0 + c1) + (c2 + c3)) (kn_tree_sum), then the bias;
 *   backward the same way: the QKV and FC input gradients are chunk partials in
 *   that tree; every parameter gradient is the chunk's own.
 * Shard r of t (t = 1, 2, 4) holds chunks r*4/t .. (r+1)*4/t - 1 and runs the
 * same GEMMs on them. A pass runs in KN_TP_SEGS segments: segments 0 and 1 end
 * with the member's partial (its chunks' tree level) in slot r of the work's
 * t slots (kn_block_tp_slots); between segments the caller copies slot r of
 * every member into slot r of every other member (t = 1: nothing to copy);
 * segments 1 and 2 begin with the tree over the t slots. So the t members give
 * the full block's bits in tp form, on every t (the one assumption: a GEMM's
 * result does not depend on its operands' row strides or addresses).
 * LayerNorms, residuals and the projections' biases are replicated: every
 * member computes them and their gradients, equal on all members.
 * A shard's parameters are the block's 12 tensors in their order, cut:
 *   qkvw: q, k and v rows of its heads (3 x C/t rows), qkvb likewise;
 *   attprojw: its C/t input columns (C x C/t); fcw, fcb: its 4C/t rows;
 *   fcprojw: its 4C/t input columns (C x 4C/t); ln1, ln2, attprojb, fcprojb:
 *   whole. t = 1's shard is llm.c's layout.
 * fp32 only (bf16 returns -ENOTSUP). */
#define KN_TP_CHUNKS 4
#define KN_TP_SEGS   3
/* 0, or -EINVAL naming what t needs (t in 1, 2, 4; NH and C divisible by 4)
 * or -ENOTSUP for bf16. */
int kn_block_tp_check(const struct kn_model_config *cfg, int t) SP_MUST_CHECK;
/* Element counts of a shard's 12 tensors (t = 1: kn_block_param_sizes). */
void kn_block_shard_param_sizes(int C, int t, size_t out[KN_BLOCK_NPARAMS]);
/* A shard's descriptor: params, grads, optim, stash and work of one member
 * (work includes the t slots), FLOPs of one member. */
int kn_block_tp_describe(const struct kn_model_config *cfg, int t, int B, int T,
                         struct kn_layer_desc *out) SP_MUST_CHECK;
/* Slot 0 of the t exchange slots in a member's work range; slot i is
 * B*T*C floats further. */
float *kn_block_tp_slots(const struct kn_model_config *cfg, int t, int B, int T, void *work);
/* Copies shard r of t between the full block's tensors (llm.c layout) and the
 * shard's (elements of esize bytes): to_shard 1 full -> shard, 0 shard -> full
 * (the replicated tensors too). */
void kn_block_shard_copy(int C, int t, int r, size_t esize, void *full, void *shard, int to_shard);
/* Segment seg (0 .. KN_TP_SEGS-1) of member r's forward or backward (mem: the
 * shard's ranges; io as kn_layer_forward/backward's: in, out, dout, din are
 * whole (B,T,C) tensors, replicated). Forward writes io->out in segment 2;
 * backward adds to io->din in segments 1 and 2. Returns 0, -EINVAL/-ENOTSUP
 * with nothing run, or a launch's error. */
int kn_block_tp_forward_cpu(const struct kn_model_config *cfg, int t, int r, int seg, int B, int T,
                            const struct kn_layer_mem *mem,
                            const struct kn_layer_io *io) SP_MUST_CHECK;
int kn_block_tp_backward_cpu(const struct kn_model_config *cfg, int t, int r, int seg, int B, int T,
                             const struct kn_layer_mem *mem,
                             const struct kn_layer_io *io) SP_MUST_CHECK;
int kn_block_tp_forward_launch(struct dev_stream *s, const struct kn_model_config *cfg, int t,
                               int r, int seg, int B, int T, const struct kn_layer_mem *mem,
                               const struct kn_layer_io *io) SP_MUST_CHECK;
int kn_block_tp_backward_launch(struct dev_stream *s, const struct kn_model_config *cfg, int t,
                                int r, int seg, int B, int T, const struct kn_layer_mem *mem,
                                const struct kn_layer_io *io) SP_MUST_CHECK;

#endif

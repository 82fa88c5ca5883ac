/* spill.h — the public API of libspill: train models whose state is larger than
 * the GPUs' memory, through a virtual memory over GPU, pinned host memory and
 * disk, and fine-grained task schedules (Harmony, Hydra).
 *
 * Three levels, each built on the one below:
 *   1. raw task graphs: memory objects and tasks that read and write them, run
 *      by the executor (late binding, prefetch, Belady eviction from the known
 *      order); a task's callback launches work on the stream it is given;
 *   2. models of layers: the built-in GPT-2 layers, or your own (sizes plus
 *      forward/backward/update callbacks), trained under a plan (a schedule,
 *      packs, microbatch, group) or "auto";
 *   3. the trainer (the `spill train` command, built on level 2).
 * Conventions: functions return 0 or a negative errno; spill_last_error()
 * says what went wrong (per thread). Handles are opaque. A context and what
 * belongs to it are used by one thread at a time. Every SPILL_* environment
 * variable gives a default (see `spill params`); options given here win.
 * Link with `pkg-config --cflags --libs spill`.
 */
#ifndef SPILL_H
#define SPILL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SPILL_API __attribute__((visibility("default")))

#define SPILL_VERSION_STRING "0.2.0"

/* The last error of this thread, or "" (never NULL). */
SPILL_API const char *spill_last_error(void);
SPILL_API const char *spill_version(void);

/* ---- context ----------------------------------------------------------------- */

struct spill_ctx;

/* Zero or NULL fields take the SPILL_* environment or the built-in default. */
struct spill_options {
	const char *backend;   /* "cuda", "host" (emulated GPUs), "model" (virtual time) */
	int devices;           /* devices to use */
	uint64_t device_mem;   /* host backend: capacity of each emulated GPU */
	uint64_t budget;       /* the vmm's bytes per device (0: 90% of the device) */
	uint64_t host_mem;     /* pinned host pool */
	const char *disk_path; /* disk tier directory ("": none) */
	const char *profile;   /* device profile (model backend; host links) */
	int threads;           /* CPU kernel threads */
	int prefetch;          /* tasks whose inputs are prefetched ahead (-1: none) */
	int late_binding;      /* 1 on, -1 off, 0 default (on) */
};

SPILL_API int spill_open(const struct spill_options *opt, struct spill_ctx **out);
/* Waits for all work and frees everything of the context. NULL is ok. */
SPILL_API void spill_close(struct spill_ctx *ctx);
SPILL_API int spill_device_count(const struct spill_ctx *ctx);
SPILL_API const char *spill_backend_name(const struct spill_ctx *ctx);

/* ---- streams and kernels (what callbacks launch on) ------------------------------ */

struct spill_stream;

/* Queues a kernel on s: cpu(args) runs on the host and emulated backends,
 * cuda(args, cudaStream_t) launches on a GPU; args (size bytes, up to 4 KiB)
 * is copied. flops and bytes are its cost on the model backend. Returns 0,
 * -ENOTSUP when the backend needs the implementation that is NULL. */
SPILL_API int spill_launch(struct spill_stream *s, void (*cpu)(const void *args),
                           void (*cuda)(const void *args, void *cuda_stream), const void *args,
                           size_t size, double flops, double bytes);
/* The backend's native stream: a cudaStream_t on cuda, NULL otherwise. */
SPILL_API void *spill_stream_native(struct spill_stream *s);
/* The stream's device (>= 0), or -1 for the CPU. */
SPILL_API int spill_stream_device(struct spill_stream *s);

/* ---- level 1: raw task graphs ------------------------------------------------------ */

/* What an object holds; swap volume is accounted per kind. */
enum spill_kind {
	SPILL_KIND_WEIGHT,
	SPILL_KIND_GRAD,
	SPILL_KIND_OPTIM,
	SPILL_KIND_STASH,
	SPILL_KIND_ACTIVATION,
	SPILL_KIND_INPUT,
	SPILL_KIND_WORKSPACE
};

enum spill_access {
	SPILL_READ = 1,      /* reads the bytes */
	SPILL_WRITE = 2,     /* reads and writes them */
	SPILL_OVERWRITE = 3, /* writes every byte: nothing is brought in */
};

#define SPILL_OBJ_OUTPUT 1u /* read after the run: never discarded as dead */
#define SPILL_OBJ_INPUT  2u /* rewritten by the host before each run */
#define SPILL_ANY_DEVICE (-1)
#define SPILL_CPU        (-2) /* a task on the host CPU, its objects in host memory */

struct spill_graph;
struct spill_launch;

/* A task's callback: queue the task's work on spill_launch_stream(l) with the
 * pointers spill_launch_ptr(l, i) (its refs in order, on its device); do not
 * wait for it. Return 0 or a negative errno (stops the run). */
typedef int (*spill_task_fn)(const struct spill_launch *l, void *arg);

struct spill_ref {
	int obj;
	enum spill_access access;
};

struct spill_task_desc {
	const char *name;
	int device; /* a device, SPILL_ANY_DEVICE (bound at run time), or SPILL_CPU */
	const struct spill_ref *refs;
	int nrefs;
	const int *deps; /* earlier tasks that must come first */
	int ndeps;
	spill_task_fn fn;
	void *arg;
	double flops; /* for reports */
};

SPILL_API int spill_graph_create(struct spill_ctx *ctx, struct spill_graph **out);
SPILL_API void spill_graph_destroy(struct spill_graph *g);
/* Adds an object of bytes (> 0); *id numbers it from 0. flags: SPILL_OBJ_*. */
SPILL_API int spill_graph_obj(struct spill_graph *g, size_t bytes, enum spill_kind kind,
                              const char *name, unsigned flags, int *id);
/* Adds a task after the ones already added (tasks run in a topological order:
 * dependencies are earlier tasks). Each object appears once in refs. */
SPILL_API int spill_graph_task(struct spill_graph *g, const struct spill_task_desc *d, int *id);
/* Copies bytes between host memory and an object (through its host copy).
 * Objects are created at the first write or run. */
SPILL_API int spill_graph_write(struct spill_graph *g, int obj, const void *src, size_t bytes);
SPILL_API int spill_graph_read(struct spill_graph *g, int obj, void *dst, size_t bytes);
/* Runs the tasks once per iteration. Returns 0, -ENOMEM when a task does not
 * fit its device (the message names it and the smallest budget that would),
 * or a callback's error. */
SPILL_API int spill_graph_run(struct spill_graph *g, int iterations);

SPILL_API struct spill_stream *spill_launch_stream(const struct spill_launch *l);
SPILL_API void *spill_launch_ptr(const struct spill_launch *l, int i);
SPILL_API int spill_launch_device(const struct spill_launch *l);
SPILL_API int spill_launch_iteration(const struct spill_launch *l);

/* ---- level 2: models of layers ------------------------------------------------------ */

struct spill_model;

/* What a layer callback gets (pointers on the device, or the host for the CPU). */
struct spill_layer_call {
	struct spill_stream *stream;
	int batch; /* samples in this call */
	void *params, *grads;
	float *optim;
	void *stash, *work;
	const void *in;      /* the input (the first layer: the model's input) */
	void *out;           /* forward: the output; the last layer: its losses (fp32) */
	const void *dout;    /* backward: the gradient of out (not for the last layer) */
	void *din;           /* backward: ADD the gradient of in here; NULL for layer 0 */
	const void *targets; /* the last layer: targets */
	float dloss;         /* the last layer's backward: d objective / d loss value */
	int step;            /* update: from 1 */
	float lr, beta1, beta2, eps, weight_decay;
	void *arg;
	const char *optimizer; /* update: the model's, "adamw" or "sgd" */
	float momentum;        /* update: SGD's */
	/* update with the model's grad_clip > 0: every layer's gradient sum of
	 * squares (nnorms doubles on the call's place, ready when the work you
	 * queue runs); scale your gradient by grad_clip / sqrt(their sum) where
	 * that is below 1, as the built-in optimizers do. NULL without clipping. */
	const double *norms;
	int nnorms;
	float grad_clip;
};

typedef int (*spill_layer_fn)(const struct spill_layer_call *c);

struct spill_layer_desc {
	const char *name;
	size_t param_bytes;      /* fp32 parameters */
	size_t optim_bytes;      /* 0: the built-in optimizer's state (AdamW: m and v, 2 x
	                       param_bytes; SGD: param_bytes with momentum, else none) */
	size_t stash_per_sample; /* kept from forward to backward */
	size_t out_per_sample;   /* the output (the last layer: loss_floats fp32) */
	size_t work_per_sample, work_bytes; /* scratch during one call */
	double fwd_flops_per_sample, bwd_flops_per_sample;
	spill_layer_fn forward, backward;
	spill_layer_fn update; /* NULL: the model's optimizer over the parameters */
	/* fills params (host memory) for seed; NULL: zeros */
	int (*init)(void *params, size_t bytes, uint64_t seed, void *arg);
	void *arg;
};

/* Fills n samples from sample0 of iteration iter: in and targets are host
 * memory of n * in_per_sample and n * target_per_sample bytes. */
typedef int (*spill_data_fn)(void *arg, int iter, int sample0, int n, void *in, void *targets);

struct spill_model_desc {
	const char *name;
	const struct spill_layer_desc *layers; /* the last one computes the loss */
	int nlayers;
	int batch; /* samples per step */
	size_t in_per_sample, target_per_sample;
	int loss_floats; /* fp32 losses per sample the last layer outputs */
	spill_data_fn data;
	void *data_arg;
	spill_data_fn eval_data; /* validation batches (spill_model_eval), with data_arg */
	float lr, beta1, beta2, eps, weight_decay; /* 0: 3e-4, 0.9, 0.95, 1e-8, 0 */
	/* > 0: clip the gradients to this global L2 norm before each update (the
	 * norm is per layer, added in layer order: the same under every plan; the
	 * updates then wait for the whole backward pass). 0: none. */
	float grad_clip;
	uint64_t seed;
	const char *optimizer; /* NULL or "adamw"; "sgd" (torch.optim.SGD, dampening 0) */
	float momentum;        /* SGD: 0 (none, no state) to < 1 */
};

struct spill_gpt_config {
	int layers, heads, channels, vocab, seq, max_seq; /* max_seq 0: seq */
	int batch;                                        /* sequences per step */
	spill_data_fn data;                               /* NULL: synthetic learnable sequences */
	void *data_arg;
	spill_data_fn eval_data; /* validation batches (spill_model_eval), with data_arg */
	float lr;
	uint64_t seed;
	const char *optimizer; /* NULL or "adamw"; "sgd" */
	float momentum;        /* SGD */
	/* NULL or "fp32"; "bf16": mixed precision (bf16 weights, activations and
	 * gradients; fp32 master weights and optimizer state; fp32 loss) */
	const char *precision;
	float weight_decay; /* AdamW's decoupled decay on the matrices and embeddings */
	float grad_clip;    /* as spill_model_desc's */
};

struct spill_plan {
	const char *schedule; /* "auto" (NULL), "dp-swap", "gpipe", "1f1b", "harmony-dp",
	                         "harmony-pp", "interleaved", "2bw" (PipeDream-2BW: two
	                         weight versions, the update delayed by one step; a
	                         flush every step here, as spill_model_step steps
	                         one at a time: spill train --flush-every overlaps
	                         steps) */
	int devices;          /* 0: all of the context */
	int microbatch;       /* samples per microbatch (0: auto) */
	int group;            /* microbatches per group, harmony modes (0: 1) */
	int packs;            /* 0: greedy packing to the budget; else that many packs */
	int update_on_cpu;    /* AdamW on the host copies */
	int recompute;        /* backward runs its pack's forward again instead of
	                         keeping the stash (less memory, more compute) */
};

SPILL_API int spill_model_create(struct spill_ctx *ctx, const struct spill_model_desc *d,
                                 struct spill_model **out);
SPILL_API int spill_model_gpt(struct spill_ctx *ctx, const struct spill_gpt_config *cfg,
                              struct spill_model **out);
/* Chooses (or checks) the plan and builds the model's program; the weights
 * start from the seed. Until a plan is set, spill_model_step uses "auto".
 * Returns 0, -EINVAL naming what does not fit (batch, packs, group), -ENOMEM
 * naming the smallest budget when no plan fits. */
SPILL_API int spill_model_plan(struct spill_model *m, const struct spill_plan *p);
/* The plan in use, as text ("harmony-dp, 4 packs, microbatch 2, group 4, 2 devices"). */
SPILL_API const char *spill_model_plan_name(struct spill_model *m);
/* One training step; *loss (may be NULL) gets the mean loss (NAN on model). */
SPILL_API int spill_model_step(struct spill_model *m, double *loss);
/* The learning rate of the following steps (> 0; a schedule calls it before
 * each step). Returns 0 or -EINVAL. */
SPILL_API int spill_model_set_lr(struct spill_model *m, float lr);
/* The model's layers (GPT-2: the embedding, the blocks, the head) and the
 * bytes of layer l's parameters as spill_model_read_params gives them (0 for
 * a bad layer): fp32, in a bf16 model its fp32 master weights. */
SPILL_API int spill_model_layers(const struct spill_model *m);
SPILL_API size_t spill_model_param_bytes(const struct spill_model *m, int layer);
/* Copies layer l's parameters (bytes = spill_model_param_bytes) to host memory. */
SPILL_API int spill_model_read_params(struct spill_model *m, int layer, void *dst, size_t bytes);
/* A layer's training state, for checkpoints and pretrained weights: its
 * parameters (as spill_model_read_params gives them) or its optimizer state
 * (AdamW: m then v; SGD: its momentum buffer; fp32). Read from wherever the
 * current copy is; written into every replica (in bf16 the masters, and the
 * bf16 weights rounded from them). bytes must be spill_model_state_bytes.
 * Plans the model ("auto") first if it has no plan. Returns 0 or -EINVAL. */
/* Under "2bw" the next step's passes read the older weight version,
 * SPILL_STATE_PARAMS_PREV (0 bytes in other schedules); writing PARAMS sets
 * both versions (as at step 0), so write PARAMS_PREV after it: the three in
 * enum order resume a 2bw run bit for bit. */
enum spill_state { SPILL_STATE_PARAMS, SPILL_STATE_OPTIM, SPILL_STATE_PARAMS_PREV };
SPILL_API size_t spill_model_state_bytes(const struct spill_model *m, int layer,
                                         enum spill_state which);
SPILL_API int spill_model_read_state(struct spill_model *m, int layer, enum spill_state which,
                                     void *dst, size_t bytes);
SPILL_API int spill_model_write_state(struct spill_model *m, int layer, enum spill_state which,
                                      const void *src, size_t bytes);
/* Steps done (the optimizer's step count and the data position of the next
 * step): set it after writing a checkpoint's state to resume it. */
SPILL_API int spill_model_set_step(struct spill_model *m, int step);
/* Forward only on validation batch index (the model's eval_data): its mean
 * loss; nothing of the training state changes. -EINVAL without eval_data. */
SPILL_API int spill_model_eval(struct spill_model *m, int index, double *loss);
SPILL_API void spill_model_destroy(struct spill_model *m);

/* ---- accounting ------------------------------------------------------------------- */

enum spill_link {
	SPILL_LINK_H2D,
	SPILL_LINK_D2H,
	SPILL_LINK_P2P,
	SPILL_LINK_H2DISK,
	SPILL_LINK_DISK2H,
	SPILL_LINKS
};

struct spill_stats {
	uint64_t bytes[SPILL_LINKS][7]; /* per link and spill_kind */
	uint64_t total[SPILL_LINKS];
	uint64_t evictions, prefetches, discards, tasks, late_bound, collective_bytes;
	double seconds; /* on the backend's clock since open (virtual on model) */
};
SPILL_API int spill_stats(struct spill_ctx *ctx, struct spill_stats *out);
/* The swap-volume table (link x kind) and counters, as text or JSON. */
SPILL_API void spill_stats_print(struct spill_ctx *ctx, FILE *f, int json);

#ifdef __cplusplus
}
#endif

#endif

/* runtime/runtime.h — the executor and what it runs (prefix rt_).
 *
 * A context (struct rt_ctx) owns one device backend, the vmm over it, a compute
 * stream per device and a CPU stream. A program (struct rt_prog) is a list of
 * memory objects and tasks in a topological order; each task reads and writes
 * objects (READ, WRITE = read-modify-write, OVERWRITE), may be tied to a
 * device or bound late, depends on earlier tasks, and launches its kernels
 * through a callback on the stream it is given. rt_exec_run() runs one
 * iteration of a program: event-driven on one host thread (issue what is
 * ready, wait for the first completion, repeat), with a prefetch window per
 * device, Belady hints from the known order, discards of dead contents and
 * deferred actions at completion. The same code runs on the cuda, host and
 * model backends; on the model backend it is deterministic in virtual time.
 * Models of layers (rt_model_*) turn a layer list and a plan into a program
 * through the taskgraph. Errors: 0 or -errno with sp_last_error().
 * Thread-safety: a context and its programs are used by one thread at a time.
 */
#ifndef SP_RUNTIME_RUNTIME_H
#define SP_RUNTIME_RUNTIME_H

#include "common/error.h"
#include "common/params.h"
#include "device/device.h"
#include "kernels/kernels.h"
#include "taskgraph/taskgraph.h"
#include "vmm/vmm.h"

#include <stdint.h>
#include <stdio.h>

/* ---- context -------------------------------------------------------------------- */

struct rt_exec_config {
	int lookahead;       /* tasks per device whose inputs are prefetched (0 = none) */
	int window;          /* tasks issued ahead of completion per device (>= 1) */
	int late_binding;    /* 1: tasks without a fixed device are bound at run time */
	int steal_eager;     /* 1: a device takes over a busy one's chain whenever the
	                        backlogs allow (tests of exactness under late binding);
	                        0: only when the chain's compute outweighs moving the
	                        gradients it adds into there and back */
	int eager_writeback; /* 1: updated weights and optimizer state go to the host early */
	int discard;         /* 1: dead contents are discarded, never written back */
	int hints;           /* 1: Belady next-use hints from the order (0: LRU) */
	int place_hints;     /* 1: hints per device (next use on that device) */
	int ordered;         /* 1: issue strictly in program order, each task's
	                        transfers landed before the next task's acquires: every
	                        vmm decision as the taskgraph's simulator replays it,
	                        to check measured volume against predicted (slower) */
};

struct rt_config {
	struct dev_config dev;
	struct vmm_config vmm;
	struct rt_exec_config exec;
	int threads;     /* CPU kernel threads (SPILL_THREADS), applied at rt_open */
	int plan_trials; /* auto: finalists simulated on the model backend (SPILL_PLAN_TRIALS) */
};

/* Fills cfg from the SPILL_* table (device, vmm, executor and threads).
 * Returns 0 or -EINVAL naming the bad value. */
int rt_config_from_params(const struct sp_params *p, struct rt_config *cfg) SP_MUST_CHECK;
/* The executor defaults (lookahead 3, window 2, late binding, discards, hints;
 * no eager write-back). */
struct rt_exec_config rt_exec_defaults(void);

/* Per-run counters of the runtime's own (beside the vmm's). */
struct rt_stats {
	uint64_t tasks, iterations;
	uint64_t late_bound;     /* unconstrained tasks that ran off their predicted device */
	uint64_t collective_p2p; /* bytes moved by all-reduce (not through the vmm) */
	uint64_t internode;      /* bytes this node sent to other nodes (all-reduce,
	                            losses); simulated: a node inside the chain */
	uint64_t loss_readback;  /* bytes of losses copied to the host */
	uint64_t tp_bytes;       /* tensor parallelism: partial sums exchanged (peer copies) */
	uint64_t prefetches;     /* vmm_prefetch calls made ahead of tasks */
	uint64_t discards;       /* dead objects discarded */
	uint64_t eager_writebacks;
	double busy_s[DEV_MAX + 1]; /* per device (and the CPU): time its tasks ran */
};

struct rt_ctx {
	struct rt_config cfg;
	struct dev_ctx *dev;
	struct vmm *vmm;
	int ndev;
	int data; /* 1 when memory holds bytes (cuda, host); 0 on the model backend */
	struct dev_stream *compute[DEV_MAX];
	struct dev_stream *comm[DEV_MAX]; /* collectives, beside the compute streams */
	struct dev_stream *cpu;           /* DEV_HOST: CPU kernels (update on the CPU) */
	struct rt_stats st;
	void *coll;                   /* collectives state (collective.c) */
	const struct rt_nodes *nodes; /* several processes (rt_set_nodes); NULL: one */
};

/* ---- nodes: several processes, data parallel across them ------------------------
 * A run over several processes (mpirun, one per node) gives each context the
 * transport between them. Each process runs its own plan on its own devices
 * over its share of the batch (rt_model.sample0 and batch_total), and every
 * pack's gradient is added over all of them in DESIGN §9.1's order: node 0's
 * replicas in rank order, then node 1's, ... — a chain through the nodes, in
 * chunks so it pipelines, the sum handed back down it — so N nodes give the
 * bits of one process with the same replicas (N*d devices of a data-parallel
 * plan; N for pipelines, a replica per node) on the host backend. The
 * loss is summed along the same chain. The taskgraph gives every pack an
 * all-reduce (tg_plan.nodes) on every schedule.
 * send and recv are blocking, tagged (0..32767; the runtime's own traffic,
 * beside nothing else of the caller's), callable from several threads at
 * once, and return 0; a failure ends the process (a run that lost a node
 * cannot go on). Both NULL with size > 1: a simulated multi-node run on the
 * model backend (spill sim --nodes), which charges the chain's traffic to
 * the profile's inter-node link (net, net_latency) as a node in its middle. */
struct rt_nodes {
	int rank, size;
	int (*send)(void *arg, int to, int tag, const void *buf, size_t bytes);
	int (*recv)(void *arg, int from, int tag, void *buf, size_t bytes);
	void *arg;
};
/* rt keeps the pointer (it must outlive rt); NULL: one process. Size 1 (mpirun
 * -np 1) runs the nodes' paths with no one to talk to: the same bits. */
void rt_set_nodes(struct rt_ctx *rt, const struct rt_nodes *nodes);
/* The number of nodes (1 without rt_set_nodes) and this one's rank. */
int rt_node_count(const struct rt_ctx *rt);
int rt_node_rank(const struct rt_ctx *rt);
/* Sums x[0..n) after the sums of the nodes before this one (in double, in
 * rank order, one addition per element: the bits of one process summing all
 * of them); *sum is the total over every node, on every node. One node: the
 * local sum. */
int rt_nodes_sum_floats(struct rt_ctx *rt, const float *x, size_t n, double *sum) SP_MUST_CHECK;

/* Opens the backend, the vmm over it and the streams; applies cfg->threads to
 * the CPU kernels (kn_cpu_set_threads). Returns 0, or the device's or the
 * vmm's error (-ENODEV "no CUDA device" when cuda is asked for and absent). */
int rt_open(const struct rt_config *cfg, struct rt_ctx **out) SP_MUST_CHECK;
/* Waits for everything, closes the vmm and the backend. NULL is ok. */
void rt_close(struct rt_ctx *rt);

/* ---- programs ------------------------------------------------------------------- */

#define RT_HOST DEV_HOST /* a task's device: the CPU (its objects on the host) */

struct rt_obj {
	uint64_t bytes; /* 0: a placeholder, no memory (its pointer is NULL) */
	enum vmm_kind kind;
	char name[32];
	uint64_t vid;        /* the vmm object, once created */
	int input;           /* rewritten on the host before each iteration */
	int keep;            /* read after the run (an output): never discarded */
	int rset;            /* its replica set (rt_prog_replicas), -1: none */
	int accum;           /* in an accumulating replica set */
	enum kn_dtype dtype; /* elements, for collectives (KN_F32 unless set) */
};

struct rt_ref {
	int obj;
	enum vmm_access mode; /* VMM_READ, VMM_WRITE (read-modify-write), VMM_OVERWRITE */
};

struct rt_task;

/* What a task's callback gets: the stream to launch on, its device (or
 * RT_HOST), the task and the pointers of its objects on that place. */
struct rt_launch {
	struct rt_ctx *rt;
	struct dev_stream *s;
	int dev;
	const struct rt_task *task;
	void *const *ptr; /* ptr[i] for task->ref[i] */
	int iter;         /* iteration number, from 0 */
};

/* Launches the task's work on l->s (never waits for it). Returns 0 or -errno;
 * an error stops the run. */
typedef int (*rt_task_fn)(const struct rt_launch *l, void *arg);

enum rt_task_flags {
	RT_TASK_COLLECTIVE = 1, /* an all-reduce member: coll_group tasks run together */
	RT_TASK_UPDATE = 2,     /* updates persistent state: eager write-back after it */
	/* a tensor-parallel member (with RT_TASK_COLLECTIVE: the members of
	 * coll_group, one per device, are issued together): set_fn launches
	 * them all at once, exchanging between their streams */
	RT_TASK_SET = 4,
};

/* Launches the n members of a set (l[i]: member i's stream, device, task and
 * pointers), in member order. Returns 0 or -errno. */
typedef int (*rt_set_fn)(const struct rt_launch *l, int n);

struct rt_task {
	int dev;         /* device (or RT_HOST) it runs on when constrained, else predicted */
	int constrained; /* 1: dev is fixed; 0: bound late to a device */
	int nref;
	struct rt_ref *ref;
	int ndep;
	int *dep; /* earlier tasks (indices in the program) */
	rt_task_fn fn;
	void *arg;
	unsigned flags;
	int coll_group; /* RT_TASK_COLLECTIVE: the all-reduce this member belongs to */
	int coll_bcast; /* ... 0: a sum; 1: a broadcast from node coll_root (ZeRO-1's weights) */
	int coll_root;
	rt_set_fn set_fn; /* RT_TASK_SET: what its set runs (the first member's) */
	double flops;     /* for reports */
	int tg_task;      /* the taskgraph task it came from, or -1 */
	char name[32];
};

struct rt_prog {
	int nobj, ntask;
	struct rt_obj *obj;
	struct rt_task *task; /* in a topological order (deps point backwards) */
	/* filled by rt_prog_prepare: per reference, the position of the object's next
	 * use (cyclic over iterations, + ntask when it wraps), whether that use
	 * reads it, and the next use by a task on the same place (VMM_NO_HINT if
	 * none); per object (stride nplaces + 1) its first use anywhere, then on
	 * each place (devices, then the CPU last), -1 if none */
	uint64_t **next_pos;
	uint8_t **next_reads;
	uint64_t **next_place;
	uint32_t **ref_rank; /* 1 + references of the object (of its replica set, for
	                        members) at earlier positions */
	int *first_use;
	int nplaces;
	int prepared;
	/* replica sets: [set * DEV_MAX + device] the set's object there, or -1 */
	int nrset, caprset;
	int *rset;
	struct rt_ref *ref_orig; /* the refs as built; the executor rebinds a copy */
	struct dev_event **ev;   /* one per task, created by rt_prog_bind */
	int *ran_on;             /* per task: the queue (device, or the CPU) it last ran on */
	/* per task, set by the caller for the next rt_exec_run: not run this time
	 * (NULL: all run). What depends on a skipped task must be skipped too, or
	 * have depended on it for order only (evaluation skips backward, all-reduce
	 * and update); skipped tasks count as done. */
	const uint8_t *skip;
	/* per task, when not NULL: its start and end on the backend's clock in
	 * the last run (dev_event times; the trace and the tuner read them) */
	double *t_start, *t_end;
	struct dev_event **ev_start; /* made at the first timed run */
	/* owned arrays for refs and deps */
	struct rt_ref *refpool;
	int *deppool;
	size_t nrefpool, ndeppool, caprefpool, capdeppool;
	int capobj, captask;
};

/* Building a program: objects and tasks are appended; a task's refs list each
 * object once (the mode says how it is used), its deps are earlier tasks. */
void rt_prog_init(struct rt_prog *p);
void rt_prog_free(struct rt_prog *p);
int rt_prog_obj(struct rt_prog *p, uint64_t bytes, enum vmm_kind kind, const char *name,
                int *out) SP_MUST_CHECK;
int rt_prog_task(struct rt_prog *p, const struct rt_task *t, const struct rt_ref *refs, int nref,
                 const int *deps, int ndep, int *out) SP_MUST_CHECK;
/* Declares objs[d] (n of them, one per device 0..n-1) as device d's replica of
 * the same state. accum 0 (equal copies, data-parallel weights): a task bound
 * late to a device other than its predicted one reads that device's replica
 * instead of the one it names, moving nothing. accum 1 (data-parallel
 * gradients): never rebound; a late-bound task adds into the replica it names,
 * brought to where it runs, so that with the writers ordered by dependencies
 * each sum's order is the program's whatever ran where (DESIGN §9.1); whether a write overwrites
 * or adds is decided at issue, not by the program: the first task an
 * iteration issues that writes a replica gets VMM_OVERWRITE (its callback
 * must then initialize it), later ones VMM_WRITE; a collective member whose
 * replica nobody wrote this iteration finds it zeroed. Callbacks read the
 * mode they got in l->task->ref[i].mode. Returns 0, or -EINVAL for an object
 * out of range or already in a set. */
int rt_prog_replicas(struct rt_prog *p, const int *objs, int n, int accum) SP_MUST_CHECK;
/* Checks the program (refs and deps in range, deps backwards, each object once
 * per task, a collective group on distinct devices) and computes the next-use
 * tables. Returns 0 or -EINVAL naming the task. */
int rt_prog_prepare(struct rt_prog *p) SP_MUST_CHECK;

/* Creates the program's vmm objects (host copies valid, contents unspecified)
 * and frees them. */
int rt_prog_bind(struct rt_ctx *rt, struct rt_prog *p) SP_MUST_CHECK;
void rt_prog_unbind(struct rt_ctx *rt, struct rt_prog *p);

/* Runs one iteration (iter numbers the hints and the callbacks), waits for it
 * and for the vmm's transfers it started. Returns 0, -ENOMEM naming the task,
 * the device, the bytes and the smallest budget that would fit, a callback's
 * error, or a transfer's error; on an error nothing more is issued and what
 * was issued completes before the return. */
int rt_exec_run(struct rt_ctx *rt, struct rt_prog *p, int iter) SP_MUST_CHECK;

/* The device a task would run on now / ran on last (for tests). */
int rt_exec_task_device(const struct rt_prog *p, int task);

/* The largest working set of any task (bytes of its distinct objects, as v's
 * device pools hold them: aligned, in size classes; v NULL: raw bytes): the
 * smallest per-device vmm budget that can run the program. *task gets it. */
uint64_t rt_prog_min_budget(const struct rt_prog *p, const struct vmm *v, int *task);

/* ---- collectives (collective.c) -------------------------------------------------- */

/* In-place sum of n equal-size fp32 buffers, one per device, buf[r] on device
 * r (all devices of the context, in rank order), queued on each device's
 * stream s[r] after the work already there; each stream's later work sees the
 * sum. cuda: NCCL (one communicator per device, ncclCommInitAll); host: one
 * CPU kernel summing in rank order ((b0 + b1) + b2 ...), then copying the sum
 * to every buffer, so results are bit-identical to a loop that adds in that
 * order; model: the ring's traffic (2(N-1) steps of bytes/N per device over
 * peer links), no data. n participants: devices 0..n-1. Returns 0 or -errno. */
int rt_allreduce_sum(struct rt_ctx *rt, int n, void *const *buf, struct dev_stream *const *s,
                     size_t count) SP_MUST_CHECK;
/* The same over count elements of dtype: in bf16 the host sums in rank order
 * with one rounding per addition (((b0 + b1) + b2) ..., as kn_grad_accumulate
 * in bf16), NCCL sums in ncclBfloat16. */
int rt_allreduce_sum_dtype(struct rt_ctx *rt, int n, void *const *buf, struct dev_stream *const *s,
                           size_t count, enum kn_dtype dtype) SP_MUST_CHECK;
/* The general form: member k's buffer buf[k] is on device dev[k] (ranks in
 * member order; dev NULL: devices 0..n-1); with several nodes (rt_set_nodes)
 * the sum covers every node's members, node by node in rank order, and n may
 * be 1. tag (0..16000) must differ between all-reduces that may run at once
 * (the executor's: the collective group, one per pack and kind). */
int rt_allreduce_sum_nodes(struct rt_ctx *rt, int n, const int *dev, void *const *buf,
                           struct dev_stream *const *s, size_t count, enum kn_dtype dtype,
                           int tag) SP_MUST_CHECK;
/* The same members, but every buffer gets node root's buffer 0 (its members
 * hold the same bytes): ZeRO-1's weights after their owner's update. bytes
 * may be any size; one node: the members get member 0's. */
int rt_bcast_nodes(struct rt_ctx *rt, int n, const int *dev, void *const *buf,
                   struct dev_stream *const *s, size_t bytes, int root, int tag) SP_MUST_CHECK;
void rt_collectives_close(struct rt_ctx *rt);

/* ---- models of layers (model.c, gpt.c) ------------------------------------------------
 * A model is a sequence of layers. Each layer declares its sizes and launches
 * its kernels through ops on the stream it is given. The last layer computes
 * the loss: its output is loss_floats fp32 losses per sample, and its backward
 * starts from dloss (the objective's gradient per loss value) instead of dout.
 * A layer may read an earlier layer's parameters (tied: GPT-2's head reads
 * the embedding's wte); it accumulates that gradient into its own grads after
 * its param_bytes (grad_bytes - param_bytes of them), which the update adds to
 * the tied layer's first gradients before updating it, so the accumulation
 * order never depends on the schedule. */

struct rt_optim {
	float lr, beta1, beta2, eps, weight_decay;
	enum kn_optimizer kind; /* KN_ADAMW (0: the default) or KN_SGD */
	float momentum;         /* SGD; 0: plain SGD, no state (as Hydra trains) */
	/* > 0: clip the gradients to this global L2 norm before each update
	 * (kn_clip: scale = clip / norm where the norm is larger). The norm is
	 * each layer's sum of squares (rt_layer_norm) added in layer order, so it
	 * is the same bits under every plan; the updates then wait for the whole
	 * backward pass (tg_model.norm_bytes). 0: no clipping. */
	float grad_clip;
};

struct rt_layer;

/* What a layer op gets. Pointers are on the op's place (device or host). */
struct rt_layer_call {
	struct dev_stream *s;
	const struct rt_layer *layer;
	int B; /* samples in this call (the microbatch) */
	void *params, *grads;
	float *optim;
	void *stash, *work;
	const void *in;      /* forward/backward: the input (token ids for the first layer) */
	void *out;           /* forward: the output (the last layer: its losses) */
	const void *dout;    /* backward: the gradient of out (unused by the last layer) */
	void *din;           /* backward: ADD the gradient of in here (NULL for the first layer) */
	const void *targets; /* the last layer: the targets of the B samples */
	const void *tied;    /* a tied layer: the tied layer's parameters */
	void *tied_grad;     /* a tied layer: its own gradient area for them */
	float dloss;         /* the last layer's backward: d objective / d loss value */
	int step;            /* update: the step, from 1 */
	const struct rt_optim *opt;
	/* update with opt->grad_clip > 0: the model's per-layer sums of squares
	 * (nnorms = the model's nlayers doubles on the call's place,
	 * rt_layer_norm), else NULL */
	const double *norms;
	int nnorms;
};

struct rt_layer_ops {
	int (*forward)(const struct rt_layer_call *c);
	int (*backward)(const struct rt_layer_call *c);
	/* NULL: the model's optimizer (opt.kind) over params (fp32) with optim its
	 * state: AdamW m then v (2 * param_bytes), SGD's momentum buffer */
	int (*update)(const struct rt_layer_call *c);
	/* fills params (host memory, param_bytes) deterministically from seed */
	int (*init)(const struct rt_layer *l, void *params, uint64_t seed);
	/* 1: the callbacks launch through the kernels' dispatch, so they run on the
	 * model backend too (which charges their cost): "auto" may rank plans by
	 * simulating them. The caller's own kernels leave it 0. */
	int simulates;
};

struct rt_layer {
	char name[32];
	uint64_t param_bytes, grad_bytes, optim_bytes;
	int std_optim; /* 1: optim_bytes is the model optimizer's state (follows opt.kind) */
	/* bf16 layers (mixed precision): the fp32 master weights at the start of
	 * the optimizer state (4 bytes a parameter, counted in optim_bytes), the
	 * optimizer's own state after them; 0 in fp32 */
	uint64_t master_bytes;
	uint64_t stash_per_sample, out_per_sample, work_per_sample, work_bytes;
	double fwd_flops_per_sample, bwd_flops_per_sample;
	/* measured seconds per sample on the planning device (rt_model_profile),
	 * 0 = not measured: the planner then uses FLOPs alone */
	double fwd_s_per_sample, bwd_s_per_sample, upd_s;
	int tied, tied_layer;
	const struct rt_layer_ops *ops;
	void *arg; /* the layer's own: given back through c->layer->arg */
	/* built-in GPT layers */
	enum kn_layer_kind kind;
	struct kn_model_config gpt;
	int T;
};

struct rt_model;
/* Fills a batch: n samples from sample0 of iteration iter; in and targets are
 * host memory of n * in_per_sample / target_per_sample bytes. */
typedef int (*rt_data_fn)(const struct rt_model *m, void *arg, int iter, int sample0, int n,
                          void *in, void *targets);

struct rt_model {
	char name[32];
	int nlayers;
	struct rt_layer *layers;
	int batch;                  /* samples per iteration (on this node) */
	int batch_total;            /* every node's: the loss is their mean (0: batch) */
	int sample0;                /* this node's first sample of the whole batch */
	uint64_t in_per_sample;     /* bytes */
	uint64_t target_per_sample; /* bytes */
	int loss_floats;            /* fp32 losses per sample (the last layer's output) */
	struct rt_optim opt;
	rt_data_fn data;
	void *data_arg;
	rt_data_fn eval_data; /* validation samples (rt_run_eval, with data_arg); NULL: none */
	struct kn_model_config gpt; /* GPT models: the config (else zero) */
	int T;
};

/* A GPT-2 model (embedding, L blocks, head tied to the embedding) of cfg at
 * sequence length T, batch sequences per iteration, with synthetic data
 * (rt_gpt_synthetic_data) unless data is set after. Frees with rt_model_free.
 * cfg->dtype KN_BF16 is mixed precision: bf16 weights, activations and
 * gradients (sizes from the kernels' bf16 descriptors), fp32 master weights
 * and optimizer state in each layer's optimizer state (master_bytes), fp32
 * losses. Returns 0 or -EINVAL for a bad config. */
int rt_model_gpt(const struct kn_model_config *cfg, int T, int batch,
                 struct rt_model *out) SP_MUST_CHECK;
void rt_model_free(struct rt_model *m);
/* Switches m's optimizer (m->opt.kind, m->opt.momentum) and resizes the state
 * of its std_optim layers to match. -EINVAL for a momentum outside [0, 1).
 * Call before planning or opening runs of m. */
int rt_model_set_optimizer(struct rt_model *m, enum kn_optimizer kind,
                           float momentum) SP_MUST_CHECK;
/* "adamw" (or NULL) and "sgd": 0, else -EINVAL with a message. */
int rt_optimizer_parse(const char *name, enum kn_optimizer *out) SP_MUST_CHECK;
const char *rt_optimizer_name(enum kn_optimizer kind);
/* Deterministic learnable token streams: sample s of iteration it is an
 * arithmetic progression mod V (step 1..3) from a start drawn from (it, s, and
 * the uint64_t seed arg points to, if any); the targets are the next tokens. */
int rt_gpt_synthetic_data(const struct rt_model *m, void *arg, int iter, int sample0, int n,
                          void *in, void *targets);
/* Before updating layer l: adds the tied gradients of every layer tied to it
 * (their grads after param_bytes) to l's first gradients, in layer order, on
 * stream s; grads[j] are the layers' gradient pointers on s's place. */
int rt_layer_add_ties(struct dev_stream *s, const struct rt_model *m, int l,
                      void *const *grads) SP_MUST_CHECK;
/* Launches layer l's update (its op, or AdamW over its params). norms: with
 * m->opt.grad_clip > 0, the model's per-layer sums of squares (nlayers
 * doubles on s's place, the clip scale formed from them when the kernel
 * runs); NULL: no clipping. */
int rt_layer_update(struct dev_stream *s, const struct rt_model *m, int l, void *params,
                    void *grads, float *optim, int step, const double *norms) SP_MUST_CHECK;
/* The same with optimizer settings opt instead of m->opt (a step's own
 * learning rate when several steps run in one program). */
int rt_layer_update_opt(struct dev_stream *s, const struct rt_model *m, const struct rt_optim *opt,
                        int l, void *params, void *grads, float *optim, int step,
                        const double *norms) SP_MUST_CHECK;
/* Bytes of a model's norm object: m->nlayers sums of squares, then
 * KN_SUMSQ_PARTS doubles of scratch; 0 without clipping (m->opt.grad_clip). */
uint64_t rt_model_norm_bytes(const struct rt_model *m);
/* Launches norms[l] = the sum of squares of layer l's gradient (its
 * param_bytes, after rt_layer_add_ties), norms being a norm object
 * (rt_model_norm_bytes) on s's place. */
int rt_layer_norm(struct dev_stream *s, const struct rt_model *m, int l, const void *grads,
                  double *norms) SP_MUST_CHECK;
/* The taskgraph's view of a model's layers (per sample / constant bytes, FLOPs,
 * ties). layers has m->nlayers entries; the model gets batch, input and target
 * bytes. */
void rt_model_tg(const struct rt_model *m, struct tg_layer *layers, struct tg_model *out);
/* Pilot run (Hydra's and Harmony's profiling): each layer's forward, backward
 * and update launched at microbatch mb on device 0's stream of a model-backend
 * context, timed in virtual time, into the layers' *_s fields; the planner's
 * FLOPs become these times x the device's FLOP/s (memory-bound kernels and
 * launch latency included). Returns 0, -ENOTSUP on other backends. */
int rt_model_profile(struct rt_ctx *rt, struct rt_model *m, int mb) SP_MUST_CHECK;
/* rt_model_tg with measured times converted to FLOPs at flops (FLOP/s). */
void rt_model_tg_timed(const struct rt_model *m, double flops, struct tg_layer *layers,
                       struct tg_model *out);
/* Initial parameters of layer l (host memory of param_bytes; in bf16 the
 * rounding of the fp32 masters rt_layer_init_optim writes). */
int rt_layer_init(const struct rt_model *m, int l, void *params, uint64_t seed) SP_MUST_CHECK;
/* The same for member `member` of a tensor-parallel block shard (the whole
 * block's initial values, cut; rt_layer_init for every other layer). */
int rt_layer_init_member(const struct rt_model *m, int l, void *params, uint64_t seed,
                         int member) SP_MUST_CHECK;
/* The members' model of tensor parallelism over t devices: m's GPT blocks
 * (in tp form, kn_model_config.tp_form) as one member's shards, every other
 * layer whole (each member holds and runs it). out->layers is allocated
 * (free it); the rest is m's. Returns 0, -EINVAL (a block not in tp form, t
 * or the shape not splittable), -ENOTSUP (bf16), -ENOMEM. */
int rt_model_gpt_members(const struct rt_model *m, int t, struct rt_model *out) SP_MUST_CHECK;
/* Initial optimizer state of layer l (host memory of optim_bytes): zero, with
 * the fp32 master weights first in bf16 (from seed, as fp32 initializes). */
int rt_layer_init_optim(const struct rt_model *m, int l, void *optim, uint64_t seed) SP_MUST_CHECK;
/* A layer's element type (GPT layers: their config's; others fp32) and its
 * parameter count. */
enum kn_dtype rt_layer_dtype(const struct rt_layer *l);
uint64_t rt_layer_nparams(const struct rt_layer *l);
/* "fp32" (or NULL) and "bf16": 0, else -EINVAL with a message naming both. */
int rt_precision_parse(const char *name, enum kn_dtype *out) SP_MUST_CHECK;
const char *rt_precision_name(enum kn_dtype dtype);

/* ---- a model under a plan (run.c) -----------------------------------------------------
 * Turns a model and a plan into a task graph (taskgraph/) and that into a
 * program whose tasks launch the layers' ops on the objects of their packs:
 * W, G, O per pack (per replica in data-parallel modes), stash, boundary and
 * input-gradient per microbatch, inputs and targets per microbatch, a work
 * object per task. Gradients are zeroed by their first accumulation; the
 * update of a layer tied to by others adds their tied gradients first. */
struct rt_run_task; /* per task: what its callback needs */

struct rt_run {
	struct rt_ctx *rt;
	const struct rt_model *m;
	struct tg_plan plan;
	struct tg_layer *tgl;
	struct tg_model tgm;
	struct tg_graph g;
	const struct tg_model_objs *mo;
	struct rt_prog prog;
	struct rt_run_task *targ;
	/* layout of each layer inside its pack's objects */
	int *pack_of;                 /* [layer] */
	uint64_t *poff, *goff, *ooff; /* [layer]: offset in W, G, O of its pack */
	uint64_t *soff, *ioff;        /* [layer]: its stash, its interior output in S */
	uint64_t *pp_off, *rc_off;    /* [pack]: ping-pong buffers, recompute area in work */
	uint64_t *pp_size;            /* [pack]: one ping-pong buffer (largest interior output) */
	uint64_t *rc_out;             /* [pack]: the re-run's last output, after its stash */
	float *losses;                /* host: nstep * nmb * mb * loss_floats (pinned) */
	uint64_t seed;
	int step, iter;
	double last_loss;
	/* the steps of one program run (mo->nstep: several under 2BW with
	 * plan.flush_every > 1): each step's optimizer settings (its learning
	 * rate), the steps done before it, and the tasks of steps not run */
	struct rt_optim *step_opt;
	int step_base;
	uint8_t *skip;
	/* plan.tp > 1: the caller's model (blocks whole, in tp form), which
	 * the state functions speak of; m is then the members' (blocks as
	 * shards), owned; events of the members' exchanges */
	const struct rt_model *full;
	struct rt_model members;
	struct dev_event *tp_done[DEV_MAX], *tp_pulled[DEV_MAX];
};

/* Builds and binds the program of m under plan on rt, and writes the initial
 * weights (rt_layer_init from seed; every replica the same) and zero
 * optimizer state into the host pool. Returns 0, -EINVAL (a plan that does not
 * fit the model: batch, packs, devices, group), -ENOMEM. */
int rt_run_open(struct rt_ctx *rt, const struct rt_model *m, const struct tg_plan *plan,
                uint64_t seed, struct rt_run **out) SP_MUST_CHECK;
/* One training step: inputs of this iteration, the program, the mean loss
 * (NAN on the model backend). Returns 0 or the executor's error. */
int rt_run_step(struct rt_run *r, double *loss) SP_MUST_CHECK;
/* n steps in one run of the program (1..r->mo->nstep; 2BW with
 * plan.flush_every = K runs up to K without a flush between them, the
 * pipeline's fill and drain once), step j with learning rate lr[j] (NULL:
 * m->opt.lr for all), its mean loss into loss[j] (may be NULL). The same
 * bits as n calls of rt_run_step. On an error no step counts (the state may
 * be partly updated: restore a save to retry). */
int rt_run_steps(struct rt_run *r, int n, const float *lr, double *loss) SP_MUST_CHECK;
/* Copies layer l's parameters (replica 0) into host memory out
 * (rt_run_state_bytes(RT_PARAMS): param_bytes, in bf16 the fp32 masters). */
int rt_run_read_params(struct rt_run *r, int l, void *out) SP_MUST_CHECK;
/* A layer's training state: its parameters or its optimizer state (AdamW: m
 * then v), optim_bytes) — read from the current copy wherever it is, written
 * into every replica. For checkpoints, and for moving a run to another plan.
 * Under 2BW RT_PARAMS is the newest version (writing it sets both versions, as
 * at step 0) and RT_PARAMS_PREV the older one, which the next step's passes
 * read, as fp32 (bf16 weights widened, exactly; written back rounded, which
 * gives them back); RT_PARAMS_PREV has 0 bytes in other schedules. */
enum rt_state { RT_PARAMS, RT_OPTIM, RT_PARAMS_PREV };
uint64_t rt_run_state_bytes(const struct rt_run *r, int l, enum rt_state which);
int rt_run_read_state(struct rt_run *r, int l, enum rt_state which, void *out) SP_MUST_CHECK;
int rt_run_write_state(struct rt_run *r, int l, enum rt_state which, const void *in) SP_MUST_CHECK;
/* ZeRO-1 (plan.zero over several nodes): the node that holds layer l's state
 * `which` (its optimizer state; in bf16 its fp32 masters, RT_PARAMS, too), or
 * -1 where every node does. Elsewhere read_state is -ENODATA naming the owner
 * and write_state writes what is held there (the bf16 weights) and skips the
 * rest. */
int rt_run_state_owner(const struct rt_run *r, int l, enum rt_state which);
/* Steps done so far: AdamW's step count and the data position of the next
 * step (rt_data_fn's iter). For resuming. */
void rt_run_set_step(struct rt_run *r, int step);
/* Recovery: the training state (every layer's parameters and optimizer
 * state, and 2BW's older weight version) copied into plain host buffers, off
 * every device and the vmm. Under ZeRO-1 a node saves what it holds: another
 * node's layers have no optimizer state here (NULL buffers), and in bf16
 * their weights are saved widened instead of the fp32 masters.
 * *bufs: NULL, or an earlier save's buffers to reuse; rt_run_save_free
 * frees them. rt_run_restore drops every object's contents (lost copies
 * too) and writes the saved state into the host pool. */
int rt_run_save(struct rt_run *r, void ***bufs) SP_MUST_CHECK;
int rt_run_restore(struct rt_run *r, void *const *bufs) SP_MUST_CHECK;
void rt_run_save_free(const struct rt_run *r, void **bufs);
/* Forward only on validation batch `index` (m->eval_data): the mean loss;
 * weights, gradients and optimizer state are untouched. A one-device plan
 * (SHARP's) runs on the first device that has not failed. Returns 0, -EINVAL
 * when the model has no eval_data, or the executor's error. */
int rt_run_eval(struct rt_run *r, int index, double *loss) SP_MUST_CHECK;
void rt_run_close(struct rt_run *r);

/* ---- plans (plan.c) --------------------------------------------------------------- */

struct rt_plan_request {
	const char *schedule; /* "auto" (NULL), or a tg_sched name */
	int devices;          /* 0: all of the context (1 for a single-device schedule) */
	int microbatch;       /* 0: the largest of 8, 4, 2, 1 that divides the batch */
	int group;            /* 0: 1 (harmony modes: microbatches per group) */
	int packs;            /* 0: greedy packing to half the budget (15% reserve) */
	int upd_cpu, recompute;
	int flush_every; /* 2bw: steps without a flush (0: TG_2BW_FLUSH_EVERY where
	                    the prediction has it faster, else 1) */
	/* auto: the profile text its twin simulates (NULL: the context's own,
	 * dev_profile_text); the trainer's tuner passes measured figures */
	const char *twin_profile;
	/* > 1: tensor parallelism over that many devices a stage (a named
	 * pipeline schedule; m in tp form): the plan of m's members on devices
	 * / tp stages, widened (tg_plan.tp) */
	int tp;
};
/* One steady-state iteration of plan for m, simulated in the executor on a
 * model-backend twin of rt (profile: its text, NULL: rt's own figures).
 * Returns 0 and the seconds, or the plan's error (-ENOMEM: it does not fit). */
int rt_plan_simulate(const struct rt_ctx *rt, const struct rt_model *m, const struct tg_plan *plan,
                     const char *profile, double *iter_s) SP_MUST_CHECK;
/* The profile text (dev_profile_text) of a named or file profile. */
int rt_profile_text(const char *name, char *buf, size_t n) SP_MUST_CHECK;

/* The context's hardware for the planner: devices, the vmm budget per device,
 * FLOP/s and bandwidths of device 0 and its links. */
void rt_plan_hw(const struct rt_ctx *rt, int ndev, struct tg_hw *hw);
/* For model m: a bf16 model's products run at the devices' bf16 rate
 * (dev_info.bf16_flops), so hw->flops is scaled by bf16 / fp32 (an
 * approximation: the memory-bound kernels do not speed up); fp32 models
 * unchanged. Call after rt_plan_hw. */
void rt_plan_hw_for(const struct rt_ctx *rt, const struct rt_model *m, struct tg_hw *hw);
/* Picks a plan for m on rt. "auto" ranks plans with the taskgraph's planner;
 * when every layer simulates (rt_layer_ops.simulates) it then profiles the
 * layers (rt_model_profile, into m) and runs the cfg.plan_trials best
 * predictions in the executor on a model-backend copy of rt's devices
 * (dev_profile_text, the same budgets) and keeps the fastest in virtual time.
 * A named schedule takes the request's numbers (or the defaults above).
 * Returns 0, -EINVAL naming the bad choice (unknown schedule, a batch the
 * microbatch and devices do not divide), -ENOMEM naming the layer that does
 * not fit and the smallest budget that would. */
int rt_plan_choose(const struct rt_ctx *rt, struct rt_model *m, const struct rt_plan_request *req,
                   struct tg_plan *out) SP_MUST_CHECK;
int rt_sched_parse(const char *name, enum tg_sched *out) SP_MUST_CHECK;
/* "harmony-dp, 4 packs, microbatch 2, group 4, 2 devices" */
void rt_plan_describe(const struct tg_plan *p, char *buf, size_t n);

/* ---- many models at once: SHARP (sharp.c) ------------------------------------------
 * Hydra's shard alternator on this executor. Each model is opened with
 * rt_run_open under rt_sharp_plan's plan (one device, greedy shards of whole
 * minibatches, a double-buffer reserve) and becomes a queue of shard units:
 * forward of a shard (the last with the loss), backward of a shard with its
 * updates (a shard of several packs is one unit: plan.shard_head). Devices take
 * units from any model (cfg->policy picks among the models whose previous unit
 * has completed). A model's weights after its steps are bit-identical to
 * training it alone (rt_reference with one replica). */
struct rt_sharp_config {
	enum tg_mm_policy policy;
	int double_buffer; /* a device reserves its next unit and prefetches it */
	uint64_t seed;     /* the random policy's */
	/* after each step of model i but its last: return 1 to stop it early */
	int (*on_step)(void *arg, int model, int step, double loss);
	void *arg;
	/* 1: each model's state is copied to host memory at every step boundary,
	 * so a device that fails (dev_failed) costs the models their current step,
	 * not the run: it reruns on the devices left (host and cuda backends) */
	int recover;
	/* devices that join later or leave: asked before device dev takes a unit
	 * (with arg); 0 keeps it out for now (a unit running there finishes, a
	 * reservation passes to another device). NULL: every device, always.
	 * While models are left some device must come back: with none running
	 * and none available the run ends with -EDEADLK. */
	int (*device_ready)(void *arg, int dev);
};

struct rt_sharp_stats {
	double t0, makespan_s; /* the backend's clock at the start; until the last step */
	uint64_t units;        /* units run */
	uint64_t units_on[DEV_MAX];
	double busy_s[DEV_MAX]; /* per device: time from a unit's issue to its end */
	uint64_t same_device;   /* units that ran where their model's previous one did */
	int stopped;            /* models stopped early by on_step */
	int failures;           /* devices that failed (recover) */
	uint64_t units_lost;    /* units in flight when a device failed */
	uint64_t checkpoints;   /* model states copied at step boundaries (recover) */
};

/* The plan of model m under SHARP: greedy shards (tg_pack_greedy, a whole
 * minibatch, `reserve` of the device budget kept free for double buffering,
 * Hydra's default 0.15), each shard split into packs of one layer
 * (tg_plan.shard_head marks where each shard begins: a unit loads pack by pack
 * while its first packs compute), shrunk until every unit's objects fit one
 * device's budget at once, just-in-time updates, one device. Returns 0,
 * -ENOMEM naming the layer that does not fit alone and by how much. */
int rt_sharp_plan(const struct rt_ctx *rt, const struct rt_model *m, double reserve,
                  struct tg_plan *out) SP_MUST_CHECK;
/* Trains n models together: runs[i] for steps[i] steps (0: none). Returns 0,
 * -EINVAL for a run that is not a one-device plan on rt, or the first error
 * of a unit (what was issued completes before the return); -EIO when a device
 * fails without cfg->recover, or when every device has failed. */
int rt_sharp_run(struct rt_ctx *rt, struct rt_run *const *runs, const int *steps, int n,
                 const struct rt_sharp_config *cfg, struct rt_sharp_stats *st) SP_MUST_CHECK;

/* ---- the reference loop (ref.c) ------------------------------------------------------
 * The model trained with no vmm and no scheduler: every tensor in host memory,
 * the same layer ops on a CPU stream, microbatch by microbatch in order within
 * each of nrep replicas (replica r has samples [r*batch/nrep, (r+1)*batch/nrep)),
 * gradients summed over replicas in rank order, tied gradients added to their
 * layer's at the update. The order the executor keeps, so its losses and
 * weights must be bit-identical to these. In bf16 the same recipe as the
 * executor: bf16 parameters and gradients, replicas summed in bf16, the
 * update on fp32 masters (the layers' optim, master_bytes first).
 * PipeDream-2BW's rule (rt_reference_set_2bw): W(t+1) = W(t) - step(grad f(W(t-1))),
 * W(-1) = W(0): the forwards and backwards of step t read the version before the
 * newest (shadow), the optimizer steps the newest (params) with their gradient. */
struct rt_reference {
	const struct rt_model *m;
	int nrep, mb;
	void **params; /* per layer: the newest version */
	void **shadow; /* 2BW only (else NULL), per layer: the version the passes read */
	float **optim;
	void ***grads;        /* [rep][layer] */
	void **stash, **outp; /* [layer]: one microbatch's activations, kept across steps */
	void *in, *tg, *work, *dbuf[2]; /* inputs, targets, workspace, ping-pong gradients */
	double *norms; /* the norm object (clipping; nlayers + KN_SUMSQ_PARTS doubles) */
	uint64_t seed;
	int step;
	struct dev_ctx *dev;
	struct dev_stream *s;
};
int rt_reference_open(const struct rt_model *m, int nrep, int mb, uint64_t seed,
                      struct rt_reference **out) SP_MUST_CHECK;
/* Switches r to 2BW's delayed update (two weight versions, both the initial
 * weights at first); before its first step. Returns 0, -EINVAL after a step,
 * -ENOMEM. */
int rt_reference_set_2bw(struct rt_reference *r) SP_MUST_CHECK;
/* One iteration; *loss gets the mean loss. */
int rt_reference_step(struct rt_reference *r, int iter, double *loss) SP_MUST_CHECK;
void rt_reference_close(struct rt_reference *r);

#endif

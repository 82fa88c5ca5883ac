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
	int eager_writeback; /* 1: updated weights and optimizer state go to the host early */
	int discard;         /* 1: dead contents are discarded, never written back */
	int hints;           /* 1: Belady next-use hints from the order (0: LRU) */
	int place_hints;     /* 1: hints per device (next use on that device) */
};

struct rt_config {
	struct dev_config dev;
	struct vmm_config vmm;
	struct rt_exec_config exec;
	int threads; /* CPU kernel threads (SPILL_THREADS), applied at rt_open */
};

/* Fills cfg from the SPILL_* table (device, vmm, executor and threads).
 * Returns 0 or -EINVAL naming the bad value. */
int rt_config_from_params(const struct sp_params *p, struct rt_config *cfg) SP_MUST_CHECK;
/* The executor defaults (lookahead 3, window 2, everything on). */
struct rt_exec_config rt_exec_defaults(void);

/* Per-run counters of the runtime's own (beside the vmm's). */
struct rt_stats {
	uint64_t tasks, iterations;
	uint64_t late_bound;      /* unconstrained tasks that ran off their predicted device */
	uint64_t collective_p2p;  /* bytes moved by all-reduce (not through the vmm) */
	uint64_t loss_readback;   /* bytes of losses copied to the host */
	uint64_t prefetches;      /* vmm_prefetch calls made ahead of tasks */
	uint64_t discards;        /* dead objects discarded */
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
	struct dev_stream *cpu; /* DEV_HOST: CPU kernels (update on the CPU) */
	struct rt_stats st;
	void *coll; /* collectives state (collective.c) */
};

/* Opens the backend, the vmm over it and the streams; applies cfg->threads to
 * the CPU kernels (kn_cpu_set_threads). Returns 0, or the device's or the
 * vmm's error (-ENODEV "no CUDA device" when cuda is asked for and absent). */
int rt_open(const struct rt_config *cfg, struct rt_ctx **out) SP_MUST_CHECK;
/* Waits for everything, closes the vmm and the backend. NULL is ok. */
void rt_close(struct rt_ctx *rt);

/* ---- programs ------------------------------------------------------------------- */

#define RT_HOST DEV_HOST /* a task's device: the CPU (its objects on the host) */

struct rt_obj {
	uint64_t bytes;     /* 0: a placeholder, no memory (its pointer is NULL) */
	enum vmm_kind kind;
	char name[32];
	uint64_t vid;       /* the vmm object, once created */
	int input;          /* rewritten on the host before each iteration */
	int keep;           /* read after the run (an output): never discarded */
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
};

struct rt_task {
	int dev;         /* device (or RT_HOST) it runs on when constrained, else predicted */
	int constrained; /* 1: dev is fixed; 0: bound late to a device */
	int nref;
	struct rt_ref *ref;
	int ndep;
	int *dep;        /* earlier tasks (indices in the program) */
	rt_task_fn fn;
	void *arg;
	unsigned flags;
	int coll_group;  /* RT_TASK_COLLECTIVE: the all-reduce this member belongs to */
	double flops;    /* for reports */
	int tg_task;     /* the taskgraph task it came from, or -1 */
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
	uint32_t **ref_rank; /* 1 + references of the object at earlier positions */
	int *first_use;
	int nplaces;
	int prepared;
	struct dev_event **ev; /* one per task, created by rt_prog_bind */
	int *ran_on;           /* per task: the queue (device, or the CPU) it last ran on */
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

/* The largest working set of any task (bytes of its distinct objects): the
 * smallest per-device vmm budget that can run the program. *task gets it. */
uint64_t rt_prog_min_budget(const struct rt_prog *p, int *task);

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
void rt_collectives_close(struct rt_ctx *rt);

#endif

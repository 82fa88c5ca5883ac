/* train/internal.h — what the trainer's sources share; only train/ includes it. */
#ifndef SP_TRAIN_INTERNAL_H
#define SP_TRAIN_INTERNAL_H

#include "train/train.h"

#include "runtime/runtime.h"

#include <stdio.h>

/* The Chrome trace a run collects (trace.c): tasks as slices per device
 * stream, transfers from the vmm's trace ring at the end. */
struct tr_trace_ev {
	double t0, t1;
	int lane; /* device d: 2d compute, 2d+1 collectives; the CPU: 2 * DEV_MAX */
	int task; /* index into the program of its step */
	int step;
	char name[32];
};
struct tr_trace {
	struct tr_trace_ev *ev;
	size_t n, cap;
	double t0; /* the context's clock at open */
};

/* A block's parameter tensors in kn_block_param_sizes order (llm.c's): the
 * name spill's checkpoints use (under h.<i>.), Hugging Face's (under
 * transformer.h.<i>.), the shape in units of C (rows x cols; cols 0: one
 * dimension). Hugging Face stores the 2-D ones transposed (Conv1D). */
struct tr_block_tensor {
	const char *name, *hf;
	int rows, cols;
};
extern const struct tr_block_tensor tr_block_tensors[KN_BLOCK_NPARAMS];
/* The format state.c's checkpoints carry in their metadata. */
#define TR_CKPT_FORMAT "spill-train-1"

struct run {
	struct tr_config c;
	FILE *out;
	/* data and model */
	struct tr_data *data;
	struct tr_weights init; /* --init's weights (init.p NULL: none) */
	struct kn_model_config kc;
	const char *preset;
	int T, batch, steps;
	float lr;   /* the peak learning rate (tr_lr_at gives each step's) */
	int warmup; /* resolved from the config */
	int sched;  /* TR_LR_COSINE, TR_LR_LINEAR, TR_LR_CONSTANT */
	uint64_t synth_seed;
	uint64_t state; /* training state bytes (training_state) */
	int quarter;    /* the budget is the host default: a quarter of the state */
	int per_device; /* tr_open_context's budget is each device's, not the total */
	int grown;      /* ... grown from it until a plan fits */
	/* execution */
	struct rt_ctx *rt;
	struct rt_nodes sim_nodes; /* spill sim --nodes: the simulated chain */
	struct rt_model m;
	struct rt_run *run;
	struct tg_plan plan;
	char plan_name[160];
	double *t_start, *t_end; /* the program's task times (rt_prog.t_start/t_end) */
	int start;               /* the first step of this run (a resumed run: > 0) */
	/* progress */
	int wsteps;
	double t_first, p_time;
	int p_step;
	uint64_t p_h2d, p_d2h;
	/* accounting (report.c): sums over the steps of this run */
	double t_total;                /* step time */
	double compute, exposed, idle; /* per device, averaged over devices */
	double busy[TR_MAXDEV];        /* each device's compute time, summed over steps */
	double last_exposed;           /* the last step's exposed transfer time */
	double recent[8];              /* the last steps' times (the tuner) */
	int nrecent;
	/* bytes per link and kind moved up to the end of this run's first step
	 * (the cold one): the report's "measured" is the steps after it, as the
	 * taskgraph's "predicted" is the steady state */
	double cold[TR_LINKS][TR_KINDS], cold_collective, cold_internode, cold_drive[16];
	int cold_steps;           /* steps the cold figures cover (the first program run) */
	double *losses, *times;   /* [steps]: each step's loss and seconds */
	int switch_step;          /* the tuner switched after this step (0: never) */
	struct tg_plan prev_plan; /* the plan before the switch */
	double before_s;          /* its measured step time */
	int verified;             /* the switch was checked against what it measured */
	/* checkpoints (state.c) */
	char ckdir[4096];     /* --resume FILE without --checkpoint: FILE's directory */
	char last_ckpt[4096]; /* the newest checkpoint written or resumed from ("": none) */
	int diverged;         /* a non-finite loss or state stopped the run */
	struct tr_result res;
	struct tr_trace trace;
	char tune_log[768]; /* the tuner's decision, for the report */
};

/* train.c: the model's shape from the preset, the flags and the corpus; the
 * context (budget > 0: the host backend's default per-device budget is
 * budget / devices, or budget with r->per_device); the bytes of a model's training state; the data
 * callbacks (arg: the struct run). */
int tr_shape(struct run *r) SP_MUST_CHECK;
enum { TR_LR_COSINE, TR_LR_LINEAR, TR_LR_CONSTANT };
/* The learning rate of step (from 0) of the run's schedule. */
float tr_lr_at(const struct run *r, int step);
const char *tr_lr_schedule_name(int sched);
/* The model's optimizer from c->optim and c->momentum (after rt_model_gpt). */
int tr_set_optimizer(const struct tr_config *c, struct rt_model *m) SP_MUST_CHECK;
int tr_open_context(struct run *r, uint64_t budget) SP_MUST_CHECK;
/* The run's nodes (real or simulated; 1: one) and their transport for the
 * context (NULL: one node). */
int tr_run_nodes(const struct run *r);
const struct rt_nodes *tr_run_nodes_rt(struct run *r);
/* 1 on the node that prints and writes files (rank 0). */
static inline int tr_writer(const struct run *r)
{
	return tr_nodes_rank(r->c.nodes) == 0;
}
uint64_t tr_training_state(const struct rt_model *m);
int tr_data_train(const struct rt_model *m, void *arg, int iter, int sample0, int n, void *in,
                  void *tg);
int tr_data_val(const struct rt_model *m, void *arg, int iter, int sample0, int n, void *in,
                void *tg);

/* train.c: a plan for the run's model (the config's request; twin: the profile
 * text auto simulates, NULL: the context's). */
int tr_choose_plan(struct run *r, struct tg_plan *plan, const char *twin) SP_MUST_CHECK;
/* report.c: per-step accounting, the end-of-run report, the JSON file. */
void tr_account_step(struct run *r, double t0, double t1, int nsteps);
/* Notes the bytes moved so far, at the end of the run's first (cold) step. */
void tr_account_cold(struct run *r, int nsteps);
int tr_report(struct run *r) SP_MUST_CHECK;
/* convert.c: writes the weights into every layer of the run (after
 * rt_run_open; optimizer state untouched). -EINVAL when the shapes differ. */
int tr_weights_put(struct run *r, const struct tr_weights *w) SP_MUST_CHECK;
/* state.c: checkpoints (DIR/step_NNNNNNNN.safetensors) and resume.
 * tr_checkpoint refuses a state with a non-finite value (-ERANGE, "diverged
 * at step N", r->diverged set, nothing written), then applies --keep.
 * tr_claim_dir: the checkpoints in DIR that are not this run's (a fresh run:
 * all; resumed from a file: those after its step) are refused (-EEXIST)
 * unless --overwrite; with remove and --overwrite they are deleted. */
int tr_checkpoint(struct run *r, int step) SP_MUST_CHECK;
int tr_resume(struct run *r) SP_MUST_CHECK;
int tr_claim_dir(struct run *r, int remove) SP_MUST_CHECK;
/* tune.c: re-plan with the measured figures, switch when >= 5% faster;
 * tr_tune_verify, as many steps later: switch back when the new plan's steps
 * turned out slower than the old plan's. */
int tr_tune(struct run *r) SP_MUST_CHECK;
int tr_tune_verify(struct run *r) SP_MUST_CHECK;
/* trace.c */
int tr_trace_init(struct tr_trace *t, struct rt_ctx *rt) SP_MUST_CHECK;
void tr_trace_step(struct tr_trace *t, const struct run *r, double t0, int nsteps);
int tr_trace_write(struct tr_trace *t, const struct run *r, const char *path) SP_MUST_CHECK;
void tr_trace_free(struct tr_trace *t);

#endif

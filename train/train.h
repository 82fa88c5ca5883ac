/* train/train.h — the trainer (DESIGN §7, level 3): token data, checkpoints and
 * the training loop that `spill train`, `sim`, `report` and `prepare` are thin
 * commands over. Built on runtime/ (models of layers under a plan).
 *
 * Conventions as everywhere: 0 or -errno, sp_last_error() names the file or the
 * value and what is wrong. Prefix tr_. */
#ifndef SP_TRAIN_TRAIN_H
#define SP_TRAIN_TRAIN_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/error.h"

/* ---- token data (data.c) ----------------------------------------------------------
 * Corpora:
 *  - llm.c token shards: a 256 x int32 little-endian header (magic 20240520,
 *    version 1, the token count), then that many uint16 tokens; a directory of
 *    them (files ending in .bin whose names contain "train" or "val", each set
 *    read in name order; with no "val" shard the last 10% of the train tokens
 *    are the validation split); datasets prepared for llm.c work unchanged
 *    (vocab: header int 3 where the writer set it — spill prepare writes 256,
 *    llm.c leaves it 0 — else GPT-2's 50257; larger when a token says so);
 *  - any other file: plain text, one token per byte (vocab 256), the last 10%
 *    of the bytes the validation split;
 *  - NULL: the default corpus, the King James Bible of Debian's bible-kjv
 *    (the `bible` command prints it; `make deps` installs it), as text.
 * Batches are deterministic: the tokens of sample s of step i come from a start
 * position drawn from (seed, split, i, s) alone, so a run resumed at step i
 * sees the batches an uninterrupted run would. The formula, for other tools:
 * p = mix(mix(mix(mix(seed) ^ split) ^ i) ^ s) mod (tokens of the split - T),
 * split 0 train / 1 val, mix = splitmix64's finalizer (x += 0x9e3779b97f4a7c15;
 * x = (x ^ x >> 30) * 0xbf58476d1ce4e5b9; x = (x ^ x >> 27) * 0x94d049bb133111eb;
 * x ^ x >> 31), and the val split's tokens follow the train split's. */
struct tr_data;
enum tr_split { TR_TRAIN, TR_VAL };

/* Opens a corpus (see above). Returns 0, -ENOENT for a missing path (or no
 * `bible` for the default), -EINVAL naming the file and the fault (bad magic or
 * version, a token count the file does not hold, an empty corpus or split, a
 * directory with no shards). */
int tr_data_open(const char *path, struct tr_data **out) SP_MUST_CHECK;
void tr_data_close(struct tr_data *d);
/* Tokens are < vocab. */
int tr_data_vocab(const struct tr_data *d);
uint64_t tr_data_tokens(const struct tr_data *d, enum tr_split s);
/* What was opened, for logs: "shards in DIR (N train, M val tokens)". */
const char *tr_data_describe(const struct tr_data *d);
/* Fills n samples from sample0 of step `step`: in[k*T + t] and tg[k*T + t] =
 * the tokens at p + t and p + t + 1 for sample k's start p. Returns 0, -EINVAL
 * when the split has fewer than T + 1 tokens. */
int tr_data_samples(const struct tr_data *d, enum tr_split s, uint64_t seed, uint64_t step,
                    int sample0, int n, int T, int32_t *in, int32_t *tg) SP_MUST_CHECK;
/* `spill prepare`: the bytes of the text files, concatenated in order, as
 * llm.c shards in dir (created if missing): NAME_val_000000.bin holds the last
 * val_fraction of the bytes, NAME_train_NNNNNN.bin the rest, at most
 * shard_tokens per shard (0: 100M). Each file is written atomically (temporary
 * name, fsync, rename); existing shards of that name are refused (-EEXIST), not
 * overwritten. Returns 0, or -errno naming the file. */
int tr_data_prepare(const char *const *texts, int n, const char *dir, const char *name,
                    double val_fraction, uint64_t shard_tokens) SP_MUST_CHECK;

/* ---- checkpoints: safetensors (ckpt.c) --------------------------------------------
 * The format of Hugging Face's safetensors: an 8-byte little-endian header
 * length N, N bytes of JSON {"name": {"dtype": "F32", "shape": [..],
 * "data_offsets": [begin, end]}, ..., "__metadata__": {"key": "value", ...}}
 * (offsets into the data that follows the header), then the data.
 * Checksums, in the metadata: "crc32c.<name>" per tensor (of its data bytes)
 * and "crc32c.__metadata__" (of every other pair, sorted by key, as key NUL
 * value NUL), each CRC-32C (tr_crc32c) as 8 hex digits. */
enum tr_dtype { TR_F32, TR_I32, TR_U8 };

struct tr_tensor {
	const char *name; /* ASCII, unique, not "__metadata__" */
	enum tr_dtype dtype;
	int ndim; /* 0..4 */
	int64_t shape[4];
	const void *data; /* product(shape) elements */
};

/* CRC-32C (Castagnoli: reflected polynomial 0x82f63b78, ~0 in and out;
 * "123456789" -> 0xe3069283) of n bytes, continuing crc (0 to start):
 * tr_crc32c(tr_crc32c(0, a), b) is the CRC of a then b. Thread-safe. */
uint32_t tr_crc32c(uint32_t crc, const void *data, size_t n);

/* Writes the tensors (data laid out in order, 8-byte aligned header) and the
 * metadata (nmeta key/value pairs: meta[2i], meta[2i+1]), followed by the
 * checksums above, to path atomically: a temporary file in the same
 * directory, fsync, rename over path, fsync of the directory. On any failure
 * path is untouched and the temporary removed. Returns 0, -EINVAL for a bad
 * tensor or key (keys starting with "crc32c." are the writer's), or -errno
 * naming the file. */
int tr_ckpt_write(const char *path, const struct tr_tensor *t, int n, const char *const *meta,
                  int nmeta) SP_MUST_CHECK;

struct tr_ckpt;
/* Opens and validates path: the header length inside the file and under 100
 * MB, well-formed JSON of the shape above, known dtypes, every tensor's byte
 * range = product(shape) x dtype size, ranges inside the data and not
 * overlapping, metadata values strings, and the checksums when the file has
 * any: then every tensor and the metadata must have one and match (a file
 * with none, written before them or by another tool, is read unverified).
 * Returns 0, -ENOENT, or -EINVAL naming the file and the first fault (a
 * checksum mismatch names the tensor; a corrupt or truncated file never
 * crashes). */
int tr_ckpt_open(const char *path, struct tr_ckpt **out) SP_MUST_CHECK;
void tr_ckpt_close(struct tr_ckpt *c);
int tr_ckpt_count(const struct tr_ckpt *c);
/* Tensor i (file order) or by name; data stays valid until close. -ENOENT
 * when absent. */
int tr_ckpt_get(const struct tr_ckpt *c, int i, struct tr_tensor *out) SP_MUST_CHECK;
int tr_ckpt_find(const struct tr_ckpt *c, const char *name, struct tr_tensor *out) SP_MUST_CHECK;
/* A metadata value, or NULL. */
const char *tr_ckpt_meta(const struct tr_ckpt *c, const char *key);
/* 1 when the file carried checksums (they all matched: tr_ckpt_open checked
 * them), 0 when it had none. */
int tr_ckpt_verified(const struct tr_ckpt *c);

/* ---- pretrained weights in and out (convert.c) -------------------------------------
 * A GPT-2's parameters, whichever file they came from, in spill's layout: the
 * parameters of each of rt_model_gpt's L + 2 layers in turn, fp32 — the
 * embedding's wte (V,C) then wpe (positions,C); each block's 12 tensors in
 * llm.c's order (kn_block_param_sizes); the head's lnfw, lnfb. Files read:
 *  - a spill checkpoint (state.c's safetensors; its run config comes along);
 *  - llm.c's model file (gpt2_124M.bin: 256 x int32 header, magic 20240326,
 *    version 3 fp32 or 5 bf16, [2] maxT [3] V [4] L [5] NH [6] C [7] padded
 *    vocab Vp; then every layer's ln1w, every layer's ln1b, ...: wte has Vp
 *    rows, the V..Vp-1 ones padding that is dropped), or a directory holding
 *    model.bin;
 *  - a Hugging Face GPT-2 (a directory, or its model.safetensors, with
 *    config.json beside it): names transformer.wte.weight, ...h.<i>.attn.c_attn
 *    .weight (Conv1D: stored transposed, [C,3C]), with or without the
 *    "transformer." prefix; F32 tensors only; the head tied to wte.
 * Conversions are exact (copies, transposes; bf16 widened). */
struct tr_weights {
	int layers, channels, heads, vocab, positions; /* positions: wpe's rows (maxT) */
	float *p;                                      /* n parameters, the layout above */
	uint64_t n;
	const char *kind; /* "spill checkpoint", "llm.c model", "Hugging Face GPT-2" */
	/* a spill checkpoint's run (its config metadata): has_run 1, else 0 */
	int has_run, seq, batch;
	uint64_t seed;
};
/* Reads path (any of the above, told apart by content). Returns 0, -ENOENT, or
 * -EINVAL naming the file and the fault (bad magic or version, a size the
 * header's model does not match, a missing or misshapen tensor, a config
 * spill's GPT-2 cannot hold); a truncated or foreign file never crashes. */
int tr_weights_load(const char *path, struct tr_weights *out) SP_MUST_CHECK;
void tr_weights_free(struct tr_weights *w);
/* Where layer l's parameters start in w->p (0: embedding, 1..L: blocks,
 * L + 1: head); *n gets their count. */
uint64_t tr_weights_layer(const struct tr_weights *w, int l, uint64_t *n);
/* Writes w into dir (created if missing): format "hf": model.safetensors
 * (metadata format "pt") and config.json for transformers'
 * GPT2LMHeadModel.from_pretrained; "llmc": model.bin, llm.c's version 3
 * (fp32, the vocabulary padded to a multiple of 128 with zero rows). Each file
 * is written atomically. Returns 0, -EINVAL for another format, -errno naming
 * the file. */
int tr_weights_export(const struct tr_weights *w, const char *format,
                      const char *dir) SP_MUST_CHECK;

/* ---- generation: `spill sample` (sample.c) ----------------------------------------
 * Loads weights (tr_weights_load) and generates tokens one at a time: each
 * step runs the whole context (the last `positions` tokens at most) forward
 * through the kernels on the CPU (fp32, batch 1, no KV cache: a token costs a
 * full forward of the context, O(tokens x T x params)), takes the last
 * position's logits (final layernorm, then wte), divides them by the
 * temperature, keeps the top k and draws from their softmax with splitmix64
 * from the seed: the same seed, weights and thread count give the same tokens.
 * Vocab 256: tokens are bytes (the prompt's bytes in, bytes out); any other:
 * token ids (the prompt is ids separated by spaces or commas; printed as ids,
 * spill having no BPE tokenizer). */
struct tr_sample_config {
	const char *path;   /* the weights */
	const char *prompt; /* NULL or "": a newline (bytes), else token 50256 or 0 */
	int tokens;         /* to generate (> 0) */
	double temperature; /* 0: greedy (the largest logit) */
	int top_k;          /* 0: the whole vocabulary */
	uint64_t seed;
	int threads; /* CPU kernel threads (kn_cpu_set_threads; 0: every core) */
	FILE *out;   /* NULL: stdout */
};
/* Prints the prompt, then the tokens as they come. Returns 0, -EINVAL naming
 * a bad prompt token or setting, or tr_weights_load's error. */
int tr_sample(const struct tr_sample_config *c) SP_MUST_CHECK;

/* ---- the trainer (train.c) --------------------------------------------------------
 * A GPT-2 of the kernels' layers trained through the executor on one context:
 * batches from a corpus, progress lines, evaluation, safetensors checkpoints
 * and resume, the swap-volume profile at the end (measured, predicted by the
 * taskgraph, Harmony's closed form), a Chrome trace, a JSON report, and an
 * online tuner that re-plans with what the first steps measured. */
struct tr_config {
	/* the model: a preset (tiny, gpt2, gpt2-medium, gpt2-xl, 10b; NULL: tiny),
	 * fields > 0 override it; vocab 0: the corpus's */
	const char *model;
	int layers, channels, heads, seq, vocab, batch;
	/* the plan: schedule NULL or "auto", else a tg_sched name; 0: defaults */
	const char *schedule;
	int microbatch, group, packs, recompute, upd_cpu;
	int chunks; /* interleaved: model chunks per device (packs = chunks x devices); 0: none */
	int flush_every;     /* 2bw: steps run without a flush between them (-1: not given) */
	int tensor_parallel; /* devices each block splits over (Megatron; 0, 1: none) */
	/* the context: NULL / 0 take the SPILL_* variables; budget 0 on the host
	 * backend: a quarter of the training state (so that it swaps) */
	const char *backend, *profile, *disk;
	int devices;
	uint64_t device_mem, budget, host_mem;
	/* the profile the planner assumes (NULL: the context's own figures) */
	const char *plan_profile;
	/* the run */
	int steps;         /* 0: the preset's */
	float lr;          /* 0: 3e-4 (tiny: 1e-3) */
	const char *optim; /* NULL or "adamw"; "sgd" (Hydra's) */
	float momentum;    /* SGD: 0 (plain, no optimizer state) to < 1 */
	/* the learning rate of step s (from 0): lr x (s + 1) / warmup over the
	 * first warmup steps, then lr_schedule from lr down to lr_min x lr at the
	 * last step: "cosine" (NULL), "linear" or "constant" (lr throughout, no
	 * warmup unless given). Defaults (tr_config_defaults): warmup -1 (steps /
	 * 10, at most 2000; 0 for constant), lr_min 0.1. A function of the step and
	 * these alone, so a resumed run continues bit for bit. */
	const char *lr_schedule;
	int warmup;
	float lr_min;
	float weight_decay; /* AdamW's decoupled decay, SGD's L2 (default 0) */
	float grad_clip;    /* clip the gradients to this global norm (default 1; 0: none) */
	int total_batch;    /* tokens per step (0: batch x seq): sets batch = total_batch / seq */
	/* NULL or "fp32"; "bf16": mixed precision (bf16 weights, activations and
	 * gradients on the devices; fp32 master weights and optimizer state where
	 * the update runs; fp32 loss) */
	const char *precision;
	uint64_t seed;
	int seed_given;   /* tr_eval: 1 when seed was asked for (else a checkpoint's own) */
	const char *init; /* weights to start from (tr_weights_load); NULL: random */
	const char *data; /* NULL: the default corpus (tr_data_open) */
	int synthetic;    /* 1: no corpus, rt_gpt_synthetic_data (the model backend's runs) */
	int eval_every, eval_batches;
	/* checkpoints (state.c): checkpoint_dir/step_NNNNNNNN.safetensors every
	 * checkpoint_every steps and at the last. A fresh run (resume 0) refuses a
	 * directory that holds checkpoints (another run's) unless overwrite, which
	 * removes them before the first step. resume: from resume_file when set
	 * (its directory is checkpoint_dir when that is NULL; checkpoints there
	 * after its step are refused unless overwrite, which removes them), else
	 * from the newest usable checkpoint of checkpoint_dir (a corrupt newer one
	 * is reported with one line and skipped). keep > 0: after each checkpoint
	 * is durably written, older ones beyond the newest keep are deleted. */
	const char *checkpoint_dir;
	int checkpoint_every, resume;
	const char *resume_file;
	int overwrite, keep;
	const char *trace_file, *stats_json;
	int tune;       /* 1: the online tuner */
	int tune_after; /* steps it measures before re-planning (0: 3) */
	/* output: progress lines and the report (NULL: stdout); tty: the progress
	 * line rewrites itself (\r) instead of one line per second */
	FILE *out;
	int tty;
	/* 1: SIGINT and SIGTERM stop the run after the current step, with a
	 * checkpoint and the --stats-json file, and tr_train returns -EINTR; a
	 * second signal kills at once (the default action). The handlers are the
	 * process's: set by one tr_train at a time, restored when it returns. */
	int catch_signals;
	/* several processes, one per node (tr_nodes_init; NULL: one): data
	 * parallel across them, each over batch / nodes of every step's samples
	 * with its own plan on its own devices; rank 0 prints, writes the
	 * checkpoints and the stats. sim_nodes > 1 instead: the model backend
	 * simulates one node of that many (spill sim --nodes), its gradients'
	 * chain through the nodes on the profile's inter-node link (net_bw > 0:
	 * that one) */
	struct tr_nodes *nodes;
	int sim_nodes;
	double net_bw;
	/* ZeRO-1 across the nodes: pack k's optimizer state (and bf16's fp32
	 * masters) on node k mod N alone, which updates it and broadcasts the
	 * weights; checkpoints gather it on node 0 (the same file as without) */
	int zero1;
};
void tr_config_defaults(struct tr_config *c);

/* What a run measured (for callers and tests). */
struct tr_result {
	int steps; /* steps this run made */
	double first_loss, last_loss, last_eval;
	double seconds, tokens_per_s; /* wall (virtual on the model backend) */
	double step_s;                /* the last steps' mean step time */
	char plan[160];               /* the plan at the end */
	int switches;                 /* plans the tuner switched to */
	uint64_t evictions;
	int batch;  /* the global batch it ran with (samples per step, every node's) */
	int quiet;  /* the error was reported by node 0 (this is another node) */
	int agreed; /* every node ends with this error (else this node alone
	               fails: the others must be stopped, MPI_Abort) */
};

/* The swap-volume profile of a run (per step): what `spill train` prints at
 * the end, writes with --stats-json, and `spill report` reads back. */
#define TR_MAXDEV 16 /* devices reported one by one (DEV_MAX) */
#define TR_LINKS  5  /* H2D, D2H, P2P, host->disk, disk->host */
#define TR_KINDS  6  /* weight, gradient, optimizer, stash, boundary, input */
struct tr_profile {
	char model[160], plan[160], backend[16], tuner[768];
	int devices, steps;
	double step_s, tokens_per_s, first_loss, last_loss, last_eval;
	double compute, exposed, idle; /* seconds per step and device */
	double busy[TR_MAXDEV];        /* seconds per step each device computed */
	double measured[TR_LINKS][TR_KINDS], predicted[TR_LINKS][TR_KINDS]; /* bytes */
	int has_predicted;
	double collective;            /* all-reduce bytes over the peer links */
	double internode;             /* bytes this node sent to the others (nodes > 1) */
	int nodes;                    /* processes (or simulated nodes) of the run */
	double node_util[64];         /* each node's compute / step, its devices' mean
	                                 (mpirun: gathered; simulated: all the same) */
	int warm_steps;               /* steps the measured bytes average (0: steps) */
	int ndrives;                  /* drives of the disk tier (0: none) */
	double drive_bytes[16];       /* per step and drive: written + read */
	double closed_form;           /* Harmony's weight volume for the schedule, -1: none */
	const double *losses, *times; /* each step's loss and seconds (written to the JSON,
	                                 not read back) */
	int nlosses, first_step;
	int switch_step; /* the step after which the tuner switched plans, 0: none */
};
void tr_profile_print(const struct tr_profile *p, FILE *f);
int tr_profile_json(const struct tr_profile *p, const char *path) SP_MUST_CHECK;
/* Reads a --stats-json file. Returns 0, -errno, or -EINVAL naming the fault. */
int tr_profile_read(const char *path, struct tr_profile *p) SP_MUST_CHECK;

/* Runs the training the config describes. Returns 0, or -errno with one line
 * in sp_last_error(): a budget too small for any plan (naming the smallest
 * that would fit), an unknown schedule or model, a missing or empty corpus, a
 * corrupt or mismatched checkpoint, a checkpoint directory holding another
 * run's checkpoints (-EEXIST), contradicting options; nothing is overwritten
 * by a run that fails before its first step (--overwrite removes files only
 * once the run has started). -ERANGE: the run diverged ("diverged at step N":
 * a non-finite loss, or a non-finite value in the state it was about to
 * save); no checkpoint holding one is written, the last good one stays, and
 * the report and --stats-json are written. -EINTR: stopped by SIGINT or
 * SIGTERM (catch_signals), after writing a checkpoint of the last step done
 * (with checkpoint_dir) and the report; the message names the files. A
 * changed learning rate on resume is a warning line, not an error (the run
 * then no longer matches an uninterrupted one). */
int tr_train(const struct tr_config *c, struct tr_result *res) SP_MUST_CHECK;
/* `spill eval`: the validation loss of the weights c->init (required) on
 * c->eval_batches batches of the corpus (c->data), forward only, through the
 * executor as the training's evaluation (the same batches for the same
 * seed, batch and seq; a spill checkpoint's own are the defaults). Prints one
 * line and sets *loss. Returns 0, or -errno with one line (no validation
 * split, a corpus the vocabulary cannot hold, tr_train's errors). */
int tr_eval(const struct tr_config *c, double *loss) SP_MUST_CHECK;

/* ---- many models at once: `spill tune` (multi.c) ------------------------------------
 * Model selection: every preset in models (none: base.model) times the grid's
 * cartesian product ("lr=1e-3,3e-4 batch=8,16"; keys lr, batch, seq, layers,
 * channels, heads), trained together under SHARP (rt_sharp_run) on one context
 * built from base (backend, devices, budget, data, steps, seed; on the host
 * backend the default budget per device is half the largest model's state, so
 * every model trains in shards). Prints a progress table, then the ranking by
 * validation loss (training loss without validation data). */
#define TR_TUNE_MAX_MODELS 64 /* models one tune trains at most (and values per grid key) */

struct tr_tune_config {
	struct tr_config base;
	const char *models[TR_TUNE_MAX_MODELS]; /* presets; every one times the grid */
	int nmodels;
	const char *grid;   /* NULL: no grid (one model per preset) */
	const char *policy; /* lrtf (NULL), random, fifo */
	int no_double_buffer;
	int recover; /* --recover: models go back to their last step when a device fails */
	/* the double-buffer reserve in [0, 1): a shard and this fraction of it
	 * more fit a device (tg_pack_greedy); negative: the default, 0.15 */
	double reserve;
	int halving; /* successive halving: a rung every this many steps (0: off) */
	/* a directory: the best-ranked model's checkpoint goes there at the end
	 * (DIR/step_N.safetensors, as spill train writes them: spill eval, sample,
	 * export and train --init read it); NULL: none */
	const char *save_best;
};
/* Returns 0, or -errno with one line: an empty or malformed grid, an unknown
 * policy or preset, a model that cannot fit one layer per shard (naming the
 * layer and the shortfall), a corpus that cannot be read. */
int tr_tune_models(const struct tr_tune_config *c) SP_MUST_CHECK;

/* ---- several processes (nodes.c) ---------------------------------------------------
 * `mpirun -np N spill train ...` (or srun): one process per node. MPI starts
 * them; the runtime's all-reduce and loss go through its messages (struct
 * rt_nodes). Needs a launcher's variables (OMPI_COMM_WORLD_SIZE, PMI_SIZE,
 * PMIX_RANK, SLURM_PROCID); without one, spill is one process and never
 * touches MPI. */
struct tr_nodes;
struct rt_nodes;
/* The processes the launcher started (>= 1), or 0 when spill was not started
 * by one. */
int tr_nodes_launched(void);
/* This process's rank from the launcher's variables (before MPI is up). */
int tr_nodes_env_rank(void);
/* MPI_Init_thread (MPI_THREAD_MULTIPLE). stop: the flag a stop signal sets
 * (a receive waiting on a dead node gives up on it). -ENOTSUP: built without
 * MPI, or no thread support. */
int tr_nodes_init(int *argc, char ***argv, const volatile sig_atomic_t *stop,
                  struct tr_nodes **out) SP_MUST_CHECK;
/* failed: MPI_Abort (the other nodes may be waiting for this one); else
 * MPI_Finalize. NULL is ok. */
void tr_nodes_finish(struct tr_nodes *n, int failed);
const struct rt_nodes *tr_nodes_rt(const struct tr_nodes *n);
/* path: the caller's buffer holding its newest checkpoint's path (named in
 * the line a node prints when it gives up on a dead one); NULL: none. */
void tr_nodes_set_checkpoint(struct tr_nodes *n, const char *path);
int tr_nodes_rank(const struct tr_nodes *n); /* 0 for NULL */
int tr_nodes_size(const struct tr_nodes *n); /* 1 for NULL */
/* 1 when any node's flag is non-zero (every node must call it). */
int tr_nodes_any(struct tr_nodes *n, int flag);
/* Blocking messages between the trainers of two nodes (not the runtime's):
 * ZeRO-1's checkpoints gather the optimizer state on node 0. tag 0..32767. */
int tr_nodes_send(struct tr_nodes *n, int to, int tag, const void *buf, size_t bytes) SP_MUST_CHECK;
int tr_nodes_recv(struct tr_nodes *n, int from, int tag, void *buf, size_t bytes) SP_MUST_CHECK;
/* After an error mid-run: 1 when every node met one (called by each within
 * timeout_s of the others: a deterministic error, the same everywhere; node 0
 * alone reports it), 0 when the others go on (the caller must end the job). */
int tr_nodes_all_failed(struct tr_nodes *n, double timeout_s);
/* x[0..count) summed over the nodes, in place, on every node. */
int tr_nodes_sum_doubles(struct tr_nodes *n, double *x, int count) SP_MUST_CHECK;
/* *first: the first node (in rank order) whose failed is non-zero, or -1. */
int tr_nodes_failed(struct tr_nodes *n, int failed, int *first) SP_MUST_CHECK;
/* The last tr_nodes_failed's first failing node (every node knows the run
 * ends; that one reports why), or -1. */
int tr_nodes_agreed_failure(const struct tr_nodes *n);
/* *first_bad: the first node whose h differs from node 0's, or -1. */
int tr_nodes_gather_hash(struct tr_nodes *n, uint64_t h, int *first_bad) SP_MUST_CHECK;
/* The flag the trainer's SIGINT/SIGTERM handler sets (tr_config.catch_signals). */
const volatile sig_atomic_t *tr_stop_flag(void);

#endif

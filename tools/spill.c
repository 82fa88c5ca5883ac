/* tools/spill.c — the `spill` command.
 *
 *   spill params [--markdown]   the SPILL_* table, or the current values
 *   spill devices               open the configured backend and list its devices
 *   spill swap-demo             train-shaped accesses through the vmm on device 0 of the
 *                               configured backend, with and without next-use hints
 *                               (SPILL_VMM_TRACE_FILE: the Belady run's Chrome trace)
 *   spill train [flags]         train a GPT through the executor (spill train --help)
 *   spill sim [flags]           the same run on the model backend: a what-if in virtual time
 *   spill report FILE.json      print a run's swap-volume profile again (--stats-json),
 *                               or a preloaded program's (spill run --stats-json)
 *   spill run [flags] -- CMD    run an unmodified CUDA program with the preload shim
 *   spill prepare TEXT... -o DIR   llm.c token shards of text files (bytes as tokens)
 *   spill eval|sample|export WEIGHTS   pretrained weights: loss, generation, conversion
 *   spill version, spill --version      SPILL_VERSION_STRING of include/spill.h
 * Every subcommand takes --help / -h: its usage on stdout, exit 0, nothing run.
 * Every error is one line on stderr and a non-zero exit, naming the flag the
 * user typed (not the SPILL_* variable the flag sets).
 */
#include "common/json.h"
#include "common/log.h"
#include "common/params.h"
#include "common/stats.h"
#include "device/device.h"
#include "train/train.h"
#include "vmm/vmm.h"

#include "spill.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int load_params(struct sp_params *p)
{
	if (sp_params_load(p, NULL) < 0 || sp_params_apply_logging(p) < 0) {
		fprintf(stderr, "spill: %s\n", sp_last_error());
		return -1;
	}
	return 0;
}

/* Does argv[1..] ask for help (--help or -h, before any "--")? */
static int wants_help(int argc, char **argv)
{
	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
			return 1;
	return 0;
}

/* The smallest size a size flag takes: below 64K not one layer of any model
 * fits (so 1K is refused, saying so, not planned against or rounded), and 0
 * would read as the default. spill run's --budget is a device the program
 * maps memory in: at least 2M, a GPU's mapping granularity (less rounds down
 * to nothing). */
#define MIN_SIZE_FLAG  (64ull << 10)
#define MIN_RUN_BUDGET (2ull << 20)

/* A size flag's value (K/M/G/T, at least min) into *out. 0, or 2 (the exit
 * status) with one line naming the flag. */
static int size_flag(const char *cmd, const char *flag, const char *v, uint64_t min, uint64_t *out)
{
	uint64_t z;
	if (sp_parse_size(v, &z) < 0) {
		fprintf(stderr,
		        "spill %s: %s %s: not a size (digits with an optional K, M, G or T "
		        "suffix)\n",
		        cmd, flag, v);
		return 2;
	}
	if (z < min) {
		int mib = !(min & ((1u << 20) - 1));
		fprintf(stderr, "spill %s: %s %s: below the minimum, %llu%c\n", cmd, flag, v,
		        (unsigned long long)(min >> (mib ? 20 : 10)), mib ? 'M' : 'K');
		return 2;
	}
	*out = z;
	return 0;
}

/* The flags that set a SPILL_* row directly (devices, swap-demo, run). */
struct var_flag {
	const char *flag, *var;
	int size; /* a size (at least MIN_SIZE_FLAG; spill run's MIN_RUN_BUDGET) */
};
static const struct var_flag device_flags[] = {
    {"--backend", "SPILL_BACKEND", 0},
    {"--devices", "SPILL_DEVICES", 0},
    {"--device-mem", "SPILL_DEVICE_MEM", 1},
    {"--profile", "SPILL_PROFILE", 0},
};
#define NDEVICE_FLAGS (sizeof(device_flags) / sizeof(device_flags[0]))

/* Prints "spill CMD: " and the last error with the SPILL_* variables of the
 * given flags (given[i] for device_flags[i]) named as those flags. */
static void flag_error(const char *cmd, const struct var_flag *flags, size_t n, const int *given)
{
	char msg[SP_ERROR_MSG_MAX];
	snprintf(msg, sizeof(msg), "%s", sp_last_error());
	for (size_t i = 0; i < n; i++)
		if (given[i])
			sp_params_rename(msg, sizeof(msg), flags[i].var, flags[i].flag);
	fprintf(stderr, "spill %s: %s\n", cmd, msg);
}

/* devices and swap-demo: SPILL_* from the environment, device_flags over
 * them. 0, 1 (help printed) or 2 (a bad flag, one line). */
static int parse_device_flags(const char *cmd, const char *usage, int argc, char **argv,
                              struct sp_params *p, int *given)
{
	if (wants_help(argc, argv)) {
		fputs(usage, stdout);
		return 1;
	}
	if (load_params(p) < 0)
		return 2;
	for (int i = 1; i < argc; i++) {
		size_t k = 0;
		while (k < NDEVICE_FLAGS && strcmp(argv[i], device_flags[k].flag))
			k++;
		if (k == NDEVICE_FLAGS) {
			fprintf(stderr, "spill %s: unknown %s %s (spill %s --help)\n", cmd,
			        argv[i][0] == '-' ? "flag" : "argument", argv[i], cmd);
			return 2;
		}
		if (i + 1 >= argc) {
			fprintf(stderr, "spill %s: missing value for %s (spill %s --help)\n", cmd,
			        argv[i], cmd);
			return 2;
		}
		const char *v = argv[++i];
		uint64_t z;
		if (device_flags[k].size && size_flag(cmd, argv[i - 1], v, MIN_SIZE_FLAG, &z))
			return 2;
		given[k] = 1;
		if (sp_params_set(p, device_flags[k].var, v) < 0) {
			flag_error(cmd, device_flags, NDEVICE_FLAGS, given);
			return 2;
		}
	}
	return 0;
}

static const char params_usage[] =
    "usage: spill params [--markdown]\n"
    "  prints every SPILL_* variable with its current value (from the environment)\n"
    "  and its description; --markdown: the README's table of them instead.\n";

static int cmd_params(int argc, char **argv)
{
	struct sp_params p;
	int markdown = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			fputs(params_usage, stdout);
			return 0;
		}
		if (strcmp(argv[i], "--markdown")) {
			fprintf(stderr, "spill params: unknown flag %s (spill params --help)\n",
			        argv[i]);
			return 2;
		}
		markdown = 1;
	}
	if (markdown) {
		sp_params_print_markdown(stdout);
		return 0;
	}
	if (load_params(&p) < 0)
		return 1;
	sp_params_print_values(stdout, &p);
	return 0;
}

static const char devices_usage[] =
    "usage: spill devices [--backend cuda|host|model] [--devices N] [--device-mem SIZE]\n"
    "                     [--profile NAME]\n"
    "  opens the backend (default SPILL_BACKEND: cuda with a GPU, else host) and lists\n"
    "  its devices: capacity, compute, memory and link bandwidths, peer links. The\n"
    "  flags override the SPILL_* variables of the same names (spill params).\n";

static int cmd_devices(int argc, char **argv)
{
	struct sp_params p;
	struct dev_config cfg;
	struct dev_ctx *ctx = NULL;
	int given[NDEVICE_FLAGS] = {0};
	int rc = parse_device_flags("devices", devices_usage, argc, argv, &p, given);
	if (rc)
		return rc == 1 ? 0 : rc;
	if (dev_config_from_params(&p, &cfg) < 0 || dev_open(&cfg, &ctx) < 0) {
		flag_error("devices", device_flags, NDEVICE_FLAGS, given);
		return 1;
	}
	int n = dev_count(ctx);
	printf("backend %s, %d device(s)\n", dev_backend_name(dev_backend(ctx)), n);
	for (int d = 0; d < n; d++) {
		struct dev_info info;
		char cap[32];
		if (dev_info(ctx, d, &info) < 0)
			continue;
		printf("  dev %d: %-24s %12s  %.1f TFLOP/s  mem %.0f GB/s  H2D %.1f GB/s  D2H %.1f "
		       "GB/s\n",
		       d, info.name, sp_format_size(info.capacity, cap, sizeof(cap)),
		       info.flops / 1e12, info.mem_bw / 1e9, dev_link_bw(ctx, DEV_HOST, d) / 1e9,
		       dev_link_bw(ctx, d, DEV_HOST) / 1e9);
	}
	printf("  host link (shared): %.1f GB/s; disk: %.1f GB/s\n", dev_host_link_bw(ctx) / 1e9,
	       dev_link_bw(ctx, DEV_DISK, DEV_HOST) / 1e9);
	for (int a = 0; a < n; a++)
		for (int b = 0; b < n; b++)
			if (a != b && dev_p2p_possible(ctx, a, b))
				printf("  p2p %d->%d: %.1f GB/s\n", a, b,
				       dev_link_bw(ctx, a, b) / 1e9);
	dev_close(ctx);
	return 0;
}

/* ---- swap-demo ------------------------------------------------------------------
 * A model of L layers, each with weights, gradients, optimizer state (2x) and a
 * stashed activation, trained for 2 iterations on device 0 with a vmm budget of
 * a third of the state: forward reads each layer's weights and writes its
 * activation; backward reads weights and activation, accumulates the gradient,
 * and updates the layer right after (just-in-time update). The same accesses
 * run twice: with next-use hints from the known order (Belady) and without (LRU).
 * Writes are device memsets, so the run is real on every backend. */
enum { SD_W, SD_G, SD_O, SD_A, SD_KINDS };
#define SD_LAYERS 12
#define SD_ITERS  2

struct sd_access {
	int layer, what;
	enum vmm_access access;
};

/* The access order of one iteration; next use of each access = the index of the
 * same object's next access (across iterations). */
static int sd_order(struct sd_access *a)
{
	int n = 0;
	for (int l = 0; l < SD_LAYERS; l++) {
		a[n++] = (struct sd_access){l, SD_W, VMM_READ};
		a[n++] = (struct sd_access){l, SD_A, VMM_OVERWRITE};
	}
	for (int l = SD_LAYERS - 1; l >= 0; l--) {
		a[n++] = (struct sd_access){l, SD_W, VMM_READ};
		a[n++] = (struct sd_access){l, SD_A, VMM_READ};
		a[n++] = (struct sd_access){l, SD_G, VMM_OVERWRITE};
		a[n++] = (struct sd_access){l, SD_O, VMM_WRITE};
		a[n++] = (struct sd_access){l, SD_W, VMM_WRITE};
	}
	return n;
}

struct sd_result {
	uint64_t h2d, d2h, weight_d2h;
	double secs;
};

static int sd_run(struct dev_ctx *ctx, const struct vmm_config *base, size_t unit, int hints,
                  struct sd_result *res)
{
	static const size_t mult[SD_KINDS] = {2, 2, 4, 1}; /* in units of half a weight */
	static const enum vmm_kind kinds[SD_KINDS] = {VMM_KIND_WEIGHT, VMM_KIND_GRAD,
	                                              VMM_KIND_OPTIM, VMM_KIND_STASH};
	struct vmm_config cfg = *base;
	cfg.policy = hints ? VMM_POLICY_BELADY : VMM_POLICY_LRU;
	struct vmm *v = NULL;
	struct dev_stream *s = NULL;
	struct dev_event *done = NULL;
	uint64_t id[SD_LAYERS][SD_KINDS];
	struct sd_access acc[SD_LAYERS * 7];
	int n = sd_order(acc), rc;
	memset(id, 0, sizeof(id));
	SP_CHECK(vmm_open(ctx, &cfg, &v));
	SP_CHECK_GOTO(dev_stream_create(ctx, 0, &s), rc, out);
	SP_CHECK_GOTO(dev_event_create(ctx, &done), rc, out);
	static const char *const what[SD_KINDS] = {"w", "grad", "optim", "act"};
	for (int l = 0; l < SD_LAYERS; l++)
		for (int k = 0; k < SD_KINDS; k++) {
			char name[32]; /* named in the stats and the trace */
			snprintf(name, sizeof(name), "layer%d.%s", l, what[k]);
			struct vmm_obj_desc d = {
			    .bytes = mult[k] * unit, .kind = kinds[k], .name = name};
			SP_CHECK_GOTO(vmm_obj_create(v, &d, &id[l][k]), rc, out);
		}
	double t0 = dev_now(ctx);
	for (int it = 0; it < SD_ITERS; it++) {
		for (int i = 0; i < n; i++) {
			const struct sd_access *a = &acc[i];
			uint64_t obj = id[a->layer][a->what];
			enum vmm_access mode = a->access;
			if (it == 0 && i < 2 * SD_LAYERS && a->what == SD_W)
				mode = VMM_OVERWRITE; /* initialisation */
			if (it == 0 && a->what == SD_O)
				mode = VMM_OVERWRITE;
			void *p;
			struct dev_event *ready;
			SP_CHECK_GOTO(vmm_acquire(v, obj, 0, mode, &p, &ready), rc, out);
			if (ready)
				SP_CHECK_GOTO(dev_stream_wait_event(s, ready), rc, out);
			if (mode != VMM_READ) {
				struct vmm_obj_info inf;
				SP_CHECK_GOTO(vmm_obj_info(v, obj, &inf), rc, out);
				SP_CHECK_GOTO(dev_memset_async(s, p, 0, i & 0xff, inf.bytes), rc,
				              out);
			}
			SP_CHECK_GOTO(dev_event_record(done, s), rc, out);
			SP_CHECK_GOTO(vmm_release(v, obj, 0, done), rc, out);
			if (hints) { /* the next access of the same object in the schedule */
				uint64_t next = VMM_NO_HINT;
				for (int j = 1; j <= n && next == VMM_NO_HINT; j++) {
					const struct sd_access *b = &acc[(i + j) % n];
					if (b->layer == a->layer && b->what == a->what &&
					    (i + j < n || it + 1 < SD_ITERS))
						next = (uint64_t)(it * n + i + j);
				}
				SP_CHECK_GOTO(vmm_hint(v, obj, next), rc, out);
			}
		}
	}
	SP_CHECK_GOTO(vmm_sync(v), rc, out);
	SP_CHECK_GOTO(dev_stream_sync(s), rc, out);
	res->secs = dev_now(ctx) - t0;
	res->h2d = vmm_xfer_bytes(v, VMM_XFER_H2D);
	res->d2h = vmm_xfer_bytes(v, VMM_XFER_D2H);
	res->weight_d2h = vmm_link_bytes(v, 0, VMM_HOST, VMM_KIND_WEIGHT);
	rc = 0;
out:
	for (int l = 0; l < SD_LAYERS; l++)
		for (int k = 0; k < SD_KINDS; k++)
			if (id[l][k] && vmm_obj_destroy(v, id[l][k]) < 0 && rc == 0)
				rc = -EIO;
	if (done && dev_event_destroy(done) < 0 && rc == 0)
		rc = -EIO;
	if (s && dev_stream_destroy(s) < 0 && rc == 0)
		rc = -EIO;
	vmm_close(v);
	return rc;
}

static const char swap_demo_usage[] =
    "usage: spill swap-demo [--backend cuda|host|model] [--devices N] [--device-mem SIZE]\n"
    "                       [--profile NAME]\n"
    "  the vmm alone on device 0: a 12-layer model's weights, gradients, optimizer\n"
    "  state and activations (three times the vmm's budget) accessed as 2 iterations\n"
    "  of forward, backward and just-in-time update would, once with next-use hints\n"
    "  (Belady) and once without (LRU); prints the bytes each moved. With\n"
    "  SPILL_VMM_TRACE_FILE, the Belady run's transfers as a Chrome trace.\n";

static int cmd_swap_demo(int argc, char **argv)
{
	struct sp_params p;
	struct dev_config dc;
	struct vmm_config vc;
	struct dev_ctx *ctx = NULL;
	int given[NDEVICE_FLAGS] = {0};
	int rc = parse_device_flags("swap-demo", swap_demo_usage, argc, argv, &p, given);
	if (rc)
		return rc == 1 ? 0 : rc;
	if (dev_config_from_params(&p, &dc) < 0 || vmm_config_from_params(&p, &vc) < 0 ||
	    dev_open(&dc, &ctx) < 0) {
		flag_error("swap-demo", device_flags, NDEVICE_FLAGS, given);
		return 1;
	}
	struct dev_info in;
	if (dev_info(ctx, 0, &in) < 0) {
		fprintf(stderr, "spill: %s\n", sp_last_error());
		dev_close(ctx);
		return 1;
	}
	/* Half a weight: 4 MiB, or less when the device is small. */
	size_t unit = 4u << 20;
	while (unit > (64u << 10) && SD_LAYERS * 9 * unit / 3 > in.capacity / 2)
		unit /= 2;
	uint64_t state = (uint64_t)SD_LAYERS * 9 * unit;
	vc.ndevices = 1;
	vc.device_mem = state / 3;
	vc.stable_mem = 0;
	vc.use_disk = 0;
	if (vc.host_mem > 2 * state)
		vc.host_mem = 2 * state;
	char a[32], b[32], c[32];
	printf("swap-demo on %s (backend %s): %d layers, weights %s each, gradients alike, "
	       "optimizer state 2x, activations 0.5x: %s of state, vmm budget %s on device 0; "
	       "%d iterations of forward, backward and just-in-time update\n",
	       in.name, dev_backend_name(dev_backend(ctx)), SD_LAYERS,
	       sp_format_size(2 * unit, a, 32), sp_format_size(state, b, 32),
	       sp_format_size(vc.device_mem, c, 32), SD_ITERS);
	struct sd_result r[2];
	for (int h = 0; h <= 1; h++) { /* Belady last: its trace is the one kept */
		if (sd_run(ctx, &vc, unit, h, &r[h]) < 0) {
			fprintf(stderr, "spill: swap-demo: %s\n", sp_last_error());
			dev_close(ctx);
			return 1;
		}
	}
	printf("%-24s %12s %12s %12s %10s %14s %10s\n", "policy", "H2D", "D2H", "moved", "vs LRU",
	       "weights D2H", "time (s)");
	for (int h = 1; h >= 0; h--) {
		char x[32], y[32], z[32], w[32];
		uint64_t moved = r[h].h2d + r[h].d2h, lru = r[0].h2d + r[0].d2h;
		printf("%-24s %12s %12s %12s %10.3f %14s %10.3f\n",
		       h ? "belady (next-use hints)" : "lru (no hints)",
		       sp_format_size(r[h].h2d, x, 32), sp_format_size(r[h].d2h, y, 32),
		       sp_format_size(moved, z, 32), lru ? (double)moved / lru : 0,
		       sp_format_size(r[h].weight_d2h, w, 32), r[h].secs);
	}
	dev_close(ctx);
	return 0;
}

/* ---- train, sim -------------------------------------------------------------------- */

static const char train_help[] =
    "usage: spill train [flags]    (spill sim: the same on the model backend)\n"
    "model:   --model tiny|gpt2|gpt2-medium|gpt2-xl|10b|40b  (default tiny)\n"
    "         --layers N --channels N --heads N --seq N --vocab N --batch N\n"
    "plan:    --schedule auto|dp-swap|gpipe|1f1b|harmony-dp|harmony-pp|interleaved|2bw\n"
    "         (default auto; interleaved: packs round-robin, --chunks V per device;\n"
    "         2bw: --flush-every K, the pipeline drained once in K steps; default 8\n"
    "         where the prediction has it faster, else 1)\n"
    "         --tensor-parallel T (2, 4: each block split over T devices of a stage,\n"
    "         devices = stages x T; a pipeline schedule, fp32, --grad-clip 0)\n"
    "         --microbatch N --group N --packs N --recompute --update-on-cpu\n"
    "         --plan-profile NAME (the devices the planner assumes) --no-tune\n"
    "         --tune-after N (steps the tuner measures first, default 3)\n"
    "devices: --backend cuda|host|model --devices N --device-mem SIZE --budget SIZE\n"
    "         --host-mem SIZE --disk DIR[,DIR...] --profile NAME\n"
    "run:     --steps N --lr X --seed N --data PATH (llm.c shards, a directory of\n"
    "         them, or text) --eval-every N --eval-batches N\n"
    "         --optim adamw|sgd (default adamw) --momentum X (sgd; default 0)\n"
    "         --weight-decay X (default 0) --grad-clip X (global norm; default 1, 0: off)\n"
    "         --lr-schedule cosine|linear|constant (default cosine, to --lr-min X of\n"
    "         --lr, default 0.1) --warmup N (steps; default steps/10, constant: 0)\n"
    "         --total-batch TOKENS (sets --batch to TOKENS / seq)\n"
    "         --precision fp32|bf16 (default fp32; bf16: bf16 weights, activations and\n"
    "         gradients, fp32 master weights and optimizer state, fp32 loss)\n"
    "         --checkpoint DIR --checkpoint-every N --keep N (the newest N)\n"
    "         --resume [FILE] (FILE, else DIR's newest) --overwrite (DIR's old ones)\n"
    "         --init FILE (start from pretrained weights: a spill checkpoint, llm.c's\n"
    "         model .bin, or a Hugging Face GPT-2 directory; the shape comes from it)\n"
    "         --trace FILE (Chrome/Perfetto trace) --stats-json FILE\n"
    "Sizes: --device-mem is an emulated GPU's size (host backend; the usable part of\n"
    "a real one on cuda); --budget is the vmm's share of each device, what the\n"
    "training state swaps through (default 90% of the device; with no --model on the\n"
    "host backend or a GPU, a quarter of the training state over all devices). Sizes\n"
    "take K/M/G/T, at least 64K. (spill run --budget is the device size instead.)\n"
    "Flags override the SPILL_* variables. With no flags: a small GPT on the default\n"
    "corpus (Debian's bible-kjv), on the emulated GPUs when there is no GPU, with a\n"
    "device budget of a quarter of the training state (on a GPU too, unless --model\n"
    "names a preset: that gets the whole device).\n"
    "Several nodes: mpirun -np N spill train ... (or srun): one process per node, each\n"
    "on its own devices over batch / N of every step's samples, the gradients added\n"
    "across the nodes in a fixed order (the bits of one process with the same replicas;\n"
    "docs/train.md \"Several nodes\"). spill sim --nodes N predicts it. --zero1: each\n"
    "node keeps and updates 1/N of the optimizer state (and bf16's fp32 masters)\n"
    "and sends the new weights to the others (ZeRO-1); the same bits.\n";

static const char sim_help[] =
    "usage: spill sim [flags]    spill train's run on the model backend, in virtual time\n"
    "  the executor and the vmm run every step against a device profile: no data\n"
    "  moves, so there is no loss; prints the predicted step time, utilization per\n"
    "  device, the time split and the swap volume per link, and the wall time taken.\n"
    "model:   --model tiny|gpt2|gpt2-medium|gpt2-xl|10b|40b  (default gpt2: 12 layers,\n"
    "         768 channels, batch 8, seq 1024, 20 steps; 10b, 40b: 3 steps)\n"
    "         --layers N --channels N --heads N --seq N --vocab N --batch N\n"
    "         --optim adamw|sgd --momentum X --precision fp32|bf16 --total-batch TOKENS\n"
    "plan:    --schedule auto|dp-swap|gpipe|1f1b|harmony-dp|harmony-pp|interleaved|2bw\n"
    "         (default auto; interleaved: packs round-robin, --chunks V per device;\n"
    "         2bw: --flush-every K, the pipeline drained once in K steps; default 8\n"
    "         where the prediction has it faster, else 1)\n"
    "         --tensor-parallel T (2, 4: each block split over T devices of a stage,\n"
    "         devices = stages x T; a pipeline schedule, fp32, --grad-clip 0)\n"
    "         --microbatch N --group N --packs N --recompute --update-on-cpu\n"
    "         --plan-profile NAME\n"
    "devices: --profile NAME (default SPILL_PROFILE, else gtx1080ti-x4) --devices N\n"
    "         (default: the profile's count) --device-mem SIZE (default: the profile's)\n"
    "         --budget SIZE (the vmm's share of each device; default 90%)\n"
    "         --host-mem SIZE --disk DIR[,DIR...] (a simulated disk tier; nothing is\n"
    "         written)  --backend model (the only one: spill train runs the others)\n"
    "run:     --steps N --seed N --trace FILE --stats-json FILE\n"
    "nodes:   --nodes N (N nodes of these devices, data parallel: --batch is the\n"
    "         global batch; prints per-node utilization and the scaling against one\n"
    "         node) --net RATE (each node's inter-node link per direction, e.g.\n"
    "         200Gb/s or 25GB/s; default the profile's net, else 200Gb/s) --zero1 (the\n"
    "         optimizer state sharded over the nodes; the weights broadcast after)\n"
    "Sizes take K/M/G/T, at least 64K. Refused here (no data, no state): --data,\n"
    "--checkpoint, --resume, --init, --eval-every, --tune.\n";

static int bad_flag(const char *cmd, const char *msg, const char *flag)
{
	fprintf(stderr, "spill %s: %s %s (spill %s --help)\n", cmd, msg, flag, cmd);
	return 2;
}

static int parse_int(const char *cmd, const char *flag, const char *v, int *out)
{
	char *end;
	errno = 0;
	long x = strtol(v, &end, 10);
	if (errno || *end || end == v || x < 0 || x > 1 << 30)
		return bad_flag(cmd, "bad value for", flag);
	*out = (int)x;
	return 0;
}

/* Is name --lr, --momentum, --seed, a training-only one (--weight-decay,
 * --grad-clip, --lr-min) or tune's --reserve? */
static int is_number_flag(const char *name, int tune)
{
	return !strcmp(name, "--lr") || !strcmp(name, "--momentum") || !strcmp(name, "--seed") ||
	       (!tune && (!strcmp(name, "--weight-decay") || !strcmp(name, "--grad-clip") ||
	                  !strcmp(name, "--lr-min"))) ||
	       (tune && !strcmp(name, "--reserve"));
}

/* Those flags' values, in range, into c (or *reserve), else one line naming
 * the flag, its value and what it takes. 0, or 2 (the exit status). */
static int number_flag(const char *cmd, const char *name, const char *val, struct tr_config *c,
                       double *reserve)
{
	int lr = !strcmp(name, "--lr"), mom = !strcmp(name, "--momentum");
	int seed = !strcmp(name, "--seed");
	int wd = !strcmp(name, "--weight-decay"), clip = !strcmp(name, "--grad-clip");
	int lr_min = !strcmp(name, "--lr-min"); /* else --reserve */
	unsigned long long seed_val = 0;
	char *end;
	errno = 0;
	double x = strtod(val, &end);
	int ok = !errno && end != val && !*end && x >= 0 && x <= FLT_MAX;
	const char *want = "a fraction in [0, 1)"; /* momentum, reserve */
	if (lr) {
		ok &= (float)x > 0; /* 0 (or 1e-50, 0 as a float) would read as the default */
		want = "a positive number";
	} else if (seed) {
		errno = 0;
		seed_val = strtoull(val, &end, 10); /* exact to 2^64 - 1, unlike x */
		ok = !errno && end != val && !*end && val[strspn(val, " \t")] != '-';
		want = "an integer >= 0";
	} else if (wd || clip) {
		want = "a number >= 0";
	} else if (lr_min) {
		ok &= x <= 1;
		want = "a fraction of --lr in [0, 1]";
	} else {
		ok &= x < 1;
	}
	if (!ok) {
		fprintf(stderr, "spill %s: %s %s: wants %s (spill %s --help)\n", cmd, name, val,
		        want, cmd);
		return 2;
	}
	if (lr)
		c->lr = (float)x;
	else if (mom)
		c->momentum = (float)x;
	else if (seed)
		c->seed = seed_val;
	else if (wd)
		c->weight_decay = (float)x;
	else if (clip)
		c->grad_clip = (float)x;
	else if (lr_min)
		c->lr_min = (float)x;
	else
		*reserve = x;
	return 0;
}

/* The last error of a run, with the SPILL_* variables that c's flags set
 * named as those flags (the trainer opens its context from the table). */
static void train_error(const char *cmd, const struct tr_config *c)
{
	const struct var_flag flags[] = {
	    {"--backend", "SPILL_BACKEND", 0},       {"--devices", "SPILL_DEVICES", 0},
	    {"--device-mem", "SPILL_DEVICE_MEM", 1}, {"--budget", "SPILL_VMM_DEVICE_MEM", 1},
	    {"--host-mem", "SPILL_HOST_MEM", 1},     {"--disk", "SPILL_DISK_PATH", 0},
	    {"--profile", "SPILL_PROFILE", 0},
	};
	int given[] = {c->backend != NULL, c->devices > 0,  c->device_mem > 0, c->budget > 0,
	               c->host_mem > 0,    c->disk != NULL, c->profile != NULL};
	flag_error(cmd, flags, sizeof(flags) / sizeof(flags[0]), given);
}

/* "200Gb/s", "25GB/s", "400 Gb/s", "1.6Tb/s": bytes/s, or 0 */
static double parse_link_rate(const char *v)
{
	char *end;
	double x = strtod(v, &end);
	while (*end == ' ')
		end++;
	static const struct {
		const char *u;
		double scale;
	} units[] = {{"Gb/s", 1e9 / 8}, {"Tb/s", 1e12 / 8}, {"Mb/s", 1e6 / 8},
	             {"GB/s", 1e9},     {"TB/s", 1e12},     {"MB/s", 1e6}};
	if (end == v || !(x > 0) || !isfinite(x))
		return 0;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (!strcmp(end, units[i].u))
			return x * units[i].scale;
	return 0;
}

/* Parses spill train/sim's flags into *cp: -1 to go on, else the exit status
 * (help printed, or one line naming the bad flag). */
static int train_parse(const char *cmd, int sim, int argc, char **argv, struct tr_config *cp)
{
	struct tr_config c = *cp;
	const char *net = NULL;
	struct {
		const char *name;
		int *i;
		const char **s;
		uint64_t *z;
		int flag;
	} opts[] = {
	    {"--model", NULL, &c.model, NULL, 0},
	    {"--layers", &c.layers, NULL, NULL, 0},
	    {"--channels", &c.channels, NULL, NULL, 0},
	    {"--heads", &c.heads, NULL, NULL, 0},
	    {"--seq", &c.seq, NULL, NULL, 0},
	    {"--vocab", &c.vocab, NULL, NULL, 0},
	    {"--batch", &c.batch, NULL, NULL, 0},
	    {"--schedule", NULL, &c.schedule, NULL, 0},
	    {"--microbatch", &c.microbatch, NULL, NULL, 0},
	    {"--group", &c.group, NULL, NULL, 0},
	    {"--packs", &c.packs, NULL, NULL, 0},
	    {"--chunks", &c.chunks, NULL, NULL, 0},
	    {"--flush-every", &c.flush_every, NULL, NULL, 0},
	    {"--tensor-parallel", &c.tensor_parallel, NULL, NULL, 0},
	    {"--recompute", &c.recompute, NULL, NULL, 1},
	    {"--update-on-cpu", &c.upd_cpu, NULL, NULL, 1},
	    {"--backend", NULL, &c.backend, NULL, 0},
	    {"--profile", NULL, &c.profile, NULL, 0},
	    {"--plan-profile", NULL, &c.plan_profile, NULL, 0},
	    {"--devices", &c.devices, NULL, NULL, 0},
	    {"--device-mem", NULL, NULL, &c.device_mem, 0},
	    {"--budget", NULL, NULL, &c.budget, 0},
	    {"--host-mem", NULL, NULL, &c.host_mem, 0},
	    {"--disk", NULL, &c.disk, NULL, 0},
	    {"--steps", &c.steps, NULL, NULL, 0},
	    {"--data", NULL, &c.data, NULL, 0},
	    {"--eval-every", &c.eval_every, NULL, NULL, 0},
	    {"--eval-batches", &c.eval_batches, NULL, NULL, 0},
	    {"--checkpoint", NULL, &c.checkpoint_dir, NULL, 0},
	    {"--checkpoint-every", &c.checkpoint_every, NULL, NULL, 0},
	    {"--keep", &c.keep, NULL, NULL, 0},
	    {"--overwrite", &c.overwrite, NULL, NULL, 1},
	    {"--trace", NULL, &c.trace_file, NULL, 0},
	    {"--stats-json", NULL, &c.stats_json, NULL, 0},
	    {"--tune-after", &c.tune_after, NULL, NULL, 0},
	    {"--optim", NULL, &c.optim, NULL, 0},
	    {"--precision", NULL, &c.precision, NULL, 0},
	    {"--lr-schedule", NULL, &c.lr_schedule, NULL, 0},
	    {"--warmup", &c.warmup, NULL, NULL, 0},
	    {"--total-batch", &c.total_batch, NULL, NULL, 0},
	    {"--init", NULL, &c.init, NULL, 0},
	    {"--nodes", &c.sim_nodes, NULL, NULL, 0},
	    {"--zero1", &c.zero1, NULL, NULL, 1},
	    {"--net", NULL, &net, NULL, 0},
	};
	if (wants_help(argc, argv)) {
		fputs(sim ? sim_help : train_help, stdout);
		return 0;
	}
	for (int i = 1; i < argc; i++) {
		char *a = argv[i], *val = NULL, *eq = strchr(a, '=');
		char name[64];
		snprintf(name, sizeof(name), "%.*s", eq ? (int)(eq - a) : (int)strlen(a), a);
		if (sim && !strcmp(name, "--no-tune"))
			continue;
		if (sim && (!strcmp(name, "--tune") || !strcmp(name, "--resume") ||
		            !strcmp(name, "--init") || !strcmp(name, "--eval-every") ||
		            !strcmp(name, "--eval-batches") || !strcmp(name, "--checkpoint-every")))
			return bad_flag(cmd, "the model backend moves no data: no", name);
		if (!strcmp(name, "--no-tune") || !strcmp(name, "--tune")) {
			c.tune = !strcmp(name, "--tune");
			continue;
		}
		if (is_number_flag(name, 0)) {
			val = eq ? eq + 1 : i + 1 < argc ? argv[++i] : NULL;
			if (!val)
				return bad_flag(cmd, "missing value for", name);
			if (number_flag(cmd, name, val, &c, NULL))
				return 2;
			continue;
		}
		if (!strcmp(name, "--resume")) { /* --resume [FILE]: train takes no operands */
			c.resume = 1;
			if (eq && !eq[1])
				return bad_flag(cmd, "missing value for", name);
			if (eq || (i + 1 < argc && argv[i + 1][0] != '-'))
				c.resume_file = eq ? eq + 1 : argv[++i];
			continue;
		}
		size_t k = 0;
		while (k < sizeof(opts) / sizeof(opts[0]) && strcmp(opts[k].name, name))
			k++;
		if (k == sizeof(opts) / sizeof(opts[0]))
			return bad_flag(cmd, "unknown flag", name);
		if (opts[k].flag) {
			*opts[k].i = 1;
			continue;
		}
		val = eq ? eq + 1 : i + 1 < argc ? argv[++i] : NULL;
		if (!val || !*val)
			return bad_flag(cmd, "missing value for", name);
		if (opts[k].s)
			*opts[k].s = val;
		else if (opts[k].z && size_flag(cmd, name, val, MIN_SIZE_FLAG, opts[k].z))
			return 2;
		else if (opts[k].i && parse_int(cmd, name, val, opts[k].i))
			return 2;
		if (sim && opts[k].s == &c.backend && strcmp(val, "model")) {
			fprintf(
			    stderr,
			    "spill sim: --backend %s: sim runs on the model backend only (spill "
			    "train --backend %s runs for real)\n",
			    val, val);
			return 2;
		}
		int *must = opts[k].i; /* flags where 0 would read as the default */
		if (must && !*must &&
		    (must == &c.steps || must == &c.batch || must == &c.layers ||
		     must == &c.total_batch || must == &c.channels || must == &c.heads ||
		     must == &c.seq || must == &c.vocab))
			return bad_flag(cmd, "0 would read as the default: give at least 1 to",
			                name);
	}
	if (c.precision && strcmp(c.precision, "fp32") && strcmp(c.precision, "bf16")) {
		fprintf(stderr, "spill %s: --precision %s: wants fp32 or bf16 (spill %s --help)\n",
		        cmd, c.precision, cmd);
		return 2;
	}
	if (sim && c.data)
		return bad_flag(cmd, "the model backend holds no data:", "--data");
	if (sim && c.checkpoint_dir) /* (it would simulate first, then fail to read) */
		return bad_flag(cmd, "the model backend holds no state to save:", "--checkpoint");
	if (!sim && c.sim_nodes)
		return bad_flag(cmd,
		                "spill train runs on the processes mpirun starts, one per node "
		                "(mpirun -np N spill train ...); spill sim takes",
		                "--nodes");
	if (net && !sim)
		return bad_flag(cmd, "the inter-node link is spill sim's:", "--net");
	if (net && c.sim_nodes <= 1)
		return bad_flag(cmd, "the inter-node link needs --nodes N (N > 1) with", "--net");
	if (net && !(c.net_bw = parse_link_rate(net))) {
		fprintf(stderr, "spill %s: --net %s: wants a rate such as 200Gb/s or 25GB/s\n", cmd,
		        net);
		return 2;
	}
	*cp = c;
	return -1;
}

/* spill sim --nodes N after its run (res): one node against it, on a node's
 * share of the batch (weak scaling: what adding nodes costs) and on the whole
 * batch (strong scaling: what they buy), each simulated quietly. */
static int sim_scaling(const struct tr_config *c, const struct tr_result *res)
{
	int N = c->sim_nodes;
	struct tr_config one = *c;
	one.sim_nodes = 1;
	one.zero1 = 0; /* nothing to shard on one node */
	one.stats_json = NULL;
	one.trace_file = NULL;
	one.tty = 0;
	FILE *null = fopen("/dev/null", "w");
	if (!null)
		return sp_error(-errno, "sim: cannot open /dev/null");
	one.out = null;
	struct tr_result share, whole;
	int B = res->batch, rc;
	one.batch = B / N;
	one.total_batch = 0;
	rc = tr_train(&one, &share);
	one.batch = B;
	if (rc == 0)
		rc = tr_train(&one, &whole);
	fclose(null);
	if (rc < 0)
		return rc;
	printf("scaling to %d nodes (each as these devices; --net or the profile's inter-node "
	       "link):\n",
	       N);
	printf("  one node on a node's share (batch %d): %.4f s/step; %d nodes: %.4f s/step: "
	       "efficiency %.0f%% (weak scaling)\n",
	       B / N, share.step_s, N, res->step_s, 100 * share.step_s / res->step_s);
	printf("  one node on the whole batch (%d): %.4f s/step, %.0f tokens/s; %d nodes: %.0f "
	       "tokens/s = %.2fx (efficiency %.0f%%, strong scaling)\n",
	       B, whole.step_s, whole.tokens_per_s, N, res->tokens_per_s,
	       res->tokens_per_s / whole.tokens_per_s,
	       100 * res->tokens_per_s / whole.tokens_per_s / N);
	return 0;
}

static int cmd_train(const char *cmd, int argc, char **argv)
{
	struct tr_config c;
	tr_config_defaults(&c);
	int sim = !strcmp(cmd, "sim");
	if (sim) {
		c.backend = "model";
		c.synthetic = 1;
		c.tune = 0;
		c.model = "gpt2";
	}
	c.tty = isatty(STDOUT_FILENO);
	c.catch_signals = 1; /* Ctrl-C: a checkpoint, the stats, exit 130 */
	/* under mpirun every node parses the same flags: node 0 alone says what
	 * is wrong with them */
	int launched = sim ? 0 : tr_nodes_launched(), rank = launched ? tr_nodes_env_rank() : 0;
	int saved_err = -1;
	if (rank > 0) {
		int dn = open("/dev/null", O_WRONLY);
		saved_err = dup(STDERR_FILENO);
		if (dn >= 0) {
			dup2(dn, STDERR_FILENO);
			close(dn);
		}
	}
	int st = train_parse(cmd, sim, argc, argv, &c);
	if (saved_err >= 0) {
		dup2(saved_err, STDERR_FILENO);
		close(saved_err);
	}
	if (st >= 0)
		return st;
	struct tr_nodes *nodes = NULL;
	if (launched) {
		if (tr_nodes_init(&argc, &argv, tr_stop_flag(), &nodes) < 0) {
			if (rank == 0)
				fprintf(stderr, "spill %s: %s\n", cmd, sp_last_error());
			return 1;
		}
		c.nodes = nodes;
	}
	char node_cmd[64];
	snprintf(node_cmd, sizeof(node_cmd), "%s (node %d)", cmd, tr_nodes_rank(nodes));
	struct tr_result res;
	memset(&res, 0, sizeof(res));
	double t0 = sp_now_s();
	int rc = tr_train(&c, &res);
	if (rc < 0) {
		fflush(stdout);
		if (!res.quiet)
			train_error(tr_nodes_rank(nodes) ? node_cmd : cmd, &c);
		tr_nodes_finish(nodes, !res.agreed);
		return rc == -EINTR ? 130 : 1; /* 128 + SIGINT, as a shell reports Ctrl-C */
	}
	tr_nodes_finish(nodes, 0);
	if (sim && c.sim_nodes > 1 && sim_scaling(&c, &res) < 0) {
		train_error(cmd, &c);
		return 1;
	}
	if (sim) /* the figures above are virtual time; this is what they cost */
		printf("simulated in %.2f s of wall time\n", sp_now_s() - t0);
	return 0;
}

/* ---- tune ---------------------------------------------------------------------------- */

static const char tune_help[] =
    "usage: spill tune [flags]    many models trained together (Hydra's SHARP)\n"
    "models:  --grid KEY=V1,V2 [KEY=...]  the cartesian product of the values (keys lr,\n"
    "         batch, seq, layers, channels, heads), e.g. --grid lr=1e-3,3e-4 batch=8,16\n"
    "         --model PRESET[,PRESET...] (repeatable: tiny, gpt2, ...; default tiny)\n"
    "         --layers N --channels N --heads N --seq N --batch N --lr X (every model)\n"
    "         --optim adamw|sgd --momentum X (every model; sgd as Hydra trains)\n"
    "         --precision fp32|bf16 (every model; bf16: mixed precision, fp32 masters)\n"
    "sched:   --policy lrtf|random|fifo (default lrtf) --no-double-buffer\n"
    "         --reserve F (double buffering: a shard and F of it more fit a device,\n"
    "         default 0.15) --halving N (successive halving: every N steps the worse\n"
    "         half of the models at that step stop)\n"
    "         --recover (each model's state is kept at its step boundaries: a device that\n"
    "         fails costs the models their current step, not the run)\n"
    "devices: --backend cuda|host|model --devices N --device-mem SIZE --budget SIZE\n"
    "         (as spill train's: K/M/G/T, at least 64K; --budget is the vmm's share of\n"
    "         each device) --profile NAME --sim (the model backend, virtual time,\n"
    "         synthetic data)\n"
    "run:     --steps N --seed N --data PATH --eval-batches N\n"
    "         --save-best DIR (the best-ranked model's checkpoint, as spill train's)\n"
    "Ends with the ranking by validation loss. With no flags: 4 tiny GPTs (lr 1e-3,\n"
    "3e-4 x batch 8, 16; --lr or --batch without --grid fixes that axis) on the default\n"
    "corpus, on emulated GPUs when there is no GPU, each device's budget half of the\n"
    "largest model's training state.\n";

/* Appends word to *s (malloc'd; NULL: empty), after sep when *s is not
 * empty. 0, or 1 (the exit status) with one line. */
static int join_word(char **s, const char *word, char sep)
{
	size_t l = *s ? strlen(*s) : 0, w = strlen(word);
	char *n = realloc(*s, l + w + 2);
	if (!n) {
		fprintf(stderr, "spill tune: out of memory for %zu characters of flags\n", l + w);
		return 1;
	}
	if (l)
		n[l++] = sep;
	memcpy(n + l, word, w + 1);
	*s = n;
	return 0;
}

static int cmd_tune(int argc, char **argv)
{
	struct tr_tune_config c;
	memset(&c, 0, sizeof(c));
	tr_config_defaults(&c.base);
	c.base.tune = 0;
	char *grid = NULL, *models = NULL; /* the words given, joined */
	int sim = 0, lr_given = 0, batch_given = 0;
	c.reserve = -1; /* the default */
	struct {
		const char *name;
		int *i;
		const char **s;
		uint64_t *z;
	} opts[] = {
	    {"--layers", &c.base.layers, NULL, NULL},
	    {"--channels", &c.base.channels, NULL, NULL},
	    {"--heads", &c.base.heads, NULL, NULL},
	    {"--seq", &c.base.seq, NULL, NULL},
	    {"--batch", &c.base.batch, NULL, NULL},
	    {"--policy", NULL, &c.policy, NULL},
	    {"--halving", &c.halving, NULL, NULL},
	    {"--backend", NULL, &c.base.backend, NULL},
	    {"--profile", NULL, &c.base.profile, NULL},
	    {"--devices", &c.base.devices, NULL, NULL},
	    {"--device-mem", NULL, NULL, &c.base.device_mem},
	    {"--budget", NULL, NULL, &c.base.budget},
	    {"--steps", &c.base.steps, NULL, NULL},
	    {"--data", NULL, &c.base.data, NULL},
	    {"--eval-batches", &c.base.eval_batches, NULL, NULL},
	    {"--optim", NULL, &c.base.optim, NULL},
	    {"--precision", NULL, &c.base.precision, NULL},
	    {"--save-best", NULL, &c.save_best, NULL},
	};
	int grid_given = 0, rc = 0;
	for (int i = 1; i < argc && !rc; i++) {
		char *a = argv[i], *val = NULL, *eq = strchr(a, '=');
		char name[64];
		snprintf(name, sizeof(name), "%.*s", eq ? (int)(eq - a) : (int)strlen(a), a);
		if (!strcmp(name, "--help") || !strcmp(name, "-h")) {
			fputs(tune_help, stdout);
			goto out;
		}
		if (!strcmp(name, "--sim")) {
			sim = 1;
			continue;
		}
		if (!strcmp(name, "--no-double-buffer")) {
			c.no_double_buffer = 1;
			continue;
		}
		if (!strcmp(name, "--recover")) {
			c.recover = 1;
			continue;
		}
		if (!strcmp(name, "--grid")) { /* its words up to the next flag */
			grid_given = 1;
			if (eq)
				rc = join_word(&grid, eq + 1, ' ');
			while (!rc && i + 1 < argc && strncmp(argv[i + 1], "--", 2))
				rc = join_word(&grid, argv[++i], ' ');
			continue;
		}
		size_t k = 0;
		while (k < sizeof(opts) / sizeof(opts[0]) && strcmp(opts[k].name, name))
			k++;
		int number = is_number_flag(name, 1);
		if (k == sizeof(opts) / sizeof(opts[0]) && !number && strcmp(name, "--model")) {
			rc = bad_flag("tune", "unknown flag", name);
			break;
		}
		val = eq ? eq + 1 : i + 1 < argc ? argv[++i] : NULL;
		if (!val || !*val) {
			rc = bad_flag("tune", "missing value for", name);
		} else if (!strcmp(name, "--model")) {
			rc = join_word(&models, val, ',');
		} else if (number) {
			lr_given |= !strcmp(name, "--lr");
			rc = number_flag("tune", name, val, &c.base, &c.reserve);
		} else if (opts[k].s) {
			*opts[k].s = val;
		} else if (opts[k].z) {
			rc = size_flag("tune", name, val, MIN_SIZE_FLAG, opts[k].z);
		} else if (opts[k].i) {
			rc = parse_int("tune", name, val, opts[k].i);
			batch_given |= !rc && opts[k].i == &c.base.batch;
			int *must = opts[k].i; /* flags where 0 would read as the default */
			if (!rc && !*must &&
			    (must == &c.base.steps || must == &c.base.batch ||
			     must == &c.base.layers || must == &c.base.channels ||
			     must == &c.base.heads || must == &c.base.seq))
				rc = bad_flag("tune",
				              "0 would read as the default: give at least 1 to",
				              name);
		}
	}
	if (rc)
		goto out;
	if (sim) {
		if (c.base.data) {
			rc = bad_flag("tune", "the model backend holds no data:", "--data");
			goto out;
		}
		c.base.backend = "model";
		c.base.synthetic = 1;
	}
	char *save = NULL;
	for (char *m = models ? strtok_r(models, ",", &save) : NULL; m;
	     m = strtok_r(NULL, ",", &save)) {
		if (c.nmodels == TR_TUNE_MAX_MODELS) {
			fprintf(stderr,
			        "spill tune: --model: more than %d presets; at most %d models\n",
			        TR_TUNE_MAX_MODELS, TR_TUNE_MAX_MODELS);
			rc = 1;
			goto out;
		}
		c.models[c.nmodels++] = m;
	}
	if (!c.nmodels && sim)
		c.models[c.nmodels++] = "gpt2";
	/* the default grid, less the axes --lr and --batch fix */
	static const char *const dflt[4] = {"lr=1e-3,3e-4 batch=8,16", "batch=8,16", "lr=1e-3,3e-4",
	                                    NULL};
	c.grid = grid_given ? (grid ? grid : "") : dflt[lr_given + 2 * batch_given];
	if (!c.base.steps && !sim)
		c.base.steps = 60;
	struct tr_nodes *nodes = NULL;
	if (!sim && tr_nodes_launched()) { /* mpirun: the models spread over the nodes */
		if (tr_nodes_init(&argc, &argv, tr_stop_flag(), &nodes) < 0) {
			if (tr_nodes_env_rank() == 0)
				fprintf(stderr, "spill tune: %s\n", sp_last_error());
			rc = 1;
			goto out;
		}
		c.base.nodes = nodes;
	}
	int agreed = 0;
	if (tr_tune_models(&c) < 0) {
		fflush(stdout);
		char who[32];
		int first = tr_nodes_agreed_failure(nodes), me = tr_nodes_rank(nodes);
		agreed = first >= 0;
		snprintf(who, sizeof(who), "tune (node %d)", me);
		/* an error every node met: the first one to fail says it (node 0 also
		 * says another node failed) */
		if (!agreed || me == first || (me == 0 && first > 0))
			train_error(me ? who : "tune", &c.base);
		rc = 1;
	}
	tr_nodes_finish(nodes, rc != 0 && !agreed);
out:
	free(grid);
	free(models);
	return rc;
}

/* ---- the preload shim: spill run, and spill report of its JSON ---- */

static double jnum(const struct sp_json *o, const char *key)
{
	const struct sp_json *v = sp_json_get(o, key);
	return v && v->type == SP_JSON_NUMBER ? v->num : 0;
}

static const char *jstr(const struct sp_json *o, const char *key)
{
	const struct sp_json *v = sp_json_get(o, key);
	return v && v->type == SP_JSON_STRING ? v->str : "";
}

/* The shim's report (shim/report.c writes it): totals, then the allocations
 * and the kernels that moved the most. */
static void print_shim_report(const struct sp_json *root)
{
	char a[6][32];
	const struct sp_json *b = sp_json_get(root, "bytes");
	printf("preloaded program: budget %s, %.0f operations, %.0f allocations (%.0f live at "
	       "exit)\n",
	       sp_format_size((uint64_t)jnum(root, "budget"), a[0], 32), jnum(root, "operations"),
	       jnum(root, "allocations"), jnum(root, "live"));
	printf("moved: h2d %s, d2h %s, host->disk %s, disk->host %s\n",
	       sp_format_size((uint64_t)jnum(b, "h2d"), a[1], 32),
	       sp_format_size((uint64_t)jnum(b, "d2h"), a[2], 32),
	       sp_format_size((uint64_t)jnum(b, "host2disk"), a[3], 32),
	       sp_format_size((uint64_t)jnum(b, "disk2host"), a[4], 32));
	if (jnum(root, "period") > 0)
		printf("policy %s: an iteration of %.0f operations, repeated %.0f times under "
		       "Belady\n",
		       jstr(root, "policy"), jnum(root, "period"), jnum(root, "repeats"));
	else
		printf("policy %s: no repeating iteration seen (LRU)\n", jstr(root, "policy"));
	const struct sp_json *al = sp_json_get(root, "per_allocation");
	if (al && al->type == SP_JSON_ARRAY && al->n) {
		printf("%-10s %12s %12s %12s  %s\n", "alloc", "bytes", "h2d", "d2h",
		       "first kernel");
		for (int i = 0; i < al->n && i < 20; i++) {
			const struct sp_json *x = &al->items[i];
			printf("#%-9.0f %12s %12s %12s  %s\n", jnum(x, "id"),
			       sp_format_size((uint64_t)jnum(x, "bytes"), a[0], 32),
			       sp_format_size((uint64_t)jnum(x, "h2d"), a[1], 32),
			       sp_format_size((uint64_t)jnum(x, "d2h"), a[2], 32),
			       jstr(x, "first_kernel"));
		}
	}
	const struct sp_json *ks = sp_json_get(root, "per_kernel");
	if (ks && ks->type == SP_JSON_ARRAY && ks->n) {
		printf("%-32s %10s %10s %12s\n", "kernel", "ops", "misses", "h2d for it");
		for (int i = 0; i < ks->n; i++) {
			const struct sp_json *x = &ks->items[i];
			printf("%-32.32s %10.0f %10.0f %12s\n", jstr(x, "name"), jnum(x, "ops"),
			       jnum(x, "misses"),
			       sp_format_size((uint64_t)jnum(x, "h2d"), a[0], 32));
		}
	}
}

static const char report_usage[] =
    "usage: spill report FILE.json\n"
    "  prints again the profile a run wrote with --stats-json: spill train's or spill\n"
    "  sim's (plan, time split, swap volume per link measured and predicted; a loss\n"
    "  of null is none: the model backend's, or a diverged run's), or spill run's\n"
    "  (bytes per direction, per allocation and per kernel).\n";

static int cmd_report(int argc, char **argv)
{
	if (wants_help(argc, argv)) {
		fputs(report_usage, stdout);
		return 0;
	}
	if (argc != 2 || (argv[1][0] == '-' && argv[1][1])) {
		if (argc == 2)
			fprintf(stderr, "spill report: unknown flag %s (spill report --help)\n",
			        argv[1]);
		else
			fputs(report_usage, stderr);
		return 2;
	}
	char *text = NULL;
	size_t len = 0;
	struct sp_json *root = NULL;
	if (sp_json_read_file(argv[1], 64u << 20, &text, &len) == 0 &&
	    sp_json_parse(text, len, &root) == 0 && root->type == SP_JSON_OBJECT &&
	    !strcmp(jstr(root, "tool"), "spill-shim")) {
		print_shim_report(root);
		sp_json_free(root);
		free(text);
		return 0;
	}
	sp_json_free(root);
	free(text);
	struct tr_profile p;
	if (tr_profile_read(argv[1], &p) < 0) {
		fprintf(stderr, "spill report: %s\n", sp_last_error());
		return 1;
	}
	tr_profile_print(&p, stdout);
	return 0;
}

/* ---- spill plan --largest: capacity planning on the model backend ------------------ */

static const char plan_usage[] =
    "usage: spill plan --largest [--profile NAME] [--devices N] [--host-mem SIZE]\n"
    "                  [--disk-mem SIZE] [--disk DIR[,DIR...]] [--seq T] [--batch B]\n"
    "                  [--optim adamw|sgd]\n"
    "  the largest GPT (C = 128 k channels, k layers, k heads of 128: the shape of\n"
    "  GPT-3 and LLaMA 7B-30B) whose training runs on those resources: each\n"
    "  candidate is planned (auto, else the leanest plan: harmony-pp with\n"
    "  recomputation, microbatch 1, one group) and run for 2 steps on the model\n"
    "  backend (the vmm's own policies over device, host and disk); prints its\n"
    "  plan and predicted tokens/s and TFLOP/s. No --disk-mem: no disk tier.\n";

struct plan_try {
	int ok;
	double tokens_per_s;
	char plan[160], why[256];
};

/* Runs candidate k (C = 128 k, k layers and heads) for 2 steps on the model
 * backend with base's resources. */
static void plan_try(const struct tr_config *base, int k, struct plan_try *t)
{
	struct tr_config c = *base;
	c.layers = k;
	c.channels = 128 * k;
	c.heads = k;
	struct tr_result res;
	memset(t, 0, sizeof(*t));
	int rc = tr_train(&c, &res);
	if (rc < 0) {
		/* auto's planner sees the devices, not the host pool and the disk: when
		 * its plan runs out of them, the leanest plan (pipelined packs with
		 * recomputation, one microbatch at a time, every one in one group) */
		c.schedule = "harmony-pp";
		c.recompute = 1;
		c.microbatch = 1;
		c.group = c.batch ? c.batch : 16;
		rc = tr_train(&c, &res);
	}
	t->ok = rc == 0;
	if (t->ok) {
		t->tokens_per_s = res.tokens_per_s;
		snprintf(t->plan, sizeof(t->plan), "%s", res.plan);
	} else {
		snprintf(t->why, sizeof(t->why), "%s", sp_last_error());
	}
}

static double gpt_params(int L, int C, int V, int T)
{
	/* per block: qkv and projections 4C^2 + MLP 8C^2, biases 9C, two layernorms
	 * 4C; embeddings V*C + T*C; the final layernorm 2C */
	return (double)L * (12.0 * C * C + 13.0 * C) + (double)V * C + (double)T * C + 2.0 * C;
}

static int cmd_plan(int argc, char **argv)
{
	struct tr_config c;
	tr_config_defaults(&c);
	c.backend = "model";
	c.synthetic = 1;
	c.model = "10b"; /* vocab 50257, seq 1024, batch 16; shape from the search */
	c.steps = 2;
	c.tune = 0;
	int largest = 0;
	const char *disk_mem = NULL;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			fputs(plan_usage, stdout);
			return 0;
		}
		if (!strcmp(a, "--largest")) {
			largest = 1;
			continue;
		}
		if (!v) {
			fprintf(stderr, "spill plan: %s needs a value\n%s", a, plan_usage);
			return 2;
		}
		i++;
		uint64_t z = 0;
		long n = 0;
		char *end = NULL;
		if (!strcmp(a, "--profile")) {
			c.profile = v;
		} else if (!strcmp(a, "--disk")) {
			c.disk = v;
		} else if (!strcmp(a, "--optim")) {
			c.optim = v;
		} else if (!strcmp(a, "--host-mem") || !strcmp(a, "--disk-mem")) {
			if (sp_parse_size(v, &z) < 0 || (z > 0 && z < (1ull << 20))) {
				fprintf(stderr,
				        "spill plan: %s %s: a size of 1M or more (K/M/G/T)\n", a,
				        v);
				return 2;
			}
			if (!strcmp(a, "--host-mem"))
				c.host_mem = z;
			else
				disk_mem = v;
		} else if (!strcmp(a, "--devices") || !strcmp(a, "--seq") ||
		           !strcmp(a, "--batch")) {
			n = strtol(v, &end, 10);
			if (!*v || *end || n < 1 || n > (1 << 20)) {
				fprintf(stderr, "spill plan: %s %s: a positive integer\n", a, v);
				return 2;
			}
			if (!strcmp(a, "--devices"))
				c.devices = (int)n;
			else if (!strcmp(a, "--seq"))
				c.seq = (int)n;
			else
				c.batch = (int)n;
		} else {
			fprintf(stderr, "spill plan: unknown flag %s\n%s", a, plan_usage);
			return 2;
		}
	}
	if (!largest) {
		fprintf(stderr, "spill plan: say what to plan (--largest)\n%s", plan_usage);
		return 2;
	}
	uint64_t dm = 0;
	if (disk_mem && sp_parse_size(disk_mem, &dm) == 0 && dm > 0) {
		if (!c.disk)
			c.disk = "."; /* simulated: nothing is written there */
		setenv("SPILL_DISK_MEM", disk_mem, 1);
	} else if (c.disk) {
		fprintf(stderr,
		        "spill plan: --disk needs --disk-mem (the capacity to plan with)\n");
		return 2;
	}
	FILE *quiet = fopen("/dev/null", "w");
	if (!quiet) {
		fprintf(stderr, "spill plan: /dev/null: %s\n", strerror(errno));
		return 1;
	}
	c.out = quiet;
	/* the largest k that runs: grow by doubling, then bisect */
	struct plan_try t, best = {0};
	int lo = 0, hi = 0, k = 4;
	for (; k <= 512; k *= 2) {
		plan_try(&c, k, &t);
		fprintf(stderr, "spill plan: C %5d, %3d layers: %s\n", 128 * k, k,
		        t.ok ? "runs" : "does not fit");
		if (!t.ok) {
			hi = k;
			break;
		}
		lo = k;
		best = t;
	}
	if (!lo) {
		fclose(quiet);
		fprintf(stderr,
		        "spill plan: not even the smallest candidate (C 512, 4 layers, %.0fM "
		        "parameters) trains on these resources: %s\n",
		        gpt_params(4, 512, 50257, c.seq ? c.seq : 1024) / 1e6, t.why);
		return 1;
	}
	while (hi && hi - lo > 1) {
		int mid = (lo + hi) / 2;
		plan_try(&c, mid, &t);
		fprintf(stderr, "spill plan: C %5d, %3d layers: %s\n", 128 * mid, mid,
		        t.ok ? "runs" : "does not fit");
		if (t.ok)
			lo = mid, best = t;
		else
			hi = mid;
	}
	fclose(quiet);
	int L = lo, C = 128 * lo, T = c.seq ? c.seq : 1024, B = c.batch ? c.batch : 16;
	double N = gpt_params(L, C, 50257, T);
	/* model FLOPs per token: 6 N (forward and backward) and attention's
	 * 12 L T C (QK^T and AV, forward and backward; recomputation not counted) */
	double fpt = 6 * N + 12.0 * L * T * C;
	printf("largest GPT that trains: %.2fB parameters (C %d, %d layers, %d heads of 128, "
	       "seq %d, batch %d, %s)\n",
	       N / 1e9, C, L, L, T, B, c.optim ? c.optim : "adamw");
	printf("plan: %s\n", best.plan);
	printf("predicted: %.0f tokens/s, %.1f TFLOP/s (6 N + 12 L T C FLOPs per token)\n",
	       best.tokens_per_s, best.tokens_per_s * fpt / 1e12);
	printf("next size up (C %d, %d layers): does not fit\n", 128 * (lo + 1), lo + 1);
	return 0;
}

static const char run_usage[] =
    "usage: spill run [flags] [--] CMD [ARGS...]\n"
    "Runs an unmodified CUDA program with libspill-preload.so: its device allocations\n"
    "may exceed the GPU (backed by pinned host memory and, with SPILL_DISK_PATH, disk).\n"
    "  --budget SIZE       the device memory the program sees and the vmm uses, all of\n"
    "                      it (default 90% of the free memory; K/M/G/T, at least 2M).\n"
    "                      Not spill train's --budget, the vmm's share of a device\n"
    "                      whose size is --device-mem (SPILL_DEVICE_MEM)\n"
    "  --policy P          belady (recorded iteration; LRU until seen) or lru\n"
    "  --mode M            spill (default), or a baseline with the same budget: uvm,\n"
    "                      uvm-prefetch (managed memory) or hostmap (zero-copy host)\n"
    "  --stats-json FILE   the swap report as JSON at exit (spill report FILE)\n"
    "  --trace FILE        a Chrome trace of transfers and launches\n"
    "  --quiet             no report on stderr at exit\n";

/* libspill-preload.so beside the spill binary: <prefix>/bin/spill -> <prefix>/lib. */
static int find_preload(char *out, size_t n)
{
	const char *env = getenv("SPILL_PRELOAD_LIB");
	if (env && *env) {
		snprintf(out, n, "%s", env);
		return access(out, R_OK) == 0 ? 0 : -1;
	}
	char exe[4096];
	ssize_t k = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (k <= 0)
		return -1;
	exe[k] = 0;
	char *slash = strrchr(exe, '/');
	if (!slash)
		return -1;
	*slash = 0;
	snprintf(out, n, "%s/../lib/libspill-preload.so", exe);
	return access(out, R_OK) == 0 ? 0 : -1;
}

static const struct var_flag run_flags[] = {
    {"--budget", "SPILL_DEVICE_MEM", 1}, {"--policy", "SPILL_SHIM_POLICY", 0},
    {"--mode", "SPILL_SHIM_MODE", 0},    {"--stats-json", "SPILL_SHIM_STATS_JSON", 0},
    {"--trace", "SPILL_SHIM_TRACE", 0},
};
#define NRUN_FLAGS (sizeof(run_flags) / sizeof(run_flags[0]))

static int cmd_run(int argc, char **argv)
{
	int i = 1, given[NRUN_FLAGS] = {0};
	for (; i < argc; i++) {
		const char *f = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(f, "--")) {
			i++;
			break;
		}
		if (f[0] != '-')
			break;
		if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
			fputs(run_usage, stdout);
			return 0;
		}
		if (!strcmp(f, "--quiet")) {
			setenv("SPILL_SHIM_REPORT", "0", 1);
			continue;
		}
		size_t k = 0;
		while (k < NRUN_FLAGS && strcmp(f, run_flags[k].flag))
			k++;
		if (k == NRUN_FLAGS) {
			fprintf(stderr, "spill run: unknown flag %s (spill run --help)\n", f);
			return 2;
		}
		if (!v) {
			fprintf(stderr, "spill run: %s needs a value\n", f);
			return 2;
		}
		uint64_t z;
		if (run_flags[k].size && size_flag("run", f, v, MIN_RUN_BUDGET, &z))
			return 2;
		setenv(run_flags[k].var, v, 1);
		given[k] = 1;
		i++;
	}
	if (i >= argc) {
		fputs(run_usage, stderr);
		return 2;
	}
	/* bad values fail here, in one line naming the flag, not inside the program */
	struct sp_params p;
	if (sp_params_load(&p, NULL) < 0 || sp_params_apply_logging(&p) < 0) {
		flag_error("run", run_flags, NRUN_FLAGS, given);
		return 1;
	}
	char lib[4200];
	if (find_preload(lib, sizeof(lib)) < 0) {
		fprintf(stderr,
		        "spill run: libspill-preload.so not found beside spill (%s); spill was "
		        "built without the CUDA headers?\n",
		        lib);
		return 1;
	}
	const char *old = getenv("LD_PRELOAD");
	char pre[8400];
	snprintf(pre, sizeof(pre), "%s%s%s", lib, old && *old ? ":" : "", old ? old : "");
	setenv("LD_PRELOAD", pre, 1);
	execvp(argv[i], argv + i);
	fprintf(stderr, "spill run: cannot run %s: %s\n", argv[i], strerror(errno));
	return 127;
}

static const char prepare_usage[] =
    "usage: spill prepare TEXT... -o DIR [--name NAME] [--val-fraction F]\n"
    "                     [--shard-tokens N]\n"
    "  the bytes of the text files, in order, as llm.c token shards (one token a byte,\n"
    "  vocab 256) in DIR (created if missing): NAME_val_000000.bin the last F of them\n"
    "  (default 0.1), NAME_train_NNNNNN.bin the rest, N tokens a shard at most\n"
    "  (default 100M); NAME defaults to corpus. Existing shards are not overwritten.\n";

static int cmd_prepare(int argc, char **argv)
{
	if (wants_help(argc, argv)) {
		fputs(prepare_usage, stdout);
		return 0;
	}
	const char *dir = NULL, *name = "corpus";
	double val = 0.1;
	uint64_t shard = 0;
	const char **texts = calloc((size_t)argc, sizeof(char *));
	int n = 0;
	if (!texts)
		return 1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "-o") || !strcmp(a, "--name") || !strcmp(a, "--val-fraction") ||
		    !strcmp(a, "--shard-tokens")) {
			if (!v) {
				free(texts);
				return bad_flag("prepare", "missing value for", a);
			}
			i++;
			if (!strcmp(a, "-o"))
				dir = v;
			else if (!strcmp(a, "--name"))
				name = v;
			else if (!strcmp(a, "--val-fraction"))
				val = strtod(v, NULL);
			else if (sp_parse_size(v, &shard) < 0) {
				free(texts);
				return bad_flag("prepare", "bad value for", a);
			}
		} else if (a[0] == '-' && a[1]) {
			free(texts);
			return bad_flag("prepare", "unknown flag", a);
		} else {
			texts[n++] = a;
		}
	}
	if (!dir || !n) {
		free(texts);
		fputs(prepare_usage, stderr);
		return 2;
	}
	int rc = tr_data_prepare(texts, n, dir, name, val, shard);
	free(texts);
	if (rc < 0) {
		fprintf(stderr, "spill prepare: %s\n", sp_last_error());
		return 1;
	}
	/* what was written: each shard and its tokens (a 1024-byte header, then
	 * 2 bytes a token) */
	struct dirent **ents;
	int nent = scandir(dir, &ents, NULL, alphasort);
	size_t plen = strlen(name);
	for (int k = 0; k < nent; k++) {
		struct stat st;
		char path[4096];
		const char *f = ents[k]->d_name;
		snprintf(path, sizeof(path), "%s/%s", dir, f);
		if (!strncmp(f, name, plen) && f[plen] == '_' && strstr(f, ".bin") &&
		    stat(path, &st) == 0 && st.st_size >= 1024)
			printf("%s: %lld tokens\n", path, (long long)(st.st_size - 1024) / 2);
		free(ents[k]);
	}
	if (nent >= 0)
		free(ents);
	return 0;
}

/* ---- eval, sample, export: pretrained weights (train/convert.c, sample.c) ---------- */

static const char eval_help[] =
    "usage: spill eval WEIGHTS [--data PATH] [--batches N] [--batch B] [--seq T] [--seed S]\n"
    "  the validation loss of WEIGHTS (a spill checkpoint, llm.c's model .bin, or a\n"
    "  Hugging Face GPT-2 directory; the model comes from it) on N batches (default 4)\n"
    "  of B x T tokens of the corpus's validation split, forward only, as the\n"
    "  training's --eval-every: a checkpoint's own batch, seq and seed are the\n"
    "  defaults, so it prints the loss its run printed (else batch 16, every position,\n"
    "  seed 1337). --data as spill train's (default: the default corpus).\n";

static const char sample_help[] =
    "usage: spill sample WEIGHTS [--prompt TEXT] [--tokens N] [--temperature T]\n"
    "                    [--top-k K] [--seed S]\n"
    "  generates N tokens (default 64) after the prompt from WEIGHTS (as spill eval's),\n"
    "  drawn from the softmax of the logits / T (default 1; 0: the likeliest token)\n"
    "  over the K likeliest (default 40; 0: all) with the seed (default 1337): the\n"
    "  same seed gives the same text. Vocab 256: tokens are bytes (the prompt is text,\n"
    "  the output text). Any other vocabulary (GPT-2's): spill has no BPE tokenizer,\n"
    "  so the prompt is token ids (\"464 2068 7586\") and the output is ids too (decode\n"
    "  them with tiktoken or transformers' GPT2Tokenizer). CPU, fp32, no KV cache:\n"
    "  each token runs the whole context (up to the model's positions) forward.\n";

static const char export_help[] =
    "usage: spill export --format hf|llmc WEIGHTS DIR\n"
    "  writes WEIGHTS (as spill eval's) into DIR (created if missing): hf:\n"
    "  model.safetensors and config.json, for transformers'\n"
    "  GPT2LMHeadModel.from_pretrained(DIR); llmc: model.bin, llm.c's model file\n"
    "  (version 3, fp32), which spill train --init reads back too.\n";

static int cmd_eval(int argc, char **argv)
{
	struct tr_config c;
	tr_config_defaults(&c);
	c.tty = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			fputs(eval_help, stdout);
			return 0;
		}
		if (a[0] != '-') {
			if (c.init)
				return bad_flag("eval", "one WEIGHTS only, not also", a);
			c.init = a;
			continue;
		}
		if (!v)
			return bad_flag("eval", "missing value for", a);
		i++;
		int *n = !strcmp(a, "--batches") ? &c.eval_batches
		         : !strcmp(a, "--batch") ? &c.batch
		         : !strcmp(a, "--seq")   ? &c.seq
		                                 : NULL;
		if (!strcmp(a, "--data")) {
			c.data = v;
		} else if (!strcmp(a, "--seed")) {
			if (number_flag("eval", a, v, &c, NULL))
				return 2;
			c.seed_given = 1;
		} else if (!n) {
			return bad_flag("eval", "unknown flag", a);
		} else if (parse_int("eval", a, v, n)) {
			return 2;
		} else if (!*n) {
			return bad_flag("eval", "0 would read as the default: give at least 1 to",
			                a);
		}
	}
	if (!c.init) {
		fputs(eval_help, stderr);
		return 2;
	}
	double loss;
	if (tr_eval(&c, &loss) < 0) {
		fflush(stdout);
		fprintf(stderr, "spill eval: %s\n", sp_last_error());
		return 1;
	}
	return 0;
}

static int cmd_sample(int argc, char **argv)
{
	struct sp_params p;
	if (load_params(&p) < 0)
		return 1;
	struct tr_sample_config c = {
	    .tokens = 64, .temperature = 1.0, .top_k = 40, .seed = 1337, .threads = (int)p.threads};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			fputs(sample_help, stdout);
			return 0;
		}
		if (a[0] != '-') {
			if (c.path)
				return bad_flag("sample", "one WEIGHTS only, not also", a);
			c.path = a;
			continue;
		}
		if (!v)
			return bad_flag("sample", "missing value for", a);
		i++;
		char *end;
		errno = 0;
		if (!strcmp(a, "--prompt")) {
			c.prompt = v;
		} else if (!strcmp(a, "--tokens") || !strcmp(a, "--top-k")) {
			int *n = !strcmp(a, "--tokens") ? &c.tokens : &c.top_k;
			if (parse_int("sample", a, v, n))
				return 2;
			if (n == &c.tokens && !*n)
				return bad_flag("sample", "at least 1 for", a);
		} else if (!strcmp(a, "--temperature")) {
			c.temperature = strtod(v, &end);
			if (errno || end == v || *end || !(c.temperature >= 0) ||
			    c.temperature > 1e6)
				return bad_flag("sample", "a number >= 0 for", a);
		} else if (!strcmp(a, "--seed")) {
			c.seed = strtoull(v, &end, 10);
			if (errno || end == v || *end || v[strspn(v, " \t")] == '-')
				return bad_flag("sample", "an integer >= 0 for", a);
		} else {
			return bad_flag("sample", "unknown flag", a);
		}
	}
	if (!c.path) {
		fputs(sample_help, stderr);
		return 2;
	}
	if (tr_sample(&c) < 0) {
		fflush(stdout);
		fprintf(stderr, "spill sample: %s\n", sp_last_error());
		return 1;
	}
	return 0;
}

static int cmd_export(int argc, char **argv)
{
	const char *format = NULL, *pos[2] = {NULL, NULL};
	int npos = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			fputs(export_help, stdout);
			return 0;
		}
		if (!strcmp(a, "--format")) {
			if (i + 1 >= argc)
				return bad_flag("export", "missing value for", a);
			format = argv[++i];
			if (strcmp(format, "hf") && strcmp(format, "llmc")) {
				fprintf(stderr, "spill export: --format %s: wants hf or llmc\n",
				        format);
				return 2;
			}
		} else if (a[0] == '-') {
			return bad_flag("export", "unknown flag", a);
		} else if (npos < 2) {
			pos[npos++] = a;
		} else {
			return bad_flag("export", "one WEIGHTS and one DIR only, not also", a);
		}
	}
	if (!format || npos != 2) {
		fputs(export_help, stderr);
		return 2;
	}
	struct tr_weights w;
	if (tr_weights_load(pos[0], &w) < 0) {
		fprintf(stderr, "spill export: %s\n", sp_last_error());
		return 1;
	}
	int rc = tr_weights_export(&w, format, pos[1]);
	if (rc == 0)
		printf("%s (%s: %d layers, %d channels, %d heads, vocab %d, %d positions) -> "
		       "%s/%s\n",
		       pos[0], w.kind, w.layers, w.channels, w.heads, w.vocab, w.positions, pos[1],
		       !strcmp(format, "hf") ? "model.safetensors, config.json" : "model.bin");
	tr_weights_free(&w);
	if (rc < 0) {
		fprintf(stderr, "spill export: %s\n", sp_last_error());
		return 1;
	}
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: spill <command> [args]\n"
	        "  params [--markdown]  print the SPILL_* variables (values, or the README table)\n"
	        "  devices [flags]      list the devices of the configured backend\n"
	        "  swap-demo [flags]    train-shaped accesses through the vmm, Belady vs LRU\n"
	        "  train [flags]        train a GPT through the executor (train --help)\n"
	        "  sim [flags]          the same run on the model backend, in virtual time\n"
	        "  tune [flags]         many models trained together, ranked (tune --help)\n"
	        "  report FILE.json     print a run's profile again (train/run --stats-json)\n"
	        "  plan --largest [flags]  the largest GPT that trains on given resources\n"
	        "  run [flags] -- CMD   run a CUDA program with the preload shim (run --help)\n"
	        "  prepare TEXT... -o DIR  llm.c token shards of text files\n"
	        "  eval WEIGHTS [flags] the validation loss of a checkpoint or pretrained model\n"
	        "  sample WEIGHTS [flags]  generate tokens from it (sample --help)\n"
	        "  export --format hf|llmc WEIGHTS DIR  write it for transformers or llm.c\n"
	        "  version, --version   print the version\n"
	        "Every command takes --help.\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	const char *cmd = argv[1];
	if (strcmp(cmd, "params") == 0)
		return cmd_params(argc - 1, argv + 1);
	if (strcmp(cmd, "devices") == 0)
		return cmd_devices(argc - 1, argv + 1);
	if (strcmp(cmd, "swap-demo") == 0)
		return cmd_swap_demo(argc - 1, argv + 1);
	if (strcmp(cmd, "train") == 0 || strcmp(cmd, "sim") == 0)
		return cmd_train(cmd, argc - 1, argv + 1);
	if (strcmp(cmd, "tune") == 0)
		return cmd_tune(argc - 1, argv + 1);
	if (strcmp(cmd, "report") == 0)
		return cmd_report(argc - 1, argv + 1);
	if (strcmp(cmd, "plan") == 0)
		return cmd_plan(argc - 1, argv + 1);
	if (strcmp(cmd, "prepare") == 0)
		return cmd_prepare(argc - 1, argv + 1);
	if (strcmp(cmd, "eval") == 0)
		return cmd_eval(argc - 1, argv + 1);
	if (strcmp(cmd, "sample") == 0)
		return cmd_sample(argc - 1, argv + 1);
	if (strcmp(cmd, "export") == 0)
		return cmd_export(argc - 1, argv + 1);
	if (strcmp(cmd, "run") == 0)
		return cmd_run(argc - 1, argv + 1);
	if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0 ||
	    strcmp(cmd, "-V") == 0) {
		if (argc > 2 && !wants_help(argc - 1, argv + 1)) {
			fprintf(stderr, "spill %s: takes no arguments, not %s\n", cmd, argv[2]);
			return 2;
		}
		if (argc > 2) {
			printf(
			    "usage: spill version (or spill --version): prints spill's version\n");
			return 0;
		}
		printf("spill %s\n", SPILL_VERSION_STRING);
		return 0;
	}
	if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
		usage(stdout);
		return 0;
	}
	fprintf(stderr, "spill: unknown command '%s' (try `spill help`)\n", cmd);
	return 2;
}

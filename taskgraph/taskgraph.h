/* taskgraph/taskgraph.h — models, plans, task graphs, schedules and predictions.
 *
 * Pure logic (depends only on common/): a model is a sequence of plain layer
 * descriptors; a plan packs layers and picks microbatch, group, schedule and update
 * placement; tg_graph_build() turns models + plan into tasks with read/write sets of
 * memory objects, dependencies and per-device orders. tg_sim_swap() predicts swap
 * volume per link and object kind by replaying each device's order under a capacity
 * (the executor's rules: dead objects dropped, Belady eviction, write-back of sole
 * copies, P2P first); tg_time_predict() gives an iteration time.
 * Invariants: every object is written before it is read; one UPD per pack per
 * iteration, after all its BWDs (and those of packs tied to it); the global task
 * order is a topological order. */
#ifndef SP_TASKGRAPH_TASKGRAPH_H
#define SP_TASKGRAPH_TASKGRAPH_H

#include <stdint.h>

#include "common/error.h"

/* One layer as the taskgraph sees it (the runtime converts kernel descriptors).
 * A pack's objects follow from its layers (mb = samples per microbatch):
 *   stash  = mb * (sum of stash_bytes_per_sample + sum of out_bytes_per_sample of
 *            all but the pack's last layer: the inputs its later layers' backward
 *            needs); 0 bytes where the pack recomputes (tg_recomputes)
 *   work of a layer = work_bytes + work_bytes_per_sample * mb
 *   FWD work = max over the pack's layers of the layer work (+ if it recomputes the
 *            stash above as if recompute were off: scratch, not kept)
 *   BWD work = FWD work + (2 layers or more ? 2 * mb * max of out_bytes_per_sample
 *            over all but the last layer : 0) (ping-pong input-gradient buffers)
 *            + (recomputes ? the stash above as if recompute were off, and the
 *            last layer's output: mb * out_bytes_per_sample, for the re-run : 0) */
struct tg_layer {
	const char *name;
	uint64_t param_bytes, grad_bytes, opt_bytes;
	uint64_t stash_bytes_per_sample; /* kept from forward to backward */
	uint64_t out_bytes_per_sample;   /* output activation (the boundary after a pack) */
	uint64_t work_bytes;             /* constant workspace while running */
	uint64_t work_bytes_per_sample;  /* workspace that grows with the microbatch */
	double fwd_flops_per_sample, bwd_flops_per_sample;
	double upd_flops; /* the update's cost in FLOP-equivalents (0: free) */
	/* Tied weights (GPT-2's LM head uses the token embedding): with tied = 1 the
	 * layer also reads the parameters of layer tied_layer (< its own index) in
	 * forward and backward. It accumulates their gradient in its own gradient
	 * (grad_bytes counts it), never in the tied layer's: the tied layer's update
	 * adds it, so the order of accumulation is the same under every schedule.
	 * A pack may tie to at most one other pack. */
	int tied;
	int tied_layer;
	/* tensor parallelism (plan.tp > 1): the bytes one member pulls from the
	 * others in one pass (forward or backward) per sample: its partial
	 * sums' exchanges (0: none) */
	uint64_t xchg_bytes_per_sample;
};

struct tg_model {
	int id;
	int nlayers;
	const struct tg_layer *layers;
	int batch;                        /* samples per iteration per data-parallel replica set */
	uint64_t in_bytes_per_sample;     /* input of layer 0 */
	uint64_t target_bytes_per_sample; /* targets (labels), read by the last pack and LOSS */
	uint64_t loss_bytes_per_sample;   /* LOSS task workspace (e.g. logits) */
	/* > 0: the updates need the global gradient norm (clipping): each replica
	 * gets a norm object of these bytes (TG_O_GRAD), written by one NORM task
	 * per pack where its UPD runs, and every UPD of the replica waits for all
	 * of its NORMs (the updates then follow the whole backward pass) */
	uint64_t norm_bytes;
};

/* Hardware for predictions, filled by the caller. Bandwidths in bytes/s. */
struct tg_hw {
	int ndev;
	uint64_t capacity; /* per device */
	double flops, mem_bw, h2d_bw, d2h_bw, host_link_bw, p2p_bw;
	double disk_bw;      /* host <-> disk, all drives together */
	int size_class_bits; /* the vmm's pool size classes (sp_size_class), for the planner */
	uint64_t size_class_min;
	/* the vmm's allocation unit on the devices (0: the replay counts bytes and
	 * does not place copies in a pool) */
	uint64_t dev_align;
	/* the host pool's bytes when a disk tier takes what it cannot hold (0: the
	 * host holds everything), and its allocation unit */
	uint64_t host_capacity, host_align;
	/* bytes the devices, the host pool and the disk tier hold together (0: no
	 * limit): a plan whose objects (tg_graph_state_bytes) need more is not one */
	uint64_t store;
};

/* TG_INTERLEAVED: Narayanan's interleaved 1F1B (PTD-P, thesis ch. 7): pack pk
 * on device pk mod ndev, so each device holds v = ceil(npacks / ndev) model
 * chunks; each device runs Megatron's order (forwards of a group of ndev
 * microbatches chunk by chunk, (ndev - d - 1) * 2 + (v - 1) * ndev warm-up
 * forwards on device d, then one forward / one backward, then the
 * cool-down), updates at the flush. Bubble (1/v)(ndev - 1)/m with equal
 * chunks, communication v times 1F1B's.
 * TG_2BW: PipeDream-2BW (thesis 3.2.1): the 1F1B pipeline of TG_1F1B with two
 * weight versions per pack, W (the one every forward and backward of the
 * iteration reads) and Wnew (the newest): the UPD copies Wnew into W, then
 * steps Wnew with the gradient, so W(t+1) = W(t) - step(grad f(W(t-1)))
 * (rt_reference_set_2bw's rule). With plan.flush_every = 1 each iteration
 * ends with a flush, as 1F1B's: its bubble is 1F1B's (p-1)/m. With
 * flush_every = K > 1 one program runs K iterations (steps) as one endless
 * 1F1B order, flushing only at its end: step j's passes read version
 * V[j mod 2] (V0 = W, V1 = Wnew) and UPD_j copies V[(j+1) mod 2] into
 * V[j mod 2] and steps it, so step j+1's forwards wait for UPD_{j-1} only
 * and the steady state has no bubble (thesis Table 7.1's 0). Packs whose
 * gradient is read by another pack's update (ties) or by a norm take their
 * gradient by step parity too (G2; norms N2), so that the next step's
 * backwards need not wait for this step's updates. */
enum tg_sched {
	TG_DP_SWAP,
	TG_GPIPE,
	TG_1F1B,
	TG_HARMONY_DP,
	TG_HARMONY_PP,
	TG_INTERLEAVED,
	TG_2BW,
	TG_NSCHED
};
enum tg_kind { TG_FWD, TG_BWD, TG_UPD, TG_ALLREDUCE, TG_LOSS, TG_NORM };
enum tg_okind {
	TG_O_WEIGHT,
	TG_O_GRAD,
	TG_O_OPT,
	TG_O_STASH,
	TG_O_BOUNDARY,
	TG_O_INPUT,
	TG_O_WORK,
	TG_NOKIND
};
enum tg_link { TG_L_H2D, TG_L_D2H, TG_L_P2P, TG_L_H2DISK, TG_L_DISK2H, TG_NLINK };

#define TG_MAX_PACKS 1024

struct tg_plan {
	enum tg_sched sched;
	int ndev;
	int npacks;
	int pack_end[TG_MAX_PACKS]; /* exclusive end layer of each pack, increasing */
	int microbatch;             /* samples per microbatch */
	int group;                  /* microbatches per group (harmony modes) */
	int recompute;              /* stash only pack inputs, recompute in backward */
	int upd_cpu;                /* run UPD on the CPU (weights/grads move to host) */
	/* SHARP: 1 where pack pk begins a shard, the packs one unit runs (a shard
	 * of several packs loads pack by pack while its first packs compute; pack
	 * 0 always begins one); all 0: every pack its own shard */
	unsigned char shard_head[TG_MAX_PACKS];
	/* with recompute: 1 where pack pk keeps its stash all the same, because
	 * its backward follows its forward on the same device before anything
	 * else runs there (SHARP's last shard: forward, loss and backward are one
	 * unit); tg_recomputes() */
	unsigned char keep_stash[TG_MAX_PACKS];
	/* processes of a multi-node run (data parallel across them; 0 or 1: one):
	 * above 1, every pack's gradient has an ALLREDUCE after its last BWD on
	 * every schedule (it adds the other nodes' gradients), even with one
	 * replica on the node */
	int nodes;
	/* ZeRO-1 across the nodes (nodes > 1): pack pk's optimizer state (and
	 * bf16's fp32 masters in it) lives on node owner[pk] alone; this graph
	 * is node `node_rank`'s. Every node runs every UPD task, but only the
	 * owner's updates (elsewhere its optimizer state has no bytes and the
	 * task no work); an ALLREDUCE with root = the owner then broadcasts the
	 * pack's new weights to the other nodes. */
	int zero;
	int node_rank;
	unsigned char owner[TG_MAX_PACKS]; /* zero: the node updating each pack */
	/* TG_2BW: steps one program runs without a flush between them (0 or 1:
	 * each step flushes; at most TG_MAX_FLUSH_EVERY); other schedules 0 or 1 */
	int flush_every;
	/* tensor parallelism (Megatron): devices per pipeline stage (0 or 1:
	 * none). The graph is the plan's on ndev / tp devices, widened: every
	 * task and object has tp members, member r of a task on device
	 * dev * tp + r with member r of its objects (the layers' sizes are one
	 * member's, the caller's); the forwards and backwards of one task's
	 * members exchange partial sums, so they run together (tg_task.tp_set) */
	int tp;
};

#define TG_MAX_TP          4 /* tensor parallelism: members of a block, at most */
#define TG_MAX_FLUSH_EVERY 64
/* 2bw's default: a flush every 8 steps (the fill and drain once in 8) */
#define TG_2BW_FLUSH_EVERY 8

/* ZeRO-1: the node that updates pack pk (0 without sharding: every node does). */
static inline int tg_pack_owner(const struct tg_plan *p, int pk)
{
	return p->zero && p->nodes > 1 ? p->owner[pk] : 0;
}
/* Does this graph's node update pack pk? */
static inline int tg_owns_pack(const struct tg_plan *p, int pk)
{
	return !(p->zero && p->nodes > 1) || p->owner[pk] == p->node_rank;
}

/* Does pack pk's backward run its forward again (plan.recompute, except the
 * packs that keep their stash)? */
static inline int tg_recomputes(const struct tg_plan *p, int pk)
{
	return p->recompute && !p->keep_stash[pk];
}

/* One task. Its read and write sets list object ids in a fixed order, so the
 * executor can find each role by position (below, r = rep, k runs over the
 * task's microbatches mb0..mb0+nmb-1 in order, and W[r,pk] stands for
 * mobj->W[r*P+pk], S[k,pk] for mobj->S[k*P+pk]; "in(k)" is the pack's input,
 * B[k,pk-1], or X[k] for pack 0; tp = mobj->tie_pack[pk], its "[tp]" entries are
 * there only when tp >= 0):
 *   FWD        reads  W[r,pk]; W[r,tp]; then per k: in(k), Y[k] (last pack only)
 *              writes per k: S[k,pk], B[k,pk]; then its work object
 *   LOSS       reads  per k: B[k,P-1], Y[k]
 *              writes per k: B[k,P-1] (its gradient, in place), L[k]
 *   BWD        reads  W[r,pk]; W[r,tp]; G[r,pk] unless first to accumulate into it;
 *              then per k: S[k,pk], the output gradient (B[k,P-1] for the last
 *              pack, else D[k,pk+1]), in(k) (with or without recompute: every
 *              layer's backward needs its input), Y[k] (last pack only)
 *              writes G[r,pk]; then per k: D[k,pk] (not for pack 0); then its work
 *              object
 *              (a G's accumulation chain is every BWD of its pack and replica, in
 *              task-id order, each depending on the one before; the first only
 *              writes G: the executor zeroes it)
 *   ALLREDUCE  reads  G[r,pk]  writes G[r,pk]
 *   UPD        reads  W[r,pk], G[r,pk], O[r,pk], then G[r,q] of every pack q tied
 *              to pk (their tied gradients, after q's chain and ALLREDUCE)
 *              writes W[r,pk], O[r,pk]
 *              (norm_bytes > 0: reads W[r,pk], G[r,pk], O[r,pk], N[r], after the
 *              replica's last NORM)
 *              (2BW: Wnew[r,pk] in W's place in both lists, W[r,pk] read after
 *              O and written last: a copy of Wnew before the step; 2BW with
 *              nstep > 1: W, G, N are step j's versions (tg_w_of...), and the
 *              other version, the copy's source, is read after O; nothing
 *              else is written)
 *   NORM       (norm_bytes > 0 only) reads G[r,pk], then G[r,q] of every pack q
 *              tied to pk; N[r] unless it is the replica's first NORM
 *              writes G[r,pk] (the tied gradients added, as UPD does without
 *              norms), N[r] (the sums of squares of pk's layers); emitted
 *              where UPD[r,pk] would be, on its device, each after the
 *              replica's previous NORM
 * read[0] is always the W (FWD, BWD; UPD: Wnew in 2BW) or G (ALLREDUCE) of the
 * task's own pack. Under 2BW with nstep > 1, W, G and N above stand for the
 * task's step's versions (tg_w_of, tg_g_of, tg_n_of). */
struct tg_task {
	int id, model, kind, pack, mb0, nmb;
	int rep;         /* replica (DP modes: the device whose W/G/O it uses), 0 otherwise */
	int dev;         /* device it runs on in the predicted order (-1: the host) */
	int constrained; /* 1 if the schedule fixes dev; 0 = may be bound late */
	int work;        /* FWD, BWD: its own TG_O_WORK object (last of the write set, maybe
	                    0 bytes: the executor skips those); -1 for other kinds */
	int nread, nwrite, ndep;
	int *read, *write, *dep; /* into the graph's pool */
	double flops;
	double xchg_bytes; /* FWD, BWD under plan.tp > 1: bytes it pulls from the other
	                      members (peer links), its tg_layer.xchg_bytes_per_sample */
	int root;          /* ALLREDUCE: -1 sums G; >= 0 broadcasts W from that node (ZeRO-1) */
	int step;          /* the step of the program it belongs to (0..nstep-1; TG_2BW with
	             flush_every > 1, else 0): its objects are that step's versions */
	int member;        /* plan.tp > 1: its tensor-parallel member (0..tp-1), else 0 */
	int tp_set;        /* FWD, BWD under plan.tp > 1: the set of members run together
	               (the task's id before widening), else -1 */
};

struct tg_obj {
	int kind, model;
	uint64_t bytes;
};

/* The objects of one model by role, for the executor (it maps them onto vmm
 * objects and kernel arguments). Index conventions: [rep*P + pk] per replica and
 * pack; [k*P + pk] per microbatch and pack; [k] per microbatch. Microbatch k of a
 * DP mode belongs to replica k / mper. D[k*P + 0] exists (0 bytes) and is unused.
 * The arrays share one allocation owned by the graph (tg_graph_free). */
struct tg_model_objs {
	int id;         /* model id */
	int P;          /* packs */
	int nrep;       /* replicas: devices in DP modes, 1 otherwise */
	int nmb;        /* microbatches per iteration (step) in all: nrep * mper */
	int mper;       /* microbatches per replica per iteration */
	int nstep;      /* steps one program runs (plan.flush_every under 2BW, else 1):
	                   the per-microbatch objects number nstep * nmb, step j's
	                   microbatch k at j * nmb + k */
	int *tie_pack;  /* [pk]: the earlier pack whose weights pack pk also uses, -1 none */
	int *W, *G, *O; /* [rep*P + pk] weights, gradients, optimizer state */
	int *S, *B, *D; /* [k*P + pk] stash, boundary output, input gradient */
	int *X, *Y, *L; /* [k] input, target, loss workspace */
	int *N;         /* [rep] the gradient norm object (norm_bytes > 0), else -1 */
	/* [rep*P + pk] 2BW: the newest weights, which only the UPD reads (W holds
	 * the version before them, which the passes read); -1 in other schedules.
	 * Between programs this holds always; inside one of nstep > 1 steps, step
	 * j's passes read W for even j and Wnew for odd j (tg_w_of), and after an
	 * odd number of steps the runtime swaps what the two name. */
	int *Wnew;
	/* nstep > 1: [rep*P + pk] the gradient of odd steps where a pack's
	 * gradient is read by another pack's update or by a norm (ties, norms),
	 * else -1; [rep] the norm object of odd steps (norm_bytes > 0), else -1 */
	int *G2, *N2;
	/* plan.tp > 1: members; every table above but tie_pack lists member 0's
	 * objects, then member 1's, ... (each its length further); member r's
	 * object of an entry is the entry + r (tg_mo_member) */
	int tp;
};

/* Member r's object of a table entry of mo (base: mo->W, mo->S, ...; i: the
 * index as above): widening numbers an object's members consecutively. */
static inline int tg_mo_member(const struct tg_model_objs *mo, const int *base, int i, int r)
{
	return base[i] < 0 || mo->tp <= 1 ? base[i] : base[i] + r;
}

/* The objects step `step` of a program uses: its weight version, its gradient,
 * its norm (index [rep*P + pk], [rep]). */
static inline int tg_w_of(const struct tg_model_objs *mo, int i, int step)
{
	return (step & 1) && mo->Wnew[i] >= 0 ? mo->Wnew[i] : mo->W[i];
}
static inline int tg_g_of(const struct tg_model_objs *mo, int i, int step)
{
	return (step & 1) && mo->G2[i] >= 0 ? mo->G2[i] : mo->G[i];
}
static inline int tg_n_of(const struct tg_model_objs *mo, int rep, int step)
{
	return (step & 1) && mo->N2[rep] >= 0 ? mo->N2[rep] : mo->N[rep];
}

struct tg_graph {
	int ntask, nobj, ndev;
	struct tg_task *task; /* in global (topological) order */
	struct tg_obj *obj;
	struct tg_model_objs *mobj; /* [nmodels], in the order given to tg_graph_build */
	int nmodels;
	int *pool;
	int pool_len, pool_cap;
	int m;      /* microbatches per device (DP) or per pipeline per iteration */
	int npacks; /* of the (last) model */
	int *order; /* global order: task ids, topological */
	double makespan_units, busy_units; /* list schedule with F=fwd flops, B=bwd flops */
	double bubble;                     /* idle fraction over busy on the busiest device */
	/* tg_sim_swap: a device copy occupies sp_size_class(bytes, size_class_bits,
	 * size_class_min), as the vmm's pools allocate (0: its bytes); set by the
	 * caller */
	int size_class_bits;
	uint64_t size_class_min;
	/* tg_sim_swap: with dev_align, each device's copies are placed in a pool of
	 * the capacity as the vmm's (common/pool.h: weights, gradients and optimizer
	 * state from the top, the rest from the bottom, best fit), and a request
	 * that has the bytes but no hole evicts the cheapest window as the vmm does;
	 * a copy occupies its bytes rounded to dev_align, to its size class, and to
	 * dev_align again (vmm_device_footprint). Set by the caller. */
	uint64_t dev_align;
	/* tg_sim_swap: the host pool's bytes when a disk tier takes what it cannot
	 * hold (0: the host holds everything), a host copy rounded up to
	 * host_align; set by the caller (tg_graph_set_hw) */
	uint64_t host_capacity, host_align;
	int peak_stash; /* max live stashed microbatches on one device */
	int tp;         /* plan.tp (1: none) */
};

/* Sets the graph's size classes and host tier for tg_sim_swap from hw. */
void tg_graph_set_hw(struct tg_graph *g, const struct tg_hw *hw);

/* Bytes of every object of the graph but the workspaces (each task's scratch,
 * dead after it): weights, gradients, optimizer state, every microbatch's
 * stash and boundaries, inputs. An upper bound of what must be stored at once
 * somewhere (device, host or disk) during an iteration. */
uint64_t tg_graph_state_bytes(const struct tg_graph *g);

const char *tg_sched_name(enum tg_sched s);
const char *tg_okind_name(int k);
/* "forward", "backward", "update", "all-reduce", "loss", "norm" */
const char *tg_kind_name(int k);

/* Builds the graph of `nmodels` models under `plan` (same plan for every model).
 * Returns 0, -EINVAL naming the bad parameter, or -ENOMEM. Caller frees with
 * tg_graph_free(). */
int tg_graph_build(const struct tg_model *models, int nmodels, const struct tg_plan *plan,
                   struct tg_graph *g) SP_MUST_CHECK;
void tg_graph_free(struct tg_graph *g);

/* The smallest per-device capacity that can run g: the largest working set (sum of
 * the bytes of a task's distinct objects) over the tasks that run on a device.
 * *task (may be NULL) receives that task's id, or -1 when no task runs on a device. */
uint64_t tg_graph_min_capacity(const struct tg_graph *g, int *task);

/* Checks acyclicity (deps point backwards in the order), write-before-read, one UPD
 * per pack, replica and step that depends (transitively) on every other task of
 * its step reading its W or writing its G (its BWDs, and those of a pack tied to
 * it), and that every two tasks touching one object, one of them writing it, are
 * ordered by dependencies (graphs up to 20000 tasks; above, not checked: the
 * ancestor sets are quadratic). Returns 0 or -EINVAL with the first violation. */
int tg_graph_validate(const struct tg_graph *g) SP_MUST_CHECK;

struct tg_swap {
	uint64_t bytes[TG_NLINK][TG_NOKIND];
	uint64_t peak_stash_objs; /* max stashed-activation objects live on one device */
};

/* Predicts the swap volume of one steady-state iteration (the middle one of three
 * replays of the global order) with `capacity` bytes per device, by the rules the
 * executor and the vmm follow (so measured volume can equal it):
 *  - tasks go in the executor's order: the global order, except that the members
 *    of one all-reduce go together, once each is the next task of its device
 *    with its dependencies gone (later tasks go ahead of them until then); they
 *    are acquired one after the other and held until the last is; next uses
 *    are positions in the global order all the same (the executor's hints);
 *  - after a task, an object whose next use (cyclically, across iterations) does
 *    not read it is dead: dropped from every place, nothing written back;
 *  - inputs (X, Y) are new data each iteration: at its start they are valid on
 *    the host only;
 *  - a task acquires first the objects already on its device, then the others
 *    (each in read-set then write-set order, each object once); a missing object
 *    it reads comes by P2P from a device with a valid copy, else by H2D; one it
 *    only writes moves nothing; objects of no bytes have no copies anywhere;
 *  - room is made by Belady on that device (farthest next use there; ties: least
 *    recently acquired there, then lower object index); an evicted copy is
 *    written back (D2H) only if no other valid copy exists and its next use reads
 *    it, or always with writeback_clean (per-GPU virtual memory: dp-swap); a
 *    victim whose write-back finds no room in the host pool is passed over for
 *    the next; when none is left, the device is emptied (each copy in object
 *    order: written back when it is its object's only one, else dropped) and
 *    the task acquires its objects again, as the executor does;
 *  - host tasks (UPD on the CPU) pull what they read to the host (D2H when the host
 *    copy is stale) and drop the device copies of what they write;
 *  - an ALLREDUCE adds its ring share 2(N-1)/N |G| to P2P (the N members' shares
 *    rounded to add up to 2(N-1)|G|);
 *  - with g->host_capacity, the host pool holds that much and a disk tier the
 *    rest: the initial weights and optimizer state (replica by replica, pack by
 *    pack, W then O) and each iteration's inputs (X then Y per microbatch, X
 *    held while Y finds room) are written there; a host copy stays when a
 *    device takes the object and goes when the object is written elsewhere;
 *    room is made by Belady on the host (the sooner of the object's next use
 *    anywhere and its next use by a host task; ties: least recently allocated
 *    or used on the host, then lower index; by that LRU alone for the initial
 *    state and the first inputs, which come before the executor's first
 *    hints), a victim with no valid disk copy written down (H2DISK) first; a
 *    host copy in flight (to or from the running task's device) is no victim
 *    until it lands: all have after a disk transfer; when only they are left,
 *    the host waits for the latest one started, and the copies as far up
 *    their own queues (each device's stream in or out; equal bytes take equal
 *    time) land with it; a device reading an object held only on disk brings
 *    it to the host first (DISK2H), then makes room on the device. The disk
 *    holds everything (its capacity is not modelled).
 * Returns 0, or -ENOMEM naming the task whose working set exceeds the capacity,
 * or that finds no room even on its emptied device (its write-backs do not fit
 * the host pool), or the host pool that cannot hold a task's host copies. */
int tg_sim_swap(const struct tg_graph *g, uint64_t capacity, int writeback_clean,
                struct tg_swap *out) SP_MUST_CHECK;

/* Steps one run of g's program makes (tg_model_objs.nstep; 1 without models). */
static inline int tg_graph_steps(const struct tg_graph *g)
{
	return g->nmodels && g->mobj[0].nstep > 1 ? g->mobj[0].nstep : 1;
}

/* Analytical time (seconds) of one step (iteration; a program of several
 * steps, 2BW's, counts its span over its steps) and pipeline bubble fraction
 * (of the whole program). tg_sim_swap's bytes are those of one run of the
 * program: all of its steps. */
struct tg_time {
	double iter_s, compute_s, transfer_s, bubble;
};
int tg_time_predict(const struct tg_graph *g, const struct tg_plan *p, const struct tg_hw *hw,
                    const struct tg_swap *sw, struct tg_time *out) SP_MUST_CHECK;
/* tg_sim_swap's replay (at hw->capacity) in time: each device runs its tasks
 * in the global order as dependencies, objects and copies allow; copies are
 * issued as a task enters its device's prefetch window (3 tasks ahead), once
 * the space they take is free (a victim after its last task there, and its
 * write-back), and queue per device and on the shared host link; CPU updates
 * queue on the CPU. iter_s: the middle iteration's span, transfers overlapped
 * with compute as far as these rules let them (tg_time_predict adds them). */
int tg_sim_time(const struct tg_graph *g, const struct tg_plan *p, const struct tg_hw *hw,
                int writeback_clean, struct tg_swap *sw, struct tg_time *out) SP_MUST_CHECK;

/* The plan's SHARP shards: those shard_head marks (pack 0 always begins one),
 * or npacks when none is marked. */
int tg_plan_shards(const struct tg_plan *p);

/* Hydra greedy packing: add layers while the pack, one microbatch and a reserve
 * fraction fit `capacity`. -ENOMEM names a layer that cannot fit alone. */
int tg_pack_greedy(const struct tg_model *m, int microbatch, uint64_t capacity, double reserve,
                   struct tg_plan *plan) SP_MUST_CHECK;
/* PipeDream-style DP: `npacks` contiguous packs minimising the max per-pack time
 * subject to each pack fitting capacity. */
int tg_pack_dp(const struct tg_model *m, int microbatch, uint64_t capacity, int npacks,
               struct tg_plan *plan) SP_MUST_CHECK;

/* Planner: searches packing × microbatch × group × schedule × update placement ×
 * recomputation (the executor's rules: dead contents discarded, clean copies
 * dropped), returns the fastest predicted plan that fits. */
int tg_plan_auto(const struct tg_model *m, const struct tg_hw *hw, struct tg_plan *best,
                 struct tg_time *best_time) SP_MUST_CHECK;
/* The same search, keeping the `max` fastest predicted plans (at most per_sched
 * of one schedule) in out/times, fastest first; *n gets how many. For callers
 * that rank the finalists by simulation (the runtime's "auto"). */
int tg_plan_candidates(const struct tg_model *m, const struct tg_hw *hw, int max, int per_sched,
                       struct tg_plan *out, struct tg_time *times, int *n) SP_MUST_CHECK;

/* ---- many models at once: SHARP (sharp.c, milp.c) ------------------------------------
 * Hydra's shard-alternator: each model is a queue of shard units (forward or
 * backward of one shard on one minibatch), strictly sequential within the model;
 * whenever a device is free it takes an eligible unit (the front of its model's
 * queue, no other unit of that model running) of any model, chosen by a policy. */

enum tg_mm_policy {
	TG_MM_LRTF,   /* the model with the longest remaining time (Sharded-LRTF) */
	TG_MM_RANDOM, /* uniformly among the eligible models */
	TG_MM_FIFO,   /* the model eligible longest (ties: lower index) */
	TG_MM_NPOLICY
};
const char *tg_mm_policy_name(enum tg_mm_policy p);
int tg_mm_policy_parse(const char *name, enum tg_mm_policy *out) SP_MUST_CHECK;

/* The online choice among eligible models. O(log n) per operation for lrtf and
 * fifo (a heap keyed by remaining time, resp. by when the model became
 * eligible), O(1) for random (seeded, deterministic). Not thread-safe. */
struct tg_sharp;
int tg_sharp_open(int nmodels, enum tg_mm_policy policy, uint64_t seed,
                  struct tg_sharp **out) SP_MUST_CHECK;
void tg_sharp_close(struct tg_sharp *s);
/* Model m becomes eligible; remaining: its remaining time in seconds (lrtf's key). */
void tg_sharp_ready(struct tg_sharp *s, int m, double remaining);
/* Takes the policy's choice out of the eligible set: the model, or -1 if none. */
int tg_sharp_pick(struct tg_sharp *s);
/* Takes model m out of the eligible set if it is there (stopped early). */
void tg_sharp_remove(struct tg_sharp *s, int m);
int tg_sharp_eligible(const struct tg_sharp *s);

/* An instance for the simulator and the MILP: model m has nunits[m] units, unit j
 * taking dur[m][j] seconds on a device of speed 1 (speed[d]: device d's, NULL:
 * all 1; a unit takes dur / speed there). Dynamics, each NULL for none:
 * join[d], the time device d becomes available; fail[d], the time it disappears
 * (a unit running on it then is lost and reruns elsewhere from its start);
 * stop(arg, m, done, now): called when model m has finished `done` units,
 * returns 1 to stop it early (successive halving, for one). */
struct tg_mm {
	int nmodels;
	const int *nunits;
	const double *const *dur;
	int ndev;
	const double *speed;
	const double *join, *fail;
	int (*stop)(void *arg, int m, int done, double now);
	void *stop_arg;
};

struct tg_mm_result {
	double makespan; /* seconds, from 0 to the last unit's end */
	double busy_s;   /* device-seconds spent on units that completed */
	double lost_s;   /* device-seconds of units lost to failed devices */
	uint64_t units;  /* units completed */
	uint64_t reruns; /* units rerun after a failure */
	int stopped;     /* models stopped early */
};

/* Event-driven SHARP over the instance (remaining time from dur, the same
 * estimate the runtime keeps from measured units). Returns 0, -EINVAL naming
 * the bad field, -ENOMEM, or -EDEADLK when every device has failed with units
 * left. */
int tg_mm_simulate(const struct tg_mm *in, enum tg_mm_policy policy, uint64_t seed,
                   struct tg_mm_result *out) SP_MUST_CHECK;
/* A lower bound on the makespan: max(longest model, total work / total speed)
 * (no dynamics). */
double tg_mm_lower_bound(const struct tg_mm *in);

/* Hydra's MILP (§5.3.1: start times, one device per unit, units of a model in
 * order, one unit at a time per device, minimise the makespan) solved with GLPK
 * within time_limit_s. *makespan gets the best schedule found, *bound the
 * solver's lower bound, *optimal 1 when they meet. Dynamics are ignored.
 * Returns 0, -ENOTSUP when built without GLPK, -ETIMEDOUT when no integer
 * solution was found in time, -EINVAL, -E2BIG for instances over 64 units. */
int tg_mm_milp(const struct tg_mm *in, double time_limit_s, double *makespan, double *bound,
               int *optimal) SP_MUST_CHECK;

#endif

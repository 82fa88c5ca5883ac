/* vmm/internal.h — the vmm's private structures; included only by the vmm/ sources.
 *
 * Places are numbered internally 0..ndev-1 (devices), P_HOST = ndev, P_DISK =
 * ndev+1. Objects live in an arena sized at open; an id is (generation << 32) |
 * (index + 1). Each object has one struct vmm_copy per device and one for the
 * host; the disk copy is an extent. At most one transfer per object is in
 * flight (struct vmm_xfer embedded in the object); an object with a transfer in
 * flight is never a victim, nor is a copy with pins > 0. All fields are
 * protected by vmm->lock.
 */
#ifndef SP_VMM_INTERNAL_H
#define SP_VMM_INTERNAL_H

#include "common/pool.h"
#include "vmm/vmm.h"

#include <pthread.h>

/* ---- victim choice (policy.c) ---- */
struct vmm_cand {
	uint32_t idx;      /* object index */
	uint64_t next_use; /* VMM_NO_HINT if unknown */
	uint64_t last_use; /* LRU stamp */
};
/* Returns the position in c[0..n) of the victim: Belady (farthest next use, no
 * hint = farthest, ties by LRU) or LRU (oldest last_use). AUTO picks Belady when
 * any candidate has a hint. n must be > 0. */
int vmm_policy_pick(enum vmm_policy pol, const struct vmm_cand *c, int n);
/* The other end of the same order: the candidate the policy would evict last
 * (Belady: nearest next use; LRU: newest last_use). n must be > 0. */
int vmm_policy_keep(enum vmm_policy pol, const struct vmm_cand *c, int n);
/* Parses "auto|belady|lru". */
int vmm_policy_parse(const char *s, enum vmm_policy *out) SP_MUST_CHECK;

/* ---- objects ---- */
struct vmm_copy {
	uint8_t valid;      /* bytes are (or, while filling, will be) the object's */
	uint8_t filling;    /* a transfer into this copy is in flight */
	uint8_t has_mem;    /* space allocated here */
	uint8_t fenced;     /* fence holds the caller's last use (vmm_release) */
	uint8_t writing;    /* acquired for writing; cleared when pins drop to 0 */
	uint8_t skip;       /* make_space: could not be written down, not a victim now */
	uint8_t space_wait; /* ev (on "reuse") marks when the space is free to write */
	uint32_t pins;
	int32_t blk;             /* pool block (pool objects) */
	void *ptr;               /* address of the copy */
	struct dev_phys *phys;   /* stable objects: the mapped chunk; host copies under
	                            cfg.host_fallback: their host chunk */
	struct dev_event *ev;    /* recorded after the transfer into this copy */
	struct dev_event *fence; /* recorded after the caller's last use */
	uint64_t last_use;       /* LRU stamp */
	uint64_t next_use;       /* vmm_hint_at for this place; VMM_NO_HINT: the object's */
	int32_t rprev, rnext;    /* list of objects with space on this place */
};

struct vmm_xfer {
	int active;
	int kind;     /* enum vmm_xfer_kind */
	int src, dst; /* internal places */
	int drop_src; /* eviction: free the source copy when done */
	int src_gone; /* the source's space was handed on in stream order (make_space) */
	uint64_t bytes;
	double t_start;
	struct dev_event *ev; /* device copies (the destination copy's event or obj->xev) */
	uint64_t ticket;      /* disk I/O */
	int32_t prev, next;   /* list of objects with a transfer in flight */
};

struct vmm_obj {
	uint32_t gen;
	uint8_t live;
	uint8_t kind;
	uint8_t stable;
	int8_t home;
	uint64_t bytes;
	uint64_t dev_bytes; /* rounded: pool alignment or mapping granularity */
	char name[32];
	uint64_t next_use;
	void *va;         /* stable objects: reserved range on home */
	uint8_t fallback; /* its host chunk is mapped at va (cfg.host_fallback) */
	uint8_t disk_valid, disk_has;
	uint8_t busy;      /* being brought: its copies are not victims */
	uint8_t lost;      /* a write-down whose source was already released failed, or
	                   the only valid copy was on a failed device (lost_dev) */
	int8_t lost_dev;   /* that device, or -1 (a failed write-down) */
	uint8_t lost_told; /* counted by vmm_device_failed */
	uint64_t extent;
	struct dev_event *xev; /* D2H transfers (out of a device) */
	int pending_dev;       /* prefetch chain: after disk->host, go on to this device, -1 none */
	int pending_wb;        /* write-back asked while a transfer was in flight: 1 host, 2 disk */
	int err;               /* last failed transfer's error, until a call reports it */
	int err_kind;          /* its enum vmm_xfer_kind */
	uint64_t err_seq;      /* v->err_seq when err was set */
	struct vmm_xfer x;
	uint64_t moved[VMM_XFER_KINDS], nmoves[VMM_XFER_KINDS];
	struct vmm_copy c[]; /* ndev devices, then the host */
};

struct vmm_place {
	/* devices: the pool (pool objects) and the stable budget */
	struct sp_pool pool;
	void *base;
	uint64_t stable_cap, stable_used;
	struct dev_stream *in, *out, *fence; /* copies into / out of the place, fences */
	/* devices: P2P copies in, one stream per source device (made at first
	 * use): a copy waiting for its source's writer must not hold up a copy
	 * from another device behind it (in a pipeline, a prefetched boundary
	 * from the previous stage blocked the next stage's gradient) */
	struct dev_stream *in_peer[DEV_MAX];
	int32_t rhead; /* objects with space here (victim candidates) */
	/* devices: pool space freed while still read (a fence, a D2H) is reused in
	 * stream order: the "reuse" stream waits for those readers, free_ev is
	 * recorded there after the last such wait. Each such free gets the next
	 * reuse_seq, which tags its pool block; reuse_done: every free up to that
	 * number is known read to the end */
	struct dev_stream *reuse;
	struct dev_event *free_ev;
	uint64_t reuse_seq, reuse_done;
	uint8_t failed; /* devices: vmm_device_failed; no copies here any more */
};

struct vmm {
	struct dev_ctx *ctx;
	struct vmm_config cfg;
	pthread_mutex_t lock;
	int ndev;
	size_t granularity[DEV_MAX];
	struct vmm_place pl[DEV_MAX + 1]; /* devices, then host */
	/* the pinned host pool (not cfg.host_fallback): a region reserved at open
	 * (host_reserved bytes) cut into host_ngrains grains, grain k being
	 * [host_grain_off[k], host_grain_off[k + 1]) (vmm.c host_grains: from each
	 * end they double from host_grow / 16 up to host_grow), each committed
	 * (pinned) the first time the pool hands out space in it; host_capped: a
	 * commit failed, the grains not committed are fenced out of the pool.
	 * host_grain_off == NULL: not such a pool */
	uint64_t host_reserved;
	uint64_t *host_grain_off;
	uint32_t host_ngrains;
	uint8_t *host_grain_on;
	uint8_t host_capped;
	struct vmm_disk *disk;
	/* objects */
	unsigned char *objs; /* arena of max_objects entries of obj_stride bytes */
	size_t obj_stride;
	uint32_t nobj_hw; /* high-water mark of used indices */
	uint32_t *free_idx;
	uint32_t nfree;
	int32_t xfer_head; /* objects with a transfer in flight */
	uint64_t clock;    /* LRU stamps */
	/* bumped by each failed transfer (vmm_err_set) and each error logged
	 * instead of returned: an API call reports an object's own failure only
	 * when it is the last one raised during that call (vmm.c report_own) */
	uint64_t err_seq;
	/* while a prefetch makes room on pf_place: only copies whose next use is
	 * after pf_next are victims (VMM_NO_HINT: no such limit) */
	int pf_place;
	uint64_t pf_next;
	/* events: ev_free holds complete ones; an event put back while its record
	 * is pending waits in the ev_pend ring (oldest first) until it completes,
	 * so it is never re-recorded while someone may still wait on it */
	struct dev_event **ev_free, **ev_pend;
	uint32_t nev_free, ev_cap;
	uint32_t pend_head, npend;
	/* the shared host link (cfg.link_copies): per direction (0: H2D, 1: D2H)
	 * at most link_slots copies run at once, in issue order: a ring of the
	 * last copies' end events, each copy waiting for the one link_slots
	 * before it (0 slots: no order) */
	int link_slots[2];
	struct dev_event *link_ev[2][DEV_MAX];
	uint64_t link_n[2];
	/* accounting: [src place][dst place][kind] */
	uint64_t *link; /* (ndev+2)^2 * VMM_KINDS */
	uint64_t xfer_total[VMM_XFER_KINDS];
	struct vmm_trace_rec *trace;
	uint64_t ntrace;
	struct vmm_stats st;
	/* scratch for victim choice */
	struct vmm_cand *cand;
	uint32_t *owners;
};

#define P_HOST(v) ((v)->ndev)

/* The next use of obj on place p that Belady ranks it by: the place's hint,
 * else the object's. A host copy is needed by the object's next use anywhere
 * too (a device without a copy reads it from the host; without it, it comes
 * from disk): the sooner of the two. */
static inline uint64_t vmm_copy_next_use(const struct vmm *v, const struct vmm_obj *o, int p)
{
	uint64_t nu = o->c[p].next_use != VMM_NO_HINT ? o->c[p].next_use : o->next_use;
	return p == P_HOST(v) && o->next_use < nu ? o->next_use : nu;
}
#define P_DISK(v) ((v)->ndev + 1)

static inline struct vmm_obj *vmm_obj_at(struct vmm *v, uint32_t idx)
{
	return (struct vmm_obj *)(v->objs + (size_t)idx * v->obj_stride);
}

/* ---- swap engine (swap.c); all called with v->lock held ---- */
/* Internal place of a public place, or -1. */
int vmm_place_index(const struct vmm *v, int place);
int vmm_place_public(const struct vmm *v, int p);
/* Brings obj's copy to place p (device or host): allocates (evicting), starts
 * the transfer if no valid copy is there. *started = 1 if a transfer began. */
int vmm_swap_bring(struct vmm *v, uint32_t idx, int p, int *started) SP_MUST_CHECK;
/* Allocates space for obj on p without filling it (evicting as needed). */
int vmm_swap_make_space(struct vmm *v, uint32_t idx, int p) SP_MUST_CHECK;
/* Frees obj's copy on p (no data movement). */
void vmm_swap_free_copy(struct vmm *v, uint32_t idx, int p);
/* cfg.host_fallback: maps a stable object's valid host copy at its device
 * address when it has no device copy (a no-op otherwise). */
void vmm_swap_fallback_map(struct vmm *v, uint32_t idx);
/* Frees every copy but the disk's (the host copy first). */
void vmm_swap_free_copies(struct vmm *v, uint32_t idx);
/* Frees the disk extent. */
void vmm_swap_free_disk(struct vmm *v, uint32_t idx);
/* Evicts obj's copy on p: drop if clean, else start writing it down. */
int vmm_swap_evict(struct vmm *v, uint32_t idx, int p) SP_MUST_CHECK;
/* Starts bringing obj to p (device or host) without pinning it. Makes room
 * only by evicting copies needed after obj (its hint); when there is none,
 * nothing starts (*started = 0, counted in prefetch_skips). */
int vmm_swap_prefetch(struct vmm *v, uint32_t idx, int p, int *started) SP_MUST_CHECK;
/* Writes obj down so that a copy on host (to_disk 0) or disk is valid. */
int vmm_swap_writeback(struct vmm *v, uint32_t idx, int to_disk) SP_MUST_CHECK;
/* Retires obj's transfer if complete (block=1: wait for it). Returns 0, -EAGAIN
 * if still in flight (block=0), or the transfer's error. */
int vmm_swap_retire(struct vmm *v, uint32_t idx, int block) SP_MUST_CHECK;
/* Retires every completed transfer; block=1 waits for all. */
int vmm_swap_progress(struct vmm *v, int block);
/* Number of valid copies (devices, host, disk). */
int vmm_obj_nvalid(struct vmm *v, const struct vmm_obj *o);
/* Events from the vmm's free list. */
int vmm_event_get(struct vmm *v, struct dev_event **out) SP_MUST_CHECK;
void vmm_event_put(struct vmm *v, struct dev_event *e);

/* An object's transfer failed: kept in o->err until one call reports it. */
static inline void vmm_err_set(struct vmm *v, struct vmm_obj *o, int err, int kind)
{
	o->err = err;
	o->err_kind = kind;
	o->err_seq = ++v->err_seq;
}
/* An error was logged rather than returned: whatever the call returns later
 * is another error, and must not be taken for it. */
static inline void vmm_err_swallowed(struct vmm *v)
{
	v->err_seq++;
}

/* ---- accounting (stats.c) ---- */
void vmm_acct_xfer(struct vmm *v, uint32_t idx, int kind, int src, int dst, uint64_t bytes,
                   double t0, double t1);

#endif

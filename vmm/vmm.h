/* vmm/vmm.h — the virtual memory manager over GPU, pinned host and disk memory.
 *
 * An object is a byte range with a kind. It has at most one copy per place
 * (each device, the pinned host pool, the disk tier); all valid copies hold the
 * same bytes. A device copy whose object has no other valid copy, or a host
 * copy with no valid disk copy, is dirty: evicting it writes it down one tier
 * (device -> host -> disk); a clean copy is dropped with nothing written.
 * Callers use an object on a place only between vmm_acquire() and vmm_release();
 * an acquired copy is pinned (never a victim). Transfers are asynchronous and
 * complete through events; the vmm never synchronizes a whole device.
 * Handles are 64-bit ids (index + generation): a stale or unknown id is -EINVAL,
 * never a crash.
 * Errors of transfers that run in the background (write-downs, prefetches,
 * write-backs) belong to their object and are reported exactly once, by the
 * first of: a call on that object that raises it and returns it (acquire,
 * prefetch, evict, writeback), vmm_obj_wait on it, or vmm_sync (which reports
 * the oldest one of any object). A call that returns another object's failure
 * ("making room for X: ...": a victim's write-down) leaves its own for later.
 * A full disk tier: a host copy going to disk that finds no room there takes
 * the extents of disk copies whose object holds another valid copy, only as
 * many bytes as it needs (none when even all of them would not do: -ENOSPC),
 * cheapest first: a stale disk copy; one whose object keeps a host and a device
 * copy; one that keeps two device copies; one that keeps only a host copy; one
 * that keeps only a device copy; ties to the object whose copies the victim
 * policy would evict last. The last two make a clean copy the only one (stats:
 * reclaim_sole): such a device copy is written down (D2H) when evicted instead
 * of dropped, and lost if its device fails; they are taken only when nothing
 * cheaper is left. A disk copy that is its object's only copy is never taken.
 * Thread-safety: every function may be called from any thread (one internal
 * lock; transfers run on the device layer's streams).
 */
#ifndef SP_VMM_VMM_H
#define SP_VMM_VMM_H

#include "common/error.h"
#include "common/params.h"
#include "common/stats.h"
#include "device/device.h"
#include "vmm/disk.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct vmm;

/* What an object holds; accounting is kept per kind. */
enum vmm_kind {
	VMM_KIND_WEIGHT,
	VMM_KIND_GRAD,
	VMM_KIND_OPTIM,
	VMM_KIND_STASH, /* stashed activation */
	VMM_KIND_INTERMEDIATE,
	VMM_KIND_INPUT,
	VMM_KIND_WORKSPACE,
	VMM_KINDS
};

/* Victim choice: AUTO is Belady (farthest next use) among the candidates when
 * any candidate carries a next-use hint, LRU otherwise. */
enum vmm_policy { VMM_POLICY_AUTO, VMM_POLICY_BELADY, VMM_POLICY_LRU };

/* How an acquired copy is used. WRITE keeps the contents (read-modify-write);
 * OVERWRITE promises to overwrite every byte, so nothing is brought in. Both
 * write modes make the acquired copy the only valid one (others are dropped)
 * at the acquire: an OVERWRITE released without writing leaves the object
 * with unspecified bytes (its old contents are gone). Write acquires of one
 * object on one place are not exclusive: a second WRITE or OVERWRITE on the
 * place that already holds it is granted too (callers order their writers). */
enum vmm_access { VMM_READ = 1, VMM_WRITE = 2, VMM_OVERWRITE = 3 };

/* Places: a device index 0..n-1, VMM_HOST (pinned host pool), VMM_DISK. */
#define VMM_HOST       DEV_HOST
#define VMM_DISK       DEV_DISK
#define VMM_NO_HINT    UINT64_MAX       /* next use unknown (or never) */
#define VMM_HINT_NEVER (UINT64_MAX - 1) /* vmm_hint_at: not used on this place again */

/* Object flags. */
#define VMM_OBJ_STABLE 1u /* device address never changes (bound to a reserved range) */

/* Transfer kinds (the per-object counters and the trace use them). */
enum vmm_xfer_kind {
	VMM_XFER_H2D,
	VMM_XFER_D2H,
	VMM_XFER_P2P,
	VMM_XFER_H2DISK,
	VMM_XFER_DISK2H,
	VMM_XFER_KINDS
};

struct vmm_config {
	int ndevices;        /* devices of the context to use, 0 = all */
	uint64_t device_mem; /* vmm budget per device, 0 = 90% of its capacity */
	uint64_t stable_mem; /* part of device_mem for VMM_OBJ_STABLE objects */
	uint64_t host_mem;   /* pinned host pool bytes (must be > 0): the capacity */
	uint64_t host_grow;  /* the pool is reserved at open and pinned in grains of this
	                        many bytes (rounded up to dev_host_commit_granularity), each
	                        the first time the pool hands out space in it; 0 = pin it
	                        all at open. Placement, eviction and every transfer are the
	                        same either way. A grain that cannot be pinned (the OS or
	                        driver is out of pinned memory) is a warning naming the
	                        sizes, and the pool holds what is pinned from then on
	                        (copies that do not fit go to disk). Not with host_fallback
	                        (its host copies are chunks of their own). */
	int use_disk;        /* 1: open the disk tier with cfg.disk */
	struct vmm_disk_config disk;
	enum vmm_policy policy;
	unsigned max_objects;   /* live objects at most (metadata sized at open) */
	unsigned trace_cap;     /* transfers kept in the trace ring, 0 = no trace */
	size_t align;           /* pool allocation alignment, power of two (0 = 256) */
	int stats_at_close;     /* print the stats table at vmm_close (SPILL_STATS) */
	const char *trace_file; /* vmm_close writes the Chrome trace there (NULL/"" = no;
	                           must outlive the vmm; %p = the pid) */
	int host_waits;         /* 1: the host waits for freed device space's last reader
	                         (no stream-ordered reuse; a baseline) */
	int size_class_bits;    /* device pools allocate sp_size_class(bytes, bits, 64 x
	                           align) (0 = exact): fewer distinct sizes, holes that
	                           fit (default 2 from the params: at most 25% more) */
	int writeback_clean;    /* 1: evicting a clean device copy writes it back all the
	                           same, as per-GPU virtual memory does (the dp-swap
	                           baseline Harmony measured against) */
	int link_copies;        /* copies the host link all devices share carries at
	                           once in each direction: a device's H2D (D2H) starts
	                           after the one issued link_copies before it on any
	                           device ends, so the link serves copies whole in issue
	                           order instead of splitting itself among all of them,
	                           which delays each (0 = from the profile: the host
	                           link over one device's link, rounded, at least 1;
	                           none when that covers every device or one device;
	                           < 0 = never) */
	int host_fallback;      /* 1: host copies are host chunks (dev_phys_create on
	                           DEV_HOST; host and driver backends), and while a stable
	                           object's only copies are on the host (and disk), its
	                           host chunk is mapped at its device address: a kernel
	                           that reaches it unannounced reads and writes host
	                           memory over the link instead of faulting. Host copy
	                           space is then rounded to the host granularity. */
};

/* Fills cfg from SPILL_HOST_MEM, SPILL_DISK_*, SPILL_IO_*, SPILL_VMM_*, SPILL_STATS.
 * Returns 0, or -EINVAL naming the bad value. */
int vmm_config_from_params(const struct sp_params *p, struct vmm_config *cfg) SP_MUST_CHECK;

/* Carves a pool from each device (one dev_mem_alloc each), the pinned host pool
 * and opens the disk tier. The vmm does not own ctx (close the vmm first).
 * Returns 0, -ENOMEM with the numbers when a pool does not fit, -EINVAL for a
 * bad config, or the disk tier's error. */
int vmm_open(struct dev_ctx *ctx, const struct vmm_config *cfg, struct vmm **out) SP_MUST_CHECK;
/* Waits for every transfer, prints stats if asked, frees everything. NULL ok. */
void vmm_close(struct vmm *v);

struct vmm_obj_desc {
	size_t bytes;
	enum vmm_kind kind;
	const char *name; /* copied (first 31 chars); NULL = "obj<id>" */
	unsigned flags;   /* VMM_OBJ_STABLE */
	int home;         /* device of a stable object's reserved range */
};

/* Creates an object with no data (its first acquire must be a write mode, or
 * reads unspecified bytes). Returns 0 and the id, -EINVAL for zero bytes, a bad
 * kind or home device, -ENOMEM when it can never fit a device or the host pool,
 * or when max_objects are live. */
int vmm_obj_create(struct vmm *v, const struct vmm_obj_desc *desc, uint64_t *out) SP_MUST_CHECK;
/* Waits for the object's transfers and frees its copies. Returns 0, -EINVAL for
 * a stale id (double destroy), -EBUSY while acquired. */
int vmm_obj_destroy(struct vmm *v, uint64_t obj) SP_MUST_CHECK;

/* Makes obj usable on place (device index or VMM_HOST) and pins it there.
 * *ptr receives its address there; *ready receives an event to wait on before
 * touching the bytes (dev_stream_wait_event / dev_event_sync), or NULL when the
 * copy is already there: it covers the transfer into the copy and, for fresh
 * device space, the last use of that space by its former owner. The event
 * belongs to the vmm and stays valid until the matching release. May evict
 * other objects (Belady/LRU); on a device, their write-downs are ordered on
 * streams, not waited for. Device copies come by P2P from another device when one holds the
 * object, by H2D otherwise (disk -> host first when needed).
 * Returns 0; -EINVAL (bad id, place or access; a stable object off its home);
 * -EBUSY (a write access while another place holds it acquired, or any access
 * while another place holds it acquired for writing: a copy made then would miss
 * the writer's bytes); -ENOMEM naming the object, the place and the bytes when it
 * does not fit even after evicting everything unpinned (dirty victims that cannot
 * be written down for lack of room below are skipped, and named); -ENOSPC/-EIO/
 * -EFBIG from the disk tier, also when a victim's write-down failed ("making room
 * for <obj>: ..."; nothing is lost). */
int vmm_acquire(struct vmm *v, uint64_t obj, int place, enum vmm_access access, void **ptr,
                struct dev_event **ready) SP_MUST_CHECK;
/* Unpins one acquire of obj on place. done (may be NULL) is an event recorded
 * after the caller's last use of the bytes: the vmm makes later transfers of
 * this copy wait for it (the caller may re-record it right after). NULL means
 * every use has completed. Returns 0, or -EINVAL if obj is not acquired there. */
int vmm_release(struct vmm *v, uint64_t obj, int place, struct dev_event *done) SP_MUST_CHECK;

/* Starts bringing obj to place without pinning it (returns without waiting for
 * the copy; a later acquire finds it there or in flight; a disk read continues
 * to the device on vmm_progress). When obj has a next-use hint, room is made
 * only by evicting copies needed after it (Belady with prefetching): if there
 * are none, nothing starts and 0 is returned (stats: prefetch_skips). Cancels an eviction of obj from place in
 * flight. Same errors as vmm_acquire (-EBUSY while another place writes it). */
int vmm_prefetch(struct vmm *v, uint64_t obj, int place) SP_MUST_CHECK;
/* Sets the logical time of obj's next use (VMM_NO_HINT = unknown). Belady
 * evicts the candidate whose next use is farthest. */
int vmm_hint(struct vmm *v, uint64_t obj, uint64_t next_use) SP_MUST_CHECK;
/* The same for obj's copy on one place (a device or VMM_HOST): an object used
 * by several devices has a next use on each; Belady on a place ranks by this
 * hint when set (VMM_NO_HINT: the object's, from vmm_hint; VMM_HINT_NEVER: no
 * further use there, the farthest). -EINVAL for a bad id or place. */
int vmm_hint_at(struct vmm *v, uint64_t obj, int place, uint64_t next_use) SP_MUST_CHECK;
/* Evicts obj's copy from place (a device, or VMM_HOST to push it to disk): a
 * clean copy is dropped, a dirty one written down first (asynchronously; to a
 * full disk tier it takes other objects' spare disk copies, see the top).
 * Returns 0 (also when there is no copy there), -EBUSY if pinned there,
 * -ENOSPC when the disk tier has no room even so (the host copy stays). */
int vmm_evict(struct vmm *v, uint64_t obj, int place) SP_MUST_CHECK;
/* Declares obj's contents dead (an activation after its backward, a gradient
 * after its update): every copy is dropped and nothing is written down. The
 * next use should be VMM_OVERWRITE; a READ or WRITE gets unspecified bytes.
 * Waits for obj's transfer in flight, if any. Returns 0, -EBUSY while acquired. */
int vmm_discard(struct vmm *v, uint64_t obj) SP_MUST_CHECK;
/* vmm_discard without waiting: -EAGAIN (nothing done) while a transfer of obj
 * is in flight. An executor discards right after the last reader's release
 * (the space is reused in stream order after its done event) when it can,
 * and at the reader's completion otherwise. */
int vmm_discard_if_idle(struct vmm *v, uint64_t obj) SP_MUST_CHECK;
/* Makes sure a copy below the devices is valid: device -> host (to_disk=0) or
 * further to disk (to_disk=1). Asynchronous; behind a transfer of obj in
 * flight it starts when that lands (vmm_progress, vmm_obj_wait, vmm_sync).
 * vmm_obj_wait() waits for it and reports a failed disk write. Returns 0, -EINVAL (to disk without a disk tier),
 * -EBUSY while the object is acquired for writing, -ENOSPC when no extent fits
 * (after taking spare disk copies, see the top). */
int vmm_writeback(struct vmm *v, uint64_t obj, int to_disk) SP_MUST_CHECK;
/* Waits for obj's transfer in flight, if any. Returns 0, or the error of obj's
 * last failed transfer that no call has reported yet — including one retired
 * meanwhile by vmm_progress or by another caller's eviction; it counts as
 * reported then. */
int vmm_obj_wait(struct vmm *v, uint64_t obj) SP_MUST_CHECK;
/* Retires completed transfers without blocking. Returns 0. */
int vmm_progress(struct vmm *v) SP_MUST_CHECK;
/* Waits for every transfer the vmm started (and the write-backs deferred
 * behind them). Returns 0, or the oldest unreported failure of any object, with
 * the object named; it counts as reported (vmm_obj_wait on that object returns
 * 0 after), others stay with their objects: call again for the next. */
int vmm_sync(struct vmm *v) SP_MUST_CHECK;

/* Device dev has failed (dev_failed: its memory and streams are gone). Waits
 * for every transfer in flight (those touching dev fail), then drops every copy
 * on dev. An object whose only valid copy was there is lost: READ and WRITE
 * acquires and prefetches fail with -EIO naming it until a VMM_OVERWRITE
 * acquire or vmm_discard; *nlost (may be NULL) gets how many. Errors of device
 * transfers pending report are dropped (they failed with dev; disk errors
 * stay). A copy elsewhere that was being filled from dev (a P2P) is dropped,
 * or, while acquired, keeps its space but holds no valid data: an object left
 * without a valid copy that way is lost too. Later acquires and prefetches on
 * dev fail with -ENODEV. Returns 0, or -EBUSY (nothing done) while an object
 * is acquired on dev: release first. */
int vmm_device_failed(struct vmm *v, int dev, uint32_t *nlost) SP_MUST_CHECK;

/* A snapshot of one object (a completed transfer is retired first). */
struct vmm_obj_info {
	size_t bytes;
	enum vmm_kind kind;
	char name[32];
	uint32_t valid_mask;  /* bit d: device d valid; VMM_INFO_HOST, VMM_INFO_DISK;
	                         includes a copy still being filled (in_flight) */
	uint32_t dirty_mask;  /* same bits: copies that are the only valid one */
	uint32_t pinned_mask; /* places where it is acquired */
	int in_flight;        /* -1 none, else an enum vmm_xfer_kind */
	uint64_t next_use;
	uint64_t bytes_moved[VMM_XFER_KINDS];
	uint64_t moves[VMM_XFER_KINDS];
};
#define VMM_INFO_HOST (1u << 30)
#define VMM_INFO_DISK (1u << 31)
int vmm_obj_info(struct vmm *v, uint64_t obj, struct vmm_obj_info *out) SP_MUST_CHECK;
/* Where obj has a valid copy now (valid_mask bits, filling copies included),
 * cheaply: nothing is retired, no name copied. 0 for a bad id. */
uint32_t vmm_obj_where(struct vmm *v, uint64_t obj);
/* The reserved device address of a VMM_OBJ_STABLE object, fixed from create to
 * destroy (what acquire on its home returns); NULL for another object or a bad id. */
void *vmm_obj_stable_addr(struct vmm *v, uint64_t obj);
/* Copies the object's disk copy, when it is current (the object's contents),
 * into dst (its bytes) with no host pool space: a way to read state when the
 * host pool cannot make room (its dirty copies cannot go down to a failing
 * disk). Waits for the object's transfer first. Returns 0, -ENOENT when there
 * is no current disk copy, -EBUSY while the object is acquired, -EINVAL for a
 * stale id, or the disk's read error. */
int vmm_read_disk(struct vmm *v, uint64_t obj, void *dst) SP_MUST_CHECK;

/* ---- accounting ---- */
/* Bytes moved from place src to place dst (device, VMM_HOST, VMM_DISK) for
 * objects of kind (VMM_KINDS = all kinds). */
uint64_t vmm_link_bytes(struct vmm *v, int src, int dst, int kind);
/* Bytes moved per transfer kind, all objects. */
uint64_t vmm_xfer_bytes(struct vmm *v, enum vmm_xfer_kind kind);
const char *vmm_xfer_kind_name(enum vmm_xfer_kind kind);
const char *vmm_kind_name(enum vmm_kind kind);

/* The bytes a device copy of an ordinary (not stable) object of `bytes` takes
 * in a device pool: aligned and rounded up to its size class. */
uint64_t vmm_device_footprint(const struct vmm *v, uint64_t bytes);
/* Bytes in use / capacity of a place (device pool + stable, host pool, disk). */
int vmm_place_usage(struct vmm *v, int place, uint64_t *used, uint64_t *capacity) SP_MUST_CHECK;

/* The most bytes a device's or the host's pool held at once since the last
 * call (stable-address objects counted at their current use), and restarts
 * the count from what it holds now. For progress lines: at a step's end a
 * schedule may have written everything back. */
int vmm_place_peak(struct vmm *v, int place, uint64_t *peak) SP_MUST_CHECK;

/* The disk tier's own counters (zeros without a disk tier). */
void vmm_disk_stats_get(struct vmm *v, struct vmm_disk_stats_snapshot *out);

/* One completed transfer; times on dev_now()'s clock. */
struct vmm_trace_rec {
	double t_start, t_end;
	uint64_t obj;
	uint64_t bytes;
	int src, dst;  /* places */
	int xfer;      /* enum vmm_xfer_kind */
	int kind;      /* enum vmm_kind */
	char name[32]; /* the object's, when the transfer landed */
};
/* Copies up to max of the most recent transfers (oldest first) into out and
 * returns how many; *total gets the count ever recorded. */
size_t vmm_trace_get(struct vmm *v, struct vmm_trace_rec *out, size_t max, uint64_t *total);
/* Writes the trace ring as a Chrome trace (Trace Event Format JSON, for
 * chrome://tracing or ui.perfetto.dev): one complete event per transfer, named
 * after its object, on one lane per link and direction ("gpu0 h2d", "gpu1 d2h",
 * "host2disk", ...), times in us from the first transfer kept. Returns 0, or
 * -EIO when writing fails. vmm_close writes it to cfg.trace_file when set. */
int vmm_trace_write(struct vmm *v, FILE *f) SP_MUST_CHECK;

/* Counters of the whole vmm. */
#define VMM_STATS(X)                                                                    \
	X(COUNT, device_bytes, "bytes of device copies (all devices)")                  \
	X(COUNT, host_bytes, "bytes in the pinned host pool")                           \
	X(COUNT, host_committed, "host pool bytes pinned (grains, host chunks)")        \
	X(COUNT, disk_bytes, "bytes of disk extents")                                   \
	X(COUNT, objects, "live objects")                                               \
	X(COUNT, pinned, "acquired copies")                                             \
	X(COUNTER, acquires, "acquire calls that succeeded")                            \
	X(COUNTER, hits, "acquires that found the copy resident")                       \
	X(COUNTER, misses, "acquires that had to bring the copy")                       \
	X(COUNTER, prefetches, "prefetches that started a transfer")                    \
	X(COUNTER, prefetch_skips, "prefetches that would evict what is needed sooner") \
	X(COUNTER, evictions, "copies evicted (dropped or written down)")               \
	X(COUNTER, drops, "clean copies dropped with nothing written")                  \
	X(COUNTER, writebacks, "dirty copies written down a tier")                      \
	X(COUNTER, discards, "objects whose contents were declared dead")               \
	X(COUNTER, frag_evictions, "evictions made to open a contiguous hole")          \
	X(COUNTER, enomem, "requests that did not fit after evicting all unpinned")     \
	X(COUNTER, disk_errors, "disk allocations or I/Os that failed")                 \
	X(COUNTER, disk_reclaims, "disk copies freed to make room on a full disk")      \
	X(COUNTER, reclaim_sole, "of those, ones that left a clean copy the only one")  \
	X(COUNTER, lost_objects, "objects whose only copy was on a failed device")      \
	X(COUNTER, waits, "blocking waits on one transfer's event or ticket")           \
	X(COUNTER, fence_waits, "blocking waits on a caller's done event")              \
	X(COUNTER, ordered_reuses, "device space reused in stream order, no wait")      \
	X(COUNTER, host_commit_fails, "host pool grains that could not be pinned")      \
	X(COUNTER, host_fallbacks, "stable objects given their host copy at their address")
SP_STATS_DECLARE(vmm_stats, VMM_STATS)

/* A snapshot of the counters. */
void vmm_stats_get(struct vmm *v, struct vmm_stats *out);
/* Prints the stats table, the (link x kind) matrix and the totals per transfer
 * kind, as text (json=0) or as one JSON object (json=1). */
void vmm_stats_print(struct vmm *v, FILE *f, int json);

#endif

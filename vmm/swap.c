/* vmm/swap.c — the swap engine: space on a place, victims, transfers, retirement.
 *
 * Every function here runs with vmm->lock held. A transfer is started on the
 * destination's "in" stream (H2D, P2P) or the source's "out" stream (D2H), or
 * through the disk tier (host<->disk), and recorded in the object's struct
 * vmm_xfer; the destination copy is marked valid+filling at once (so readers can
 * wait on its event) and retired — filling cleared, the source dropped for an
 * eviction, bytes accounted — when its event or ticket completes. Space is
 * freed only after the transfers and the caller's fences that use it complete,
 * so a new copy never overwrites bytes still being read. A failed disk write
 * drops only the half-written disk copy: the host copy stays valid.
 */
#include "vmm/internal.h"

#include "common/log.h"

#include <inttypes.h>
#include <string.h>

static const char *place_name(struct vmm *v, int p, char *buf, size_t n)
{
	if (p == P_HOST(v))
		snprintf(buf, n, "host");
	else if (p == P_DISK(v))
		snprintf(buf, n, "disk");
	else
		snprintf(buf, n, "device %d", p);
	return buf;
}

int vmm_place_index(const struct vmm *v, int place)
{
	if (place == VMM_HOST)
		return P_HOST(v);
	if (place == VMM_DISK)
		return P_DISK(v);
	if (place >= 0 && place < v->ndev)
		return place;
	return -1;
}

int vmm_place_public(const struct vmm *v, int p)
{
	if (p == P_HOST(v))
		return VMM_HOST;
	if (p == P_DISK(v))
		return VMM_DISK;
	return p;
}

/* Moves up to a few of the oldest pending events that have completed to the
 * free list (events complete roughly in the order they were put back). */
static void event_reap(struct vmm *v, unsigned max)
{
	while (v->npend && max--) {
		struct dev_event *e = v->ev_pend[v->pend_head];
		if (dev_event_peek(e) == -EAGAIN)
			break;
		v->pend_head = (v->pend_head + 1) % v->ev_cap;
		v->npend--;
		v->ev_free[v->nev_free++] = e;
	}
}

int vmm_event_get(struct vmm *v, struct dev_event **out)
{
	if (!v->nev_free)
		event_reap(v, 8);
	if (v->nev_free) {
		*out = v->ev_free[--v->nev_free];
		return 0;
	}
	return dev_event_create(v->ctx, out);
}

void vmm_event_put(struct vmm *v, struct dev_event *e)
{
	if (!e)
		return;
	/* A pending record may still be waited on (a stream wait queued on it, a
	 * caller's ready event): recycling it now would re-record it under them. */
	int pending = dev_event_peek(e) == -EAGAIN;
	if (v->nev_free + v->npend < v->ev_cap) {
		if (pending)
			v->ev_pend[(v->pend_head + v->npend++) % v->ev_cap] = e;
		else
			v->ev_free[v->nev_free++] = e;
		return;
	}
	if (dev_event_destroy(e) < 0) /* the device layer lets pending records land */
		SP_WARN(VMM, "event destroy failed: %s", sp_last_error());
}

int vmm_obj_nvalid(struct vmm *v, const struct vmm_obj *o)
{
	int n = o->disk_valid;
	for (int p = 0; p <= P_HOST(v); p++)
		n += o->c[p].valid;
	return n;
}

static void xfer_link(struct vmm *v, uint32_t idx)
{
	struct vmm_obj *o = vmm_obj_at(v, idx);
	o->x.prev = -1;
	o->x.next = v->xfer_head;
	if (v->xfer_head >= 0)
		vmm_obj_at(v, (uint32_t)v->xfer_head)->x.prev = (int32_t)idx;
	v->xfer_head = (int32_t)idx;
	o->x.active = 1;
}

static void xfer_unlink(struct vmm *v, uint32_t idx)
{
	struct vmm_obj *o = vmm_obj_at(v, idx);
	if (o->x.prev >= 0)
		vmm_obj_at(v, (uint32_t)o->x.prev)->x.next = o->x.next;
	else
		v->xfer_head = o->x.next;
	if (o->x.next >= 0)
		vmm_obj_at(v, (uint32_t)o->x.next)->x.prev = o->x.prev;
	o->x.active = 0;
}

static void resident_link(struct vmm *v, uint32_t idx, int p)
{
	struct vmm_copy *c = &vmm_obj_at(v, idx)->c[p];
	c->rprev = -1;
	c->rnext = v->pl[p].rhead;
	if (c->rnext >= 0)
		vmm_obj_at(v, (uint32_t)c->rnext)->c[p].rprev = (int32_t)idx;
	v->pl[p].rhead = (int32_t)idx;
}

static void resident_unlink(struct vmm *v, uint32_t idx, int p)
{
	struct vmm_copy *c = &vmm_obj_at(v, idx)->c[p];
	if (c->rprev >= 0)
		vmm_obj_at(v, (uint32_t)c->rprev)->c[p].rnext = c->rnext;
	else
		v->pl[p].rhead = c->rnext;
	if (c->rnext >= 0)
		vmm_obj_at(v, (uint32_t)c->rnext)->c[p].rprev = c->rprev;
	c->rprev = c->rnext = -1;
}

/* Waits for the caller's last use of a copy (its fence), if any. */
static void copy_unfence(struct vmm *v, struct vmm_copy *c)
{
	if (!c->fenced)
		return;
	sp_counter_add(&v->st.fence_waits, 1);
	if (dev_event_sync(c->fence) < 0)
		SP_WARN(VMM, "fence wait failed: %s", sp_last_error());
	c->fenced = 0;
}

/* Stream-ordered reuse of device pool space: rather than the host waiting for
 * the last reader of a block it frees (the caller's fence, a D2H still reading
 * it), device p's "reuse" stream waits for that reader, and the freed block is
 * tagged with the free's sequence number (sp_pool_free). Space allocated
 * from a block whose tag is not yet known done gets an event recorded on
 * "reuse" (try_alloc, space_wait), and every write into it waits for that
 * event: a transfer into the copy (start_copy) or the caller, through the
 * acquire's ready event. Space nobody still reads is written at once: one
 * stream of frees must not hold back every fresh allocation (a unit's next
 * weights behind the task before it). A separate stream, so fresh space does
 * not wait for unrelated copies queued on "in". Returns the free's sequence
 * number (> 0), or -EAGAIN (cfg.host_waits) or the device error: the caller
 * then waits on the host. */
static int64_t order_reuse(struct vmm *v, int p, struct dev_event *last_reader)
{
	struct vmm_place *pl = &v->pl[p];
	if (v->cfg.host_waits)
		return -EAGAIN;
	if (!pl->free_ev)
		SP_CHECK(vmm_event_get(v, &pl->free_ev));
	SP_CHECK(dev_stream_wait_event(pl->reuse, last_reader));
	SP_CHECK(dev_event_record(pl->free_ev, pl->reuse));
	sp_counter_add(&v->st.ordered_reuses, 1);
	return (int64_t)++pl->reuse_seq;
}

/* cfg.host_fallback: the stable object's host chunk leaves its device address
 * (the device copy comes back, or the host copy goes). The unmap waits for the
 * work queued on the device, so a kernel writing through it has finished. */
static int fallback_unmap(struct vmm *v, struct vmm_obj *o)
{
	if (!o->fallback)
		return 0;
	int rc = dev_va_unmap(v->ctx, o->va, o->dev_bytes);
	if (rc < 0) { /* still mapped there: the chunk must stay */
		SP_WARN(VMM, "unmap of the host copy of '%s' at its address: %s", o->name,
		        sp_last_error());
		vmm_err_swallowed(v);
		return rc;
	}
	o->fallback = 0;
	return 0;
}

/* cfg.host_fallback: a stable object has no device copy any more and a valid
 * host copy: that chunk goes at its device address, so a kernel the caller did
 * not announce reads and writes it there instead of faulting. From then on the
 * host copy may change under the vmm: a disk copy is no longer up to date. */
static void fallback_map(struct vmm *v, struct vmm_obj *o)
{
	struct vmm_copy *h = &o->c[P_HOST(v)];
	if (!v->cfg.host_fallback || !o->stable || o->fallback || o->c[o->home].has_mem ||
	    dev_failed(v->ctx, o->home) || !h->has_mem || !h->valid || h->filling || !h->phys ||
	    v->pl[P_HOST(v)].pool.blocks[h->blk].size != o->dev_bytes)
		return;
	if (dev_va_map(v->ctx, o->va, o->dev_bytes, h->phys, 0) < 0) {
		SP_WARN(VMM, "mapping the host copy of '%s' at its address: %s", o->name,
		        sp_last_error());
		vmm_err_swallowed(v);
		return;
	}
	o->fallback = 1;
	o->disk_valid = 0;
	sp_counter_add(&v->st.host_fallbacks, 1);
}

void vmm_swap_fallback_map(struct vmm *v, uint32_t idx)
{
	fallback_map(v, vmm_obj_at(v, idx));
}

/* Gives back the space of obj's copy on p; its readers are done, or ordered
 * by the reuse free reuse_seq (0: none). */
static void release_space(struct vmm *v, uint32_t idx, int p, uint64_t reuse_seq)
{
	struct vmm_obj *o = vmm_obj_at(v, idx);
	struct vmm_copy *c = &o->c[p];
	if (p < v->ndev && o->stable) {
		if (dev_va_unmap(v->ctx, o->va, o->dev_bytes) < 0)
			SP_WARN(VMM, "unmap of '%s' failed: %s", o->name, sp_last_error());
		if (dev_phys_destroy(v->ctx, c->phys) < 0)
			SP_WARN(VMM, "phys destroy of '%s' failed: %s", o->name, sp_last_error());
		c->phys = NULL;
		v->pl[p].stable_used -= o->dev_bytes;
		sp_count_add(&v->st.device_bytes, -(int64_t)o->dev_bytes);
		c->has_mem = c->valid = 0;
		fallback_map(v, o);
	} else {
		struct sp_pool *pool = &v->pl[p].pool;
		uint64_t sz = pool->blocks[c->blk].size;
		if (c->phys) { /* a host chunk (cfg.host_fallback); still mapped: leaked */
			int rc = fallback_unmap(v, o);
			if (rc == 0)
				rc = dev_va_unmap(v->ctx, c->ptr, sz);
			if (rc == 0)
				rc = dev_phys_destroy(v->ctx, c->phys);
			if (rc < 0)
				SP_WARN(VMM, "host chunk of '%s': %s", o->name, sp_last_error());
			else
				sp_count_add(&v->st.host_committed, -(int64_t)sz);
			c->phys = NULL;
		}
		sp_pool_free(pool, c->blk, reuse_seq);
		if (p == P_HOST(v))
			sp_count_add(&v->st.host_bytes, -(int64_t)sz);
		else
			sp_count_add(&v->st.device_bytes, -(int64_t)sz);
	}
	c->has_mem = c->valid = c->filling = c->space_wait = 0;
	c->ptr = NULL;
	resident_unlink(v, idx, p);
}

void vmm_swap_free_copy(struct vmm *v, uint32_t idx, int p)
{
	struct vmm_obj *o = vmm_obj_at(v, idx);
	struct vmm_copy *c = &o->c[p];
	if (!c->has_mem) {
		c->valid = c->filling = 0;
		return;
	}
	/* a stable chunk is unmapped at once and host space is reused by the
	 * host and the disk tier: those wait here; device pool space is ordered */
	int64_t seq = 0;
	if (c->fenced && p < v->ndev && !o->stable && (seq = order_reuse(v, p, c->fence)) > 0)
		c->fenced = 0;
	copy_unfence(v, c);
	release_space(v, idx, p, seq > 0 ? (uint64_t)seq : 0);
}

void vmm_swap_free_copies(struct vmm *v, uint32_t idx)
{
	/* the host copy first: a stable object's device copy then never puts it at
	 * the object's address on its way out (cfg.host_fallback) */
	vmm_swap_free_copy(v, idx, P_HOST(v));
	for (int p = 0; p < v->ndev; p++)
		vmm_swap_free_copy(v, idx, p);
}

void vmm_swap_free_disk(struct vmm *v, uint32_t idx)
{
	struct vmm_obj *o = vmm_obj_at(v, idx);
	if (o->disk_has) {
		if (vmm_disk_free(v->disk, o->extent) < 0)
			SP_WARN(VMM, "disk free of '%s' failed: %s", o->name, sp_last_error());
		sp_count_add(&v->st.disk_bytes, -(int64_t)o->bytes);
	}
	o->disk_has = o->disk_valid = 0;
}

/* The host pool's grain holding byte off (vmm.c host_grains). */
static uint32_t host_grain_at(const struct vmm *v, uint64_t off)
{
	uint32_t lo = 0, hi = v->host_ngrains - 1;
	while (lo < hi) { /* the last grain that starts at or below off */
		uint32_t m = lo + (hi - lo + 1) / 2;
		if (v->host_grain_off[m] <= off)
			lo = m;
		else
			hi = m - 1;
	}
	return lo;
}

/* 1 when every grain under [off, off + bytes) of the host pool is pinned. */
static int host_pinned(const struct vmm *v, uint64_t off, uint64_t bytes)
{
	for (uint32_t k = host_grain_at(v, off), end = host_grain_at(v, off + bytes - 1); k <= end;
	     k++)
		if (!v->host_grain_on[k])
			return 0;
	return 1;
}

/* The host pool grows (cfg.host_grow): the grains under [off, off + bytes),
 * space the pool is handing out to obj, are pinned first. Returns 0, or the
 * device's error (-ENOMEM: out of pinned memory) with the sizes named. */
static int host_commit(struct vmm *v, uint32_t idx, uint64_t off, uint64_t bytes)
{
	void *base = v->pl[P_HOST(v)].base;
	for (uint32_t k = host_grain_at(v, off), end = host_grain_at(v, off + bytes - 1); k <= end;
	     k++) {
		if (v->host_grain_on[k])
			continue;
		uint64_t start = v->host_grain_off[k], len = v->host_grain_off[k + 1] - start;
		int rc = dev_host_commit(v->ctx, base, start, len);
		uint64_t now = dev_host_committed(v->ctx, base);
		sp_count_add(&v->st.host_committed, (int64_t)now - v->st.host_committed.current);
		if (rc < 0) {
			char a[32], b[32], c[32], msg[SP_ERROR_MSG_MAX];
			snprintf(msg, sizeof(msg), "%s", sp_last_error());
			sp_counter_add(&v->st.host_commit_fails, 1);
			return sp_error(
			    rc,
			    "vmm: pinning %s more of the host pool for '%s' failed with %s "
			    "pinned of SPILL_HOST_MEM %s: %s",
			    sp_format_size(len, a, sizeof(a)), vmm_obj_at(v, idx)->name,
			    sp_format_size(now, b, sizeof(b)),
			    sp_format_size(v->cfg.host_mem, c, sizeof(c)), msg);
		}
		v->host_grain_on[k] = 1;
		SP_TRACE(VMM,
		         "host pool: pinned [%" PRIu64 ", +%" PRIu64 ") for '%s', %" PRIu64
		         " pinned",
		         start, len, vmm_obj_at(v, idx)->name, now);
	}
	return 0;
}

/* A grain could not be pinned: the host pool holds what is pinned from now
 * on. The grains not pinned hold no copy (space is pinned before it is handed
 * out), so each run of them is free space, fenced out of the pool: what does
 * not fit in the rest evicts to disk, as in a full pool of that size. */
static void host_cap(struct vmm *v)
{
	struct sp_pool *pool = &v->pl[P_HOST(v)].pool;
	char a[32], b[32];
	v->host_capped = 1;
	for (uint32_t k = 0; k < v->host_ngrains;) {
		uint32_t e = k;
		while (e < v->host_ngrains && !v->host_grain_on[e])
			e++;
		uint64_t s = v->host_grain_off[k], end = v->host_grain_off[e];
		if (end > pool->size)
			end = pool->size;
		if (s < end && sp_pool_fence(pool, s, end - s) < 0)
			SP_WARN(VMM, "host pool: could not fence [%" PRIu64 ", %" PRIu64 ")", s,
			        end);
		k = e > k ? e : k + 1;
	}
	SP_WARN(VMM, "%s; the host pool holds %s from now on (of SPILL_HOST_MEM %s)%s",
	        sp_last_error(), sp_format_size(pool->size - pool->fenced, a, sizeof(a)),
	        sp_format_size(v->cfg.host_mem, b, sizeof(b)),
	        v->disk ? ": what does not fit goes to disk"
	                : ": there is no disk tier, so what does not fit fails (SPILL_DISK_PATH)");
	vmm_err_swallowed(v);
}

/* Allocates space for obj on p without evicting. -ENOMEM (no message) when full. */
static int try_alloc(struct vmm *v, uint32_t idx, int p)
{
	struct vmm_obj *o = vmm_obj_at(v, idx);
	struct vmm_copy *c = &o->c[p];
	int rc = 0;
	if (c->has_mem)
		return 0;
	if (p < v->ndev && o->stable) {
		struct vmm_place *pl = &v->pl[p];
		if (pl->stable_used + o->dev_bytes > pl->stable_cap)
			return -ENOMEM;
		SP_CHECK(dev_phys_create(v->ctx, p, o->dev_bytes, &c->phys));
		rc = fallback_unmap(v, o);
		if (rc == 0)
			rc = dev_va_map(v->ctx, o->va, o->dev_bytes, c->phys, 0);
		if (rc < 0) {
			if (dev_phys_destroy(v->ctx, c->phys) < 0)
				SP_WARN(VMM, "phys destroy failed: %s", sp_last_error());
			c->phys = NULL;
			fallback_map(v, o);
			return rc;
		}
		pl->stable_used += o->dev_bytes;
		c->ptr = o->va;
		sp_count_add(&v->st.device_bytes, (int64_t)o->dev_bytes);
	} else {
		struct sp_pool *pool = &v->pl[p].pool;
		if (!pool->size)
			return -ENOMEM;
		int high = o->kind == VMM_KIND_WEIGHT || o->kind == VMM_KIND_GRAD ||
		           o->kind == VMM_KIND_OPTIM;
		uint64_t want = p == P_HOST(v) ? o->bytes : o->dev_bytes;
		rc = sp_pool_alloc_end(pool, want, idx + 1, high, &c->blk);
		if (rc < 0)
			return rc;
		if (p == P_HOST(v) && v->host_grain_off && !v->host_capped &&
		    host_commit(v, idx, pool->blocks[c->blk].off, pool->blocks[c->blk].size) < 0) {
			/* out of pinned memory: the pool is what is pinned; the same
			 * request again there (or -ENOMEM: evict to make room) */
			sp_pool_free(pool, c->blk, 0);
			host_cap(v);
			rc = sp_pool_alloc_end(pool, want, idx + 1, high, &c->blk);
			if (rc < 0)
				return rc;
		}
		if (p == P_HOST(v) && v->host_capped &&
		    !host_pinned(v, pool->blocks[c->blk].off, pool->blocks[c->blk].size)) {
			sp_pool_free(pool, c->blk, 0); /* only if a fence failed (warned) */
			return -ENOMEM;
		}
		c->ptr = (char *)v->pl[p].base + pool->blocks[c->blk].off;
		if (p == P_HOST(v) && v->cfg.host_fallback) { /* a host chunk at the block */
			uint64_t sz = pool->blocks[c->blk].size;
			rc = dev_phys_create(v->ctx, DEV_HOST, sz, &c->phys);
			if (rc == 0 && (rc = dev_va_map(v->ctx, c->ptr, sz, c->phys, 0)) < 0 &&
			    dev_phys_destroy(v->ctx, c->phys) < 0)
				SP_WARN(VMM, "phys destroy failed: %s", sp_last_error());
			if (rc < 0) {
				c->phys = NULL;
				sp_pool_free(pool, c->blk, 0);
				return sp_error(rc, "vmm: host copy of '%s': %s", o->name,
				                sp_last_error());
			}
			sp_count_add(&v->st.host_committed, (int64_t)sz);
		}
		int64_t sz = (int64_t)pool->blocks[c->blk].size;
		if (p == P_HOST(v))
			sp_count_add(&v->st.host_bytes, sz);
		else
			sp_count_add(&v->st.device_bytes, sz);
	}
	c->has_mem = 1;
	c->valid = c->filling = c->space_wait = 0;
	if (p < v->ndev && !o->stable &&
	    v->pl[p].pool.blocks[c->blk].reuse_seq > v->pl[p].reuse_done) {
		/* this space may still be read: writes into it wait for "reuse" */
		struct vmm_place *pl = &v->pl[p];
		if (dev_event_peek(pl->free_ev) == 0) {
			pl->reuse_done = pl->reuse_seq;
		} else if ((c->ev || vmm_event_get(v, &c->ev) == 0) &&
		           dev_event_record(c->ev, pl->reuse) == 0) {
			c->space_wait = 1;
		} else {
			SP_WARN(VMM, "ordering reuse on device %d: %s; waiting", p,
			        sp_last_error());
			sp_counter_add(&v->st.waits, 1);
			if (dev_event_sync(pl->free_ev) < 0)
				SP_WARN(VMM, "wait failed: %s", sp_last_error());
		}
	}
	c->last_use = ++v->clock; /* a prefetched copy is not the oldest at once */
	resident_link(v, idx, p);
	return 0;
}

/* Would evicting obj's copy on p write something to disk: a host copy with no
 * valid disk copy, or a device copy that is the object's only one while the
 * host has no free room for it (its write-back would push another host copy
 * down)? A prefetch evicts none of these: it is a guess about the future, and
 * a write-down it causes is disk traffic the acquire would not have made
 * (GPT-2 10B on one H100, 64G of host: 33.9 -> 32.3 s/step, 43 -> 33 GB to
 * disk per step; where nothing goes to disk nothing changes). "Room" is a hole,
 * not free bytes: with 100G of host the free bytes in pieces let prefetches
 * push 5.2 GB a step to disk that the plan (and its prediction) never wrote,
 * 24.91 s/step; with holes, none and 24.50 s (64G: 30.86 -> 31.32 s, 39.1 ->
 * 44.4 GB against 47.5 predicted). */
static int vmm_prefetch_writes_down(struct vmm *v, const struct vmm_obj *o, int p)
{
	if (!v->disk)
		return 0;
	if (p == P_HOST(v))
		return !o->disk_valid;
	if (vmm_obj_nvalid(v, (struct vmm_obj *)o) - o->c[p].valid > 0)
		return 0;
	const struct sp_pool *hp = &v->pl[P_HOST(v)].pool;
	/* no hole for it: the bytes may be free, but in pieces, and the write-back
	 * would evict a host copy to open one */
	return sp_pool_largest_free(hp) < sp_pool_round(hp, o->bytes);
}

/* Can obj's copy on p be evicted now? */
static int evictable(struct vmm *v, const struct vmm_obj *o, int p, int stable_side)
{
	const struct vmm_copy *c = &o->c[p];
	if (!o->live || o->busy || o->x.active || !c->has_mem || c->pins || c->skip)
		return 0;
	if (p < v->ndev && (int)o->stable != stable_side)
		return 0;
	if (p == v->pf_place && vmm_copy_next_use(v, o, p) <= v->pf_next)
		return 0; /* a prefetch does not evict what is needed before its object */
	if (p == v->pf_place && vmm_prefetch_writes_down(v, o, p))
		return 0; /* ... nor what it could not evict without a write to disk */
	/* no disk tier: only host copies with another copy above can go */
	if (p == P_HOST(v) && !v->disk && c->valid && vmm_obj_nvalid(v, (struct vmm_obj *)o) < 2)
		return 0;
	return 1;
}

/* Cost of evicting owner (for the fragmentation window), -1 if it cannot go. */
struct window_arg {
	struct vmm *v;
	int p;
	uint64_t now; /* the nearest next use of an evictable copy here */
};
static double window_cost(void *arg, uint32_t owner)
{
	struct window_arg *w = arg;
	struct vmm_obj *o = vmm_obj_at(w->v, owner);
	if (!evictable(w->v, o, w->p, 0))
		return -1;
	/* a dirty copy costs a write-down on top of the later reload */
	double c = (double)o->dev_bytes;
	if (vmm_obj_nvalid(w->v, o) < 2)
		c *= 2;
	/* ... and the reload weighs more the sooner it comes (Belady over
	 * windows: bytes cost by window alone evicted the next task's weights) */
	uint64_t nu = vmm_copy_next_use(w->v, o, w->p);
	if (nu >= VMM_HINT_NEVER)
		return c * 1e-6;
	return c / (double)(1 + (nu > w->now ? nu - w->now : 0));
}

static uint64_t nearest_use(struct vmm *v, int p)
{
	uint64_t now = VMM_NO_HINT;
	for (int32_t i = v->pl[p].rhead; i >= 0; i = vmm_obj_at(v, (uint32_t)i)->c[p].rnext) {
		struct vmm_obj *o = vmm_obj_at(v, (uint32_t)i);
		uint64_t nu = vmm_copy_next_use(v, o, p);
		if (nu < now && evictable(v, o, p, 0))
			now = nu;
	}
	return now;
}

static int pick_victim(struct vmm *v, int p, int stable_side)
{
	int n = 0;
	for (int32_t i = v->pl[p].rhead; i >= 0; i = vmm_obj_at(v, (uint32_t)i)->c[p].rnext) {
		struct vmm_obj *o = vmm_obj_at(v, (uint32_t)i);
		if (!evictable(v, o, p, stable_side))
			continue;
		v->cand[n++] =
		    (struct vmm_cand){(uint32_t)i, vmm_copy_next_use(v, o, p), o->c[p].last_use};
	}
	if (!n)
		return -1;
	return (int)v->cand[vmm_policy_pick(v->cfg.policy, v->cand, n)].idx;
}

/* Does a wait on e (when waits) hold a stream now? */
static int pending(int waits, struct dev_event *e)
{
	return waits && e && dev_event_peek(e) == -EAGAIN;
}

/* Starts a copy between two places of memory (device/host) for obj. */
static int start_copy(struct vmm *v, uint32_t idx, int src, int dst, int drop_src)
{
	struct vmm_obj *o = vmm_obj_at(v, idx);
	struct vmm_copy *s = &o->c[src], *d = &o->c[dst];
	struct dev_stream *st;
	struct dev_event **evp;
	int kind;
	if (dst == P_HOST(v)) {
		kind = VMM_XFER_D2H;
		st = v->pl[src].out;
		evp = &o->xev;
	} else {
		kind = src == P_HOST(v) ? VMM_XFER_H2D : VMM_XFER_P2P;
		st = v->pl[dst].in;
		if (kind == VMM_XFER_P2P) {
			struct dev_stream **ps = &v->pl[dst].in_peer[src];
			if (!*ps)
				SP_CHECK(dev_stream_create(v->ctx, dst, ps));
			st = *ps;
		}
		evp = &d->ev;
	}
	double t0 = dev_now(v->ctx);
	if (!*evp)
		SP_CHECK(vmm_event_get(v, evp));
	if (s->fenced)
		SP_CHECK(dev_stream_wait_event(st, s->fence));
	/* fresh source space no caller wrote (a never-written object) may still
	 * be written by its former owner's last kernel: read it after that */
	if (s->space_wait)
		SP_CHECK(dev_stream_wait_event(st, s->ev));
	if (d->space_wait) /* the space's former owner may still be read */
		SP_CHECK(dev_stream_wait_event(st, d->ev));
	/* space kept while invalid (a failed transfer into a copy its acquirer
	 * held) may still be used by that acquirer's work: fill it after */
	if (d->fenced)
		SP_CHECK(dev_stream_wait_event(st, d->fence));
	/* the shared host link: a copy free to start now waits for the one
	 * link_slots before it in the ring; one that waits for a kernel (its
	 * source written, its space still read) stays out of the ring, so that
	 * the copies behind it do not wait for that kernel too */
	int dir = kind == VMM_XFER_H2D ? 0 : kind == VMM_XFER_D2H ? 1 : -1;
	struct dev_event **lev = NULL;
	if (dir >= 0 && v->link_slots[dir] && !pending(s->fenced, s->fence) &&
	    !pending(s->space_wait, s->ev) && !pending(d->space_wait, d->ev) &&
	    !pending(d->fenced, d->fence)) {
		lev = &v->link_ev[dir][v->link_n[dir] % (uint64_t)v->link_slots[dir]];
		if (*lev)
			SP_CHECK(dev_stream_wait_event(st, *lev));
		else
			SP_CHECK(vmm_event_get(v, lev));
	}
	SP_CHECK(dev_memcpy_async(st, d->ptr, vmm_place_public(v, dst), s->ptr,
	                          vmm_place_public(v, src), o->bytes));
	SP_CHECK(dev_event_record(*evp, st));
	if (lev) {
		SP_CHECK(dev_event_record(*lev, st));
		v->link_n[dir]++;
	}
	o->x = (struct vmm_xfer){.kind = kind,
	                         .src = src,
	                         .dst = dst,
	                         .drop_src = drop_src,
	                         .bytes = o->bytes,
	                         .t_start = t0,
	                         .ev = *evp};
	xfer_link(v, idx);
	d->valid = 1;
	d->filling = 1;
	return 0;
}

static int start_disk_write(struct vmm *v, uint32_t idx, int drop_src);

/* Brings obj from disk into its (allocated) host copy. */
static int start_disk_read(struct vmm *v, uint32_t idx)
{
	struct vmm_obj *o = vmm_obj_at(v, idx);
	struct vmm_copy *h = &o->c[P_HOST(v)];
	uint64_t ticket;
	int rc = vmm_disk_read_async(v->disk, o->extent, h->ptr, o->bytes, &ticket);
	if (rc < 0) {
		sp_counter_add(&v->st.disk_errors, 1);
		sp_error_context("reading object '%s' (%" PRIu64 " bytes) from disk", o->name,
		                 o->bytes);
		return rc;
	}
	o->x = (struct vmm_xfer){.kind = VMM_XFER_DISK2H,
	                         .src = P_DISK(v),
	                         .dst = P_HOST(v),
	                         .bytes = o->bytes,
	                         .t_start = dev_now(v->ctx),
	                         .ticket = ticket};
	xfer_link(v, idx);
	h->valid = h->filling = 1;
	return 0;
}

/* The disk tier's victim order, written once: what freeing an object's disk
 * extent costs it, cheapest first. No data is lost by any of them, but a
 * copy that becomes its object's only one is dirty from then on: a device
 * copy is written down (D2H) instead of dropped when evicted, a host copy
 * goes to disk again, and a failed device loses what it held alone. */
enum reclaim_rank {
	RECLAIM_STALE,       /* the disk copy is not current: nothing changes */
	RECLAIM_SPARE_HOST,  /* a host and a device copy stay: none is the only one */
	RECLAIM_SPARE,       /* two device copies or more stay, clean */
	RECLAIM_LAST_HOST,   /* the clean host copy becomes the only copy */
	RECLAIM_LAST_DEVICE, /* a clean device copy becomes the only copy */
	RECLAIM_NEVER        /* the only copy, in use by a transfer, or the writer */
};

static enum reclaim_rank reclaim_rank(struct vmm *v, uint32_t i, uint32_t except)
{
	struct vmm_obj *o = vmm_obj_at(v, i);
	if (i == except || !o->live || o->x.active || !o->disk_has)
		return RECLAIM_NEVER;
	if (!o->disk_valid)
		return RECLAIM_STALE;
	int above = vmm_obj_nvalid(v, o) - 1, host = o->c[P_HOST(v)].valid;
	if (above >= 2)
		return host ? RECLAIM_SPARE_HOST : RECLAIM_SPARE;
	if (above == 1)
		return host ? RECLAIM_LAST_HOST : RECLAIM_LAST_DEVICE;
	return RECLAIM_NEVER;
}

static uint64_t disk_extent_bytes(uint64_t bytes)
{
	return (bytes + VMM_DISK_ALIGN - 1) & ~(uint64_t)(VMM_DISK_ALIGN - 1);
}

/* The next disk copy to reclaim: the lowest reclaim_rank, and among those the
 * object whose copies above the victim policy would evict last (the one whose
 * disk copy is least likely to be needed soon). -1 if none. */
static int64_t reclaim_pick(struct vmm *v, uint32_t except, enum reclaim_rank *rank)
{
	enum reclaim_rank best = RECLAIM_NEVER;
	int n = 0;
	for (uint32_t i = 0; i < v->nobj_hw; i++) {
		enum reclaim_rank r = reclaim_rank(v, i, except);
		if (r == RECLAIM_NEVER || r > best)
			continue;
		if (r < best) {
			best = r;
			n = 0;
		}
		struct vmm_obj *o = vmm_obj_at(v, i);
		struct vmm_cand cd = {i, VMM_NO_HINT, 0};
		for (int p = 0; p <= P_HOST(v); p++) {
			if (!o->c[p].valid)
				continue;
			uint64_t nu = vmm_copy_next_use(v, o, p);
			cd.next_use = nu < cd.next_use ? nu : cd.next_use;
			cd.last_use =
			    o->c[p].last_use > cd.last_use ? o->c[p].last_use : cd.last_use;
		}
		v->cand[n++] = cd;
	}
	*rank = best;
	return n ? (int64_t)v->cand[vmm_policy_keep(v->cfg.policy, v->cand, n)].idx : -1;
}

/* The disk tier has no room for an extent of bytes for object except: frees
 * disk copies that have another valid copy, in reclaim_pick's order, until it
 * has (and none when even all of them would not make the room). Returns 1 if
 * it made the room. */
static int disk_reclaim(struct vmm *v, uint32_t except, uint64_t bytes)
{
	struct vmm_disk_stats_snapshot ds;
	vmm_disk_stats(v->disk, &ds);
	uint64_t want = ds.used + disk_extent_bytes(bytes), spare = 0;
	if (want <= ds.capacity)
		return 0; /* the tier refused for another reason */
	for (uint32_t i = 0; i < v->nobj_hw; i++)
		if (reclaim_rank(v, i, except) != RECLAIM_NEVER)
			spare += disk_extent_bytes(vmm_obj_at(v, i)->bytes);
	if (want - ds.capacity > spare)
		return 0;
	for (uint64_t freed = 0; freed < want - ds.capacity;) {
		enum reclaim_rank rank;
		int64_t i = reclaim_pick(v, except, &rank);
		if (i < 0) /* cannot happen: spare covered it */
			return 0;
		struct vmm_obj *o = vmm_obj_at(v, (uint32_t)i);
		SP_TRACE(VMM, "disk full: the disk copy of '%s' goes for '%s' (rank %d)", o->name,
		         vmm_obj_at(v, except)->name, (int)rank);
		freed += disk_extent_bytes(o->bytes);
		vmm_swap_free_disk(v, (uint32_t)i);
		sp_counter_add(&v->st.disk_reclaims, 1);
		sp_counter_add(&v->st.reclaim_sole, rank >= RECLAIM_LAST_HOST);
	}
	return 1;
}

static int disk_write(struct vmm *v, uint32_t idx, int drop_src);

static int start_disk_write(struct vmm *v, uint32_t idx, int drop_src)
{
	int rc = disk_write(v, idx, drop_src);
	if (rc < 0) /* kept on the host: back at its address */
		fallback_map(v, vmm_obj_at(v, idx));
	return rc;
}

static int disk_write(struct vmm *v, uint32_t idx, int drop_src)
{
	struct vmm_obj *o = vmm_obj_at(v, idx);
	struct vmm_copy *h = &o->c[P_HOST(v)];
	uint64_t ticket;
	int rc;
	char sz[32];
	if (!v->disk)
		return sp_error(-ENOMEM,
		                "vmm: object '%s' (%s) has its only copy in the host pool and "
		                "there is no disk tier to write it to (set SPILL_DISK_PATH)",
		                o->name, sp_format_size(o->bytes, sz, sizeof(sz)));
	/* what goes to disk must not change under the write: the host copy leaves
	 * the object's address first (the unmap waits for the kernels queued) */
	SP_CHECK(fallback_unmap(v, o));
	if (!o->disk_has) {
		rc = vmm_disk_alloc(v->disk, o->bytes, &o->extent);
		if (rc == -ENOSPC && disk_reclaim(v, idx, o->bytes))
			rc = vmm_disk_alloc(v->disk, o->bytes, &o->extent);
		if (rc < 0) {
			sp_counter_add(&v->st.disk_errors, 1);
			sp_error_context("vmm: object '%s' (%s) kept in host memory", o->name,
			                 sp_format_size(o->bytes, sz, sizeof(sz)));
			return rc;
		}
		o->disk_has = 1;
		sp_count_add(&v->st.disk_bytes, (int64_t)o->bytes);
	}
	copy_unfence(v, h);
	rc = vmm_disk_write_async(v->disk, o->extent, h->ptr, o->bytes, &ticket);
	if (rc < 0) {
		sp_counter_add(&v->st.disk_errors, 1);
		vmm_swap_free_disk(v, idx);
		sp_error_context("vmm: writing object '%s' to disk (host copy kept)", o->name);
		return rc;
	}
	o->x = (struct vmm_xfer){.kind = VMM_XFER_H2DISK,
	                         .src = P_HOST(v),
	                         .dst = P_DISK(v),
	                         .drop_src = drop_src,
	                         .bytes = o->bytes,
	                         .t_start = dev_now(v->ctx),
	                         .ticket = ticket};
	xfer_link(v, idx);
	return 0;
}

int vmm_swap_retire(struct vmm *v, uint32_t idx, int block)
{
	struct vmm_obj *o = vmm_obj_at(v, idx);
	struct vmm_xfer *x = &o->x;
	int rc;
	double t_end;
	if (!x->active)
		return 0;
	if (x->kind == VMM_XFER_H2DISK || x->kind == VMM_XFER_DISK2H) {
		rc = vmm_disk_poll(v->disk, x->ticket);
		if (rc == -EAGAIN && block) {
			sp_counter_add(&v->st.waits, 1);
			rc = vmm_disk_wait(v->disk, x->ticket);
		}
		if (rc == -EAGAIN)
			return rc;
		vmm_disk_ticket_release(v->disk, x->ticket);
		t_end = dev_now(v->ctx);
	} else {
		rc = dev_event_peek(x->ev);
		if (rc == -EAGAIN && block) {
			sp_counter_add(&v->st.waits, 1);
			rc = dev_event_sync(x->ev);
		}
		if (rc == -EAGAIN)
			return rc;
		if (rc < 0 || dev_event_time(x->ev, &t_end) < 0)
			t_end = dev_now(v->ctx);
	}
	xfer_unlink(v, idx);
	if (rc < 0) {
		char a[16], b[16], sz[32];
		int err = rc;
		sp_counter_add(&v->st.disk_errors, x->dst == P_DISK(v) || x->src == P_DISK(v));
		struct vmm_copy *dc = x->dst == P_DISK(v) ? NULL : &o->c[x->dst];
		if (!dc)
			vmm_swap_free_disk(v, idx);
		else if (dc->pins) /* the acquirer holds its address: keep the space */
			dc->valid = dc->filling = 0;
		else
			vmm_swap_free_copy(v, idx, x->dst);
		/* a source a write acquire made invalid goes, as on success */
		if (x->drop_src && x->src != P_DISK(v) && !o->c[x->src].valid && !o->c[x->src].pins)
			vmm_swap_free_copy(v, idx, x->src);
		o->pending_dev = -1; /* a prefetch chain stops here */
		fallback_map(v, o);  /* a failed write-down keeps the host copy */
		vmm_err_set(v, o, err, x->kind);
		/* With no valid copy left the data is gone: a D2H made to free space
		 * had handed the space on already, or a write acquire elsewhere had
		 * invalidated the source (only a device fault fails a device copy,
		 * and on CUDA that ends the context). */
		o->lost = vmm_obj_nvalid(v, o) == 0;
		if (o->lost) {
			int ps = vmm_place_public(v, x->src), pd = vmm_place_public(v, x->dst);
			o->lost_dev = (int8_t)(ps >= 0 && dev_failed(v->ctx, ps)   ? ps
			                       : pd >= 0 && dev_failed(v->ctx, pd) ? pd
			                                                           : -1);
			o->lost_told = 0;
		}
		char kept[80];
		if (o->lost)
			snprintf(kept, sizeof(kept), "no valid copy is left: the data is lost");
		else
			snprintf(kept, sizeof(kept), "the %s copy is kept",
			         x->src_gone ? "other" : place_name(v, x->src, a, 16));
		return sp_error(
		    err, "vmm: %s of object '%s' (%s) from %s to %s failed: %s (errno %d); %s",
		    vmm_xfer_kind_name((enum vmm_xfer_kind)x->kind), o->name,
		    sp_format_size(o->bytes, sz, sizeof(sz)), place_name(v, x->src, a, 16),
		    place_name(v, x->dst, b, 16), strerror(-err), -err, kept);
	}
	vmm_acct_xfer(v, idx, x->kind, x->src, x->dst, x->bytes, x->t_start, t_end);
	if (x->dst == P_DISK(v))
		o->disk_valid = 1;
	else /* the transfer waited for the space to be free: both done */
		o->c[x->dst].filling = o->c[x->dst].space_wait = 0;
	if (x->drop_src && !o->c[x->src].pins)
		vmm_swap_free_copy(v, idx, x->src);
	if (x->dst == P_HOST(v) || x->src == P_HOST(v)) /* arrived, or written down and kept */
		fallback_map(v, o);
	if (o->fallback) /* a kernel may write the host copy at the object's address */
		o->disk_valid = 0;
	return 0;
}

static int any_device_failed(struct vmm *v)
{
	for (int d = 0; d < v->ndev; d++)
		if (dev_failed(v->ctx, d))
			return 1;
	return 0;
}

int vmm_swap_progress(struct vmm *v, int block)
{
	int first = 0;
	int32_t i = v->xfer_head;
	while (i >= 0) {
		int32_t next = vmm_obj_at(v, (uint32_t)i)->x.next;
		int rc = vmm_swap_retire(v, (uint32_t)i, block);
		if (rc < 0 && rc != -EAGAIN) {
			if (any_device_failed(v)) /* expected: the failure is told once */
				SP_INFO(VMM, "%s", sp_last_error());
			else
				SP_WARN(VMM, "%s", sp_last_error());
			vmm_err_swallowed(v); /* kept in the object's err */
			if (!first)
				first = rc;
		}
		i = next;
	}
	return first;
}

int vmm_swap_evict(struct vmm *v, uint32_t idx, int p)
{
	struct vmm_obj *o = vmm_obj_at(v, idx);
	struct vmm_copy *c = &o->c[p];
	char pn[16];
	if (!c->has_mem)
		return 0;
	if (c->pins)
		return sp_error(-EBUSY, "vmm: object '%s' is acquired on %s and cannot be evicted",
		                o->name, place_name(v, p, pn, sizeof(pn)));
	if (o->x.active) {
		int rc = vmm_swap_retire(v, idx, 1);
		if (rc < 0)
			return rc;
		if (!c->has_mem)
			return 0;
	}
	/* A host copy is dropped only when the disk holds the object: dropping it
	 * while a device copy remains would turn that clean copy into the only one
	 * and force a D2H later (weights must never go back). */
	int others = vmm_obj_nvalid(v, o) - c->valid;
	int droppable = p == P_HOST(v) ? o->disk_valid || (!v->disk && others > 0)
	                               : others > 0 && !v->cfg.writeback_clean;
	int rc;
	if (!c->valid || droppable) {
		sp_counter_add(&v->st.evictions, 1);
		sp_counter_add(&v->st.drops, c->valid);
		vmm_swap_free_copy(v, idx, p);
		return 0;
	}
	if (p == P_HOST(v)) {
		rc = start_disk_write(v, idx, 1);
	} else {
		o->busy = 1;
		rc = vmm_swap_make_space(v, idx, P_HOST(v));
		if (rc == 0)
			rc = start_copy(v, idx, p, P_HOST(v), 1);
		o->busy = 0;
	}
	if (rc == 0) {
		sp_counter_add(&v->st.evictions, 1);
		sp_counter_add(&v->st.writebacks, 1);
	}
	return rc;
}

static int enomem(struct vmm *v, uint32_t idx, int p)
{
	struct vmm_obj *o = vmm_obj_at(v, idx);
	char pn[16], a[32], b[32], c[32];
	uint64_t pinned = 0, cap;
	int stable_side = p < v->ndev && o->stable;
	for (int32_t i = v->pl[p].rhead; i >= 0; i = vmm_obj_at(v, (uint32_t)i)->c[p].rnext) {
		struct vmm_obj *q = vmm_obj_at(v, (uint32_t)i);
		if (p < v->ndev && (int)q->stable != stable_side)
			continue; /* the other budget of the device */
		if (q->c[p].pins || q->x.active)
			pinned += p < v->ndev ? q->dev_bytes : q->bytes;
	}
	if (p < v->ndev && o->stable)
		cap = v->pl[p].stable_cap;
	else
		cap = v->pl[p].pool.size - v->pl[p].pool.fenced;
	sp_counter_add(&v->st.enomem, 1);
	return sp_error(
	    -ENOMEM,
	    "vmm: object '%s' needs %s on %s%s, which holds %s: %s are pinned or in "
	    "flight and nothing else can be evicted%s%s",
	    o->name, sp_format_size(p < v->ndev ? o->dev_bytes : o->bytes, a, sizeof(a)),
	    place_name(v, p, pn, sizeof(pn)),
	    p < v->ndev && o->stable ? " (stable-address budget)" : "",
	    sp_format_size(cap, b, sizeof(b)), sp_format_size(pinned, c, sizeof(c)),
	    p == P_HOST(v) && !v->disk
	        ? " (host copies that are their object's only copy stay: there is "
	          "no disk tier)"
	        : "",
	    p == P_HOST(v) && v->host_capped ? " (the host pool was cut to what could be pinned: "
	                                       "host_commit_fails in the stats)"
	                                     : "");
}

/* Evicts victim's copy on p to make room and waits for it to leave. A dirty
 * copy that cannot be written down (no room in the host pool, a full or
 * failing disk tier) is marked skip and left alone: *skip_rc keeps the reason
 * and the search goes on with other victims. */
static int evict_for_space(struct vmm *v, uint32_t victim, int p, int *nskip, int *skip_rc,
                           char *why, size_t why_len)
{
	int rc = vmm_swap_evict(v, victim, p);
	if (rc == -ENOMEM || rc == -ENOSPC) {
		vmm_obj_at(v, victim)->c[p].skip = 1;
		(*nskip)++;
		*skip_rc = rc;
		snprintf(why, why_len, "%s", sp_last_error());
		return 0;
	}
	if (rc < 0)
		return rc;
	struct vmm_obj *o = vmm_obj_at(v, victim);
	struct vmm_xfer *x = &o->x;
	int64_t seq;
	if (p < v->ndev && !o->stable && x->active && x->kind == VMM_XFER_D2H && x->src == p &&
	    x->drop_src && (seq = order_reuse(v, p, x->ev)) > 0) {
		/* the D2H (which waited for the caller's fence on "out") still reads
		 * the space; "reuse" waits for it, so the host does not */
		x->drop_src = 0;
		x->src_gone = 1;
		o->c[p].fenced = 0;
		release_space(v, victim, p, (uint64_t)seq);
		return 0;
	}
	/* a written-down copy frees its space when the write completes; one the
	 * disk refused stays (its error kept in the object for vmm_sync) and the
	 * search goes on: a clean copy elsewhere may still make the room */
	int to_disk = x->active && x->kind == VMM_XFER_H2DISK;
	rc = vmm_swap_retire(v, victim, 1);
	if (rc < 0 && rc != -EAGAIN && to_disk && !o->lost) {
		o->c[p].skip = 1;
		(*nskip)++;
		*skip_rc = rc;
		snprintf(why, why_len, "%s", sp_last_error());
		vmm_err_swallowed(v);
		return 0;
	}
	return rc;
}

int vmm_swap_make_space(struct vmm *v, uint32_t idx, int p)
{
	struct vmm_obj *o = vmm_obj_at(v, idx);
	int stable_side = p < v->ndev && o->stable;
	int rc, nskip = 0, skip_rc = 0;
	char why[SP_ERROR_MSG_MAX];
	for (;;) {
		rc = try_alloc(v, idx, p);
		if (rc != -ENOMEM)
			goto out;
		(void)vmm_swap_progress(v, 0);
		rc = try_alloc(v, idx, p);
		if (rc != -ENOMEM)
			goto out;
		if (!stable_side) {
			struct sp_pool *pool = &v->pl[p].pool;
			uint64_t need =
			    sp_pool_round(pool, p == P_HOST(v) ? o->bytes : o->dev_bytes);
			if (sp_pool_avail(pool) >= need) {
				/* enough bytes, no hole: evict the cheapest window */
				struct window_arg wa = {v, p, nearest_use(v, p)};
				int n = sp_pool_window(pool, need, window_cost, &wa, v->owners,
				                       (int)v->cfg.max_objects);
				/* one at a time: evicting may search the host pool with
				 * the same scratch array; the next round searches again */
				if (n > 0) {
					sp_counter_add(&v->st.frag_evictions, 1);
					SP_CHECK_GOTO(evict_for_space(v, v->owners[0], p, &nskip,
					                              &skip_rc, why, sizeof(why)),
					              rc, out);
					continue;
				}
			}
		}
		int victim = pick_victim(v, p, stable_side);
		if (victim >= 0) {
			SP_CHECK_GOTO(evict_for_space(v, (uint32_t)victim, p, &nskip, &skip_rc, why,
			                              sizeof(why)),
			              rc, out);
			continue;
		}
		/* nothing to evict: wait for a transfer after which space here is
		 * freed (an eviction) or can be evicted (any transfer of an object
		 * with a copy here: its copies are not victims while it is in flight) */
		int32_t w = -1;
		for (int32_t i = v->xfer_head; i >= 0; i = vmm_obj_at(v, (uint32_t)i)->x.next) {
			struct vmm_obj *q = vmm_obj_at(v, (uint32_t)i);
			if ((uint32_t)i != idx && q->c[p].has_mem &&
			    (p == P_HOST(v) || (int)q->stable == stable_side)) {
				w = i;
				break;
			}
		}
		if (w < 0 && p == v->pf_place) {
			rc = -EAGAIN; /* a prefetch: no room worth making, not an error */
			goto out;
		}
		if (w < 0) {
			rc = enomem(v, idx, p);
			if (nskip) {
				char pn[16], msg[SP_ERROR_MSG_MAX];
				snprintf(msg, sizeof(msg), "%s", sp_last_error());
				rc =
				    sp_error(skip_rc,
				             "%s; %d dirty copies on %s could not be written down: "
				             "%s",
				             msg, nskip, place_name(v, p, pn, sizeof(pn)), why);
			}
			goto out;
		}
		SP_CHECK_GOTO(vmm_swap_retire(v, (uint32_t)w, 1), rc, out);
	}
out:
	if (rc < 0 && rc != -ENOMEM && rc != -ENOSPC &&
	    rc != -EAGAIN) { /* a victim's transfer failed */
		char pn[16];
		sp_error_context("vmm: making room for '%s' on %s", o->name,
		                 place_name(v, p, pn, sizeof(pn)));
	}
	if (nskip)
		for (int32_t i = v->pl[p].rhead; i >= 0; i = vmm_obj_at(v, (uint32_t)i)->c[p].rnext)
			vmm_obj_at(v, (uint32_t)i)->c[p].skip = 0;
	return rc;
}

/* Brings obj to host (p == host) from a device or disk. nonblock: leave a disk
 * read in flight. */
static int bring_host(struct vmm *v, uint32_t idx, int *started, int nonblock)
{
	struct vmm_obj *o = vmm_obj_at(v, idx);
	int h = P_HOST(v);
	int src = -1;
	for (int d = 0; d < v->ndev; d++)
		if (o->c[d].valid) {
			src = d;
			break;
		}
	SP_CHECK(vmm_swap_make_space(v, idx, h));
	if (src >= 0) {
		SP_CHECK(start_copy(v, idx, src, h, 0));
		*started = 1;
		return 0;
	}
	if (o->disk_valid) {
		SP_CHECK(start_disk_read(v, idx));
		*started = 1;
		if (!nonblock)
			SP_CHECK(vmm_swap_retire(v, idx, 1));
		return 0;
	}
	o->c[h].valid = 1; /* no data yet: the new copy is the object */
	return 0;
}

int vmm_swap_bring(struct vmm *v, uint32_t idx, int p, int *started)
{
	struct vmm_obj *o = vmm_obj_at(v, idx);
	struct vmm_copy *c = &o->c[p];
	int h = P_HOST(v);
	int rc = 0;
	*started = 0;
	if (c->valid)
		return 0;
	if (o->x.active)
		SP_CHECK(vmm_swap_retire(v, idx, 1));
	if (c->valid)
		return 0;
	o->busy = 1;
	if (p == h) {
		rc = bring_host(v, idx, started, 0);
		goto out;
	}
	/* device p: from a peer (p2p link), else the host, else disk -> host first */
	int peer = -1, any_dev = -1;
	for (int d = 0; d < v->ndev; d++) {
		if (d == p || !o->c[d].valid)
			continue;
		if (any_dev < 0)
			any_dev = d;
		if (peer < 0 && dev_p2p_possible(v->ctx, d, p))
			peer = d;
	}
	int src = peer >= 0 ? peer : o->c[h].valid ? h : any_dev;
	if (src < 0 && o->disk_valid) {
		int s2 = 0;
		SP_CHECK_GOTO(bring_host(v, idx, &s2, 0), rc, out);
		src = h;
	}
	SP_CHECK_GOTO(vmm_swap_make_space(v, idx, p), rc, out);
	if (src < 0) {
		c->valid = 1; /* no data yet */
		goto out;
	}
	SP_CHECK_GOTO(start_copy(v, idx, src, p, 0), rc, out);
	*started = 1;
out:
	o->busy = 0;
	return rc;
}

int vmm_swap_writeback(struct vmm *v, uint32_t idx, int to_disk)
{
	struct vmm_obj *o = vmm_obj_at(v, idx);
	int h = P_HOST(v), started = 0;
	if (o->x.active) {
		int rc = vmm_swap_retire(v, idx, 0);
		if (rc == -EAGAIN) {
			/* starts when the transfer lands (vmm_progress, vmm_obj_wait,
			 * vmm_sync): the host does not wait for it here */
			if (o->pending_wb < 1 + to_disk)
				o->pending_wb = 1 + to_disk;
			return 0;
		}
		if (rc < 0)
			return rc;
	}
	if (!to_disk && (o->c[h].valid || o->disk_valid))
		return 0;
	if (to_disk && o->disk_valid)
		return 0;
	if (!o->c[h].valid) {
		int any = 0;
		for (int d = 0; d < v->ndev; d++)
			any |= o->c[d].valid;
		if (!any)
			return 0; /* no data at all */
		o->busy = 1;
		int rc = bring_host(v, idx, &started, 0);
		o->busy = 0;
		if (rc < 0)
			return rc;
		if (!to_disk)
			return 0;
		SP_CHECK(vmm_swap_retire(v, idx, 1));
	}
	return start_disk_write(v, idx, 0);
}

static int prefetch(struct vmm *v, uint32_t idx, int p, int *started)
{
	struct vmm_obj *o = vmm_obj_at(v, idx);
	int h = P_HOST(v);
	*started = 0;
	if (o->c[p].valid) {
		if (o->x.active && o->x.src == p)
			o->x.drop_src = 0; /* being evicted: keep it */
		return 0;
	}
	if (o->x.active) {
		int rc = vmm_swap_retire(v, idx, 0);
		if (rc == -EAGAIN) {
			if (o->x.dst == h && p != h)
				o->pending_dev = p; /* continue when the disk read lands */
			return 0;
		}
		if (rc < 0)
			return rc;
	}
	if (!o->c[h].valid && o->disk_valid) {
		int any = 0;
		for (int d = 0; d < v->ndev; d++)
			any |= o->c[d].valid;
		if (!any) { /* disk -> host without waiting, then on to the device */
			o->busy = 1;
			int rc = bring_host(v, idx, started, 1);
			o->busy = 0;
			if (rc == 0 && p != h)
				o->pending_dev = p;
			return rc;
		}
	}
	return vmm_swap_bring(v, idx, p, started);
}

int vmm_swap_prefetch(struct vmm *v, uint32_t idx, int p, int *started)
{
	struct vmm_obj *o = vmm_obj_at(v, idx);
	int h = P_HOST(v);
	/* the place that needs room: the host first when the object is on disk only
	 * (with a copy on another device it comes from there, over P2P) */
	int room = p, on_dev = 0;
	for (int d = 0; d < v->ndev; d++)
		on_dev |= o->c[d].valid;
	if (!o->c[h].valid && o->disk_valid && !on_dev && !o->x.active)
		room = h;
	if (vmm_copy_next_use(v, o, room) != VMM_NO_HINT && v->cfg.policy != VMM_POLICY_LRU) {
		v->pf_place = room;
		v->pf_next = vmm_copy_next_use(v, o, room);
	}
	int rc = prefetch(v, idx, p, started);
	v->pf_place = -1;
	v->pf_next = VMM_NO_HINT;
	if (rc == -EAGAIN) {
		sp_counter_add(&v->st.prefetch_skips, 1);
		rc = 0;
		*started = 0;
	}
	return rc;
}

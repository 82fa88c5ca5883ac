/* vmm/vmm.c — open/close, objects and the public API (acquire, release, ...).
 *
 * Each public function takes vmm->lock once and calls the swap engine
 * (swap.c). Objects live in an arena sized at open (config max_objects); an id
 * is (generation << 32) | (index + 1), so a destroyed or made-up id is caught
 * (-EINVAL) instead of touching freed state. The residency state of an object
 * is its copies' valid/filling flags plus the one transfer in flight; see
 * docs/vmm.md for the table of states and transitions.
 */
#include "vmm/internal.h"

#include "common/log.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct vmm_obj *lookup(struct vmm *v, uint64_t id, uint32_t *idx)
{
	uint32_t i = (uint32_t)(id & 0xffffffffu);
	if (i == 0 || i > v->nobj_hw)
		return NULL;
	struct vmm_obj *o = vmm_obj_at(v, i - 1);
	if (!o->live || o->gen != (uint32_t)(id >> 32))
		return NULL;
	*idx = i - 1;
	return o;
}

static int bad_id(uint64_t id)
{
	return sp_error(-EINVAL, "vmm: object id %#" PRIx64 " is unknown or destroyed", id);
}

static int bad_place(int place)
{
	return sp_error(-EINVAL, "vmm: place %d is not a device of this vmm nor VMM_HOST", place);
}

/* The place other than p where obj is acquired for writing, or -1. */
static int writer_elsewhere(struct vmm *v, const struct vmm_obj *o, int p)
{
	for (int q = 0; q <= P_HOST(v); q++)
		if (q != p && o->c[q].writing)
			return q;
	return -1;
}

/* An object whose data went with a failed write-down (vmm_swap_retire) or a
 * failed device (vmm_device_failed). */
static int lost_error(const struct vmm_obj *o)
{
	if (o->lost_dev >= 0)
		return sp_error(-EIO,
		                "vmm: object '%s' lost its data: its only copy was on device %d, "
		                "which failed; only VMM_OVERWRITE can use it again",
		                o->name, o->lost_dev);
	return sp_error(-EIO,
	                "vmm: object '%s' lost its data when its write-down failed; only "
	                "VMM_OVERWRITE can use it again",
	                o->name);
}

static int busy_writing(struct vmm *v, const struct vmm_obj *o, int q, const char *what)
{
	return sp_error(-EBUSY, "vmm: object '%s' is acquired for writing on place %d; %s", o->name,
	                vmm_place_public(v, q), what);
}

/* vmm_close's trace: path with %p replaced by the pid. Failures are warnings. */
static void write_trace_file(struct vmm *v, const char *path)
{
	char buf[4096];
	const char *pct = strstr(path, "%p");
	if (pct)
		snprintf(buf, sizeof(buf), "%.*s%d%s", (int)(pct - path), path, (int)getpid(),
		         pct + 2);
	else
		snprintf(buf, sizeof(buf), "%s", path);
	FILE *f = fopen(buf, "w");
	if (!f) {
		SP_WARN(VMM, "cannot write the trace to %s: %s", buf, strerror(errno));
		return;
	}
	int rc = vmm_trace_write(v, f);
	if (fclose(f) != 0 || rc < 0)
		SP_WARN(VMM, "writing the trace to %s failed", buf);
	else
		SP_INFO(VMM, "trace written to %s", buf);
}

void vmm_close(struct vmm *v)
{
	if (!v)
		return;
	pthread_mutex_lock(&v->lock);
	if (vmm_swap_progress(v, 1) < 0)
		SP_WARN(VMM, "close: %s", sp_last_error());
	if (v->cfg.stats_at_close || (v->cfg.trace_file && v->cfg.trace_file[0])) {
		pthread_mutex_unlock(&v->lock);
		if (v->cfg.stats_at_close)
			vmm_stats_print(v, stderr, 0);
		if (v->cfg.trace_file && v->cfg.trace_file[0])
			write_trace_file(v, v->cfg.trace_file);
		pthread_mutex_lock(&v->lock);
	}
	for (uint32_t i = 0; v->objs && i < v->nobj_hw; i++) {
		struct vmm_obj *o = vmm_obj_at(v, i);
		if (!o->live)
			continue;
		vmm_swap_free_copies(v, i);
		for (int p = 0; p <= P_HOST(v); p++) {
			vmm_event_put(v, o->c[p].ev);
			vmm_event_put(v, o->c[p].fence);
		}
		vmm_swap_free_disk(v, i);
		vmm_event_put(v, o->xev);
		if (o->va && dev_va_release(v->ctx, o->va, o->dev_bytes) < 0)
			SP_WARN(VMM, "va release: %s", sp_last_error());
	}
	for (int p = 0; p < v->ndev; p++)
		vmm_event_put(v, v->pl[p].free_ev);
	for (int k = 0; k < 2; k++)
		for (int i = 0; i < DEV_MAX; i++)
			vmm_event_put(v, v->link_ev[k][i]);
	for (uint32_t i = 0; i < v->nev_free; i++)
		if (dev_event_destroy(v->ev_free[i]) < 0)
			SP_WARN(VMM, "event destroy: %s", sp_last_error());
	for (uint32_t i = 0; i < v->npend; i++)
		if (dev_event_destroy(v->ev_pend[(v->pend_head + i) % v->ev_cap]) < 0)
			SP_WARN(VMM, "event destroy: %s", sp_last_error());
	for (int p = 0; p <= v->ndev; p++) {
		struct vmm_place *pl = &v->pl[p];
		struct dev_stream *ss[4] = {pl->in, pl->out, pl->fence, pl->reuse};
		for (int k = 0; k < 4; k++)
			if (ss[k] && dev_stream_destroy(ss[k]) < 0)
				SP_WARN(VMM, "stream destroy: %s", sp_last_error());
		for (int k = 0; k < DEV_MAX; k++)
			if (pl->in_peer[k] && dev_stream_destroy(pl->in_peer[k]) < 0)
				SP_WARN(VMM, "stream destroy: %s", sp_last_error());
		if (pl->base) {
			int rc = p < P_HOST(v) ? dev_mem_free(v->ctx, p, pl->base)
			         : v->cfg.host_fallback
			             ? dev_va_release(v->ctx, pl->base, pl->pool.size)
			             : dev_host_free(v->ctx, pl->base);
			if (rc < 0)
				SP_WARN(VMM, "pool free: %s", sp_last_error());
		}
		sp_pool_fini(&pl->pool);
	}
	if (v->disk)
		vmm_disk_close(v->disk);
	pthread_mutex_unlock(&v->lock);
	pthread_mutex_destroy(&v->lock);
	free(v->objs);
	free(v->free_idx);
	free(v->ev_free);
	free(v->ev_pend);
	free(v->link);
	free(v->trace);
	free(v->cand);
	free(v->owners);
	free(v->host_grain_on);
	free(v->host_grain_off);
	free(v);
}

static uint64_t round_up(uint64_t x, uint64_t unit)
{
	return (x + unit - 1) / unit * unit;
}

/* The host pool's grains (cfg.host_grow), over its reservation of pool bytes
 * rounded up to the commit unit: from each end of the pool (long-lived
 * objects fill it from the top, the rest from the bottom) the first grain is
 * grow / 16 and each next one twice the one before, up to grow; the two
 * sequences meet in the middle. So a small run pins 2 x 16 MiB with the
 * default 256M instead of 2 x 256 MiB, and a large one pins 256 MiB at a
 * time after 4 smaller grains at each end. Boundaries are multiples of the
 * commit unit and of the pool's alignment (a fence cuts the pool there).
 * grow 0: one grain, the whole pool. */
static int host_grains(struct vmm *v, uint64_t pool, uint64_t cg, uint64_t align, uint64_t grow)
{
	uint64_t unit = cg > align ? cg : align; /* both powers of two */
	uint64_t r = round_up(pool, cg), mid = r / 2 / unit * unit;
	uint64_t g = grow ? round_up(grow, unit) : r, first = round_up(g / 16, unit);
	int ends = grow && mid && first < mid; /* else one grain, or two halves */
	char a[32], b[32];
	v->host_reserved = r;
	/* boundaries: 0, the bottom's below mid, mid, the top's above it, r */
	uint64_t n = 2 + (grow && mid);
	for (int pass = 0; pass < 2; pass++) {
		uint64_t *off = v->host_grain_off, k = 0, at, sz;
		if (pass)
			off[k++] = 0;
		for (at = first, sz = first; ends && at < mid; at += sz) { /* from the bottom */
			if (pass)
				off[k] = at;
			k++;
			sz = 2 * sz < g ? 2 * sz : g;
			if (mid - at <= sz)
				break;
		}
		uint64_t top = k + (grow && mid);
		if (pass && grow && mid)
			off[k] = mid;
		k += grow && mid;
		for (at = r - first, sz = first; ends && at > mid; at -= sz) { /* from the top */
			if (pass)
				off[k] = at;
			k++;
			sz = 2 * sz < g ? 2 * sz : g;
			if (at - mid <= sz)
				break;
		}
		if (!pass) {
			n = k + 2; /* boundaries */
			if (n - 1 > (1u << 24))
				return sp_error(-EINVAL,
				                "vmm: SPILL_HOST_GROW %s makes %" PRIu64
				                " grains of the host pool of %s: at most 16777216",
				                sp_format_size(g, a, sizeof(a)), n - 1,
				                sp_format_size(pool, b, sizeof(b)));
			v->host_grain_off = malloc(n * sizeof(*v->host_grain_off));
			v->host_grain_on = calloc(n - 1, 1);
			if (!v->host_grain_off || !v->host_grain_on)
				return sp_error(-ENOMEM,
				                "vmm: metadata for %" PRIu64 " host grains", n - 1);
			continue;
		}
		for (uint64_t i = top, j = k - 1; i < j && j > 0; i++, j--) { /* top down */
			uint64_t t = off[i];
			off[i] = off[j];
			off[j] = t;
		}
		off[k++] = r;
		v->host_ngrains = (uint32_t)(k - 1);
	}
	return 0;
}

/* Copies at once over the shared host link in one direction (cfg.link_copies):
 * as many as its bandwidth takes at one device's link speed, 0 (no order)
 * when that is every device. */
static int link_slots(const struct dev_ctx *ctx, int want, int ndev, int h2d)
{
	if (want < 0 || ndev < 2)
		return 0;
	int k = want;
	if (!k) {
		double host = dev_host_link_bw(ctx);
		double one = h2d ? dev_link_bw(ctx, DEV_HOST, 0) : dev_link_bw(ctx, 0, DEV_HOST);
		if (host <= 0 || one <= 0)
			return 0;
		k = (int)(host / one + 0.5);
		k = k < 1 ? 1 : k;
	}
	return k >= ndev ? 0 : k;
}

int vmm_open(struct dev_ctx *ctx, const struct vmm_config *cfg, struct vmm **out)
{
	struct vmm *v = NULL;
	int rc = 0;
	char a[32], b[32];
	SP_CHECK_ARG(ctx && cfg && out, "vmm_open: NULL argument");
	SP_CHECK_ARG(cfg->host_mem > 0, "vmm: the host pool needs bytes (SPILL_HOST_MEM)");
	SP_CHECK_ARG(cfg->max_objects > 0 && cfg->max_objects <= (1u << 24),
	             "vmm: max_objects=%u is not in 1..16777216", cfg->max_objects);
	SP_CHECK_ARG(!cfg->align || !(cfg->align & (cfg->align - 1)),
	             "vmm: alignment %zu is not a power of two", cfg->align);
	int n = dev_count(ctx);
	SP_CHECK_ARG(cfg->ndevices >= 0 && cfg->ndevices <= n,
	             "vmm: %d devices asked, the context has %d", cfg->ndevices, n);
	v = calloc(1, sizeof(*v));
	if (!v)
		return sp_error(-ENOMEM, "vmm: out of memory");
	v->ctx = ctx;
	v->cfg = *cfg;
	if (!v->cfg.align)
		v->cfg.align = 256;
	v->ndev = cfg->ndevices ? cfg->ndevices : n;
	v->xfer_head = -1;
	v->pf_place = -1;
	v->pf_next = VMM_NO_HINT;
	v->link_slots[0] = link_slots(ctx, cfg->link_copies, v->ndev, 1);
	v->link_slots[1] = link_slots(ctx, cfg->link_copies, v->ndev, 0);
	if (v->link_slots[0] || v->link_slots[1])
		SP_INFO(VMM, "the shared host link carries %d H2D and %d D2H copies at once",
		        v->link_slots[0], v->link_slots[1]);
	pthread_mutex_init(&v->lock, NULL);
	for (int p = 0; p <= DEV_MAX; p++) {
		v->pl[p].pool.head = -1;
		v->pl[p].rhead = -1;
	}
	uint32_t maxo = cfg->max_objects;
	uint32_t max_blocks = 2 * maxo + 2;
	for (int d = 0; d < v->ndev; d++) {
		struct dev_info inf;
		struct vmm_place *pl = &v->pl[d];
		SP_CHECK_GOTO(dev_info(ctx, d, &inf), rc, fail);
		size_t g = inf.granularity ? inf.granularity : 4096;
		v->granularity[d] = g;
		uint64_t budget = cfg->device_mem ? cfg->device_mem : inf.capacity / 10 * 9;
		uint64_t avail = inf.capacity > inf.used ? inf.capacity - inf.used : 0;
		if (budget > avail) {
			rc = sp_error(-ENOMEM,
			              "vmm: device %d: a budget of %s does not fit, %s free", d,
			              sp_format_size(budget, a, sizeof(a)),
			              sp_format_size(avail, b, sizeof(b)));
			goto fail;
		}
		pl->stable_cap = (cfg->stable_mem + g - 1) / g * g;
		if (pl->stable_cap > budget) {
			rc = sp_error(
			    -EINVAL,
			    "vmm: stable budget %s exceeds the device budget %s on device %d",
			    sp_format_size(pl->stable_cap, a, sizeof(a)),
			    sp_format_size(budget, b, sizeof(b)), d);
			goto fail;
		}
		uint64_t pool = (budget - pl->stable_cap) & ~(uint64_t)(v->cfg.align - 1);
		SP_CHECK_GOTO(sp_pool_init(&pl->pool, pool, v->cfg.align, max_blocks), rc, fail);
		if (pool)
			SP_CHECK_GOTO(dev_mem_alloc(ctx, d, pool, &pl->base), rc, fail);
		SP_CHECK_GOTO(dev_stream_create(ctx, d, &pl->in), rc, fail);
		SP_CHECK_GOTO(dev_stream_create(ctx, d, &pl->out), rc, fail);
		SP_CHECK_GOTO(dev_stream_create(ctx, d, &pl->fence), rc, fail);
		SP_CHECK_GOTO(dev_stream_create(ctx, d, &pl->reuse), rc, fail);
	}
	{
		struct vmm_place *h = &v->pl[v->ndev];
		uint64_t align = v->cfg.align;
		if (cfg->host_fallback) { /* host chunks: the pool is a reserved range */
			size_t hg = dev_host_granularity(ctx);
			if (!hg) {
				rc = sp_error(-ENOTSUP,
				              "vmm: host fallback needs host chunks, which the %s "
				              "backend does not have",
				              dev_backend_name(dev_backend(ctx)));
				goto fail;
			}
			while (align % hg)
				align *= 2;
		}
		uint64_t hb = cfg->host_mem & ~(uint64_t)(align - 1);
		uint32_t fence_nodes = 0;
		if (!cfg->host_fallback && hb) { /* reserved now, pinned in grains */
			SP_CHECK_GOTO(host_grains(v, hb, dev_host_commit_granularity(ctx), align,
			                          cfg->host_grow),
			              rc, fail);
			fence_nodes = 2 * v->host_ngrains + 2; /* a failed commit fences the rest */
		}
		SP_CHECK_GOTO(sp_pool_init(&h->pool, hb, align, max_blocks + fence_nodes), rc,
		              fail);
		if (cfg->host_fallback && hb)
			SP_CHECK_GOTO(dev_va_reserve(ctx, DEV_HOST, hb, &h->base), rc, fail);
		else
			SP_CHECK_GOTO(dev_host_reserve(ctx, hb, &h->base), rc, fail);
		if (v->host_grain_off) {
			uint64_t pinned = dev_host_committed(ctx, h->base);
			if (pinned < v->host_reserved && !cfg->host_grow &&
			    (rc = dev_host_commit(ctx, h->base, 0, v->host_reserved)) < 0) {
				char c[32], msg[SP_ERROR_MSG_MAX];
				snprintf(msg, sizeof(msg), "%s", sp_last_error());
				rc = sp_error(
				    rc,
				    "vmm: pinning the host pool of %s at open failed "
				    "(SPILL_HOST_MEM %s, SPILL_HOST_GROW 0: all at once; "
				    "%s pinned): %s",
				    sp_format_size(v->host_reserved, a, sizeof(a)),
				    sp_format_size(cfg->host_mem, b, sizeof(b)),
				    sp_format_size(dev_host_committed(ctx, h->base), c, sizeof(c)),
				    msg);
				goto fail;
			}
			/* a backend that cannot grow pinned it whole at the reserve */
			pinned = dev_host_committed(ctx, h->base);
			if (pinned >= v->host_reserved)
				memset(v->host_grain_on, 1, v->host_ngrains);
			sp_count_add(&v->st.host_committed, (int64_t)pinned);
		}
		if (v->ndev == 0) /* host-only vmm: fences still need a stream */
			rc = -EINVAL;
	}
	if (rc < 0) {
		rc = sp_error(-EINVAL, "vmm: the context has no devices");
		goto fail;
	}
	if (cfg->use_disk) {
		struct vmm_disk_config dc = cfg->disk;
		/* the model backend's memory is address space: its drives are simulated */
		dc.sim = dev_backend(ctx) == DEV_BACKEND_MODEL ? ctx : NULL;
		SP_CHECK_GOTO(vmm_disk_open(&dc, &v->disk), rc, fail);
	}
	v->obj_stride =
	    (sizeof(struct vmm_obj) + (size_t)(v->ndev + 1) * sizeof(struct vmm_copy) + 7) &
	    ~(size_t)7;
	v->objs = calloc(maxo, v->obj_stride);
	v->free_idx = malloc(sizeof(*v->free_idx) * maxo);
	v->ev_cap = maxo * (uint32_t)(v->ndev + 3);
	v->ev_free = malloc(sizeof(*v->ev_free) * v->ev_cap);
	v->ev_pend = malloc(sizeof(*v->ev_pend) * v->ev_cap);
	size_t np = (size_t)(v->ndev + 2);
	v->link = calloc(np * np * VMM_KINDS, sizeof(*v->link));
	v->trace = cfg->trace_cap ? calloc(cfg->trace_cap, sizeof(*v->trace)) : NULL;
	v->cand = malloc(sizeof(*v->cand) * maxo);
	v->owners = malloc(sizeof(*v->owners) * maxo);
	if (!v->objs || !v->free_idx || !v->ev_free || !v->ev_pend || !v->link ||
	    (cfg->trace_cap && !v->trace) || !v->cand || !v->owners) {
		rc = sp_error(-ENOMEM, "vmm: metadata for %u objects", maxo);
		goto fail;
	}
	for (uint32_t i = 0; i < maxo; i++)
		v->free_idx[i] = maxo - 1 - i;
	v->nfree = maxo;
	*out = v;
	return 0;
fail:
	vmm_close(v);
	return rc;
}

int vmm_obj_create(struct vmm *v, const struct vmm_obj_desc *desc, uint64_t *out)
{
	char a[32], b[32];
	int rc = 0;
	SP_CHECK_ARG(v && desc && out, "vmm_obj_create: NULL argument");
	SP_CHECK_ARG(desc->bytes > 0, "vmm: object '%s' has zero bytes",
	             desc->name ? desc->name : "?");
	SP_CHECK_ARG((unsigned)desc->kind < VMM_KINDS, "vmm: object kind %d is not a vmm_kind",
	             (int)desc->kind);
	SP_CHECK_ARG(!(desc->flags & ~VMM_OBJ_STABLE), "vmm: unknown object flags %#x",
	             desc->flags);
	pthread_mutex_lock(&v->lock);
	int stable = !!(desc->flags & VMM_OBJ_STABLE);
	/* what the host pool can hold (less any part that could not be pinned) */
	uint64_t host_cap = v->pl[P_HOST(v)].pool.size - v->pl[P_HOST(v)].pool.fenced;
	if (stable && (desc->home < 0 || desc->home >= v->ndev)) {
		rc = sp_error(-EINVAL, "vmm: stable object '%s': home device %d is not in 0..%d",
		              desc->name ? desc->name : "?", desc->home, v->ndev - 1);
		goto out;
	}
	if (desc->bytes > host_cap) {
		rc = sp_error(-ENOMEM, "vmm: object '%s' of %s is larger than the host pool (%s)",
		              desc->name ? desc->name : "?", sp_format_size(desc->bytes, a, 32),
		              sp_format_size(host_cap, b, 32));
		goto out;
	}
	if (!v->nfree) {
		rc = sp_error(-ENOMEM,
		              "vmm: %u objects are live, the most this vmm holds "
		              "(SPILL_VMM_MAX_OBJECTS)",
		              v->cfg.max_objects);
		goto out;
	}
	uint64_t dev_bytes;
	if (stable) {
		size_t g = v->granularity[desc->home];
		dev_bytes = (desc->bytes + g - 1) / g * g;
		if (dev_bytes > v->pl[desc->home].stable_cap) {
			rc = sp_error(
			    -ENOMEM,
			    "vmm: stable object '%s' of %s is larger than the stable budget "
			    "of device %d (%s, SPILL_VMM_STABLE_MEM)",
			    desc->name ? desc->name : "?", sp_format_size(desc->bytes, a, 32),
			    desc->home, sp_format_size(v->pl[desc->home].stable_cap, b, 32));
			goto out;
		}
	} else {
		dev_bytes = vmm_device_footprint(v, desc->bytes);
	}
	void *va = NULL;
	if (stable)
		SP_CHECK_GOTO(dev_va_reserve(v->ctx, desc->home, dev_bytes, &va), rc, out);
	uint32_t idx = v->free_idx[--v->nfree];
	if (idx >= v->nobj_hw)
		v->nobj_hw = idx + 1;
	struct vmm_obj *o = vmm_obj_at(v, idx);
	uint32_t gen = o->gen + 1;
	if (!gen)
		gen = 1;
	/* the slot's events went back to the free list at destroy */
	memset(o, 0, v->obj_stride);
	o->gen = gen;
	o->live = 1;
	o->kind = (uint8_t)desc->kind;
	o->stable = (uint8_t)stable;
	o->home = (int8_t)(stable ? desc->home : -1);
	o->bytes = desc->bytes;
	o->dev_bytes = dev_bytes;
	o->va = va;
	o->next_use = VMM_NO_HINT;
	o->pending_dev = -1;
	o->x.prev = o->x.next = -1;
	for (int p = 0; p <= P_HOST(v); p++) {
		o->c[p].blk = -1;
		o->c[p].rprev = o->c[p].rnext = -1;
		o->c[p].next_use = VMM_NO_HINT;
	}
	uint64_t id = ((uint64_t)gen << 32) | (idx + 1);
	if (desc->name)
		snprintf(o->name, sizeof(o->name), "%s", desc->name);
	else
		snprintf(o->name, sizeof(o->name), "obj%u", idx);
	sp_count_add(&v->st.objects, 1);
	*out = id;
out:
	pthread_mutex_unlock(&v->lock);
	return rc;
}

/* Frees every copy of obj and its disk extent once its transfer in flight has
 * landed (a failed one is only logged: the contents are going). -EBUSY while
 * acquired anywhere, with what was asked in the message. */
static int drop_contents(struct vmm *v, uint32_t idx, const char *what)
{
	struct vmm_obj *o = vmm_obj_at(v, idx);
	for (int p = 0; p <= P_HOST(v); p++)
		if (o->c[p].pins)
			return sp_error(
			    -EBUSY,
			    "vmm: object '%s' is acquired (%u times on %d): it cannot be %s",
			    o->name, o->c[p].pins, vmm_place_public(v, p), what);
	if (o->x.active && vmm_swap_retire(v, idx, 1) < 0) {
		SP_INFO(VMM, "'%s' %s: %s", o->name, what, sp_last_error());
		vmm_err_swallowed(v);
	}
	vmm_swap_free_copies(v, idx);
	vmm_swap_free_disk(v, idx);
	o->pending_dev = -1;
	o->pending_wb = 0;
	return 0;
}

int vmm_obj_destroy(struct vmm *v, uint64_t id)
{
	uint32_t idx;
	int rc = 0;
	SP_CHECK_ARG(v, "vmm_obj_destroy: NULL vmm");
	pthread_mutex_lock(&v->lock);
	struct vmm_obj *o = lookup(v, id, &idx);
	if (!o) {
		rc = bad_id(id);
		goto out;
	}
	SP_CHECK_GOTO(drop_contents(v, idx, "destroyed"), rc, out);
	for (int p = 0; p <= P_HOST(v); p++) {
		vmm_event_put(v, o->c[p].ev);
		vmm_event_put(v, o->c[p].fence);
		o->c[p].ev = o->c[p].fence = NULL;
	}
	vmm_event_put(v, o->xev);
	o->xev = NULL;
	if (o->va && dev_va_release(v->ctx, o->va, o->dev_bytes) < 0)
		SP_WARN(VMM, "va release of '%s': %s", o->name, sp_last_error());
	o->va = NULL;
	o->live = 0;
	v->free_idx[v->nfree++] = idx;
	sp_count_add(&v->st.objects, -1);
out:
	pthread_mutex_unlock(&v->lock);
	return rc;
}

/* At the end of an API call on o returning rc: o's own failed transfer is
 * reported (cleared) only when rc is that failure, raised during this call
 * (after seq0) and the last failure raised; a victim's failure returned
 * instead ("making room for ...") leaves o's own error for vmm_obj_wait. */
static void report_own(struct vmm *v, struct vmm_obj *o, int rc, uint64_t seq0)
{
	if (rc < 0 && o && o->err == rc && o->err_seq > seq0 && o->err_seq == v->err_seq)
		o->err = 0;
}

/* Common prologue: lock, find the object and the place. */
#define VMM_ENTER(v, id, place, idx, o, p)                         \
	do {                                                       \
		if (!(v))                                          \
			return sp_error(-EINVAL, "vmm: NULL vmm"); \
		pthread_mutex_lock(&(v)->lock);                    \
		seq0 = (v)->err_seq;                               \
		(o) = lookup((v), (id), &(idx));                   \
		if (!(o)) {                                        \
			rc = bad_id(id);                           \
			goto out;                                  \
		}                                                  \
		(p) = vmm_place_index((v), (place));               \
		if ((p) < 0 || (p) == P_DISK(v)) {                 \
			rc = bad_place(place);                     \
			goto out;                                  \
		}                                                  \
	} while (0)

int vmm_acquire(struct vmm *v, uint64_t id, int place, enum vmm_access access, void **ptr,
                struct dev_event **ready)
{
	uint32_t idx;
	int p, rc = 0, started = 0;
	uint64_t seq0;
	struct vmm_obj *o = NULL;
	SP_CHECK_ARG(ptr && ready, "vmm_acquire: NULL out-parameter");
	VMM_ENTER(v, id, place, idx, o, p);
	struct vmm_copy *c = &o->c[p];
	if (p < v->ndev && v->pl[p].failed) {
		rc = sp_error(-ENODEV, "vmm: device %d has failed; object '%s' cannot go there", p,
		              o->name);
		goto out;
	}
	/* fast path: resident, nothing in flight */
	if (access == VMM_READ && c->valid && !c->filling && !o->x.active) {
		c->pins++;
		c->last_use = ++v->clock;
		sp_counter_add(&v->st.hits, 1);
		goto done;
	}
	if (access != VMM_READ && access != VMM_WRITE && access != VMM_OVERWRITE) {
		rc = sp_error(-EINVAL, "vmm: access %d is not VMM_READ, VMM_WRITE or VMM_OVERWRITE",
		              (int)access);
		goto out;
	}
	if (o->stable && p < v->ndev && p != o->home) {
		rc = sp_error(-EINVAL, "vmm: stable object '%s' lives on device %d, not %d",
		              o->name, o->home, p);
		goto out;
	}
	if (o->lost && access != VMM_OVERWRITE) {
		rc = lost_error(o);
		goto out;
	}
	if (p < v->ndev && o->dev_bytes > (o->stable ? v->pl[p].stable_cap : v->pl[p].pool.size)) {
		char a[32], b[32];
		sp_counter_add(&v->st.enomem, 1);
		rc = sp_error(
		    -ENOMEM, "vmm: object '%s' needs %s on device %d, whose pool holds %s", o->name,
		    sp_format_size(o->dev_bytes, a, 32), p,
		    sp_format_size(o->stable ? v->pl[p].stable_cap : v->pl[p].pool.size, b, 32));
		goto out;
	}
	if (access == VMM_READ) {
		/* a copy made now would miss the writer's bytes */
		int q = writer_elsewhere(v, o, p);
		if (q >= 0) {
			rc = busy_writing(v, o, q, "it cannot be read elsewhere until released");
			goto out;
		}
	}
	if (access != VMM_READ) {
		for (int q = 0; q <= P_HOST(v); q++)
			if (q != p && o->c[q].pins) {
				rc = sp_error(-EBUSY,
				              "vmm: object '%s' is acquired on place %d; it cannot "
				              "be acquired for writing on place %d",
				              o->name, vmm_place_public(v, q), place);
				goto out;
			}
		o->pending_dev = -1;
		if (o->x.active && o->x.src == p)
			o->x.drop_src = 0; /* being evicted from here: keep it */
		/* a WRITE of a device copy already arriving (a prefetch) keeps its
		 * transfer in flight: the caller waits on the ready event */
		int arriving = access == VMM_WRITE && p < v->ndev && o->x.active && o->x.dst == p;
		if (o->x.active && !arriving && vmm_swap_retire(v, idx, 1) < 0) {
			SP_INFO(VMM, "%s", sp_last_error()); /* overwritten: kept for obj_wait */
			vmm_err_swallowed(v);
		}
		int was = c->valid;
		if (access == VMM_WRITE && !arriving) {
			SP_CHECK_GOTO(vmm_swap_bring(v, idx, p, &started), rc, out);
			if (started && p == P_HOST(v))
				SP_CHECK_GOTO(vmm_swap_retire(v, idx, 1), rc, out);
		} else if (access == VMM_OVERWRITE && !c->has_mem) {
			o->busy = 1;
			rc = vmm_swap_make_space(v, idx, p);
			o->busy = 0;
			if (rc < 0)
				goto out;
		}
		c->valid = 1;
		o->lost = 0; /* overwritten */
		for (int q = 0; q <= P_HOST(v); q++) {
			if (q == p)
				continue;
			if (o->x.active && o->x.src == q) {
				/* still read by the transfer into p: freed when it lands */
				o->c[q].valid = 0;
				o->x.drop_src = 1;
				continue;
			}
			vmm_swap_free_copy(v, idx, q);
		}
		vmm_swap_free_disk(v, idx);
		c->writing = 1;
		sp_counter_add(was ? &v->st.hits : &v->st.misses, 1);
	} else {
		if (c->valid && !c->filling) {
			/* resident; a transfer of another copy does not matter, and an
			 * eviction of this one in flight keeps it */
			if (o->x.active && o->x.src == p)
				o->x.drop_src = 0;
			sp_counter_add(&v->st.hits, 1);
		} else if (c->valid && p != P_HOST(v)) {
			/* arriving: the caller waits on its event */
			sp_counter_add(&v->st.hits, 1);
		} else {
			if (o->x.active) {
				rc = vmm_swap_retire(v, idx, 1);
				if (rc < 0 && vmm_obj_nvalid(v, o) == 0)
					goto out;
				if (rc < 0) /* another copy serves: kept for obj_wait */
					vmm_err_swallowed(v);
				rc = 0;
			}
			int was = c->valid;
			SP_CHECK_GOTO(vmm_swap_bring(v, idx, p, &started), rc, out);
			if (p == P_HOST(v) && o->x.active) /* host copies are used at once */
				SP_CHECK_GOTO(vmm_swap_retire(v, idx, 1), rc, out);
			sp_counter_add(was ? &v->st.hits : &v->st.misses, 1);
		}
	}
	if (c->space_wait && !c->filling && dev_event_peek(c->ev) == 0)
		c->space_wait = 0; /* the space's last reader before us is done */
	c->pins++;
	c->last_use = ++v->clock;
	if (p == P_HOST(v))
		vmm_swap_fallback_map(v, idx);
done:
	sp_count_add(&v->st.pinned, 1);
	sp_counter_add(&v->st.acquires, 1);
	*ptr = c->ptr;
	/* a transfer into the copy, or fresh space still read by its former owner */
	*ready = c->filling || c->space_wait ? c->ev : NULL;
out:
	report_own(v, o, rc, seq0);
	pthread_mutex_unlock(&v->lock);
	return rc;
}

int vmm_release(struct vmm *v, uint64_t id, int place, struct dev_event *done)
{
	uint32_t idx;
	int p, rc = 0;
	uint64_t seq0; /* VMM_ENTER sets it; release retires nothing */
	struct vmm_obj *o = NULL;
	VMM_ENTER(v, id, place, idx, o, p);
	(void)seq0;
	struct vmm_copy *c = &o->c[p];
	if (!c->pins) {
		rc = sp_error(-EINVAL, "vmm: object '%s' is not acquired on place %d", o->name,
		              place);
		goto out;
	}
	if (done) {
		/* a host copy's fence goes on a live device's fence stream: a failed
		 * device's work is dropped and its events fail */
		int fp = p;
		for (int d = 0; fp == P_HOST(v) && d < v->ndev; d++)
			if (!v->pl[d].failed)
				fp = d;
		struct dev_stream *fs = v->pl[fp < v->ndev ? fp : 0].fence;
		if (!c->fence)
			SP_CHECK_GOTO(vmm_event_get(v, &c->fence), rc, out);
		SP_CHECK_GOTO(dev_stream_wait_event(fs, done), rc, out);
		SP_CHECK_GOTO(dev_event_record(c->fence, fs), rc, out);
		c->fenced = 1;
	}
	if (--c->pins == 0)
		c->writing = 0;
	sp_count_add(&v->st.pinned, -1);
out:
	pthread_mutex_unlock(&v->lock);
	return rc;
}

int vmm_prefetch(struct vmm *v, uint64_t id, int place)
{
	uint32_t idx;
	int p, rc = 0, started = 0;
	uint64_t seq0;
	struct vmm_obj *o = NULL;
	VMM_ENTER(v, id, place, idx, o, p);
	if (p < v->ndev && v->pl[p].failed) {
		rc = sp_error(-ENODEV, "vmm: device %d has failed; object '%s' cannot go there", p,
		              o->name);
		goto out;
	}
	if (o->stable && p < v->ndev && p != o->home) {
		rc = sp_error(-EINVAL, "vmm: stable object '%s' lives on device %d, not %d",
		              o->name, o->home, p);
		goto out;
	}
	if (p < v->ndev && o->dev_bytes > (o->stable ? v->pl[p].stable_cap : v->pl[p].pool.size)) {
		rc = sp_error(-ENOMEM, "vmm: object '%s' (%" PRIu64 " bytes) never fits device %d",
		              o->name, o->bytes, p);
		goto out;
	}
	if (o->lost) {
		rc = lost_error(o);
		goto out;
	}
	int q = writer_elsewhere(v, o, p);
	if (q >= 0) {
		rc = busy_writing(v, o, q, "it cannot be prefetched elsewhere until released");
		goto out;
	}
	rc = vmm_swap_prefetch(v, idx, p, &started);
	if (rc == 0 && started)
		sp_counter_add(&v->st.prefetches, 1);
	if (rc == 0 && p == P_HOST(v))
		vmm_swap_fallback_map(v, idx);
out:
	report_own(v, o, rc, seq0);
	pthread_mutex_unlock(&v->lock);
	return rc;
}

int vmm_hint(struct vmm *v, uint64_t id, uint64_t next_use)
{
	uint32_t idx;
	int rc = 0;
	SP_CHECK_ARG(v, "vmm_hint: NULL vmm");
	pthread_mutex_lock(&v->lock);
	struct vmm_obj *o = lookup(v, id, &idx);
	if (o)
		o->next_use = next_use;
	else
		rc = bad_id(id);
	pthread_mutex_unlock(&v->lock);
	return rc;
}

int vmm_hint_at(struct vmm *v, uint64_t id, int place, uint64_t next_use)
{
	uint32_t idx;
	int rc = 0;
	SP_CHECK_ARG(v, "vmm_hint_at: NULL vmm");
	pthread_mutex_lock(&v->lock);
	struct vmm_obj *o = lookup(v, id, &idx);
	int p = vmm_place_index(v, place);
	if (!o)
		rc = bad_id(id);
	else if (p < 0 || p == P_DISK(v))
		rc = bad_place(place);
	else
		o->c[p].next_use = next_use;
	pthread_mutex_unlock(&v->lock);
	return rc;
}

int vmm_evict(struct vmm *v, uint64_t id, int place)
{
	uint32_t idx;
	int p, rc = 0;
	uint64_t seq0;
	struct vmm_obj *o = NULL;
	VMM_ENTER(v, id, place, idx, o, p);
	rc = vmm_swap_evict(v, idx, p);
out:
	report_own(v, o, rc, seq0);
	pthread_mutex_unlock(&v->lock);
	return rc;
}

int vmm_discard(struct vmm *v, uint64_t id)
{
	uint32_t idx;
	SP_CHECK_ARG(v, "vmm_discard: NULL vmm");
	pthread_mutex_lock(&v->lock);
	struct vmm_obj *o = lookup(v, id, &idx);
	int rc = o ? drop_contents(v, idx, "discarded") : bad_id(id);
	if (rc == 0) {
		o->lost = 0;
		o->err = 0;
		sp_counter_add(&v->st.discards, 1);
	}
	pthread_mutex_unlock(&v->lock);
	return rc;
}

int vmm_discard_if_idle(struct vmm *v, uint64_t id)
{
	uint32_t idx = 0;
	SP_CHECK_ARG(v, "vmm_discard_if_idle: NULL vmm");
	pthread_mutex_lock(&v->lock);
	struct vmm_obj *o = lookup(v, id, &idx);
	int rc = o ? 0 : bad_id(id);
	if (o && o->x.active) {
		int r = vmm_swap_retire(v, idx, 0);
		if (r == -EAGAIN)
			rc = -EAGAIN;
		else if (r < 0)
			vmm_err_swallowed(v); /* kept in o->err; the contents go anyway */
	}
	if (rc == 0)
		rc = drop_contents(v, idx, "discarded");
	if (rc == 0) {
		o->lost = 0;
		o->err = 0;
		sp_counter_add(&v->st.discards, 1);
	}
	pthread_mutex_unlock(&v->lock);
	return rc;
}

int vmm_writeback(struct vmm *v, uint64_t id, int to_disk)
{
	uint32_t idx;
	int rc = 0;
	SP_CHECK_ARG(v, "vmm_writeback: NULL vmm");
	pthread_mutex_lock(&v->lock);
	uint64_t seq0 = v->err_seq;
	struct vmm_obj *o = lookup(v, id, &idx);
	int q;
	if (!o)
		rc = bad_id(id);
	else if (to_disk && !v->disk)
		rc = sp_error(-EINVAL, "vmm: write-back of '%s' to disk: there is no disk tier",
		              o->name);
	else if ((q = writer_elsewhere(v, o, -1)) >= 0)
		rc = busy_writing(v, o, q, "it cannot be written back until released");
	else
		rc = vmm_swap_writeback(v, idx, to_disk);
	report_own(v, o, rc, seq0);
	pthread_mutex_unlock(&v->lock);
	return rc;
}

/* Starts what waited for obj's transfer to land: a deferred write-back (kept
 * while another caller writes the object), then a prefetch's next hop (disk
 * -> host -> device). A failed write-back is kept for vmm_obj_wait. */
static void continue_chain(struct vmm *v, uint32_t i)
{
	struct vmm_obj *o = vmm_obj_at(v, i);
	if (!o->live || o->x.active)
		return;
	if (o->pending_wb && writer_elsewhere(v, o, -1) < 0) {
		int to_disk = o->pending_wb - 1;
		o->pending_wb = 0;
		int rc = vmm_swap_writeback(v, i, to_disk);
		if (rc < 0) {
			SP_INFO(VMM, "write-back of '%s': %s", o->name, sp_last_error());
			vmm_err_set(v, o, rc, to_disk ? VMM_XFER_H2DISK : VMM_XFER_D2H);
			vmm_err_swallowed(v);
		}
	}
	if (o->pending_dev < 0 || o->x.active)
		return;
	if (v->pl[o->pending_dev].failed) {
		o->pending_dev = -1;
		return;
	}
	if (writer_elsewhere(v, o, o->pending_dev) >= 0) {
		o->pending_dev = -1;
		return;
	}
	int d = o->pending_dev, started;
	o->pending_dev = -1;
	if (vmm_swap_prefetch(v, i, d, &started) < 0) {
		SP_INFO(VMM, "prefetch of '%s': %s", o->name, sp_last_error());
		vmm_err_swallowed(v);
	}
}

/* The message of o's unreported failure, as returned to the caller. */
static int report_kept(const struct vmm_obj *o)
{
	return sp_error(o->err, "vmm: %s of object '%s' failed: %s (errno %d); %s",
	                vmm_xfer_kind_name((enum vmm_xfer_kind)o->err_kind), o->name,
	                strerror(-o->err), -o->err,
	                o->lost ? "its data is lost" : "its source copy was kept");
}

int vmm_read_disk(struct vmm *v, uint64_t id, void *dst)
{
	uint32_t idx = 0;
	SP_CHECK_ARG(v && dst, "vmm_read_disk: NULL argument");
	pthread_mutex_lock(&v->lock);
	struct vmm_obj *o = lookup(v, id, &idx);
	int rc = o ? 0 : bad_id(id);
	for (int p = 0; rc == 0 && p <= P_HOST(v); p++)
		if (o->c[p].pins)
			rc = sp_error(-EBUSY, "vmm_read_disk: object '%s' is acquired", o->name);
	if (rc == 0 && o->x.active && vmm_swap_retire(v, idx, 1) < 0)
		vmm_err_swallowed(v); /* kept in o->err for its owner */
	if (rc == 0 && (!v->disk || !o->disk_valid))
		rc = sp_error(-ENOENT, "vmm_read_disk: object '%s' has no current disk copy",
		              o->name);
	uint64_t ticket;
	if (rc == 0)
		rc = vmm_disk_read_async(v->disk, o->extent, dst, o->bytes, &ticket);
	if (rc == 0) {
		rc = vmm_disk_wait(v->disk, ticket);
		vmm_disk_ticket_release(v->disk, ticket);
	}
	pthread_mutex_unlock(&v->lock);
	return rc;
}

int vmm_obj_wait(struct vmm *v, uint64_t id)
{
	uint32_t idx;
	int rc = 0;
	SP_CHECK_ARG(v, "vmm_obj_wait: NULL vmm");
	pthread_mutex_lock(&v->lock);
	struct vmm_obj *o = lookup(v, id, &idx);
	if (!o) {
		rc = bad_id(id);
	} else {
		rc = vmm_swap_retire(v, idx, 1);
		if (rc == 0 && o->pending_wb) { /* a write-back deferred behind it */
			continue_chain(v, idx);
			rc = vmm_swap_retire(v, idx, 1);
		}
		if (rc == 0 && o->err) /* failed earlier, retired by someone else */
			rc = report_kept(o);
		o->err = 0;
	}
	pthread_mutex_unlock(&v->lock);
	return rc;
}

int vmm_progress(struct vmm *v)
{
	SP_CHECK_ARG(v, "vmm_progress: NULL vmm");
	pthread_mutex_lock(&v->lock);
	(void)vmm_swap_progress(v, 0);
	for (uint32_t i = 0; i < v->nobj_hw; i++)
		continue_chain(v, i);
	pthread_mutex_unlock(&v->lock);
	return 0;
}

int vmm_device_failed(struct vmm *v, int dev, uint32_t *nlost)
{
	SP_CHECK_ARG(v && dev >= 0 && dev < v->ndev, "vmm_device_failed: bad vmm or device %d",
	             dev);
	pthread_mutex_lock(&v->lock);
	int rc = 0;
	uint32_t lost = 0;
	for (uint32_t i = 0; i < v->nobj_hw && rc == 0; i++) {
		struct vmm_obj *o = vmm_obj_at(v, i);
		if (o->live && o->c[dev].pins)
			rc = sp_error(
			    -EBUSY, "vmm_device_failed: object '%s' is still acquired on device %d",
			    o->name, dev);
	}
	if (rc == 0) {
		v->pl[dev].failed = 1;
		/* every transfer lands or fails (those touching dev fail) */
		(void)vmm_swap_progress(v, 1);
		for (uint32_t i = 0; i < v->nobj_hw; i++) {
			struct vmm_obj *o = vmm_obj_at(v, i);
			if (!o->live)
				continue;
			/* a device copy failed only because dev did: what it means is
			 * told by the lost flag, not by an error to report later */
			if (o->err && o->err_kind != VMM_XFER_H2DISK &&
			    o->err_kind != VMM_XFER_DISK2H)
				o->err = 0;
			if (o->pending_dev == dev) /* a prefetch chain ends here */
				o->pending_dev = -1;
			struct vmm_copy *c = &o->c[dev];
			if (c->has_mem || c->valid) {
				int was_valid = c->valid;
				/* its last reader may still be running (work queued
				 * before the failure finishes): wait, its error is known */
				if (c->fenced && dev_event_sync(c->fence) < 0)
					SP_INFO(VMM, "%s", sp_last_error());
				c->fenced = 0;
				vmm_swap_free_copy(v, i, dev);
				if (was_valid && !o->lost && vmm_obj_nvalid(v, o) == 0) {
					o->lost = 1;
					o->lost_dev = (int8_t)dev;
					o->lost_told = 0;
					o->pending_wb = 0;
				}
			}
			/* lost here, or by a transfer that failed with dev before */
			if (o->lost && o->lost_dev == dev && !o->lost_told) {
				o->lost_told = 1;
				lost++;
			}
		}
		v->pl[dev].reuse_done = v->pl[dev].reuse_seq;
		sp_counter_add(&v->st.lost_objects, lost);
		SP_WARN(VMM, "device %d failed: its copies are gone, %u object%s lost their data",
		        dev, lost, lost == 1 ? "" : "s");
	}
	pthread_mutex_unlock(&v->lock);
	if (nlost)
		*nlost = lost;
	return rc;
}

int vmm_sync(struct vmm *v)
{
	SP_CHECK_ARG(v, "vmm_sync: NULL vmm");
	pthread_mutex_lock(&v->lock);
	(void)vmm_swap_progress(v, 1); /* failures stay in their objects' err */
	/* deferred write-backs start now that everything landed; wait for them */
	int more = 0;
	for (uint32_t i = 0; i < v->nobj_hw; i++)
		if (vmm_obj_at(v, i)->live && vmm_obj_at(v, i)->pending_wb) {
			continue_chain(v, i);
			more = 1;
		}
	if (more)
		(void)vmm_swap_progress(v, 1);
	/* report the oldest unreported failure (once: see vmm.h) */
	struct vmm_obj *first = NULL;
	for (uint32_t i = 0; i < v->nobj_hw; i++) {
		struct vmm_obj *o = vmm_obj_at(v, i);
		if (o->live && o->err && (!first || o->err_seq < first->err_seq))
			first = o;
	}
	int rc = 0;
	if (first) {
		rc = report_kept(first);
		first->err = 0;
	}
	pthread_mutex_unlock(&v->lock);
	return rc;
}

int vmm_obj_info(struct vmm *v, uint64_t id, struct vmm_obj_info *out)
{
	uint32_t idx;
	int rc = 0;
	SP_CHECK_ARG(v && out, "vmm_obj_info: NULL argument");
	pthread_mutex_lock(&v->lock);
	struct vmm_obj *o = lookup(v, id, &idx);
	if (!o) {
		rc = bad_id(id);
		goto out;
	}
	if (o->x.active && vmm_swap_retire(v, idx, 0) < -EAGAIN)
		SP_INFO(VMM, "%s", sp_last_error()); /* kept in o->err for vmm_obj_wait */
	struct vmm_obj_info inf;
	memset(&inf, 0, sizeof(inf));
	inf.bytes = o->bytes;
	inf.kind = (enum vmm_kind)o->kind;
	memcpy(inf.name, o->name, sizeof(inf.name));
	int nvalid = vmm_obj_nvalid(v, o);
	for (int p = 0; p <= P_HOST(v); p++) {
		uint32_t bit = p == P_HOST(v) ? VMM_INFO_HOST : 1u << p;
		if (o->c[p].valid)
			inf.valid_mask |= bit;
		if (o->c[p].valid && (p == P_HOST(v) ? !o->disk_valid : nvalid == 1))
			inf.dirty_mask |= bit;
		if (o->c[p].pins)
			inf.pinned_mask |= bit;
	}
	if (o->disk_valid)
		inf.valid_mask |= VMM_INFO_DISK;
	inf.in_flight = o->x.active ? o->x.kind : -1;
	inf.next_use = o->next_use;
	memcpy(inf.bytes_moved, o->moved, sizeof(inf.bytes_moved));
	memcpy(inf.moves, o->nmoves, sizeof(inf.moves));
	*out = inf;
out:
	pthread_mutex_unlock(&v->lock);
	return rc;
}

uint32_t vmm_obj_where(struct vmm *v, uint64_t id)
{
	uint32_t idx = 0, mask = 0;
	if (!v)
		return 0;
	pthread_mutex_lock(&v->lock);
	struct vmm_obj *o = lookup(v, id, &idx);
	if (o) {
		for (int p = 0; p <= P_HOST(v); p++)
			if (o->c[p].valid)
				mask |= p == P_HOST(v) ? VMM_INFO_HOST : 1u << p;
		if (o->disk_valid)
			mask |= VMM_INFO_DISK;
	}
	pthread_mutex_unlock(&v->lock);
	return mask;
}

void *vmm_obj_stable_addr(struct vmm *v, uint64_t id)
{
	uint32_t idx = 0;
	void *va = NULL;
	if (!v)
		return NULL;
	pthread_mutex_lock(&v->lock);
	struct vmm_obj *o = lookup(v, id, &idx);
	if (o && o->stable)
		va = o->va;
	pthread_mutex_unlock(&v->lock);
	return va;
}

int vmm_place_peak(struct vmm *v, int place, uint64_t *peak)
{
	SP_CHECK_ARG(v && peak, "vmm_place_peak: NULL argument");
	int p = vmm_place_index(v, place);
	if (p < 0 || p == P_DISK(v))
		return p < 0 ? bad_place(place) : sp_error(-EINVAL, "vmm_place_peak: not the disk");
	pthread_mutex_lock(&v->lock);
	struct sp_pool *pool = &v->pl[p].pool;
	*peak = pool->peak + (p == P_HOST(v) ? 0 : v->pl[p].stable_used);
	pool->peak = pool->used;
	pthread_mutex_unlock(&v->lock);
	return 0;
}

uint64_t vmm_device_footprint(const struct vmm *v, uint64_t bytes)
{
	uint64_t a = v->cfg.align, b = (bytes + a - 1) & ~(a - 1);
	b = sp_size_class(b, v->cfg.size_class_bits, 64 * a);
	return (b + a - 1) & ~(a - 1);
}

int vmm_place_usage(struct vmm *v, int place, uint64_t *used, uint64_t *capacity)
{
	SP_CHECK_ARG(v && used && capacity, "vmm_place_usage: NULL argument");
	int p = vmm_place_index(v, place);
	if (p < 0)
		return bad_place(place);
	pthread_mutex_lock(&v->lock);
	if (p == P_DISK(v)) {
		struct vmm_disk_stats_snapshot s = {0};
		if (v->disk)
			vmm_disk_stats(v->disk, &s);
		*used = s.used;
		*capacity = s.capacity;
	} else if (p == P_HOST(v)) {
		*used = v->pl[p].pool.used;
		*capacity = v->pl[p].pool.size - v->pl[p].pool.fenced;
	} else {
		*used = v->pl[p].pool.used + v->pl[p].stable_used;
		*capacity = v->pl[p].pool.size + v->pl[p].stable_cap;
	}
	pthread_mutex_unlock(&v->lock);
	return 0;
}

/* device/device.c — the backend-independent half of the device layer.
 *
 * Every public dev_* call lands here first: arguments are checked, capacities
 * enforced and every allocation, reservation and chunk is registered, so the
 * backends (host.c, model.c, cuda.c) only perform operations on valid input.
 * Invariants: ctx->used[d] is the physical bytes of device d (plain allocations
 * plus chunks) and never exceeds info[d].capacity; a reservation is released and
 * a chunk destroyed only when nothing is mapped through it. One mutex (ctx->lock)
 * guards the registry (a hash table of allocations by address; an array of
 * reservations sorted by start, so a map finds its range by bisection) and the
 * lists. Backends run outside it, except map/unmap and frees, which hold it so a
 * range or allocation cannot change under them.
 */
#include "device/internal.h"

#include <sched.h>
#include <time.h>

#include "common/log.h"

#include <stdlib.h>
#include <string.h>

/* ---- configuration ------------------------------------------------------------ */

const char *dev_backend_name(enum dev_backend_kind kind)
{
	switch (kind) {
	case DEV_BACKEND_CUDA: return "cuda";
	case DEV_BACKEND_HOST: return "host";
	case DEV_BACKEND_MODEL: return "model";
	case DEV_BACKEND_DRIVER: return "driver";
	}
	return "?";
}

const char *dev_copy_kind_name(enum dev_copy_kind kind)
{
	static const char *const names[] = {"H2D", "D2H", "D2D", "P2P"};
	return (unsigned)kind < DEV_COPY_KINDS ? names[kind] : "?";
}

int dev_config_from_params(const struct sp_params *p, struct dev_config *cfg)
{
	SP_CHECK_ARG(p && cfg, "dev_config_from_params: NULL argument");
	struct dev_config c = {0};
	const char *b = p->backend ? p->backend : "";
	if (strcmp(b, "") == 0)
		c.backend = dev_cuda_available() ? DEV_BACKEND_CUDA : DEV_BACKEND_HOST;
	else if (strcmp(b, "cuda") == 0)
		c.backend = DEV_BACKEND_CUDA;
	else if (strcmp(b, "host") == 0)
		c.backend = DEV_BACKEND_HOST;
	else if (strcmp(b, "model") == 0)
		c.backend = DEV_BACKEND_MODEL;
	else
		return sp_error(-EINVAL,
		                "SPILL_BACKEND: unknown backend '%s' (cuda, host or model)", b);
	if (p->devices < 0 || p->devices > DEV_MAX)
		return sp_error(-EINVAL, "SPILL_DEVICES: %ld devices is out of range (0..%d)",
		                p->devices, DEV_MAX);
	if (p->threads < 0)
		return sp_error(-EINVAL, "SPILL_THREADS: %ld must be >= 0", p->threads);
	c.ndevices = (int)p->devices;
	c.device_mem = p->device_mem;
	c.profile = p->profile;
	c.link_throttle = p->link_throttle;
	c.threads = (int)p->threads;
	c.host_fail = p->host_fail;
	c.host_jitter = p->host_jitter;
	c.host_pin_limit = p->host_pin_limit;
	*cfg = c;
	return 0;
}

void dev_info_from_profile(struct dev_ctx *ctx, uint64_t capacity_override, size_t granularity)
{
	for (int d = 0; d < ctx->ndev; d++) {
		struct dev_info *in = &ctx->info[d];
		memset(in, 0, sizeof(*in));
		snprintf(in->name, sizeof(in->name), "%s", ctx->prof.device_name);
		in->capacity = capacity_override ? capacity_override : ctx->prof.device_mem;
		in->speed = d < ctx->prof.nspeed ? ctx->prof.speed[d] : 1.0;
		in->flops = ctx->prof.flops * in->speed;
		in->bf16_flops = ctx->prof.bf16_flops * in->speed;
		in->mem_bw = ctx->prof.mem_bw * in->speed;
		in->granularity = granularity;
		for (int e = 0; e < ctx->ndev; e++)
			ctx->p2p[d][e] = d != e && ctx->prof.p2p_bw > 0;
	}
}

/* ---- the registry: address -> record ---------------------------------------------- */

#define REG_EMPTY 0
#define REG_TOMB  1

static size_t reg_hash(uintptr_t k, size_t cap)
{
	uint64_t z = (uint64_t)k * 0x9e3779b97f4a7c15ull;
	return (size_t)(z >> 17) & (cap - 1);
}

static int reg_grow(struct dev_ctx *ctx)
{
	size_t cap = ctx->reg_cap ? ctx->reg_cap * 2 : 256;
	while (ctx->reg_live * 2 >= cap)
		cap *= 2;
	struct dev_reg *t = calloc(cap, sizeof(*t));
	if (!t)
		return sp_error(-ENOMEM, "device registry: out of host memory (%zu slots)", cap);
	for (size_t i = 0; i < ctx->reg_cap; i++) {
		struct dev_reg *r = &ctx->reg[i];
		if (r->key <= REG_TOMB)
			continue;
		size_t j = reg_hash(r->key, cap);
		while (t[j].key != REG_EMPTY)
			j = (j + 1) & (cap - 1);
		t[j] = *r;
	}
	free(ctx->reg);
	ctx->reg = t;
	ctx->reg_cap = cap;
	ctx->reg_tomb = 0;
	return 0;
}

/* Under ctx->lock. */
static struct dev_reg *reg_find(struct dev_ctx *ctx, const void *p)
{
	uintptr_t k = (uintptr_t)p;
	if (k <= REG_TOMB || !ctx->reg_cap)
		return NULL;
	for (size_t j = reg_hash(k, ctx->reg_cap);; j = (j + 1) & (ctx->reg_cap - 1)) {
		if (ctx->reg[j].key == k)
			return &ctx->reg[j];
		if (ctx->reg[j].key == REG_EMPTY)
			return NULL;
	}
}

/* Under ctx->lock. */
static int reg_insert(struct dev_ctx *ctx, const struct dev_reg *rec)
{
	if ((ctx->reg_live + ctx->reg_tomb + 1) * 4 >= ctx->reg_cap * 3)
		SP_CHECK(reg_grow(ctx));
	size_t j = reg_hash(rec->key, ctx->reg_cap);
	while (ctx->reg[j].key > REG_TOMB)
		j = (j + 1) & (ctx->reg_cap - 1);
	if (ctx->reg[j].key == REG_TOMB)
		ctx->reg_tomb--;
	ctx->reg[j] = *rec;
	ctx->reg_live++;
	return 0;
}

static void reg_remove(struct dev_ctx *ctx, struct dev_reg *r)
{
	r->key = REG_TOMB;
	ctx->reg_live--;
	ctx->reg_tomb++;
}

/* ---- reservations: sorted by start ------------------------------------------------- */

/* Index of the last reservation starting at or below a (or -1). Under lock. */
static long va_floor(const struct dev_ctx *ctx, uintptr_t a)
{
	long lo = 0, hi = (long)ctx->nvas - 1, best = -1;
	while (lo <= hi) {
		long mid = (lo + hi) / 2;
		if (ctx->vas[mid]->start <= a) {
			best = mid;
			lo = mid + 1;
		} else {
			hi = mid - 1;
		}
	}
	return best;
}

/* The reservation holding [p, p+bytes), or NULL. Under ctx->lock. */
static struct dev_va_rec *va_find(const struct dev_ctx *ctx, const void *p, size_t bytes)
{
	uintptr_t a = (uintptr_t)p;
	long i = va_floor(ctx, a);
	if (i < 0)
		return NULL;
	struct dev_va_rec *r = ctx->vas[i];
	return a - r->start <= r->bytes && bytes <= r->bytes - (a - r->start) ? r : NULL;
}

static int va_insert(struct dev_ctx *ctx, struct dev_va_rec *r)
{
	if (ctx->nvas == ctx->cap_vas) {
		size_t cap = ctx->cap_vas ? 2 * ctx->cap_vas : 64;
		struct dev_va_rec **t = realloc(ctx->vas, cap * sizeof(*t));
		if (!t)
			return sp_error(-ENOMEM, "device registry: out of host memory");
		ctx->vas = t;
		ctx->cap_vas = cap;
	}
	size_t i = (size_t)(va_floor(ctx, r->start) + 1);
	memmove(&ctx->vas[i + 1], &ctx->vas[i], (ctx->nvas - i) * sizeof(*ctx->vas));
	ctx->vas[i] = r;
	ctx->nvas++;
	return 0;
}

static void va_remove(struct dev_ctx *ctx, struct dev_va_rec *r)
{
	size_t i = (size_t)va_floor(ctx, r->start);
	memmove(&ctx->vas[i], &ctx->vas[i + 1], (ctx->nvas - i - 1) * sizeof(*ctx->vas));
	ctx->nvas--;
}

static void va_free(struct dev_va_rec *r)
{
	free(r->mapped);
	free(r->map_start);
	free(r);
}

/* ---- open / close -------------------------------------------------------------- */

static const struct dev_backend_ops *backend_ops(enum dev_backend_kind kind)
{
	switch (kind) {
	case DEV_BACKEND_CUDA: return &dev_cuda_ops;
	case DEV_BACKEND_HOST: return &dev_host_ops;
	case DEV_BACKEND_MODEL: return &dev_model_ops;
	case DEV_BACKEND_DRIVER: return &dev_driver_ops;
	}
	return NULL;
}

int dev_open(const struct dev_config *cfg, struct dev_ctx **out)
{
	SP_CHECK_ARG(cfg && out, "dev_open: NULL argument");
	const struct dev_backend_ops *ops = backend_ops(cfg->backend);
	SP_CHECK_ARG(ops, "dev_open: unknown backend %d", (int)cfg->backend);
	SP_CHECK_ARG(cfg->ndevices >= 0 && cfg->ndevices <= DEV_MAX,
	             "SPILL_DEVICES: %d devices is out of range (0..%d)", cfg->ndevices, DEV_MAX);
	/* a fault asked for and silently not injected would pass a recovery test */
	SP_CHECK_ARG(!cfg->host_fail || !*cfg->host_fail || cfg->backend == DEV_BACKEND_HOST,
	             "SPILL_HOST_FAIL: fault injection needs the host backend (this is %s)",
	             dev_backend_name(cfg->backend));
	SP_CHECK_ARG(!cfg->host_jitter || !*cfg->host_jitter || cfg->backend == DEV_BACKEND_HOST,
	             "SPILL_HOST_JITTER: adversarial timing needs the host backend (this is %s)",
	             dev_backend_name(cfg->backend));
	/* likewise a throttle: a tuner test on real links would test nothing */
	SP_CHECK_ARG(!cfg->link_throttle || cfg->backend == DEV_BACKEND_HOST,
	             "SPILL_LINK_THROTTLE: throttled links need the host backend (this is %s)",
	             dev_backend_name(cfg->backend));
	SP_CHECK_ARG(!cfg->host_pin_limit || cfg->backend == DEV_BACKEND_HOST,
	             "SPILL_HOST_PIN_LIMIT: a pinned-memory limit needs the host backend (this is "
	             "%s)",
	             dev_backend_name(cfg->backend));
	SP_CHECK_ARG(cfg->threads >= 0, "SPILL_THREADS: %d must be >= 0", cfg->threads);
	struct dev_ctx *ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return sp_error(-ENOMEM, "dev_open: out of host memory");
	ctx->kind = cfg->backend;
	ctx->ops = ops;
	ctx->cfg = *cfg;
	ctx->cfg.profile = NULL; /* the caller's strings need not outlive open */
	ctx->cfg.profile_text = NULL;
	ctx->cfg.host_fail = NULL;
	ctx->cfg.host_jitter = NULL;
	pthread_mutex_init(&ctx->lock, NULL);
	int rc = cfg->profile_text
	             ? dev_profile_parse(cfg->profile_text, "(text)", &ctx->prof)
	             : dev_profile_load(cfg->profile && *cfg->profile ? cfg->profile
	                                                              : DEV_DEFAULT_PROFILE,
	                                &ctx->prof);
	if (rc == 0 && cfg->net_bw > 0)
		ctx->prof.net_bw = cfg->net_bw;
	if (rc == 0)
		rc = ops->open(ctx, cfg);
	if (rc < 0) {
		pthread_mutex_destroy(&ctx->lock);
		free(ctx);
		return rc;
	}
	if (!ctx->host_commit_gran)
		ctx->host_commit_gran = 4096;
	SP_INFO(DEV, "opened backend %s: %d device(s) of %s", dev_backend_name(ctx->kind),
	        ctx->ndev, ctx->info[0].name);
	*out = ctx;
	return 0;
}

static void warn_close(int rc, const char *what)
{
	if (rc < 0)
		SP_WARN(DEV, "dev_close: %s: %s", what, sp_last_error());
}

static size_t gran_of(const struct dev_ctx *ctx, int dev)
{
	return dev == DEV_HOST ? ctx->host_gran : ctx->info[dev].granularity;
}

static void region_destroy(struct dev_host_region *g)
{
	if (g)
		free(g->c);
	free(g);
}

/* Frees a growing host region: each commit undone, then the range. Under
 * ctx->lock (or at close). What was freed is no longer counted in host_used. */
static int region_free(struct dev_ctx *ctx, struct dev_reg *r)
{
	struct dev_host_region *g = r->grow;
	void *p = (void *)r->key;
	int rc = 0;
	if (g->pinned_all) {
		rc = ctx->ops->host_free(ctx, p, r->bytes);
		if (rc == 0) {
			ctx->host_used -= g->committed;
			g->committed = 0;
		}
		return rc;
	}
	while (g->n && rc == 0) {
		const struct dev_commit *c = &g->c[g->n - 1];
		rc = ctx->ops->host_uncommit(ctx, (char *)p + c->off, c->bytes);
		if (rc == 0) {
			g->committed -= c->bytes;
			ctx->host_used -= c->bytes;
			g->n--;
		}
	}
	if (rc == 0)
		rc = ctx->ops->host_release(ctx, p, r->bytes);
	return rc;
}

void dev_close(struct dev_ctx *ctx)
{
	if (!ctx)
		return;
	for (struct dev_stream *s = ctx->streams; s; s = s->next)
		warn_close(ctx->ops->stream_sync(s), "stream sync");
	/* Mappings first, then chunks, then reservations and allocations. */
	for (size_t i = 0; i < ctx->nvas; i++) {
		struct dev_va_rec *r = ctx->vas[i];
		size_t g = gran_of(ctx, r->dev);
		for (size_t k = 0; k < r->granules;) { /* whole mappings, one at a time */
			if (!r->mapped[k]) {
				k++;
				continue;
			}
			size_t end = k + 1;
			while (end < r->granules && r->mapped[end] && !r->map_start[end])
				end++;
			warn_close(ctx->ops->va_unmap(ctx, r->dev, (char *)r->start + k * g,
			                              (end - k) * g),
			           "unmap");
			k = end;
		}
	}
	while (ctx->phys_list) {
		struct dev_phys *ph = ctx->phys_list;
		ctx->phys_list = ph->next;
		warn_close(ctx->ops->phys_destroy(ctx, ph), "chunk");
		free(ph);
	}
	for (size_t i = 0; i < ctx->nvas; i++) {
		struct dev_va_rec *r = ctx->vas[i];
		warn_close(ctx->ops->va_release(ctx, (void *)r->start, r->bytes), "reservation");
		va_free(r);
	}
	free(ctx->vas);
	for (size_t i = 0; i < ctx->reg_cap; i++) {
		struct dev_reg *r = &ctx->reg[i];
		if (r->key <= REG_TOMB)
			continue;
		void *p = (void *)r->key;
		if (r->kind == DEV_REG_MEM)
			warn_close(ctx->ops->mem_free(ctx, r->dev, p, r->bytes), "allocation");
		else if (r->kind == DEV_REG_HOST_GROW)
			warn_close(region_free(ctx, r), "growing host region");
		else
			warn_close(ctx->ops->host_free(ctx, p, r->bytes), "host allocation");
		if (r->kind == DEV_REG_HOST_GROW)
			region_destroy(r->grow);
	}
	while (ctx->events) {
		struct dev_event *e = ctx->events;
		ctx->events = e->next;
		warn_close(ctx->ops->event_destroy(e), "event");
		free(e);
	}
	while (ctx->streams) {
		struct dev_stream *s = ctx->streams;
		ctx->streams = s->next;
		warn_close(ctx->ops->stream_destroy(s), "stream");
		free(s);
	}
	ctx->ops->close(ctx);
	free(ctx->reg);
	pthread_mutex_destroy(&ctx->lock);
	free(ctx);
}

enum dev_backend_kind dev_backend(const struct dev_ctx *ctx)
{
	return ctx->kind;
}

int dev_count(const struct dev_ctx *ctx)
{
	return ctx ? ctx->ndev : 0;
}

static int check_dev(const struct dev_ctx *ctx, int dev, const char *fn)
{
	if (!ctx)
		return sp_error(-EINVAL, "%s: NULL context", fn);
	if (dev < 0 || dev >= ctx->ndev)
		return sp_error(-EINVAL, "%s: device %d does not exist (%d device(s), backend %s)",
		                fn, dev, ctx->ndev, dev_backend_name(ctx->kind));
	return 0;
}

int dev_info(const struct dev_ctx *ctx, int dev, struct dev_info *out)
{
	SP_CHECK(check_dev(ctx, dev, "dev_info"));
	SP_CHECK_ARG(out, "dev_info: NULL output");
	struct dev_ctx *c = (struct dev_ctx *)ctx;
	pthread_mutex_lock(&c->lock);
	*out = ctx->info[dev];
	out->used = ctx->used[dev];
	pthread_mutex_unlock(&c->lock);
	return 0;
}

static int valid_place(const struct dev_ctx *ctx, int p)
{
	return p == DEV_HOST || p == DEV_DISK || (p >= 0 && p < ctx->ndev);
}

double dev_link_bw(const struct dev_ctx *ctx, int src, int dst)
{
	if (!ctx || !valid_place(ctx, src) || !valid_place(ctx, dst))
		return 0;
	const struct dev_profile *pr = &ctx->prof;
	if ((src == DEV_DISK && dst == DEV_HOST) || (src == DEV_HOST && dst == DEV_DISK))
		return pr->disk_bw;
	if (src == DEV_HOST && dst >= 0)
		return pr->h2d_bw;
	if (src >= 0 && dst == DEV_HOST)
		return pr->d2h_bw;
	if (src >= 0 && dst >= 0)
		return src == dst ? ctx->info[src].mem_bw / 2 : ctx->p2p[src][dst] ? pr->p2p_bw : 0;
	return 0;
}

int dev_profile_text(const struct dev_ctx *ctx, char *buf, size_t n)
{
	SP_CHECK_ARG(ctx && buf, "dev_profile_text: NULL argument");
	const struct dev_profile *p = &ctx->prof;
	double top = 0;
	for (int d = 0; d < ctx->ndev; d++)
		if (ctx->info[d].flops > top)
			top = ctx->info[d].flops;
	double bw = 0;
	for (int d = 0; d < ctx->ndev; d++)
		if (ctx->info[d].flops == top)
			bw = ctx->info[d].mem_bw;
	int k = snprintf(buf, n,
	                 "name = %s\ndevice = %s\ndevices = %d\nmemory = %llu\n"
	                 "flops = %.17g FLOP/s\nmem_bw = %.17g B/s\nh2d = %.17g B/s\n"
	                 "d2h = %.17g B/s\nhost_link = %.17g B/s\np2p = %.17g B/s\n"
	                 "bf16_flops = %.17g FLOP/s\n"
	                 "disk = %.17g B/s\ndisks = %d\nlaunch_latency = %.17g s\n"
	                 "cpu_flops = %.17g FLOP/s\ncpu_mem_bw = %.17g B/s\nnet = %.17g B/s\n"
	                 "net_latency = %.17g s\nspeed = ",
	                 p->name[0] ? p->name : "measured", ctx->info[0].name, ctx->ndev,
	                 (unsigned long long)ctx->info[0].capacity, top, bw,
	                 dev_link_bw(ctx, DEV_HOST, 0), dev_link_bw(ctx, 0, DEV_HOST),
	                 dev_host_link_bw(ctx), p->p2p_bw,
	                 p->flops > 0 && p->bf16_flops > 0 ? p->bf16_flops * top / p->flops : 0,
	                 p->disk_bw, p->ndisks ? p->ndisks : 1, p->launch_lat, p->cpu_flops,
	                 p->cpu_mem_bw, p->net_bw, p->net_lat);
	for (int d = 0; d < ctx->ndev && k >= 0 && (size_t)k < n; d++)
		k += snprintf(buf + k, n - (size_t)k, "%s%.17g", d ? ", " : "",
		              top > 0 ? ctx->info[d].flops / top : 1.0);
	if (k >= 0 && (size_t)k < n)
		k += snprintf(buf + k, n - (size_t)k, "\n");
	if (k < 0 || (size_t)k >= n)
		return sp_error(-ENOSPC, "dev_profile_text: %zu bytes are too few", n);
	return 0;
}

double dev_host_link_bw(const struct dev_ctx *ctx)
{
	return ctx ? ctx->prof.host_bw : 0;
}

int dev_p2p_possible(const struct dev_ctx *ctx, int a, int b)
{
	if (!ctx || a < 0 || b < 0 || a >= ctx->ndev || b >= ctx->ndev || a == b)
		return 0;
	return ctx->p2p[a][b];
}

/* ---- memory -------------------------------------------------------------------- */

/* Takes bytes from dev's capacity (under lock), or fails with the numbers. */
static int capacity_take(struct dev_ctx *ctx, int dev, size_t bytes, const char *what)
{
	uint64_t cap = ctx->info[dev].capacity, used = ctx->used[dev];
	if (bytes > cap || used > cap - bytes) {
		char a[32], b[32], c[32];
		return sp_error(-ENOMEM, "device %d (%s): cannot %s %s: %s of %s in use", dev,
		                dev_backend_name(ctx->kind), what, sp_format_size(bytes, a, 32),
		                sp_format_size(used, b, 32), sp_format_size(cap, c, 32));
	}
	ctx->used[dev] += bytes;
	return 0;
}

int dev_mem_alloc(struct dev_ctx *ctx, int dev, size_t bytes, void **out)
{
	SP_CHECK(check_dev(ctx, dev, "dev_mem_alloc"));
	SP_CHECK_ARG(out, "dev_mem_alloc: NULL output");
	SP_CHECK_ARG(bytes > 0, "dev_mem_alloc: zero bytes on device %d", dev);
	pthread_mutex_lock(&ctx->lock);
	int rc = capacity_take(ctx, dev, bytes, "allocate");
	pthread_mutex_unlock(&ctx->lock);
	if (rc < 0)
		return rc;
	void *p = NULL;
	rc = ctx->ops->mem_alloc(ctx, dev, bytes, &p);
	pthread_mutex_lock(&ctx->lock);
	if (rc == 0) {
		struct dev_reg r = {
		    .key = (uintptr_t)p, .bytes = bytes, .dev = dev, .kind = DEV_REG_MEM};
		rc = reg_insert(ctx, &r);
		if (rc < 0 && ctx->ops->mem_free(ctx, dev, p, bytes) < 0)
			SP_WARN(DEV, "dev_mem_alloc: could not undo the allocation");
	}
	if (rc < 0)
		ctx->used[dev] -= bytes;
	pthread_mutex_unlock(&ctx->lock);
	if (rc == 0)
		*out = p;
	return rc;
}

int dev_mem_free(struct dev_ctx *ctx, int dev, void *ptr)
{
	SP_CHECK(check_dev(ctx, dev, "dev_mem_free"));
	if (!ptr)
		return 0;
	pthread_mutex_lock(&ctx->lock);
	struct dev_reg *r = reg_find(ctx, ptr);
	int rc = 0;
	if (!r || r->kind != DEV_REG_MEM || r->dev != dev) {
		rc = sp_error(-EINVAL, "dev_mem_free: %p is not an allocation of device %d%s", ptr,
		              dev, r ? "" : " (never allocated, or already freed)");
	} else {
		size_t bytes = r->bytes;
		rc = ctx->ops->mem_free(ctx, dev, ptr, bytes);
		if (rc == 0) {
			reg_remove(ctx, r);
			ctx->used[dev] -= bytes;
		}
	}
	pthread_mutex_unlock(&ctx->lock);
	return rc;
}

int dev_host_alloc(struct dev_ctx *ctx, size_t bytes, void **out)
{
	SP_CHECK_ARG(ctx && out, "dev_host_alloc: NULL argument");
	SP_CHECK_ARG(bytes > 0, "dev_host_alloc: zero bytes");
	void *p = NULL;
	SP_CHECK(ctx->ops->host_alloc(ctx, bytes, &p));
	pthread_mutex_lock(&ctx->lock);
	struct dev_reg r = {
	    .key = (uintptr_t)p, .bytes = bytes, .dev = DEV_HOST, .kind = DEV_REG_HOST};
	int rc = reg_insert(ctx, &r);
	if (rc == 0)
		ctx->host_used += bytes;
	else if (ctx->ops->host_free(ctx, p, bytes) < 0)
		SP_WARN(DEV, "dev_host_alloc: could not undo the allocation");
	pthread_mutex_unlock(&ctx->lock);
	if (rc == 0)
		*out = p;
	return rc;
}

int dev_host_free(struct dev_ctx *ctx, void *ptr)
{
	SP_CHECK_ARG(ctx, "dev_host_free: NULL context");
	if (!ptr)
		return 0;
	pthread_mutex_lock(&ctx->lock);
	struct dev_reg *r = reg_find(ctx, ptr);
	int rc;
	if (r && r->kind == DEV_REG_HOST_GROW) {
		rc = region_free(ctx, r);
		if (rc == 0) {
			region_destroy(r->grow);
			reg_remove(ctx, r);
		}
	} else if (!r || r->kind != DEV_REG_HOST) {
		rc = sp_error(-EINVAL, "dev_host_free: %p is not a pinned host allocation", ptr);
	} else {
		size_t bytes = r->bytes;
		rc = ctx->ops->host_free(ctx, ptr, bytes);
		if (rc == 0) {
			reg_remove(ctx, r);
			ctx->host_used -= bytes;
		}
	}
	pthread_mutex_unlock(&ctx->lock);
	return rc;
}

int dev_host_reserve(struct dev_ctx *ctx, size_t bytes, void **out)
{
	SP_CHECK_ARG(ctx && out, "dev_host_reserve: NULL argument");
	SP_CHECK_ARG(bytes > 0, "dev_host_reserve: zero bytes");
	size_t cg = ctx->host_commit_gran;
	SP_CHECK_ARG(bytes <= SIZE_MAX - cg, "dev_host_reserve: %zu bytes is too large", bytes);
	size_t rb = (bytes + cg - 1) / cg * cg;
	struct dev_host_region *g = calloc(1, sizeof(*g));
	if (!g)
		return sp_error(-ENOMEM, "dev_host_reserve: out of host memory");
	void *p = NULL;
	int rc;
	if (ctx->ops->host_reserve) {
		rc = ctx->ops->host_reserve(ctx, rb, &p, &g->pinned_all);
	} else {
		rc = ctx->ops->host_alloc(ctx, rb, &p);
		g->pinned_all = 1;
	}
	if (rc < 0) {
		region_destroy(g);
		return rc;
	}
	if (g->pinned_all)
		g->committed = rb;
	pthread_mutex_lock(&ctx->lock);
	struct dev_reg r = {.key = (uintptr_t)p,
	                    .bytes = rb,
	                    .dev = DEV_HOST,
	                    .kind = DEV_REG_HOST_GROW,
	                    .grow = g};
	rc = reg_insert(ctx, &r);
	if (rc == 0)
		ctx->host_used += g->committed;
	pthread_mutex_unlock(&ctx->lock);
	if (rc < 0) {
		int urc = g->pinned_all ? ctx->ops->host_free(ctx, p, rb)
		                        : ctx->ops->host_release(ctx, p, rb);
		if (urc < 0)
			SP_WARN(DEV, "dev_host_reserve: could not undo the reservation");
		region_destroy(g);
		return rc;
	}
	*out = p;
	return 0;
}

/* Room for one more commit record. Under ctx->lock. */
static int region_room(struct dev_host_region *g)
{
	if (g->n < g->cap)
		return 0;
	size_t cap = g->cap ? 2 * g->cap : 16;
	struct dev_commit *t = realloc(g->c, cap * sizeof(*t));
	if (!t)
		return sp_error(-ENOMEM, "dev_host_commit: out of host memory for its records");
	g->c = t;
	g->cap = cap;
	return 0;
}

int dev_host_commit(struct dev_ctx *ctx, void *start, size_t off, size_t bytes)
{
	SP_CHECK_ARG(ctx && start, "dev_host_commit: NULL argument");
	SP_CHECK_ARG(bytes > 0, "dev_host_commit: zero bytes");
	size_t cg = ctx->host_commit_gran;
	SP_CHECK_ARG(off % cg == 0 && bytes % cg == 0,
	             "dev_host_commit: [%zu, +%zu) is not made of whole commit units of %zu "
	             "bytes",
	             off, bytes, cg);
	pthread_mutex_lock(&ctx->lock);
	struct dev_reg *r = reg_find(ctx, start);
	int rc = 0;
	if (!r || r->kind != DEV_REG_HOST_GROW) {
		rc = sp_error(-EINVAL, "dev_host_commit: %p is not a growing host region", start);
		goto out;
	}
	if (off > r->bytes || bytes > r->bytes - off) {
		rc = sp_error(-EINVAL,
		              "dev_host_commit: [%zu, +%zu) is beyond the region of %zu bytes", off,
		              bytes, r->bytes);
		goto out;
	}
	struct dev_host_region *g = r->grow;
	if (g->pinned_all)
		goto out;
	/* commit the gaps between the commits already there, in address order */
	size_t i = 0, pos = off, end = off + bytes;
	while (i < g->n && g->c[i].off + g->c[i].bytes <= pos)
		i++;
	while (pos < end) {
		if (i < g->n && g->c[i].off <= pos) {
			pos = g->c[i].off + g->c[i].bytes;
			i++;
			continue;
		}
		size_t gap_end = i < g->n && g->c[i].off < end ? g->c[i].off : end;
		SP_CHECK_GOTO(region_room(g), rc, out);
		SP_CHECK_GOTO(ctx->ops->host_commit(ctx, (char *)start + pos, gap_end - pos), rc,
		              out);
		memmove(&g->c[i + 1], &g->c[i], (g->n - i) * sizeof(*g->c));
		g->c[i] = (struct dev_commit){pos, gap_end - pos};
		g->n++;
		i++;
		g->committed += gap_end - pos;
		ctx->host_used += gap_end - pos;
		pos = gap_end;
	}
out:
	pthread_mutex_unlock(&ctx->lock);
	return rc;
}

uint64_t dev_host_committed(struct dev_ctx *ctx, const void *start)
{
	if (!ctx || !start)
		return 0;
	pthread_mutex_lock(&ctx->lock);
	struct dev_reg *r = reg_find(ctx, start);
	uint64_t n = r && r->kind == DEV_REG_HOST_GROW ? r->grow->committed : 0;
	pthread_mutex_unlock(&ctx->lock);
	return n;
}

size_t dev_host_commit_granularity(const struct dev_ctx *ctx)
{
	return ctx ? ctx->host_commit_gran : 0;
}

size_t dev_host_granularity(const struct dev_ctx *ctx)
{
	return ctx ? ctx->host_gran : 0;
}

/* A device, or DEV_HOST where the backend has host chunks. */
static int check_chunk_place(const struct dev_ctx *ctx, int dev, const char *fn)
{
	if (ctx && dev == DEV_HOST)
		return ctx->host_gran ? 0
		                      : sp_error(-ENOTSUP, "%s: the %s backend has no host chunks",
		                                 fn, dev_backend_name(ctx->kind));
	return check_dev(ctx, dev, fn);
}

static int check_gran(const struct dev_ctx *ctx, int dev, size_t v, const char *fn,
                      const char *what)
{
	size_t g = gran_of(ctx, dev);
	if (v % g) {
		if (dev == DEV_HOST)
			return sp_error(-EINVAL,
			                "%s: %s %zu is not a multiple of the host granularity %zu",
			                fn, what, v, g);
		return sp_error(-EINVAL,
		                "%s: %s %zu is not a multiple of device %d's granularity %zu", fn,
		                what, v, dev, g);
	}
	return 0;
}

int dev_va_reserve(struct dev_ctx *ctx, int dev, size_t bytes, void **out)
{
	SP_CHECK(check_chunk_place(ctx, dev, "dev_va_reserve"));
	SP_CHECK_ARG(out, "dev_va_reserve: NULL output");
	SP_CHECK_ARG(bytes > 0, "dev_va_reserve: zero bytes");
	SP_CHECK(check_gran(ctx, dev, bytes, "dev_va_reserve", "size"));
	struct dev_va_rec *r = calloc(1, sizeof(*r));
	size_t granules = bytes / gran_of(ctx, dev);
	struct dev_phys **mapped = calloc(granules, sizeof(*mapped));
	unsigned char *map_start = calloc(granules, 1);
	if (!r || !mapped || !map_start) {
		free(r);
		free(mapped);
		free(map_start);
		return sp_error(-ENOMEM,
		                "dev_va_reserve: out of host memory for the map of %zu "
		                "granules",
		                granules);
	}
	r->bytes = bytes;
	r->dev = dev;
	r->granules = granules;
	r->mapped = mapped;
	r->map_start = map_start;
	void *p = NULL;
	int rc = ctx->ops->va_reserve(ctx, dev, bytes, &p);
	if (rc == 0) {
		r->start = (uintptr_t)p;
		pthread_mutex_lock(&ctx->lock);
		rc = va_insert(ctx, r);
		pthread_mutex_unlock(&ctx->lock);
		if (rc < 0 && ctx->ops->va_release(ctx, p, bytes) < 0)
			SP_WARN(DEV, "dev_va_reserve: could not undo the reservation");
	}
	if (rc < 0) {
		va_free(r);
		return rc;
	}
	*out = p;
	return 0;
}

int dev_va_release(struct dev_ctx *ctx, void *va, size_t bytes)
{
	SP_CHECK_ARG(ctx && va, "dev_va_release: NULL argument");
	pthread_mutex_lock(&ctx->lock);
	struct dev_va_rec *r = va_find(ctx, va, 0);
	int rc;
	if (!r || r->start != (uintptr_t)va) {
		rc = sp_error(-EINVAL, "dev_va_release: %p is not a reserved range", va);
	} else if (r->bytes != bytes) {
		rc = sp_error(-EINVAL, "dev_va_release: %p was reserved with %zu bytes, not %zu",
		              va, r->bytes, bytes);
	} else if (r->nmapped) {
		rc = sp_error(-EBUSY, "dev_va_release: %p still has %zu granule(s) mapped", va,
		              r->nmapped);
	} else {
		rc = ctx->ops->va_release(ctx, va, bytes);
		if (rc == 0) {
			va_remove(ctx, r);
			va_free(r);
		}
	}
	pthread_mutex_unlock(&ctx->lock);
	return rc;
}

int dev_phys_create(struct dev_ctx *ctx, int dev, size_t bytes, struct dev_phys **out)
{
	SP_CHECK(check_chunk_place(ctx, dev, "dev_phys_create"));
	SP_CHECK_ARG(out, "dev_phys_create: NULL output");
	SP_CHECK_ARG(bytes > 0, "dev_phys_create: zero bytes");
	SP_CHECK(check_gran(ctx, dev, bytes, "dev_phys_create", "size"));
	struct dev_phys *ph = calloc(1, sizeof(*ph));
	if (!ph)
		return sp_error(-ENOMEM, "dev_phys_create: out of host memory");
	ph->ctx = ctx;
	ph->dev = dev;
	ph->bytes = bytes;
	pthread_mutex_lock(&ctx->lock);
	int rc = dev == DEV_HOST ? 0 : capacity_take(ctx, dev, bytes, "create a chunk of");
	if (dev == DEV_HOST)
		ctx->host_used += bytes;
	pthread_mutex_unlock(&ctx->lock);
	if (rc < 0) {
		free(ph);
		return rc;
	}
	rc = ctx->ops->phys_create(ctx, ph);
	pthread_mutex_lock(&ctx->lock);
	if (rc == 0) {
		ph->next = ctx->phys_list;
		if (ph->next)
			ph->next->prev = ph;
		ctx->phys_list = ph;
	} else if (dev == DEV_HOST) {
		ctx->host_used -= bytes;
	} else {
		ctx->used[dev] -= bytes;
	}
	pthread_mutex_unlock(&ctx->lock);
	if (rc < 0) {
		free(ph);
		return rc;
	}
	*out = ph;
	return 0;
}

int dev_phys_destroy(struct dev_ctx *ctx, struct dev_phys *ph)
{
	SP_CHECK_ARG(ctx && ph, "dev_phys_destroy: NULL argument");
	SP_CHECK_ARG(ph->ctx == ctx, "dev_phys_destroy: chunk belongs to another context");
	pthread_mutex_lock(&ctx->lock);
	int rc;
	if (ph->maps) {
		rc = sp_error(-EBUSY,
		              "dev_phys_destroy: chunk of %zu bytes on device %d is still "
		              "mapped (%d granule(s))",
		              ph->bytes, ph->dev, ph->maps);
	} else {
		rc = ctx->ops->phys_destroy(ctx, ph);
		if (rc == 0) {
			if (ph->dev == DEV_HOST)
				ctx->host_used -= ph->bytes;
			else
				ctx->used[ph->dev] -= ph->bytes;
			if (ph->prev)
				ph->prev->next = ph->next;
			else
				ctx->phys_list = ph->next;
			if (ph->next)
				ph->next->prev = ph->prev;
		}
	}
	pthread_mutex_unlock(&ctx->lock);
	if (rc == 0)
		free(ph);
	return rc;
}

int dev_va_map(struct dev_ctx *ctx, void *va, size_t bytes, struct dev_phys *ph, size_t off)
{
	SP_CHECK_ARG(ctx && va && ph, "dev_va_map: NULL argument");
	SP_CHECK_ARG(ph->ctx == ctx, "dev_va_map: chunk belongs to another context");
	SP_CHECK_ARG(bytes > 0, "dev_va_map: zero bytes");
	int dev = ph->dev;
	SP_CHECK(check_gran(ctx, dev, bytes, "dev_va_map", "size"));
	SP_CHECK(check_gran(ctx, dev, off, "dev_va_map", "chunk offset"));
	SP_CHECK_ARG(off <= ph->bytes && bytes <= ph->bytes - off,
	             "dev_va_map: [%zu, +%zu) is beyond the chunk of %zu bytes", off, bytes,
	             ph->bytes);
	pthread_mutex_lock(&ctx->lock);
	int rc = 0;
	struct dev_va_rec *r = va_find(ctx, va, bytes);
	size_t g = r ? gran_of(ctx, r->dev) : 1, first = 0, n = bytes / g;
	if (!r) {
		rc = sp_error(-EINVAL, "dev_va_map: [%p, +%zu) is not inside a reserved range", va,
		              bytes);
	} else if (r->dev != dev && dev != DEV_HOST) { /* host chunks map anywhere */
		rc = sp_error(-EINVAL, "dev_va_map: range %p is on device %d, chunk on device %d",
		              va, r->dev, dev);
	} else if (((uintptr_t)va - r->start) % g || bytes % g) {
		rc = sp_error(-EINVAL, "dev_va_map: [%p, +%zu) is not granularity-aligned (%zu)",
		              va, bytes, g);
	} else {
		first = ((uintptr_t)va - r->start) / g;
		for (size_t k = first; k < first + n; k++)
			if (r->mapped[k]) {
				rc = sp_error(-EBUSY, "dev_va_map: %p + %zu is already mapped", va,
				              (k - first) * g);
				break;
			}
	}
	if (rc == 0)
		rc = ctx->ops->va_map(ctx, r->dev, va, bytes, ph, off);
	if (rc == 0) {
		for (size_t k = first; k < first + n; k++)
			r->mapped[k] = ph;
		r->map_start[first] = 1;
		r->nmapped += n;
		ph->maps += (int)n;
	}
	pthread_mutex_unlock(&ctx->lock);
	return rc;
}

/* Waits for all work on device dev (under ctx->lock: the stream list is stable). */
static int device_sync_locked(struct dev_ctx *ctx, int dev)
{
	if (ctx->ops->device_sync)
		return ctx->ops->device_sync(ctx, dev);
	for (struct dev_stream *s = ctx->streams; s; s = s->next)
		if (s->dev == dev) {
			int rc = ctx->ops->stream_sync(s);
			if (rc < 0)
				return rc;
		}
	return 0;
}

int dev_va_unmap(struct dev_ctx *ctx, void *va, size_t bytes)
{
	SP_CHECK_ARG(ctx && va, "dev_va_unmap: NULL argument");
	SP_CHECK_ARG(bytes > 0, "dev_va_unmap: zero bytes");
	pthread_mutex_lock(&ctx->lock);
	int rc = 0;
	struct dev_va_rec *r = va_find(ctx, va, bytes);
	size_t g = 0, first = 0, n = 0;
	if (!r) {
		rc = sp_error(-EINVAL, "dev_va_unmap: [%p, +%zu) is not inside a reserved range",
		              va, bytes);
	} else {
		g = gran_of(ctx, r->dev);
		if (((uintptr_t)va - r->start) % g || bytes % g) {
			rc = sp_error(-EINVAL,
			              "dev_va_unmap: [%p, +%zu) is not granularity-aligned "
			              "(%zu)",
			              va, bytes, g);
		} else {
			first = ((uintptr_t)va - r->start) / g;
			n = bytes / g;
			for (size_t k = first; k < first + n; k++)
				if (!r->mapped[k]) {
					rc = sp_error(-EINVAL,
					              "dev_va_unmap: %p + %zu is not mapped", va,
					              (k - first) * g);
					break;
				}
			if (rc == 0 && (!r->map_start[first] ||
			                (first + n < r->granules && r->mapped[first + n] &&
			                 !r->map_start[first + n])))
				rc =
				    sp_error(-EINVAL,
				             "dev_va_unmap: [%p, +%zu) is part of a mapping (unmap "
				             "whole mappings, as cuMemUnmap requires)",
				             va, bytes);
		}
	}
	int host_at_dev = 0; /* a host chunk at a device address: a kernel may reach it */
	for (size_t k = first; rc == 0 && r->dev >= 0 && k < first + n; k++)
		host_at_dev |= r->mapped[k]->dev == DEV_HOST;
	if (rc == 0 && host_at_dev)
		rc = device_sync_locked(ctx, r->dev);
	if (rc == 0)
		rc = ctx->ops->va_unmap(ctx, r->dev, va, bytes);
	if (rc == 0) {
		for (size_t k = first; k < first + n; k++) {
			r->mapped[k]->maps--;
			r->mapped[k] = NULL;
			r->map_start[k] = 0;
		}
		r->nmapped -= n;
	}
	pthread_mutex_unlock(&ctx->lock);
	return rc;
}

/* ---- streams and events -------------------------------------------------------------- */

int dev_stream_create(struct dev_ctx *ctx, int dev, struct dev_stream **out)
{
	if (dev != DEV_HOST)
		SP_CHECK(check_dev(ctx, dev, "dev_stream_create"));
	else
		SP_CHECK_ARG(ctx, "dev_stream_create: NULL context");
	SP_CHECK_ARG(out, "dev_stream_create: NULL output");
	struct dev_stream *s = calloc(1, sizeof(*s));
	if (!s)
		return sp_error(-ENOMEM, "dev_stream_create: out of host memory");
	s->ctx = ctx;
	s->dev = dev;
	int rc = ctx->ops->stream_create(s);
	if (rc < 0) {
		free(s);
		return rc;
	}
	pthread_mutex_lock(&ctx->lock);
	s->next = ctx->streams;
	if (s->next)
		s->next->prev = s;
	ctx->streams = s;
	pthread_mutex_unlock(&ctx->lock);
	*out = s;
	return 0;
}

int dev_stream_destroy(struct dev_stream *s)
{
	SP_CHECK_ARG(s, "dev_stream_destroy: NULL stream");
	struct dev_ctx *ctx = s->ctx;
	int rc = ctx->ops->stream_sync(s);
	if (rc < 0 && dev_failed(ctx, s->dev))
		rc = 0; /* its work was dropped: nothing more to say at destroy */
	pthread_mutex_lock(&ctx->lock);
	if (s->prev)
		s->prev->next = s->next;
	else
		ctx->streams = s->next;
	if (s->next)
		s->next->prev = s->prev;
	pthread_mutex_unlock(&ctx->lock);
	int rc2 = ctx->ops->stream_destroy(s);
	free(s);
	return rc < 0 ? rc : rc2;
}

int dev_stream_sync(struct dev_stream *s)
{
	SP_CHECK_ARG(s, "dev_stream_sync: NULL stream");
	return s->ctx->ops->stream_sync(s);
}

int dev_stream_device(const struct dev_stream *s)
{
	return s ? s->dev : -1;
}

void *dev_stream_native(const struct dev_stream *s)
{
	return s ? s->native : NULL;
}

int dev_event_create(struct dev_ctx *ctx, struct dev_event **out)
{
	SP_CHECK_ARG(ctx && out, "dev_event_create: NULL argument");
	struct dev_event *e = calloc(1, sizeof(*e));
	if (!e)
		return sp_error(-ENOMEM, "dev_event_create: out of host memory");
	e->ctx = ctx;
	int rc = ctx->ops->event_create(e);
	if (rc < 0) {
		free(e);
		return rc;
	}
	pthread_mutex_lock(&ctx->lock);
	e->next = ctx->events;
	if (e->next)
		e->next->prev = e;
	ctx->events = e;
	pthread_mutex_unlock(&ctx->lock);
	*out = e;
	return 0;
}

int dev_event_destroy(struct dev_event *e)
{
	SP_CHECK_ARG(e, "dev_event_destroy: NULL event");
	struct dev_ctx *ctx = e->ctx;
	pthread_mutex_lock(&ctx->lock);
	if (e->prev)
		e->prev->next = e->next;
	else
		ctx->events = e->next;
	if (e->next)
		e->next->prev = e->prev;
	pthread_mutex_unlock(&ctx->lock);
	int rc = ctx->ops->event_destroy(e);
	free(e);
	return rc;
}

int dev_event_record(struct dev_event *e, struct dev_stream *s)
{
	SP_CHECK_ARG(e && s, "dev_event_record: NULL argument");
	SP_CHECK_ARG(e->ctx == s->ctx, "dev_event_record: event and stream of different contexts");
	return s->ctx->ops->event_record(e, s);
}

int dev_event_query(struct dev_event *e)
{
	SP_CHECK_ARG(e, "dev_event_query: NULL event");
	return e->ctx->ops->event_query(e);
}

int dev_event_wait_any(struct dev_event *const *ev, int n, int *idx)
{
	SP_CHECK_ARG(ev && n > 0 && idx, "dev_event_wait_any: NULL events or n = %d", n);
	for (int i = 0; i < n; i++)
		SP_CHECK_ARG(ev[i] && ev[i]->ctx == ev[0]->ctx,
		             "dev_event_wait_any: event %d is NULL or of another context", i);
	const struct dev_backend_ops *ops = ev[0]->ctx->ops;
	if (ops->event_wait_any)
		return ops->event_wait_any(ev, n, idx);
	for (unsigned spins = 0;; spins++) { /* cuda: poll, yielding, then napping */
		for (int i = 0; i < n; i++) {
			int rc = ops->event_query(ev[i]);
			if (rc == 0) {
				*idx = i;
				return 0;
			}
			if (rc != -EAGAIN)
				return rc;
		}
		if (spins < 64) {
			sched_yield();
		} else {
			struct timespec ts = {0, 20000};
			nanosleep(&ts, NULL);
		}
	}
}

int dev_event_peek(struct dev_event *e)
{
	SP_CHECK_ARG(e, "dev_event_peek: NULL event");
	const struct dev_backend_ops *ops = e->ctx->ops;
	return ops->event_peek ? ops->event_peek(e) : ops->event_query(e);
}

int dev_fail(struct dev_ctx *ctx, int dev)
{
	SP_CHECK_ARG(ctx && dev >= 0 && dev < ctx->ndev, "dev_fail: bad context or device %d", dev);
	if (!ctx->ops->fail)
		return sp_error(-ENOTSUP, "dev_fail: the %s backend has no fault injection",
		                dev_backend_name(ctx->kind));
	return ctx->ops->fail(ctx, dev);
}

int dev_failed(const struct dev_ctx *ctx, int dev)
{
	if (!ctx || dev < 0 || dev >= ctx->ndev || !ctx->ops->failed)
		return 0;
	return ctx->ops->failed(ctx, dev);
}

int dev_event_sync(struct dev_event *e)
{
	SP_CHECK_ARG(e, "dev_event_sync: NULL event");
	return e->ctx->ops->event_sync(e);
}

int dev_stream_wait_event(struct dev_stream *s, struct dev_event *e)
{
	SP_CHECK_ARG(e && s, "dev_stream_wait_event: NULL argument");
	SP_CHECK_ARG(e->ctx == s->ctx,
	             "dev_stream_wait_event: event and stream of different contexts");
	return s->ctx->ops->stream_wait_event(s, e);
}

int dev_event_time(struct dev_event *e, double *out_s)
{
	SP_CHECK_ARG(e && out_s, "dev_event_time: NULL argument");
	return e->ctx->ops->event_time(e, out_s);
}

double dev_now(const struct dev_ctx *ctx)
{
	return ctx ? ctx->ops->now(ctx) : 0;
}

/* ---- async operations ------------------------------------------------------------ */

int dev_memcpy_async(struct dev_stream *s, void *dst, int dst_dev, const void *src, int src_dev,
                     size_t bytes)
{
	SP_CHECK_ARG(s, "dev_memcpy_async: NULL stream");
	struct dev_ctx *ctx = s->ctx;
	SP_CHECK_ARG(dst && src, "dev_memcpy_async: NULL %s", dst ? "source" : "destination");
	SP_CHECK_ARG((dst_dev == DEV_HOST || (dst_dev >= 0 && dst_dev < ctx->ndev)) &&
	                 (src_dev == DEV_HOST || (src_dev >= 0 && src_dev < ctx->ndev)),
	             "dev_memcpy_async: bad place (dst %d, src %d; %d device(s))", dst_dev, src_dev,
	             ctx->ndev);
	SP_CHECK_ARG(dst_dev >= 0 || src_dev >= 0,
	             "dev_memcpy_async: host to host is not a device copy");
	if (bytes == 0)
		return 0;
	enum dev_copy_kind kind = src_dev == DEV_HOST   ? DEV_COPY_H2D
	                          : dst_dev == DEV_HOST ? DEV_COPY_D2H
	                          : src_dev == dst_dev  ? DEV_COPY_D2D
	                                                : DEV_COPY_P2P;
	/* counted first: a backend may take a dropped copy back (a failed device) */
	__atomic_add_fetch(&ctx->copied[kind], bytes, __ATOMIC_RELAXED);
	int rc = ctx->ops->memcpy_async(s, dst, dst_dev, src, src_dev, bytes, kind);
	if (rc < 0)
		__atomic_sub_fetch(&ctx->copied[kind], bytes, __ATOMIC_RELAXED);
	return rc;
}

int dev_memset_async(struct dev_stream *s, void *dst, int dst_dev, int value, size_t bytes)
{
	SP_CHECK_ARG(s && dst, "dev_memset_async: NULL argument");
	SP_CHECK_ARG(dst_dev == DEV_HOST || (dst_dev >= 0 && dst_dev < s->ctx->ndev),
	             "dev_memset_async: bad place %d", dst_dev);
	if (bytes == 0)
		return 0;
	return s->ctx->ops->memset_async(s, dst, dst_dev, value, bytes);
}

#define DEV_ARGS_MAX 4096

int dev_launch(struct dev_stream *s, const struct dev_kernel *k, const void *args, size_t args_size,
               struct dev_cost cost)
{
	SP_CHECK_ARG(s && k, "dev_launch: NULL argument");
	SP_CHECK_ARG(args || !args_size, "dev_launch %s: NULL args of %zu bytes",
	             k->name ? k->name : "?", args_size);
	SP_CHECK_ARG(args_size <= DEV_ARGS_MAX, "dev_launch %s: args of %zu bytes (max %d)",
	             k->name ? k->name : "?", args_size, DEV_ARGS_MAX);
	SP_CHECK_ARG(cost.flops >= 0 && cost.bytes >= 0, "dev_launch %s: negative cost",
	             k->name ? k->name : "?");
	return s->ctx->ops->launch(s, k, args, args_size, cost);
}

int dev_host_callback(struct dev_stream *s, void (*fn)(void *arg), void *arg)
{
	SP_CHECK_ARG(s && fn, "dev_host_callback: NULL argument");
	return s->ctx->ops->host_callback(s, fn, arg);
}

int dev_disk_count(const struct dev_ctx *ctx)
{
	return ctx && ctx->prof.ndisks > 0 ? ctx->prof.ndisks : 1;
}

int dev_disk_io_async(struct dev_stream *s, int drive, int to_disk, size_t bytes)
{
	SP_CHECK_ARG(s, "dev_disk_io_async: NULL stream");
	struct dev_ctx *ctx = s->ctx;
	if (!ctx->ops->disk_io_async)
		return sp_error(-ENOTSUP,
		                "dev_disk_io_async: the %s backend does real I/O (the vmm's "
		                "io_uring tier), not simulated transfers",
		                dev_backend_name(ctx->kind));
	SP_CHECK_ARG(drive >= 0 && drive < dev_disk_count(ctx), "dev_disk_io_async: drive %d of %d",
	             drive, dev_disk_count(ctx));
	SP_CHECK_ARG(s->dev == DEV_HOST,
	             "dev_disk_io_async: disk transfers go on a host stream (this is device "
	             "%d's)",
	             s->dev);
	return ctx->ops->disk_io_async(s, drive, to_disk, bytes);
}

int dev_net_io_async(struct dev_stream *s, size_t bytes)
{
	SP_CHECK_ARG(s, "dev_net_io_async: NULL stream");
	if (!s->ctx->ops->net_io_async)
		return sp_error(-ENOTSUP,
		                "dev_net_io_async: the %s backend sends real messages between "
		                "nodes, not simulated transfers",
		                dev_backend_name(s->ctx->kind));
	return s->ctx->ops->net_io_async(s, bytes);
}

double dev_net_bw(const struct dev_ctx *ctx)
{
	return ctx ? ctx->prof.net_bw : 0;
}

double dev_net_latency(const struct dev_ctx *ctx)
{
	return ctx ? ctx->prof.net_lat : 0;
}

uint64_t dev_copied_bytes(const struct dev_ctx *ctx, enum dev_copy_kind kind)
{
	if (!ctx || (unsigned)kind >= DEV_COPY_KINDS)
		return 0;
	return __atomic_load_n(&ctx->copied[kind], __ATOMIC_RELAXED);
}

/* device/model.c — the model backend: no data, virtual time.
 *
 * Ops are queued on streams as on a GPU but never touch memory; a deterministic
 * fluid simulation decides when each completes. Each op uses resources: a
 * kernel (or memset, or copy within a device) one device's compute; a copy the
 * links on its path — the device's own H2D/D2H link and the host link all
 * devices share, or the two ends of a peer link. An op runs at the smallest
 * share it gets of any of its resources (capacity / active users), so two
 * concurrent H2D copies over a shared host link each get half of it.
 * The clock only moves when the caller waits (stream or event sync, a query of
 * a pending event), and then exactly to the time the awaited work completes, so
 * every op is issued at the current virtual time. Each record of an event makes a
 * capture that the record op completes; a stream wait holds the capture of the
 * moment it was queued, so re-recording the event never releases it early (as
 * with CUDA). One recursive mutex makes the
 * calls safe from any thread and lets host callbacks queue more work.
 * Memory is address space only (PROT_NONE), so a stray dereference faults.
 */
#include "device/internal.h"

#include "common/log.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define MODEL_GRANULARITY (2u << 20)

/* Resources: per device, then the shared host link in each direction. */
enum { R_COMPUTE, R_H2D, R_D2H, R_P2P_OUT, R_P2P_IN, R_PER_DEV };
#define R_DEV(d, k) ((d)*R_PER_DEV + (k))
#define R_HOST_IN   (DEV_MAX * R_PER_DEV)
#define R_HOST_OUT  (R_HOST_IN + 1)
#define R_CPU       (R_HOST_OUT + 1)  /* the host CPU: kernels of DEV_HOST streams */
#define R_DISK(i)   (R_CPU + 1 + (i)) /* drive i: reads and writes share it */
#define R_NET_OUT   (R_DISK(DEV_MAX)) /* the node's inter-node link, each way */
#define R_NET_IN    (R_NET_OUT + 1)
#define R_COUNT     (R_NET_IN + 1)
#define OP_RES_MAX  4

enum model_op_kind { MOP_WORK, MOP_CALLBACK, MOP_RECORD, MOP_WAIT };

/* One record of an event (see host.c): referenced by its event while latest,
 * by the record op and by each wait queued while it was latest. */
struct model_capture {
	unsigned refs;
	int done;
	double time;
	struct model_capture *next_free;
};

struct model_event {
	struct model_capture *cur; /* NULL = never recorded */
};

struct model_op {
	enum model_op_kind kind;
	struct model_op *next;
	double work; /* remaining: bytes for copies, seconds for compute */
	int res[OP_RES_MAX], nres;
	int active;
	double rate;               /* while active: work per second, from the current shares */
	struct model_capture *cap; /* MOP_RECORD completes it, MOP_WAIT waits for it */
	void (*fn)(void *);
	void *arg;
};

struct model_stream {
	struct dev_stream *s;
	struct model_op *head, *tail;
	struct model_stream *next_all; /* creation order: deterministic scans */
};

struct model_ctx {
	pthread_mutex_t lock; /* recursive */
	double now;
	double cap[R_COUNT];
	int users[R_COUNT];
	struct model_stream *streams, **streams_tail;
	struct model_op *spare;
	struct model_capture *cap_spare;
};

static struct model_ctx *mctx(const struct dev_ctx *ctx)
{
	return ctx->impl;
}

static int model_open(struct dev_ctx *ctx, const struct dev_config *cfg)
{
	int n = cfg->ndevices ? cfg->ndevices : ctx->prof.ndevices;
	if (n > ctx->prof.ndevices)
		return sp_error(-EINVAL, "SPILL_DEVICES: %d devices asked for, profile %s has %d",
		                n, ctx->prof.name, ctx->prof.ndevices);
	struct model_ctx *m = calloc(1, sizeof(*m));
	if (!m)
		return sp_error(-ENOMEM, "model backend: out of memory");
	pthread_mutexattr_t a;
	pthread_mutexattr_init(&a);
	pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&m->lock, &a);
	pthread_mutexattr_destroy(&a);
	m->streams_tail = &m->streams;
	ctx->impl = m;
	ctx->ndev = n;
	uint64_t cap = cfg->device_mem ? cfg->device_mem : ctx->prof.device_mem;
	dev_info_from_profile(ctx, cap, MODEL_GRANULARITY);
	const struct dev_profile *p = &ctx->prof;
	for (int d = 0; d < n; d++) {
		m->cap[R_DEV(d, R_COMPUTE)] = 1; /* seconds of work per second */
		m->cap[R_DEV(d, R_H2D)] = p->h2d_bw;
		m->cap[R_DEV(d, R_D2H)] = p->d2h_bw;
		m->cap[R_DEV(d, R_P2P_OUT)] = p->p2p_bw;
		m->cap[R_DEV(d, R_P2P_IN)] = p->p2p_bw;
	}
	m->cap[R_HOST_IN] = p->host_bw;
	m->cap[R_HOST_OUT] = p->host_bw;
	m->cap[R_CPU] = 1;
	for (int i = 0; i < DEV_MAX; i++)
		m->cap[R_DISK(i)] = p->disk_bw;
	m->cap[R_NET_OUT] = p->net_bw;
	m->cap[R_NET_IN] = p->net_bw;
	return 0;
}

static void model_close(struct dev_ctx *ctx)
{
	struct model_ctx *m = mctx(ctx);
	if (!m)
		return;
	while (m->spare) {
		struct model_op *op = m->spare;
		m->spare = op->next;
		free(op);
	}
	while (m->cap_spare) {
		struct model_capture *c = m->cap_spare;
		m->cap_spare = c->next_free;
		free(c);
	}
	pthread_mutex_destroy(&m->lock);
	free(m);
	ctx->impl = NULL;
}

/* ---- memory: address space only ------------------------------------------------- */

static int reserve(size_t bytes, size_t align, void **out)
{
	void *raw = mmap(NULL, bytes + align, PROT_NONE,
	                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (raw == MAP_FAILED)
		return sp_error(-ENOMEM,
		                "model backend: cannot reserve %zu bytes of address space: %s",
		                bytes, strerror(errno));
	uintptr_t a = ((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1);
	size_t head = a - (uintptr_t)raw, tail = align - head;
	if (head)
		munmap(raw, head);
	if (tail)
		munmap((char *)a + bytes, tail);
	*out = (void *)a;
	return 0;
}

static size_t round_up(size_t b, size_t a)
{
	return (b + a - 1) / a * a;
}

static int release(void *p, size_t bytes, size_t align)
{
	if (munmap(p, round_up(bytes, align)) < 0)
		return sp_error(-errno, "model backend: munmap %p: %s", p, strerror(errno));
	return 0;
}

static int model_mem_alloc(struct dev_ctx *ctx, int dev, size_t bytes, void **out)
{
	return reserve(round_up(bytes, 4096), 4096, out);
}

static int model_mem_free(struct dev_ctx *ctx, int dev, void *ptr, size_t bytes)
{
	return release(ptr, bytes, 4096);
}

static int model_host_free(struct dev_ctx *ctx, void *ptr, size_t bytes)
{
	return release(ptr, bytes, 4096);
}

static int model_host_alloc(struct dev_ctx *ctx, size_t bytes, void **out)
{
	return reserve(round_up(bytes, 4096), 4096, out);
}

/* A growing host region is address space like the rest; a commit pins
 * nothing (no data here) and only counts, in device.c. */
static int model_host_reserve(struct dev_ctx *ctx, size_t bytes, void **out, int *pinned_all)
{
	*pinned_all = 0;
	return reserve(bytes, 4096, out);
}

static int model_host_commit(struct dev_ctx *ctx, void *va, size_t bytes)
{
	return 0;
}

static int model_host_uncommit(struct dev_ctx *ctx, void *va, size_t bytes)
{
	return 0;
}

static int model_host_release(struct dev_ctx *ctx, void *va, size_t bytes)
{
	return release(va, bytes, 4096);
}

static int model_va_reserve(struct dev_ctx *ctx, int dev, size_t bytes, void **out)
{
	return reserve(bytes, MODEL_GRANULARITY, out);
}

static int model_va_release(struct dev_ctx *ctx, void *va, size_t bytes)
{
	return release(va, bytes, MODEL_GRANULARITY);
}

static int model_phys_create(struct dev_ctx *ctx, struct dev_phys *ph)
{
	return 0;
}

static int model_phys_destroy(struct dev_ctx *ctx, struct dev_phys *ph)
{
	return 0;
}

static int model_va_map(struct dev_ctx *ctx, int dev, void *va, size_t bytes, struct dev_phys *ph,
                        size_t off)
{
	return 0;
}

static int model_va_unmap(struct dev_ctx *ctx, int dev, void *va, size_t bytes)
{
	return 0;
}

/* ---- the simulation -------------------------------------------------------------- */

static struct model_stream *ms(const struct dev_stream *s)
{
	return s->impl;
}

static void cap_put(struct model_ctx *m, struct model_capture *c)
{
	if (c && --c->refs == 0) {
		c->next_free = m->cap_spare;
		m->cap_spare = c;
	}
}

static void op_retire(struct model_ctx *m, struct model_stream *st)
{
	struct model_op *op = st->head;
	st->head = op->next;
	if (!st->head)
		st->tail = NULL;
	if (op->active)
		for (int i = 0; i < op->nres; i++)
			m->users[op->res[i]]--;
	cap_put(m, op->cap); /* a record or wait dropped unrun (stream destroyed) too */
	op->next = m->spare;
	m->spare = op;
}

/* Starts what can start at the current time: instant ops at stream heads run
 * (records, satisfied waits, callbacks) and work ops become active. Repeats
 * until nothing changes, since a record can release a wait on another stream.
 * Returns the number of active work ops. */
static int activate(struct model_ctx *m)
{
	int changed, active;
	do {
		changed = 0;
		active = 0;
		for (struct model_stream *st = m->streams; st; st = st->next_all) {
			while (st->head) {
				struct model_op *op = st->head;
				if (op->kind == MOP_WORK) {
					if (!op->active) {
						op->active = 1;
						for (int i = 0; i < op->nres; i++)
							m->users[op->res[i]]++;
					}
					active++;
					break;
				}
				if (op->kind == MOP_WAIT && !op->cap->done)
					break;
				if (op->kind == MOP_RECORD) {
					op->cap->done = 1;
					op->cap->time = m->now;
				}
				if (op->kind == MOP_CALLBACK)
					op->fn(op->arg);
				op_retire(m, st);
				changed = 1;
			}
		}
	} while (changed);
	return active;
}

static double op_rate(const struct model_ctx *m, const struct model_op *op)
{
	double r = -1;
	for (int i = 0; i < op->nres; i++) {
		double share = m->cap[op->res[i]] / m->users[op->res[i]];
		if (r < 0 || share < r)
			r = share;
	}
	return r;
}

/* Advances virtual time to the next completion of a work op and retires it.
 * Returns 0, or -EDEADLK when nothing can run (a wait on work never queued). */
static int step(struct model_ctx *m)
{
	if (!activate(m))
		return sp_error(-EDEADLK, "model backend: no work can run (a stream waits on an "
		                          "event whose work never completes)");
	double dt = -1;
	for (struct model_stream *st = m->streams; st; st = st->next_all) {
		struct model_op *op = st->head;
		if (op && op->active) {
			double r = op->rate = op_rate(m, op);
			double t = r > 0 ? op->work / r : 0;
			if (dt < 0 || t < dt)
				dt = t;
		}
	}
	m->now += dt;
	for (struct model_stream *st = m->streams; st; st = st->next_all) {
		struct model_op *op = st->head;
		if (!op || !op->active)
			continue;
		double done = op->rate * dt;
		if (op->rate <= 0 || done >= op->work * (1 - 1e-12))
			op->work = 0;
		else
			op->work -= done;
	}
	for (struct model_stream *st = m->streams; st; st = st->next_all)
		if (st->head && st->head->active && st->head->work == 0)
			op_retire(m, st);
	activate(m);
	return 0;
}

static int stream_idle(struct model_stream *st)
{
	return !st->head;
}

/* ---- streams and events ----------------------------------------------------------- */

static int model_stream_create(struct dev_stream *s)
{
	struct model_ctx *m = mctx(s->ctx);
	struct model_stream *st = calloc(1, sizeof(*st));
	if (!st)
		return sp_error(-ENOMEM, "model backend: stream: out of memory");
	st->s = s;
	s->impl = st;
	pthread_mutex_lock(&m->lock);
	*m->streams_tail = st;
	m->streams_tail = &st->next_all;
	pthread_mutex_unlock(&m->lock);
	return 0;
}

static int model_stream_sync(struct dev_stream *s)
{
	struct model_ctx *m = mctx(s->ctx);
	int rc = 0;
	pthread_mutex_lock(&m->lock);
	activate(m);
	while (rc == 0 && !stream_idle(ms(s)))
		rc = step(m);
	pthread_mutex_unlock(&m->lock);
	return rc;
}

static int model_stream_destroy(struct dev_stream *s)
{
	struct model_ctx *m = mctx(s->ctx);
	struct model_stream *st = ms(s);
	pthread_mutex_lock(&m->lock);
	struct model_stream **pp = &m->streams;
	while (*pp != st)
		pp = &(*pp)->next_all;
	*pp = st->next_all;
	if (m->streams_tail == &st->next_all)
		m->streams_tail = pp;
	while (st->head)
		op_retire(m, st);
	pthread_mutex_unlock(&m->lock);
	free(st);
	return 0;
}

static int op_new(struct model_ctx *m, enum model_op_kind kind, struct model_op **out)
{
	struct model_op *op = m->spare;
	if (op)
		m->spare = op->next;
	else if (!(op = malloc(sizeof(*op))))
		return sp_error(-ENOMEM, "model backend: op: out of memory");
	memset(op, 0, sizeof(*op));
	op->kind = kind;
	*out = op;
	return 0;
}

static void op_push(struct model_stream *st, struct model_op *op)
{
	if (st->tail)
		st->tail->next = op;
	else
		st->head = op;
	st->tail = op;
}

static int model_event_create(struct dev_event *e)
{
	struct model_event *me = calloc(1, sizeof(*me));
	if (!me)
		return sp_error(-ENOMEM, "model backend: event: out of memory");
	e->impl = me;
	return 0;
}

static int model_event_sync(struct dev_event *e)
{
	struct model_ctx *m = mctx(e->ctx);
	struct model_event *me = e->impl;
	int rc = 0;
	pthread_mutex_lock(&m->lock);
	struct model_capture *c = me->cur;
	if (c) {
		c->refs++; /* a callback run by step() may re-record the event */
		activate(m);
		while (rc == 0 && !c->done)
			rc = step(m);
		cap_put(m, c);
	}
	pthread_mutex_unlock(&m->lock);
	return rc;
}

static int model_event_wait_any(struct dev_event *const *ev, int n, int *idx)
{
	struct model_ctx *m = mctx(ev[0]->ctx);
	int rc = 0;
	pthread_mutex_lock(&m->lock);
	activate(m);
	for (;;) {
		int found = -1;
		for (int i = 0; i < n && found < 0; i++) {
			struct model_event *me = ev[i]->impl;
			if (!me->cur || me->cur->done)
				found = i;
		}
		if (found >= 0) {
			*idx = found;
			break;
		}
		if ((rc = step(m)) < 0)
			break;
	}
	pthread_mutex_unlock(&m->lock);
	return rc;
}

static int model_event_destroy(struct dev_event *e)
{
	/* Records and waits still queued hold their captures. */
	struct model_ctx *m = mctx(e->ctx);
	struct model_event *me = e->impl;
	pthread_mutex_lock(&m->lock);
	cap_put(m, me->cur);
	pthread_mutex_unlock(&m->lock);
	free(me);
	return 0;
}

static int model_event_record(struct dev_event *e, struct dev_stream *s)
{
	struct model_ctx *m = mctx(s->ctx);
	struct model_event *me = e->impl;
	struct model_op *op;
	pthread_mutex_lock(&m->lock);
	int rc = op_new(m, MOP_RECORD, &op);
	struct model_capture *c = NULL;
	if (rc == 0) {
		c = m->cap_spare;
		if (c)
			m->cap_spare = c->next_free;
		else if (!(c = malloc(sizeof(*c)))) {
			op->next = m->spare;
			m->spare = op;
			rc = sp_error(-ENOMEM, "model backend: event record: out of memory");
		}
	}
	if (rc == 0) {
		*c = (struct model_capture){.refs = 2}; /* the event and the record op */
		cap_put(m, me->cur);
		me->cur = c;
		op->cap = c;
		op_push(ms(s), op);
	}
	pthread_mutex_unlock(&m->lock);
	return rc;
}

/* A query of pending work lets virtual time run to the next completion, as a
 * polling loop on a GPU would spend it; so polling always makes progress. */
static int model_event_query(struct dev_event *e)
{
	struct model_ctx *m = mctx(e->ctx);
	struct model_event *me = e->impl;
	pthread_mutex_lock(&m->lock);
	activate(m);
	int rc = 0;
	struct model_capture *c = me->cur;
	if (c && !c->done) {
		c->refs++;
		rc = step(m);
		if (rc == 0)
			rc = c->done ? 0 : -EAGAIN;
		cap_put(m, c);
	}
	pthread_mutex_unlock(&m->lock);
	return rc;
}

static int model_event_peek(struct dev_event *e)
{
	struct model_ctx *m = mctx(e->ctx);
	struct model_event *me = e->impl;
	pthread_mutex_lock(&m->lock);
	activate(m); /* instant ops due now; the clock stays */
	int rc = me->cur && !me->cur->done ? -EAGAIN : 0;
	pthread_mutex_unlock(&m->lock);
	return rc;
}

static int model_stream_wait_event(struct dev_stream *s, struct dev_event *e)
{
	struct model_ctx *m = mctx(s->ctx);
	struct model_event *me = e->impl;
	struct model_op *op;
	int rc = 0;
	pthread_mutex_lock(&m->lock);
	if (me->cur) { /* never recorded: nothing to wait for */
		rc = op_new(m, MOP_WAIT, &op);
		if (rc == 0) {
			op->cap = me->cur; /* the capture of this moment */
			op->cap->refs++;
			op_push(ms(s), op);
		}
	}
	pthread_mutex_unlock(&m->lock);
	return rc;
}

static int model_event_time(struct dev_event *e, double *out_s)
{
	struct model_ctx *m = mctx(e->ctx);
	struct model_event *me = e->impl;
	pthread_mutex_lock(&m->lock);
	activate(m);
	int rc = me->cur && !me->cur->done ? -EAGAIN : 0;
	if (rc == 0)
		*out_s = me->cur ? me->cur->time : 0;
	pthread_mutex_unlock(&m->lock);
	return rc;
}

static double model_now(const struct dev_ctx *ctx)
{
	struct model_ctx *m = mctx(ctx);
	pthread_mutex_lock(&m->lock);
	double t = m->now;
	pthread_mutex_unlock(&m->lock);
	return t;
}

/* ---- async operations --------------------------------------------------------------- */

static int push_work(struct dev_stream *s, double work, const int *res, int nres)
{
	struct model_ctx *m = mctx(s->ctx);
	struct model_op *op;
	if (work <= 0) /* takes no time: nothing to simulate */
		return 0;
	pthread_mutex_lock(&m->lock);
	int rc = op_new(m, MOP_WORK, &op);
	if (rc == 0) {
		op->work = work;
		op->nres = nres;
		memcpy(op->res, res, (size_t)nres * sizeof(*res));
		op_push(ms(s), op);
	}
	pthread_mutex_unlock(&m->lock);
	return rc;
}

static int model_memcpy_async(struct dev_stream *s, void *dst, int dst_dev, const void *src,
                              int src_dev, size_t bytes, enum dev_copy_kind kind)
{
	struct dev_ctx *ctx = s->ctx;
	int r[OP_RES_MAX], n = 0;
	double work = (double)bytes;
	switch (kind) {
	case DEV_COPY_H2D:
		r[n++] = R_DEV(dst_dev, R_H2D);
		r[n++] = R_HOST_IN;
		break;
	case DEV_COPY_D2H:
		r[n++] = R_DEV(src_dev, R_D2H);
		r[n++] = R_HOST_OUT;
		break;
	case DEV_COPY_P2P:
		if (ctx->p2p[src_dev][dst_dev]) {
			r[n++] = R_DEV(src_dev, R_P2P_OUT);
			r[n++] = R_DEV(dst_dev, R_P2P_IN);
		} else { /* staged through host memory: both host links at once */
			r[n++] = R_DEV(src_dev, R_D2H);
			r[n++] = R_HOST_OUT;
			r[n++] = R_DEV(dst_dev, R_H2D);
			r[n++] = R_HOST_IN;
		}
		break;
	default: /* D2D: read and write the device's memory */
		r[n++] = R_DEV(src_dev, R_COMPUTE);
		work = 2.0 * (double)bytes / ctx->info[src_dev].mem_bw;
		break;
	}
	return push_work(s, work, r, n);
}

static int model_disk_io_async(struct dev_stream *s, int drive, int to_disk, size_t bytes)
{
	(void)to_disk; /* a drive's reads and writes share its bandwidth */
	int r = R_DISK(drive);
	if (!(s->ctx->prof.disk_bw > 0))
		return sp_error(-EINVAL, "model backend: profile %s has no disk bandwidth",
		                s->ctx->prof.name);
	return push_work(s, (double)bytes, &r, 1);
}

static int model_net_io_async(struct dev_stream *s, size_t bytes)
{
	int r[2] = {R_NET_OUT, R_NET_IN};
	return push_work(s, (double)bytes, r, 2);
}

static int model_memset_async(struct dev_stream *s, void *dst, int dst_dev, int value, size_t bytes)
{
	if (dst_dev == DEV_HOST) {
		int r = R_CPU;
		return push_work(s, (double)bytes / s->ctx->prof.cpu_mem_bw, &r, 1);
	}
	int r = R_DEV(dst_dev, R_COMPUTE);
	return push_work(s, (double)bytes / s->ctx->info[dst_dev].mem_bw, &r, 1);
}

static int model_launch(struct dev_stream *s, const struct dev_kernel *k, const void *args,
                        size_t args_size, struct dev_cost cost)
{
	if (s->dev == DEV_HOST) { /* a CPU kernel: the host's CPU, no launch latency */
		const struct dev_profile *p = &s->ctx->prof;
		double t = cost.flops / p->cpu_flops, tb = cost.bytes / p->cpu_mem_bw;
		int r = R_CPU;
		return push_work(s, t > tb ? t : tb, &r, 1);
	}
	const struct dev_info *in = &s->ctx->info[s->dev];
	const struct dev_profile *pr = &s->ctx->prof;
	/* bf16 products at the tensor-core rate, scaled as the device's fp32 one */
	double rate = cost.bf16 && pr->bf16_flops > 0 && pr->flops > 0
	                  ? pr->bf16_flops * (in->flops / pr->flops)
	                  : in->flops;
	double t = cost.flops / rate, tb = cost.bytes / in->mem_bw;
	int r = R_DEV(s->dev, R_COMPUTE);
	return push_work(s, s->ctx->prof.launch_lat + (t > tb ? t : tb), &r, 1);
}

static int model_host_callback(struct dev_stream *s, void (*fn)(void *), void *arg)
{
	struct model_ctx *m = mctx(s->ctx);
	struct model_op *op;
	pthread_mutex_lock(&m->lock);
	int rc = op_new(m, MOP_CALLBACK, &op);
	if (rc == 0) {
		op->fn = fn;
		op->arg = arg;
		op_push(ms(s), op);
	}
	pthread_mutex_unlock(&m->lock);
	return rc;
}

const struct dev_backend_ops dev_model_ops = {
    .open = model_open,
    .close = model_close,
    .mem_alloc = model_mem_alloc,
    .mem_free = model_mem_free,
    .host_alloc = model_host_alloc,
    .host_free = model_host_free,
    .host_reserve = model_host_reserve,
    .host_commit = model_host_commit,
    .host_uncommit = model_host_uncommit,
    .host_release = model_host_release,
    .va_reserve = model_va_reserve,
    .va_release = model_va_release,
    .phys_create = model_phys_create,
    .phys_destroy = model_phys_destroy,
    .va_map = model_va_map,
    .va_unmap = model_va_unmap,
    .stream_create = model_stream_create,
    .stream_destroy = model_stream_destroy,
    .stream_sync = model_stream_sync,
    .event_create = model_event_create,
    .event_destroy = model_event_destroy,
    .event_record = model_event_record,
    .event_query = model_event_query,
    .event_peek = model_event_peek,
    .event_sync = model_event_sync,
    .event_wait_any = model_event_wait_any,
    .stream_wait_event = model_stream_wait_event,
    .event_time = model_event_time,
    .now = model_now,
    .memcpy_async = model_memcpy_async,
    .memset_async = model_memset_async,
    .launch = model_launch,
    .host_callback = model_host_callback,
    .disk_io_async = model_disk_io_async,
    .net_io_async = model_net_io_async,
};

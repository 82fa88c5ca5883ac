/* device/driver.c — the driver backend: one GPU through the entry points in a
 * struct dev_driver_api (device/driver.h).
 *
 * Every call runs in api->ctx: pushed when the calling thread has another
 * context current (the program's threads call in with theirs), popped after.
 * Streams are non-blocking CUstreams; a DEV_HOST stream is one too, running
 * CPU kernels and callbacks as host functions in stream order. Event times are
 * elapsed times from a reference event recorded at open.
 */
#include "device/driver.h"
#include "device/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if SPILL_HAVE_CUDA

struct drv_ctx {
	const struct dev_driver_api *api;
	CUevent ref; /* recorded at open, completed at ref_t */
	double ref_t;
	CUmemLocationType host_loc; /* host chunks' location type (ctx->host_gran > 0) */
};

static const struct dev_driver_api *api_of(const struct dev_ctx *ctx)
{
	return ((const struct drv_ctx *)ctx->impl)->api;
}

static int drv_err(const struct dev_driver_api *a, CUresult r, const char *what)
{
	const char *s = NULL;
	if (a->get_error_string)
		a->get_error_string(r, &s);
	int rc = r == CUDA_ERROR_OUT_OF_MEMORY     ? -ENOMEM
	         : r == CUDA_ERROR_INVALID_VALUE   ? -EINVAL
	         : r == CUDA_ERROR_NOT_SUPPORTED   ? -ENOTSUP
	         : r == CUDA_ERROR_NO_DEVICE       ? -ENODEV
	         : r == CUDA_ERROR_NOT_INITIALIZED ? -ENODEV
	                                           : -EIO;
	return sp_error(rc, "cuda driver: %s: %s (%d)", what, s ? s : "unknown error", (int)r);
}

/* The context a call runs in; *pushed tells drv_leave to pop it. */
static CUresult drv_enter(const struct dev_driver_api *a, int *pushed)
{
	CUcontext cur = NULL;
	*pushed = 0;
	if (!a->ctx || (a->ctx_get_current(&cur) == CUDA_SUCCESS && cur == a->ctx))
		return CUDA_SUCCESS;
	CUresult r = a->ctx_push(a->ctx);
	*pushed = r == CUDA_SUCCESS;
	return r;
}

static void drv_leave(const struct dev_driver_api *a, int pushed)
{
	CUcontext c;
	if (pushed)
		a->ctx_pop(&c);
}

/* Runs one driver call in the context; returns 0 or the mapped error. */
#define DRV(a, call, what)                               \
	do {                                             \
		int pushed_;                             \
		CUresult r_ = drv_enter((a), &pushed_);  \
		if (r_ == CUDA_SUCCESS) {                \
			r_ = (call);                     \
			drv_leave((a), pushed_);         \
		}                                        \
		if (r_ != CUDA_SUCCESS)                  \
			return drv_err((a), r_, (what)); \
	} while (0)

static double wall_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const char *const need_names[] = {
    "ctx_get_current", "ctx_push",        "ctx_pop",          "mem_alloc",         "mem_free",
    "host_alloc",      "host_free",       "addr_reserve",     "addr_free",         "mem_create",
    "mem_release",     "mem_map",         "mem_unmap",        "mem_set_access",    "granularity",
    "stream_create",   "stream_destroy",  "stream_sync",      "stream_wait_event", "event_create",
    "event_destroy",   "event_record",    "event_query",      "event_sync",        "event_elapsed",
    "memcpy_async",    "memset_d8_async", "launch_host_func", "device_total_mem"};

static int check_api(const struct dev_driver_api *a)
{
	const void *const fns[] = {
	    (const void *)a->ctx_get_current,   (const void *)a->ctx_push,
	    (const void *)a->ctx_pop,           (const void *)a->mem_alloc,
	    (const void *)a->mem_free,          (const void *)a->host_alloc,
	    (const void *)a->host_free,         (const void *)a->addr_reserve,
	    (const void *)a->addr_free,         (const void *)a->mem_create,
	    (const void *)a->mem_release,       (const void *)a->mem_map,
	    (const void *)a->mem_unmap,         (const void *)a->mem_set_access,
	    (const void *)a->granularity,       (const void *)a->stream_create,
	    (const void *)a->stream_destroy,    (const void *)a->stream_sync,
	    (const void *)a->stream_wait_event, (const void *)a->event_create,
	    (const void *)a->event_destroy,     (const void *)a->event_record,
	    (const void *)a->event_query,       (const void *)a->event_sync,
	    (const void *)a->event_elapsed,     (const void *)a->memcpy_async,
	    (const void *)a->memset_d8_async,   (const void *)a->launch_host_func,
	    (const void *)a->device_total_mem};
	for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]); i++)
		if (!fns[i])
			return sp_error(-ENODEV, "driver backend: the driver lacks %s",
			                need_names[i]);
	return 0;
}

static CUmemAllocationProp chunk_prop(CUdevice dev)
{
	CUmemAllocationProp p;
	memset(&p, 0, sizeof(p));
	p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.location.id = (int)dev;
	return p;
}

/* A host chunk: pinned host memory the device maps (host-located cuMemCreate:
 * HOST_NUMA since CUDA 12.2, HOST on later drivers). */
static CUmemAllocationProp host_chunk_prop(CUmemLocationType loc)
{
	CUmemAllocationProp p;
	memset(&p, 0, sizeof(p));
	p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.location.type = loc;
	p.location.id = 0; /* NUMA node 0 (ignored for HOST) */
	return p;
}

static void host_access(CUmemAccessDesc *acc, CUdevice dev)
{
	memset(acc, 0, 2 * sizeof(*acc));
	acc[0].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	acc[0].location.id = (int)dev;
	acc[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	acc[1].location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA; /* the CPU (id ignored) */
	acc[1].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
}

/* In the context: 1 if a host chunk of loc can be created, mapped at a
 * reserved range and opened to the device and the CPU, as the vmm will. */
static int host_chunks_work(const struct dev_driver_api *a, CUmemLocationType loc, size_t gran)
{
	CUmemAllocationProp p = host_chunk_prop(loc);
	size_t hg = 0;
	if (a->granularity(&hg, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || !hg ||
	    gran % hg)
		return 0;
	CUdeviceptr va = 0;
	CUmemGenericAllocationHandle h = 0;
	CUmemAccessDesc acc[2];
	host_access(acc, a->device);
	int ok = 0, mapped = 0, made = 0;
	if (a->addr_reserve(&va, gran, gran, 0, 0) == CUDA_SUCCESS) {
		made = a->mem_create(&h, gran, &p, 0) == CUDA_SUCCESS;
		mapped = made && a->mem_map(va, gran, 0, h, 0) == CUDA_SUCCESS;
		ok = mapped && a->mem_set_access(va, gran, acc, 2) == CUDA_SUCCESS;
		if (mapped)
			a->mem_unmap(va, gran);
		if (made)
			a->mem_release(h);
		a->addr_free(va, gran);
	}
	return ok;
}

static void drv_close(struct dev_ctx *ctx);

static int drv_open(struct dev_ctx *ctx, const struct dev_config *cfg)
{
	const struct dev_driver_api *a = cfg->driver;
	if (!a)
		return sp_error(-EINVAL, "driver backend: no driver entry points given");
	SP_CHECK(check_api(a));
	if (cfg->ndevices > 1)
		return sp_error(-EINVAL, "driver backend: one device, not %d", cfg->ndevices);
	struct drv_ctx *c = calloc(1, sizeof(*c));
	if (!c)
		return sp_error(-ENOMEM, "driver backend: out of memory");
	c->api = a;
	ctx->impl = c;
	ctx->ndev = 1;
	size_t total = 0, gran = 0;
	CUmemAllocationProp prop = chunk_prop(a->device);
	int rc = 0;
	CUresult r;
	int pushed;
	if ((r = drv_enter(a, &pushed)) != CUDA_SUCCESS)
		return drv_err(a, r, "making the context current");
	if ((r = a->device_total_mem(&total, a->device)) != CUDA_SUCCESS)
		rc = drv_err(a, r, "cuDeviceTotalMem");
	else if ((r = a->granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM)) !=
	         CUDA_SUCCESS)
		rc = drv_err(a, r, "cuMemGetAllocationGranularity");
	else if ((r = a->event_create(&c->ref, CU_EVENT_DEFAULT)) != CUDA_SUCCESS ||
	         (r = a->event_record(c->ref, NULL)) != CUDA_SUCCESS ||
	         (r = a->event_sync(c->ref)) != CUDA_SUCCESS)
		rc = drv_err(a, r, "reference event");
	char name[64] = "GPU";
	if (rc == 0 && a->device_get_name)
		a->device_get_name(name, (int)sizeof(name), a->device);
	drv_leave(a, pushed);
	if (rc < 0) {
		drv_close(ctx);
		return rc;
	}
	c->ref_t = wall_now();
	struct dev_info *in = &ctx->info[0];
	snprintf(in->name, sizeof(in->name), "%s", name);
	in->capacity = cfg->device_mem && cfg->device_mem < total ? cfg->device_mem : total;
	in->capacity -= in->capacity % gran;
	in->flops = ctx->prof.flops;
	in->bf16_flops = ctx->prof.bf16_flops;
	in->mem_bw = ctx->prof.mem_bw;
	in->speed = 1;
	in->granularity = gran;
	/* Host chunks where the driver has them (tried for real), at the device's
	 * granularity so that one maps into the device's ranges; without them
	 * dev_phys_create(DEV_HOST) is -ENOTSUP. */
	static const CUmemLocationType locs[] = {CU_MEM_LOCATION_TYPE_HOST_NUMA,
	                                         CU_MEM_LOCATION_TYPE_HOST};
	if (drv_enter(a, &pushed) == CUDA_SUCCESS) {
		for (size_t i = 0; i < sizeof(locs) / sizeof(locs[0]) && !ctx->host_gran; i++)
			if (host_chunks_work(a, locs[i], gran)) {
				c->host_loc = locs[i];
				ctx->host_gran = gran;
				ctx->host_commit_gran = gran; /* growing host regions too */
			}
		drv_leave(a, pushed);
	}
	return 0;
}

static void drv_close(struct dev_ctx *ctx)
{
	struct drv_ctx *c = ctx->impl;
	if (!c)
		return;
	if (c->ref) {
		int pushed;
		if (drv_enter(c->api, &pushed) == CUDA_SUCCESS) {
			c->api->event_destroy(c->ref);
			drv_leave(c->api, pushed);
		}
	}
	free(c);
	ctx->impl = NULL;
}

/* ---- memory ---------------------------------------------------------------- */

static int drv_mem_alloc(struct dev_ctx *ctx, int dev, size_t bytes, void **out)
{
	const struct dev_driver_api *a = api_of(ctx);
	CUdeviceptr p = 0;
	DRV(a, a->mem_alloc(&p, bytes), "cuMemAlloc");
	*out = (void *)(uintptr_t)p;
	return 0;
}

static int drv_mem_free(struct dev_ctx *ctx, int dev, void *ptr, size_t bytes)
{
	const struct dev_driver_api *a = api_of(ctx);
	DRV(a, a->mem_free((CUdeviceptr)(uintptr_t)ptr), "cuMemFree");
	return 0;
}

static int drv_host_alloc(struct dev_ctx *ctx, size_t bytes, void **out)
{
	const struct dev_driver_api *a = api_of(ctx);
	DRV(a, a->host_alloc(out, bytes, CU_MEMHOSTALLOC_PORTABLE), "cuMemHostAlloc");
	return 0;
}

static int drv_host_free(struct dev_ctx *ctx, void *ptr, size_t bytes)
{
	const struct dev_driver_api *a = api_of(ctx);
	DRV(a, a->host_free(ptr), "cuMemFreeHost");
	return 0;
}

/* Growing host regions (the vmm's host pool when the shim's host fallback is
 * off): a reserved range whose commits are host chunks mapped there and opened
 * to the device and the CPU, as cuda.c does (its comment says why not
 * cuMemHostRegister). Without host chunks, one cuMemHostAlloc pinned whole. */
static int drv_host_reserve(struct dev_ctx *ctx, size_t bytes, void **out, int *pinned_all)
{
	const struct dev_driver_api *a = api_of(ctx);
	*pinned_all = !ctx->host_gran;
	if (!ctx->host_gran)
		return drv_host_alloc(ctx, bytes, out);
	CUdeviceptr p = 0;
	DRV(a, a->addr_reserve(&p, bytes, ctx->host_gran, 0, 0),
	    "cuMemAddressReserve (a growing host region)");
	*out = (void *)(uintptr_t)p;
	return 0;
}

static int drv_host_commit(struct dev_ctx *ctx, void *va, size_t bytes)
{
	const struct dev_driver_api *a = api_of(ctx);
	CUmemAllocationProp prop = host_chunk_prop(((struct drv_ctx *)ctx->impl)->host_loc);
	CUdeviceptr p = (CUdeviceptr)(uintptr_t)va;
	CUmemAccessDesc acc[2];
	host_access(acc, a->device);
	CUmemGenericAllocationHandle h = 0;
	DRV(a, a->mem_create(&h, bytes, &prop, 0), "cuMemCreate (pinned host memory)");
	int pushed;
	CUresult r = drv_enter(a, &pushed);
	if (r == CUDA_SUCCESS) {
		r = a->mem_map(p, bytes, 0, h, 0);
		if (r == CUDA_SUCCESS && (r = a->mem_set_access(p, bytes, acc, 2)) != CUDA_SUCCESS)
			a->mem_unmap(p, bytes);
		a->mem_release(h); /* the mapping keeps the memory */
		drv_leave(a, pushed);
	}
	if (r != CUDA_SUCCESS)
		return drv_err(a, r, "mapping pinned host memory (cuMemMap, cuMemSetAccess)");
	return 0;
}

static int drv_host_uncommit(struct dev_ctx *ctx, void *va, size_t bytes)
{
	const struct dev_driver_api *a = api_of(ctx);
	DRV(a, a->mem_unmap((CUdeviceptr)(uintptr_t)va, bytes), "cuMemUnmap (host)");
	return 0;
}

static int drv_host_release(struct dev_ctx *ctx, void *va, size_t bytes)
{
	const struct dev_driver_api *a = api_of(ctx);
	DRV(a, a->addr_free((CUdeviceptr)(uintptr_t)va, bytes), "cuMemAddressFree (host)");
	return 0;
}

static int drv_va_reserve(struct dev_ctx *ctx, int dev, size_t bytes, void **out)
{
	const struct dev_driver_api *a = api_of(ctx);
	CUdeviceptr p = 0;
	DRV(a, a->addr_reserve(&p, bytes, ctx->info[0].granularity, 0, 0), "cuMemAddressReserve");
	*out = (void *)(uintptr_t)p;
	return 0;
}

static int drv_va_release(struct dev_ctx *ctx, void *va, size_t bytes)
{
	const struct dev_driver_api *a = api_of(ctx);
	DRV(a, a->addr_free((CUdeviceptr)(uintptr_t)va, bytes), "cuMemAddressFree");
	return 0;
}

static int drv_phys_create(struct dev_ctx *ctx, struct dev_phys *ph)
{
	const struct dev_driver_api *a = api_of(ctx);
	CUmemAllocationProp prop = ph->dev == DEV_HOST
	                               ? host_chunk_prop(((struct drv_ctx *)ctx->impl)->host_loc)
	                               : chunk_prop(a->device);
	CUmemGenericAllocationHandle h = 0;
	DRV(a, a->mem_create(&h, ph->bytes, &prop, 0), "cuMemCreate");
	ph->handle = (uint64_t)h;
	return 0;
}

static int drv_phys_destroy(struct dev_ctx *ctx, struct dev_phys *ph)
{
	const struct dev_driver_api *a = api_of(ctx);
	DRV(a, a->mem_release((CUmemGenericAllocationHandle)ph->handle), "cuMemRelease");
	return 0;
}

static int drv_va_map(struct dev_ctx *ctx, int dev, void *va, size_t bytes, struct dev_phys *ph,
                      size_t off)
{
	const struct dev_driver_api *a = api_of(ctx);
	CUdeviceptr p = (CUdeviceptr)(uintptr_t)va;
	/* the device reaches every mapping; a host range is the CPU's too */
	CUmemAccessDesc acc[2];
	host_access(acc, a->device);
	size_t nacc = dev == DEV_HOST ? 2 : 1;
	DRV(a, a->mem_map(p, bytes, off, (CUmemGenericAllocationHandle)ph->handle, 0), "cuMemMap");
	int pushed;
	CUresult r = drv_enter(a, &pushed);
	if (r == CUDA_SUCCESS) {
		r = a->mem_set_access(p, bytes, acc, nacc);
		if (r != CUDA_SUCCESS)
			a->mem_unmap(p, bytes);
		drv_leave(a, pushed);
	}
	if (r != CUDA_SUCCESS)
		return drv_err(a, r, "cuMemSetAccess");
	return 0;
}

static int drv_device_sync(struct dev_ctx *ctx, int dev)
{
	const struct dev_driver_api *a = api_of(ctx);
	if (a->ctx_sync)
		DRV(a, a->ctx_sync(), "cuCtxSynchronize");
	else
		for (struct dev_stream *s = ctx->streams; s; s = s->next)
			if (s->dev == dev)
				DRV(a, a->stream_sync((CUstream)s->native), "cuStreamSynchronize");
	return 0;
}

static int drv_va_unmap(struct dev_ctx *ctx, int dev, void *va, size_t bytes)
{
	const struct dev_driver_api *a = api_of(ctx);
	DRV(a, a->mem_unmap((CUdeviceptr)(uintptr_t)va, bytes), "cuMemUnmap");
	return 0;
}

/* ---- streams and events ------------------------------------------------------ */

static CUstream cs(const struct dev_stream *s)
{
	return (CUstream)s->native;
}

static CUevent ce(const struct dev_event *e)
{
	return (CUevent)e->impl;
}

static int drv_stream_create(struct dev_stream *s)
{
	const struct dev_driver_api *a = api_of(s->ctx);
	CUstream st = NULL;
	DRV(a, a->stream_create(&st, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
	s->native = st;
	return 0;
}

static int drv_stream_destroy(struct dev_stream *s)
{
	const struct dev_driver_api *a = api_of(s->ctx);
	DRV(a, a->stream_destroy(cs(s)), "cuStreamDestroy");
	return 0;
}

static int drv_stream_sync(struct dev_stream *s)
{
	const struct dev_driver_api *a = api_of(s->ctx);
	DRV(a, a->stream_sync((CUstream)s->native), "cuStreamSynchronize");
	return 0;
}

static int drv_event_create(struct dev_event *e)
{
	const struct dev_driver_api *a = api_of(e->ctx);
	CUevent ev = NULL;
	DRV(a, a->event_create(&ev, CU_EVENT_DEFAULT), "cuEventCreate");
	e->impl = ev;
	return 0;
}

static int drv_event_destroy(struct dev_event *e)
{
	const struct dev_driver_api *a = api_of(e->ctx);
	DRV(a, a->event_destroy(ce(e)), "cuEventDestroy");
	return 0;
}

static int drv_event_record(struct dev_event *e, struct dev_stream *s)
{
	const struct dev_driver_api *a = api_of(e->ctx);
	DRV(a, a->event_record(ce(e), cs(s)), "cuEventRecord");
	return 0;
}

static int drv_event_query(struct dev_event *e)
{
	const struct dev_driver_api *a = api_of(e->ctx);
	int pushed;
	CUresult r = drv_enter(a, &pushed);
	if (r == CUDA_SUCCESS) {
		r = a->event_query(ce(e));
		drv_leave(a, pushed);
	}
	if (r == CUDA_ERROR_NOT_READY)
		return -EAGAIN;
	if (r != CUDA_SUCCESS)
		return drv_err(a, r, "cuEventQuery");
	return 0;
}

static int drv_event_sync(struct dev_event *e)
{
	const struct dev_driver_api *a = api_of(e->ctx);
	DRV(a, a->event_sync(ce(e)), "cuEventSynchronize");
	return 0;
}

static int drv_stream_wait_event(struct dev_stream *s, struct dev_event *e)
{
	const struct dev_driver_api *a = api_of(s->ctx);
	DRV(a, a->stream_wait_event(cs(s), ce(e), 0), "cuStreamWaitEvent");
	return 0;
}

static int drv_event_time(struct dev_event *e, double *out_s)
{
	struct drv_ctx *c = e->ctx->impl;
	const struct dev_driver_api *a = c->api;
	float ms = 0;
	int pushed;
	CUresult r = drv_enter(a, &pushed);
	if (r == CUDA_SUCCESS) {
		r = a->event_elapsed(&ms, c->ref, ce(e));
		drv_leave(a, pushed);
	}
	if (r == CUDA_ERROR_NOT_READY)
		return -EAGAIN;
	if (r != CUDA_SUCCESS)
		return drv_err(a, r, "cuEventElapsedTime");
	*out_s = c->ref_t + ms * 1e-3;
	return 0;
}

static double drv_now(const struct dev_ctx *ctx)
{
	return wall_now();
}

int dev_driver_stream_wait(struct dev_event *e, CUstream st)
{
	SP_CHECK_ARG(e && e->ctx->kind == DEV_BACKEND_DRIVER,
	             "dev_driver_stream_wait: not a driver-backend event");
	const struct dev_driver_api *a = api_of(e->ctx);
	DRV(a, a->stream_wait_event(st, ce(e), 0), "cuStreamWaitEvent");
	return 0;
}

int dev_driver_event_record(struct dev_event *e, CUstream st)
{
	SP_CHECK_ARG(e && e->ctx->kind == DEV_BACKEND_DRIVER,
	             "dev_driver_event_record: not a driver-backend event");
	const struct dev_driver_api *a = api_of(e->ctx);
	DRV(a, a->event_record(ce(e), st), "cuEventRecord");
	return 0;
}

/* ---- async operations --------------------------------------------------------- */

static int drv_memcpy_async(struct dev_stream *s, void *dst, int dst_dev, const void *src,
                            int src_dev, size_t bytes, enum dev_copy_kind kind)
{
	const struct dev_driver_api *a = api_of(s->ctx);
	DRV(a,
	    a->memcpy_async((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, bytes, cs(s)),
	    "cuMemcpyAsync");
	return 0;
}

struct host_op {
	void (*cpu)(const void *);
	void *dst; /* memset */
	int value;
	size_t bytes;
	_Alignas(16) unsigned char args[];
};

static void host_op_fn(void *arg)
{
	struct host_op *op = arg;
	if (op->cpu)
		op->cpu(op->args);
	else
		memset(op->dst, op->value, op->bytes);
	free(op);
}

static int queue_host_op(struct dev_stream *s, struct host_op *op)
{
	const struct dev_driver_api *a = api_of(s->ctx);
	int pushed;
	CUresult r = drv_enter(a, &pushed);
	if (r == CUDA_SUCCESS) {
		r = a->launch_host_func(cs(s), host_op_fn, op);
		drv_leave(a, pushed);
	}
	if (r != CUDA_SUCCESS) {
		free(op);
		return drv_err(a, r, "cuLaunchHostFunc");
	}
	return 0;
}

static int drv_memset_async(struct dev_stream *s, void *dst, int dst_dev, int value, size_t bytes)
{
	const struct dev_driver_api *a = api_of(s->ctx);
	if (dst_dev >= 0) {
		DRV(a,
		    a->memset_d8_async((CUdeviceptr)(uintptr_t)dst, (unsigned char)value, bytes,
		                       cs(s)),
		    "cuMemsetD8Async");
		return 0;
	}
	struct host_op *op = calloc(1, sizeof(*op));
	if (!op)
		return sp_error(-ENOMEM, "dev_memset_async: out of memory");
	op->dst = dst;
	op->value = value;
	op->bytes = bytes;
	return queue_host_op(s, op);
}

static int drv_launch(struct dev_stream *s, const struct dev_kernel *k, const void *args,
                      size_t args_size, struct dev_cost cost)
{
	if (s->dev != DEV_HOST || !k->cpu)
		return sp_error(-ENOTSUP,
		                "dev_launch %s: the driver backend runs CPU kernels on host "
		                "streams only",
		                k->name ? k->name : "?");
	struct host_op *op = calloc(1, sizeof(*op) + args_size);
	if (!op)
		return sp_error(-ENOMEM, "dev_launch %s: out of memory", k->name);
	op->cpu = k->cpu;
	if (args_size)
		memcpy(op->args, args, args_size);
	return queue_host_op(s, op);
}

static int drv_host_callback(struct dev_stream *s, void (*fn)(void *), void *arg)
{
	const struct dev_driver_api *a = api_of(s->ctx);
	DRV(a, a->launch_host_func(cs(s), fn, arg), "cuLaunchHostFunc");
	return 0;
}

const struct dev_backend_ops dev_driver_ops = {
    .open = drv_open,
    .close = drv_close,
    .mem_alloc = drv_mem_alloc,
    .mem_free = drv_mem_free,
    .host_alloc = drv_host_alloc,
    .host_free = drv_host_free,
    .host_reserve = drv_host_reserve,
    .host_commit = drv_host_commit,
    .host_uncommit = drv_host_uncommit,
    .host_release = drv_host_release,
    .va_reserve = drv_va_reserve,
    .va_release = drv_va_release,
    .phys_create = drv_phys_create,
    .phys_destroy = drv_phys_destroy,
    .va_map = drv_va_map,
    .va_unmap = drv_va_unmap,
    .device_sync = drv_device_sync,
    .stream_create = drv_stream_create,
    .stream_destroy = drv_stream_destroy,
    .stream_sync = drv_stream_sync,
    .event_create = drv_event_create,
    .event_destroy = drv_event_destroy,
    .event_record = drv_event_record,
    .event_query = drv_event_query,
    .event_sync = drv_event_sync,
    .stream_wait_event = drv_stream_wait_event,
    .event_time = drv_event_time,
    .now = drv_now,
    .memcpy_async = drv_memcpy_async,
    .memset_async = drv_memset_async,
    .launch = drv_launch,
    .host_callback = drv_host_callback,
};

#else /* !SPILL_HAVE_CUDA */

static int drv_open_none(struct dev_ctx *ctx, const struct dev_config *cfg)
{
	return sp_error(-ENODEV, "driver backend: spill was built without the CUDA headers");
}

static void drv_close_none(struct dev_ctx *ctx)
{
}

const struct dev_backend_ops dev_driver_ops = {.open = drv_open_none, .close = drv_close_none};

#endif

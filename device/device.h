/* device/device.h — one interface over three backends: cuda, host, model.
 *
 * A struct dev_ctx owns the devices of one backend. Everything above (kernels,
 * vmm, runtime, shim) talks to devices only through this header, so the same
 * scheduler and vmm run on real GPUs (cuda), on emulated GPUs in host memory
 * (host) and in virtual time (model).
 *
 * Places: a device index 0..n-1, DEV_HOST (pinned host memory) or DEV_DISK (for
 * link bandwidths only).
 * Memory: plain allocations (dev_mem_alloc) and the CUDA virtual-memory shape —
 * reserve a virtual range, create physical chunks, map/unmap chunks into the
 * range — so a pointer stays stable while its backing comes and goes. Physical
 * bytes (plain or chunks) count against the device capacity; exceeding it fails
 * with -ENOMEM and the numbers in the message. host backend: an unmapped range is
 * PROT_NONE, so touching it faults. model backend: no data; pointers are opaque
 * addresses that must never be dereferenced.
 * Streams execute their ops in order; events connect streams. All ops are
 * asynchronous; completion is observed through events or dev_stream_sync().
 * Errors: 0 or -errno with sp_last_error() set. Thread-safety: every call may be
 * made from any thread; a stream must not be destroyed while others use it.
 */
#ifndef SP_DEVICE_H
#define SP_DEVICE_H

#include "common/error.h"
#include "common/params.h"

#include <stddef.h>
#include <stdint.h>

/* DRIVER: one GPU through driver entry points the caller resolved (the preload
 * shim; device/driver.h). Never chosen from the parameters. */
enum dev_backend_kind { DEV_BACKEND_CUDA, DEV_BACKEND_HOST, DEV_BACKEND_MODEL, DEV_BACKEND_DRIVER };

#define DEV_HOST (-1) /* pinned host memory, as a copy endpoint / link end */
#define DEV_DISK (-2) /* the disk, as a link end (bandwidth only) */
#define DEV_MAX  16
/* The profile used when SPILL_PROFILE is empty (the cuda backend measures its
 * host links instead and takes only the rest from it). */
#define DEV_DEFAULT_PROFILE "gtx1080ti-x4"

struct dev_ctx;
struct dev_stream;
struct dev_event;
struct dev_phys; /* a physical chunk of device memory */
struct dev_driver_api;

struct dev_config {
	enum dev_backend_kind backend;
	int ndevices;             /* 0 = backend default */
	uint64_t device_mem;      /* 0 = backend default */
	const char *profile;      /* profile name or file; NULL or "" = DEV_DEFAULT_PROFILE */
	const char *profile_text; /* profile text itself (dev_profile_text's), instead of
	                             profile: the planner's model of a context */
	int link_throttle;        /* host: throttle copies to the profile's bandwidths */
	int threads;              /* host: CPU threads for kernels, 0 = cores */
	const char *host_fail;    /* host: "DEV:N", device DEV fails at its Nth kernel (dev_fail) */
	const char *host_jitter;  /* host: "DEV:US[:SEED]", DEV's kernels start up to US us late */
	uint64_t host_pin_limit;  /* host: pinned host memory past this fails with -ENOMEM, as
	                             the OS or driver out of pinned memory would (0: none) */
	const struct dev_driver_api *driver; /* driver: the entry points (device/driver.h) */
	double net_bw; /* > 0: the inter-node link instead of the profile's net (bytes/s) */
};

/* Fills *cfg from the parameter table. backend "" picks cuda when a CUDA device
 * is present, host otherwise. Returns 0, or -EINVAL for an unknown backend. */
int dev_config_from_params(const struct sp_params *p, struct dev_config *cfg) SP_MUST_CHECK;

/* Opens the backend. Returns 0, -ENODEV ("no CUDA device") when cuda is asked for
 * and none is present, -EINVAL for more devices than exist or a bad profile. */
int dev_open(const struct dev_config *cfg, struct dev_ctx **out) SP_MUST_CHECK;
/* Waits for all streams, frees everything still allocated, closes. NULL is ok. */
void dev_close(struct dev_ctx *ctx);

/* 1 if a CUDA device is usable here (the driver loads and reports >= 1 device). */
int dev_cuda_available(void);

enum dev_backend_kind dev_backend(const struct dev_ctx *ctx);
const char *dev_backend_name(enum dev_backend_kind kind);
int dev_count(const struct dev_ctx *ctx);

struct dev_info {
	char name[64];
	uint64_t capacity;  /* bytes usable by spill on this device */
	uint64_t used;      /* physical bytes allocated now */
	double flops;       /* peak fp32 FLOP/s used by the cost model */
	double bf16_flops;  /* peak bf16 matrix FLOP/s (tensor cores); 0: unknown, as flops */
	double mem_bw;      /* device memory bandwidth, bytes/s */
	double speed;       /* relative to the profile's device (profile key speed) */
	size_t granularity; /* physical chunk / mapping granularity, bytes */
};
int dev_info(const struct dev_ctx *ctx, int dev, struct dev_info *out) SP_MUST_CHECK;

/* Link bandwidth in bytes/s from src to dst (device index, DEV_HOST, DEV_DISK).
 * Host links of all GPUs share one host bandwidth (dev_host_link_bw). 0 if no
 * such link (e.g. no p2p between two devices: copies then go through the host). */
double dev_link_bw(const struct dev_ctx *ctx, int src, int dst);
/* The open context as profile text (device count, capacity, FLOP/s and memory
 * bandwidth as dev_info reports them, per-device speeds, links as measured or
 * profiled, launch latency and CPU): what a model-backend context opened with
 * dev_config.profile_text simulates. Returns 0, or -ENOSPC when n is too small
 * (2 KiB is enough). */
int dev_profile_text(const struct dev_ctx *ctx, char *buf, size_t n) SP_MUST_CHECK;
double dev_host_link_bw(const struct dev_ctx *ctx); /* shared by all GPUs, per direction */
int dev_p2p_possible(const struct dev_ctx *ctx, int a, int b);

/* ---- memory ---- */
int dev_mem_alloc(struct dev_ctx *ctx, int dev, size_t bytes, void **out) SP_MUST_CHECK;
int dev_mem_free(struct dev_ctx *ctx, int dev, void *ptr) SP_MUST_CHECK;
/* Pinned (page-locked) host memory, usable by async copies. */
int dev_host_alloc(struct dev_ctx *ctx, size_t bytes, void **out) SP_MUST_CHECK;
int dev_host_free(struct dev_ctx *ctx, void *ptr) SP_MUST_CHECK;
/* Pinned host memory that grows (the vmm's host pool): dev_host_reserve
 * reserves a region of bytes (rounded up to dev_host_commit_granularity) and
 * pins nothing; dev_host_commit pins (backs) [start + off, start + off +
 * bytes), which is from then on pinned host memory like dev_host_alloc's
 * (copies, the CPU); the rest must not be touched. Committed parts stay
 * until dev_host_free(ctx, start) frees the whole region. off and bytes are
 * multiples of the commit granularity; committing what is committed already
 * does nothing. host: PROT_NONE address space, a commit maps it read-write
 * and faults its pages in (pinned memory is resident; SPILL_HOST_PIN_LIMIT
 * caps it); cuda and driver: a reserved address range, a commit maps a
 * host-located cuMemCreate chunk there; model: address space, a commit is
 * bookkeeping. Where a driver cannot do that (no host-located chunks), the
 * region is pinned whole at the reserve (dev_host_committed says so).
 * Returns 0; -EINVAL (not a region, outside it, misaligned); -ENOMEM when the
 * OS or driver is out of pinned memory (the message says how much was asked
 * for): what was committed before stays, the region is usable as it is.
 * Thread-safety: a commit holds the context's lock while it pins. */
int dev_host_reserve(struct dev_ctx *ctx, size_t bytes, void **out) SP_MUST_CHECK;
int dev_host_commit(struct dev_ctx *ctx, void *start, size_t off, size_t bytes) SP_MUST_CHECK;
/* Bytes committed (pinned) in the region reserved at start; 0 for anything else. */
uint64_t dev_host_committed(struct dev_ctx *ctx, const void *start);
/* The unit of dev_host_commit (a power of two). */
size_t dev_host_commit_granularity(const struct dev_ctx *ctx);

/* Virtual ranges and physical chunks. Sizes and offsets are multiples of the
 * device's granularity. A range belongs to a device; chunks of that device map
 * into it. Unmapping does not destroy a chunk (its bytes survive a remap). An
 * unmap covers whole mappings (one or several adjacent ones), as cuMemUnmap
 * requires on every backend: part of a mapping is -EINVAL.
 * Host chunks (dev = DEV_HOST; host and driver backends, else -ENOTSUP): pinned
 * host memory that maps into a DEV_HOST range, where the CPU and copies reach
 * it, and into any device's range, where that device's kernels reach it over
 * the link (slowly) at the range's address. One chunk may be mapped at several
 * places at once; all of them see the same bytes. Sizes: multiples of
 * dev_host_granularity (a multiple of every device's granularity). Unmapping a
 * host chunk from a device range first waits for the work queued on that
 * device, so no kernel is still reaching it there. */
int dev_va_reserve(struct dev_ctx *ctx, int dev, size_t bytes, void **out) SP_MUST_CHECK;
int dev_va_release(struct dev_ctx *ctx, void *va, size_t bytes) SP_MUST_CHECK;
int dev_phys_create(struct dev_ctx *ctx, int dev, size_t bytes,
                    struct dev_phys **out) SP_MUST_CHECK;
int dev_phys_destroy(struct dev_ctx *ctx, struct dev_phys *phys) SP_MUST_CHECK;
int dev_va_map(struct dev_ctx *ctx, void *va, size_t bytes, struct dev_phys *phys,
               size_t phys_offset) SP_MUST_CHECK;
int dev_va_unmap(struct dev_ctx *ctx, void *va, size_t bytes) SP_MUST_CHECK;
/* The granularity of host chunks and DEV_HOST ranges; 0 when the backend has none. */
size_t dev_host_granularity(const struct dev_ctx *ctx);

/* ---- streams and events ---- */
/* A stream of device dev, or of DEV_HOST: a CPU stream whose kernels run their
 * CPU function in stream order on a host thread (host and cuda backends; on
 * cuda a CUDA stream of device 0 running host functions, so events connect it
 * with device streams) and charge the profile's CPU on the model backend. Its
 * kernels touch host memory only (pinned host memory, vmm host copies). */
int dev_stream_create(struct dev_ctx *ctx, int dev, struct dev_stream **out) SP_MUST_CHECK;
int dev_stream_destroy(struct dev_stream *s) SP_MUST_CHECK; /* syncs first (a failed
                                                               device's: no error) */
int dev_stream_sync(struct dev_stream *s) SP_MUST_CHECK;
int dev_stream_device(const struct dev_stream *s);
/* The backend's native stream (cudaStream_t for cuda; NULL otherwise). */
void *dev_stream_native(const struct dev_stream *s);

int dev_event_create(struct dev_ctx *ctx, struct dev_event **out) SP_MUST_CHECK;
int dev_event_destroy(struct dev_event *e) SP_MUST_CHECK;
/* Captures the work queued on s so far; a later record replaces the capture. */
int dev_event_record(struct dev_event *e, struct dev_stream *s) SP_MUST_CHECK;
/* 0 if complete (or never recorded), -EAGAIN if pending, <0 on error. On the
 * model backend a query of pending work lets virtual time run to the next
 * completion (a polling loop makes progress). */
int dev_event_query(struct dev_event *e);
/* The same answer without side effects: on the model backend virtual time does
 * not move (for bookkeeping such as "may this event be recycled?"). */
int dev_event_peek(struct dev_event *e);
int dev_event_sync(struct dev_event *e) SP_MUST_CHECK;
/* Blocks until one of the n events is complete and returns its index in *idx
 * (the lowest complete one; one that failed counts as complete: query it for
 * its error). On the model backend virtual time runs to the first completion
 * among them. n must be > 0. Returns 0 or the device error. */
int dev_event_wait_any(struct dev_event *const *ev, int n, int *idx) SP_MUST_CHECK;
/* Work queued on s after this call waits for e's captured work. */
int dev_stream_wait_event(struct dev_stream *s, struct dev_event *e) SP_MUST_CHECK;
/* Completion time of e in seconds (wall clock for cuda/host, virtual for model),
 * on the same clock as dev_now(). Returns -EAGAIN if pending. */
int dev_event_time(struct dev_event *e, double *out_s) SP_MUST_CHECK;
/* The backend's clock in seconds: monotonic wall time, or the model's virtual time. */
double dev_now(const struct dev_ctx *ctx);

/* ---- async operations, queued on a stream ---- */
/* Copies bytes from src (on place src_dev) to dst (on place dst_dev). Places are
 * device indices or DEV_HOST; the kind (H2D, D2H, D2D, P2P) follows from them.
 * P2P between devices without a peer link is staged through the host. */
int dev_memcpy_async(struct dev_stream *s, void *dst, int dst_dev, const void *src, int src_dev,
                     size_t bytes) SP_MUST_CHECK;
int dev_memset_async(struct dev_stream *s, void *dst, int dst_dev, int value,
                     size_t bytes) SP_MUST_CHECK;

/* A kernel: a CPU function (host backend, run on the stream's worker) and a
 * CUDA launcher (cuda backend, given the native stream). The model backend runs
 * neither and charges the cost. args is copied at launch (args_size bytes). */
struct dev_kernel {
	const char *name;
	void (*cpu)(const void *args);
	void (*cuda)(const void *args, void *cuda_stream);
};
struct dev_cost {
	double flops; /* floating-point operations */
	double bytes; /* device-memory bytes read + written */
	int bf16;     /* 1: the flops are bf16 matrix products, at the profile's bf16_flops
	                 (tensor cores) where it has one, else at its flops */
};
int dev_launch(struct dev_stream *s, const struct dev_kernel *k, const void *args, size_t args_size,
               struct dev_cost cost) SP_MUST_CHECK;

/* Runs fn(arg) on a host thread once all earlier work on s is done; later work
 * on s waits for it to return. fn must not call dev_* sync functions. */
int dev_host_callback(struct dev_stream *s, void (*fn)(void *arg), void *arg) SP_MUST_CHECK;

/* Drives of the disk: the profile's `disks` (1 when absent). Each has the
 * profile's `disk` bandwidth, shared by its reads and writes. */
int dev_disk_count(const struct dev_ctx *ctx);
/* Model backend: queues on s (a DEV_HOST stream) a transfer of bytes between
 * pinned host memory and drive `drive` (to_disk: a write), which takes that
 * drive's bandwidth, shared with the drive's other transfers in flight, and
 * nothing else; no data moves. The vmm's disk tier uses it on the model
 * backend (the other backends do real I/O through io_uring). Returns 0,
 * -EINVAL (drive out of range, a device stream), or -ENOTSUP on other backends. */
int dev_disk_io_async(struct dev_stream *s, int drive, int to_disk, size_t bytes) SP_MUST_CHECK;
/* Model backend: queues on s a transfer of bytes over this node's inter-node
 * link (the profile's net, in and out at once: a chain through the nodes
 * receives and sends each byte), shared with the link's other transfers in
 * flight; no data moves. Multi-node runs simulated on one node (spill sim
 * --nodes). -ENOTSUP on other backends (they send real messages). */
int dev_net_io_async(struct dev_stream *s, size_t bytes) SP_MUST_CHECK;
/* The profile's inter-node link: bytes/s per direction, and a message's latency. */
double dev_net_bw(const struct dev_ctx *ctx);
double dev_net_latency(const struct dev_ctx *ctx);

/* ---- failures ---- */
/* Fault injection (host backend; -ENOTSUP elsewhere): device dev fails now, as
 * a GPU that falls off the bus. Work queued on its streams from now on is
 * dropped (kernels, copies, memsets and callbacks do not run), and so is any
 * copy from or to its memory on another stream; waits still wait. An event
 * covering dropped work completes with -EIO (dev_event_query/sync), and
 * dev_stream_sync of its streams returns -EIO. Memory calls keep working (the
 * bytes are not to be trusted). SPILL_HOST_FAIL=DEV:N fails DEV when its Nth
 * kernel is about to run. */
int dev_fail(struct dev_ctx *ctx, int dev) SP_MUST_CHECK;
/* 1 when device dev has failed, 0 otherwise (always 0 where dev_fail is not
 * supported). */
int dev_failed(const struct dev_ctx *ctx, int dev);

/* ---- accounting ---- */
enum dev_copy_kind { DEV_COPY_H2D, DEV_COPY_D2H, DEV_COPY_D2D, DEV_COPY_P2P, DEV_COPY_KINDS };
/* Bytes copied by the device layer since open, per kind (checked against the vmm's
 * own accounting by tests); a copy a failed device dropped does not count. */
uint64_t dev_copied_bytes(const struct dev_ctx *ctx, enum dev_copy_kind kind);
const char *dev_copy_kind_name(enum dev_copy_kind kind);

#endif

/* device/internal.h — what device.c shares with the three backends.
 *
 * device.c owns everything backend-independent: argument checks, the capacity of
 * each device, the registry of live allocations, reservations and chunks (so a
 * bad free, a double free or a map outside a reservation is an error, not a
 * crash), the copied-bytes counters and the profiles. A backend only does the
 * operation itself, through struct dev_backend_ops, on arguments already checked.
 * Only files in device/ include this header.
 */
#ifndef SP_DEVICE_INTERNAL_H
#define SP_DEVICE_INTERNAL_H

#include "device/device.h"

#include <pthread.h>
#include <stdint.h>

/* A device profile: what the model backend simulates, and the link bandwidths
 * the host backend throttles to and every backend reports. */
struct dev_profile {
	char name[64];
	char device_name[64];
	int ndevices;
	uint64_t device_mem;
	double flops;      /* per device, FLOP/s (fp32) */
	double bf16_flops; /* per device, bf16 matrix products (tensor cores); 0: flops */
	double mem_bw;     /* per device, bytes/s */
	double h2d_bw;     /* host -> one device, bytes/s */
	double d2h_bw;     /* one device -> host */
	double host_bw;    /* the host link all devices share, per direction */
	double p2p_bw;     /* device -> device; 0: no peer link (staged through host) */
	double disk_bw;    /* disk <-> host, per drive (reads and writes share it) */
	int ndisks;        /* drives (default 1): the model backend's disk resources */
	double net_bw;     /* a node's inter-node link, per direction (default 25 GB/s,
	                      200 Gb/s); the model backend's multi-node runs */
	double net_lat;    /* one message's latency on it (default 5 us) */
	double launch_lat; /* seconds added to every kernel (model backend) */
	double cpu_flops;  /* the host CPU, for kernels on DEV_HOST streams (model backend) */
	double cpu_mem_bw;
	double speed[DEV_MAX]; /* per device, relative to flops and mem_bw (default 1) */
	int nspeed;            /* entries given in the profile (0: all 1) */
};

/* Loads a profile by built-in name (device/profiles/<name>.prof, compiled in) or
 * from a file path (anything containing '/' or ending in .prof). Returns 0, or
 * -EINVAL naming the profile and the bad line. */
int dev_profile_load(const char *name_or_path, struct dev_profile *out) SP_MUST_CHECK;
/* Parses profile text (for tests and the loader). origin names it in messages. */
int dev_profile_parse(const char *text, const char *origin, struct dev_profile *out) SP_MUST_CHECK;
/* Names of the built-in profiles, NULL-terminated. */
const char *const *dev_profile_builtin_names(void);

enum dev_reg_kind { DEV_REG_MEM, DEV_REG_HOST, DEV_REG_HOST_GROW };

/* One commit of a growing host region: [off, off + bytes) from its start. */
struct dev_commit {
	size_t off, bytes;
};

/* A growing host region (dev_host_reserve): its commits sorted by offset, each
 * one backend host_commit (and so one host_uncommit at the free). */
struct dev_host_region {
	struct dev_commit *c;
	size_t n, cap;
	uint64_t committed; /* bytes, the sum of c[] */
	int pinned_all;     /* the backend pinned it whole at the reserve: host_free frees it */
};

/* A plain allocation (device or pinned host) or a growing host region, in
 * ctx's hash table by address. */
struct dev_reg {
	uintptr_t key; /* address; 0 = empty slot, 1 = tombstone */
	size_t bytes;
	int dev;
	enum dev_reg_kind kind;
	struct dev_host_region *grow; /* DEV_REG_HOST_GROW */
};

/* A reserved range, in ctx's array sorted by start (maps look up the range
 * that contains an address): the chunk mapped at each granule, or NULL. */
struct dev_va_rec {
	uintptr_t start;
	size_t bytes;
	int dev;
	size_t granules, nmapped;
	struct dev_phys **mapped;
	/* 1 at the first granule of each mapping: unmaps take whole mappings, as
	 * cuMemUnmap does (it refuses part of one) */
	unsigned char *map_start;
};

struct dev_phys {
	struct dev_ctx *ctx;
	int dev;
	size_t bytes;
	int maps;                     /* live mappings of this chunk */
	uint64_t off;                 /* host backend: offset in the device's memory file */
	uint64_t handle;              /* cuda: CUmemGenericAllocationHandle */
	struct dev_phys *next, *prev; /* ctx's list of live chunks */
};

struct dev_stream {
	struct dev_ctx *ctx;
	int dev;
	void *native; /* cudaStream_t (cuda); NULL otherwise */
	void *impl;   /* backend state */
	struct dev_stream *next, *prev;
};

struct dev_event {
	struct dev_ctx *ctx;
	void *impl;
	struct dev_event *next, *prev;
};

struct dev_backend_ops {
	/* Fills ctx->ndev, ctx->info[], ctx->prof; may set ctx->impl. */
	int (*open)(struct dev_ctx *ctx, const struct dev_config *cfg);
	void (*close)(struct dev_ctx *ctx);

	int (*mem_alloc)(struct dev_ctx *ctx, int dev, size_t bytes, void **out);
	int (*mem_free)(struct dev_ctx *ctx, int dev, void *ptr, size_t bytes);
	int (*host_alloc)(struct dev_ctx *ctx, size_t bytes, void **out);
	int (*host_free)(struct dev_ctx *ctx, void *ptr, size_t bytes);
	/* Growing host regions. host_reserve reserves bytes (a multiple of
	 * ctx->host_commit_gran) and pins nothing, or sets *pinned_all when it had
	 * to pin the whole region (then no commit op is called and host_free frees
	 * it). host_commit pins a part nothing pinned yet; host_uncommit undoes one
	 * earlier commit, whole, before host_release frees the range. NULL
	 * host_reserve: device.c pins the region whole with host_alloc. */
	int (*host_reserve)(struct dev_ctx *ctx, size_t bytes, void **out, int *pinned_all);
	int (*host_commit)(struct dev_ctx *ctx, void *va, size_t bytes);
	int (*host_uncommit)(struct dev_ctx *ctx, void *va, size_t bytes);
	int (*host_release)(struct dev_ctx *ctx, void *va, size_t bytes);
	int (*va_reserve)(struct dev_ctx *ctx, int dev, size_t bytes, void **out);
	int (*va_release)(struct dev_ctx *ctx, void *va, size_t bytes);
	int (*phys_create)(struct dev_ctx *ctx, struct dev_phys *phys);
	int (*phys_destroy)(struct dev_ctx *ctx, struct dev_phys *phys);
	int (*va_map)(struct dev_ctx *ctx, int dev, void *va, size_t bytes, struct dev_phys *phys,
	              size_t off);
	int (*va_unmap)(struct dev_ctx *ctx, int dev, void *va, size_t bytes);
	/* optional: waits for all work on device dev, the backend's streams or not */
	int (*device_sync)(struct dev_ctx *ctx, int dev);

	int (*stream_create)(struct dev_stream *s);
	int (*stream_destroy)(struct dev_stream *s); /* after a sync */
	int (*stream_sync)(struct dev_stream *s);
	int (*event_create)(struct dev_event *e);
	int (*event_destroy)(struct dev_event *e);
	int (*event_record)(struct dev_event *e, struct dev_stream *s);
	int (*event_query)(struct dev_event *e);
	int (*event_peek)(struct dev_event *e); /* NULL: event_query has no side effects */
	int (*event_sync)(struct dev_event *e);
	/* NULL: device.c polls event_query */
	int (*event_wait_any)(struct dev_event *const *ev, int n, int *idx);
	int (*stream_wait_event)(struct dev_stream *s, struct dev_event *e);
	int (*event_time)(struct dev_event *e, double *out_s);
	double (*now)(const struct dev_ctx *ctx);
	/* fault injection; NULL: not supported (dev_fail -ENOTSUP, dev_failed 0) */
	int (*fail)(struct dev_ctx *ctx, int dev);
	int (*failed)(const struct dev_ctx *ctx, int dev);

	int (*memcpy_async)(struct dev_stream *s, void *dst, int dst_dev, const void *src,
	                    int src_dev, size_t bytes, enum dev_copy_kind kind);
	int (*memset_async)(struct dev_stream *s, void *dst, int dst_dev, int value, size_t bytes);
	int (*launch)(struct dev_stream *s, const struct dev_kernel *k, const void *args,
	              size_t args_size, struct dev_cost cost);
	int (*host_callback)(struct dev_stream *s, void (*fn)(void *arg), void *arg);
	/* model only (NULL elsewhere): a simulated transfer to or from a drive */
	int (*disk_io_async)(struct dev_stream *s, int drive, int to_disk, size_t bytes);
	int (*net_io_async)(struct dev_stream *s, size_t bytes);
};

struct dev_ctx {
	enum dev_backend_kind kind;
	const struct dev_backend_ops *ops;
	struct dev_config cfg;
	struct dev_profile prof;
	int ndev;
	struct dev_info info[DEV_MAX];
	int p2p[DEV_MAX][DEV_MAX]; /* peer access possible (and enabled) */
	uint64_t used[DEV_MAX];    /* physical bytes now, under lock */
	uint64_t host_used;        /* pinned host bytes now */
	size_t host_gran;          /* granularity of host chunks and host ranges; 0: the backend
	                     has none (set by the backend's open) */
	size_t host_commit_gran;   /* unit of growing host regions (a power of two; the backend's
	                              open sets it, 0: device.c uses 4 KiB) */
	uint64_t copied[DEV_COPY_KINDS]; /* atomic */
	void *impl;                      /* backend state */

	pthread_mutex_t lock; /* registry, used[], lists */
	struct dev_reg *reg;  /* open-addressing table, power-of-two size */
	size_t reg_cap, reg_live, reg_tomb;
	struct dev_va_rec **vas; /* reservations, sorted by start */
	size_t nvas, cap_vas;
	struct dev_phys *phys_list;
	struct dev_stream *streams;
	struct dev_event *events;
};

extern const struct dev_backend_ops dev_host_ops;
extern const struct dev_backend_ops dev_model_ops;
extern const struct dev_backend_ops dev_cuda_ops;
extern const struct dev_backend_ops dev_driver_ops;

/* Fills every device's info and the p2p matrix from ctx->prof (capacity from
 * capacity_override when non-zero). Used by host and model. */
void dev_info_from_profile(struct dev_ctx *ctx, uint64_t capacity_override, size_t granularity);

#endif

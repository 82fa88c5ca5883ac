/* shim/report.c — what the shim moved, for whom: at exit, on SIGUSR1, as JSON
 * (SPILL_SHIM_STATS_JSON, read back by `spill report`) and as a Chrome trace
 * of transfers and launches (SPILL_SHIM_TRACE).
 *
 * Bytes per direction are the vmm's (what its copies moved, counted when they
 * completed); per allocation they are its object's counters; per kernel they
 * are the bytes brought to the device for that kernel's launches (the misses
 * it caused), so a kernel name leads to the layer that thrashes. With several
 * devices the totals add up the devices' and each device gets its own line
 * (and an entry of "devices" in the JSON). Everything here runs with every
 * device's lock and then shim.lock held.
 */
#include "shim/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct alloc_row {
	const struct shim_alloc *a;
	uint64_t h2d, d2h, h2disk, disk2h;
	int live;
};

static uint64_t row_total(const struct alloc_row *r)
{
	return r->h2d + r->d2h + r->h2disk + r->disk2h;
}

static int by_moved(const void *x, const void *y)
{
	uint64_t a = row_total(x), b = row_total(y);
	return a < b ? 1 : a > b ? -1 : 0;
}

static int kstat_by_h2d(const void *x, const void *y)
{
	const struct shim_kstat *a = x, *b = y;
	return a->h2d < b->h2d ? 1 : a->h2d > b->h2d ? -1 : strcmp(a->name, b->name);
}

/* The figures of one device, or of all of them added up (d NULL). */
struct dev_sum {
	uint64_t budget, ops, peer_ops, live, batch_releases, host_fallbacks;
	uint64_t moved[4]; /* h2d, d2h, host->disk, disk->host */
	uint64_t nchunks_made, chunk_evictions, chunk_restores, chunk_h2d, chunk_d2h;
	uint64_t period, cycles;
};

static const enum vmm_xfer_kind xfer_kinds[4] = {VMM_XFER_H2D, VMM_XFER_D2H, VMM_XFER_H2DISK,
                                                 VMM_XFER_DISK2H};

static void dev_sum_add(struct dev_sum *t, const struct shim_dev *d)
{
	t->budget += d->budget;
	t->ops += d->ops;
	t->peer_ops += d->peer_ops;
	t->live += d->nallocs;
	t->batch_releases += d->batch_releases;
	t->nchunks_made += d->nchunks_made;
	t->chunk_evictions += d->chunk_evictions;
	t->chunk_restores += d->chunk_restores;
	t->chunk_h2d += d->chunk_h2d;
	t->chunk_d2h += d->chunk_d2h;
	if (d->vmm) {
		struct vmm_stats vs;
		vmm_stats_get(d->vmm, &vs);
		t->host_fallbacks += vs.host_fallbacks.total;
		for (int i = 0; i < 4; i++)
			t->moved[i] += vmm_xfer_bytes(d->vmm, xfer_kinds[i]);
	}
	uint64_t period = 0, cycles = 0;
	if (d->rec)
		shim_rec_mode(d->rec, &period, &cycles);
	if (period > t->period || (period == t->period && cycles > t->cycles)) {
		t->period = period;
		t->cycles = cycles;
	}
}

#define FOR_DEV(d)                                                            \
	for (struct shim_dev *d = shim.dev; d < shim.dev + SHIM_MAX_DEV; d++) \
		if (__atomic_load_n(&d->ready, __ATOMIC_ACQUIRE))

static struct dev_sum total_sum(void)
{
	struct dev_sum t;
	memset(&t, 0, sizeof(t));
	FOR_DEV(d)
	dev_sum_add(&t, d);
	return t;
}

/* Every allocation, live and freed, with its bytes; sorted, most moved first. */
static struct alloc_row *collect(size_t *n)
{
	size_t total = shim.ndead;
	FOR_DEV(d)
	total += d->nallocs;
	struct alloc_row *rows = calloc(total ? total : 1, sizeof(*rows));
	if (!rows) {
		*n = 0;
		return NULL;
	}
	size_t k = 0;
	FOR_DEV(d)
	for (size_t i = 0; i < d->nallocs; i++) {
		struct vmm_obj_info inf;
		struct alloc_row *r = &rows[k++];
		r->a = d->allocs[i];
		r->live = 1;
		if (r->a->backing != SHIM_BACK_VMM) {
			r->h2d = r->a->h2d;
			r->d2h = r->a->d2h;
		} else if (d->vmm && vmm_obj_info(d->vmm, r->a->obj, &inf) == 0) {
			r->h2d = inf.bytes_moved[VMM_XFER_H2D];
			r->d2h = inf.bytes_moved[VMM_XFER_D2H];
			r->h2disk = inf.bytes_moved[VMM_XFER_H2DISK];
			r->disk2h = inf.bytes_moved[VMM_XFER_DISK2H];
		}
	}
	for (size_t i = 0; i < shim.ndead; i++) {
		struct alloc_row *r = &rows[k++];
		r->a = shim.dead[i];
		r->h2d = r->a->h2d;
		r->d2h = r->a->d2h;
		r->h2disk = r->a->h2disk;
		r->disk2h = r->a->disk2h;
	}
	qsort(rows, k, sizeof(*rows), by_moved);
	*n = k;
	return rows;
}

static const char *first_kernel(const struct shim_alloc *a)
{
	return a->first_k < shim.nk ? shim.kstats[a->first_k].name : "-";
}

/* Lets every transfer land, so the counters are final. */
static void settle(void)
{
	FOR_DEV(d)
	if (d->vmm && vmm_sync(d->vmm) < 0)
		SP_WARN(SHIM, "report: %s", sp_last_error());
}

static void print_locked(FILE *f)
{
	if (shim.mode != SHIM_MODE_SPILL) {
		shim_base_report(f);
		return;
	}
	settle();
	char b[6][32];
	struct dev_sum t = total_sum();
	fprintf(f,
	        "spill shim: mode spill, budget %s, %" PRIu64 " operations, %" PRIu64
	        " allocations (%" PRIu64 " live)\n",
	        sp_format_size(t.budget, b[0], 32), shim.ops, shim.nseq, t.live);
	fprintf(f, "spill shim: moved h2d %s, d2h %s, host->disk %s, disk->host %s\n",
	        sp_format_size(t.moved[0], b[1], 32), sp_format_size(t.moved[1], b[2], 32),
	        sp_format_size(t.moved[2], b[3], 32), sp_format_size(t.moved[3], b[4], 32));
	if (t.period)
		fprintf(f,
		        "spill shim: policy %s: an iteration of %" PRIu64
		        " operations, repeated %" PRIu64 " times under Belady; %" PRIu64
		        " batch releases\n",
		        shim.params.shim_policy, t.period, t.cycles, t.batch_releases);
	else
		fprintf(f,
		        "spill shim: policy %s: no repeating iteration seen (LRU), %" PRIu64
		        " batch releases\n",
		        shim.params.shim_policy, t.batch_releases);
	if (__atomic_load_n(&shim.ndev, __ATOMIC_RELAXED) > 1) {
		FOR_DEV(d)
		{
			struct dev_sum x;
			memset(&x, 0, sizeof(x));
			dev_sum_add(&x, d);
			fprintf(f,
			        "spill shim: device %d: budget %s, %" PRIu64 " operations (%" PRIu64
			        " from other devices), %" PRIu64 " live allocations, moved h2d %s, "
			        "d2h %s, %" PRIu64 " batch releases",
			        d->idx, sp_format_size(x.budget, b[0], 32), x.ops, x.peer_ops,
			        x.live, sp_format_size(x.moved[0], b[1], 32),
			        sp_format_size(x.moved[1], b[2], 32), x.batch_releases);
			if (x.nchunks_made)
				fprintf(f,
				        ", %" PRIu64 " chunks the program mapped itself (%" PRIu64
				        " evictions, %" PRIu64 " restores)",
				        x.nchunks_made, x.chunk_evictions, x.chunk_restores);
			fputc('\n', f);
		}
	}
	if (t.nchunks_made)
		fprintf(f,
		        "spill shim: %" PRIu64 " chunks the program mapped itself: %" PRIu64
		        " evictions (%s out), %" PRIu64 " restores (%s in)\n",
		        t.nchunks_made, t.chunk_evictions, sp_format_size(t.chunk_d2h, b[1], 32),
		        t.chunk_restores, sp_format_size(t.chunk_h2d, b[2], 32));
	if (shim.refused)
		fprintf(f, "spill shim: %" PRIu64 " operations refused (freed memory)\n",
		        shim.refused);
	if (shim.stale_launches)
		fprintf(f,
		        "spill shim: %" PRIu64 " launches had a freed address inside a struct "
		        "parameter (passed on: a field the kernel may not read)\n",
		        shim.stale_launches);
	if (t.host_fallbacks)
		fprintf(f,
		        "spill shim: %" PRIu64 " times an evicted allocation had its host copy "
		        "mapped at its address (SPILL_SHIM_HOST_FALLBACK)\n",
		        t.host_fallbacks);
	size_t n = 0;
	struct alloc_row *rows = collect(&n);
	if (rows && n && row_total(&rows[0])) {
		fprintf(f, "%-10s %12s %12s %12s %12s  %s\n", "alloc", "bytes", "h2d", "d2h",
		        "disk i/o", "first kernel");
		for (size_t i = 0; i < n && i < 10 && row_total(&rows[i]); i++) {
			const struct alloc_row *r = &rows[i];
			fprintf(f, "#%-9" PRIu64 " %12s %12s %12s %12s  %s%s\n", r->a->seq,
			        sp_format_size(r->a->bytes, b[0], 32),
			        sp_format_size(r->h2d, b[1], 32), sp_format_size(r->d2h, b[2], 32),
			        sp_format_size(r->h2disk + r->disk2h, b[3], 32), first_kernel(r->a),
			        r->live ? "" : " (freed)");
		}
	}
	free(rows);
	struct shim_kstat *ks = malloc((shim.nk ? shim.nk : 1) * sizeof(*ks));
	if (ks && shim.nk) {
		memcpy(ks, shim.kstats, shim.nk * sizeof(*ks));
		qsort(ks, shim.nk, sizeof(*ks), kstat_by_h2d);
		fprintf(f, "%-32s %10s %10s %12s\n", "kernel", "ops", "misses", "h2d for it");
		for (uint32_t i = 0; i < shim.nk && i < 10; i++)
			if (ks[i].ops)
				fprintf(f, "%-32.32s %10" PRIu64 " %10" PRIu64 " %12s\n",
				        ks[i].name, ks[i].ops, ks[i].misses,
				        sp_format_size(ks[i].h2d, b[0], 32));
	}
	free(ks);
}

/* Every device's lock, then shim.lock. Returns the devices locked. */
static unsigned lock_report(void)
{
	unsigned set = shim_dev_lock_all();
	pthread_mutex_lock(&shim.lock);
	return set;
}

static void unlock_report(unsigned set)
{
	pthread_mutex_unlock(&shim.lock);
	shim_dev_unlock_set(set);
}

void shim_report_print(FILE *f)
{
	unsigned set = lock_report();
	if (shim.ready)
		print_locked(f);
	unlock_report(set);
}

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fprintf(f, "\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			fprintf(f, "\\u%04x", *s);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

static void json_dev(FILE *f, const struct dev_sum *x)
{
	fprintf(f,
	        "\"budget\":%" PRIu64 ",\"batch_releases\":%" PRIu64 ",\"host_fallbacks\":%" PRIu64
	        ",\"period\":%" PRIu64 ",\"repeats\":%" PRIu64 ",\"live\":%" PRIu64
	        ",\"chunks\":%" PRIu64 ",\"chunk_evictions\":%" PRIu64
	        ",\"chunk_restores\":%" PRIu64 ",\"chunk_h2d\":%" PRIu64 ",\"chunk_d2h\":%" PRIu64,
	        x->budget, x->batch_releases, x->host_fallbacks, x->period, x->cycles, x->live,
	        x->nchunks_made, x->chunk_evictions, x->chunk_restores, x->chunk_h2d, x->chunk_d2h);
}

static int json_locked(FILE *f)
{
	settle();
	struct dev_sum t = total_sum();
	fprintf(f, "{\"tool\":\"spill-shim\",\"mode\":\"%s\",", shim_mode_name(shim.mode));
	if (shim.mode != SHIM_MODE_SPILL)
		shim_base_json(f, NULL);
	fprintf(f, "\"operations\":%" PRIu64 ",\"allocations\":%" PRIu64 ",", shim.ops, shim.nseq);
	json_dev(f, &t);
	fprintf(f,
	        ",\"policy\":\"%s\",\"refused\":%" PRIu64 ",\"stale_launches\":%" PRIu64
	        ",\n\"bytes\":{\"h2d\":%" PRIu64 ",\"d2h\":%" PRIu64 ",\"host2disk\":%" PRIu64
	        ",\"disk2host\":%" PRIu64 "},\n\"devices\":[",
	        shim.mode == SHIM_MODE_SPILL ? shim.params.shim_policy : shim_mode_name(shim.mode),
	        shim.refused, shim.stale_launches, t.moved[0], t.moved[1], t.moved[2], t.moved[3]);
	int firstd = 1;
	FOR_DEV(d)
	{
		struct dev_sum x;
		memset(&x, 0, sizeof(x));
		dev_sum_add(&x, d);
		fprintf(f,
		        "%s\n{\"device\":%d,\"operations\":%" PRIu64 ",\"peer_operations\":%" PRIu64
		        ",",
		        firstd ? "" : ",", d->idx, x.ops, x.peer_ops);
		if (shim.mode != SHIM_MODE_SPILL)
			shim_base_json(f, d);
		json_dev(f, &x);
		fprintf(f,
		        ",\"bytes\":{\"h2d\":%" PRIu64 ",\"d2h\":%" PRIu64 ",\"host2disk\":%" PRIu64
		        ",\"disk2host\":%" PRIu64 "}}",
		        x.moved[0], x.moved[1], x.moved[2], x.moved[3]);
		firstd = 0;
	}
	fprintf(f, "],\n\"per_allocation\":[");
	size_t n = 0;
	struct alloc_row *rows = collect(&n);
	for (size_t i = 0; rows && i < n; i++) {
		const struct alloc_row *r = &rows[i];
		fprintf(f,
		        "%s\n{\"id\":%" PRIu64 ",\"device\":%d,\"bytes\":%zu,\"live\":%s,"
		        "\"first_kernel\":",
		        i ? "," : "", r->a->seq, r->a->dev ? r->a->dev->idx : 0, r->a->bytes,
		        r->live ? "true" : "false");
		json_str(f, first_kernel(r->a));
		fprintf(f,
		        ",\"h2d\":%" PRIu64 ",\"d2h\":%" PRIu64 ",\"host2disk\":%" PRIu64
		        ",\"disk2host\":%" PRIu64 "}",
		        r->h2d, r->d2h, r->h2disk, r->disk2h);
	}
	free(rows);
	fprintf(f, "],\n\"per_kernel\":[");
	int first = 1;
	for (uint32_t i = 0; i < shim.nk; i++) {
		const struct shim_kstat *k = &shim.kstats[i];
		if (!k->ops)
			continue;
		fprintf(f, "%s\n{\"name\":", first ? "" : ",");
		json_str(f, k->name);
		fprintf(f,
		        ",\"ops\":%" PRIu64 ",\"misses\":%" PRIu64 ",\"h2d\":%" PRIu64
		        ",\"disk2host\":%" PRIu64 "}",
		        k->ops, k->misses, k->h2d, k->disk2h);
		first = 0;
	}
	fprintf(f, "]}\n");
	return ferror(f) ? -EIO : 0;
}

int shim_report_json(FILE *f)
{
	unsigned set = lock_report();
	int rc = shim.ready ? json_locked(f) : 0;
	unlock_report(set);
	return rc;
}

/* Transfers (one lane per link) and launches (instants on their own lane). */
static int trace_locked(FILE *f)
{
	size_t cap = 1u << 16;
	struct vmm_trace_rec *tr = malloc(cap * sizeof(*tr));
	if (!tr)
		return -ENOMEM;
	double t0 = shim.t0;
	fprintf(f, "{\"traceEvents\":[\n");
	fprintf(f, "{\"ph\":\"M\",\"pid\":1,\"name\":\"process_name\",\"args\":{\"name\":\"spill "
	           "shim\"}}");
	FOR_DEV(d)
	for (size_t n = d->vmm ? vmm_trace_get(d->vmm, tr, cap, NULL) : 0, i = 0; i < n; i++) {
		const struct vmm_trace_rec *r = &tr[i];
		if (d == shim.base)
			fprintf(f, ",\n{\"ph\":\"X\",\"pid\":1,\"tid\":\"%s\",\"name\":",
			        vmm_xfer_kind_name((enum vmm_xfer_kind)r->xfer));
		else
			fprintf(f,
			        ",\n{\"ph\":\"X\",\"pid\":1,\"tid\":\"dev%d %s\",\"name\":", d->idx,
			        vmm_xfer_kind_name((enum vmm_xfer_kind)r->xfer));
		json_str(f, r->name);
		fprintf(f, ",\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"bytes\":%" PRIu64 "}}",
		        (r->t_start - t0) * 1e6, (r->t_end - r->t_start) * 1e6, r->bytes);
	}
	free(tr);
	uint64_t nl = shim.nlaunch < shim.cap_launch ? shim.nlaunch : shim.cap_launch;
	for (uint64_t i = 0; i < nl; i++) {
		const struct shim_launch_rec *l =
		    &shim.launches[(shim.nlaunch - nl + i) % shim.cap_launch];
		fprintf(f, ",\n{\"ph\":\"i\",\"s\":\"t\",\"pid\":1,\"tid\":\"launches\",\"name\":");
		json_str(f, l->k < shim.nk ? shim.kstats[l->k].name : "?");
		fprintf(f, ",\"ts\":%.3f}", (l->t - t0) * 1e6);
	}
	fprintf(f, "\n]}\n");
	return ferror(f) ? -EIO : 0;
}

int shim_trace_write(FILE *f)
{
	unsigned set = lock_report();
	int rc = shim.ready ? trace_locked(f) : 0;
	unlock_report(set);
	return rc;
}

/* path with %p replaced by the pid */
static void expand_path(const char *in, char *out, size_t n)
{
	size_t k = 0;
	for (; *in && k + 1 < n; in++) {
		if (in[0] == '%' && in[1] == 'p') {
			k += (size_t)snprintf(out + k, n - k, "%d", (int)getpid());
			in++;
		} else {
			out[k++] = *in;
		}
		if (k >= n)
			k = n - 1;
	}
	out[k] = 0;
}

static void write_file(const char *pattern, int (*fn)(FILE *), const char *what)
{
	char path[4096];
	expand_path(pattern, path, sizeof(path));
	FILE *f = fopen(path, "w");
	if (!f) {
		SP_WARN(SHIM, "cannot write the %s to %s: %s", what, path, strerror(errno));
		return;
	}
	int rc = fn(f);
	if (fclose(f) != 0 || rc < 0)
		SP_WARN(SHIM, "writing the %s to %s failed", what, path);
}

void shim_report_at_exit(void)
{
	if (!__atomic_load_n(&shim.ready, __ATOMIC_ACQUIRE))
		return;
	if (shim.params.shim_report)
		shim_report_print(stderr);
	if (*shim.params.shim_stats_json)
		write_file(shim.params.shim_stats_json, shim_report_json, "shim statistics");
	if (*shim.params.shim_trace)
		write_file(shim.params.shim_trace, shim_trace_write, "shim trace");
}

/* SIGUSR1: the handler only writes to a pipe; a thread prints the report. */
static int sig_pipe[2] = {-1, -1};

static void on_sigusr1(int sig)
{
	int saved = errno;
	char c = 1;
	if (write(sig_pipe[1], &c, 1) < 0) {
		/* full pipe: a report is pending anyway */
	}
	errno = saved;
}

static void *report_thread(void *arg)
{
	char c;
	for (;;) {
		ssize_t r = read(sig_pipe[0], &c, 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return NULL;
		shim_report_print(stderr);
	}
}

void shim_report_start_signal(void)
{
	struct sigaction old;
	if (sigaction(SIGUSR1, NULL, &old) < 0 || old.sa_handler != SIG_DFL)
		return; /* the program handles SIGUSR1 itself */
	if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
		return;
	int fl = fcntl(sig_pipe[0], F_GETFL);
	fcntl(sig_pipe[0], F_SETFL, fl & ~O_NONBLOCK);
	pthread_t t;
	sigset_t all, prev;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &prev); /* the thread takes no signals */
	int rc = pthread_create(&t, NULL, report_thread, NULL);
	pthread_sigmask(SIG_SETMASK, &prev, NULL);
	if (rc != 0)
		return;
	pthread_detach(t);
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_sigusr1;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR1, &sa, NULL);
}

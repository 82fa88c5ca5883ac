/* train/trace.c — `spill train --trace FILE`: a Chrome / Perfetto trace of the
 * run (Trace Event Format JSON; open in ui.perfetto.dev or chrome://tracing).
 * One track per device stream — compute (tasks), collectives, H2D, D2H, P2P
 * in — one for the CPU's tasks and one per disk direction; tasks and transfers
 * are slices named after their task or object, on the backend's clock
 * (virtual time on the model backend). Tasks are collected step by step from
 * the program's start and end times, transfers from the vmm's trace ring at
 * the end (the newest 1M). */
#include "train/internal.h"

#include "common/json.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MAX_EVENTS (4u << 20)

int tr_trace_init(struct tr_trace *t, struct rt_ctx *rt)
{
	memset(t, 0, sizeof(*t));
	t->t0 = dev_now(rt->dev);
	return 0;
}

void tr_trace_free(struct tr_trace *t)
{
	free(t->ev);
	memset(t, 0, sizeof(*t));
}

void tr_trace_step(struct tr_trace *t, const struct run *r, double t0, int nsteps)
{
	const struct rt_prog *p = &r->run->prog;
	int nd = r->rt->ndev;
	for (int i = 0; i < p->ntask; i++) {
		int tg = p->task[i].tg_task, step = tg >= 0 ? r->run->g.task[tg].step : 0;
		if (r->t_end[i] < t0 || step >= nsteps || t->n >= MAX_EVENTS)
			continue; /* before the block, or of a step it skipped */
		if (t->n == t->cap) {
			size_t nc = t->cap ? 2 * t->cap : 4096;
			struct tr_trace_ev *ne = realloc(t->ev, nc * sizeof(*ne));
			if (!ne)
				return; /* a shorter trace, not a failed run */
			t->ev = ne;
			t->cap = nc;
		}
		struct tr_trace_ev *e = &t->ev[t->n++];
		int q = p->ran_on[i];
		e->t0 = r->t_start[i];
		e->t1 = r->t_end[i];
		e->lane = q >= nd || q < 0 ? 2 * DEV_MAX
		                           : 2 * q + !!(p->task[i].flags & RT_TASK_COLLECTIVE);
		e->task = i;
		/* the block's steps end at iter: task i's is its step of the program */
		e->step = r->run->iter - nsteps + 1 + step;
		snprintf(e->name, sizeof(e->name), "%s", p->task[i].name);
	}
}

/* Transfer lanes: 100 + 4d + {H2D 0, D2H 1, P2P in 2}; the disk 200 + direction. */
static int xfer_lane(const struct vmm_trace_rec *x)
{
	if (x->dst == VMM_DISK)
		return 200;
	if (x->src == VMM_DISK)
		return 201;
	if (x->src == VMM_HOST)
		return 100 + 4 * x->dst;
	if (x->dst == VMM_HOST)
		return 101 + 4 * x->src;
	return 102 + 4 * x->dst;
}

static void lane_name(FILE *f, int tid, const char *name)
{
	fprintf(
	    f,
	    ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": %d, \"args\": "
	    "{\"name\": \"%s\"}},\n{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": 1, "
	    "\"tid\": %d, \"args\": {\"sort_index\": %d}}",
	    tid, name, tid, tid);
}

int tr_trace_write(struct tr_trace *t, const struct run *r, const char *path)
{
	size_t cap = 1u << 20, nx = 0;
	uint64_t total = 0;
	struct vmm_trace_rec *x = malloc(cap * sizeof(*x));
	if (!x)
		return sp_error(-ENOMEM, "trace: out of memory");
	nx = vmm_trace_get(r->rt->vmm, x, cap, &total);
	char tmp[4096];
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	FILE *f = fopen(tmp, "w");
	if (!f) {
		free(x);
		return sp_error(-errno, "--trace %s: cannot write: %s", path, strerror(errno));
	}
	fprintf(f, "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"plan\": ");
	sp_json_write_str(f, r->plan_name);
	fprintf(f,
	        ", \"tasks\": %zu, \"transfers\": %zu, \"transfers_recorded\": %llu},\n"
	        "\"traceEvents\": [\n{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 1, "
	        "\"args\": {\"name\": \"spill train\"}}",
	        t->n, nx, (unsigned long long)total);
	int nd = r->rt->ndev;
	char name[64];
	for (int d = 0; d < nd; d++) {
		snprintf(name, sizeof(name), "gpu%d compute", d);
		lane_name(f, 2 * d, name);
		snprintf(name, sizeof(name), "gpu%d collectives", d);
		lane_name(f, 2 * d + 1, name);
		snprintf(name, sizeof(name), "gpu%d H2D", d);
		lane_name(f, 100 + 4 * d, name);
		snprintf(name, sizeof(name), "gpu%d D2H", d);
		lane_name(f, 101 + 4 * d, name);
		snprintf(name, sizeof(name), "gpu%d P2P in", d);
		lane_name(f, 102 + 4 * d, name);
	}
	lane_name(f, 2 * DEV_MAX, "cpu");
	lane_name(f, 200, "host->disk");
	lane_name(f, 201, "disk->host");
	for (size_t i = 0; i < t->n; i++) {
		const struct tr_trace_ev *e = &t->ev[i];
		fprintf(f, ",\n{\"name\": ");
		sp_json_write_str(f, e->name);
		fprintf(
		    f,
		    ", \"cat\": \"task\", \"ph\": \"X\", \"pid\": 1, \"tid\": %d, \"ts\": %.3f, "
		    "\"dur\": %.3f, \"args\": {\"step\": %d, \"task\": %d}}",
		    e->lane, (e->t0 - t->t0) * 1e6, (e->t1 - e->t0) * 1e6, e->step, e->task);
	}
	for (size_t i = 0; i < nx; i++) {
		fprintf(f, ",\n{\"name\": ");
		sp_json_write_str(f, x[i].name);
		fprintf(f,
		        ", \"cat\": \"transfer\", \"ph\": \"X\", \"pid\": 1, \"tid\": %d, \"ts\": "
		        "%.3f, "
		        "\"dur\": %.3f, \"args\": {\"bytes\": %llu}}",
		        xfer_lane(&x[i]), (x[i].t_start - t->t0) * 1e6,
		        (x[i].t_end - x[i].t_start) * 1e6, (unsigned long long)x[i].bytes);
	}
	fprintf(f, "\n]}\n");
	free(x);
	int bad = ferror(f);
	if (fclose(f) != 0 || bad) {
		remove(tmp);
		return sp_error(-EIO, "--trace %s: write failed", path);
	}
	if (rename(tmp, path) != 0) {
		int e = errno;
		remove(tmp);
		return sp_error(-e, "--trace %s: %s", path, strerror(e));
	}
	fprintf(r->out, "trace: %s (%zu tasks, %zu transfers)\n", path, t->n, nx);
	return 0;
}

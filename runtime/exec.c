/* runtime/exec.c — the executor: one iteration of a program, event-driven.
 *
 * Queues: one per device and one for the CPU. A task fixed to a device
 * (constrained) waits in that device's queue, in program order; the others
 * are bound late: a device with room takes the first ready one whose chain
 * lives there (the device holding its stashed or boundary input), else steals
 * the first ready chain start (a task with no such input) whose predicted
 * device is busy. A task is ready when every dependency has been issued: the
 * dependency's done event orders its stream (no host wait). Issuing a task
 * acquires its objects on its place (those already resident first, so that
 * bringing the others never evicts them), makes its stream wait on the ready
 * events, calls its callback, records its done event and releases the objects
 * with it. At most `window` tasks per queue are in flight. Ahead of each
 * device's queue, the inputs of `lookahead` tasks are prefetched.
 * After each task the vmm gets Belady hints (next use of each object, and per
 * place); when the task completes its dead contents (next use a pure write)
 * are discarded, and updated state is written back early. The host thread
 * sleeps in dev_event_wait_any on the in-flight tasks when nothing can be
 * issued; on the model backend that is exactly the first completion.
 * All-reduce members (one per device) are issued together when all are at the
 * head of their queues, as one rt_allreduce_sum.
 */
#include "runtime/internal.h"

#include "common/log.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

enum { T_WAIT = 0, T_ISSUED = 1, T_DONE = 2 };

struct xq {                   /* one queue: a device or the CPU */
	int *list, len, pos;  /* constrained tasks in program order */
	int *fl, flhead, fln; /* in flight, oldest first (ring of window entries) */
};

struct xs {
	struct rt_ctx *rt;
	struct rt_prog *p;
	int iter, nq, cpu_q, window;
	uint64_t base;
	uint8_t *st, *pf;            /* per task: state; inputs prefetched */
	uint32_t *pf_seen, pf_stamp; /* per object: counted in prefetch's footprint */
	uint8_t *comm;               /* per task: ran on its device's collective stream */
	int *cnt;         /* per rank key (rt_rank_key): references issued this iteration */
	uint8_t *written; /* per object: written this iteration (accumulating replicas) */
	struct xq q[DEV_MAX + 1];
	int *ulist, ulen, upos; /* late-bound tasks in program order */
	uint8_t *start;         /* per task: a late-bound chain start (no chain input) */
	uint8_t *pays;          /* per chain start: taking it over can pay (chain_pays) */
	int backlog[DEV_MAX];   /* per device: chain starts predicted there, not issued */
	int next;               /* ordered mode: the first task not issued */
	int *pd, npd, cappd;    /* discards waiting for a transfer to land: (task, ref) */
	int ndone, err;
	void **ptr; /* scratch: pointers of one task (a set's: maxref per member) */
	int maxref;
	int *coll_first; /* per collective group: its member with the lowest index */
	int ncoll;
	int hints; /* Belady hints from this program's order (off for external drivers) */
};

static int task_queue(const struct xs *x, int dev)
{
	return dev == RT_HOST ? x->cpu_q : dev;
}

static struct dev_stream *queue_stream(const struct xs *x, int q)
{
	return q == x->cpu_q ? x->rt->cpu : x->rt->compute[q];
}

static int queue_dev(const struct xs *x, int q)
{
	return q == x->cpu_q ? RT_HOST : q;
}

int rt_exec_task_device(const struct rt_prog *p, int task)
{
	if (!p || task < 0 || task >= p->ntask || !p->ran_on)
		return -1;
	return p->ran_on[task];
}

/* ---- setup ---------------------------------------------------------------------- */

/* The refs as the program built them (bind_refs rebinds them per iteration). */
static void restore_refs(struct rt_prog *p)
{
	if (p->ref_orig && p->nrefpool)
		memcpy(p->refpool, p->ref_orig, p->nrefpool * sizeof(*p->refpool));
}

static void xs_free(struct xs *x)
{
	for (int q = 0; q < x->nq; q++) {
		free(x->q[q].list);
		free(x->q[q].fl);
	}
	free(x->st);
	free(x->pf);
	free(x->comm);
	free(x->cnt);
	free(x->written);
	free(x->pf_seen);
	restore_refs(x->p);
	free(x->ulist);
	free(x->start);
	free(x->pays);
	free(x->ptr);
	free(x->coll_first);
	free(x->pd);
}

/* Marks the late-bound tasks that begin a chain: they read no stashed or
 * boundary contents an earlier task of the iteration wrote (chain_home below
 * finds where such contents are at run time). seen: scratch, one per object. */
static void mark_chain_starts(struct xs *x, uint8_t *seen)
{
	const struct rt_prog *p = x->p;
	for (int t = 0; t < p->ntask; t++) {
		const struct rt_task *tk = &p->task[t];
		int start = 1;
		for (int r = 0; r < tk->nref; r++) {
			const struct rt_obj *o = &p->obj[tk->ref[r].obj];
			if (tk->ref[r].mode != VMM_OVERWRITE && !o->input && seen[tk->ref[r].obj] &&
			    (o->kind == VMM_KIND_STASH || o->kind == VMM_KIND_INTERMEDIATE))
				start = 0;
		}
		for (int r = 0; r < tk->nref; r++)
			if (tk->ref[r].mode != VMM_READ)
				seen[tk->ref[r].obj] = 1;
		x->start[t] = (uint8_t)start;
	}
}

/* Marks the chain starts a busy device may hand over: those whose chain (the
 * late-bound tasks reading what it wrote into stashes and boundaries) takes
 * longer on its predicted device than moving the accumulating replicas it adds
 * into — gradients stay with their own replica (bind_refs), so a chain run
 * elsewhere brings them over and back. With the profile's rates; every start
 * under exec.steal_eager. Returns 0 or -ENOMEM. */
static int chain_pays(struct xs *x)
{
	const struct rt_prog *p = x->p;
	int n = p->ntask;
	double *work = calloc((size_t)n * 2, sizeof(double));     /* flops, accum bytes */
	int *chain = malloc(((size_t)p->nobj + 1) * sizeof(int)); /* per object: its writer's */
	if (!work || !chain) {
		free(work);
		free(chain);
		return sp_error(-ENOMEM, "executor: chain costs of %d tasks", n);
	}
	for (int o = 0; o < p->nobj; o++)
		chain[o] = -1;
	for (int t = 0; t < n; t++) {
		const struct rt_task *tk = &p->task[t];
		int c = x->start[t] ? t : -1;
		for (int r = 0; r < tk->nref && c < 0; r++)
			if (tk->ref[r].mode != VMM_OVERWRITE)
				c = chain[tk->ref[r].obj];
		if (c < 0 || tk->constrained)
			continue;
		work[2 * c] += tk->flops;
		for (int r = 0; r < tk->nref; r++) {
			const struct rt_obj *o = &p->obj[tk->ref[r].obj];
			if (tk->ref[r].mode == VMM_READ)
				continue;
			if (o->accum)
				work[2 * c + 1] += (double)o->bytes;
			else if (o->kind == VMM_KIND_STASH || o->kind == VMM_KIND_INTERMEDIATE)
				chain[tk->ref[r].obj] = c;
		}
	}
	for (int t = 0; t < n; t++) {
		if (!x->start[t])
			continue;
		int d = p->task[t].dev, other = d == 0 && x->rt->ndev > 1 ? 1 : 0;
		struct dev_info di;
		double bw = dev_link_bw(x->rt->dev, d, other);
		if (bw <= 0)
			bw = dev_host_link_bw(x->rt->dev) / 2; /* through the host */
		double compute = dev_info(x->rt->dev, d, &di) == 0 && di.flops > 0
		                     ? work[2 * t] / (di.flops * (di.speed > 0 ? di.speed : 1))
		                     : 0;
		double move = bw > 0 ? 2 * work[2 * t + 1] / bw : 0;
		x->pays[t] = x->rt->cfg.exec.steal_eager || compute > move;
	}
	free(work);
	free(chain);
	return 0;
}

static int xs_init(struct xs *x, struct rt_ctx *rt, struct rt_prog *p, int iter, int window)
{
	memset(x, 0, sizeof(*x));
	x->rt = rt;
	x->p = p;
	x->iter = iter;
	x->base = (uint64_t)iter * (uint64_t)p->ntask;
	x->nq = rt->ndev + 1;
	x->cpu_q = rt->ndev;
	x->window = window;
	x->hints = rt->cfg.exec.hints;
	int n = p->ntask, maxref = 1, maxcoll = -1;
	x->st = calloc((size_t)n, 1);
	x->pf = calloc((size_t)n, 1);
	x->comm = calloc((size_t)n, 1);
	x->cnt = calloc((size_t)(p->nobj + p->nrset) + 1, sizeof(int));
	x->written = calloc((size_t)p->nobj + 1, 1);
	x->pf_seen = calloc((size_t)p->nobj + 1, sizeof(uint32_t));
	restore_refs(p);
	x->ulist = malloc((size_t)n * sizeof(int));
	for (int i = 0; i < n; i++) {
		if (p->task[i].nref > maxref)
			maxref = p->task[i].nref;
		if ((p->task[i].flags & RT_TASK_COLLECTIVE) && p->task[i].coll_group > maxcoll)
			maxcoll = p->task[i].coll_group;
	}
	x->ptr = malloc((size_t)maxref * sizeof(void *) * (size_t)(rt->ndev + 1));
	x->maxref = maxref;
	x->ncoll = maxcoll + 1;
	x->coll_first = malloc((size_t)(x->ncoll + 1) * sizeof(int));
	x->start = calloc((size_t)n, 1);
	x->pays = calloc((size_t)n, 1);
	if (!x->st || !x->pf || !x->comm || !x->cnt || !x->ulist || !x->ptr || !x->coll_first ||
	    !x->start || !x->pays || !x->written || !x->pf_seen)
		return sp_error(-ENOMEM, "executor: state for %d tasks", n);
	for (int g = 0; g < x->ncoll; g++)
		x->coll_first[g] = -1;
	for (int q = 0; q < x->nq; q++) {
		x->q[q].list = malloc((size_t)n * sizeof(int));
		x->q[q].fl = malloc((size_t)x->window * sizeof(int));
		if (!x->q[q].list || !x->q[q].fl)
			return sp_error(-ENOMEM, "executor: queues for %d tasks", n);
	}
	int late = rt->cfg.exec.late_binding;
	mark_chain_starts(x, x->written); /* scratch here; cleared below */
	for (int i = 0; i < n; i++) {
		const struct rt_task *t = &p->task[i];
		if (t->flags & RT_TASK_COLLECTIVE) {
			int g = t->coll_group;
			if (g < 0)
				return sp_error(-EINVAL, "task %d (%s): collective group %d", i,
				                t->name, g);
			if (x->coll_first[g] < 0)
				x->coll_first[g] = i;
		}
		if (p->skip && p->skip[i]) { /* not run this time: counts as done */
			x->st[i] = T_DONE;
			x->ndone++;
			x->start[i] = 0;
			continue;
		}
		if (!t->constrained && late && t->dev != RT_HOST && !rt->cfg.exec.ordered) {
			x->ulist[x->ulen++] = i;
			if (x->start[i])
				x->backlog[t->dev]++;
		} else {
			struct xq *q = &x->q[task_queue(x, t->dev)];
			q->list[q->len++] = i;
			x->start[i] = 0;
		}
	}
	memset(x->written, 0, (size_t)p->nobj);
	if (x->ulen)
		SP_CHECK(chain_pays(x));
	if (p->t_start && !p->ev_start) { /* timed: a start event per task */
		p->ev_start = calloc((size_t)n, sizeof(*p->ev_start));
		if (!p->ev_start)
			return sp_error(-ENOMEM, "executor: start events for %d tasks", n);
		for (int i = 0; i < n; i++)
			SP_CHECK(dev_event_create(rt->dev, &p->ev_start[i]));
	}
	return 0;
}

/* ---- hints ----------------------------------------------------------------------- */

static uint64_t abs_pos(const struct xs *x, int pos)
{
	return pos < 0 ? VMM_NO_HINT : x->base + (uint64_t)pos;
}

static int set_initial_hints(struct xs *x)
{
	struct rt_prog *p = x->p;
	struct vmm *v = x->rt->vmm;
	if (!x->hints)
		return 0;
	size_t stride = (size_t)p->nplaces + 1;
	for (int o = 0; o < p->nobj; o++) {
		if (!p->obj[o].vid)
			continue;
		const int *fu = &p->first_use[(size_t)o * stride];
		SP_CHECK(vmm_hint(v, p->obj[o].vid, abs_pos(x, fu[0])));
		if (!x->rt->cfg.exec.place_hints)
			continue;
		for (int s = 0; s < p->nplaces; s++) {
			int place = s == p->nplaces - 1 ? VMM_HOST : s;
			if (place != VMM_HOST && place >= x->rt->ndev)
				continue;
			uint64_t h = fu[1 + s] < 0 ? VMM_HINT_NEVER : abs_pos(x, fu[1 + s]);
			SP_CHECK(vmm_hint_at(v, p->obj[o].vid, place, h));
		}
	}
	return 0;
}

static int set_hints(struct xs *x, int t, int q)
{
	struct rt_prog *p = x->p;
	struct vmm *v = x->rt->vmm;
	const struct rt_task *tk = &p->task[t];
	if (!x->hints)
		return 0;
	for (int r = 0; r < tk->nref; r++) {
		uint64_t vid = p->obj[tk->ref[r].obj].vid;
		if (!vid)
			continue;
		SP_CHECK(vmm_hint(v, vid, x->base + p->next_pos[t][r]));
		if (x->rt->cfg.exec.place_hints) {
			uint64_t np = p->next_place[t][r];
			/* the table is per predicted place; a late-bound task ran elsewhere */
			if (queue_dev(x, q) == tk->dev || q == task_queue(x, tk->dev))
				SP_CHECK(
				    vmm_hint_at(v, vid, rt_place(queue_dev(x, q)),
				                np == VMM_NO_HINT ? VMM_HINT_NEVER : x->base + np));
		}
	}
	return 0;
}

/* ---- dead contents and completion --------------------------------------------------- */

/* Is ref r of task t dead after t (its next use writes it without reading, or
 * it is an input read for the last time), with every earlier reference of
 * the object issued and its next writer not yet? */
static int ref_dead(const struct xs *x, int t, int r)
{
	const struct rt_prog *p = x->p;
	const struct rt_task *tk = &p->task[t];
	const struct rt_obj *o = &p->obj[tk->ref[r].obj];
	if (!o->vid || o->keep || !x->rt->cfg.exec.discard)
		return 0;
	uint64_t nx = p->next_pos[t][r];
	int wraps = nx >= (uint64_t)p->ntask;
	if (p->next_reads[t][r] && !(o->input && wraps))
		return 0;
	if (!wraps && x->st[nx] != T_WAIT)
		return 0;
	return x->cnt[rt_rank_key(p, tk->ref[r].obj)] >= (int)p->ref_rank[t][r];
}

/* Right after a task's release: discard what it read last, in stream order
 * (the space is reused after its done event). A copy still arriving is
 * retried once its transfer lands (retry_discards), at the latest when the
 * task completes. */
static void discard_after_issue(struct xs *x, int t)
{
	struct rt_prog *p = x->p;
	const struct rt_task *tk = &p->task[t];
	for (int r = 0; r < tk->nref; r++) {
		if (!ref_dead(x, t, r))
			continue;
		const struct rt_obj *o = &p->obj[tk->ref[r].obj];
		int rc = vmm_discard_if_idle(x->rt->vmm, o->vid);
		if (rc == 0) {
			x->rt->st.discards++;
		} else if (rc == -EAGAIN) {
			if (x->npd == x->cappd) {
				int nc = x->cappd ? 2 * x->cappd : 64;
				int *np = realloc(x->pd, (size_t)nc * 2 * sizeof(int));
				if (!np)
					continue; /* done at completion instead */
				x->pd = np;
				x->cappd = nc;
			}
			x->pd[2 * x->npd] = t;
			x->pd[2 * x->npd + 1] = r;
			x->npd++;
		} else {
			SP_INFO(RT, "discard %s: %s", o->name, sp_last_error());
		}
	}
}

static void retry_discards(struct xs *x)
{
	int k = 0;
	for (int i = 0; i < x->npd; i++) {
		int t = x->pd[2 * i], r = x->pd[2 * i + 1], keep = 0;
		const struct rt_obj *o = &x->p->obj[x->p->task[t].ref[r].obj];
		if (x->st[t] != T_DONE && ref_dead(x, t, r) && vmm_obj_where(x->rt->vmm, o->vid)) {
			int rc = vmm_discard_if_idle(x->rt->vmm, o->vid);
			if (rc == 0)
				x->rt->st.discards++;
			keep = rc == -EAGAIN;
		}
		if (keep) {
			x->pd[2 * k] = t;
			x->pd[2 * k + 1] = r;
			k++;
		}
	}
	x->npd = k;
}

/* An updated object is written back early only if it has been evicted before
 * (it came to a device again, or went down): where everything fits, the copy
 * stays resident and writing it back would be pure traffic. */
static int was_evicted(struct vmm *v, uint64_t vid)
{
	struct vmm_obj_info in;
	if (vmm_obj_info(v, vid, &in) < 0)
		return 0;
	return in.moves[VMM_XFER_D2H] > 0 || in.moves[VMM_XFER_H2D] > 1;
}

static void complete(struct xs *x, int t)
{
	struct rt_prog *p = x->p;
	const struct rt_task *tk = &p->task[t];
	struct vmm *v = x->rt->vmm;
	x->st[t] = T_DONE;
	x->ndone++;
	if (p->t_end && dev_event_time(p->ev[t], &p->t_end[t]) < 0)
		p->t_end[t] = dev_now(x->rt->dev);
	if (p->t_start && dev_event_time(p->ev_start[t], &p->t_start[t]) < 0)
		p->t_start[t] = p->t_end ? p->t_end[t] : 0;
	for (int r = 0; r < tk->nref; r++) {
		const struct rt_obj *o = &p->obj[tk->ref[r].obj];
		if (!o->vid)
			continue;
		if (ref_dead(x, t, r)) {
			if (vmm_obj_where(v, o->vid)) { /* not discarded at issue */
				int rc = vmm_discard(v, o->vid);
				if (rc < 0)
					SP_INFO(RT, "discard %s: %s", o->name, sp_last_error());
				else
					x->rt->st.discards++;
			}
		} else if ((tk->flags & RT_TASK_UPDATE) && x->rt->cfg.exec.eager_writeback &&
		           tk->ref[r].mode != VMM_READ && was_evicted(v, o->vid)) {
			int rc = vmm_writeback(v, o->vid, 0);
			if (rc < 0)
				SP_INFO(RT, "write-back %s: %s", o->name, sp_last_error());
			else
				x->rt->st.eager_writebacks++;
		}
	}
}

/* ---- issue ----------------------------------------------------------------------- */

static int deps_issued(const struct xs *x, int t)
{
	const struct rt_task *tk = &x->p->task[t];
	for (int d = 0; d < tk->ndep; d++)
		if (x->st[tk->dep[d]] == T_WAIT)
			return 0;
	return 1;
}

/* Makes stream s (queue q's compute stream, or its collective stream when
 * comm) wait for t's dependencies not complete and not earlier on s itself. */
static int wait_deps(struct xs *x, int t, int q, int comm)
{
	const struct rt_task *tk = &x->p->task[t];
	struct dev_stream *s = comm ? x->rt->comm[q] : queue_stream(x, q);
	for (int d = 0; d < tk->ndep; d++) {
		int dt = tk->dep[d];
		if (x->st[dt] == T_DONE || (x->p->ran_on[dt] == q && x->comm[dt] == comm))
			continue;
		SP_CHECK(dev_stream_wait_event(s, x->p->ev[dt]));
	}
	return 0;
}

static int enomem_message(struct xs *x, int t, int q, int rc)
{
	char a[32], b[32];
	int worst;
	uint64_t need = 0, min = rt_prog_min_budget(x->p, x->rt->vmm, &worst);
	const struct rt_task *tk = &x->p->task[t];
	for (int r = 0; r < tk->nref; r++) {
		uint64_t ob = x->p->obj[tk->ref[r].obj].bytes;
		need += q == x->cpu_q || !ob ? ob : vmm_device_footprint(x->rt->vmm, ob);
	}
	char msg[SP_ERROR_MSG_MAX];
	snprintf(msg, sizeof(msg), "%s", sp_last_error());
	uint64_t hused = 0, hcap = 0;
	if (q == x->cpu_q && vmm_place_usage(x->rt->vmm, VMM_HOST, &hused, &hcap) == 0)
		/* the host pool, not a device budget: say so (it fills with other
		 * copies in flight and its holes; a device budget does not help) */
		return sp_error(rc,
		                "task %d (%s) needs %s on the host and does not fit (%s); the "
		                "host pool (%s) must hold it besides the copies in use: a larger "
		                "one (SPILL_HOST_MEM) or smaller packs",
		                t, tk->name, sp_format_size(need, a, sizeof(a)), msg,
		                sp_format_size(hcap, b, sizeof(b)));
	return sp_error(rc,
	                "task %d (%s) needs %s on device %d and does not fit (%s); the smallest "
	                "device budget this plan can run in is about %s (task %d, %s; "
	                "SPILL_VMM_DEVICE_MEM or a plan with smaller packs or microbatches)",
	                t, tk->name, sp_format_size(need, a, sizeof(a)), q, msg,
	                sp_format_size(min, b, sizeof(b)), worst,
	                worst >= 0 ? x->p->task[worst].name : "?");
}

/* Acquires task t's objects on place in the given order (ord[i] = ref index),
 * skipping (pass 0) those not resident when resident_first. ptr[r] for ref r.
 * On failure releases what it got and returns the vmm's error. */
static int acquire_order(struct xs *x, int t, int q, void **ptr, const int *ord, int resident_first,
                         struct dev_stream *s)
{
	struct rt_prog *p = x->p;
	struct vmm *v = x->rt->vmm;
	const struct rt_task *tk = &p->task[t];
	int place = rt_place(queue_dev(x, q));
	uint32_t bit = place == VMM_HOST ? VMM_INFO_HOST : 1u << place;
	uint8_t got[tk->nref > 0 ? tk->nref : 1];
	memset(got, 0, sizeof(got));
	int rc = 0;
	for (int pass = resident_first ? 0 : 1; pass < 2 && !rc; pass++)
		for (int i = 0; i < tk->nref && !rc; i++) {
			int r = ord[i];
			const struct rt_obj *o = &p->obj[tk->ref[r].obj];
			if (got[r])
				continue;
			if (!o->vid) {
				ptr[r] = NULL;
				got[r] = 2;
				continue;
			}
			if (pass == 0 && !(vmm_obj_where(v, o->vid) & bit))
				continue;
			struct dev_event *ready = NULL;
			rc = vmm_acquire(v, o->vid, place, tk->ref[r].mode, &ptr[r], &ready);
			if (rc == 0) {
				got[r] = 1;
				if (ready)
					rc = dev_stream_wait_event(s, ready);
			}
		}
	if (rc == 0)
		return 0;
	char msg[SP_ERROR_MSG_MAX];
	snprintf(msg, sizeof(msg), "%s", sp_last_error());
	for (int r = 0; r < tk->nref; r++)
		if (got[r] == 1 && vmm_release(v, p->obj[tk->ref[r].obj].vid, place, NULL) < 0)
			SP_WARN(RT, "release after a failed acquire: %s", sp_last_error());
	return sp_error(rc, "%s", msg);
}

static const struct rt_prog *sort_prog;
static const struct rt_task *sort_task;
static int by_size_desc(const void *a, const void *b)
{
	uint64_t x = sort_prog->obj[sort_task->ref[*(const int *)a].obj].bytes;
	uint64_t y = sort_prog->obj[sort_task->ref[*(const int *)b].obj].bytes;
	return x < y ? 1 : x > y ? -1 : *(const int *)a - *(const int *)b;
}

/* Acquires task t's objects: those already resident first, so that bringing
 * the others never evicts them. When that fails for room although the task
 * fits the place (its pinned objects split the pool), the place is emptied
 * of everything else and the objects are acquired largest first. The host
 * pool is emptied the same way, of what can leave it: a copy with no other
 * (no disk tier, or a full one) or in use stays, and the retry may still fit
 * around it. */
static int acquire_all_on(struct xs *x, int t, int q, void **ptr, struct dev_stream *s)
{
	struct rt_prog *p = x->p;
	const struct rt_task *tk = &p->task[t];
	int ord[tk->nref > 0 ? tk->nref : 1];
	for (int i = 0; i < tk->nref; i++)
		ord[i] = i;
	int rc = acquire_order(x, t, q, ptr, ord, 1, s);
	if (rc != -ENOMEM)
		return rc;
	struct vmm *v = x->rt->vmm;
	int place = rt_place(queue_dev(x, q));
	uint64_t need = 0, used, cap;
	for (int r = 0; r < tk->nref; r++)
		need += p->obj[tk->ref[r].obj].bytes;
	if (vmm_place_usage(v, place, &used, &cap) < 0 || need > cap)
		return enomem_message(x, t, q, rc);
	uint32_t bit = place == VMM_HOST ? VMM_INFO_HOST : 1u << place;
	SP_INFO(RT, "task %d (%s): %s fragmented; emptying it", t, tk->name,
	        place == VMM_HOST ? "the host pool" : "a device");
	for (int o = 0; o < p->nobj; o++)
		if (p->obj[o].vid && (vmm_obj_where(v, p->obj[o].vid) & bit)) {
			int e = vmm_evict(v, p->obj[o].vid, place);
			/* a host copy that cannot be written down stays where it is */
			int stays = place == VMM_HOST && (e == -ENOMEM || e == -ENOSPC);
			if (e < 0 && e != -EBUSY && !stays)
				return e;
		}
	SP_CHECK(vmm_sync(v)); /* a failed transfer is the run's error, not lost here */
	sort_prog = p;
	sort_task = tk;
	qsort(ord, (size_t)tk->nref, sizeof(int), by_size_desc);
	rc = acquire_order(x, t, q, ptr, ord, 0, s);
	return rc == -ENOMEM ? enomem_message(x, t, q, rc) : rc;
}

static int acquire_all(struct xs *x, int t, int q, void **ptr)
{
	return acquire_all_on(x, t, q, ptr, queue_stream(x, q));
}

static int release_all(struct xs *x, int t, int q, struct dev_event *done)
{
	struct rt_prog *p = x->p;
	const struct rt_task *tk = &p->task[t];
	int place = rt_place(queue_dev(x, q)), rc = 0;
	for (int r = 0; r < tk->nref; r++) {
		uint64_t vid = p->obj[tk->ref[r].obj].vid;
		int e = vid ? vmm_release(x->rt->vmm, vid, place, done) : 0;
		if (e < 0 && !rc)
			rc = e;
	}
	return rc;
}

static void push_inflight(struct xs *x, int q, int t)
{
	struct xq *qq = &x->q[q];
	const struct rt_task *tk = &x->p->task[t];
	for (int r = 0; r < tk->nref; r++)
		x->cnt[rt_rank_key(x->p, tk->ref[r].obj)]++;
	qq->fl[(qq->flhead + qq->fln) % x->window] = t;
	qq->fln++;
}

/* Binds task t's references to queue q: a read-only replica of another
 * device becomes q's (a late-bound task reads the copy where it runs), and an
 * accumulating replica is overwritten by the iteration's first writer, added
 * to by the later ones. An accumulating replica is never rebound: a late-bound
 * task adds into the replica the program names (its microbatch's), which the
 * vmm brings to q, so every sum keeps the program's order (DESIGN §9.1) —
 * wherever and whenever its parts ran. */
static void bind_refs(struct xs *x, int t, int q)
{
	struct rt_prog *p = x->p;
	struct rt_task *tk = &p->task[t];
	int dev = queue_dev(x, q);
	for (int r = 0; r < tk->nref; r++) {
		struct rt_ref *f = &tk->ref[r];
		const struct rt_obj *o = &p->obj[f->obj];
		if (o->rset < 0)
			continue;
		if (!o->accum && dev >= 0 && dev != tk->dev &&
		    p->rset[o->rset * DEV_MAX + dev] >= 0)
			f->obj = p->rset[o->rset * DEV_MAX + dev];
		if (p->obj[f->obj].accum && f->mode != VMM_READ) {
			f->mode = x->written[f->obj] ? VMM_WRITE : VMM_OVERWRITE;
			x->written[f->obj] = 1;
		}
	}
}

static int issue(struct xs *x, int t, int q)
{
	struct rt_prog *p = x->p;
	bind_refs(x, t, q);
	const struct rt_task *tk = &p->task[t];
	struct dev_stream *s = queue_stream(x, q);
	SP_CHECK(wait_deps(x, t, q, 0));
	SP_CHECK(acquire_all(x, t, q, x->ptr));
	if (p->t_start)
		SP_CHECK(dev_event_record(p->ev_start[t], s));
	struct rt_launch l = {.rt = x->rt,
	                      .s = s,
	                      .dev = queue_dev(x, q),
	                      .task = tk,
	                      .ptr = x->ptr,
	                      .iter = x->iter};
	int rc = tk->fn(&l, tk->arg);
	if (rc < 0)
		sp_error_context("task %d (%s) on %s %d", t, tk->name,
		                 q == x->cpu_q ? "the CPU" : "device", q);
	/* the done event orders every later use even when the callback failed
	 * half-way: what it queued completes before anything reuses the memory */
	int rc2 = dev_event_record(p->ev[t], s);
	int rc3 = release_all(x, t, q, rc2 == 0 ? p->ev[t] : NULL);
	if (rc2 < 0 && rc3 == 0 && dev_stream_sync(s) < 0)
		SP_WARN(RT, "%s", sp_last_error());
	if (rc == 0)
		rc = rc2 < 0 ? rc2 : rc3;
	x->st[t] = T_ISSUED;
	if (x->start[t])
		x->backlog[tk->dev]--;
	p->ran_on[t] = q;
	push_inflight(x, q, t);
	x->rt->st.tasks++;
	if (!tk->constrained && tk->dev != queue_dev(x, q))
		x->rt->st.late_bound++;
	if (rc == 0)
		rc = set_hints(x, t, q);
	if (rc == 0)
		discard_after_issue(x, t);
	return rc;
}

/* All members of a collective group, issued together as one all-reduce: 1 when
 * they can go now (in members), 0 when one is not at the head of its queue yet,
 * -EBUSY when all are but a queue has no room in its window. */
static int collective_ready(struct xs *x, int t, int *members, int *n)
{
	struct rt_prog *p = x->p;
	int g = p->task[t].coll_group, k = 0, busy = 0;
	int set = (p->task[t].flags & RT_TASK_SET) != 0;
	for (int i = x->coll_first[g]; i < p->ntask; i++) {
		const struct rt_task *m = &p->task[i];
		if (!(m->flags & RT_TASK_COLLECTIVE) || m->coll_group != g) {
			if (set) /* a set's members are consecutive in the program */
				break;
			continue;
		}
		struct xq *qq = &x->q[task_queue(x, m->dev)];
		int head = -1;
		for (int j = qq->pos; j < qq->len; j++)
			if (x->st[qq->list[j]] == T_WAIT) {
				head = qq->list[j];
				break;
			}
		if (head != i || !deps_issued(x, i))
			return 0;
		if (qq->fln >= x->window)
			busy = 1;
		members[k++] = i;
	}
	if (busy)
		return -EBUSY;
	*n = k;
	return 1;
}

static int issue_collective(struct xs *x, const int *members, int n)
{
	struct rt_prog *p = x->p;
	void *buf[DEV_MAX];
	struct dev_stream *ss[DEV_MAX];
	int devs[DEV_MAX];
	size_t count = 0;
	enum kn_dtype dtype = KN_F32;
	int rc = 0, k;
	for (k = 0; k < n; k++) {
		int t = members[k], q = p->task[t].dev;
		const struct rt_task *tk = &p->task[t];
		/* members in rank order on devices 0..n-1; one member (a pack's
		 * gradient added over the nodes) on any device */
		if (tk->nref != 1 || tk->ref[0].mode == VMM_READ || (n > 1 && q != k))
			return sp_error(-EINVAL,
			                "collective task %d (%s): one buffer, written, on device "
			                "%d of 0..%d (its rank)",
			                t, tk->name, k, n - 1);
		devs[k] = q;
		/* on the device's collective stream: the ring's traffic overlaps the
		 * next tasks' compute; what needs the sum waits for the done event */
		ss[k] = x->rt->comm[q];
		x->comm[t] = 1;
		/* an accumulating replica nobody wrote this iteration (every
		 * microbatch of this device ran elsewhere) adds zeros */
		int unwritten =
		    !tk->coll_bcast && p->obj[tk->ref[0].obj].accum && !x->written[tk->ref[0].obj];
		bind_refs(x, t, q);
		SP_CHECK_GOTO(wait_deps(x, t, q, 1), rc, fail);
		SP_CHECK_GOTO(acquire_all_on(x, t, q, &x->ptr[k], ss[k]), rc, fail);
		buf[k] = x->ptr[k];
		if (unwritten && buf[k]) {
			rc = dev_memset_async(ss[k], buf[k], q, 0, p->obj[tk->ref[0].obj].bytes);
			if (rc < 0) {
				k++; /* acquired: released below */
				goto fail;
			}
		}
		dtype = p->obj[tk->ref[0].obj].dtype;
		count = (size_t)(p->obj[tk->ref[0].obj].bytes / kn_dtype_size(dtype));
	}
	for (int j = 0; j < n && p->t_start && !rc; j++)
		rc = dev_event_record(p->ev_start[members[j]], ss[j]);
	int root = p->task[members[0]].coll_bcast ? p->task[members[0]].coll_root : -1;
	if (buf[0] && !rc && root >= 0) /* ZeRO-1: the owner's weights to everyone */
		rc = rt_bcast_nodes(x->rt, n, devs, buf, ss,
		                    p->obj[p->task[members[0]].ref[0].obj].bytes, root,
		                    p->task[members[0]].coll_group % 16000);
	else if (buf[0] && !rc) /* zero-byte gradients: nothing to reduce */
		rc = rt_allreduce_sum_nodes(x->rt, n, devs, buf, ss, count, dtype,
		                            p->task[members[0]].coll_group % 16000);
	for (int j = 0; j < n; j++) {
		int t = members[j], q = p->task[t].dev;
		int e = dev_event_record(p->ev[t], ss[j]);
		int e2 = release_all(x, t, q, e == 0 ? p->ev[t] : NULL);
		if (!rc)
			rc = e < 0 ? e : e2;
		x->st[t] = T_ISSUED;
		p->ran_on[t] = q;
		push_inflight(x, q, t);
		x->rt->st.tasks++;
		if (!rc)
			rc = set_hints(x, t, q);
	}
	return rc;
fail:
	for (int j = 0; j < k; j++) /* acquired members: released, nothing launched */
		(void)release_all(x, members[j], p->task[members[j]].dev, NULL);
	return rc;
}

/* A tensor-parallel set: each member waits for its dependencies and acquires
 * its objects on its device, then the set's function launches them all
 * (exchanging between their streams); each member is done when its stream
 * is. */
static int issue_set(struct xs *x, const int *members, int n)
{
	struct rt_prog *p = x->p;
	struct rt_launch l[DEV_MAX];
	int rc = 0, k;
	for (k = 0; k < n; k++) {
		int t = members[k], q = task_queue(x, p->task[t].dev);
		void **ptr = x->ptr + (size_t)k * x->maxref;
		bind_refs(x, t, q);
		SP_CHECK_GOTO(wait_deps(x, t, q, 0), rc, fail);
		SP_CHECK_GOTO(acquire_all(x, t, q, ptr), rc, fail);
		l[k] = (struct rt_launch){.rt = x->rt,
		                          .s = queue_stream(x, q),
		                          .dev = queue_dev(x, q),
		                          .task = &p->task[t],
		                          .ptr = ptr,
		                          .iter = x->iter};
	}
	for (int j = 0; j < n && p->t_start && !rc; j++)
		rc = dev_event_record(p->ev_start[members[j]], l[j].s);
	if (!rc) {
		rc = p->task[members[0]].set_fn(l, n);
		if (rc < 0)
			sp_error_context("tensor-parallel set of task %d (%s)", members[0],
			                 p->task[members[0]].name);
	}
	for (int j = 0; j < n; j++) {
		int t = members[j], q = task_queue(x, p->task[t].dev);
		int e = dev_event_record(p->ev[t], l[j].s);
		int e2 = release_all(x, t, q, e == 0 ? p->ev[t] : NULL);
		if (!rc)
			rc = e < 0 ? e : e2;
		x->st[t] = T_ISSUED;
		p->ran_on[t] = q;
		push_inflight(x, q, t);
		x->rt->st.tasks++;
		if (!rc)
			rc = set_hints(x, t, q);
		if (!rc)
			discard_after_issue(x, t);
	}
	return rc;
fail:
	for (int j = 0; j < k; j++) /* acquired members: released, nothing launched */
		(void)release_all(x, members[j], task_queue(x, p->task[members[j]].dev), NULL);
	return rc;
}

/* The device holding a late-bound task's chain: its stashed or boundary input
 * (the outputs of earlier tasks of the same microbatch), or -1. */
static int chain_home(struct xs *x, int t)
{
	struct rt_prog *p = x->p;
	const struct rt_task *tk = &p->task[t];
	for (int r = 0; r < tk->nref; r++) {
		const struct rt_obj *o = &p->obj[tk->ref[r].obj];
		if (tk->ref[r].mode == VMM_OVERWRITE || !o->vid || o->input)
			continue;
		if (o->kind != VMM_KIND_STASH && o->kind != VMM_KIND_INTERMEDIATE)
			continue;
		uint32_t m = vmm_obj_where(x->rt->vmm, o->vid);
		for (int d = 0; d < x->rt->ndev; d++)
			if (m & (1u << d))
				return d;
	}
	return -1;
}

/* The constrained head of a queue can be issued now (an all-reduce: with all
 * its members, returned in members). */
static int head_ready(struct xs *x, int t, int *members, int *nmembers)
{
	if (x->p->task[t].flags & RT_TASK_COLLECTIVE)
		return collective_ready(x, t, members, nmembers) > 0;
	return deps_issued(x, t);
}

/* The next task device q should issue, or -1. */
static int pick(struct xs *x, int q, int *members, int *nmembers)
{
	struct xq *qq = &x->q[q];
	*nmembers = 0;
	if (x->rt->cfg.exec.ordered) {
		while (x->next < x->p->ntask && x->st[x->next] != T_WAIT)
			x->next++;
		if (x->next == x->p->ntask)
			return -1;
		/* the first task not issued; an all-reduce whose members are not all at
		 * the heads of their queues yet is passed over, not waited for; one
		 * whose members are there but a queue is full is waited for: passing
		 * it over would make the order depend on which device finishes first */
		for (int t = x->next; t < x->p->ntask; t++) {
			if (x->st[t] != T_WAIT)
				continue;
			const struct rt_task *tk = &x->p->task[t];
			if (tk->flags & RT_TASK_COLLECTIVE) {
				int r = collective_ready(x, t, members, nmembers);
				if (r > 0)
					return t; /* all members at once, whichever queue asks */
				*nmembers = 0;
				if (r < 0)
					return -1;
				continue;
			}
			if (task_queue(x, tk->dev) != q || !deps_issued(x, t))
				return -1;
			return t;
		}
		return -1;
	}
	while (qq->pos < qq->len && x->st[qq->list[qq->pos]] != T_WAIT)
		qq->pos++;
	int head = qq->pos < qq->len ? qq->list[qq->pos] : -1;
	if (q == x->cpu_q || !x->ulen)
		return head >= 0 && head_ready(x, head, members, nmembers) ? head : -1;
	while (x->upos < x->ulen && x->st[x->ulist[x->upos]] != T_WAIT)
		x->upos++;
	/* this device's own late-bound work: the first not issued whose chain
	 * lives here (or, a chain start, was predicted here). The device keeps
	 * program order between it and its constrained head, as the hints and the
	 * prediction assume: running ahead past a head that waits (an all-reduce,
	 * an update) brought up to twice the predicted swap volume. */
	int steal = -1, scanned = 0;
	for (int i = x->upos; i < x->ulen && scanned < 256; i++) {
		int t = x->ulist[i];
		if (x->st[t] != T_WAIT)
			continue;
		scanned++;
		int home = chain_home(x, t);
		if (home == q || (home < 0 && x->p->task[t].dev == q)) {
			if (head >= 0 && head < t)
				break;
			return deps_issued(x, t) ? t : -1;
		}
		/* a chain start whose device is busy and has more of them left than
		 * this one by two or more: stealing then shortens the iteration;
		 * between devices that keep pace it would only move gradients */
		int pred = x->p->task[t].dev;
		if (steal < 0 && home < 0 && x->pays[t] && deps_issued(x, t) &&
		    x->q[pred].fln >= x->window && x->backlog[pred] >= x->backlog[q] + 2)
			steal = t;
	}
	if (head >= 0 && head_ready(x, head, members, nmembers))
		return head;
	*nmembers = 0;
	return steal;
}

/* ---- completion ------------------------------------------------------------------ */

/* Retires completed tasks at the heads of the queues without waiting. */
static int reap(struct xs *x)
{
	int any = 0;
	for (int q = 0; q < x->nq; q++) {
		struct xq *qq = &x->q[q];
		while (qq->fln) {
			int t = qq->fl[qq->flhead];
			int rc = dev_event_peek(x->p->ev[t]);
			if (rc == -EAGAIN)
				break;
			if (rc < 0 && !x->err)
				x->err = rc;
			qq->flhead = (qq->flhead + 1) % x->window;
			qq->fln--;
			complete(x, t);
			any = 1;
		}
	}
	return any;
}

/* Sleeps until the first in-flight task completes. */
static int wait_first(struct xs *x)
{
	struct dev_event *ev[DEV_MAX + 1];
	int n = 0;
	for (int q = 0; q < x->nq; q++)
		if (x->q[q].fln)
			ev[n++] = x->p->ev[x->q[q].fl[x->q[q].flhead]];
	if (!n)
		return sp_error(-EDEADLK,
		                "executor: nothing in flight and nothing ready after %d of %d "
		                "tasks (a dependency cycle or a missing task)",
		                x->ndone, x->p->ntask);
	int idx;
	return dev_event_wait_any(ev, n, &idx);
}

/* ---- prefetch --------------------------------------------------------------------- */

/* Adds task t's objects not counted yet to *sum (their footprint on place). */
static void footprint_add(struct xs *x, int t, int place, uint64_t *sum)
{
	const struct rt_task *tk = &x->p->task[t];
	for (int r = 0; r < tk->nref; r++) {
		int o = tk->ref[r].obj;
		if (!x->p->obj[o].vid || x->pf_seen[o] == x->pf_stamp)
			continue;
		x->pf_seen[o] = x->pf_stamp;
		uint64_t b = x->p->obj[o].bytes;
		*sum += place == VMM_HOST ? b : vmm_device_footprint(x->rt->vmm, b);
	}
}

/* Prefetches the inputs of the next `lookahead` tasks of each queue, as far as
 * the device holds them together with everything the waiting tasks before
 * them there use: a prefetched copy whose device fills before its task comes
 * is the one the acquires in between evict (it is used last), and its copy
 * was traffic for nothing. The tasks in flight are not counted: what only
 * they use is gone by then (counting it too cost harmony-pp on 10B 3%). */
static void prefetch(struct xs *x)
{
	int la = x->rt->cfg.exec.lookahead;
	if (!la)
		return;
	struct rt_prog *p = x->p;
	for (int q = 0; q < x->nq; q++) {
		struct xq *qq = &x->q[q];
		int place = rt_place(queue_dev(x, q)), seen = 0;
		uint64_t sum = 0, used, cap = UINT64_MAX;
		if (q != x->cpu_q && vmm_place_usage(x->rt->vmm, place, &used, &cap) < 0)
			cap = UINT64_MAX;
		if (++x->pf_stamp == 0) { /* wrapped: no stale stamp may match */
			memset(x->pf_seen, 0, (size_t)p->nobj * sizeof(uint32_t));
			x->pf_stamp = 1;
		}
		for (int j = qq->pos; j < qq->len && seen < la; j++) {
			int t = qq->list[j];
			if (x->st[t] != T_WAIT)
				continue;
			seen++;
			footprint_add(x, t, place, &sum);
			if (sum > cap)
				break;
			if (x->pf[t] || (p->task[t].flags & RT_TASK_COLLECTIVE))
				continue;
			x->pf[t] = 1;
			const struct rt_task *tk = &p->task[t];
			for (int r = 0; r < tk->nref; r++) {
				const struct rt_obj *o = &p->obj[tk->ref[r].obj];
				if (!o->vid || tk->ref[r].mode == VMM_OVERWRITE)
					continue;
				/* what an earlier task still has to write is not there yet */
				if (x->cnt[rt_rank_key(p, tk->ref[r].obj)] <
				    (int)p->ref_rank[t][r] - 1) {
					x->pf[t] = 0; /* again once it is */
					continue;
				}
				int rc = vmm_prefetch(x->rt->vmm, o->vid, place);
				if (rc < 0)
					SP_INFO(RT, "prefetch %s: %s", o->name, sp_last_error());
				else
					x->rt->st.prefetches++;
			}
		}
	}
}

/* Waits for everything issued, marking it done without its completion actions. */
static void drain(struct xs *x)
{
	for (int q = 0; q < x->nq; q++)
		while (x->q[q].fln) {
			int t = x->q[q].fl[x->q[q].flhead];
			if (dev_event_sync(x->p->ev[t]) < 0) /* the run's error is told already */
				SP_INFO(RT, "%s", sp_last_error());
			x->q[q].flhead = (x->q[q].flhead + 1) % x->window;
			x->q[q].fln--;
			x->st[t] = T_DONE;
		}
}

/* ---- the loop -------------------------------------------------------------------- */

int rt_exec_run(struct rt_ctx *rt, struct rt_prog *p, int iter)
{
	SP_CHECK_ARG(rt && p, "rt_exec_run: NULL argument");
	SP_CHECK_ARG(p->prepared && p->ev, "rt_exec_run: prepare and bind the program first");
	SP_CHECK_ARG(iter >= 0, "rt_exec_run: iteration %d", iter);
	struct xs x;
	int rc = xs_init(&x, rt, p, iter, rt->cfg.exec.window);
	if (rc == 0)
		rc = set_initial_hints(&x);
	if (rc < 0) {
		xs_free(&x);
		return rc;
	}
	int members[DEV_MAX];
	while (x.ndone < p->ntask) {
		int progress = reap(&x);
		if (x.err)
			break;
		for (int q = 0; q < x.nq && !x.err; q++) {
			while (x.q[q].fln < x.window) {
				int nm, t = pick(&x, q, members, &nm);
				if (t < 0)
					break;
				int e = !nm ? issue(&x, t, q)
				        : (x.p->task[t].flags & RT_TASK_SET)
				            ? issue_set(&x, members, nm)
				            : issue_collective(&x, members, nm);
				progress = 1;
				/* the check mode: each task's transfers land before the next
				 * task's decisions, as in the simulator's replay */
				if (e == 0 && rt->cfg.exec.ordered) {
					e = vmm_sync(rt->vmm);
					retry_discards(&x);
				}
				if (e < 0) {
					x.err = e;
					break;
				}
			}
		}
		if (x.err)
			break;
		prefetch(&x);
		if (vmm_progress(rt->vmm) < 0)
			SP_INFO(RT, "%s", sp_last_error());
		if (x.npd)
			retry_discards(&x);
		if (!progress) {
			int e = wait_first(&x);
			if (e < 0) {
				x.err = e;
				break;
			}
		}
	}
	if (x.err) { /* let what was issued finish; its memory is reused after it */
		char msg[SP_ERROR_MSG_MAX];
		snprintf(msg, sizeof(msg), "%s", sp_last_error());
		drain(&x);
		rc = sp_error(x.err, "%s", msg);
	}
	int e = vmm_sync(rt->vmm);
	if (!rc && e < 0)
		rc = e;
	if (!rc)
		rt->st.iterations++;
	xs_free(&x);
	return rc;
}

/* ---- for other drivers (internal.h) ------------------------------------------------ */

struct rt_xs {
	struct xs x;
};

int rt_xs_open(struct rt_ctx *rt, struct rt_prog *p, int iter, struct rt_xs **out)
{
	*out = NULL;
	SP_CHECK_ARG(p->prepared && p->ev, "rt_xs_open: prepare and bind the program first");
	struct rt_xs *e = calloc(1, sizeof(*e));
	if (!e)
		return sp_error(-ENOMEM, "executor: state");
	int rc = xs_init(&e->x, rt, p, iter, p->ntask > 0 ? p->ntask : 1);
	e->x.hints = 0;
	if (rc < 0) {
		xs_free(&e->x);
		free(e);
		return rc;
	}
	*out = e;
	return 0;
}

int rt_xs_issue(struct rt_xs *e, int t, int dev)
{
	struct xs *x = &e->x;
	SP_CHECK_ARG(t >= 0 && t < x->p->ntask && x->st[t] == T_WAIT && deps_issued(x, t),
	             "rt_xs_issue: task %d is not ready", t);
	SP_CHECK_ARG(!(x->p->task[t].flags & RT_TASK_COLLECTIVE),
	             "rt_xs_issue: task %d is a collective", t);
	int q = task_queue(x, dev);
	SP_CHECK_ARG(q >= 0 && q < x->nq, "rt_xs_issue: device %d", dev);
	int rc = issue(x, t, q);
	if (rc < 0 && !x->err)
		x->err = rc;
	return rc;
}

int rt_xs_reap(struct rt_xs *e)
{
	reap(&e->x);
	if (e->x.npd)
		retry_discards(&e->x);
	return e->x.err;
}

int rt_xs_state(const struct rt_xs *e, int t)
{
	return e->x.st[t];
}

int rt_xs_heads(const struct rt_xs *e, struct dev_event **ev, int max)
{
	int n = 0;
	for (int q = 0; q < e->x.nq && n < max; q++)
		if (e->x.q[q].fln)
			ev[n++] = e->x.p->ev[e->x.q[q].fl[e->x.q[q].flhead]];
	return n;
}

void rt_xs_close(struct rt_xs *e)
{
	if (!e)
		return;
	drain(&e->x);
	xs_free(&e->x);
	free(e);
}

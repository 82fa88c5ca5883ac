/* runtime/internal.h — what the runtime's sources share; only runtime/ includes it. */
#ifndef SP_RUNTIME_INTERNAL_H
#define SP_RUNTIME_INTERNAL_H

#include "runtime/runtime.h"

/* The vmm place of a task's device (RT_HOST -> VMM_HOST). */
static inline int rt_place(int dev)
{
	return dev == RT_HOST ? VMM_HOST : dev;
}

/* The counter an object's references are ranked by (rt_prog.ref_rank): its
 * own, or its replica set's (rebinding moves references between the set's
 * members, never out of the set). Counters: nobj + nrset. */
static inline int rt_rank_key(const struct rt_prog *p, int obj)
{
	return p->obj[obj].rset >= 0 ? p->nobj + p->obj[obj].rset : obj;
}

/* One program's iteration driven from outside the executor's loop (sharp.c):
 * the caller issues ready tasks on devices of its choosing, reaps completions
 * and sleeps on the in-flight heads. Dead contents are discarded as in
 * rt_exec_run; no Belady hints (the order is not known ahead). */
struct rt_xs;
int rt_xs_open(struct rt_ctx *rt, struct rt_prog *p, int iter, struct rt_xs **out) SP_MUST_CHECK;
/* Issues task t (every dependency issued) on device dev: 0 or its error. */
int rt_xs_issue(struct rt_xs *x, int t, int dev) SP_MUST_CHECK;
/* Completes the tasks whose done events fired; 0, or the first error seen. */
int rt_xs_reap(struct rt_xs *x) SP_MUST_CHECK;
enum { RT_XS_WAIT = 0, RT_XS_ISSUED = 1, RT_XS_DONE = 2 };
int rt_xs_state(const struct rt_xs *x, int t);
/* The oldest in-flight task's done event per queue (at most max). */
int rt_xs_heads(const struct rt_xs *x, struct dev_event **ev, int max);
/* Waits for whatever is still in flight and frees the state. NULL is ok. */
void rt_xs_close(struct rt_xs *x);

/* run.c: a step split around the executor, for drivers other than rt_run_step:
 * begin writes the step's inputs, end reads its loss. */
int rt_run_step_begin(struct rt_run *r) SP_MUST_CHECK;
void rt_run_step_end(struct rt_run *r, double *loss);

#endif

/* vmm/policy.c — victim choice: Belady (farthest next use) and LRU.
 *
 * Pure functions over an array of candidates (objects that hold an evictable
 * copy on the place that needs room: unpinned, no transfer in flight). Belady
 * needs the future, which the runtime gives through vmm_hint(); an object with
 * no hint counts as never used again. Ties go to the least recently used, then
 * to the lowest index, so choices are deterministic. vmm_policy_keep reads
 * the same order from the other end (the disk tier's reclaim, swap.c).
 */
#include "vmm/internal.h"

#include <strings.h>

/* Belady on this set of candidates? AUTO: when any candidate carries a hint. */
static int use_belady(enum vmm_policy pol, const struct vmm_cand *c, int n)
{
	int belady = pol == VMM_POLICY_BELADY;
	if (pol == VMM_POLICY_AUTO)
		for (int i = 0; i < n && !belady; i++)
			belady = c[i].next_use != VMM_NO_HINT;
	return belady;
}

/* The victim order, written once: does a go before b? */
static int evicted_before(int belady, const struct vmm_cand *a, const struct vmm_cand *b)
{
	if (belady && a->next_use != b->next_use)
		return a->next_use > b->next_use;
	if (a->last_use != b->last_use)
		return a->last_use < b->last_use;
	return a->idx < b->idx;
}

int vmm_policy_pick(enum vmm_policy pol, const struct vmm_cand *c, int n)
{
	int belady = use_belady(pol, c, n), best = 0;
	for (int i = 1; i < n; i++)
		if (evicted_before(belady, &c[i], &c[best]))
			best = i;
	return best;
}

int vmm_policy_keep(enum vmm_policy pol, const struct vmm_cand *c, int n)
{
	int belady = use_belady(pol, c, n), best = 0;
	for (int i = 1; i < n; i++)
		if (evicted_before(belady, &c[best], &c[i]))
			best = i;
	return best;
}

int vmm_policy_parse(const char *s, enum vmm_policy *out)
{
	if (!s || !*s || !strcasecmp(s, "auto"))
		*out = VMM_POLICY_AUTO;
	else if (!strcasecmp(s, "belady"))
		*out = VMM_POLICY_BELADY;
	else if (!strcasecmp(s, "lru"))
		*out = VMM_POLICY_LRU;
	else
		return sp_error(-EINVAL, "SPILL_VMM_POLICY='%s' is not one of auto|belady|lru", s);
	return 0;
}

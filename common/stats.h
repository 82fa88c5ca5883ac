/* common/stats.h — statistics declared with X-macros.
 *
 * A module lists its stats once:
 *   #define VMM_STATS(X) \
 *       X(COUNT, host_bytes, "bytes in the pinned host pool") \
 *       X(COUNTER, evictions, "objects evicted")
 *   SP_STATS_DECLARE(vmm_stats, VMM_STATS)      // struct vmm_stats + descriptor table
 *   SP_STATS_DEFINE(vmm_stats, VMM_STATS)       // in one .c file
 * A COUNT tracks current, peak and total (sum of positive deltas); a COUNTER a
 * total. Updates are atomic (relaxed) so any thread may update next to the
 * primitive it counts; printing reads a racy but torn-free snapshot.
 */
#ifndef SP_COMMON_STATS_H
#define SP_COMMON_STATS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct sp_count {
	int64_t current;
	int64_t peak;
	int64_t total;
};

struct sp_counter {
	int64_t total;
};

enum sp_stat_kind { SP_STAT_COUNT, SP_STAT_COUNTER };

struct sp_stat_desc {
	const char *name;
	enum sp_stat_kind kind;
	size_t offset;
	const char *doc;
};

#define SP_STAT_FIELD_COUNT(name)       struct sp_count name;
#define SP_STAT_FIELD_COUNTER(name)     struct sp_counter name;
#define SP_STAT_FIELD_(kind, name, doc) SP_STAT_FIELD_##kind(name)
#define SP_STAT_DESC_(kind, name, doc)  {#name, SP_STAT_##kind, offsetof(SP_STATS_TYPE_, name), doc},

#define SP_STATS_DECLARE(tag, LIST)                    \
	struct tag {                                   \
		LIST(SP_STAT_FIELD_)                   \
	};                                             \
	extern const struct sp_stat_desc tag##_desc[]; \
	extern const size_t tag##_desc_count;

#define SP_STATS_DEFINE(tag, LIST)                                      \
	typedef struct tag SP_STATS_TYPE_;                              \
	const struct sp_stat_desc tag##_desc[] = {LIST(SP_STAT_DESC_)}; \
	const size_t tag##_desc_count = sizeof(tag##_desc) / sizeof(tag##_desc[0]);

/* Adds delta (may be negative) to a count, raising peak and total as needed. */
static inline void sp_count_add(struct sp_count *c, int64_t delta)
{
	int64_t now = __atomic_add_fetch(&c->current, delta, __ATOMIC_RELAXED);
	if (delta > 0) {
		__atomic_add_fetch(&c->total, delta, __ATOMIC_RELAXED);
		int64_t peak = __atomic_load_n(&c->peak, __ATOMIC_RELAXED);
		while (now > peak &&
		       !__atomic_compare_exchange_n(&c->peak, &peak, now, 1, __ATOMIC_RELAXED,
		                                    __ATOMIC_RELAXED)) {
		}
	}
}

static inline void sp_counter_add(struct sp_counter *c, int64_t delta)
{
	__atomic_add_fetch(&c->total, delta, __ATOMIC_RELAXED);
}

static inline int64_t sp_counter_get(const struct sp_counter *c)
{
	return __atomic_load_n(&c->total, __ATOMIC_RELAXED);
}

/* Prints a text table (name, current, peak, total, doc) titled title. */
void sp_stats_print_table(FILE *f, const char *title, const struct sp_stat_desc *desc, size_t n,
                          const void *stats);

/* Prints a JSON object {"name": {"current":..,"peak":..,"total":..}, "ctr": N}. */
void sp_stats_print_json(FILE *f, const struct sp_stat_desc *desc, size_t n, const void *stats);

/* Monotonic time in nanoseconds and seconds. */
uint64_t sp_now_ns(void);
double sp_now_s(void);

#endif

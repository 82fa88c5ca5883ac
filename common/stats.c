/* common/stats.c — printing stats tables and JSON; the clock. */
#include "common/stats.h"

#include <inttypes.h>
#include <string.h>
#include <time.h>

static int64_t load64(const void *base, size_t off)
{
	int64_t v;
	memcpy(&v, (const char *)base + off, sizeof(v));
	return v;
}

void sp_stats_print_table(FILE *f, const char *title, const struct sp_stat_desc *desc, size_t n,
                          const void *stats)
{
	fprintf(f, "== %s ==\n", title);
	fprintf(f, "%-28s %16s %16s %16s  %s\n", "stat", "current", "peak", "total", "");
	for (size_t i = 0; i < n; i++) {
		const struct sp_stat_desc *d = &desc[i];
		size_t o = d->offset;
		if (d->kind == SP_STAT_COUNT)
			fprintf(f, "%-28s %16" PRId64 " %16" PRId64 " %16" PRId64 "  %s\n", d->name,
			        load64(stats, o + offsetof(struct sp_count, current)),
			        load64(stats, o + offsetof(struct sp_count, peak)),
			        load64(stats, o + offsetof(struct sp_count, total)), d->doc);
		else
			fprintf(f, "%-28s %16s %16s %16" PRId64 "  %s\n", d->name, "", "",
			        load64(stats, o), d->doc);
	}
}

void sp_stats_print_json(FILE *f, const struct sp_stat_desc *desc, size_t n, const void *stats)
{
	fputc('{', f);
	for (size_t i = 0; i < n; i++) {
		const struct sp_stat_desc *d = &desc[i];
		size_t o = d->offset;
		if (i)
			fputc(',', f);
		if (d->kind == SP_STAT_COUNT)
			fprintf(f,
			        "\"%s\":{\"current\":%" PRId64 ",\"peak\":%" PRId64
			        ",\"total\":%" PRId64 "}",
			        d->name, load64(stats, o + offsetof(struct sp_count, current)),
			        load64(stats, o + offsetof(struct sp_count, peak)),
			        load64(stats, o + offsetof(struct sp_count, total)));
		else
			fprintf(f, "\"%s\":%" PRId64, d->name, load64(stats, o));
	}
	fputc('}', f);
}

uint64_t sp_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double sp_now_s(void)
{
	return (double)sp_now_ns() * 1e-9;
}

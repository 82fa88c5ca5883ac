/* bench/bench.h — what every benchmark shares: the median of repeated
 * measurements and the "machine" JSON member its results carry. Header-only;
 * a bench includes it once. */
#ifndef SP_BENCH_BENCH_H
#define SP_BENCH_BENCH_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#define BENCH_MAX_REPS 64

static inline int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Median of n values (mean of the middle two if n is even); at most 64 used. */
static inline double bench_median(const double *v, int n)
{
	double t[BENCH_MAX_REPS];
	if (n > BENCH_MAX_REPS)
		n = BENCH_MAX_REPS;
	if (n <= 0)
		return 0;
	memcpy(t, v, sizeof(double) * (size_t)n);
	qsort(t, (size_t)n, sizeof(t[0]), bench_cmp_double);
	return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* Writes `  "machine": {...},` (host, kernel, CPU model, cores, memory). */
static inline void bench_machine_json(FILE *f)
{
	struct utsname u;
	uname(&u);
	char host[256] = "";
	gethostname(host, sizeof(host) - 1);
	char cpu[256] = "unknown";
	FILE *c = fopen("/proc/cpuinfo", "r");
	if (c) {
		char line[512];
		while (fgets(line, sizeof(line), c))
			if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
				snprintf(cpu, sizeof(cpu), "%s", strchr(line, ':') + 2);
				cpu[strcspn(cpu, "\n\"")] = '\0';
				break;
			}
		fclose(c);
	}
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	fprintf(f,
	        "  \"machine\": {\"host\": \"%s\", \"kernel\": \"%s %s\", \"cpu\": \"%s\", "
	        "\"cores\": %ld, \"mem_bytes\": %lld},\n",
	        host, u.sysname, u.release, cpu, sysconf(_SC_NPROCESSORS_ONLN),
	        (long long)pages * psz);
}

#endif

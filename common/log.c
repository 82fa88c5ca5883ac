/* common/log.c — allocation-free logger: stack buffer, one write(2) per line. */
#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int sp_log_level_now = SP_LOG_WARN;
unsigned sp_log_subsys_mask = SP_SUBSYS_ALL;
static int sp_log_fd = 2;

static const char *const level_names[] = {"NONE", "WARN", "INFO", "TRACE"};
static const char *const subsys_names[] = {
#define SP_SUBSYS_NAME_(n) #n,
    SP_SUBSYS_LIST(SP_SUBSYS_NAME_)
#undef SP_SUBSYS_NAME_
};

void sp_log_configure(enum sp_log_level level, unsigned subsys_mask, int fd)
{
	sp_log_level_now = (int)level;
	sp_log_subsys_mask = subsys_mask;
	if (fd >= 0)
		sp_log_fd = fd;
}

int sp_log_level_parse(const char *s, enum sp_log_level *out)
{
	for (size_t i = 0; i < SP_ARRAY_SIZE(level_names); i++) {
		if (strcasecmp(s, level_names[i]) == 0) {
			*out = (enum sp_log_level)i;
			return 0;
		}
	}
	return sp_error(-EINVAL, "unknown log level '%s' (expected NONE, WARN, INFO or TRACE)", s);
}

int sp_log_subsys_parse(const char *s, unsigned *out)
{
	unsigned mask = 0;
	const char *p = s;
	if (*s == '\0') {
		*out = SP_SUBSYS_ALL;
		return 0;
	}
	while (*p) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		int found = 0;
		if (len == 3 && strncasecmp(p, "ALL", 3) == 0) {
			mask = SP_SUBSYS_ALL;
			found = 1;
		}
		for (size_t i = 0; !found && i < SP_ARRAY_SIZE(subsys_names); i++) {
			if (strlen(subsys_names[i]) == len &&
			    strncasecmp(p, subsys_names[i], len) == 0) {
				mask |= 1u << i;
				found = 1;
			}
		}
		if (!found)
			return sp_error(-EINVAL,
			                "unknown debug subsystem '%.*s' (expected ALL, VMM, TG, "
			                "RT, KN, DEV, SHIM, IO or COMMON)",
			                (int)len, p);
		p = end ? end + 1 : p + len;
	}
	*out = mask;
	return 0;
}

void sp_log_write(enum sp_log_level level, unsigned subsys, const char *fmt, ...)
{
	char buf[1024];
	struct timespec ts;
	const char *sname = "ALL";
	clock_gettime(CLOCK_MONOTONIC, &ts);
	for (unsigned i = 0; i < SP_SUBSYS_COUNT; i++) {
		if (subsys == (1u << i)) {
			sname = subsys_names[i];
			break;
		}
	}
	int n = snprintf(buf, sizeof(buf), "spill %ld.%06ld %d %s %s: ", (long)ts.tv_sec,
	                 ts.tv_nsec / 1000, (int)syscall(SYS_gettid),
	                 level_names[level < 4 ? level : 3], sname);
	if (n < 0)
		return;
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
	if (len > sizeof(buf) - 2)
		len = sizeof(buf) - 2;
	buf[len++] = '\n';
	ssize_t w = write(sp_log_fd, buf, len);
	(void)w;
}

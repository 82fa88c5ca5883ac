/* common/error.c — the thread-local error message and assertion failure path. */
#include "common/error.h"
#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static _Thread_local char sp_msg[SP_ERROR_MSG_MAX];

int sp_error(int rc, const char *fmt, ...)
{
	/* format aside first: a caller may pass sp_last_error() as an argument */
	char msg[SP_ERROR_MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	memcpy(sp_msg, msg, sizeof(sp_msg));
	sp_log(SP_LOG_INFO, SP_SUBSYS_ALL, "error %d (%s): %s", rc, strerror(-rc), sp_msg);
	return rc;
}

const char *sp_last_error(void)
{
	return sp_msg;
}

void sp_error_clear(void)
{
	sp_msg[0] = '\0';
}

void sp_error_context(const char *fmt, ...)
{
	char prefix[SP_ERROR_MSG_MAX];
	char old[SP_ERROR_MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(prefix, sizeof(prefix), fmt, ap);
	va_end(ap);
	memcpy(old, sp_msg, sizeof(old));
	int n = snprintf(sp_msg, sizeof(sp_msg), "%s: ", prefix);
	if (n >= 0 && (size_t)n < sizeof(sp_msg))
		snprintf(sp_msg + n, sizeof(sp_msg) - (size_t)n, "%s", old);
}

void sp_error_trace(const char *file, int line, const char *expr, int rc)
{
	sp_log(SP_LOG_TRACE, SP_SUBSYS_ALL, "%s:%d: %s failed: %d (%s)", file, line, expr, rc,
	       strerror(-rc));
}

void sp_assert_fail(const char *file, int line, const char *expr)
{
	char buf[512];
	int n =
	    snprintf(buf, sizeof(buf), "spill: assertion failed at %s:%d: %s\n", file, line, expr);
	if (n > 0) {
		ssize_t w = write(2, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
		(void)w;
	}
	abort();
}

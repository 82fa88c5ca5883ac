/* common/log.h — the logger.
 *
 * Levels WARN < INFO < TRACE (SPILL_DEBUG), a mask of subsystems
 * (SPILL_DEBUG_SUBSYS) and an output file (SPILL_DEBUG_FILE, stderr by default).
 * The level check happens before any formatting; a message is formatted into a
 * stack buffer and written with one write(2), so the logger never allocates and
 * is safe inside the preload shim and from any thread.
 */
#ifndef SP_COMMON_LOG_H
#define SP_COMMON_LOG_H

#include "common/error.h"

enum sp_log_level {
	SP_LOG_NONE = 0,
	SP_LOG_WARN = 1,
	SP_LOG_INFO = 2,
	SP_LOG_TRACE = 3,
};

/* Subsystems, one bit each. SP_SUBSYS_ALL matches any mask. */
#define SP_SUBSYS_LIST(X) X(VMM) X(TG) X(RT) X(KN) X(DEV) X(SHIM) X(IO) X(COMMON)
enum sp_subsys_bit {
#define SP_SUBSYS_BIT_(n) SP_SUBSYS_BIT_##n,
	SP_SUBSYS_LIST(SP_SUBSYS_BIT_)
#undef SP_SUBSYS_BIT_
	    SP_SUBSYS_COUNT
};
enum sp_subsys {
#define SP_SUBSYS_VAL_(n) SP_SUBSYS_##n = 1u << SP_SUBSYS_BIT_##n,
	SP_SUBSYS_LIST(SP_SUBSYS_VAL_)
#undef SP_SUBSYS_VAL_
	    SP_SUBSYS_ALL = (1u << SP_SUBSYS_COUNT) - 1,
};

extern int sp_log_level_now;        /* read by the macro before formatting */
extern unsigned sp_log_subsys_mask; /* subsystems enabled */

/* Sets the level, the subsystem mask and the output fd (-1 keeps the current one).
 * Not thread-safe against concurrent logging of the fd change; call at init. */
void sp_log_configure(enum sp_log_level level, unsigned subsys_mask, int fd);

/* Parses "WARN|INFO|TRACE|NONE" (case-insensitive). Returns 0, or -EINVAL. */
int sp_log_level_parse(const char *s, enum sp_log_level *out) SP_MUST_CHECK;

/* Parses a comma-separated list of subsystem names ("VMM,IO"; "ALL"; "" = all).
 * Returns 0, or -EINVAL naming the unknown subsystem. */
int sp_log_subsys_parse(const char *s, unsigned *out) SP_MUST_CHECK;

void sp_log_write(enum sp_log_level level, unsigned subsys, const char *fmt, ...) SP_PRINTF(3, 4);

#define sp_log(level, subsys, ...)                                              \
	do {                                                                    \
		if (SP_UNLIKELY((int)(level) <= sp_log_level_now) &&            \
		    (sp_log_subsys_mask & (unsigned)(subsys)))                  \
			sp_log_write((level), (unsigned)(subsys), __VA_ARGS__); \
	} while (0)

#define SP_WARN(subsys, ...)  sp_log(SP_LOG_WARN, SP_SUBSYS_##subsys, __VA_ARGS__)
#define SP_INFO(subsys, ...)  sp_log(SP_LOG_INFO, SP_SUBSYS_##subsys, __VA_ARGS__)
#define SP_TRACE(subsys, ...) sp_log(SP_LOG_TRACE, SP_SUBSYS_##subsys, __VA_ARGS__)

#endif

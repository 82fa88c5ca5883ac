/* common/error.h — errors as values.
 *
 * Every int-returning function returns 0 or a negative errno. The detail of the
 * last failure on this thread is kept in a thread-local message (sp_last_error()),
 * written by sp_error() at the place the failure was detected. The check macros
 * propagate a failure upward, logging file:line at TRACE level as they go.
 * Nothing here allocates; the message buffer is a fixed thread-local array.
 */
#ifndef SP_COMMON_ERROR_H
#define SP_COMMON_ERROR_H

#include <errno.h>
#include <stddef.h>

#define SP_MUST_CHECK    __attribute__((warn_unused_result))
#define SP_PRINTF(a, b)  __attribute__((format(printf, a, b)))
#define SP_UNUSED(x)     ((void)(x))
#define SP_LIKELY(x)     __builtin_expect(!!(x), 1)
#define SP_UNLIKELY(x)   __builtin_expect(!!(x), 0)
#define SP_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define SP_ERROR_MSG_MAX 512

/* Sets this thread's error message (printf format) and returns rc, which must be
 * a negative errno, so callers write `return sp_error(-EINVAL, "...")`. */
int sp_error(int rc, const char *fmt, ...) SP_PRINTF(2, 3);

/* The message of the last sp_error() on this thread ("" if none). Valid until the
 * next sp_error() on the same thread. */
const char *sp_last_error(void);

/* Clears this thread's message. */
void sp_error_clear(void);

/* Prefixes this thread's message with more context ("while X: <old message>"). */
void sp_error_context(const char *fmt, ...) SP_PRINTF(1, 2);

/* Logs a propagating failure (TRACE level, subsystem-free); used by the macros. */
void sp_error_trace(const char *file, int line, const char *expr, int rc);

/* Evaluates call (an int-returning expression); on a negative result returns it. */
#define SP_CHECK(call)                                                           \
	do {                                                                     \
		int sp_check_rc_ = (call);                                       \
		if (SP_UNLIKELY(sp_check_rc_ < 0)) {                             \
			sp_error_trace(__FILE__, __LINE__, #call, sp_check_rc_); \
			return sp_check_rc_;                                     \
		}                                                                \
	} while (0)

/* Evaluates call; on a negative result stores it in rc and jumps to label. */
#define SP_CHECK_GOTO(call, rc, label)                                   \
	do {                                                             \
		(rc) = (call);                                           \
		if (SP_UNLIKELY((rc) < 0)) {                             \
			sp_error_trace(__FILE__, __LINE__, #call, (rc)); \
			goto label;                                      \
		}                                                        \
	} while (0)

/* Fails with -EINVAL and a message when cond is false (argument validation). */
#define SP_CHECK_ARG(cond, ...)                                \
	do {                                                   \
		if (SP_UNLIKELY(!(cond)))                      \
			return sp_error(-EINVAL, __VA_ARGS__); \
	} while (0)

/* Assertions, in three levels by DEBUG=1..3 (compiled out below their level).
 * The failure path writes with write(2) and never allocates. Only for
 * invariants whose violation is a bug in spill, never for bad input. */
void sp_assert_fail(const char *file, int line, const char *expr) __attribute__((noreturn));
#ifndef SP_DEBUG_LEVEL
#define SP_DEBUG_LEVEL 0
#endif
#define SP_ASSERT_AT_(lvl, cond)                                     \
	do {                                                         \
		if (SP_DEBUG_LEVEL >= (lvl) && SP_UNLIKELY(!(cond))) \
			sp_assert_fail(__FILE__, __LINE__, #cond);   \
	} while (0)
#define SP_ASSERT(cond)           SP_ASSERT_AT_(1, cond)
#define SP_ASSERT_INTERNAL(cond)  SP_ASSERT_AT_(2, cond)
#define SP_ASSERT_EXPENSIVE(cond) SP_ASSERT_AT_(3, cond)

#endif

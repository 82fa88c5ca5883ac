/* tests/test.h — the few macros every test executable uses.
 * A test returns 0 (pass), 1 (fail) or 77 (skip: no GPU, no MPI, ...). */
#ifndef SP_TESTS_TEST_H
#define SP_TESTS_TEST_H

#include <stdio.h>
#include <stdlib.h>

#define TEST_SKIP_RC 77

#define CHECK(cond) CHECK_MSG(cond, "%s", "")

#define CHECK_MSG(cond, ...)                                                            \
	do {                                                                            \
		if (!(cond)) {                                                          \
			fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                                   \
			fprintf(stderr, "\n");                                          \
			exit(1);                                                        \
		}                                                                       \
	} while (0)

/* Checks an int-returning call for 0, printing sp_last_error() otherwise. */
#define CHECK_OK(call)                                                                          \
	do {                                                                                    \
		int check_ok_rc_ = (call);                                                      \
		if (check_ok_rc_ != 0) {                                                        \
			fprintf(stderr, "FAIL %s:%d: %s returned %d: %s\n", __FILE__, __LINE__, \
			        #call, check_ok_rc_, sp_last_error());                          \
			exit(1);                                                                \
		}                                                                               \
	} while (0)

#define TEST_SKIP(...)               \
	do {                         \
		printf("SKIP: ");    \
		printf(__VA_ARGS__); \
		printf("\n");        \
		exit(TEST_SKIP_RC);  \
	} while (0)

#define TEST_PASS()             \
	do {                    \
		printf("ok\n"); \
		return 0;       \
	} while (0)

#endif

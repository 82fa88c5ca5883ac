/* tests/child.h — runs this test program again as a child process, to check
 * that something kills it (a fault on non-resident memory must be SIGSEGV).
 * The child gets argv[1] = what, no core file, and the sanitizers told to
 * leave SIGSEGV alone, so the check means the same under ASAN and TSAN.
 * Header-only; a test includes it once. */
#ifndef SP_TESTS_CHILD_H
#define SP_TESTS_CHILD_H

#include "tests/test.h"

#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

/* Re-executes /proc/self/exe with argument what; returns its wait status. */
static int test_run_self(const char *what)
{
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	CHECK(n > 0);
	self[n] = 0;
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		struct rlimit no_core = {0, 0};
		setrlimit(RLIMIT_CORE, &no_core); /* the deaths are expected: no core files */
		setenv("ASAN_OPTIONS", "handle_segv=0:detect_leaks=0:protect_shadow_gap=0", 1);
		setenv("TSAN_OPTIONS", "handle_segv=0", 1);
		setenv("UBSAN_OPTIONS", "handle_segv=0", 1);
		execl(self, self, what, (char *)NULL);
		_exit(127);
	}
	int st;
	CHECK(waitpid(pid, &st, 0) == pid);
	return st;
}

#endif

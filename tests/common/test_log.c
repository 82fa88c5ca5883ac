/* tests/common/test_log.c — the logger: level and subsystem filtering, the log
 * file (SPILL_DEBUG_FILE with %p), and the thread-local error message. */
#include "common/log.h"
#include "common/params.h"
#include "tests/test.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static char path[256];

static const char *env_for_test(const char *name)
{
	if (strcmp(name, "SPILL_DEBUG") == 0)
		return "INFO";
	if (strcmp(name, "SPILL_DEBUG_SUBSYS") == 0)
		return "VMM,IO";
	if (strcmp(name, "SPILL_DEBUG_FILE") == 0)
		return path;
	return NULL;
}

static void *other_thread(void *arg)
{
	(void)arg;
	/* a message set on another thread is not visible here, and vice versa */
	if (sp_last_error()[0] != '\0')
		return (void *)1;
	int rc = sp_error(-EIO, "thread message");
	return (void *)(long)(rc == -EIO ? 0 : 1);
}

int main(void)
{
	struct sp_params p;
	snprintf(path, sizeof(path), "/tmp/spill-test-log-%%p.txt");
	CHECK_OK(sp_params_load(&p, env_for_test));
	CHECK_OK(sp_params_apply_logging(&p));
	SP_INFO(VMM, "visible %d", 1);
	SP_TRACE(VMM, "hidden: level too high");
	SP_INFO(KN, "hidden: subsystem off");
	SP_WARN(IO, "visible %s", "two");

	char real[256], buf[4096];
	snprintf(real, sizeof(real), "/tmp/spill-test-log-%d.txt", (int)getpid());
	FILE *f = fopen(real, "r");
	CHECK_MSG(f != NULL, "log file %s not created", real);
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	unlink(real);
	CHECK_MSG(strstr(buf, "INFO VMM: visible 1") != NULL, "%s", buf);
	CHECK_MSG(strstr(buf, "WARN IO: visible two") != NULL, "%s", buf);
	CHECK_MSG(strstr(buf, "hidden") == NULL, "%s", buf);

	/* error messages: set, context, per thread */
	sp_log_configure(SP_LOG_NONE, SP_SUBSYS_ALL, 2);
	CHECK(sp_error(-ENOMEM, "need %d bytes", 42) == -ENOMEM);
	sp_error_context("allocating weights");
	CHECK_MSG(strcmp(sp_last_error(), "allocating weights: need 42 bytes") == 0, "%s",
	          sp_last_error());
	/* the last message as an argument of the next (the source overlaps) */
	sp_error(-EIO, "step %d: %s", 7, sp_last_error());
	CHECK_MSG(strcmp(sp_last_error(), "step 7: allocating weights: need 42 bytes") == 0, "%s",
	          sp_last_error());
	pthread_t t;
	void *ret;
	sp_error_clear();
	pthread_create(&t, NULL, other_thread, NULL);
	pthread_join(t, &ret);
	CHECK(ret == NULL);
	CHECK(sp_last_error()[0] == '\0');

	/* an unwritable log file is an error naming the variable */
	snprintf(path, sizeof(path), "/nonexistent-dir/x.log");
	CHECK_OK(sp_params_load(&p, env_for_test));
	CHECK(sp_params_apply_logging(&p) < 0);
	CHECK(strstr(sp_last_error(), "SPILL_DEBUG_FILE") != NULL);
	TEST_PASS();
}

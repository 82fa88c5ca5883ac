/* tests/common/test_params.c — the SPILL_* table: defaults parse, sizes, bad
 * values are errors naming the variable, and nothing is written on failure. */
#include "common/log.h"
#include "common/params.h"
#include "common/stats.h"
#include "tests/test.h"

#include <string.h>

static const char *fake_name, *fake_value;
static const char *fake_getenv(const char *name)
{
	return fake_name && strcmp(name, fake_name) == 0 ? fake_value : NULL;
}

static int load_with(const char *name, const char *value, struct sp_params *p)
{
	fake_name = name;
	fake_value = value;
	return sp_params_load(p, fake_getenv);
}

#define STATS_LIST(X) X(COUNT, bytes, "bytes held") X(COUNTER, ops, "operations")
SP_STATS_DECLARE(t_stats, STATS_LIST)
SP_STATS_DEFINE(t_stats, STATS_LIST)

int main(void)
{
	struct sp_params p;
	uint64_t v;

	/* sizes */
	CHECK(sp_size_class(1000, 2, 0) == 1024);
	CHECK(sp_size_class(1025, 2, 0) == 1280);
	CHECK(sp_size_class(1280, 2, 0) == 1280);
	CHECK(sp_size_class(1281, 2, 0) == 1536);
	CHECK(sp_size_class(1281, 0, 0) == 1281);
	CHECK(sp_size_class(1281, 2, 4096) == 1281);
	for (uint64_t b = 1; b < 1u << 20; b = b * 3 / 2 + 7) {
		uint64_t c = sp_size_class(b, 2, 0);
		CHECK(c >= b && c <= b + b / 4);
		CHECK(sp_size_class(c, 2, 0) == c);
	}
	CHECK(sp_parse_size("0", &v) == 0 && v == 0);
	CHECK(sp_parse_size("4096", &v) == 0 && v == 4096);
	CHECK(sp_parse_size("64K", &v) == 0 && v == 64 << 10);
	CHECK(sp_parse_size("3M", &v) == 0 && v == 3 << 20);
	CHECK(sp_parse_size("2G", &v) == 0 && v == 2ull << 30);
	CHECK(sp_parse_size("1T", &v) == 0 && v == 1ull << 40);
	CHECK(sp_parse_size("16GiB", &v) == 0 && v == 16ull << 30);
	CHECK(sp_parse_size("5mb", &v) == 0 && v == 5ull << 20);
	const char *bad_sizes[] = {
	    "", "G", "-1", "1.5G", "12X", "1G2", "99999999999999999999", "20000000T", " 1"};
	for (size_t i = 0; i < SP_ARRAY_SIZE(bad_sizes); i++)
		CHECK_MSG(sp_parse_size(bad_sizes[i], &v) == -EINVAL, "'%s'", bad_sizes[i]);

	/* defaults and loading */
	CHECK(load_with(NULL, NULL, &p) == 0);
	CHECK(strcmp(p.backend, "") == 0);
	CHECK(p.io_queue_depth == 32);
	CHECK(p.io_block == 1 << 20);
	CHECK(load_with("SPILL_DEVICE_MEM", "256M", &p) == 0 && p.device_mem == 256 << 20);
	CHECK(load_with("SPILL_BACKEND", "model", &p) == 0 && strcmp(p.backend, "model") == 0);
	CHECK(load_with("SPILL_DEVICES", "4", &p) == 0 && p.devices == 4);
	CHECK(load_with("SPILL_STATS", "yes", &p) == 0 && p.stats == 1);

	/* every malformed value is -EINVAL naming the variable; *out untouched */
	struct {
		const char *name, *value;
	} bad[] = {
	    {"SPILL_DEVICE_MEM", "lots"}, {"SPILL_DEVICE_MEM", "1.5G"}, {"SPILL_DEVICES", "two"},
	    {"SPILL_DEVICES", "-1"},      {"SPILL_DEVICES", "3x"},      {"SPILL_BACKEND", "tpu"},
	    {"SPILL_STATS", "maybe"},     {"SPILL_DEBUG", "LOUD"},      {"SPILL_IO_BLOCK", ""},
	    {"SPILL_HOST_MEM", "1Q"},
	};
	for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
		struct sp_params q;
		memset(&q, 0x5a, sizeof(q));
		struct sp_params before = q;
		CHECK(load_with(bad[i].name, bad[i].value, &q) == -EINVAL);
		CHECK_MSG(strstr(sp_last_error(), bad[i].name) != NULL, "message '%s' lacks %s",
		          sp_last_error(), bad[i].name);
		CHECK(memcmp(&q, &before, sizeof(q)) == 0);
	}

	/* set by name */
	CHECK(sp_params_set(&p, "devices", "3") == 0 && p.devices == 3);
	CHECK(sp_params_set(&p, "SPILL_DEVICE_MEM", "1K") == 0 && p.device_mem == 1024);
	CHECK(sp_params_set(&p, "nope", "1") == -ENOENT);

	/* logging */
	unsigned mask;
	CHECK(sp_log_subsys_parse("VMM,io", &mask) == 0 && mask == (SP_SUBSYS_VMM | SP_SUBSYS_IO));
	CHECK(sp_log_subsys_parse("VMM,DISKS", &mask) == -EINVAL);
	CHECK(strstr(sp_last_error(), "DISKS") != NULL);
	CHECK(load_with("SPILL_DEBUG_SUBSYS", "VMM,BOGUS", &p) == 0);
	CHECK(sp_params_apply_logging(&p) == -EINVAL);

	/* stats */
	struct t_stats st;
	memset(&st, 0, sizeof(st));
	sp_count_add(&st.bytes, 100);
	sp_count_add(&st.bytes, 50);
	sp_count_add(&st.bytes, -120);
	sp_counter_add(&st.ops, 3);
	CHECK(st.bytes.current == 30 && st.bytes.peak == 150 && st.bytes.total == 150);
	CHECK(sp_counter_get(&st.ops) == 3);
	char buf[512];
	FILE *f = fmemopen(buf, sizeof(buf), "w");
	sp_stats_print_json(f, t_stats_desc, t_stats_desc_count, &st);
	fclose(f);
	CHECK_MSG(
	    strcmp(buf, "{\"bytes\":{\"current\":30,\"peak\":150,\"total\":150},\"ops\":3}") == 0,
	    "%s", buf);
	TEST_PASS();
}

/* tests/common/test_json.c — the strict JSON reader: well-formed documents
 * come back exactly (escapes, surrogate pairs, int64 limits), every malformed
 * one is -EINVAL with the byte offset, and no prefix or corruption of a valid
 * document crashes it (run under ASAN). sp_json_write_str round-trips every
 * byte. */
#include "common/json.h"
#include "tests/test.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static struct sp_json *ok(const char *text)
{
	struct sp_json *j = NULL;
	int rc = sp_json_parse(text, strlen(text), &j);
	CHECK_MSG(rc == 0, "'%s' refused: %s", text, sp_last_error());
	return j;
}

static void bad(const char *text, const char *want)
{
	struct sp_json *j = NULL;
	int rc = sp_json_parse(text, strlen(text), &j);
	CHECK_MSG(rc == -EINVAL, "'%s' accepted (%d)", text, rc);
	CHECK_MSG(strstr(sp_last_error(), want) && strstr(sp_last_error(), "at byte"),
	          "'%s': message '%s' lacks '%s'", text, sp_last_error(), want);
}

int main(void)
{
	struct sp_json *j =
	    ok(" {\"a\": [1, -2.5e2, true, false, null, \"x\\\"y\\\\z\\/\\b\\f\\n\\r\\t\"],"
	       " \"b\": {\"c\": \"\\u00e9\\ud83d\\ude00\"}, \"big\": 9223372036854775807,"
	       " \"over\": 9223372036854775808, \"neg\": -0} ");
	const struct sp_json *a = sp_json_get(j, "a");
	CHECK(a && a->type == SP_JSON_ARRAY && a->n == 6);
	CHECK(a->items[0].type == SP_JSON_NUMBER && a->items[0].is_int && a->items[0].i64 == 1);
	CHECK(a->items[1].num == -250 && !a->items[1].is_int);
	CHECK(a->items[2].type == SP_JSON_BOOL && a->items[2].b && !a->items[3].b);
	CHECK(a->items[4].type == SP_JSON_NULL);
	CHECK(!strcmp(a->items[5].str, "x\"y\\z/\b\f\n\r\t"));
	const struct sp_json *c = sp_json_get(sp_json_get(j, "b"), "c");
	CHECK(c && !strcmp(c->str, "\xc3\xa9\xf0\x9f\x98\x80") && c->len == 6);
	CHECK(sp_json_get(j, "big")->is_int && sp_json_get(j, "big")->i64 == INT64_MAX);
	CHECK(!sp_json_get(j, "over")->is_int);
	CHECK(sp_json_get(j, "missing") == NULL && sp_json_get(a, "a") == NULL);
	sp_json_free(j);
	sp_json_free(ok("[]"));
	sp_json_free(ok("{}"));
	sp_json_free(ok("\"\""));
	sp_json_free(ok("0"));

	bad("", "unexpected end");
	bad("   ", "unexpected end");
	bad("{", "expected a key");
	bad("[1,]", "bad number");
	bad("{\"a\":1,}", "expected a key");
	bad("01", "trailing");
	bad("1.", "bad fraction");
	bad(".5", "bad number");
	bad("+1", "bad number");
	bad("1e", "bad exponent");
	bad("1e999", "out of range");
	bad("\"\\x\"", "bad escape");
	bad("\"abc", "unterminated string");
	bad("tru", "unexpected character");
	bad("[1] 2", "trailing");
	bad("{\"a\":1,\"a\":2}", "duplicate key");
	bad("{\"a\" 1}", "expected ':'");
	bad("[1 2]", "expected ','");
	bad("\"\\ud800\"", "lone high surrogate");
	bad("\"\\udc00\"", "lone low surrogate");
	bad("\"\\ud800\\u0041\"", "bad low surrogate");
	bad("\"\\u12g4\"", "bad \\u escape");
	bad("\"a\tb\"", "control character");
	char deep[200];
	memset(deep, '[', 65);
	memset(deep + 65, ']', 65);
	deep[130] = 0;
	bad(deep, "nesting too deep");
	memset(deep, '[', 64); /* 64 deep is allowed */
	memset(deep + 64, ']', 64);
	deep[128] = 0;
	sp_json_free(ok(deep));

	/* prefixes and single-byte corruptions of a valid document never crash */
	const char *doc =
	    "{\"wte\": {\"dtype\": \"F32\", \"shape\": [4, 2], \"data_offsets\": [0, 32]},"
	    " \"__metadata__\": {\"step\": \"12\", \"s\": \"\\u00e9\\n\"}}";
	size_t n = strlen(doc);
	for (size_t k = 0; k <= n; k++) {
		struct sp_json *x = NULL;
		int rc = sp_json_parse(doc, k, &x);
		CHECK((rc == 0) == (k == n) && (rc == 0 || rc == -EINVAL));
		sp_json_free(x);
	}
	char *m = malloc(n);
	uint64_t seed = 3;
	int accepted = 0;
	for (int it = 0; it < 20000; it++) {
		memcpy(m, doc, n);
		for (int f = 0; f < 1 + it % 3; f++) {
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			m[(seed >> 33) % n] = (char)(seed >> 17);
		}
		struct sp_json *x = NULL;
		int rc = sp_json_parse(m, n, &x);
		CHECK(rc == 0 || rc == -EINVAL);
		accepted += rc == 0;
		sp_json_free(x);
	}
	free(m);
	printf("%zu prefixes, 20000 corruptions (%d still valid JSON): no crash\n", n + 1,
	       accepted);

	/* the writer escapes every byte so that the reader gives it back */
	char all[256];
	for (int b = 1; b < 256; b++)
		all[b - 1] = (char)b;
	all[255] = 0;
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	sp_json_write_str(f, all);
	fclose(f);
	j = ok(buf);
	CHECK(j->type == SP_JSON_STRING && j->len == 255 && !memcmp(j->str, all, 255));
	sp_json_free(j);
	free(buf);
	TEST_PASS();
}

/* tests/train/test_ckpt.c — safetensors checkpoints (train/ckpt.c), adversarially:
 * a round trip of every dtype with 0-d and empty tensors and awkward metadata;
 * every truncation of a valid file and thousands of seeded single-byte header
 * corruptions either refused with a message or accepted with every tensor
 * inside the file, never a crash; hand-written hostile headers each refused
 * with a message naming the fault; atomic writes (a missing directory, a write
 * failing half-way under RLIMIT_FSIZE or on a full tmpfs leaves the old file
 * byte-identical and no temporary); and the file read back by
 * tests/train/ckpt_read.py (json + numpy, and safetensors.numpy where it is
 * installed). Checksums: CRC-32C against a bit-by-bit reference; every byte of
 * the data flipped, a metadata value changed, a checksum renamed, malformed or
 * dropped: each refused naming the tensor (or the metadata); a header
 * corruption the reader accepts must read back exactly what was written; a
 * file without checksums reads unverified. Parts that cannot run here (no
 * numpy, no mount permission) say so and are skipped; the rest always runs. */
#include "train/train.h"
#include "tests/test.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define PY "/usr/bin/python3"

static char dir[] = "/tmp/spill-ckpt-XXXXXX";

/* A path in the test's directory; the last four stay valid. */
static const char *at(const char *name)
{
	static char paths[4][PATH_MAX];
	static int next;
	char *p = paths[next++ % 4];
	snprintf(p, PATH_MAX, "%s/%s", dir, name);
	return p;
}

static unsigned char *slurp(const char *path, size_t *size)
{
	FILE *f = fopen(path, "rb");
	CHECK_MSG(f, "cannot open %s", path);
	CHECK(fseek(f, 0, SEEK_END) == 0);
	long n = ftell(f);
	rewind(f);
	unsigned char *b = malloc((size_t)n + 1);
	CHECK(b && fread(b, 1, (size_t)n, f) == (size_t)n);
	fclose(f);
	*size = (size_t)n;
	return b;
}

static void spit(const char *path, const void *bytes, size_t n)
{
	FILE *f = fopen(path, "wb");
	CHECK_MSG(f, "cannot create %s", path);
	CHECK(fwrite(bytes, 1, n, f) == n && fclose(f) == 0);
}

/* The number of entries of folder whose name contains s. */
static int count_in(const char *folder, const char *s)
{
	DIR *d = opendir(folder);
	CHECK(d);
	int n = 0;
	for (struct dirent *e; (e = readdir(d));)
		n += strstr(e->d_name, s) != NULL;
	closedir(d);
	return n;
}

static int count_entries(const char *s)
{
	return count_in(dir, s);
}

static size_t esize(enum tr_dtype dt)
{
	return dt == TR_U8 ? 1 : 4;
}

static int64_t numel(const struct tr_tensor *t)
{
	int64_t n = 1;
	for (int d = 0; d < t->ndim; d++)
		n *= t->shape[d];
	return n;
}

/* CRC-32C bit by bit, from its definition (reflected 0x82f63b78, ~0 in and out). */
static uint32_t crc32c_ref(const void *data, size_t n)
{
	const unsigned char *p = data;
	uint32_t c = 0xffffffffu;
	for (size_t i = 0; i < n; i++) {
		c ^= p[i];
		for (int k = 0; k < 8; k++)
			c = c >> 1 ^ (0x82f63b78u & (0u - (c & 1)));
	}
	return ~c;
}

/* The values of the k-th tensor, as ckpt_read.py's pattern() recomputes them. */
static void *pattern(enum tr_dtype dt, int k, int64_t n)
{
	unsigned char *b = malloc((size_t)n * esize(dt) + 1);
	CHECK(b);
	for (int64_t i = 0; i < n; i++) {
		if (dt == TR_F32) {
			float v = (float)((i * 7 + k * 13) % 1001 - 500) / 8.0f;
			memcpy(b + 4 * i, &v, 4);
		} else if (dt == TR_I32) {
			uint32_t v = (uint32_t)((uint64_t)i * 2654435761u + (uint64_t)k * 40503u);
			memcpy(b + 4 * i, &v, 4);
		} else {
			b[i] = (unsigned char)(i * 31 + k * 7);
		}
	}
	return b;
}

/* Every dtype, 0-d and empty tensors, a U8 of odd length that leaves the next
 * F32 misaligned in the file, a name that JSON must escape. */
static const struct tr_tensor specs[] = {
    {"wte.weight", TR_F32, 2, {7, 5}, NULL},
    {"scalar.f32", TR_F32, 0, {0}, NULL},
    {"tokens", TR_I32, 3, {2, 3, 4}, NULL},
    {"rng", TR_U8, 1, {3}, NULL},
    {"after.odd", TR_F32, 2, {2, 3}, NULL},
    {"empty.u8", TR_U8, 1, {0}, NULL},
    {"empty.f32", TR_F32, 2, {4, 0}, NULL},
    {"scalar.i32", TR_I32, 0, {0}, NULL},
    {"scalar.u8", TR_U8, 0, {0}, NULL},
    {"step 4d", TR_I32, 4, {1, 2, 1, 3}, NULL},
    {"name \"with\" quotes \\ and /", TR_U8, 1, {5}, NULL},
};
#define NT ((int)SP_ARRAY_SIZE(specs))

static const struct {
	const char *key, *value;
} pairs[] = {
    {"step", "1234"},
    {"quote", "say \"hi\""},
    {"backslash", "C:\\path\\to\\"},
    {"newline", "line 1\nline 2\r\n\ttabbed \x01\x1f\x7f end"},
    {"utf8", "h\xc3\xa9llo w\xc3\xb6rld \xe2\x9c\x93 \xf0\x9d\x84\x9e"},
    {"empty", ""},
    {"key \"odd\" \\ \n", "value"},
    {"json", "{\"lr\": 0.0003, \"list\": [1, 2]}"},
};
#define NM ((int)SP_ARRAY_SIZE(pairs))
static const char *meta[2 * NM]; /* the pairs as tr_ckpt_write takes them */

static void make_tensors(struct tr_tensor *t)
{
	for (int k = 0; k < NT; k++) {
		t[k] = specs[k];
		t[k].data = pattern(t[k].dtype, k, numel(&t[k]));
	}
}

static void free_tensors(struct tr_tensor *t)
{
	for (int k = 0; k < NT; k++)
		free((void *)t[k].data);
}

static void check_same(const struct tr_tensor *a, const struct tr_tensor *b)
{
	CHECK_MSG(strcmp(a->name, b->name) == 0, "'%s' vs '%s'", a->name, b->name);
	CHECK(a->dtype == b->dtype && a->ndim == b->ndim);
	for (int d = 0; d < 4; d++)
		CHECK(d >= a->ndim || a->shape[d] == b->shape[d]);
	size_t bytes = (size_t)numel(a) * esize(a->dtype);
	CHECK_MSG(bytes == 0 || memcmp(a->data, b->data, bytes) == 0, "'%s' data differ", a->name);
	CHECK_MSG((uintptr_t)b->data % esize(b->dtype) == 0, "'%s' data misaligned", b->name);
}

static void check_contents(const char *path, const struct tr_tensor *t, int n, const char *const *m,
                           int nm)
{
	struct tr_ckpt *c;
	CHECK_OK(tr_ckpt_open(path, &c));
	CHECK(tr_ckpt_count(c) == n);
	for (int i = 0; i < n; i++) {
		struct tr_tensor a, b;
		CHECK_OK(tr_ckpt_get(c, i, &a));
		check_same(&t[i], &a);
		CHECK_OK(tr_ckpt_find(c, t[i].name, &b));
		CHECK(b.data == a.data && b.name == a.name);
	}
	for (int i = 0; i < nm; i++) {
		const char *v = tr_ckpt_meta(c, m[2 * i]);
		CHECK_MSG(v && strcmp(v, m[2 * i + 1]) == 0, "meta '%s' = '%s'", m[2 * i],
		          v ? v : "(null)");
	}
	CHECK(tr_ckpt_verified(c) == 1);
	struct tr_tensor x;
	CHECK(tr_ckpt_meta(c, "absent") == NULL && tr_ckpt_meta(c, NULL) == NULL);
	CHECK(tr_ckpt_get(c, n, &x) == -ENOENT && tr_ckpt_get(c, -1, &x) == -ENOENT);
	CHECK(tr_ckpt_find(c, "absent", &x) == -ENOENT && strstr(sp_last_error(), "'absent'"));
	tr_ckpt_close(c);
}

static uint64_t header_len(const unsigned char *b)
{
	uint64_t n = 0;
	for (int i = 7; i >= 0; i--)
		n = n << 8 | b[i];
	return n;
}

static void test_round_trip(const struct tr_tensor *t)
{
	const char *p = at("rt.safetensors");
	CHECK_OK(tr_ckpt_write(p, t, NT, meta, NM));
	check_contents(p, t, NT, meta, NM);
	size_t size;
	unsigned char *b = slurp(p, &size);
	uint64_t n = header_len(b);
	CHECK_MSG((8 + n) % 8 == 0, "data starts at %llu", (unsigned long long)(8 + n));
	CHECK(b[8 + n - 1] == '}' || b[8 + n - 1] == ' ');
	free(b);

	/* the exact bytes of a small file: compact JSON, the checksums (of "xy"
	 * and of the empty metadata) in the metadata, spaces to 8-byte alignment */
	const struct tr_tensor one = {"a", TR_U8, 1, {2}, "xy"};
	p = at("one.safetensors");
	CHECK_OK(tr_ckpt_write(p, &one, 1, NULL, 0));
	b = slurp(p, &size);
	char want[256];
	int wl =
	    snprintf(want, sizeof(want),
	             "{\"__metadata__\":{\"crc32c.a\":\"%08x\",\"crc32c.__metadata__\":"
	             "\"%08x\"},\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}",
	             crc32c_ref("xy", 2), crc32c_ref("", 0));
	while (wl % 8)
		want[wl++] = ' ';
	CHECK(size == 8 + (size_t)wl + 2 && header_len(b) == (uint64_t)wl);
	CHECK_MSG(memcmp(b + 8, want, (size_t)wl) == 0, "%.*s", (int)size - 8, b + 8);
	CHECK(memcmp(b + size - 2, "xy", 2) == 0);
	free(b);

	/* nothing at all */
	p = at("none.safetensors");
	CHECK_OK(tr_ckpt_write(p, NULL, 0, NULL, 0));
	check_contents(p, NULL, 0, NULL, 0);
	printf("round trip: %d tensors, %d metadata pairs\n", NT, NM);
}

static void bad_write(const struct tr_tensor *t, int n, const char *const *m, int nm,
                      const char *want)
{
	const char *p = at("bad.safetensors");
	CHECK(tr_ckpt_write(p, t, n, m, nm) == -EINVAL);
	CHECK_MSG(strstr(sp_last_error(), want), "message '%s' lacks '%s'", sp_last_error(), want);
	CHECK(access(p, F_OK) != 0 && count_entries(".tmp.") == 0);
}

static void test_bad_writes(void)
{
	static const char dummy[1];
	struct tr_tensor t[2] = {{"a", TR_U8, 1, {1}, dummy}, {"b", TR_U8, 1, {1}, dummy}};
	const char *m[] = {"k", "v", "k2", "v2"};
	CHECK_OK(tr_ckpt_write(at("ok.safetensors"), t, 2, m, 2));
	t[1].name = "a";
	bad_write(t, 2, NULL, 0, "duplicate tensor name 'a'");
	t[1].name = "__metadata__";
	bad_write(t, 2, NULL, 0, "reserved");
	const char *names[] = {"", "tab\there", "caf\xc3\xa9", NULL};
	for (int i = 0; i < 4; i++) {
		t[1].name = names[i];
		bad_write(t, 2, NULL, 0, "printable ASCII");
	}
	t[1].name = "b";
	t[1].ndim = 5;
	bad_write(t, 2, NULL, 0, "ndim 5");
	t[1].ndim = -1;
	bad_write(t, 2, NULL, 0, "ndim -1");
	t[1].ndim = 1;
	t[1].shape[0] = -3;
	bad_write(t, 2, NULL, 0, "negative dimension");
	t[1].shape[0] = INT64_C(1) << 62;
	t[1].dtype = TR_F32;
	bad_write(t, 2, NULL, 0, "over 2^63");
	t[0].shape[0] = t[1].shape[0] = (INT64_C(1) << 62) + 1;
	t[0].dtype = t[1].dtype = TR_U8;
	bad_write(t, 2, NULL, 0, "over 2^63 bytes of data");
	t[0].shape[0] = t[1].shape[0] = 1;
	t[1].dtype = (enum tr_dtype)3;
	bad_write(t, 2, NULL, 0, "unknown dtype 3");
	t[1].dtype = TR_I32;
	t[1].data = NULL;
	bad_write(t, 2, NULL, 0, "'b': no data");
	t[1].shape[0] = 0; /* no bytes, no data needed */
	CHECK_OK(tr_ckpt_write(at("ok.safetensors"), t, 2, m, 2));
	m[2] = "k";
	bad_write(t, 2, m, 2, "duplicate metadata key 'k'");
	m[2] = NULL;
	bad_write(t, 2, m, 2, "NULL key");
	m[2] = "k2";
	m[3] = NULL;
	bad_write(t, 2, m, 2, "NULL value");
	m[3] = "bad \xff byte";
	bad_write(t, 2, m, 2, "not valid UTF-8");
	m[3] = "overlong \xc0\xaf";
	bad_write(t, 2, m, 2, "not valid UTF-8");
	m[2] = "crc32c.a";
	m[3] = "00000000";
	bad_write(t, 2, m, 2, "checksums the writer adds");
	bad_write(t, -1, NULL, 0, "-1 tensors");
	bad_write(NULL, 1, NULL, 0, "1 tensors");
	bad_write(t, 2, NULL, 1, "1 metadata pairs");
	printf("bad writes: refused\n");
}

static void refuse(const char *path, const char *want)
{
	struct tr_ckpt *c = (struct tr_ckpt *)0x1;
	int rc = tr_ckpt_open(path, &c);
	CHECK_MSG(rc == -EINVAL, "rc %d, want -EINVAL for '%s'", rc, want);
	CHECK(c == (struct tr_ckpt *)0x1); /* untouched on failure */
	CHECK_MSG(strstr(sp_last_error(), want), "message '%s' lacks '%s'", sp_last_error(), want);
	CHECK_MSG(strstr(sp_last_error(), path), "message '%s' lacks the path", sp_last_error());
}

/* A file: the 8-byte length hlen, hsize bytes of header, data_size bytes 0..255. */
static const char *raw(uint64_t hlen, const char *header, size_t hsize, size_t data_size)
{
	const char *p = at("raw.safetensors");
	unsigned char *b = malloc(8 + hsize + data_size);
	CHECK(b);
	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)(hlen >> (8 * i));
	memcpy(b + 8, header, hsize);
	for (size_t i = 0; i < data_size; i++)
		b[8 + hsize + i] = (unsigned char)i;
	spit(p, b, 8 + hsize + data_size);
	free(b);
	return p;
}

static const char *header(const char *h, size_t data_size)
{
	return raw(strlen(h), h, strlen(h), data_size);
}

static void hostile(const char *h, size_t data_size, const char *want)
{
	refuse(header(h, data_size), want);
}

#define T(name, dtype, shape, begin, end)                                                    \
	"\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":[" begin \
	"," end "]}"
#define U8(name, n, begin, end) T(name, "U8", "[" #n "]", #begin, #end)

static void test_hostile_headers(void)
{
	/* ranges */
	hostile("{" U8("a", 4, 0, 4) "," U8("b", 4, 2, 6) "}", 6, "tensors 'a' and 'b' overlap");
	hostile("{" U8("a", 4, 0, 4) "," U8("b", 4, 0, 4) "}", 4, "overlap");
	hostile("{" U8("a", 4, 0, 4) "," U8("e", 0, 2, 2) "}", 4, "overlap");
	hostile("{" U8("a", 4, 0, 4) "," U8("b", 4, 6, 10) "}", 10, "[4, 6) belong to no tensor");
	hostile("{" U8("a", 4, 2, 6) "}", 6, "[0, 2) belong to no tensor");
	hostile("{" U8("a", 4, 0, 4) "}", 6, "after the last");
	hostile("{}", 1, "[0, 1) belong to no tensor");
	hostile("{" T("a", "F32", "[2]", "0", "4") "}", 4,
	        "'a': its shape holds 8 bytes of F32 but data_offsets span 4");
	hostile("{" T("a", "I32", "[]", "0", "1") "}", 1, "holds 4 bytes");
	hostile("{" U8("a", 8, 0, 8) "}", 4, "end past the 4 bytes of data");
	hostile("{" U8("a", 0, 4, 0) "}", 4, "[4, 0] are reversed");
	hostile("{" T("a", "F32", "[4294967296,4294967296,4]", "0", "0") "}", 0, "overflows");
	/* entries */
	hostile("{" T("a", "F16", "[2]", "0", "4") "}", 4, "unsupported dtype 'F16'");
	hostile("{" T("a", "f32", "[1]", "0", "4") "}", 4, "unsupported dtype 'f32'");
	hostile("{\"a\":{\"dtype\":4,\"shape\":[],\"data_offsets\":[0,4]}}", 4,
	        "dtype is not a string");
	hostile("{" U8("a", 4, 0, 4) "," U8("a", 4, 4, 8) "}", 8, "duplicate tensor name 'a'");
	hostile("{\"a\":[1]}", 0, "tensor 'a' is not an object");
	hostile("{\"a\":{\"dtype\":\"U8\",\"shape\":[0]}}", 0, "'a' has no data_offsets");
	hostile("{\"a\":{}}", 0, "'a' has no dtype");
	hostile("{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0],\"x\":1}}", 0,
	        "'a': unknown key 'x'");
	hostile("{\"a\":{\"dtype\":\"U8\",\"dtype\":\"U8\"}}", 0, "'a': dtype appears twice");
	hostile("{" T("a", "U8", "[1,1,1,1,1]", "0", "1") "}", 1, "shape has more than 4 entries");
	hostile("{" T("a", "U8", "[-1]", "0", "0") "}", 0, "shape holds a negative number");
	hostile("{" T("a", "U8", "[\"4\"]", "0", "4") "}", 4, "shape holds a non-integer");
	hostile("{" T("a", "U8", "4", "0", "4") "}", 4, "shape is not an array");
	hostile("{" T("a", "U8", "[9223372036854775808]", "0", "0") "}", 0, "over 2^63");
	hostile("{" T("a", "U8", "[99999999999999999999999]", "0", "0") "}", 0, "over 2^63");
	hostile("{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0]}}", 0,
	        "data_offsets must be [begin, end]");
	hostile("{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0,0]}}", 0,
	        "data_offsets has more than 2 entries");
	/* metadata */
	hostile("{\"__metadata__\":{\"k\":1}}", 0, "value of 'k' is not a string");
	hostile("{\"__metadata__\":{\"k\":{\"x\":\"y\"}}}", 0, "value of 'k' is not a string");
	hostile("{\"__metadata__\":\"v\"}", 0, "__metadata__ is not an object");
	hostile("{\"__metadata__\":{},\"__metadata__\":{}}", 0, "__metadata__ appears twice");
	hostile("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, "duplicate metadata key 'k'");
	/* JSON syntax */
	hostile("{} x", 0, "header byte 3: trailing garbage");
	hostile("{}{}", 0, "trailing garbage");
	refuse(raw(3, "{}\0", 3, 0), "trailing garbage");
	refuse(raw(0, "", 0, 0), "unexpected end");
	hostile("   ", 0, "unexpected end");
	hostile("[]", 0, "not a JSON object");
	hostile("\"x\"", 0, "not a JSON object");
	hostile("{\"a\":true}", 0, "unexpected 't'");
	hostile("{\"a\":1.5}", 0, "numbers must be integers");
	hostile("{\"a\":1e3}", 0, "numbers must be integers");
	hostile("{\"a\":[04]}", 0, "leading zero");
	hostile("{\"a\":-}", 0, "expected a digit");
	hostile("{\"a\" 1}", 0, "expected ':'");
	hostile("{\"a\":1 \"b\":2}", 0, "expected '}'");
	hostile("{\"a\":[1 2]}", 0, "expected ']'");
	hostile("{\"a\":1,}", 0, "expected a string");
	hostile("{1:2}", 0, "expected a string");
	hostile("\x80", 0, "unexpected byte 0x80");
	hostile("{\"a", 0, "unterminated string");
	hostile("{\"a\\", 0, "unterminated string");
	hostile("{\"a\tb\":1}", 0, "control character");
	hostile("{\"\xff\":1}", 0, "invalid UTF-8");
	hostile("{\"\xc0\xaf\":1}", 0, "invalid UTF-8");
	hostile("{\"\xed\xa0\x80\":1}", 0, "invalid UTF-8"); /* an encoded surrogate */
	hostile("{\"\xe2\x9c\":1}", 0, "invalid UTF-8");
	hostile("{\"\\x\":1}", 0, "unknown escape");
	hostile("{\"\\u12\":1}", 0, "4 hex digits");
	hostile("{\"\\ud800\":1}", 0, "lone high surrogate");
	hostile("{\"\\ud800\\u0041\":1}", 0, "lone high surrogate");
	hostile("{\"\\udc00\":1}", 0, "lone low surrogate");
	hostile("{\"\\u0000\":1}", 0, "NUL");
	/* depth bombs, at the top and inside an entry */
	size_t deep = 100000;
	char *bomb = malloc(2 * deep + 32);
	CHECK(bomb);
	strcpy(bomb, "{\"a\":{\"shape\":");
	size_t len = strlen(bomb);
	memset(bomb + len, '[', deep);
	memset(bomb + len + deep, ']', deep);
	strcpy(bomb + len + 2 * deep, "}}");
	hostile(bomb, 0, "nesting deeper than 8");
	memset(bomb, '[', deep);
	bomb[deep] = 0;
	hostile(bomb, 0, "nesting deeper than 8");
	free(bomb);
	/* the header length */
	for (size_t n = 0; n < 8; n++) {
		const char *p = at("short.safetensors");
		spit(p, "\0\0\0\0\0\0\0", n);
		refuse(p, "too short for the 8-byte header length");
	}
	refuse(raw(3, "{}", 2, 0), "header length 3 is past the end of the file (10 bytes)");
	refuse(raw(UINT64_MAX, "{}", 2, 0), "is past the end of the file");
	refuse(raw(UINT64_C(1) << 63, "{}", 2, 0), "is past the end of the file");
	/* a sparse file: a header length over 100 MB that the file does hold */
	const char *p = at("big.safetensors");
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0 && ftruncate(fd, 100000001 + 8) == 0);
	unsigned char len8[8] = {0x01, 0xe1, 0xf5, 0x05}; /* 100000001 */
	CHECK(pwrite(fd, len8, 8, 0) == 8 && close(fd) == 0);
	refuse(p, "header length 100000001 is over the 100 MB limit");
	len8[0] = 0x00; /* 100000000: within the limit, and all NUL bytes */
	fd = open(p, O_WRONLY);
	CHECK(fd >= 0 && pwrite(fd, len8, 8, 0) == 8 && close(fd) == 0);
	refuse(p, "header byte 0: unexpected byte 0x00");
	unlink(p);
	/* not a checkpoint at all */
	struct tr_ckpt *c;
	CHECK(tr_ckpt_open(at("absent.safetensors"), &c) == -ENOENT);
	CHECK(strstr(sp_last_error(), "absent.safetensors"));
	CHECK(mkdir(at("adir"), 0755) == 0);
	refuse(at("adir"), "not a regular file");
	CHECK(rmdir(at("adir")) == 0);
	printf("hostile headers: refused\n");
}

/* A hand-written header the reader must accept: white space everywhere, keys
 * out of order, file order unlike data order, escapes decoded. */
static void test_valid_by_hand(void)
{
	const char *h =
	    " {\n \"b\\u00e9\" : { \"shape\" : [ 2 ] , \"data_offsets\" : [ 4 , 6 ] , "
	    "\"dtype\" : \"U8\" } ,\r\n\t\"a\\ud834\\udd1e\":{\"dtype\":\"U8\",\"shape\":"
	    "[4],\"data_offsets\":[0,4]},\"__metadata__\":{\"k\\\"\":\"v\\\\n\\/\","
	    "\"\":\"\"},\"one\":{\"dtype\":\"F32\",\"shape\":[-0,1],\"data_offsets\":[6,"
	    "6]}}  ";
	struct tr_ckpt *c;
	CHECK_OK(tr_ckpt_open(header(h, 6), &c));
	CHECK(tr_ckpt_count(c) == 3);
	struct tr_tensor t;
	CHECK_OK(tr_ckpt_get(c, 0, &t));
	CHECK(strcmp(t.name, "b\xc3\xa9") == 0 && t.dtype == TR_U8 && t.ndim == 1);
	CHECK(t.shape[0] == 2 && memcmp(t.data, "\x04\x05", 2) == 0);
	CHECK_OK(tr_ckpt_find(c, "a\xf0\x9d\x84\x9e", &t));
	CHECK(memcmp(t.data, "\x00\x01\x02\x03", 4) == 0);
	CHECK_OK(tr_ckpt_get(c, 2, &t));
	CHECK(t.ndim == 2 && t.shape[0] == 0 && t.shape[1] == 1 && (uintptr_t)t.data % 4 == 0);
	CHECK(strcmp(tr_ckpt_meta(c, "k\""), "v\\n/") == 0 && strcmp(tr_ckpt_meta(c, ""), "") == 0);
	tr_ckpt_close(c);
	CHECK_OK(tr_ckpt_open(header("{}", 0), &c));
	CHECK(tr_ckpt_count(c) == 0 && tr_ckpt_find(c, "x", &t) == -ENOENT);
	tr_ckpt_close(c);
	printf("hand-written header: accepted\n");
}

/* An accepted file's tensors must lie inside it: read every byte (ASAN would
 * see one outside) and check they tile the data. */
static void check_sane(struct tr_ckpt *c, size_t file_size, uint64_t hlen)
{
	uint64_t total = 0;
	unsigned sum = 0;
	for (int i = 0; i < tr_ckpt_count(c); i++) {
		struct tr_tensor t;
		CHECK_OK(tr_ckpt_get(c, i, &t));
		CHECK(t.name && t.ndim >= 0 && t.ndim <= 4 && (unsigned)t.dtype <= TR_U8);
		uint64_t bytes = esize(t.dtype);
		for (int d = 0; d < t.ndim; d++) {
			CHECK(t.shape[d] >= 0 && (t.shape[d] == 0 || bytes <= file_size));
			bytes *= (uint64_t)t.shape[d];
		}
		CHECK(bytes <= file_size && (bytes == 0 || t.data));
		for (uint64_t k = 0; k < bytes; k++)
			sum += ((const unsigned char *)t.data)[k];
		total += bytes;
	}
	CHECK_MSG(total == file_size - 8 - hlen, "tensors hold %llu of %llu data bytes",
	          (unsigned long long)total, (unsigned long long)(file_size - 8 - hlen));
	(void)sum;
}

static uint64_t rng(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void test_damage(const struct tr_tensor *t)
{
	size_t size;
	unsigned char *good = slurp(at("rt.safetensors"), &size);
	unsigned char *b = malloc(size + 1);
	CHECK(b);
	const char *p = at("damaged.safetensors");
	for (size_t len = 0; len < size; len++) {
		spit(p, good, len);
		refuse(p, "");
	}
	memcpy(b, good, size);
	b[size] = 0;
	spit(p, b, size + 1);
	refuse(p, "after the last one");

	/* single bytes of the length or the header: random values, or characters
	 * that matter to JSON (more likely to leave it well-formed) */
	static const char special[] = "{}[]\":,-0123456789 \\u";
	uint64_t seed = 0x5eed5eed5eedull, hlen = header_len(good);
	int accepted = 0, refused = 0;
	for (int it = 0; it < 6000; it++) {
		memcpy(b, good, size);
		size_t pos = rng(&seed) % (8 + hlen);
		unsigned char v = it % 2
		                      ? (unsigned char)rng(&seed)
		                      : (unsigned char)special[rng(&seed) % (sizeof(special) - 1)];
		if (v == good[pos])
			continue;
		b[pos] = v;
		spit(p, b, size);
		struct tr_ckpt *c;
		int rc = tr_ckpt_open(p, &c);
		if (rc == 0) {
			/* the checksums let through only what changes nothing read */
			check_sane(c, size, header_len(b));
			tr_ckpt_close(c);
			check_contents(p, t, NT, meta, NM);
			accepted++;
		} else {
			CHECK_MSG(rc == -EINVAL && strstr(sp_last_error(), "checkpoint "),
			          "byte %zu = 0x%02x: rc %d: %s", pos, v, rc, sp_last_error());
			refused++;
		}
	}
	CHECK(refused > 5000);
	printf("damage: %zu truncations refused; %d corruptions refused, %d accepted reading "
	       "back what was written\n",
	       size, refused, accepted);
	free(b);
	free(good);
}

/* good with the first occurrence of from (in the header) replaced by to, of
 * the same length: refused with want in the message. */
static void patch(const unsigned char *good, size_t size, const char *from, const char *to,
                  const char *want)
{
	size_t n = strlen(from), hlen = header_len(good);
	CHECK(strlen(to) == n);
	unsigned char *b = malloc(size);
	CHECK(b);
	memcpy(b, good, size);
	unsigned char *at_ = memmem(b + 8, hlen, from, n);
	CHECK_MSG(at_, "'%s' is not in the header", from);
	memcpy(at_, to, n);
	const char *p = at("patched.safetensors");
	spit(p, b, size);
	refuse(p, want);
	free(b);
}

static void test_checksums(const struct tr_tensor *t)
{
	/* the implementation (hardware or table) against the definition */
	CHECK(tr_crc32c(0, "123456789", 9) == 0xe3069283u && tr_crc32c(0, NULL, 0) == 0);
	unsigned char buf[512];
	uint64_t seed = 42;
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (unsigned char)rng(&seed);
	for (size_t off = 0; off < 9; off++)
		for (size_t len = 0; len + off <= sizeof(buf); len += 1 + len / 8) {
			uint32_t want = crc32c_ref(buf + off, len);
			CHECK_MSG(tr_crc32c(0, buf + off, len) == want, "offset %zu length %zu",
			          off, len);
			size_t k = len / 3;
			CHECK(tr_crc32c(tr_crc32c(0, buf + off, k), buf + off + k, len - k) ==
			      want);
		}

	/* every byte of the data, changed: refused naming the tensor it belongs to */
	size_t size;
	unsigned char *good = slurp(at("rt.safetensors"), &size), *b = malloc(size);
	CHECK(b);
	const char *p = at("flipped.safetensors");
	size_t pos = 8 + header_len(good);
	int flips = 0;
	for (int k = 0; k < NT; k++) {
		size_t bytes = (size_t)numel(&t[k]) * esize(t[k].dtype);
		char want[160];
		snprintf(want, sizeof(want), "tensor '%s' is corrupt", t[k].name);
		for (size_t i = 0; i < bytes; i++, pos++, flips++) {
			memcpy(b, good, size);
			b[pos] ^= (unsigned char)(flips % 2 ? 0xff : 1u << (i % 8));
			spit(p, b, size);
			refuse(p, want);
		}
	}
	CHECK(pos == size);
	/* the metadata, a checksum renamed, malformed or dropped */
	patch(good, size, "\"1234\"", "\"1235\"", "the metadata is corrupt");
	patch(good, size, "\"crc32c.tokens\"", "\"crc32c.tokenz\"",
	      "checksum 'crc32c.tokenz' of a tensor the file does not hold");
	char from[64], to[64];
	CHECK(strcmp(t[2].name, "tokens") == 0);
	snprintf(from, sizeof(from), "\"crc32c.tokens\":\"%08x\"",
	         crc32c_ref(t[2].data, (size_t)numel(&t[2]) * esize(t[2].dtype)));
	snprintf(to, sizeof(to), "%s", from);
	to[strlen(to) - 2] = 'g';
	patch(good, size, from, to, "checksum 'crc32c.tokens' =");
	patch(good, size, "\"crc32c.tokens\"", "\"xrc32c.tokens\"",
	      "tensor 'tokens' has no checksum");
	patch(good, size, "\"crc32c.__metadata__\"", "\"xrc32c.__metadata__\"",
	      "the metadata has no checksum");
	/* a file without any (another tool's, or written before them): unverified */
	struct tr_ckpt *c;
	CHECK_OK(tr_ckpt_open(header("{" U8("a", 4, 0, 4) "}", 4), &c));
	CHECK(tr_ckpt_verified(c) == 0);
	tr_ckpt_close(c);
	printf("checksums: %d data bytes changed, each refused naming its tensor\n", flips);
	free(b);
	free(good);
}

static void test_atomic(const struct tr_tensor *t)
{
	/* a directory that does not exist: nothing is created */
	const char *p = at("nodir/x.safetensors");
	CHECK(tr_ckpt_write(p, t, NT, meta, NM) == -ENOENT);
	CHECK(strstr(sp_last_error(), p) && access(at("nodir"), F_OK) != 0);

	/* path is a directory: the rename fails, the directory stays */
	CHECK(mkdir(at("isdir"), 0755) == 0);
	CHECK(tr_ckpt_write(at("isdir"), t, NT, meta, NM) == -EISDIR);
	CHECK(strstr(sp_last_error(), "rename") && count_entries(".tmp.") == 0);
	CHECK(rmdir(at("isdir")) == 0);

	/* a write that fails half-way (EFBIG past RLIMIT_FSIZE) leaves the old file */
	p = at("atomic.safetensors");
	CHECK_OK(tr_ckpt_write(p, t, NT, meta, NM));
	size_t old_size, size;
	unsigned char *old = slurp(p, &old_size);
	struct tr_tensor big = {"big", TR_F32, 2, {512, 512}, NULL};
	big.data = pattern(TR_F32, 0, 512 * 512);
	struct rlimit saved, lim;
	CHECK(getrlimit(RLIMIT_FSIZE, &saved) == 0);
	lim = saved;
	lim.rlim_cur = 64 << 10;
	signal(SIGXFSZ, SIG_IGN);
	fflush(NULL); /* nothing may reach a log file while the limit holds */
	CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
	int rc = tr_ckpt_write(p, &big, 1, NULL, 0);
	CHECK(setrlimit(RLIMIT_FSIZE, &saved) == 0);
	CHECK_MSG(rc == -EFBIG, "rc %d: %s", rc, sp_last_error());
	CHECK(strstr(sp_last_error(), p) && strstr(sp_last_error(), ".tmp."));
	printf("half-way failure: %s\n", sp_last_error());
	unsigned char *now = slurp(p, &size);
	CHECK(size == old_size && memcmp(old, now, size) == 0);
	CHECK(count_entries(".tmp.") == 0);
	free(now);

	/* an open checkpoint keeps its contents when the file is replaced */
	struct tr_ckpt *c;
	CHECK_OK(tr_ckpt_open(p, &c));
	CHECK_OK(tr_ckpt_write(p, &big, 1, NULL, 0));
	check_contents(p, &big, 1, NULL, 0);
	struct tr_tensor x;
	CHECK_OK(tr_ckpt_get(c, 0, &x));
	check_same(&t[0], &x);
	tr_ckpt_close(c);
	free((void *)big.data);
	free(old);
	printf("atomic writes: the old file survives\n");
}

static char small[PATH_MAX];
static bool mounted;

static void unmount_small(void)
{
	if (mounted && umount2(small, 0) == 0)
		mounted = false;
	rmdir(small);
}

/* A full file system (a 256 KiB tmpfs, where mounting is permitted): the
 * write fails with ENOSPC and the old file stays. */
static void test_enospc(const struct tr_tensor *t)
{
	snprintf(small, sizeof(small), "%s", at("small"));
	CHECK(mkdir(small, 0755) == 0);
	atexit(unmount_small);
	if (mount("tmpfs", small, "tmpfs", 0, "size=256k") != 0) {
		printf("ENOSPC: skipped (tmpfs mount not permitted: %s)\n", strerror(errno));
		return;
	}
	mounted = true;
	char p[PATH_MAX + 32];
	snprintf(p, sizeof(p), "%s/x.safetensors", small);
	CHECK_OK(tr_ckpt_write(p, t, NT, meta, NM));
	size_t old_size, size;
	unsigned char *old = slurp(p, &old_size);
	struct tr_tensor big = {"big", TR_F32, 2, {512, 512}, NULL};
	big.data = pattern(TR_F32, 0, 512 * 512);
	CHECK_MSG(tr_ckpt_write(p, &big, 1, NULL, 0) == -ENOSPC, "%s", sp_last_error());
	CHECK(strstr(sp_last_error(), p) && strstr(sp_last_error(), "No space left"));
	unsigned char *now = slurp(p, &size);
	CHECK(size == old_size && memcmp(old, now, size) == 0);
	CHECK(count_in(small, ".tmp.") == 0);
	printf("ENOSPC: %s; the old file survives\n", sp_last_error());
	free(now);
	free(old);
	free((void *)big.data);
	unmount_small();
}

/* ---- Python ---------------------------------------------------------------------- */

static const char *find_script(void)
{
	static char path[PATH_MAX + 64];
	const char *rel = "tests/train/ckpt_read.py";
	if (access(rel, R_OK) == 0)
		return rel;
	/* from the executable: build/<variant>/tests/train/test_ckpt */
	char exe[PATH_MAX - 64];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return NULL;
	exe[n] = 0;
	for (int up = 0; up < 5; up++) {
		char *s = strrchr(exe, '/');
		if (!s)
			return NULL;
		*s = 0;
	}
	snprintf(path, sizeof(path), "%s/%s", exe, rel);
	return access(path, R_OK) == 0 ? path : NULL;
}

/* Runs the script on file with --pattern; returns its exit code and stdout. */
static int run_reader(const char *script, const char *file, char *out, size_t cap)
{
	int fds[2];
	CHECK(pipe(fds) == 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		dup2(fds[1], 1);
		close(fds[0]);
		execl(PY, PY, script, file, "--pattern", (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	size_t len = 0;
	for (ssize_t r; (r = read(fds[0], out + len, cap - 1 - len)) > 0;)
		len += (size_t)r;
	out[len] = 0;
	close(fds[0]);
	int st = 0;
	CHECK(waitpid(pid, &st, 0) == pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static uint32_t crc32(const unsigned char *p, size_t n)
{
	uint32_t c = 0xffffffffu;
	for (size_t i = 0; i < n; i++) {
		c ^= p[i];
		for (int k = 0; k < 8; k++)
			c = c >> 1 ^ (0xedb88320u & (0u - (c & 1)));
	}
	return ~c;
}

static double sum_of(const struct tr_tensor *t)
{
	double s = 0;
	for (int64_t i = 0; i < numel(t); i++) {
		if (t->dtype == TR_F32)
			s += ((const float *)t->data)[i];
		else if (t->dtype == TR_I32)
			s += ((const int32_t *)t->data)[i];
		else
			s += ((const uint8_t *)t->data)[i];
	}
	return s;
}

static void hex(char *out, const char *s)
{
	for (; *s; s++, out += 2)
		sprintf(out, "%02x", (unsigned char)*s);
	*out = 0;
}

/* Every line the reader prints must be the one expected of what was written. */
static void check_reader_output(char *out, const struct tr_tensor *t)
{
	static const char *const dt[] = {"F32", "I32", "U8"};
	int k = 0, nmeta = 0, start = -1;
	for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
		if (sscanf(line, "data_start\t%d", &start) == 1)
			continue;
		if (strncmp(line, "meta\t", 5) == 0) {
			char want[2048], kh[256], vh[768], key[128], v[16];
			bool found = false;
			for (int i = 0; i < NM; i++) {
				hex(kh, meta[2 * i]);
				hex(vh, meta[2 * i + 1]);
				snprintf(want, sizeof(want), "meta\t%s\t%s", kh, vh);
				found |= strcmp(line, want) == 0;
			}
			for (int i = 0; i < NT; i++) { /* the checksums the writer added */
				snprintf(key, sizeof(key), "crc32c.%s", t[i].name);
				snprintf(v, sizeof(v), "%08x",
				         crc32c_ref(t[i].data,
				                    (size_t)numel(&t[i]) * esize(t[i].dtype)));
				hex(kh, key);
				hex(vh, v);
				snprintf(want, sizeof(want), "meta\t%s\t%s", kh, vh);
				found |= strcmp(line, want) == 0;
			}
			hex(kh, "crc32c.__metadata__");
			found |= strncmp(line + 5, kh, strlen(kh)) == 0;
			CHECK_MSG(found, "unexpected line '%s'", line);
			nmeta++;
			continue;
		}
		if (strncmp(line, "tensor\t", 7) != 0)
			continue;
		CHECK_MSG(k < NT, "extra line '%s'", line);
		char want[512], shape[64] = "";
		for (int d = 0; d < t[k].ndim; d++)
			snprintf(shape + strlen(shape), sizeof(shape) - strlen(shape), "%s%lld",
			         d ? "," : "", (long long)t[k].shape[d]);
		size_t bytes = (size_t)numel(&t[k]) * esize(t[k].dtype);
		snprintf(want, sizeof(want), "tensor\t%s\t%s\t%s\t%zu\t%08x\t", t[k].name,
		         dt[t[k].dtype], t[k].ndim ? shape : "-", bytes, crc32(t[k].data, bytes));
		CHECK_MSG(strncmp(line, want, strlen(want)) == 0, "line '%s', want '%s'", line,
		          want);
		double sum = strtod(line + strlen(want), NULL), ref = sum_of(&t[k]);
		CHECK_MSG(fabs(sum - ref) <= 1e-9 * fmax(1, fabs(ref)), "'%s': sum %g, want %g",
		          t[k].name, sum, ref);
		k++;
	}
	CHECK(k == NT && nmeta == NM + NT + 1);
	CHECK_MSG(start > 0 && start % 8 == 0, "data_start %d", start);
}

static void test_python(const struct tr_tensor *t)
{
	if (access(PY, X_OK) != 0 || system(PY " -c 'import numpy' >/dev/null 2>&1") != 0) {
		printf("python: skipped (no %s with numpy)\n", PY);
		return;
	}
	const char *script = find_script();
	CHECK_MSG(script, "tests/train/ckpt_read.py not found (run from the repo root)");
	const char *p = at("rt.safetensors");
	size_t cap = 1 << 16;
	char *out = malloc(cap);
	CHECK(out);
	int rc = run_reader(script, p, out, cap);
	printf("%s", out);
	CHECK_MSG(rc == 0, "%s %s %s: exit %d", PY, script, p, rc);
	check_reader_output(out, t);
	free(out);
	printf("python: json + numpy read every tensor and metadata value back\n");
}

static void remove_dir(void)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	for (struct dirent *e; (e = readdir(d));)
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			unlink(at(e->d_name));
	closedir(d);
	rmdir(dir);
}

int main(void)
{
	CHECK(mkdtemp(dir));
	for (int i = 0; i < NM; i++) {
		meta[2 * i] = pairs[i].key;
		meta[2 * i + 1] = pairs[i].value;
	}
	struct tr_tensor t[NT];
	make_tensors(t);
	test_round_trip(t);
	test_bad_writes();
	test_hostile_headers();
	test_valid_by_hand();
	test_damage(t);
	test_checksums(t);
	test_atomic(t);
	test_enospc(t);
	test_python(t);
	free_tensors(t);
	remove_dir();
	TEST_PASS();
}

/* train/ckpt.c — checkpoints in Hugging Face's safetensors format (train.h).
 *
 * Writing builds the header in memory, pads it with spaces so that the data
 * starts 8-byte aligned, and writes the file under a temporary name in the
 * destination directory: fsync, rename over the path, fsync of the directory.
 * A reader sees the old file or the new one, never a mix.
 * Reading never trusts the file: it is read into memory and its header checked
 * in two passes, a strict JSON syntax pass (bounded nesting, UTF-8, escapes),
 * then a schema pass that decodes strings in place and fills the tensor table.
 * Every range is checked against the data before a pointer is formed.
 * Invariant after tr_ckpt_open: every tensor's data lies inside c->data (or its
 * copy in c->moved) and is aligned to its element size.
 * Checksums: the writer adds "crc32c.<tensor>" per tensor and
 * "crc32c.__metadata__" (over the other pairs) to the metadata, CRC-32C in 8
 * hex digits; the reader verifies them all when the file has any, so that a
 * flipped byte anywhere in the data or the metadata is refused, naming the
 * tensor. A file with none (written before them, or by another tool) is read
 * unverified, and tr_ckpt_verified says so.
 */
#include "train/train.h"

#include "common/json.h"

#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CKPT_HEADER_MAX 100000000ull /* the official reader's limit, 100 MB */
#define JSON_DEPTH_MAX  8            /* the format itself nests 3 deep */
#define META_KEY        "__metadata__"
#define CRC_PREFIX      "crc32c."
#define CRC_META        CRC_PREFIX META_KEY /* the metadata's own checksum */

static const struct {
	const char *name;
	size_t size;
} dtypes[] = {[TR_F32] = {"F32", 4}, [TR_I32] = {"I32", 4}, [TR_U8] = {"U8", 1}};

/* Bytes of product(shape) elements of esize bytes; false for a negative
 * dimension or a size past 2^63 (offsets must fit off_t). A zero dimension
 * makes the tensor empty however large the others are. */
static bool shape_bytes(const int64_t *shape, int ndim, size_t esize, uint64_t *out)
{
	uint64_t n = esize;
	bool zero = false, over = false;
	for (int d = 0; d < ndim; d++) {
		if (shape[d] < 0)
			return false;
		zero |= shape[d] == 0;
		over |= __builtin_mul_overflow(n, (uint64_t)shape[d], &n);
	}
	if (!zero && (over || n > INT64_MAX))
		return false;
	*out = zero ? 0 : n;
	return true;
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0: no overlong forms,
 * surrogates or code points past U+10FFFF, which strict JSON readers refuse. */
static int utf8_len(const unsigned char *s, const unsigned char *end)
{
	if (s[0] < 0x80)
		return 1;
	int n;
	uint32_t cp, min;
	if ((s[0] & 0xe0) == 0xc0)
		n = 2, cp = s[0] & 0x1f, min = 0x80;
	else if ((s[0] & 0xf0) == 0xe0)
		n = 3, cp = s[0] & 0x0f, min = 0x800;
	else if ((s[0] & 0xf8) == 0xf0)
		n = 4, cp = s[0] & 0x07, min = 0x10000;
	else
		return 0;
	if (end - s < n)
		return 0;
	for (int i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

static bool utf8_valid(const char *s)
{
	const unsigned char *p = (const unsigned char *)s, *end = p + strlen(s);
	for (int n; p < end; p += n)
		if (!(n = utf8_len(p, end)))
			return false;
	return true;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* ---- CRC-32C ----------------------------------------------------------------------
 * CRC-32C (Castagnoli; iSCSI's, ext4's and Btrfs's): the reflected polynomial
 * 0x82f63b78, initial value and final xor 0xffffffff ("123456789" gives
 * 0xe3069283). SSE4.2's crc32 instruction computes it where the CPU has one
 * (about 8 bytes a cycle), else a byte-wise table. */
#define CRC32C_POLY 0x82f63b78u

static uint32_t crc32c_table[256];
static pthread_once_t crc32c_once = PTHREAD_ONCE_INIT;

static void crc32c_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c >> 1 ^ (CRC32C_POLY & (0u - (c & 1)));
		crc32c_table[i] = c;
	}
}

static uint32_t crc32c_sw(uint32_t c, const unsigned char *p, size_t n)
{
	pthread_once(&crc32c_once, crc32c_init);
	for (; n; n--)
		c = crc32c_table[(c ^ *p++) & 0xff] ^ c >> 8;
	return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t c, const unsigned char *p,
                                                            size_t n)
{
	for (; n && (uintptr_t)p % 8; n--)
		c = __builtin_ia32_crc32qi(c, *p++);
	uint64_t c64 = c;
	for (; n >= 8; n -= 8, p += 8) {
		uint64_t w;
		memcpy(&w, p, 8);
		c64 = __builtin_ia32_crc32di(c64, w);
	}
	c = (uint32_t)c64;
	for (; n; n--)
		c = __builtin_ia32_crc32qi(c, *p++);
	return c;
}
#endif

uint32_t tr_crc32c(uint32_t crc, const void *data, size_t n)
{
#if defined(__x86_64__)
	if (__builtin_cpu_supports("sse4.2"))
		return ~crc32c_hw(~crc, data, n);
#endif
	return ~crc32c_sw(~crc, data, n);
}

struct ckpt_meta {
	const char *key, *value;
};

static int cmp_meta(const void *a, const void *b)
{
	return strcmp(((const struct ckpt_meta *)a)->key, ((const struct ckpt_meta *)b)->key);
}

static bool is_crc_key(const char *key)
{
	return strncmp(key, CRC_PREFIX, strlen(CRC_PREFIX)) == 0;
}

/* The metadata's checksum, one rule for the writer and the reader: CRC-32C of
 * every pair but the checksums, sorted by key (strcmp), as key NUL value NUL. */
static uint32_t meta_crc(const struct ckpt_meta *sorted, int n)
{
	uint32_t c = 0;
	for (int i = 0; i < n; i++) {
		if (is_crc_key(sorted[i].key))
			continue;
		c = tr_crc32c(c, sorted[i].key, strlen(sorted[i].key) + 1);
		c = tr_crc32c(c, sorted[i].value, strlen(sorted[i].value) + 1);
	}
	return c;
}

/* ---- writing ---------------------------------------------------------------------- */

/* Names go into JSON keys and logs: printable ASCII, at least one character. */
static bool name_ok(const char *s)
{
	if (!s || !*s)
		return false;
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
			return false;
	return true;
}

static int check_tensor(const char *path, const struct tr_tensor *x, int i, uint64_t *bytes)
{
	if (!name_ok(x->name))
		return sp_error(
		    -EINVAL,
		    "checkpoint %s: tensor %d: the name must be printable ASCII, not empty", path,
		    i);
	if (strcmp(x->name, META_KEY) == 0)
		return sp_error(-EINVAL, "checkpoint %s: tensor %d: '%s' is a reserved name", path,
		                i, META_KEY);
	if ((unsigned)x->dtype >= SP_ARRAY_SIZE(dtypes))
		return sp_error(-EINVAL, "checkpoint %s: tensor '%s': unknown dtype %d", path,
		                x->name, (int)x->dtype);
	if (x->ndim < 0 || x->ndim > 4)
		return sp_error(-EINVAL, "checkpoint %s: tensor '%s': ndim %d is not 0..4", path,
		                x->name, x->ndim);
	if (!shape_bytes(x->shape, x->ndim, dtypes[x->dtype].size, bytes))
		return sp_error(
		    -EINVAL, "checkpoint %s: tensor '%s': a negative dimension or over 2^63 bytes",
		    path, x->name);
	if (*bytes > 0 && !x->data)
		return sp_error(-EINVAL, "checkpoint %s: tensor '%s': no data", path, x->name);
	return 0;
}

/* Sorts names (an array the caller owns) and returns one that occurs twice, or NULL. */
static const char *sorted_dup(const char **names, int n)
{
	qsort(names, (size_t)n, sizeof(*names), cmp_str);
	for (int i = 1; i < n; i++)
		if (strcmp(names[i - 1], names[i]) == 0)
			return names[i];
	return NULL;
}

static int check_inputs(const char *path, const struct tr_tensor *t, int n, const char *const *meta,
                        int nmeta)
{
	uint64_t total = 0;
	for (int i = 0; i < n; i++) {
		uint64_t bytes = 0;
		SP_CHECK(check_tensor(path, &t[i], i, &bytes));
		if (__builtin_add_overflow(total, bytes, &total) || total > INT64_MAX)
			return sp_error(-EINVAL, "checkpoint %s: over 2^63 bytes of data", path);
	}
	for (int i = 0; i < nmeta; i++) {
		const char *k = meta[2 * i], *v = meta[2 * i + 1];
		if (!k || !v)
			return sp_error(-EINVAL, "checkpoint %s: metadata pair %d has a NULL %s",
			                path, i, k ? "value" : "key");
		/* the header must be UTF-8; other bytes could only be stored altered */
		if (!utf8_valid(k) || !utf8_valid(v))
			return sp_error(-EINVAL, "checkpoint %s: metadata '%.80s': not valid UTF-8",
			                path, k);
		if (is_crc_key(k))
			return sp_error(-EINVAL,
			                "checkpoint %s: metadata '%.80s': keys starting with "
			                "'" CRC_PREFIX "' are the checksums the writer adds",
			                path, k);
	}
	/* + 1: malloc(0) may return NULL */
	const char **names = malloc(sizeof(*names) * (size_t)(n > nmeta ? n : nmeta) + 1);
	if (!names)
		return sp_error(-ENOMEM, "checkpoint %s: out of memory", path);
	for (int i = 0; i < n; i++)
		names[i] = t[i].name;
	const char *what = "tensor name", *dup = sorted_dup(names, n);
	if (!dup) {
		for (int i = 0; i < nmeta; i++)
			names[i] = meta[2 * i];
		what = "metadata key";
		dup = sorted_dup(names, nmeta);
	}
	free(names);
	if (dup)
		return sp_error(-EINVAL, "checkpoint %s: duplicate %s '%.80s'", path, what, dup);
	return 0;
}

/* The header: metadata first (as the official writer does), tensors with
 * consecutive data offsets, then spaces up to a multiple of 8 bytes so that the
 * data, at 8 + its length, starts 8-byte aligned. */
static int build_header(const char *path, const struct tr_tensor *t, int n, const char *const *meta,
                        int nmeta, char **out, size_t *len)
{
	char *buf = NULL;
	size_t size = 0;
	FILE *f = open_memstream(&buf, &size);
	if (!f)
		return sp_error(-ENOMEM, "checkpoint %s: out of memory", path);
	fputc('{', f);
	if (nmeta > 0) {
		fputs("\"" META_KEY "\":{", f);
		for (int i = 0; i < nmeta; i++) {
			fputs(i ? "," : "", f);
			sp_json_write_str(f, meta[2 * i]);
			fputc(':', f);
			sp_json_write_str(f, meta[2 * i + 1]);
		}
		fputc('}', f);
	}
	uint64_t off = 0;
	for (int i = 0; i < n; i++) {
		uint64_t bytes = 0;
		shape_bytes(t[i].shape, t[i].ndim, dtypes[t[i].dtype].size, &bytes);
		fputs(i || nmeta ? "," : "", f);
		sp_json_write_str(f, t[i].name);
		fprintf(f, ":{\"dtype\":\"%s\",\"shape\":[", dtypes[t[i].dtype].name);
		for (int d = 0; d < t[i].ndim; d++)
			fprintf(f, "%s%" PRId64, d ? "," : "", t[i].shape[d]);
		fprintf(f, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", off, off + bytes);
		off += bytes;
	}
	fputc('}', f);
	for (long pos = ftell(f); pos % 8; pos++)
		fputc(' ', f);
	bool bad = ferror(f);
	if (fclose(f) != 0 || bad) {
		free(buf);
		return sp_error(-ENOMEM, "checkpoint %s: out of memory building the header", path);
	}
	if (size > CKPT_HEADER_MAX) {
		free(buf);
		return sp_error(-EINVAL,
		                "checkpoint %s: a header of %zu bytes is over the 100 MB limit",
		                path, size);
	}
	*out = buf;
	*len = size;
	return 0;
}

static int write_all(int fd, const void *p, size_t n)
{
	const char *s = p;
	while (n > 0) {
		ssize_t w = write(fd, s, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		s += w;
		n -= (size_t)w;
	}
	return 0;
}

/* The directory that will hold path, opened before anything is written so that
 * its most likely failures (missing, no permission) come while path is intact. */
static int open_dir(const char *path, int *out)
{
	const char *slash = strrchr(path, '/');
	char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
	if (!dir)
		return sp_error(-ENOMEM, "checkpoint %s: out of memory", path);
	int rc = 0, fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		rc = sp_error(-errno, "checkpoint %s: cannot open the directory %s: %s", path, dir,
		              strerror(errno));
	free(dir);
	*out = fd;
	return rc;
}

/* Creates path.tmp.PID.K exclusively; K counts this process's attempts, so that
 * two threads, or a temporary left by a crashed process with the same pid, do
 * not collide. */
static int open_temp(const char *path, char **tmp, int *fd)
{
	static atomic_uint counter;
	size_t len = strlen(path) + 64;
	char *name = malloc(len);
	if (!name)
		return sp_error(-ENOMEM, "checkpoint %s: out of memory", path);
	int f = -1;
	for (int tries = 0; f < 0 && tries < 100; tries++) {
		snprintf(name, len, "%s.tmp.%d.%u", path, (int)getpid(),
		         atomic_fetch_add(&counter, 1));
		f = open(name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
		if (f < 0 && errno != EEXIST)
			break;
	}
	if (f < 0) {
		int rc = sp_error(-errno, "checkpoint %s: cannot create %s: %s", path, name,
		                  strerror(errno));
		free(name);
		return rc;
	}
	*tmp = name;
	*fd = f;
	return 0;
}

static int write_data(int fd, const char *header, size_t hlen, const struct tr_tensor *t, int n)
{
	unsigned char len8[8];
	for (int i = 0; i < 8; i++)
		len8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
	SP_CHECK(write_all(fd, len8, sizeof(len8)));
	SP_CHECK(write_all(fd, header, hlen));
	for (int i = 0; i < n; i++) {
		uint64_t bytes = 0;
		shape_bytes(t[i].shape, t[i].ndim, dtypes[t[i].dtype].size, &bytes);
		SP_CHECK(write_all(fd, t[i].data, bytes));
	}
	return fsync(fd) == 0 ? 0 : -errno;
}

/* Temporary file, fsync, rename over path, fsync of the directory. Once the
 * rename is done path holds the new file; a failing directory sync after it is
 * still reported (the new file may not survive a crash). */
static int write_atomic(const char *path, const char *header, size_t hlen,
                        const struct tr_tensor *t, int n)
{
	int dfd = -1, fd = -1, rc;
	char *tmp = NULL;
	SP_CHECK(open_dir(path, &dfd));
	SP_CHECK_GOTO(open_temp(path, &tmp, &fd), rc, fail_dir);
	rc = write_data(fd, header, hlen, t, n);
	if (rc < 0) {
		sp_error(rc, "checkpoint %s: cannot write %s: %s", path, tmp, strerror(-rc));
		goto fail_fd;
	}
	if (close(fd) != 0) {
		rc = sp_error(-errno, "checkpoint %s: cannot write %s: %s", path, tmp,
		              strerror(errno));
		goto fail_tmp;
	}
	if (rename(tmp, path) != 0) {
		rc = sp_error(-errno, "checkpoint %s: cannot rename %s over it: %s", path, tmp,
		              strerror(errno));
		goto fail_tmp;
	}
	/* file systems that cannot sync a directory answer EINVAL */
	if (fsync(dfd) != 0 && errno != EINVAL)
		rc =
		    sp_error(-errno, "checkpoint %s: written, but syncing its directory failed: %s",
		             path, strerror(errno));
	free(tmp);
	close(dfd);
	return rc;

fail_fd:
	close(fd);
fail_tmp:
	unlink(tmp);
	free(tmp);
fail_dir:
	close(dfd);
	return rc;
}

/* The caller's metadata pairs, then "crc32c.<name>" per tensor and
 * "crc32c.__metadata__", each 8 lowercase hex digits: *all (2 (nmeta + n + 1)
 * pointers) points into the caller's strings and *strings; the caller frees both. */
static int add_checksums(const char *path, const struct tr_tensor *t, int n,
                         const char *const *meta, int nmeta, const char ***all, char **strings)
{
	size_t bytes = sizeof(CRC_META) + 9, plen = strlen(CRC_PREFIX);
	for (int i = 0; i < n; i++)
		bytes += plen + strlen(t[i].name) + 1 + 9;
	const char **a = malloc(sizeof(*a) * 2 * (size_t)(nmeta + n + 1));
	struct ckpt_meta *sorted = malloc(sizeof(*sorted) * (size_t)nmeta + 1);
	char *s = malloc(bytes), *w = s;
	if (!a || !sorted || !s) {
		free(a);
		free(sorted);
		free(s);
		return sp_error(-ENOMEM, "checkpoint %s: out of memory", path);
	}
	for (int i = 0; i < nmeta; i++) {
		a[2 * i] = meta[2 * i];
		a[2 * i + 1] = meta[2 * i + 1];
		sorted[i] = (struct ckpt_meta){meta[2 * i], meta[2 * i + 1]};
	}
	if (nmeta)
		qsort(sorted, (size_t)nmeta, sizeof(*sorted), cmp_meta);
	for (int i = 0; i <= n; i++) {
		uint64_t size = 0;
		if (i < n)
			shape_bytes(t[i].shape, t[i].ndim, dtypes[t[i].dtype].size, &size);
		uint32_t crc = i < n ? tr_crc32c(0, t[i].data, size) : meta_crc(sorted, nmeta);
		a[2 * (nmeta + i)] = w;
		w += sprintf(w, "%s%s", CRC_PREFIX, i < n ? t[i].name : META_KEY) + 1;
		a[2 * (nmeta + i) + 1] = w;
		w += sprintf(w, "%08" PRIx32, crc) + 1;
	}
	free(sorted);
	*all = a;
	*strings = s;
	return 0;
}

int tr_ckpt_write(const char *path, const struct tr_tensor *t, int n, const char *const *meta,
                  int nmeta)
{
	SP_CHECK_ARG(path && *path, "tr_ckpt_write: no path");
	SP_CHECK_ARG(n >= 0 && (t || n == 0), "checkpoint %s: %d tensors at %p", path, n,
	             (const void *)t);
	SP_CHECK_ARG(nmeta >= 0 && (meta || nmeta == 0), "checkpoint %s: %d metadata pairs at %p",
	             path, nmeta, (const void *)meta);
	SP_CHECK(check_inputs(path, t, n, meta, nmeta));
	const char **all = NULL;
	char *strings = NULL, *header = NULL;
	size_t hlen = 0;
	int rc;
	SP_CHECK(add_checksums(path, t, n, meta, nmeta, &all, &strings));
	SP_CHECK_GOTO(build_header(path, t, n, all, nmeta + n + 1, &header, &hlen), rc, out);
	rc = write_atomic(path, header, hlen, t, n);
	free(header);
out:
	free(all);
	free(strings);
	return rc;
}

/* ---- reading ---------------------------------------------------------------------- */

struct ckpt_entry {
	const char *name; /* decoded in place in the header */
	enum tr_dtype dtype;
	int ndim;
	int64_t shape[4];
	uint64_t begin, end; /* into the data section */
	const void *data;
};

struct tr_ckpt {
	char *path;
	char *header;        /* the header's text, decoded in place */
	unsigned char *data; /* the data section, malloc-aligned */
	uint64_t data_size;
	unsigned char *moved; /* aligned copies of tensors misaligned in the file */
	struct ckpt_entry *t; /* file order */
	struct ckpt_entry **by_name;
	int n, cap;
	struct ckpt_meta *meta; /* sorted by key; decoded in place in the header */
	int nmeta, metacap;
	bool verified; /* it had checksums, and they matched */
};

static int ckpt_fail(const char *path, const char *fmt, ...) SP_PRINTF(2, 3);
static int ckpt_fail(const char *path, const char *fmt, ...)
{
	char what[SP_ERROR_MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	return sp_error(-EINVAL, "checkpoint %s: %s", path, what);
}

/* arr with room for element n (doubled when n has reached *cap), or NULL with
 * arr untouched when out of memory. */
static void *grow(void *arr, int *cap, int n, size_t elem)
{
	if (n < *cap)
		return arr;
	int ncap = *cap ? 2 * *cap : 16;
	void *p = realloc(arr, (size_t)ncap * elem);
	if (p)
		*cap = ncap;
	return p;
}

/* n bytes at off; a file that ends early has shrunk since fstat. */
static int read_at(const char *path, int fd, void *buf, uint64_t n, uint64_t off)
{
	char *p = buf;
	while (n > 0) {
		ssize_t r = pread(fd, p, n, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return sp_error(-errno, "checkpoint %s: read error: %s", path,
			                strerror(errno));
		if (r == 0)
			return ckpt_fail(path, "the file shrank while being read");
		p += r;
		n -= (uint64_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

static int read_parts(struct tr_ckpt *c, const char *path, int fd, uint64_t *hlen)
{
	struct stat st;
	if (fstat(fd, &st) != 0)
		return sp_error(-errno, "checkpoint %s: cannot stat: %s", path, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return ckpt_fail(path, "not a regular file");
	uint64_t size = (uint64_t)st.st_size;
	if (size < 8)
		return ckpt_fail(path, "%" PRIu64 " bytes, too short for the 8-byte header length",
		                 size);
	unsigned char len8[8];
	SP_CHECK(read_at(path, fd, len8, 8, 0));
	uint64_t n = 0;
	for (int i = 7; i >= 0; i--)
		n = n << 8 | len8[i];
	if (n > size - 8)
		return ckpt_fail(path,
		                 "header length %" PRIu64 " is past the end of the file (%" PRIu64
		                 " bytes)",
		                 n, size);
	if (n > CKPT_HEADER_MAX)
		return ckpt_fail(path, "header length %" PRIu64 " is over the 100 MB limit", n);
	c->data_size = size - 8 - n;
	c->header = malloc(n + 1); /* + 1: malloc(0) may return NULL */
	c->data = malloc(c->data_size + 1);
	if (!c->header || !c->data)
		return sp_error(-ENOMEM, "checkpoint %s: out of memory for %" PRIu64 " bytes", path,
		                size);
	SP_CHECK(read_at(path, fd, c->header, n, 8));
	SP_CHECK(read_at(path, fd, c->data, c->data_size, 8 + n));
	*hlen = n;
	return 0;
}

static int ckpt_read(struct tr_ckpt *c, const char *path, uint64_t *hlen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return sp_error(-errno, "checkpoint %s: cannot open: %s", path, strerror(errno));
	int rc = read_parts(c, path, fd, hlen);
	close(fd);
	return rc;
}

/* ---- JSON ------------------------------------------------------------------------
 * Only what the format uses: objects, arrays, strings, integers. Pass 1 checks
 * the syntax of the whole header (json_value); pass 2 walks it again by the
 * schema with the same lexer, decoding strings in place: a decoded string is
 * never longer than its JSON form, and its closing quote leaves room for NUL. */

struct json {
	char *p, *end;     /* what is left of the header */
	const char *start; /* the header, for byte positions in messages */
	const char *path;
};

static int json_fail(const struct json *j, const char *what)
{
	return sp_error(-EINVAL, "checkpoint %s: header byte %td: %s", j->path, j->p - j->start,
	                what);
}

static void json_ws(struct json *j)
{
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
		j->p++;
}

/* After white space: true and past it when the next character is ch. */
static bool json_eat(struct json *j, char ch)
{
	json_ws(j);
	if (j->p < j->end && *j->p == ch) {
		j->p++;
		return true;
	}
	return false;
}

static int json_expect(struct json *j, char ch)
{
	if (json_eat(j, ch))
		return 0;
	char what[16];
	snprintf(what, sizeof(what), "expected '%c'", ch);
	return json_fail(j, what);
}

static bool json_peek(struct json *j, char ch)
{
	json_ws(j);
	return j->p < j->end && *j->p == ch;
}

static bool is_digit(char ch)
{
	return ch >= '0' && ch <= '9';
}

static int hex4(struct json *j, uint32_t *out)
{
	uint32_t v = 0;
	for (int i = 0; i < 4; i++, j->p++) {
		char ch = j->p < j->end ? *j->p : 0;
		int d = is_digit(ch)             ? ch - '0'
		        : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
		        : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
		                                 : -1;
		if (d < 0)
			return json_fail(j, "\\u needs 4 hex digits");
		v = v << 4 | (uint32_t)d;
	}
	*out = v;
	return 0;
}

/* The escape after a backslash (j->p at it) as a code point; surrogates must
 * pair and NUL is refused (names and values are C strings). */
static int json_escape(struct json *j, uint32_t *cp)
{
	static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
	j->p++;
	if (j->p >= j->end)
		return json_fail(j, "unterminated string");
	const char *e = *j->p ? strchr(from, *j->p) : NULL;
	if (e) {
		j->p++;
		*cp = (unsigned char)to[e - from];
		return 0;
	}
	if (*j->p != 'u')
		return json_fail(j, "unknown escape in a string");
	j->p++;
	SP_CHECK(hex4(j, cp));
	if (*cp >= 0xdc00 && *cp <= 0xdfff)
		return json_fail(j, "lone low surrogate in a string");
	if (*cp >= 0xd800 && *cp <= 0xdbff) {
		uint32_t lo;
		if (j->end - j->p < 2 || j->p[0] != '\\' || j->p[1] != 'u')
			return json_fail(j, "lone high surrogate in a string");
		j->p += 2;
		SP_CHECK(hex4(j, &lo));
		if (lo < 0xdc00 || lo > 0xdfff)
			return json_fail(j, "lone high surrogate in a string");
		*cp = 0x10000 + ((*cp - 0xd800) << 10) + (lo - 0xdc00);
	}
	if (*cp == 0)
		return json_fail(j, "\\u0000 (NUL) in a string");
	return 0;
}

static char *utf8_put(char *w, uint32_t cp)
{
	if (cp < 0x80) {
		*w++ = (char)cp;
	} else if (cp < 0x800) {
		*w++ = (char)(0xc0 | cp >> 6);
		*w++ = (char)(0x80 | (cp & 0x3f));
	} else if (cp < 0x10000) {
		*w++ = (char)(0xe0 | cp >> 12);
		*w++ = (char)(0x80 | (cp >> 6 & 0x3f));
		*w++ = (char)(0x80 | (cp & 0x3f));
	} else {
		*w++ = (char)(0xf0 | cp >> 18);
		*w++ = (char)(0x80 | (cp >> 12 & 0x3f));
		*w++ = (char)(0x80 | (cp >> 6 & 0x3f));
		*w++ = (char)(0x80 | (cp & 0x3f));
	}
	return w;
}

/* A string (j->p at its quote, after white space). With out, decodes it in
 * place and points *out at it; without, only checks it. */
static int json_string(struct json *j, char **out)
{
	if (!json_peek(j, '"'))
		return json_fail(j, "expected a string");
	char *s = ++j->p, *w = s;
	while (j->p < j->end && *j->p != '"') {
		const unsigned char *u = (const unsigned char *)j->p;
		if (*u < 0x20)
			return json_fail(j, "control character in a string");
		if (*u == '\\') {
			uint32_t cp;
			SP_CHECK(json_escape(j, &cp));
			if (out)
				w = utf8_put(w, cp);
			continue;
		}
		int len = utf8_len(u, (const unsigned char *)j->end);
		if (!len)
			return json_fail(j, "invalid UTF-8 in a string");
		if (out) {
			memmove(w, j->p, (size_t)len);
			w += len;
		}
		j->p += len;
	}
	if (j->p >= j->end)
		return json_fail(j, "unterminated string");
	j->p++;
	if (out) {
		*w = 0;
		*out = s;
	}
	return 0;
}

/* An integer (-?(0|[1-9][0-9]*)): the format holds only sizes, so fractions
 * and exponents are refused. The value saturates at UINT64_MAX. */
static int json_integer(struct json *j, uint64_t *v, bool *neg)
{
	json_ws(j);
	bool minus = j->p < j->end && *j->p == '-';
	j->p += minus;
	if (j->p >= j->end || !is_digit(*j->p))
		return json_fail(j, "expected a digit");
	if (*j->p == '0' && j->p + 1 < j->end && is_digit(j->p[1]))
		return json_fail(j, "leading zero in a number");
	uint64_t x = 0;
	for (; j->p < j->end && is_digit(*j->p); j->p++) {
		unsigned d = (unsigned)(*j->p - '0');
		x = x > (UINT64_MAX - d) / 10 ? UINT64_MAX : x * 10 + d;
	}
	if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E'))
		return json_fail(j, "numbers must be integers");
	*v = x;
	*neg = minus;
	return 0;
}

static int json_value(struct json *j, int depth);

/* An object or an array (j->p at its opening bracket). */
static int json_container(struct json *j, int depth)
{
	bool object = *j->p == '{';
	char close = object ? '}' : ']';
	j->p++;
	if (json_eat(j, close))
		return 0;
	do {
		if (object) {
			SP_CHECK(json_string(j, NULL));
			SP_CHECK(json_expect(j, ':'));
		}
		SP_CHECK(json_value(j, depth + 1));
	} while (json_eat(j, ','));
	return json_expect(j, close);
}

/* Pass 1: any value of the subset, nested at most JSON_DEPTH_MAX deep. */
static int json_value(struct json *j, int depth)
{
	json_ws(j);
	if (j->p >= j->end)
		return json_fail(j, "unexpected end of the header");
	char ch = *j->p;
	if (ch == '{' || ch == '[') {
		if (depth > JSON_DEPTH_MAX)
			return json_fail(j, "nesting deeper than 8 levels");
		return json_container(j, depth);
	}
	if (ch == '"')
		return json_string(j, NULL);
	if (ch == '-' || is_digit(ch)) {
		uint64_t v;
		bool neg;
		return json_integer(j, &v, &neg);
	}
	char what[80];
	if (ch >= 0x20 && ch < 0x7f)
		snprintf(what, sizeof(what),
		         "unexpected '%c' (only objects, arrays, strings and integers)", ch);
	else
		snprintf(what, sizeof(what), "unexpected byte 0x%02x", (unsigned char)ch);
	return json_fail(j, what);
}

/* ---- the schema ------------------------------------------------------------------- */

/* An array of at most max integers in 0..2^63-1 (shape, data_offsets). */
static int parse_uints(struct json *j, const char *name, const char *field, uint64_t *v, int max,
                       int *count)
{
	if (!json_eat(j, '['))
		return ckpt_fail(j->path, "tensor '%.80s': %s is not an array", name, field);
	int k = 0;
	if (!json_eat(j, ']')) {
		do {
			uint64_t x;
			bool neg;
			json_ws(j);
			if (j->p >= j->end || (*j->p != '-' && !is_digit(*j->p)))
				return ckpt_fail(j->path, "tensor '%.80s': %s holds a non-integer",
				                 name, field);
			SP_CHECK(json_integer(j, &x, &neg));
			if (neg && x != 0)
				return ckpt_fail(j->path,
				                 "tensor '%.80s': %s holds a negative number", name,
				                 field);
			if (x > INT64_MAX)
				return ckpt_fail(j->path,
				                 "tensor '%.80s': %s holds a number over 2^63",
				                 name, field);
			if (k == max)
				return ckpt_fail(j->path,
				                 "tensor '%.80s': %s has more than %d entries",
				                 name, field, max);
			v[k++] = x;
		} while (json_eat(j, ','));
		SP_CHECK(json_expect(j, ']'));
	}
	*count = k;
	return 0;
}

static int parse_dtype(struct json *j, struct ckpt_entry *e)
{
	char *s;
	if (!json_peek(j, '"'))
		return ckpt_fail(j->path, "tensor '%.80s': dtype is not a string", e->name);
	SP_CHECK(json_string(j, &s));
	for (size_t i = 0; i < SP_ARRAY_SIZE(dtypes); i++)
		if (strcmp(s, dtypes[i].name) == 0) {
			e->dtype = (enum tr_dtype)i;
			return 0;
		}
	return ckpt_fail(j->path, "tensor '%.80s': unsupported dtype '%.16s' (F32, I32 or U8)",
	                 e->name, s);
}

static int parse_field(struct json *j, struct ckpt_entry *e, int field)
{
	uint64_t v[4];
	int k;
	switch (field) {
	case 0: return parse_dtype(j, e);
	case 1:
		SP_CHECK(parse_uints(j, e->name, "shape", v, 4, &k));
		e->ndim = k;
		for (int d = 0; d < k; d++)
			e->shape[d] = (int64_t)v[d];
		return 0;
	default:
		SP_CHECK(parse_uints(j, e->name, "data_offsets", v, 2, &k));
		if (k != 2)
			return ckpt_fail(
			    j->path, "tensor '%.80s': data_offsets must be [begin, end]", e->name);
		e->begin = v[0];
		e->end = v[1];
		return 0;
	}
}

/* One tensor's range against its shape and the data; overlaps come later. */
static int check_entry(const struct tr_ckpt *c, const char *path, const struct ckpt_entry *e)
{
	uint64_t bytes;
	if (e->begin > e->end)
		return ckpt_fail(
		    path, "tensor '%.80s': data_offsets [%" PRIu64 ", %" PRIu64 "] are reversed",
		    e->name, e->begin, e->end);
	if (e->end > c->data_size)
		return ckpt_fail(path,
		                 "tensor '%.80s': data_offsets [%" PRIu64 ", %" PRIu64
		                 "] end past the %" PRIu64 " bytes of data",
		                 e->name, e->begin, e->end, c->data_size);
	if (!shape_bytes(e->shape, e->ndim, dtypes[e->dtype].size, &bytes))
		return ckpt_fail(path, "tensor '%.80s': the shape's size overflows", e->name);
	if (bytes != e->end - e->begin)
		return ckpt_fail(path,
		                 "tensor '%.80s': its shape holds %" PRIu64 " bytes of %s but "
		                 "data_offsets span %" PRIu64,
		                 e->name, bytes, dtypes[e->dtype].name, e->end - e->begin);
	return 0;
}

/* {"dtype": .., "shape": [..], "data_offsets": [b, e]}: exactly these keys. */
static int parse_tensor(struct tr_ckpt *c, struct json *j, const char *name)
{
	static const char *const fields[] = {"dtype", "shape", "data_offsets"};
	struct ckpt_entry e = {.name = name};
	unsigned seen = 0;
	if (!json_eat(j, '{'))
		return ckpt_fail(j->path, "tensor '%.80s' is not an object", name);
	if (!json_eat(j, '}')) {
		do {
			char *key;
			SP_CHECK(json_string(j, &key));
			SP_CHECK(json_expect(j, ':'));
			int f = 0;
			while (f < 3 && strcmp(key, fields[f]) != 0)
				f++;
			if (f == 3)
				return ckpt_fail(j->path, "tensor '%.80s': unknown key '%.80s'",
				                 name, key);
			if (seen & 1u << f)
				return ckpt_fail(j->path, "tensor '%.80s': %s appears twice", name,
				                 key);
			seen |= 1u << f;
			SP_CHECK(parse_field(j, &e, f));
		} while (json_eat(j, ','));
		SP_CHECK(json_expect(j, '}'));
	}
	for (int f = 0; f < 3; f++)
		if (!(seen & 1u << f))
			return ckpt_fail(j->path, "tensor '%.80s' has no %s", name, fields[f]);
	SP_CHECK(check_entry(c, j->path, &e));
	struct ckpt_entry *t = grow(c->t, &c->cap, c->n, sizeof(*t));
	if (!t)
		return sp_error(-ENOMEM, "checkpoint %s: out of memory", j->path);
	c->t = t;
	c->t[c->n++] = e;
	return 0;
}

static int parse_meta(struct tr_ckpt *c, struct json *j)
{
	if (!json_eat(j, '{'))
		return ckpt_fail(j->path, "%s is not an object", META_KEY);
	if (json_eat(j, '}'))
		return 0;
	do {
		char *key, *value;
		SP_CHECK(json_string(j, &key));
		SP_CHECK(json_expect(j, ':'));
		if (!json_peek(j, '"'))
			return ckpt_fail(j->path, "%s: the value of '%.80s' is not a string",
			                 META_KEY, key);
		SP_CHECK(json_string(j, &value));
		struct ckpt_meta *m = grow(c->meta, &c->metacap, c->nmeta, sizeof(*m));
		if (!m)
			return sp_error(-ENOMEM, "checkpoint %s: out of memory", j->path);
		c->meta = m;
		c->meta[c->nmeta++] = (struct ckpt_meta){key, value};
	} while (json_eat(j, ','));
	return json_expect(j, '}');
}

/* Pass 2: {"name": tensor, ..., "__metadata__": {...}} in any order. */
static int parse_top(struct tr_ckpt *c, struct json *j)
{
	bool meta = false;
	if (!json_eat(j, '{'))
		return ckpt_fail(j->path, "the header is not a JSON object");
	if (json_eat(j, '}'))
		return 0;
	do {
		char *key;
		SP_CHECK(json_string(j, &key));
		SP_CHECK(json_expect(j, ':'));
		if (strcmp(key, META_KEY) != 0) {
			SP_CHECK(parse_tensor(c, j, key));
			continue;
		}
		if (meta)
			return ckpt_fail(j->path, "%s appears twice", META_KEY);
		meta = true;
		SP_CHECK(parse_meta(c, j));
	} while (json_eat(j, ','));
	return json_expect(j, '}');
}

static int parse_header(struct tr_ckpt *c, const char *path, uint64_t hlen)
{
	struct json j = {c->header, c->header + hlen, c->header, path};
	SP_CHECK(json_value(&j, 1));
	json_ws(&j);
	if (j.p != j.end)
		return json_fail(&j, "trailing garbage after the JSON value");
	j.p = c->header;
	return parse_top(c, &j);
}

/* ---- the layout ------------------------------------------------------------------- */

static int cmp_entry_name(const void *a, const void *b)
{
	return strcmp((*(const struct ckpt_entry *const *)a)->name,
	              (*(const struct ckpt_entry *const *)b)->name);
}

static int cmp_entry_offset(const void *a, const void *b)
{
	const struct ckpt_entry *x = *(const struct ckpt_entry *const *)a;
	const struct ckpt_entry *y = *(const struct ckpt_entry *const *)b;
	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	return x->end < y->end ? -1 : x->end > y->end;
}

/* The ranges sorted by offset must tile the data exactly. Overlaps would alias
 * tensors; the official format also forbids holes and a tail, and so do we: a
 * byte no tensor owns is a sign of a corrupt or hand-edited file, and this way
 * we accept what the official reader accepts. */
static int check_tiling(const struct tr_ckpt *c, const char *path, struct ckpt_entry **by_off)
{
	uint64_t at = 0;
	const struct ckpt_entry *prev = NULL;
	qsort(by_off, (size_t)c->n, sizeof(*by_off), cmp_entry_offset);
	for (int i = 0; i < c->n; i++) {
		const struct ckpt_entry *e = by_off[i];
		if (e->begin < at)
			return ckpt_fail(path,
			                 "tensors '%.80s' and '%.80s' overlap ([%" PRIu64
			                 ", %" PRIu64 ") and [%" PRIu64 ", %" PRIu64 "))",
			                 prev->name, e->name, prev->begin, prev->end, e->begin,
			                 e->end);
		if (e->begin > at)
			return ckpt_fail(path,
			                 "data bytes [%" PRIu64 ", %" PRIu64 ") belong to no "
			                 "tensor (a gap before '%.80s')",
			                 at, e->begin, e->name);
		at = e->end;
		prev = e;
	}
	if (at != c->data_size)
		return ckpt_fail(path,
		                 "data bytes [%" PRIu64 ", %" PRIu64 ") belong to no tensor "
		                 "(after the last one)",
		                 at, c->data_size);
	return 0;
}

/* A tensor with bytes at an offset that is not a multiple of its element size
 * (the format does not align tensors) is read from an aligned copy. */
static bool misaligned(const struct ckpt_entry *e)
{
	return e->end > e->begin && e->begin % dtypes[e->dtype].size != 0;
}

/* Points every tensor at its data, aligned to its element size: an empty one
 * at the (aligned) start of the data, a misaligned one at its copy. */
static int place_data(struct tr_ckpt *c, const char *path)
{
	uint64_t moved = 0;
	for (int i = 0; i < c->n; i++)
		if (misaligned(&c->t[i]))
			moved += (c->t[i].end - c->t[i].begin + 7) & ~7ull;
	if (moved && !(c->moved = malloc(moved)))
		return sp_error(-ENOMEM, "checkpoint %s: out of memory", path);
	unsigned char *w = c->moved;
	for (int i = 0; i < c->n; i++) {
		struct ckpt_entry *e = &c->t[i];
		e->data = e->end > e->begin ? c->data + e->begin : c->data;
		if (misaligned(e)) {
			memcpy(w, e->data, e->end - e->begin);
			e->data = w;
			w += (e->end - e->begin + 7) & ~7ull;
		}
	}
	return 0;
}

static int check_layout(struct tr_ckpt *c, const char *path)
{
	int rc = 0;
	c->by_name = malloc(sizeof(*c->by_name) * (size_t)c->n + 1); /* + 1: as in read_parts */
	struct ckpt_entry **by_off = malloc(sizeof(*by_off) * (size_t)c->n + 1);
	if (!c->by_name || !by_off) {
		rc = sp_error(-ENOMEM, "checkpoint %s: out of memory", path);
		goto out;
	}
	for (int i = 0; i < c->n; i++)
		c->by_name[i] = by_off[i] = &c->t[i];
	qsort(c->by_name, (size_t)c->n, sizeof(*c->by_name), cmp_entry_name);
	for (int i = 1; i < c->n && !rc; i++)
		if (strcmp(c->by_name[i - 1]->name, c->by_name[i]->name) == 0)
			rc = ckpt_fail(path, "duplicate tensor name '%.80s'", c->by_name[i]->name);
	if (c->nmeta)
		qsort(c->meta, (size_t)c->nmeta, sizeof(*c->meta), cmp_meta);
	for (int i = 1; i < c->nmeta && !rc; i++)
		if (strcmp(c->meta[i - 1].key, c->meta[i].key) == 0)
			rc = ckpt_fail(path, "duplicate metadata key '%.80s'", c->meta[i].key);
	if (!rc)
		rc = check_tiling(c, path, by_off);
	if (!rc)
		rc = place_data(c, path);
out:
	free(by_off);
	return rc;
}

/* 8 lowercase or uppercase hex digits, exactly. */
static bool parse_crc(const char *s, uint32_t *out)
{
	uint32_t v = 0;
	int k = 0;
	for (; k < 8 && s[k]; k++) {
		char ch = s[k];
		int d = is_digit(ch)             ? ch - '0'
		        : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
		        : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
		                                 : -1;
		if (d < 0)
			return false;
		v = v << 4 | (uint32_t)d;
	}
	*out = v;
	return k == 8 && !s[k];
}

/* With any checksum in the metadata, all of them: each names a tensor of the
 * file (or the metadata), every tensor and the metadata have one, and each
 * matches. Without any the file is accepted unverified. */
static int check_checksums(struct tr_ckpt *c, const char *path)
{
	int ncrc = 0;
	size_t longest = 0;
	for (int i = 0; i < c->nmeta; i++)
		ncrc += is_crc_key(c->meta[i].key);
	if (!ncrc)
		return 0;
	for (int i = 0; i < c->nmeta; i++) {
		const char *k = c->meta[i].key, *name = k + strlen(CRC_PREFIX);
		uint32_t v;
		struct tr_tensor x;
		if (!is_crc_key(k))
			continue;
		if (strcmp(name, META_KEY) != 0 && tr_ckpt_find(c, name, &x) < 0)
			return ckpt_fail(path,
			                 "checksum '%.80s' of a tensor the file does not hold", k);
		if (!parse_crc(c->meta[i].value, &v))
			return ckpt_fail(path, "checksum '%.80s' = '%.16s' is not 8 hex digits", k,
			                 c->meta[i].value);
	}
	for (int i = 0; i < c->n; i++)
		if (strlen(c->t[i].name) > longest)
			longest = strlen(c->t[i].name);
	char *key = malloc(sizeof(CRC_META) + longest);
	if (!key)
		return sp_error(-ENOMEM, "checkpoint %s: out of memory", path);
	int rc = 0;
	for (int i = 0; i <= c->n && !rc; i++) {
		const struct ckpt_entry *e = i < c->n ? &c->t[i] : NULL;
		sprintf(key, "%s%s", CRC_PREFIX, e ? e->name : META_KEY);
		const char *want = tr_ckpt_meta(c, key);
		uint32_t have = e ? tr_crc32c(0, e->data, e->end - e->begin)
		                  : meta_crc(c->meta, c->nmeta),
		         v = 0;
		if (!want)
			rc = e ? ckpt_fail(path, "tensor '%.80s' has no checksum ('%.80s')",
			                   e->name, key)
			       : ckpt_fail(path, "the metadata has no checksum ('" CRC_META "')");
		else if (parse_crc(want, &v) && v != have)
			rc = e ? ckpt_fail(path,
			                   "tensor '%.80s' is corrupt: the CRC-32C of its data is "
			                   "%08" PRIx32 ", the header records %s",
			                   e->name, have, want)
			       : ckpt_fail(path,
			                   "the metadata is corrupt: its CRC-32C is %08" PRIx32
			                   ", the header records %s",
			                   have, want);
	}
	free(key);
	if (!rc)
		c->verified = true;
	return rc;
}

int tr_ckpt_open(const char *path, struct tr_ckpt **out)
{
	SP_CHECK_ARG(path && out, "tr_ckpt_open: NULL argument");
	struct tr_ckpt *c = calloc(1, sizeof(*c));
	if (!c || !(c->path = strdup(path))) {
		free(c);
		return sp_error(-ENOMEM, "checkpoint %s: out of memory", path);
	}
	uint64_t hlen = 0;
	int rc;
	SP_CHECK_GOTO(ckpt_read(c, path, &hlen), rc, fail);
	SP_CHECK_GOTO(parse_header(c, path, hlen), rc, fail);
	SP_CHECK_GOTO(check_layout(c, path), rc, fail);
	SP_CHECK_GOTO(check_checksums(c, path), rc, fail);
	*out = c;
	return 0;
fail:
	tr_ckpt_close(c);
	return rc;
}

void tr_ckpt_close(struct tr_ckpt *c)
{
	if (!c)
		return;
	free(c->meta);
	free(c->by_name);
	free(c->t);
	free(c->moved);
	free(c->data);
	free(c->header);
	free(c->path);
	free(c);
}

int tr_ckpt_count(const struct tr_ckpt *c)
{
	return c ? c->n : 0;
}

static void entry_out(const struct ckpt_entry *e, struct tr_tensor *out)
{
	memset(out, 0, sizeof(*out));
	out->name = e->name;
	out->dtype = e->dtype;
	out->ndim = e->ndim;
	memcpy(out->shape, e->shape, sizeof(out->shape));
	out->data = e->data;
}

int tr_ckpt_get(const struct tr_ckpt *c, int i, struct tr_tensor *out)
{
	SP_CHECK_ARG(c && out, "tr_ckpt_get: NULL argument");
	if (i < 0 || i >= c->n)
		return sp_error(-ENOENT, "checkpoint %s: no tensor %d (it holds %d)", c->path, i,
		                c->n);
	entry_out(&c->t[i], out);
	return 0;
}

int tr_ckpt_find(const struct tr_ckpt *c, const char *name, struct tr_tensor *out)
{
	SP_CHECK_ARG(c && name && out, "tr_ckpt_find: NULL argument");
	struct ckpt_entry key = {.name = name};
	const struct ckpt_entry *kp = &key;
	struct ckpt_entry *const *e =
	    c->n ? bsearch(&kp, c->by_name, (size_t)c->n, sizeof(kp), cmp_entry_name) : NULL;
	if (!e)
		return sp_error(-ENOENT, "checkpoint %s: no tensor '%.80s'", c->path, name);
	entry_out(*e, out);
	return 0;
}

const char *tr_ckpt_meta(const struct tr_ckpt *c, const char *key)
{
	if (!c || !key || !c->nmeta)
		return NULL;
	struct ckpt_meta k = {.key = key};
	const struct ckpt_meta *m = bsearch(&k, c->meta, (size_t)c->nmeta, sizeof(k), cmp_meta);
	return m ? m->value : NULL;
}

int tr_ckpt_verified(const struct tr_ckpt *c)
{
	return c && c->verified;
}

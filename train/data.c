/* train/data.c — token corpora (train.h, "token data"): llm.c shards, plain text,
 * the default corpus (the `bible` command's King James Bible), and `spill prepare`.
 *
 * A corpus is read whole into memory at open, 2 bytes per token: one uint16 array
 * holding the train split then the val split, so a sample is a copy. Shards of a
 * split are concatenated in name order; a window may straddle two shards, as
 * llm.c's shards are one stream of documents separated by <|endoftext|>.
 * A shard must hold exactly the tokens its header states (1024 + 2 x count bytes):
 * a shorter file is truncated and a longer one is not a shard we understand; both
 * are refused naming the file, the expected and the actual size.
 * A single file is one shard when its name ends in ".bin" and text otherwise, so a
 * damaged shard is refused instead of being read as text. In a directory, hidden
 * files (".name") are not shards (temporaries of prepare, AppleDouble files).
 * A sample's start comes from a hash of (seed, split, step, sample) alone: no state,
 * so a resumed run sees the batches of an uninterrupted one.
 * prepare creates only the last component of dir (mkdir, not mkdir -p). Every
 * shard goes to a hidden temporary, is fsync'd, renamed and the directory fsync'd;
 * on failure the shards this call completed are removed again.
 */
#include "train/train.h"

#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define SHARD_MAGIC          20240520
#define SHARD_VERSION        1
#define SHARD_HEADER_INTS    256
#define SHARD_HEADER_BYTES   (SHARD_HEADER_INTS * 4)
#define GPT2_VOCAB           50257
#define TEXT_VOCAB           256
#define DEFAULT_SHARD_TOKENS 100000000ull
#define CHUNK                8192 /* bytes per read in text and prepare loops */

struct tr_data {
	uint16_t *tok; /* the train split, then the val split */
	uint64_t n[2]; /* tokens of TR_TRAIN, TR_VAL */
	int vocab;
	char desc[PATH_MAX + 96];
};

/* ---- small I/O helpers --------------------------------------------------------- */

/* Reads up to len bytes at off; fewer only at the end of the file. Returns the
 * count, or -errno. */
static ssize_t read_at(int fd, void *buf, size_t len, off_t off)
{
	size_t done = 0;
	while (done < len) {
		ssize_t got = pread(fd, (char *)buf + done, len - done, off + (off_t)done);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			return -errno;
		if (got == 0)
			break;
		done += (size_t)got;
	}
	return (ssize_t)done;
}

static int write_all(int fd, const void *buf, size_t len, const char *what)
{
	const char *p = buf;
	while (len) {
		ssize_t put = write(fd, p, len);
		if (put < 0 && errno == EINTR)
			continue;
		if (put < 0)
			return sp_error(-errno, "prepare: %s: write: %s", what, strerror(errno));
		p += put;
		len -= (size_t)put;
	}
	return 0;
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);
	return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* "4.1M": token counts for humans (decimal units, as dataset sizes are quoted). */
static void human(char *buf, size_t len, uint64_t n)
{
	if (n < 1000)
		snprintf(buf, len, "%" PRIu64, n);
	else if (n < 1000000)
		snprintf(buf, len, "%.1fK", n / 1e3);
	else if (n < 1000000000)
		snprintf(buf, len, "%.1fM", n / 1e6);
	else
		snprintf(buf, len, "%.1fG", n / 1e9);
}

/* ---- opening: shared tail ------------------------------------------------------ */

/* Makes the last 10% of all tokens the val split (corpora without their own). */
static void split_tail(struct tr_data *d)
{
	uint64_t total = d->n[TR_TRAIN] + d->n[TR_VAL];
	d->n[TR_VAL] = total / 10;
	d->n[TR_TRAIN] = total - d->n[TR_VAL];
}

/* Checks both splits hold tokens and completes the description, whose first part
 * ("text PATH") the opener wrote. */
static int finish(struct tr_data *d)
{
	if (!d->n[TR_TRAIN] || !d->n[TR_VAL])
		return sp_error(-EINVAL,
		                "data: %s: %" PRIu64 " train and %" PRIu64
		                " val tokens; both splits must be non-empty",
		                d->desc, d->n[TR_TRAIN], d->n[TR_VAL]);
	char tr[32], va[32];
	human(tr, sizeof(tr), d->n[TR_TRAIN]);
	human(va, sizeof(va), d->n[TR_VAL]);
	size_t at = strlen(d->desc);
	snprintf(d->desc + at, sizeof(d->desc) - at, " (%s train, %s val tokens, vocab %d)", tr, va,
	         d->vocab);
	return 0;
}

/* ---- llm.c shards ---------------------------------------------------------------- */

/* Validates the shard open in fd and returns its token count in *count. With dst,
 * also reads its tokens (host order) into dst, which has room for exactly `room`
 * (the count a first pass saw; a file changed in between is refused). */
static int shard_read(int fd, const char *path, uint16_t *dst, uint64_t room, uint64_t *count,
                      int *vocab)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return sp_error(-errno, "data: shard %s: stat: %s", path, strerror(errno));
	uint32_t h[SHARD_HEADER_INTS];
	ssize_t got = read_at(fd, h, sizeof(h), 0);
	if (got < 0)
		return sp_error((int)got, "data: shard %s: read: %s", path, strerror((int)-got));
	if (got < (ssize_t)sizeof(h))
		return sp_error(-EINVAL,
		                "data: shard %s: %zd bytes, shorter than the %d-byte llm.c header",
		                path, got, SHARD_HEADER_BYTES);
	int32_t magic = (int32_t)le32toh(h[0]), version = (int32_t)le32toh(h[1]);
	int32_t n = (int32_t)le32toh(h[2]);
	if (magic != SHARD_MAGIC)
		return sp_error(-EINVAL, "data: shard %s: bad magic %" PRId32 " (llm.c: %d)", path,
		                magic, SHARD_MAGIC);
	if (version != SHARD_VERSION)
		return sp_error(-EINVAL, "data: shard %s: version %" PRId32 ", only %d is known",
		                path, version, SHARD_VERSION);
	if (n <= 0)
		return sp_error(-EINVAL, "data: shard %s: token count %" PRId32 ", must be > 0",
		                path, n);
	uint64_t want = SHARD_HEADER_BYTES + 2 * (uint64_t)n;
	if ((uint64_t)st.st_size != want)
		return sp_error(-EINVAL,
		                "data: shard %s: the header's %" PRId32 " tokens take %" PRIu64
		                " bytes, the file has %lld%s",
		                path, n, want, (long long)st.st_size,
		                (uint64_t)st.st_size < want ? " (truncated)" : "");
	if (dst) {
		if ((uint64_t)n != room)
			return sp_error(-EINVAL, "data: shard %s: changed while being read", path);
		got = read_at(fd, dst, 2 * room, SHARD_HEADER_BYTES);
		if (got < 0)
			return sp_error((int)got, "data: shard %s: read: %s", path,
			                strerror((int)-got));
		if ((uint64_t)got != 2 * room)
			return sp_error(-EINVAL, "data: shard %s: changed while being read", path);
		for (uint64_t i = 0; i < room; i++)
			dst[i] = le16toh(dst[i]);
	}
	*count = (uint64_t)n;
	/* header int 3: the vocab, where the writer said it (spill prepare: 256);
	 * llm.c leaves it 0 */
	int32_t v = (int32_t)le32toh(h[3]);
	*vocab = v > 0 ? v : 0;
	return 0;
}

static int shard_load(const char *path, uint16_t *dst, uint64_t room, uint64_t *count, int *vocab)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return sp_error(-errno, "data: shard %s: %s", path, strerror(errno));
	int rc = shard_read(fd, path, dst, room, count, vocab);
	close(fd);
	return rc;
}

/* A growable list of paths: dir/name, or dir alone when name is NULL. */
struct paths {
	char **v;
	int n, cap;
};

static int paths_push(struct paths *p, const char *dir, const char *name)
{
	if (p->n == p->cap) {
		int cap = p->cap ? 2 * p->cap : 16;
		char **v = realloc(p->v, (size_t)cap * sizeof(*v));
		if (!v)
			return sp_error(-ENOMEM, "data: out of memory listing %s", dir);
		p->v = v;
		p->cap = cap;
	}
	char *s = NULL;
	if (!name)
		s = strdup(dir);
	else if (asprintf(&s, "%s/%s", dir, name) < 0)
		s = NULL;
	if (!s)
		return sp_error(-ENOMEM, "data: out of memory listing %s", dir);
	p->v[p->n++] = s;
	return 0;
}

static void paths_free(struct paths *p)
{
	for (int i = 0; i < p->n; i++)
		free(p->v[i]);
	free(p->v);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Offset of the last occurrence of w in s, or -1. */
static ptrdiff_t last_of(const char *s, const char *w)
{
	ptrdiff_t at = -1;
	for (const char *p = strstr(s, w); p; p = strstr(p + 1, w))
		at = p - s;
	return at;
}

/* The split of a directory entry, or -1 when it is no shard. A name holding both
 * words goes by the later one: llm.c names shards DATASET_SPLIT_NNNNNN.bin, so
 * "interval_train_000000.bin" is train. */
static int shard_split(const char *name)
{
	if (name[0] == '.' || !ends_with(name, ".bin"))
		return -1;
	ptrdiff_t t = last_of(name, "train"), v = last_of(name, "val");
	if (t < 0 && v < 0)
		return -1;
	return v > t ? TR_VAL : TR_TRAIN;
}

/* Lists the regular files of dir that are shards into set[split], name order. */
static int list_shards(const char *dir, struct paths set[2])
{
	DIR *dp = opendir(dir);
	if (!dp)
		return sp_error(-errno, "data: %s: %s", dir, strerror(errno));
	int rc = 0;
	struct dirent *e;
	errno = 0;
	while (rc == 0 && (e = readdir(dp))) {
		int s = shard_split(e->d_name);
		struct stat st;
		if (s < 0 || fstatat(dirfd(dp), e->d_name, &st, 0) < 0 || !S_ISREG(st.st_mode))
			continue;
		rc = paths_push(&set[s], dir, e->d_name);
	}
	if (rc == 0 && errno)
		rc = sp_error(-errno, "data: %s: readdir: %s", dir, strerror(errno));
	closedir(dp);
	for (int s = 0; s < 2; s++)
		if (set[s].n)
			qsort(set[s].v, (size_t)set[s].n, sizeof(char *), cmp_str);
	return rc;
}

/* Loads the shards of set (train, val) in two passes: every header is checked
 * before the one allocation, then the tokens are read into place. */
static int load_shards(struct paths set[2], struct tr_data *d)
{
	int nfiles = set[TR_TRAIN].n + set[TR_VAL].n;
	uint64_t *count = calloc((size_t)nfiles, sizeof(*count));
	if (!count)
		return sp_error(-ENOMEM, "data: out of memory");
	int rc = 0, declared = 0, v;
	for (int s = 0, k = 0; s < 2; s++)
		for (int i = 0; i < set[s].n; i++, k++) {
			SP_CHECK_GOTO(shard_load(set[s].v[i], NULL, 0, &count[k], &v), rc, out);
			d->n[s] += count[k];
			declared = v > declared ? v : declared;
		}
	uint64_t total = d->n[TR_TRAIN] + d->n[TR_VAL];
	d->tok = malloc(total * sizeof(uint16_t)); /* total > 0: every shard holds tokens */
	if (!d->tok) {
		rc = sp_error(-ENOMEM, "data: out of memory for %" PRIu64 " tokens", total);
		goto out;
	}
	uint64_t at = 0, c;
	for (int s = 0, k = 0; s < 2; s++)
		for (int i = 0; i < set[s].n; i++, k++) {
			SP_CHECK_GOTO(shard_load(set[s].v[i], d->tok + at, count[k], &c, &v), rc,
			              out);
			at += c;
		}
	unsigned max = 0;
	for (uint64_t i = 0; i < total; i++)
		max = d->tok[i] > max ? d->tok[i] : max;
	d->vocab = declared ? declared : GPT2_VOCAB;
	if (max >= (unsigned)d->vocab)
		d->vocab = (int)max + 1;
	if (!set[TR_VAL].n)
		split_tail(d);
out:
	free(count);
	return rc;
}

static int open_dir(const char *dir, struct tr_data *d)
{
	struct paths set[2] = {{0}};
	int rc;
	SP_CHECK_GOTO(list_shards(dir, set), rc, out);
	if (!set[TR_TRAIN].n) {
		rc = sp_error(-EINVAL,
		              "data: %s: no train shards (files *.bin whose names contain "
		              "\"train\")",
		              dir);
		goto out;
	}
	SP_CHECK_GOTO(load_shards(set, d), rc, out);
	snprintf(d->desc, sizeof(d->desc), "shards in %s", dir);
out:
	paths_free(&set[TR_VAL]);
	paths_free(&set[TR_TRAIN]);
	return rc;
}

static int open_shard(const char *path, struct tr_data *d)
{
	struct paths set[2] = {{0}};
	int rc;
	SP_CHECK_GOTO(paths_push(&set[TR_TRAIN], path, NULL), rc, out);
	SP_CHECK_GOTO(load_shards(set, d), rc, out);
	snprintf(d->desc, sizeof(d->desc), "shard %s", path);
out:
	paths_free(&set[TR_TRAIN]);
	return rc;
}

/* ---- text -------------------------------------------------------------------------- */

/* Reads fd to its end, one token per byte, into d (all as train; the caller
 * splits). hint: the expected size (0 when unknown, as for a pipe). */
static int text_read(int fd, const char *name, size_t hint, struct tr_data *d)
{
	size_t cap = hint + 1 > CHUNK ? hint + 1 : CHUNK, len = 0;
	uint16_t *tok = malloc(cap * sizeof(*tok));
	if (!tok)
		return sp_error(-ENOMEM, "data: %s: out of memory for %zu bytes", name, hint);
	unsigned char buf[CHUNK];
	int rc = 0;
	for (;;) {
		ssize_t got = read(fd, buf, sizeof(buf));
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			rc = sp_error(-errno, "data: %s: read: %s", name, strerror(errno));
			break;
		}
		if (got == 0)
			break;
		if (len + (size_t)got > cap) {
			uint16_t *grown = realloc(tok, 2 * cap * sizeof(*tok));
			if (!grown) {
				rc = sp_error(-ENOMEM, "data: %s: out of memory after %zu bytes",
				              name, len);
				break;
			}
			tok = grown;
			cap *= 2;
		}
		for (ssize_t i = 0; i < got; i++)
			tok[len + (size_t)i] = buf[i];
		len += (size_t)got;
	}
	if (rc < 0 || !len) {
		free(tok);
		return rc < 0 ? rc : sp_error(-EINVAL, "data: %s: empty", name);
	}
	/* a pipe's doubling can leave up to half unused; memory stays 2 bytes/token */
	uint16_t *fit = realloc(tok, len * sizeof(*tok));
	d->tok = fit ? fit : tok;
	d->n[TR_TRAIN] = len;
	d->vocab = TEXT_VOCAB;
	split_tail(d);
	return 0;
}

static int open_text(const char *path, const struct stat *st, struct tr_data *d)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return sp_error(-errno, "data: %s: %s", path, strerror(errno));
	int rc = text_read(fd, path, S_ISREG(st->st_mode) ? (size_t)st->st_size : 0, d);
	close(fd);
	if (rc == 0)
		snprintf(d->desc, sizeof(d->desc), "text %s", path);
	return rc;
}

/* The default corpus: the output of `bible -l 79 Gen1:1-Rev22:21`, run without a
 * shell. -l 79 fixes the line width, which bible otherwise takes from $COLUMNS,
 * so the corpus is the same byte for byte wherever it runs. */
static int open_bible(struct tr_data *d)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return sp_error(-errno, "data: pipe: %s", strerror(errno));
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, p[1], STDOUT_FILENO);
	posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
	char *argv[] = {"bible", "-l", "79", "Gen1:1-Rev22:21", NULL};
	pid_t pid;
	int err = posix_spawnp(&pid, "bible", &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(p[1]);
	if (err) {
		close(p[0]);
		if (err == ENOENT)
			return sp_error(-ENOENT, "data: no default corpus: the `bible` command is "
			                         "missing; install bible-kjv (`make deps`) or pass "
			                         "--data");
		return sp_error(-err, "data: cannot run `bible`: %s", strerror(err));
	}
	int rc = text_read(p[0], "`bible` output", 0, d);
	close(p[0]);
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return rc ? rc : sp_error(-errno, "data: waitpid: %s", strerror(errno));
	if (rc == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
		rc = sp_error(-EIO, "data: `bible` failed (wait status %d)", status);
	if (rc == 0)
		snprintf(d->desc, sizeof(d->desc), "default corpus bible-kjv");
	return rc;
}

/* ---- the API --------------------------------------------------------------------- */

int tr_data_open(const char *path, struct tr_data **out)
{
	SP_CHECK_ARG(out, "tr_data_open: NULL out");
	struct tr_data *d = calloc(1, sizeof(*d));
	if (!d)
		return sp_error(-ENOMEM, "data: out of memory");
	struct stat st;
	int rc;
	if (!path)
		rc = open_bible(d);
	else if (stat(path, &st) < 0)
		rc = sp_error(-errno, "data: %s: %s", path, strerror(errno));
	else if (S_ISDIR(st.st_mode))
		rc = open_dir(path, d);
	else if (ends_with(path, ".bin"))
		rc = open_shard(path, d);
	else
		rc = open_text(path, &st, d);
	if (rc == 0)
		rc = finish(d);
	if (rc < 0) {
		tr_data_close(d);
		return rc;
	}
	*out = d;
	return 0;
}

void tr_data_close(struct tr_data *d)
{
	if (!d)
		return;
	free(d->tok);
	free(d);
}

int tr_data_vocab(const struct tr_data *d)
{
	return d->vocab;
}

uint64_t tr_data_tokens(const struct tr_data *d, enum tr_split s)
{
	return s == TR_TRAIN || s == TR_VAL ? d->n[s] : 0;
}

const char *tr_data_describe(const struct tr_data *d)
{
	return d->desc;
}

/* splitmix64's finalizer: a bijection whose every output bit depends on every
 * input bit, so consecutive steps and samples give unrelated starts. */
static uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

int tr_data_samples(const struct tr_data *d, enum tr_split s, uint64_t seed, uint64_t step,
                    int sample0, int n, int T, int32_t *in, int32_t *tg)
{
	SP_CHECK_ARG(d && (s == TR_TRAIN || s == TR_VAL), "tr_data_samples: bad data or split");
	SP_CHECK_ARG(sample0 >= 0 && n >= 0 && T > 0,
	             "tr_data_samples: sample0 %d, n %d, T %d must be >= 0, >= 0, > 0", sample0, n,
	             T);
	SP_CHECK_ARG(!n || (in && tg), "tr_data_samples: NULL in or tg");
	if (d->n[s] < (uint64_t)T + 1)
		return sp_error(
		    -EINVAL, "data: %s: the %s split has %" PRIu64 " tokens, fewer than T + 1 = %d",
		    d->desc, s == TR_TRAIN ? "train" : "val", d->n[s], T + 1);
	const uint16_t *tok = d->tok + (s == TR_VAL ? d->n[TR_TRAIN] : 0);
	uint64_t starts = d->n[s] - (uint64_t)T; /* p + T is the last target */
	uint64_t h = mix64(mix64(mix64(seed) ^ (uint64_t)s) ^ step);
	for (int k = 0; k < n; k++) {
		const uint16_t *w = tok + mix64(h ^ ((uint64_t)sample0 + (uint64_t)k)) % starts;
		int32_t *ik = in + (size_t)k * (size_t)T, *tk = tg + (size_t)k * (size_t)T;
		for (int t = 0; t < T; t++) {
			ik[t] = w[t];
			tk[t] = w[t + 1];
		}
	}
	return 0;
}

/* ---- prepare ------------------------------------------------------------------- */

/* The text files read one after the other as one stream of known length. */
struct text_in {
	const char *const *paths;
	const uint64_t *size; /* from stat, before any shard was written */
	int i;                /* file i is open in fd with left of its bytes unread */
	int fd;
	uint64_t left;
};

/* Reads exactly len bytes of the stream; a file shorter than it was is an error. */
static int text_in_read(struct text_in *t, unsigned char *buf, size_t len)
{
	while (len) {
		if (t->fd < 0) {
			t->fd = open(t->paths[t->i], O_RDONLY | O_CLOEXEC);
			if (t->fd < 0)
				return sp_error(-errno, "prepare: %s: %s", t->paths[t->i],
				                strerror(errno));
			t->left = t->size[t->i];
		}
		if (!t->left) {
			close(t->fd);
			t->fd = -1;
			t->i++;
			continue;
		}
		ssize_t got = read(t->fd, buf, len < t->left ? len : t->left);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			return sp_error(-errno, "prepare: %s: read: %s", t->paths[t->i],
			                strerror(errno));
		if (got == 0)
			return sp_error(
			    -EIO, "prepare: %s: shrank while being read (was %" PRIu64 " bytes)",
			    t->paths[t->i], t->size[t->i]);
		buf += got;
		len -= (size_t)got;
		t->left -= (uint64_t)got;
	}
	return 0;
}

/* Writes the header and count tokens of the stream to fd. */
static int shard_fill(int fd, const char *what, struct text_in *in, uint64_t count)
{
	uint32_t h[SHARD_HEADER_INTS] = {htole32(SHARD_MAGIC), htole32(SHARD_VERSION),
	                                 htole32((uint32_t)count), htole32(TEXT_VOCAB)};
	SP_CHECK(write_all(fd, h, sizeof(h), what));
	unsigned char b[CHUNK], w[2 * CHUNK];
	while (count) {
		size_t k = count < CHUNK ? (size_t)count : CHUNK;
		SP_CHECK(text_in_read(in, b, k));
		for (size_t i = 0; i < k; i++) { /* uint16 little-endian */
			w[2 * i] = b[i];
			w[2 * i + 1] = 0;
		}
		SP_CHECK(write_all(fd, w, 2 * k, what));
		count -= k;
	}
	return 0;
}

/* Shard i of a prepare: NAME_train_NNNNNN.bin for i < ntrain, then NAME_val_000000.bin. */
static int shard_name(char *buf, size_t len, const char *name, int i, int ntrain)
{
	int w = snprintf(buf, len, "%s_%s_%06d.bin", name, i < ntrain ? "train" : "val",
	                 i < ntrain ? i : 0);
	if (w < 0 || (size_t)w >= len)
		return sp_error(-ENAMETOOLONG, "prepare: shard name of '%s' too long", name);
	return 0;
}

/* Writes shard `final` of count tokens from in: a hidden temporary (which open
 * skips and whose name cannot end in .bin), fsync, rename, fsync of the directory. */
static int shard_write(int dfd, const char *dir, const char *final, struct text_in *in,
                       uint64_t count)
{
	char tmp[NAME_MAX + 1], what[PATH_MAX];
	snprintf(what, sizeof(what), "%s/%s", dir, final);
	int w = snprintf(tmp, sizeof(tmp), ".%s.tmp%ld", final, (long)getpid());
	if (w < 0 || (size_t)w >= sizeof(tmp))
		return sp_error(-ENAMETOOLONG, "prepare: %s: name too long", what);
	int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
	if (fd < 0)
		return sp_error(-errno, "prepare: %s/%s: %s", dir, tmp, strerror(errno));
	int rc = shard_fill(fd, what, in, count);
	if (rc == 0 && fsync(fd) < 0)
		rc = sp_error(-errno, "prepare: %s: fsync: %s", what, strerror(errno));
	if (close(fd) < 0 && rc == 0)
		rc = sp_error(-errno, "prepare: %s: close: %s", what, strerror(errno));
	if (rc == 0 && renameat(dfd, tmp, dfd, final) < 0)
		rc = sp_error(-errno, "prepare: %s: rename: %s", what, strerror(errno));
	if (rc < 0) {
		unlinkat(dfd, tmp, 0);
		return rc;
	}
	if (fsync(dfd) < 0)
		return sp_error(-errno, "prepare: %s: fsync: %s", dir, strerror(errno));
	return 0;
}

/* Refuses (-EEXIST) any shard of NAME in dir, not only those this call would
 * write: a leftover NAME_train_000009.bin would join the new set when read. */
static int check_no_shards(const char *dir, const char *name)
{
	DIR *dp = opendir(dir);
	if (!dp)
		return sp_error(-errno, "prepare: %s: %s", dir, strerror(errno));
	size_t len = strlen(name);
	int rc = 0;
	struct dirent *e;
	while (rc == 0 && (e = readdir(dp))) {
		if (strncmp(e->d_name, name, len) != 0)
			continue;
		const char *rest = e->d_name + len;
		if (ends_with(rest, ".bin") &&
		    (strncmp(rest, "_train_", 7) == 0 || strncmp(rest, "_val_", 5) == 0))
			rc = sp_error(-EEXIST,
			              "prepare: %s/%s exists; remove the shards of '%s' or choose "
			              "another name",
			              dir, e->d_name, name);
	}
	closedir(dp);
	return rc;
}

/* Sizes of the text files (all must be regular files). */
static int text_sizes(const char *const *texts, int n, uint64_t *size, uint64_t *total)
{
	*total = 0;
	for (int i = 0; i < n; i++) {
		struct stat st;
		SP_CHECK_ARG(texts[i], "tr_data_prepare: text %d is NULL", i);
		if (stat(texts[i], &st) < 0)
			return sp_error(-errno, "prepare: %s: %s", texts[i], strerror(errno));
		if (!S_ISREG(st.st_mode))
			return sp_error(-EINVAL, "prepare: %s: not a regular file", texts[i]);
		size[i] = (uint64_t)st.st_size;
		*total += size[i];
	}
	if (!*total)
		return sp_error(-EINVAL, "prepare: the %d text file(s) are empty", n);
	return 0;
}

/* Writes every shard in order; on failure removes those already completed. */
static int write_shards(int dfd, const char *dir, const char *name, struct text_in *in,
                        uint64_t ntrain, uint64_t nval, uint64_t per)
{
	int nshard = (int)((ntrain + per - 1) / per), nfiles = nshard + (nval ? 1 : 0);
	char final[NAME_MAX + 1];
	int rc = 0, done = 0;
	for (; done < nfiles; done++) {
		uint64_t count = nval;
		if (done < nshard) {
			count = ntrain - (uint64_t)done * per;
			count = count < per ? count : per;
		}
		SP_CHECK_GOTO(shard_name(final, sizeof(final), name, done, nshard), rc, fail);
		SP_CHECK_GOTO(shard_write(dfd, dir, final, in, count), rc, fail);
	}
	return 0;
fail:
	while (done-- > 0)
		if (shard_name(final, sizeof(final), name, done, nshard) == 0)
			unlinkat(dfd, final, 0);
	return rc;
}

int tr_data_prepare(const char *const *texts, int n, const char *dir, const char *name,
                    double val_fraction, uint64_t shard_tokens)
{
	SP_CHECK_ARG(texts && n > 0 && dir && name, "tr_data_prepare: NULL or no texts");
	SP_CHECK_ARG(name[0] && !strchr(name, '/'), "prepare: name '%s' must be a file name", name);
	SP_CHECK_ARG(val_fraction >= 0 && val_fraction < 1,
	             "prepare: val_fraction %g must be in [0, 1)", val_fraction);
	SP_CHECK_ARG(shard_tokens <= INT32_MAX,
	             "prepare: shard_tokens %" PRIu64 " over the llm.c header's %d", shard_tokens,
	             INT32_MAX);
	uint64_t per = shard_tokens ? shard_tokens : DEFAULT_SHARD_TOKENS, total;
	uint64_t *size = calloc((size_t)n, sizeof(*size));
	if (!size)
		return sp_error(-ENOMEM, "prepare: out of memory");
	struct text_in in = {.paths = texts, .size = size, .fd = -1};
	int rc, dfd = -1;
	SP_CHECK_GOTO(text_sizes(texts, n, size, &total), rc, out);
	uint64_t nval = (uint64_t)((double)total * val_fraction), ntrain = total - nval;
	if (nval > INT32_MAX || ntrain / per >= INT_MAX) {
		rc = sp_error(-EINVAL,
		              "prepare: %" PRIu64 " val and %" PRIu64
		              " train tokens do not fit llm.c shards (one val shard of at most "
		              "%d tokens)",
		              nval, ntrain, INT32_MAX);
		goto out;
	}
	if (mkdir(dir, 0777) < 0 && errno != EEXIST) {
		rc = sp_error(-errno, "prepare: mkdir %s: %s", dir, strerror(errno));
		goto out;
	}
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		rc = sp_error(-errno, "prepare: %s: %s", dir, strerror(errno));
		goto out;
	}
	SP_CHECK_GOTO(check_no_shards(dir, name), rc, out);
	rc = write_shards(dfd, dir, name, &in, ntrain, nval, per);
out:
	if (in.fd >= 0)
		close(in.fd);
	if (dfd >= 0)
		close(dfd);
	free(size);
	return rc;
}

/* tests/train/test_data.c — token data: text prepared into llm.c shards comes back
 * byte for byte (in the files and through tr_data_samples: every window is the
 * original text at one position, the target shifted by one); malformed shards are
 * refused naming the file; batches depend on (seed, split, step, sample) alone;
 * text files, shard directories without a val shard, prepare's refusals, and the
 * default corpus (when `bible` is installed). */
#include "train/train.h"
#include "tests/test.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[] = "/tmp/spill-test-data-XXXXXX";

/* root/name, in one of 8 buffers used in turn: copy it to keep it longer. */
static char *path_of(const char *name)
{
	static char buf[8][512];
	static int next;
	char *p = buf[next++ % 8];
	snprintf(p, sizeof(buf[0]), "%s/%s", root, name);
	return p;
}

static void write_file(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wb");
	CHECK_MSG(f, "%s", path);
	CHECK(fwrite(data, 1, len, f) == len);
	CHECK(fclose(f) == 0);
}

/* The whole file; *len its size. */
static unsigned char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	CHECK_MSG(f, "%s", path);
	CHECK(fseek(f, 0, SEEK_END) == 0);
	long n = ftell(f);
	CHECK(n >= 0 && fseek(f, 0, SEEK_SET) == 0);
	unsigned char *b = malloc((size_t)n + 1);
	CHECK(b && fread(b, 1, (size_t)n, f) == (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return b;
}

static void put32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

/* An llm.c shard, written byte by byte (little-endian) independently of data.c:
 * header fields as given, then ntok tokens (which may disagree with count). */
static void write_shard(const char *path, int32_t magic, int32_t version, int32_t count,
                        const uint16_t *tok, size_t ntok)
{
	size_t len = 1024 + 2 * ntok;
	unsigned char *b = calloc(1, len);
	CHECK(b);
	put32(b, (uint32_t)magic);
	put32(b + 4, (uint32_t)version);
	put32(b + 8, (uint32_t)count);
	for (size_t i = 0; i < ntok; i++) {
		b[1024 + 2 * i] = (unsigned char)tok[i];
		b[1024 + 2 * i + 1] = (unsigned char)(tok[i] >> 8);
	}
	write_file(path, b, len);
	free(b);
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(p);
}

static int count_entries(const char *dir)
{
	DIR *d = opendir(dir);
	CHECK(d);
	int n = 0;
	for (struct dirent *e; (e = readdir(d));)
		n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
	closedir(d);
	return n;
}

/* Pseudo-random bytes: any 16-byte window occurs once, so a window gives its
 * position. */
static void fill_random(unsigned char *b, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		b[i] = (unsigned char)(seed >> 56);
	}
}

/* The position of the window w[0..T) in text[0..n), which must be unique; -1 if
 * absent. */
static long find_window(const unsigned char *text, size_t n, const int32_t *w, int T)
{
	long at = -1;
	for (size_t p = 0; p + (size_t)T <= n; p++) {
		int t = 0;
		while (t < T && w[t] == text[p + (size_t)t])
			t++;
		if (t == T) {
			CHECK_MSG(at < 0, "window found at %ld and %zu", at, p);
			at = (long)p;
		}
	}
	return at;
}

/* Every sample of many steps is split[p .. p+T) with its target split[p+1 .. p+T]
 * for a p inside the split; the starts cover the split's range evenly enough. */
static void check_windows(struct tr_data *d, enum tr_split s, const unsigned char *split, size_t n,
                          int T)
{
	enum { N = 8, STEPS = 40 };
	int32_t in[N * 64], tg[N * 64];
	CHECK(T <= 64);
	long lo = (long)n, hi = -1;
	for (uint64_t step = 0; step < STEPS; step++) {
		CHECK_OK(tr_data_samples(d, s, 7, step, 0, N, T, in, tg));
		for (int k = 0; k < N; k++) {
			const int32_t *ik = in + k * T, *tk = tg + k * T;
			long p = find_window(split, n, ik, T);
			CHECK_MSG(p >= 0, "split %d step %d sample %d: not a window", s, (int)step,
			          k);
			CHECK_MSG((size_t)p + (size_t)T < n, "window at %ld has no target in %zu",
			          p, n);
			for (int t = 0; t < T; t++)
				CHECK(tk[t] == split[(size_t)p + (size_t)t + 1]);
			lo = p < lo ? p : lo;
			hi = p > hi ? p : hi;
		}
	}
	/* 320 uniform starts: the extremes lie within a few percent of the ends */
	long range = (long)n - T;
	CHECK_MSG(lo < range / 10 && hi > range - range / 10, "starts %ld..%ld of %ld", lo, hi,
	          range);
}

static void expect_refused(const char *path, int want, const char *needle)
{
	struct tr_data *d = (struct tr_data *)(uintptr_t)0x1;
	int rc = tr_data_open(path, &d);
	CHECK_MSG(rc == want, "%s: %d, want %d (%s)", path ? path : "NULL", rc, want,
	          sp_last_error());
	CHECK_MSG(d == (struct tr_data *)(uintptr_t)0x1, "out written on failure");
	CHECK_MSG(strstr(sp_last_error(), needle), "message '%s' lacks '%s'", sp_last_error(),
	          needle);
	printf("refused %-40s %s\n", path ? path + strlen(root) : "(default)", sp_last_error());
}

/* Text in three files (one empty) prepared into 10 train shards and a val shard:
 * the files hold the text exactly, and so do the samples. */
static void prepare_round_trip(void)
{
	enum { L = 10007, A = 4000 };
	static unsigned char text[L];
	fill_random(text, L, 1);
	write_file(path_of("a.txt"), text, A);
	write_file(path_of("empty.txt"), "", 0);
	write_file(path_of("b.txt"), text + A, L - A);
	const char *texts[] = {path_of("a.txt"), path_of("empty.txt"), path_of("b.txt")};
	char dir[512]; /* does not exist yet */
	snprintf(dir, sizeof(dir), "%s", path_of("prep"));
	CHECK_OK(tr_data_prepare(texts, 3, dir, "tiny", 0.1, 1000));

	/* 1000 val bytes (the last), 9007 train in shards of 1000 (the last 7) */
	size_t at = 0;
	char name[64];
	for (int i = 0; i <= 10; i++) {
		if (i < 10)
			snprintf(name, sizeof(name), "prep/tiny_train_%06d.bin", i);
		else
			snprintf(name, sizeof(name), "prep/tiny_val_000000.bin");
		size_t len, want = i < 9 ? 1000 : i == 9 ? 7 : 1000;
		unsigned char *b = read_file(path_of(name), &len);
		CHECK_MSG(len == 1024 + 2 * want, "%s: %zu bytes", name, len);
		CHECK((b[0] | b[1] << 8 | b[2] << 16 | (uint32_t)b[3] << 24) == 20240520);
		CHECK(b[4] == 1 && b[5] == 0 && b[6] == 0 && b[7] == 0);
		CHECK((size_t)(b[8] | b[9] << 8 | b[10] << 16 | (uint32_t)b[11] << 24) == want);
		/* header int 3: the vocab (256: bytes), the rest zero */
		CHECK(b[12] == 0 && b[13] == 1 && b[14] == 0 && b[15] == 0);
		for (int j = 16; j < 1024; j++)
			CHECK(b[j] == 0);
		for (size_t j = 0; j < want; j++)
			CHECK_MSG(b[1024 + 2 * j] == text[at + j] && b[1024 + 2 * j + 1] == 0,
			          "%s token %zu", name, j);
		at += want;
		free(b);
	}
	CHECK(at == L);
	CHECK(count_entries(dir) == 11); /* no temporaries left, no 12th shard */

	struct tr_data *d;
	CHECK_OK(tr_data_open(dir, &d));
	printf("%s\n", tr_data_describe(d));
	CHECK(strstr(tr_data_describe(d), "shards in") && strstr(tr_data_describe(d), dir));
	CHECK(tr_data_tokens(d, TR_TRAIN) == 9007 && tr_data_tokens(d, TR_VAL) == 1000);
	CHECK(tr_data_vocab(d) == 256); /* prepare says so in header int 3 */
	check_windows(d, TR_TRAIN, text, 9007, 32);
	check_windows(d, TR_VAL, text + 9007, 1000, 32);

	/* T at the limit: a split of T + 1 tokens has one window; one more T refused */
	int32_t in[1000], tg[1000];
	CHECK_OK(tr_data_samples(d, TR_VAL, 3, 0, 0, 1, 999, in, tg));
	for (int t = 0; t < 999; t++)
		CHECK(in[t] == text[9007 + t] && tg[t] == text[9007 + t + 1]);
	/* T = 997: exactly the starts 0, 1, 2, each of them, none further */
	int seen[3] = {0};
	for (uint64_t step = 0; step < 64; step++) {
		CHECK_OK(tr_data_samples(d, TR_VAL, 3, step, 0, 1, 997, in, tg));
		long p = find_window(text + 9007, 1000, in, 997);
		CHECK_MSG(p >= 0 && p <= 2, "start %ld", p);
		CHECK(tg[996] == text[9007 + p + 997]);
		seen[p]++;
	}
	CHECK_MSG(seen[0] && seen[1] && seen[2], "starts seen %d %d %d", seen[0], seen[1], seen[2]);
	in[0] = -5;
	CHECK(tr_data_samples(d, TR_VAL, 3, 0, 0, 1, 1000, in, tg) == -EINVAL);
	CHECK_MSG(strstr(sp_last_error(), "fewer than T + 1 = 1001"), "%s", sp_last_error());
	CHECK(in[0] == -5); /* untouched */
	CHECK(tr_data_samples(d, TR_VAL, 3, 0, 0, 1, 0, in, tg) == -EINVAL);
	CHECK(tr_data_samples(d, TR_VAL, 3, 0, -1, 1, 4, in, tg) == -EINVAL);
	CHECK(tr_data_samples(d, TR_VAL, 3, 0, 0, 1, 4, NULL, tg) == -EINVAL);
	CHECK(tr_data_samples(d, (enum tr_split)2, 3, 0, 0, 1, 4, in, tg) == -EINVAL);
	CHECK_OK(tr_data_samples(d, TR_VAL, 3, 0, 0, 0, 4, NULL, NULL));
	tr_data_close(d);
}

/* Batches depend on (seed, split, step, sample) alone. */
static void determinism(void)
{
	enum { T = 16, N = 8 };
	struct tr_data *a, *b;
	CHECK_OK(tr_data_open(path_of("prep"), &a));
	CHECK_OK(tr_data_open(path_of("prep"), &b));
	int32_t in[N * T], tg[N * T], in2[N * T], tg2[N * T];
	CHECK_OK(tr_data_samples(a, TR_TRAIN, 42, 5, 0, N, T, in, tg));
	CHECK_OK(tr_data_samples(b, TR_TRAIN, 42, 5, 0, N, T, in2, tg2));
	CHECK(memcmp(in, in2, sizeof(in)) == 0 && memcmp(tg, tg2, sizeof(tg)) == 0);
	/* 0..7 in one call = 0..3 then 4..7 = each alone */
	memset(in2, 0, sizeof(in2));
	CHECK_OK(tr_data_samples(b, TR_TRAIN, 42, 5, 4, 4, T, in2 + 4 * T, tg2 + 4 * T));
	CHECK_OK(tr_data_samples(b, TR_TRAIN, 42, 5, 0, 4, T, in2, tg2));
	CHECK(memcmp(in, in2, sizeof(in)) == 0 && memcmp(tg, tg2, sizeof(tg)) == 0);
	for (int k = 0; k < N; k++) {
		CHECK_OK(tr_data_samples(b, TR_TRAIN, 42, 5, k, 1, T, in2, tg2));
		CHECK(memcmp(in + k * T, in2, T * sizeof(int32_t)) == 0);
	}
	/* another step, seed or sample index: other windows; samples of a step differ */
	int same = 0;
	for (uint64_t step = 6; step < 26; step++) {
		CHECK_OK(tr_data_samples(a, TR_TRAIN, 42, step, 0, N, T, in2, tg2));
		same += memcmp(in, in2, sizeof(in)) == 0;
	}
	CHECK_OK(tr_data_samples(a, TR_TRAIN, 43, 5, 0, N, T, in2, tg2));
	same += memcmp(in, in2, sizeof(in)) == 0;
	CHECK_OK(tr_data_samples(a, TR_TRAIN, 42, 5, 1, N, T, in2, tg2));
	same += memcmp(in, in2, sizeof(in)) == 0;
	CHECK_MSG(same == 0, "%d batches equal to step 5's", same);
	for (int k = 1; k < N; k++)
		CHECK(memcmp(in, in + k * T, T * sizeof(int32_t)) != 0);
	tr_data_close(a);
	tr_data_close(b);
}

/* Malformed shards, alone and in a directory, are refused naming the file. */
static void bad_shards(void)
{
	uint16_t tok[100];
	for (int i = 0; i < 100; i++)
		tok[i] = (uint16_t)(i * 37);
	write_shard(path_of("magic.bin"), 20240521, 1, 100, tok, 100);
	expect_refused(path_of("magic.bin"), -EINVAL, "magic.bin: bad magic 20240521");
	write_shard(path_of("version.bin"), 20240520, 2, 100, tok, 100);
	expect_refused(path_of("version.bin"), -EINVAL, "version.bin: version 2");
	write_shard(path_of("zero.bin"), 20240520, 1, 0, tok, 0);
	expect_refused(path_of("zero.bin"), -EINVAL, "zero.bin: token count 0");
	write_shard(path_of("negative.bin"), 20240520, 1, -3, tok, 100);
	expect_refused(path_of("negative.bin"), -EINVAL, "negative.bin: token count -3");
	/* claims 100 tokens (1224 bytes), holds 60 (1144 bytes) */
	write_shard(path_of("short.bin"), 20240520, 1, 100, tok, 60);
	expect_refused(path_of("short.bin"), -EINVAL,
	               "short.bin: the header's 100 tokens take "
	               "1224 bytes, the file has 1144 (truncated)");
	/* holds more than it claims: not a shard we understand */
	write_shard(path_of("long.bin"), 20240520, 1, 50, tok, 100);
	expect_refused(path_of("long.bin"), -EINVAL,
	               "long.bin: the header's 50 tokens take 1124 "
	               "bytes, the file has 1224");
	/* cut inside the header, and empty */
	size_t len;
	unsigned char *b = read_file(path_of("magic.bin"), &len);
	write_file(path_of("cut.bin"), b, 500);
	free(b);
	expect_refused(path_of("cut.bin"), -EINVAL, "cut.bin: 500 bytes, shorter than the 1024");
	write_file(path_of("empty.bin"), "", 0);
	expect_refused(path_of("empty.bin"), -EINVAL, "empty.bin: 0 bytes");

	/* in a directory: a good val shard and a good first train shard do not hide a
	 * truncated second one */
	CHECK(mkdir(path_of("bad"), 0777) == 0);
	write_shard(path_of("bad/x_train_000000.bin"), 20240520, 1, 100, tok, 100);
	write_shard(path_of("bad/x_train_000001.bin"), 20240520, 1, 100, tok, 99);
	write_shard(path_of("bad/x_val_000000.bin"), 20240520, 1, 100, tok, 100);
	expect_refused(path_of("bad"), -EINVAL, "bad/x_train_000001.bin: the header's 100");
	/* a directory with val shards only, and with none */
	CHECK(remove(path_of("bad/x_train_000000.bin")) == 0);
	CHECK(remove(path_of("bad/x_train_000001.bin")) == 0);
	expect_refused(path_of("bad"), -EINVAL, "no train shards");
	CHECK(remove(path_of("bad/x_val_000000.bin")) == 0);
	expect_refused(path_of("bad"), -EINVAL, "no train shards");
	expect_refused(path_of("nothing-here"), -ENOENT, "nothing-here");
}

/* Shards without a val shard: train in name order, the last 10% is val; files
 * that are no shards are ignored; a token >= 50257 raises the vocab. */
static void dir_without_val(void)
{
	enum { N = 2000 };
	static uint16_t tok[N];
	for (int i = 0; i < N; i++)
		tok[i] = (uint16_t)i;
	tok[N - 1] = 60000;
	CHECK(mkdir(path_of("noval"), 0777) == 0);
	/* written out of order; the second has the higher name */
	write_shard(path_of("noval/b_train_000001.bin"), 20240520, 1, N - 1200, tok + 1200,
	            N - 1200);
	write_shard(path_of("noval/b_train_000000.bin"), 20240520, 1, 1200, tok, 1200);
	/* not shards: garbage that would fail if read as one */
	write_file(path_of("noval/.b_train_000002.bin"), "junk", 4);
	write_file(path_of("noval/b_train_000002.bin.tmp1"), "junk", 4);
	write_file(path_of("noval/README.bin"), "junk", 4);
	write_file(path_of("noval/notes_train.txt"), "junk", 4);
	CHECK(mkdir(path_of("noval/sub_train.bin"), 0777) == 0);

	struct tr_data *d;
	CHECK_OK(tr_data_open(path_of("noval"), &d));
	printf("%s\n", tr_data_describe(d));
	CHECK(tr_data_tokens(d, TR_TRAIN) == 1800 && tr_data_tokens(d, TR_VAL) == 200);
	CHECK(tr_data_vocab(d) == 60001);
	enum { T = 8, K = 64 };
	int32_t in[K * T], tg[K * T];
	for (int s = 0; s < 2; s++) {
		int base = s ? 1800 : 0, n = s ? 200 : 1800;
		for (uint64_t step = 0; step < 20; step++) {
			CHECK_OK(tr_data_samples(d, s, 1, step, 0, K, T, in, tg));
			for (int k = 0; k < K; k++) {
				int p = in[k * T] - base; /* tokens are positions */
				CHECK_MSG(p >= 0 && p + T < n, "split %d start %d", s, p);
				for (int t = 0; t < T; t++) {
					CHECK(in[k * T + t] == tok[base + p + t]);
					CHECK(tg[k * T + t] == tok[base + p + t + 1]);
				}
			}
		}
	}
	/* the last window of val ends on the big token */
	int32_t last[200], lt[200];
	CHECK_OK(tr_data_samples(d, TR_VAL, 1, 0, 0, 1, 199, last, lt));
	CHECK(last[0] == 1800 && lt[198] == 60000);
	tr_data_close(d);

	/* a name holding "val" before its split word is a train shard */
	CHECK(mkdir(path_of("interval"), 0777) == 0);
	write_shard(path_of("interval/interval_train_000000.bin"), 20240520, 1, 100, tok, 100);
	CHECK_OK(tr_data_open(path_of("interval"), &d));
	CHECK(tr_data_tokens(d, TR_TRAIN) == 90 && tr_data_tokens(d, TR_VAL) == 10);
	tr_data_close(d);
	/* a single shard file: the last 10% is val */
	CHECK_OK(tr_data_open(path_of("interval/interval_train_000000.bin"), &d));
	CHECK(tr_data_tokens(d, TR_TRAIN) == 90 && tr_data_tokens(d, TR_VAL) == 10);
	CHECK(strstr(tr_data_describe(d), "shard "));
	tr_data_close(d);
}

/* Any other file is text: bytes are tokens, the last 10% is val. */
static void text_files(void)
{
	enum { L = 3001 };
	static unsigned char text[L];
	fill_random(text, L, 2);
	write_file(path_of("corpus.txt"), text, L);
	struct tr_data *d;
	CHECK_OK(tr_data_open(path_of("corpus.txt"), &d));
	printf("%s\n", tr_data_describe(d));
	CHECK(strstr(tr_data_describe(d), "text ") &&
	      strstr(tr_data_describe(d), path_of("corpus.txt")) &&
	      strstr(tr_data_describe(d), "vocab 256"));
	CHECK(tr_data_vocab(d) == 256);
	CHECK(tr_data_tokens(d, TR_TRAIN) == 2701 && tr_data_tokens(d, TR_VAL) == 300);
	check_windows(d, TR_TRAIN, text, 2701, 24);
	check_windows(d, TR_VAL, text + 2701, 300, 24);
	tr_data_close(d);
	/* too small for a val split, and empty */
	write_file(path_of("tiny.txt"), "abcdefghi", 9);
	expect_refused(path_of("tiny.txt"), -EINVAL, "tiny.txt: 9 train and 0 val tokens");
	write_file(path_of("nothing.txt"), "", 0);
	expect_refused(path_of("nothing.txt"), -EINVAL, "nothing.txt: empty");
}

/* prepare refuses what it must, before writing anything. */
static void prepare_refusals(void)
{
	char dir[512];
	snprintf(dir, sizeof(dir), "%s", path_of("prep"));
	int before = count_entries(dir);
	size_t len0, len1;
	unsigned char *v0 = read_file(path_of("prep/tiny_val_000000.bin"), &len0);
	unsigned char *t0 = read_file(path_of("prep/tiny_train_000000.bin"), &len1);

	/* the same name again, even with shards so large only one would be written */
	char corpus[512];
	snprintf(corpus, sizeof(corpus), "%s", path_of("corpus.txt"));
	const char *texts[] = {corpus};
	CHECK(tr_data_prepare(texts, 1, dir, "tiny", 0.1, 0) == -EEXIST);
	CHECK_MSG(strstr(sp_last_error(), "/prep/tiny_"), "%s", sp_last_error());
	printf("refused prepare: %s\n", sp_last_error());
	/* only a stray high-numbered shard of the name left: still refused */
	CHECK(mkdir(path_of("stray"), 0777) == 0);
	write_file(path_of("stray/tiny_train_000009.bin"), "x", 1);
	CHECK(tr_data_prepare(texts, 1, path_of("stray"), "tiny", 0.1, 0) == -EEXIST);
	CHECK(count_entries(path_of("stray")) == 1);

	/* bad arguments and inputs */
	CHECK(tr_data_prepare(texts, 1, path_of("p2"), "t", 1.0, 0) == -EINVAL);
	CHECK(tr_data_prepare(texts, 1, path_of("p2"), "t", -0.1, 0) == -EINVAL);
	CHECK(tr_data_prepare(texts, 1, path_of("p2"), "t", NAN, 0) == -EINVAL);
	CHECK(tr_data_prepare(texts, 1, path_of("p2"), "a/b", 0.1, 0) == -EINVAL);
	CHECK(tr_data_prepare(texts, 1, path_of("p2"), "", 0.1, 0) == -EINVAL);
	CHECK(tr_data_prepare(texts, 0, path_of("p2"), "t", 0.1, 0) == -EINVAL);
	CHECK(tr_data_prepare(texts, 1, path_of("p2"), "t", 0.1, 1ull << 31) == -EINVAL);
	const char *missing[] = {corpus, path_of("gone.txt")};
	CHECK(tr_data_prepare(missing, 2, path_of("p2"), "t", 0.1, 0) == -ENOENT);
	CHECK_MSG(strstr(sp_last_error(), "gone.txt"), "%s", sp_last_error());
	const char *empty[] = {path_of("nothing.txt"), path_of("empty.txt")};
	CHECK(tr_data_prepare(empty, 2, path_of("p2"), "t", 0.1, 0) == -EINVAL);
	CHECK_MSG(strstr(sp_last_error(), "empty"), "%s", sp_last_error());
	CHECK(access(path_of("p2"), F_OK) != 0); /* nothing created */

	/* nothing changed in the existing set */
	CHECK(count_entries(dir) == before);
	size_t l0, l1;
	unsigned char *v1 = read_file(path_of("prep/tiny_val_000000.bin"), &l0);
	unsigned char *t1 = read_file(path_of("prep/tiny_train_000000.bin"), &l1);
	CHECK(l0 == len0 && memcmp(v0, v1, l0) == 0 && l1 == len1 && memcmp(t0, t1, l1) == 0);
	free(v0);
	free(v1);
	free(t0);
	free(t1);

	/* another name in the same directory, defaults: one train shard; no val
	 * fraction: no val shard, and the reader makes the last 10% val */
	CHECK_OK(tr_data_prepare(texts, 1, path_of("p3"), "t", 0, 0));
	CHECK(count_entries(path_of("p3")) == 1);
	CHECK(access(path_of("p3/t_train_000000.bin"), F_OK) == 0);
	struct tr_data *d;
	CHECK_OK(tr_data_open(path_of("p3"), &d));
	CHECK(tr_data_tokens(d, TR_TRAIN) == 2701 && tr_data_tokens(d, TR_VAL) == 300);
	tr_data_close(d);
	/* val larger than a train shard still goes to the one val shard */
	CHECK_OK(tr_data_prepare(texts, 1, path_of("p3"), "u", 0.5, 100));
	CHECK(count_entries(path_of("p3")) == 1 + 16 + 1);
	struct stat st;
	CHECK(stat(path_of("p3/u_val_000000.bin"), &st) == 0 && st.st_size == 1024 + 2 * 1500);
	CHECK(access(path_of("p3/u_train_000015.bin"), F_OK) == 0);
}

/* A write failing midway (a file size limit standing in for a full disk): the
 * error names the shard and the shards already completed are removed again. */
static void prepare_failure(void)
{
	char corpus[512];
	snprintf(corpus, sizeof(corpus), "%s", path_of("corpus.txt"));
	const char *texts[] = {corpus};
	struct rlimit old, lim;
	CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
	lim = old;
	lim.rlim_cur = 2048; /* train shards of 100 tokens fit, the val shard does not */
	signal(SIGXFSZ, SIG_IGN);
	CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
	int rc = tr_data_prepare(texts, 1, path_of("p4"), "v", 0.5, 100);
	CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
	CHECK_MSG(rc == -EFBIG, "%d: %s", rc, sp_last_error());
	CHECK_MSG(strstr(sp_last_error(), "p4/v_val_000000.bin: write"), "%s", sp_last_error());
	printf("failed prepare: %s\n", sp_last_error());
	CHECK(count_entries(path_of("p4")) == 0);
}

/* The default corpus: `bible` via PATH; without it, -ENOENT saying what to do. */
static void default_corpus(void)
{
	char *path = getenv("PATH") ? strdup(getenv("PATH")) : NULL;
	setenv("PATH", "/nonexistent-spill-test", 1);
	expect_refused(NULL, -ENOENT, "install bible-kjv (`make deps`) or pass --data");
	if (path)
		setenv("PATH", path, 1);
	else
		unsetenv("PATH");
	free(path);
	if (access("/usr/bin/bible", X_OK) != 0) {
		printf("no /usr/bin/bible (bible-kjv): default corpus not checked\n");
		return;
	}
	struct tr_data *d;
	CHECK_OK(tr_data_open(NULL, &d));
	printf("%s\n", tr_data_describe(d));
	uint64_t n = tr_data_tokens(d, TR_TRAIN) + tr_data_tokens(d, TR_VAL);
	CHECK_MSG(n > 4000000, "%llu tokens", (unsigned long long)n);
	CHECK(tr_data_vocab(d) == 256);
	CHECK(tr_data_tokens(d, TR_VAL) == n / 10);
	int32_t in[64], tg[64];
	CHECK_OK(tr_data_samples(d, TR_VAL, 0, 0, 0, 1, 64, in, tg));
	for (int t = 0; t < 64; t++)
		CHECK(in[t] >= 0 && in[t] < 256 && (t == 63 || tg[t] == in[t + 1]));
	tr_data_close(d);
}

int main(void)
{
	CHECK(mkdtemp(root));
	prepare_round_trip();
	determinism();
	bad_shards();
	dir_without_val();
	text_files();
	prepare_refusals();
	prepare_failure();
	default_corpus();
	CHECK(nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS) == 0);
	TEST_PASS();
}

/* train/train.h — the trainer (DESIGN §7, level 3): token data, checkpoints and
 * the training loop that `spill train`, `sim`, `report` and `prepare` are thin
 * commands over. Built on runtime/ (models of layers under a plan).
 *
 * Conventions as everywhere: 0 or -errno, sp_last_error() names the file or the
 * value and what is wrong. Prefix tr_. */
#ifndef SP_TRAIN_TRAIN_H
#define SP_TRAIN_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

/* ---- token data (data.c) ----------------------------------------------------------
 * Corpora:
 *  - llm.c token shards: a 256 x int32 little-endian header (magic 20240520,
 *    version 1, the token count), then that many uint16 tokens; a directory of
 *    them (files ending in .bin whose names contain "train" or "val", each set
 *    read in name order; with no "val" shard the last 10% of the train tokens
 *    are the validation split); datasets prepared for llm.c work unchanged
 *    (vocab: GPT-2's 50257, or larger when a token says so);
 *  - any other file: plain text, one token per byte (vocab 256), the last 10%
 *    of the bytes the validation split;
 *  - NULL: the default corpus, the King James Bible of Debian's bible-kjv
 *    (the `bible` command prints it; `make deps` installs it), as text.
 * Batches are deterministic: the tokens of sample s of step i come from a start
 * position drawn from (seed, split, i, s) alone, so a run resumed at step i
 * sees the batches an uninterrupted run would. */
struct tr_data;
enum tr_split { TR_TRAIN, TR_VAL };

/* Opens a corpus (see above). Returns 0, -ENOENT for a missing path (or no
 * `bible` for the default), -EINVAL naming the file and the fault (bad magic or
 * version, a token count the file does not hold, an empty corpus or split, a
 * directory with no shards). */
int tr_data_open(const char *path, struct tr_data **out) SP_MUST_CHECK;
void tr_data_close(struct tr_data *d);
/* Tokens are < vocab. */
int tr_data_vocab(const struct tr_data *d);
uint64_t tr_data_tokens(const struct tr_data *d, enum tr_split s);
/* What was opened, for logs: "shards in DIR (N train, M val tokens)". */
const char *tr_data_describe(const struct tr_data *d);
/* Fills n samples from sample0 of step `step`: in[k*T + t] and tg[k*T + t] =
 * the tokens at p + t and p + t + 1 for sample k's start p. Returns 0, -EINVAL
 * when the split has fewer than T + 1 tokens. */
int tr_data_samples(const struct tr_data *d, enum tr_split s, uint64_t seed, uint64_t step,
                    int sample0, int n, int T, int32_t *in, int32_t *tg) SP_MUST_CHECK;
/* `spill prepare`: the bytes of the text files, concatenated in order, as
 * llm.c shards in dir (created if missing): NAME_val_000000.bin holds the last
 * val_fraction of the bytes, NAME_train_NNNNNN.bin the rest, at most
 * shard_tokens per shard (0: 100M). Each file is written atomically (temporary
 * name, fsync, rename); existing shards of that name are refused (-EEXIST), not
 * overwritten. Returns 0, or -errno naming the file. */
int tr_data_prepare(const char *const *texts, int n, const char *dir, const char *name,
                    double val_fraction, uint64_t shard_tokens) SP_MUST_CHECK;

/* ---- checkpoints: safetensors (ckpt.c) --------------------------------------------
 * The format of Hugging Face's safetensors: an 8-byte little-endian header
 * length N, N bytes of JSON {"name": {"dtype": "F32", "shape": [..],
 * "data_offsets": [begin, end]}, ..., "__metadata__": {"key": "value", ...}}
 * (offsets into the data that follows the header), then the data. */
enum tr_dtype { TR_F32, TR_I32, TR_U8 };

struct tr_tensor {
	const char *name; /* ASCII, unique, not "__metadata__" */
	enum tr_dtype dtype;
	int ndim; /* 0..4 */
	int64_t shape[4];
	const void *data; /* product(shape) elements */
};

/* Writes the tensors (data laid out in order, 8-byte aligned header) and the
 * metadata (nmeta key/value pairs: meta[2i], meta[2i+1]) to path atomically: a
 * temporary file in the same directory, fsync, rename over path, fsync of the
 * directory. On any failure path is untouched and the temporary removed.
 * Returns 0, -EINVAL for a bad tensor or key, or -errno naming the file. */
int tr_ckpt_write(const char *path, const struct tr_tensor *t, int n, const char *const *meta,
                  int nmeta) SP_MUST_CHECK;

struct tr_ckpt;
/* Opens and validates path: the header length inside the file and under 100
 * MB, well-formed JSON of the shape above, known dtypes, every tensor's byte
 * range = product(shape) x dtype size, ranges inside the data and not
 * overlapping, metadata values strings. Returns 0, -ENOENT, or -EINVAL naming
 * the file and the first fault (a corrupt or truncated file never crashes). */
int tr_ckpt_open(const char *path, struct tr_ckpt **out) SP_MUST_CHECK;
void tr_ckpt_close(struct tr_ckpt *c);
int tr_ckpt_count(const struct tr_ckpt *c);
/* Tensor i (file order) or by name; data stays valid until close. -ENOENT
 * when absent. */
int tr_ckpt_get(const struct tr_ckpt *c, int i, struct tr_tensor *out) SP_MUST_CHECK;
int tr_ckpt_find(const struct tr_ckpt *c, const char *name, struct tr_tensor *out) SP_MUST_CHECK;
/* A metadata value, or NULL. */
const char *tr_ckpt_meta(const struct tr_ckpt *c, const char *key);

#endif

/* train/convert.c — a GPT-2's weights in and out of spill: spill checkpoints,
 * llm.c's model files and Hugging Face GPT-2s read into one layout (struct
 * tr_weights: spill's layers in order, fp32), written back as Hugging Face or
 * llm.c files, and put into a run (--init, spill eval).
 *
 * Invariants: every reader checks sizes against the file before it reads (a
 * truncated or foreign file is one error naming it, never a crash); the
 * conversions are exact (fp32 copies and transposes, llm.c's bf16 widened), so
 * an export read back gives the same bits.
 */
#include "train/internal.h"

#include "common/json.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const struct tr_block_tensor tr_block_tensors[KN_BLOCK_NPARAMS] = {
    {"ln1w", "ln_1.weight", 1, 0},
    {"ln1b", "ln_1.bias", 1, 0},
    {"qkvw", "attn.c_attn.weight", 3, 1},
    {"qkvb", "attn.c_attn.bias", 3, 0},
    {"attprojw", "attn.c_proj.weight", 1, 1},
    {"attprojb", "attn.c_proj.bias", 1, 0},
    {"ln2w", "ln_2.weight", 1, 0},
    {"ln2b", "ln_2.bias", 1, 0},
    {"fcw", "mlp.c_fc.weight", 4, 1},
    {"fcb", "mlp.c_fc.bias", 4, 0},
    {"fcprojw", "mlp.c_proj.weight", 1, 4},
    {"fcprojb", "mlp.c_proj.bias", 1, 0}};

#define LLMC_MAGIC 20240326

/* Sizes a file may claim: beyond them it is not a GPT-2 spill can hold. */
#define MAX_LAYERS   4096
#define MAX_CHANNELS 65536
#define MAX_VOCAB    (1 << 24)
#define MAX_POS      (1 << 20)

/* One named tensor of the model: spill's (llm.c's) name and shape, Hugging
 * Face's name (without "transformer."), where it lives in w->p. */
struct wt {
	char name[48], hf[64];
	int ndim, transposed; /* transposed: HF holds it as [shape[1], shape[0]] */
	int64_t shape[2];
	uint64_t off, n;
};

static uint64_t block_count(int C)
{
	return 12ull * C * C + 13ull * C;
}

uint64_t tr_weights_layer(const struct tr_weights *w, int l, uint64_t *n)
{
	uint64_t C = (uint64_t)w->channels, emb = ((uint64_t)w->vocab + w->positions) * C;
	if (l == 0) {
		*n = emb;
		return 0;
	}
	if (l <= w->layers) {
		*n = block_count(w->channels);
		return emb + (uint64_t)(l - 1) * *n;
	}
	*n = 2 * C;
	return emb + (uint64_t)w->layers * block_count(w->channels);
}

void tr_weights_free(struct tr_weights *w)
{
	if (!w)
		return;
	free(w->p);
	memset(w, 0, sizeof(*w));
}

/* Checks the shape and allocates w->p. */
static int shape_alloc(const char *path, struct tr_weights *w)
{
	if (w->layers < 1 || w->layers > MAX_LAYERS || w->channels < 1 ||
	    w->channels > MAX_CHANNELS || w->heads < 1 || w->channels % w->heads || w->vocab < 1 ||
	    w->vocab > MAX_VOCAB || w->positions < 1 || w->positions > MAX_POS)
		return sp_error(-EINVAL,
		                "%s: not a GPT-2 spill can hold: %d layers, %d channels, %d "
		                "heads, vocab %d, %d positions",
		                path, w->layers, w->channels, w->heads, w->vocab, w->positions);
	uint64_t n;
	w->n = tr_weights_layer(w, w->layers + 1, &n) + n;
	w->p = malloc(w->n * sizeof(float));
	if (!w->p)
		return sp_error(-ENOMEM, "%s: out of memory for %llu parameters", path,
		                (unsigned long long)w->n);
	return 0;
}

/* The model's tensors in spill's order (*out: L * 12 + 4 of them, malloc'd). */
static int tensor_list(const struct tr_weights *w, struct wt **out, int *count)
{
	int C = w->channels, k = 0;
	struct wt *t = calloc((size_t)w->layers * KN_BLOCK_NPARAMS + 4, sizeof(*t));
	if (!t)
		return sp_error(-ENOMEM, "weights: out of memory");
	uint64_t n, off = 0;
	t[k++] = (struct wt){"wte", "wte.weight", 2, 0, {w->vocab, C}, 0, (uint64_t)w->vocab * C};
	t[k++] = (struct wt){
	    "wpe", "wpe.weight", 2, 0, {w->positions, C}, t[0].n, (uint64_t)w->positions * C};
	size_t sz[KN_BLOCK_NPARAMS];
	kn_block_param_sizes(C, sz);
	for (int l = 0; l < w->layers; l++) {
		off = tr_weights_layer(w, l + 1, &n);
		for (int i = 0; i < KN_BLOCK_NPARAMS; i++) {
			const struct tr_block_tensor *b = &tr_block_tensors[i];
			struct wt *x = &t[k++];
			snprintf(x->name, sizeof(x->name), "h.%d.%s", l, b->name);
			snprintf(x->hf, sizeof(x->hf), "h.%d.%s", l, b->hf);
			x->ndim = b->cols ? 2 : 1;
			x->transposed = x->ndim == 2;
			x->shape[0] = (int64_t)b->rows * C;
			x->shape[1] = b->cols ? (int64_t)b->cols * C : 0;
			x->off = off;
			x->n = sz[i];
			off += sz[i];
		}
	}
	off = tr_weights_layer(w, w->layers + 1, &n);
	t[k++] = (struct wt){"lnfw", "ln_f.weight", 1, 0, {C, 0}, off, (uint64_t)C};
	t[k++] = (struct wt){"lnfb", "ln_f.bias", 1, 0, {C, 0}, off + C, (uint64_t)C};
	*out = t;
	*count = k;
	return 0;
}

/* ---- safetensors: spill checkpoints and Hugging Face files ------------------------ */

static int json_int(const struct sp_json *o, const char *key, int *out)
{
	const struct sp_json *x = sp_json_get(o, key);
	if (!x || x->type != SP_JSON_NUMBER || !x->is_int || x->i64 < 1 || x->i64 > (1 << 30))
		return -1;
	*out = (int)x->i64;
	return 0;
}

/* The run config of a spill checkpoint's metadata. */
static int spill_config(const char *path, const char *cfg, struct tr_weights *w)
{
	struct sp_json *j = NULL;
	int rc = 0;
	if (!cfg || sp_json_parse(cfg, strlen(cfg), &j) < 0)
		return sp_error(-EINVAL, "checkpoint %s: no readable config in its metadata", path);
	const struct sp_json *seed = sp_json_get(j, "seed");
	if (json_int(j, "layers", &w->layers) || json_int(j, "channels", &w->channels) ||
	    json_int(j, "heads", &w->heads) || json_int(j, "vocab", &w->vocab) ||
	    json_int(j, "seq", &w->seq) || json_int(j, "batch", &w->batch) || !seed ||
	    seed->type != SP_JSON_NUMBER)
		rc = sp_error(-EINVAL,
		              "checkpoint %s: its config lacks layers, channels, heads, vocab, "
		              "seq, batch or seed",
		              path);
	else
		w->seed = seed->is_int ? (uint64_t)seed->i64 : (uint64_t)seed->num;
	w->has_run = rc == 0;
	sp_json_free(j);
	return rc;
}

/* Hugging Face's config.json: the shape, and what spill's GPT-2 cannot be. */
static int hf_config(const char *path, struct tr_weights *w)
{
	char *text = NULL;
	size_t len = 0;
	struct sp_json *j = NULL;
	int rc = sp_json_read_file(path, 1u << 20, &text, &len);
	if (rc < 0)
		return sp_error(
		    rc, "%s: cannot read it (a Hugging Face GPT-2 needs its config.json)", path);
	rc = sp_json_parse(text, len, &j);
	free(text);
	if (rc < 0 || j->type != SP_JSON_OBJECT) {
		sp_json_free(j);
		return sp_error(-EINVAL, "%s: not a JSON object", path);
	}
	const char *bad = NULL;
	const struct sp_json *x;
	if (json_int(j, "n_layer", &w->layers))
		bad = "n_layer";
	else if (json_int(j, "n_head", &w->heads))
		bad = "n_head";
	else if (json_int(j, "n_embd", &w->channels))
		bad = "n_embd";
	else if (json_int(j, "n_positions", &w->positions))
		bad = "n_positions";
	else if (json_int(j, "vocab_size", &w->vocab))
		bad = "vocab_size";
	if (bad) {
		rc = sp_error(-EINVAL, "%s: %s is missing or not a positive integer", path, bad);
		goto out;
	}
	if ((x = sp_json_get(j, "model_type")) &&
	    (x->type != SP_JSON_STRING || strcmp(x->str, "gpt2")))
		bad = "model_type (spill reads gpt2)";
	else if ((x = sp_json_get(j, "n_inner")) && x->type != SP_JSON_NULL &&
	         !(x->type == SP_JSON_NUMBER && x->num == 4.0 * w->channels))
		bad = "n_inner (spill's MLP is 4 x n_embd)";
	else if ((x = sp_json_get(j, "activation_function")) &&
	         (x->type != SP_JSON_STRING ||
	          (strcmp(x->str, "gelu_new") && strcmp(x->str, "gelu_pytorch_tanh"))))
		bad = "activation_function (spill's GELU is the tanh one: gelu_new)";
	else if ((x = sp_json_get(j, "layer_norm_epsilon")) &&
	         (x->type != SP_JSON_NUMBER || x->num < 0.99e-5 || x->num > 1.01e-5))
		bad = "layer_norm_epsilon (spill's is 1e-5)";
	else if ((x = sp_json_get(j, "scale_attn_weights")) && x->type == SP_JSON_BOOL && !x->b)
		bad = "scale_attn_weights (spill scales by 1/sqrt(head size))";
	else if ((x = sp_json_get(j, "scale_attn_by_inverse_layer_idx")) &&
	         x->type == SP_JSON_BOOL && x->b)
		bad = "scale_attn_by_inverse_layer_idx";
	else if ((x = sp_json_get(j, "tie_word_embeddings")) && x->type == SP_JSON_BOOL && !x->b)
		bad = "tie_word_embeddings (spill's head is tied to wte)";
	if (bad)
		rc = sp_error(-EINVAL, "%s: unsupported %s", path, bad);
out:
	sp_json_free(j);
	return rc;
}

/* Copies tensor x of ck (name: spill's or, hf, Hugging Face's with or without
 * "transformer.") into w->p. */
static int take(const char *path, struct tr_ckpt *ck, const struct wt *x, int hf, float *p)
{
	struct tr_tensor t;
	char name[96];
	if (hf) {
		snprintf(name, sizeof(name), "transformer.%s", x->hf);
		if (tr_ckpt_find(ck, name, &t) < 0 && tr_ckpt_find(ck, x->hf, &t) == 0)
			snprintf(name, sizeof(name), "%s", x->hf);
	} else {
		snprintf(name, sizeof(name), "%s", x->name);
	}
	if (tr_ckpt_find(ck, name, &t) < 0)
		return sp_error(-EINVAL, "%s: tensor %s is missing", path, name);
	int64_t s0 = x->shape[0], s1 = x->shape[1];
	if (hf && x->transposed)
		s0 = x->shape[1], s1 = x->shape[0];
	if (t.dtype != TR_F32)
		return sp_error(-EINVAL, "%s: tensor %s is not F32 (spill reads fp32 weights)",
		                path, name);
	if (t.ndim != x->ndim || t.shape[0] != s0 || (x->ndim == 2 && t.shape[1] != s1)) {
		char have[96] = "[", want[64];
		for (int d = 0; d < t.ndim; d++)
			snprintf(have + strlen(have), sizeof(have) - strlen(have), "%s%lld",
			         d ? ", " : "", (long long)t.shape[d]);
		snprintf(want, sizeof(want), x->ndim == 2 ? "[%lld, %lld]" : "[%lld]",
		         (long long)s0, (long long)s1);
		return sp_error(-EINVAL, "%s: tensor %s has shape %s], not %s", path, name, have,
		                want);
	}
	const float *src = t.data;
	float *dst = p + x->off;
	if (hf && x->transposed) { /* HF [in, out] -> llm.c [out, in] */
		for (int64_t i = 0; i < s0; i++)
			for (int64_t k = 0; k < s1; k++)
				dst[k * s0 + i] = src[i * s1 + k];
	} else {
		memcpy(dst, src, x->n * sizeof(float));
	}
	return 0;
}

/* A safetensors file: a spill checkpoint, or a Hugging Face model with
 * hf_config (its config.json) */
static int load_safetensors(const char *path, const char *hf_cfg, struct tr_weights *w)
{
	struct tr_ckpt *ck;
	struct wt *ts = NULL;
	int nt = 0, rc = tr_ckpt_open(path, &ck);
	if (rc < 0) {
		char msg[SP_ERROR_MSG_MAX];
		snprintf(msg, sizeof(msg), "%s", sp_last_error());
		return sp_error(rc,
		                "%s: neither llm.c's model file (magic %d) nor safetensors (%s)",
		                path, LLMC_MAGIC, msg);
	}
	const char *fmt = tr_ckpt_meta(ck, "format");
	int spill = fmt && !strcmp(fmt, TR_CKPT_FORMAT);
	if (spill) {
		struct tr_tensor wpe;
		SP_CHECK_GOTO(spill_config(path, tr_ckpt_meta(ck, "config"), w), rc, out);
		if (tr_ckpt_find(ck, "wpe", &wpe) < 0 || wpe.ndim != 2 || wpe.shape[0] < 1 ||
		    wpe.shape[0] > MAX_POS) {
			rc = sp_error(-EINVAL, "checkpoint %s: no 2-D tensor wpe", path);
			goto out;
		}
		w->positions = (int)wpe.shape[0];
		w->kind = "spill checkpoint";
	} else {
		if (!hf_cfg) {
			rc = sp_error(-EINVAL,
			              "%s: neither a spill checkpoint (metadata format %s) nor a "
			              "Hugging Face model",
			              path, TR_CKPT_FORMAT);
			goto out;
		}
		SP_CHECK_GOTO(hf_config(hf_cfg, w), rc, out);
		w->kind = "Hugging Face GPT-2";
	}
	SP_CHECK_GOTO(shape_alloc(path, w), rc, out);
	SP_CHECK_GOTO(tensor_list(w, &ts, &nt), rc, out);
	for (int i = 0; i < nt; i++)
		SP_CHECK_GOTO(take(path, ck, &ts[i], !spill, w->p), rc, out);
	struct tr_tensor head;
	if (!spill && tr_ckpt_find(ck, "lm_head.weight", &head) == 0 &&
	    (head.dtype != TR_F32 || head.ndim != 2 || head.shape[0] != w->vocab ||
	     head.shape[1] != w->channels || memcmp(head.data, w->p, ts[0].n * sizeof(float)))) {
		rc = sp_error(-EINVAL,
		              "%s: lm_head.weight is not wte (an untied head; spill's is tied)",
		              path);
		goto out;
	}
	rc = 0;
out:
	free(ts);
	tr_ckpt_close(ck);
	return rc;
}

/* ---- llm.c's model file ------------------------------------------------------------ */

/* Reads n elements of esz bytes (4: fp32, 2: bf16) as fp32. */
static int read_params(FILE *f, const char *path, float *dst, uint64_t n, int esz)
{
	if (esz == 4) {
		if (fread(dst, 4, n, f) != n)
			return sp_error(-EIO, "%s: read failed", path);
		return 0;
	}
	uint16_t buf[4096];
	for (uint64_t i = 0; i < n;) {
		size_t k = n - i < 4096 ? (size_t)(n - i) : 4096;
		if (fread(buf, 2, k, f) != k)
			return sp_error(-EIO, "%s: read failed", path);
		for (size_t j = 0; j < k; j++)
			dst[i + j] = kn_bf16_to_f32(buf[j]);
		i += k;
	}
	return 0;
}

static int load_llmc(const char *path, FILE *f, off_t size, struct tr_weights *w)
{
	int32_t h[256];
	if (size < (off_t)sizeof(h) || fread(h, sizeof(h), 1, f) != 1)
		return sp_error(-EINVAL, "%s: truncated: %lld bytes, an llm.c header is 1024", path,
		                (long long)size);
	if (h[1] != 3 && h[1] != 5)
		return sp_error(-EINVAL,
		                "%s: llm.c model version %d (spill reads 3, fp32, and 5, bf16)",
		                path, h[1]);
	int esz = h[1] == 3 ? 4 : 2, Vp = h[7];
	w->positions = h[2];
	w->vocab = h[3];
	w->layers = h[4];
	w->heads = h[5];
	w->channels = h[6];
	w->kind = "llm.c model";
	if (Vp < w->vocab || Vp > MAX_VOCAB)
		return sp_error(-EINVAL, "%s: padded vocabulary %d is below the vocabulary %d",
		                path, Vp, w->vocab);
	struct tr_weights probe = *w;
	probe.vocab = Vp;
	if (w->positions < 1 || w->positions > MAX_POS || w->layers < 1 || w->layers > MAX_LAYERS ||
	    w->channels < 1 || w->channels > MAX_CHANNELS || w->heads < 1 ||
	    w->channels % w->heads || w->vocab < 1)
		return sp_error(-EINVAL,
		                "%s: not a GPT-2 spill can hold: %d layers, %d channels, %d heads, "
		                "vocab %d, %d positions",
		                path, w->layers, w->channels, w->heads, w->vocab, w->positions);
	uint64_t n, total = tr_weights_layer(&probe, w->layers + 1, &n) + n;
	uint64_t want = sizeof(h) + total * (uint64_t)esz;
	if ((uint64_t)size != want)
		return sp_error(-EINVAL,
		                "%s: %s: %lld bytes, its header's model (%d layers, C %d, Vp %d, "
		                "maxT %d, %s) takes %llu",
		                path, (uint64_t)size < want ? "truncated" : "bytes after the model",
		                (long long)size, w->layers, w->channels, Vp, w->positions,
		                esz == 4 ? "fp32" : "bf16", (unsigned long long)want);
	SP_CHECK(shape_alloc(path, w));
	int C = w->channels, L = w->layers;
	/* wte's V rows, then skip the padding rows */
	SP_CHECK(read_params(f, path, w->p, (uint64_t)w->vocab * C, esz));
	if (fseeko(f, (off_t)((uint64_t)(Vp - w->vocab) * C * esz), SEEK_CUR) < 0)
		return sp_error(-errno, "%s: seek: %s", path, strerror(errno));
	SP_CHECK(
	    read_params(f, path, w->p + (uint64_t)w->vocab * C, (uint64_t)w->positions * C, esz));
	/* each tensor of every layer in turn, into each layer's block */
	size_t sz[KN_BLOCK_NPARAMS];
	kn_block_param_sizes(C, sz);
	uint64_t toff = 0;
	for (int i = 0; i < KN_BLOCK_NPARAMS; i++) {
		for (int l = 0; l < L; l++)
			SP_CHECK(read_params(f, path, w->p + tr_weights_layer(w, l + 1, &n) + toff,
			                     sz[i], esz));
		toff += sz[i];
	}
	return read_params(f, path, w->p + tr_weights_layer(w, L + 1, &n), 2ull * C, esz);
}

/* ---- reading: which file is it? ----------------------------------------------------- */

static int is_file(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int tr_weights_load(const char *path, struct tr_weights *out)
{
	SP_CHECK_ARG(path && out, "tr_weights_load: NULL argument");
	struct tr_weights w;
	memset(&w, 0, sizeof(w));
	char file[4096], cfg[4096];
	struct stat st;
	if (stat(path, &st) < 0)
		return sp_error(-errno, "%s: %s", path, strerror(errno));
	int rc = 0;
	if (S_ISDIR(st.st_mode)) { /* a Hugging Face directory, or an llm.c export's */
		snprintf(file, sizeof(file), "%s/model.safetensors", path);
		snprintf(cfg, sizeof(cfg), "%s/config.json", path);
		if (!is_file(file)) {
			snprintf(file, sizeof(file), "%s/model.bin", path);
			if (!is_file(file))
				return sp_error(
				    -ENOENT,
				    "%s: a directory without model.safetensors (Hugging "
				    "Face) or model.bin (llm.c)",
				    path);
		}
	} else {
		snprintf(file, sizeof(file), "%s", path);
		const char *slash = strrchr(path, '/');
		snprintf(cfg, sizeof(cfg), "%.*s%sconfig.json", slash ? (int)(slash - path) : 0,
		         path, slash ? "/" : "");
	}
	FILE *f = fopen(file, "rb");
	if (!f)
		return sp_error(-errno, "%s: %s", file, strerror(errno));
	int32_t magic = 0;
	if (fstat(fileno(f), &st) < 0) {
		rc = sp_error(-errno, "%s: %s", file, strerror(errno));
	} else if (fread(&magic, 4, 1, f) == 1 && magic == LLMC_MAGIC) {
		rewind(f);
		rc = load_llmc(file, f, st.st_size, &w);
	} else {
		rc = load_safetensors(file, is_file(cfg) ? cfg : NULL, &w);
	}
	fclose(f);
	if (rc < 0) {
		tr_weights_free(&w);
		return rc;
	}
	*out = w;
	return 0;
}

/* ---- writing ------------------------------------------------------------------------ */

/* Writes len bytes to path atomically (temporary, fsync, rename). */
static int write_atomic(const char *path, const void *const *parts, const size_t *lens, int n)
{
	char tmp[4200];
	snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644), rc = 0;
	if (fd < 0)
		return sp_error(-errno, "%s: cannot create: %s", tmp, strerror(errno));
	for (int i = 0; i < n && !rc; i++)
		for (size_t done = 0; done < lens[i] && !rc;) {
			ssize_t k = write(fd, (const char *)parts[i] + done, lens[i] - done);
			if (k < 0 && errno == EINTR)
				continue;
			if (k <= 0)
				rc = sp_error(k < 0 ? -errno : -EIO, "%s: write: %s", tmp,
				              k < 0 ? strerror(errno) : "no progress");
			else
				done += (size_t)k;
		}
	if (!rc && fsync(fd) < 0)
		rc = sp_error(-errno, "%s: fsync: %s", tmp, strerror(errno));
	if (close(fd) < 0 && !rc)
		rc = sp_error(-errno, "%s: close: %s", tmp, strerror(errno));
	if (!rc && rename(tmp, path) < 0)
		rc = sp_error(-errno, "%s: rename: %s", path, strerror(errno));
	if (rc)
		unlink(tmp);
	return rc;
}

static int export_llmc(const struct tr_weights *w, const char *path)
{
	int C = w->channels, L = w->layers, Vp = (w->vocab + 127) / 128 * 128;
	int32_t h[256] = {LLMC_MAGIC, 3, w->positions, w->vocab, L, w->heads, C, Vp};
	struct tr_weights padded = *w;
	padded.vocab = Vp;
	uint64_t n, total = tr_weights_layer(&padded, L + 1, &n) + n;
	float *buf = calloc(total, sizeof(float));
	if (!buf)
		return sp_error(-ENOMEM, "%s: out of memory", path);
	/* wte (padding rows zero), wpe, then each tensor of every layer in turn */
	uint64_t o = (uint64_t)Vp * C;
	memcpy(buf, w->p, (uint64_t)w->vocab * C * sizeof(float));
	memcpy(buf + o, w->p + (uint64_t)w->vocab * C, (uint64_t)w->positions * C * sizeof(float));
	o += (uint64_t)w->positions * C;
	size_t sz[KN_BLOCK_NPARAMS];
	kn_block_param_sizes(C, sz);
	uint64_t toff = 0;
	for (int i = 0; i < KN_BLOCK_NPARAMS; i++) {
		for (int l = 0; l < L; l++, o += sz[i])
			memcpy(buf + o, w->p + tr_weights_layer(w, l + 1, &n) + toff,
			       sz[i] * sizeof(float));
		toff += sz[i];
	}
	memcpy(buf + o, w->p + tr_weights_layer(w, L + 1, &n), 2ull * C * sizeof(float));
	const void *parts[] = {h, buf};
	size_t lens[] = {sizeof(h), total * sizeof(float)};
	int rc = write_atomic(path, parts, lens, 2);
	free(buf);
	return rc;
}

static int export_hf(const struct tr_weights *w, const char *dir)
{
	struct wt *ts = NULL;
	int nt = 0, rc;
	char path[4200];
	SP_CHECK(tensor_list(w, &ts, &nt));
	struct tr_tensor *t = calloc((size_t)nt, sizeof(*t));
	char(*names)[96] = calloc((size_t)nt, sizeof(*names));
	float *buf = malloc(w->n * sizeof(float));
	if (!t || !names || !buf) {
		rc = sp_error(-ENOMEM, "%s: out of memory", dir);
		goto out;
	}
	for (int i = 0; i < nt; i++) {
		const struct wt *x = &ts[i];
		const float *src = w->p + x->off;
		float *dst = buf + x->off;
		int64_t s0 = x->shape[0], s1 = x->shape[1];
		if (x->transposed) { /* llm.c [out, in] -> Conv1D [in, out] */
			for (int64_t r = 0; r < s0; r++)
				for (int64_t k = 0; k < s1; k++)
					dst[k * s0 + r] = src[r * s1 + k];
			t[i].shape[0] = s1;
			t[i].shape[1] = s0;
		} else {
			memcpy(dst, src, x->n * sizeof(float));
			t[i].shape[0] = s0;
			t[i].shape[1] = s1;
		}
		snprintf(names[i], sizeof(names[i]), "transformer.%s", x->hf);
		t[i].name = names[i];
		t[i].dtype = TR_F32;
		t[i].ndim = x->ndim;
		t[i].data = dst;
	}
	/* transformers refuses safetensors without format pt */
	const char *meta[] = {"format", "pt"};
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	SP_CHECK_GOTO(tr_ckpt_write(path, t, nt, meta, 1), rc, out);
	char cfg[2048];
	int len = snprintf(
	    cfg, sizeof(cfg),
	    "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
	    "  \"activation_function\": \"gelu_new\",\n  \"n_layer\": %d,\n  \"n_head\": %d,\n"
	    "  \"n_embd\": %d,\n  \"n_positions\": %d,\n  \"n_ctx\": %d,\n  \"vocab_size\": %d,\n"
	    "  \"n_inner\": null,\n  \"layer_norm_epsilon\": 1e-05,\n"
	    "  \"initializer_range\": 0.02,\n  \"attn_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n"
	    "  \"resid_pdrop\": 0.0,\n  \"summary_first_dropout\": 0.0,\n"
	    "  \"scale_attn_weights\": true,\n  \"scale_attn_by_inverse_layer_idx\": false,\n"
	    "  \"reorder_and_upcast_attn\": false,\n  \"tie_word_embeddings\": true,\n"
	    "%s  \"torch_dtype\": \"float32\"\n}\n",
	    w->layers, w->heads, w->channels, w->positions, w->positions, w->vocab,
	    w->vocab > 50256 ? "  \"bos_token_id\": 50256,\n  \"eos_token_id\": 50256,\n" : "");
	snprintf(path, sizeof(path), "%s/config.json", dir);
	const void *parts[] = {cfg};
	size_t lens[] = {(size_t)len};
	rc = write_atomic(path, parts, lens, 1);
out:
	free(buf);
	free(names);
	free(t);
	free(ts);
	return rc;
}

int tr_weights_export(const struct tr_weights *w, const char *format, const char *dir)
{
	SP_CHECK_ARG(w && w->p && format && dir, "tr_weights_export: NULL argument");
	int hf = !strcmp(format, "hf");
	if (!hf && strcmp(format, "llmc"))
		return sp_error(-EINVAL, "--format %s: wants hf or llmc", format);
	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		return sp_error(-errno, "%s: cannot create: %s", dir, strerror(errno));
	struct stat st;
	if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
		return sp_error(-ENOTDIR, "%s: not a directory", dir);
	if (hf)
		return export_hf(w, dir);
	char path[4200];
	snprintf(path, sizeof(path), "%s/model.bin", dir);
	return export_llmc(w, path);
}

/* ---- into a run ---------------------------------------------------------------------- */

int tr_weights_put(struct run *r, const struct tr_weights *w)
{
	if (r->m.nlayers != w->layers + 2)
		return sp_error(-EINVAL, "--init: %d layers in the file, %d in the model",
		                w->layers, r->m.nlayers - 2);
	for (int l = 0; l < r->m.nlayers; l++) {
		uint64_t n, off = tr_weights_layer(w, l, &n);
		if (rt_run_state_bytes(r->run, l, RT_PARAMS) != n * sizeof(float))
			return sp_error(
			    -EINVAL,
			    "--init: layer %s has %llu bytes of parameters, "
			    "the file %llu",
			    r->m.layers[l].name,
			    (unsigned long long)rt_run_state_bytes(r->run, l, RT_PARAMS),
			    (unsigned long long)(n * sizeof(float)));
		SP_CHECK(rt_run_write_state(r->run, l, RT_PARAMS, w->p + off));
	}
	return 0;
}

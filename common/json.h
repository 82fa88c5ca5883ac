/* common/json.h — a strict JSON reader and a string writer, for the files spill
 * reads back: checkpoint headers (safetensors) and run reports. Strict means
 * RFC 8259 with no extensions: one value, no trailing commas or garbage, no
 * duplicate keys in an object, nesting at most SP_JSON_MAX_DEPTH deep; every
 * fault is -EINVAL naming the byte offset, never a crash. */
#ifndef SP_COMMON_JSON_H
#define SP_COMMON_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/error.h"

#define SP_JSON_MAX_DEPTH 64

enum sp_json_type {
	SP_JSON_NULL,
	SP_JSON_BOOL,
	SP_JSON_NUMBER,
	SP_JSON_STRING,
	SP_JSON_ARRAY,
	SP_JSON_OBJECT
};

struct sp_json {
	enum sp_json_type type;
	int b;                 /* BOOL */
	double num;            /* NUMBER */
	int64_t i64;           /* NUMBER: the value when is_int */
	int is_int;            /* an integer literal (no fraction, no exponent) that fits int64 */
	char *str;             /* STRING: UTF-8, NUL-terminated (may contain NULs: see len) */
	size_t len;            /* STRING: bytes before the terminating NUL */
	int n;                 /* ARRAY, OBJECT: members */
	struct sp_json *items; /* the n values, in document order */
	char **keys;           /* OBJECT: the n keys */
};

/* Parses text[0..len). Returns 0 and the value (free with sp_json_free), or
 * -EINVAL "json: <what> at byte N", -ENOMEM. */
int sp_json_parse(const char *text, size_t len, struct sp_json **out) SP_MUST_CHECK;
void sp_json_free(struct sp_json *j);
/* The value of key in an object, or NULL (also for a non-object). */
const struct sp_json *sp_json_get(const struct sp_json *obj, const char *key);
/* Writes s as a JSON string literal (quotes, backslashes, control bytes escaped). */
void sp_json_write_str(FILE *f, const char *s);
/* Reads a whole file of at most max bytes (NUL-terminated copy in *text).
 * Returns 0, -errno naming the file, or -EFBIG over max. */
int sp_json_read_file(const char *path, size_t max, char **text, size_t *len) SP_MUST_CHECK;

#endif

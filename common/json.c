/* common/json.c — a strict recursive-descent JSON reader (see json.h). Values
 * are built in place as the text is read; a fault frees what was built. */
#include "common/json.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct jp {
	const char *s;
	size_t n, i;
	int depth;
};

static int fault(const struct jp *p, const char *what)
{
	return sp_error(-EINVAL, "json: %s at byte %zu", what, p->i);
}

static void ws(struct jp *p)
{
	while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' ||
	                       p->s[p->i] == '\r'))
		p->i++;
}

static int lit(struct jp *p, const char *word)
{
	size_t k = strlen(word);
	if (p->n - p->i < k || memcmp(p->s + p->i, word, k) != 0)
		return fault(p, "unexpected character");
	p->i += k;
	return 0;
}

static int hex4(struct jp *p, unsigned *out)
{
	if (p->n - p->i < 4)
		return fault(p, "truncated \\u escape");
	unsigned v = 0;
	for (int k = 0; k < 4; k++) {
		char c = p->s[p->i++];
		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (unsigned)(c - 'A' + 10);
		else
			return fault(p, "bad \\u escape");
	}
	*out = v;
	return 0;
}

static size_t utf8(unsigned cp, char *o)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (char)(0xc0 | (cp >> 6));
		o[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (char)(0xe0 | (cp >> 12));
		o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		o[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	o[0] = (char)(0xf0 | (cp >> 18));
	o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	o[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/* A string after its opening quote; the decoded bytes are never longer than
 * the escaped ones, so one allocation of the remaining text's size bound fits. */
static int string(struct jp *p, char **out, size_t *len)
{
	size_t start = p->i, end = start;
	while (end < p->n && p->s[end] != '"') {
		if (p->s[end] == '\\')
			end++;
		end++;
	}
	if (end >= p->n)
		return fault(p, "unterminated string");
	char *o = malloc(end - start + 1);
	if (!o)
		return sp_error(-ENOMEM, "json: out of memory");
	size_t k = 0;
	while (p->s[p->i] != '"') {
		unsigned char c = (unsigned char)p->s[p->i];
		if (c < 0x20) {
			free(o);
			return fault(p, "control character in a string");
		}
		p->i++;
		if (c != '\\') {
			o[k++] = (char)c;
			continue;
		}
		char e = p->s[p->i++];
		unsigned cp;
		int rc = 0;
		switch (e) {
		case '"': o[k++] = '"'; break;
		case '\\': o[k++] = '\\'; break;
		case '/': o[k++] = '/'; break;
		case 'b': o[k++] = '\b'; break;
		case 'f': o[k++] = '\f'; break;
		case 'n': o[k++] = '\n'; break;
		case 'r': o[k++] = '\r'; break;
		case 't': o[k++] = '\t'; break;
		case 'u':
			rc = hex4(p, &cp);
			if (rc == 0 && cp >= 0xd800 && cp < 0xdc00) { /* a surrogate pair */
				unsigned lo;
				if (p->n - p->i < 2 || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u')
					rc = fault(p, "lone high surrogate");
				else if ((p->i += 2, rc = hex4(p, &lo)) == 0 &&
				         (lo < 0xdc00 || lo > 0xdfff))
					rc = fault(p, "bad low surrogate");
				else
					cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
			} else if (rc == 0 && cp >= 0xdc00 && cp < 0xe000) {
				rc = fault(p, "lone low surrogate");
			}
			if (rc == 0)
				k += utf8(cp, o + k);
			break;
		default: rc = fault(p, "bad escape");
		}
		if (rc < 0) {
			free(o);
			return rc;
		}
	}
	p->i++;
	o[k] = 0;
	*out = o;
	*len = k;
	return 0;
}

static int number(struct jp *p, struct sp_json *v)
{
	size_t s = p->i;
	int integer = 1;
	if (p->i < p->n && p->s[p->i] == '-')
		p->i++;
	if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9')
		return fault(p, "bad number");
	if (p->s[p->i] == '0')
		p->i++;
	else
		while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
			p->i++;
	if (p->i < p->n && p->s[p->i] == '.') {
		integer = 0;
		p->i++;
		if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9')
			return fault(p, "bad fraction");
		while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
			p->i++;
	}
	if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
		integer = 0;
		p->i++;
		if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-'))
			p->i++;
		if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9')
			return fault(p, "bad exponent");
		while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
			p->i++;
	}
	char buf[64];
	size_t k = p->i - s;
	if (k >= sizeof(buf))
		return fault(p, "number too long");
	memcpy(buf, p->s + s, k);
	buf[k] = 0;
	v->type = SP_JSON_NUMBER;
	v->num = strtod(buf, NULL);
	if (!isfinite(v->num))
		return fault(p, "number out of range");
	if (integer) {
		errno = 0;
		long long x = strtoll(buf, NULL, 10);
		v->is_int = errno == 0;
		v->i64 = x;
	}
	return 0;
}

static int value(struct jp *p, struct sp_json *v);

/* Appends a zeroed value to an array or object being built. */
static struct sp_json *push(struct sp_json *v, int *cap)
{
	if (v->n == *cap) {
		int nc = *cap ? 2 * *cap : 8;
		struct sp_json *ni = realloc(v->items, (size_t)nc * sizeof(*ni));
		if (!ni)
			return NULL;
		v->items = ni;
		if (v->type == SP_JSON_OBJECT) {
			char **nk = realloc(v->keys, (size_t)nc * sizeof(*nk));
			if (!nk)
				return NULL;
			v->keys = nk;
		}
		*cap = nc;
	}
	memset(&v->items[v->n], 0, sizeof(v->items[0]));
	return &v->items[v->n];
}

static int container(struct jp *p, struct sp_json *v, int object)
{
	if (++p->depth > SP_JSON_MAX_DEPTH)
		return fault(p, "nesting too deep");
	v->type = object ? SP_JSON_OBJECT : SP_JSON_ARRAY;
	int cap = 0;
	ws(p);
	if (p->i < p->n && p->s[p->i] == (object ? '}' : ']')) {
		p->i++;
		p->depth--;
		return 0;
	}
	for (;;) {
		ws(p);
		char *key = NULL;
		size_t klen;
		if (object) {
			if (p->i >= p->n || p->s[p->i] != '"')
				return fault(p, "expected a key");
			p->i++;
			SP_CHECK(string(p, &key, &klen));
			for (int k = 0; k < v->n; k++)
				if (!strcmp(v->keys[k], key)) {
					free(key);
					return fault(p, "duplicate key");
				}
			ws(p);
			if (p->i >= p->n || p->s[p->i] != ':') {
				free(key);
				return fault(p, "expected ':'");
			}
			p->i++;
		}
		struct sp_json *it = push(v, &cap);
		if (!it) {
			free(key);
			return sp_error(-ENOMEM, "json: out of memory");
		}
		if (object)
			v->keys[v->n] = key;
		v->n++; /* counted before it is filled, so that a fault frees it */
		SP_CHECK(value(p, it));
		ws(p);
		if (p->i >= p->n)
			return fault(p, "unterminated container");
		char c = p->s[p->i++];
		if (c == ',')
			continue;
		if (c == (object ? '}' : ']'))
			break;
		return fault(p, object ? "expected ',' or '}'" : "expected ',' or ']'");
	}
	p->depth--;
	return 0;
}

static int value(struct jp *p, struct sp_json *v)
{
	ws(p);
	if (p->i >= p->n)
		return fault(p, "unexpected end");
	char c = p->s[p->i];
	switch (c) {
	case '{': p->i++; return container(p, v, 1);
	case '[': p->i++; return container(p, v, 0);
	case '"':
		p->i++;
		v->type = SP_JSON_STRING;
		return string(p, &v->str, &v->len);
	case 't':
		v->type = SP_JSON_BOOL;
		v->b = 1;
		return lit(p, "true");
	case 'f': v->type = SP_JSON_BOOL; return lit(p, "false");
	case 'n': v->type = SP_JSON_NULL; return lit(p, "null");
	default: return number(p, v);
	}
}

static void release(struct sp_json *v)
{
	if (v->type == SP_JSON_STRING)
		free(v->str);
	if (v->type == SP_JSON_ARRAY || v->type == SP_JSON_OBJECT) {
		for (int k = 0; k < v->n; k++) {
			release(&v->items[k]);
			if (v->keys)
				free(v->keys[k]);
		}
		free(v->items);
		free(v->keys);
	}
}

void sp_json_free(struct sp_json *j)
{
	if (!j)
		return;
	release(j);
	free(j);
}

int sp_json_parse(const char *text, size_t len, struct sp_json **out)
{
	SP_CHECK_ARG(text && out, "sp_json_parse: NULL argument");
	struct jp p = {.s = text, .n = len};
	struct sp_json *v = calloc(1, sizeof(*v));
	if (!v)
		return sp_error(-ENOMEM, "json: out of memory");
	int rc = value(&p, v);
	if (rc == 0) {
		ws(&p);
		if (p.i != p.n)
			rc = fault(&p, "trailing characters");
	}
	if (rc < 0) {
		sp_json_free(v);
		return rc;
	}
	*out = v;
	return 0;
}

const struct sp_json *sp_json_get(const struct sp_json *obj, const char *key)
{
	if (!obj || obj->type != SP_JSON_OBJECT || !key)
		return NULL;
	for (int k = 0; k < obj->n; k++)
		if (!strcmp(obj->keys[k], key))
			return &obj->items[k];
	return NULL;
}

void sp_json_write_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *c = (const unsigned char *)(s ? s : ""); *c; c++) {
		if (*c == '"' || *c == '\\')
			fprintf(f, "\\%c", *c);
		else if (*c == '\n')
			fputs("\\n", f);
		else if (*c == '\t')
			fputs("\\t", f);
		else if (*c < 0x20 || *c == 0x7f)
			fprintf(f, "\\u%04x", *c);
		else
			fputc(*c, f);
	}
	fputc('"', f);
}

int sp_json_read_file(const char *path, size_t max, char **text, size_t *len)
{
	SP_CHECK_ARG(path && text && len, "sp_json_read_file: NULL argument");
	FILE *f = fopen(path, "rb");
	if (!f)
		return sp_error(-errno, "%s: %s", path, strerror(errno));
	char *buf = NULL;
	size_t n = 0, cap = 0;
	int rc = 0;
	for (;;) {
		if (n == cap) {
			cap = cap ? 2 * cap : 65536;
			char *nb = cap <= max + 1 ? realloc(buf, cap + 1) : NULL;
			if (!nb) {
				rc = cap > max + 1
				         ? sp_error(-EFBIG, "%s: larger than %zu bytes", path, max)
				         : sp_error(-ENOMEM, "%s: out of memory", path);
				break;
			}
			buf = nb;
		}
		size_t k = fread(buf + n, 1, cap - n, f);
		n += k;
		if (k == 0) {
			if (ferror(f))
				rc = sp_error(-EIO, "%s: read error", path);
			break;
		}
		if (n > max) {
			rc = sp_error(-EFBIG, "%s: larger than %zu bytes", path, max);
			break;
		}
	}
	fclose(f);
	if (rc < 0) {
		free(buf);
		return rc;
	}
	if (!buf && !(buf = malloc(1)))
		return sp_error(-ENOMEM, "%s: out of memory", path);
	buf[n] = 0;
	*text = buf;
	*len = n;
	return 0;
}

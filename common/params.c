/* common/params.c — loading and printing the SPILL_* table (params.def). */
#include "common/params.h"
#include "common/log.h"

#include <ctype.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

extern char **environ;

const struct sp_param_desc sp_param_table[] = {
#define SP_PARAM(field, type, def, choices, doc) \
	{"SPILL_" #field, SP_PARAM_##type, def, choices, doc, offsetof(struct sp_params, field)},
#include "common/params.def"
#undef SP_PARAM
};
const size_t sp_param_count = SP_ARRAY_SIZE(sp_param_table);

/* "SPILL_device_mem" in the table literal is upper-cased on use. */
static void env_name(const struct sp_param_desc *d, char *buf, size_t len)
{
	size_t i = 0;
	for (; d->env[i] && i + 1 < len; i++)
		buf[i] = (char)toupper((unsigned char)d->env[i]);
	buf[i] = '\0';
}

int sp_parse_size(const char *s, uint64_t *out)
{
	const char *p = s;
	uint64_t v = 0;
	if (!isdigit((unsigned char)*p))
		return -EINVAL;
	for (; isdigit((unsigned char)*p); p++) {
		if (v > (UINT64_MAX - 9) / 10)
			return -EINVAL;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	unsigned shift = 0;
	switch (toupper((unsigned char)*p)) {
	case 'K':
		shift = 10;
		p++;
		break;
	case 'M':
		shift = 20;
		p++;
		break;
	case 'G':
		shift = 30;
		p++;
		break;
	case 'T':
		shift = 40;
		p++;
		break;
	default: break;
	}
	if (shift && (*p == 'i' || *p == 'I'))
		p++;
	if (*p == 'B' || *p == 'b')
		p++;
	if (*p != '\0')
		return -EINVAL;
	if (shift && v > (UINT64_MAX >> shift))
		return -EINVAL;
	*out = v << shift;
	return 0;
}

uint64_t sp_size_class(uint64_t bytes, int bits, uint64_t min)
{
	if (bits <= 0 || bytes <= min || bytes < 2)
		return bytes;
	int b = 63 - __builtin_clzll(bytes);
	if (b <= bits)
		return bytes;
	uint64_t step = 1ull << (b - bits);
	return (bytes + step - 1) / step * step;
}

char *sp_format_size(uint64_t bytes, char *buf, size_t len)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
	double v = (double)bytes;
	size_t u = 0;
	while (v >= 1024.0 && u + 1 < SP_ARRAY_SIZE(units)) {
		v /= 1024.0;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%" PRIu64 " B", bytes);
	else
		snprintf(buf, len, "%.2f %s", v, units[u]);
	return buf;
}

static int choice_ok(const char *choices, const char *v)
{
	const char *p = choices;
	size_t n = strlen(v);
	for (;;) {
		const char *bar = strchr(p, '|');
		size_t len = bar ? (size_t)(bar - p) : strlen(p);
		if (len == n && strncasecmp(p, v, n) == 0)
			return 1;
		if (!bar)
			return 0;
		p = bar + 1;
	}
}

/* Parses value into the field of p described by d. */
static int parse_one(const struct sp_param_desc *d, const char *value, struct sp_params *p)
{
	char name[64];
	char *field = (char *)p + d->offset;
	char *end = NULL;
	env_name(d, name, sizeof(name));
	switch (d->type) {
	case SP_PARAM_STR:
		if (d->choices[0] && !choice_ok(d->choices, value))
			return sp_error(-EINVAL, "%s='%s' is not one of %s", name, value,
			                d->choices[0] == '|' ? d->choices + 1 : d->choices);
		memcpy(field, &value, sizeof(value));
		return 0;
	case SP_PARAM_SIZE: {
		uint64_t v;
		if (sp_parse_size(value, &v) < 0)
			return sp_error(
			    -EINVAL,
			    "%s='%s' is not a size (digits with an optional K, M, G or T suffix)",
			    name, value);
		memcpy(field, &v, sizeof(v));
		return 0;
	}
	case SP_PARAM_INT: {
		errno = 0;
		long v = strtol(value, &end, 10);
		if (errno || end == value || *end != '\0' || v < 0)
			return sp_error(-EINVAL, "%s='%s' is not a non-negative integer", name,
			                value);
		memcpy(field, &v, sizeof(v));
		return 0;
	}
	case SP_PARAM_BOOL: {
		int v;
		if (strcmp(value, "1") == 0 || strcasecmp(value, "true") == 0 ||
		    strcasecmp(value, "yes") == 0 || strcasecmp(value, "on") == 0)
			v = 1;
		else if (strcmp(value, "0") == 0 || strcasecmp(value, "false") == 0 ||
		         strcasecmp(value, "no") == 0 || strcasecmp(value, "off") == 0)
			v = 0;
		else
			return sp_error(
			    -EINVAL, "%s='%s' is not a boolean (0/1, true/false, yes/no, on/off)",
			    name, value);
		memcpy(field, &v, sizeof(v));
		return 0;
	}
	case SP_PARAM_DOUBLE: {
		errno = 0;
		double v = strtod(value, &end);
		if (errno || end == value || *end != '\0' || !isfinite(v) || v < 0)
			return sp_error(-EINVAL, "%s='%s' is not a non-negative number", name,
			                value);
		memcpy(field, &v, sizeof(v));
		return 0;
	}
	}
	return sp_error(-EINVAL, "%s: bad parameter type", name);
}

void sp_params_defaults(struct sp_params *out)
{
	struct sp_params p;
	memset(&p, 0, sizeof(p));
	for (size_t i = 0; i < sp_param_count; i++) {
		int rc = parse_one(&sp_param_table[i], sp_param_table[i].def, &p);
		SP_ASSERT(rc == 0);
		(void)rc;
	}
	*out = p;
}

static const char *plain_getenv(const char *name)
{
	return getenv(name);
}

int sp_params_load(struct sp_params *out, const char *(*getenv_fn)(const char *))
{
	struct sp_params p;
	sp_params_defaults(&p);
	if (!getenv_fn)
		getenv_fn = plain_getenv;
	for (size_t i = 0; i < sp_param_count; i++) {
		char name[64];
		env_name(&sp_param_table[i], name, sizeof(name));
		const char *v = getenv_fn(name);
		if (v)
			SP_CHECK(parse_one(&sp_param_table[i], v, &p));
	}
	/* Typos: a SPILL_* variable no row knows is most likely a misspelling. */
	if (getenv_fn == plain_getenv && environ) {
		for (char **e = environ; *e; e++) {
			if (strncmp(*e, "SPILL_", 6) != 0)
				continue;
			size_t len = strcspn(*e, "=");
			int known = 0;
			for (size_t i = 0; i < sp_param_count && !known; i++) {
				char name[64];
				env_name(&sp_param_table[i], name, sizeof(name));
				known = strlen(name) == len && strncmp(name, *e, len) == 0;
			}
			if (!known)
				SP_WARN(COMMON,
				        "unknown variable %.*s ignored (see `spill params`)",
				        (int)len, *e);
		}
	}
	*out = p;
	return 0;
}

int sp_params_set(struct sp_params *p, const char *name, const char *value)
{
	for (size_t i = 0; i < sp_param_count; i++) {
		char env[64];
		env_name(&sp_param_table[i], env, sizeof(env));
		if (strcasecmp(env, name) == 0 || strcasecmp(env + 6, name) == 0)
			return parse_one(&sp_param_table[i], value, p);
	}
	return sp_error(-ENOENT, "unknown parameter '%s' (see `spill params`)", name);
}

static int name_char(char c)
{
	return isupper((unsigned char)c) || isdigit((unsigned char)c) || c == '_';
}

void sp_params_rename(char *msg, size_t len, const char *var, const char *flag)
{
	size_t vl = strlen(var), fl = strlen(flag);
	char out[SP_ERROR_MSG_MAX];
	size_t o = 0;
	const char *p = msg;
	if (!len)
		return;
	while (*p && o + 1 < sizeof(out)) {
		if (!strncmp(p, var, vl) && (p == msg || !name_char(p[-1])) && !name_char(p[vl])) {
			size_t n = fl < sizeof(out) - 1 - o ? fl : sizeof(out) - 1 - o;
			memcpy(out + o, flag, n);
			o += n;
			p += vl;
			/* VAR='v' -> --flag v (the closing quote dropped too) */
			const char *q = p[0] == '=' && p[1] == '\'' ? strchr(p + 2, '\'') : NULL;
			if (q && o + 1 < sizeof(out)) {
				out[o++] = ' ';
				for (p += 2; p < q && o + 1 < sizeof(out); p++)
					out[o++] = *p;
				p = q + 1;
			}
			continue;
		}
		out[o++] = *p++;
	}
	out[o] = '\0';
	snprintf(msg, len, "%s", out);
}

int sp_params_apply_logging(const struct sp_params *p)
{
	enum sp_log_level level;
	unsigned mask;
	int fd = -1;
	SP_CHECK(sp_log_level_parse(p->debug, &level));
	if (sp_log_subsys_parse(p->debug_subsys, &mask) < 0) {
		/* The message is in the thread-local buffer: prefix it, never format it
		 * into itself. */
		sp_error_context("SPILL_DEBUG_SUBSYS");
		return -EINVAL;
	}
	if (p->debug_file[0]) {
		char path[4096];
		const char *pct = strstr(p->debug_file, "%p");
		if (pct)
			snprintf(path, sizeof(path), "%.*s%d%s", (int)(pct - p->debug_file),
			         p->debug_file, (int)getpid(), pct + 2);
		else
			snprintf(path, sizeof(path), "%s", p->debug_file);
		fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (fd < 0)
			return sp_error(-errno, "SPILL_DEBUG_FILE: cannot open '%s': %s", path,
			                strerror(errno));
	}
	sp_log_configure(level, mask, fd);
	return 0;
}

static const char *type_name(enum sp_param_type t)
{
	switch (t) {
	case SP_PARAM_STR: return "string";
	case SP_PARAM_SIZE: return "size";
	case SP_PARAM_INT: return "integer";
	case SP_PARAM_BOOL: return "bool";
	case SP_PARAM_DOUBLE: return "number";
	}
	return "?";
}

void sp_params_print_markdown(FILE *f)
{
	fprintf(f, "| variable | type | default | description |\n");
	fprintf(f, "|---|---|---|---|\n");
	for (size_t i = 0; i < sp_param_count; i++) {
		const struct sp_param_desc *d = &sp_param_table[i];
		char name[64];
		env_name(d, name, sizeof(name));
		fprintf(f, "| `%s` | %s | `%s` | %s", name, type_name(d->type), d->def, d->doc);
		if (d->choices[0])
			fprintf(f, " (one of: %s)",
			        d->choices[0] == '|' ? d->choices + 1 : d->choices);
		fprintf(f, " |\n");
	}
}

void sp_params_print_values(FILE *f, const struct sp_params *p)
{
	for (size_t i = 0; i < sp_param_count; i++) {
		const struct sp_param_desc *d = &sp_param_table[i];
		const char *field = (const char *)p + d->offset;
		char name[64];
		env_name(d, name, sizeof(name));
		fprintf(f, "%-24s ", name);
		switch (d->type) {
		case SP_PARAM_STR: {
			const char *s;
			memcpy(&s, field, sizeof(s));
			fprintf(f, "'%s'", s);
			break;
		}
		case SP_PARAM_SIZE: {
			uint64_t v;
			memcpy(&v, field, sizeof(v));
			fprintf(f, "%" PRIu64, v);
			break;
		}
		case SP_PARAM_INT: {
			long v;
			memcpy(&v, field, sizeof(v));
			fprintf(f, "%ld", v);
			break;
		}
		case SP_PARAM_BOOL: {
			int v;
			memcpy(&v, field, sizeof(v));
			fprintf(f, "%d", v);
			break;
		}
		case SP_PARAM_DOUBLE: {
			double v;
			memcpy(&v, field, sizeof(v));
			fprintf(f, "%g", v);
			break;
		}
		}
		fprintf(f, "  # %s\n", d->doc);
	}
}

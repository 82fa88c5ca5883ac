/* device/profile.c — device profiles: readable files, compiled in.
 *
 * A profile is `key = value` lines (# starts a comment) in device/profiles/.
 * The files are embedded into the library with .incbin, so a profile name works
 * from any directory; a path (containing '/' or ending in .prof) reads a file.
 * Values take units: sizes K/M/G/T (powers of 1024), rates B/s KB/s MB/s GB/s
 * TB/s (powers of 1000), FLOP/s GFLOP/s TFLOP/s, times s ms us ns.
 * Every key is required except launch_latency, cpu_flops, cpu_mem_bw (the host
 * CPU the model backend charges for DEV_HOST streams; defaults 0.5 TFLOP/s and
 * 20 GB/s), net and net_latency (a node's inter-node link for multi-node
 * runs on the model backend, per direction; defaults 25 GB/s and 5 us) and speed (per-device relative speed, a comma-separated list, e.g.
 * "1, 0.5" for a second GPU half as fast; missing entries are 1); unknown keys
 * are errors, so a typo never becomes a silent default.
 */
#include "device/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEV_EMBED(sym, file)                                                             \
	__asm__(".section .rodata\n.balign 16\n.globl " #sym "\n.hidden " #sym "\n" #sym \
	        ":\n.incbin \"" file "\"\n.byte 0\n.previous\n");                        \
	extern const char sym[];

DEV_EMBED(dev_prof_gtx1080ti_x4, "device/profiles/gtx1080ti-x4.prof")
DEV_EMBED(dev_prof_gtx1080ti_x8, "device/profiles/gtx1080ti-x8.prof")
DEV_EMBED(dev_prof_gtx1080ti_x4_mixed, "device/profiles/gtx1080ti-x4-mixed.prof")
DEV_EMBED(dev_prof_h100_pcie5, "device/profiles/h100-pcie5.prof")
DEV_EMBED(dev_prof_h100_sxm, "device/profiles/h100-sxm.prof")
DEV_EMBED(dev_prof_a100_nvlink_x8, "device/profiles/a100-nvlink-x8.prof")

static const struct {
	const char *name;
	const char *text;
} builtin[] = {
    {"gtx1080ti-x4", dev_prof_gtx1080ti_x4},
    {"gtx1080ti-x8", dev_prof_gtx1080ti_x8},
    {"gtx1080ti-x4-mixed", dev_prof_gtx1080ti_x4_mixed},
    {"h100-pcie5", dev_prof_h100_pcie5},
    {"h100-sxm", dev_prof_h100_sxm},
    {"a100-nvlink-x8", dev_prof_a100_nvlink_x8},
};

const char *const *dev_profile_builtin_names(void)
{
	static const char *names[SP_ARRAY_SIZE(builtin) + 1];
	for (size_t i = 0; i < SP_ARRAY_SIZE(builtin); i++)
		names[i] = builtin[i].name;
	return names;
}

enum unit_kind { U_SIZE, U_RATE, U_FLOPS, U_TIME, U_COUNT, U_TEXT, U_LIST };

struct key {
	const char *key;
	enum unit_kind unit;
	size_t offset;
	int optional;
};

#define K_(k, u, f, o)                                   \
	{                                                \
		k, u, offsetof(struct dev_profile, f), o \
	}
static const struct key keys[] = {
    K_("name", U_TEXT, name, 0),
    K_("device", U_TEXT, device_name, 0),
    K_("devices", U_COUNT, ndevices, 0),
    K_("memory", U_SIZE, device_mem, 0),
    K_("flops", U_FLOPS, flops, 0),
    K_("bf16_flops", U_FLOPS, bf16_flops, 1),
    K_("mem_bw", U_RATE, mem_bw, 0),
    K_("h2d", U_RATE, h2d_bw, 0),
    K_("d2h", U_RATE, d2h_bw, 0),
    K_("host_link", U_RATE, host_bw, 0),
    K_("p2p", U_RATE, p2p_bw, 0),
    K_("disk", U_RATE, disk_bw, 0),
    K_("disks", U_COUNT, ndisks, 1),
    K_("net", U_RATE, net_bw, 1),
    K_("net_latency", U_TIME, net_lat, 1),
    K_("launch_latency", U_TIME, launch_lat, 1),
    K_("cpu_flops", U_FLOPS, cpu_flops, 1),
    K_("cpu_mem_bw", U_RATE, cpu_mem_bw, 1),
    K_("speed", U_LIST, speed, 1),
};

static const struct {
	const char *suffix;
	enum unit_kind unit;
	double scale;
} units[] = {
    {"B/s", U_RATE, 1},        {"KB/s", U_RATE, 1e3},      {"MB/s", U_RATE, 1e6},
    {"GB/s", U_RATE, 1e9},     {"TB/s", U_RATE, 1e12},     {"FLOP/s", U_FLOPS, 1},
    {"GFLOP/s", U_FLOPS, 1e9}, {"TFLOP/s", U_FLOPS, 1e12}, {"s", U_TIME, 1},
    {"ms", U_TIME, 1e-3},      {"us", U_TIME, 1e-6},       {"ns", U_TIME, 1e-9},
};

static char *trim(char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	char *e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
		*--e = 0;
	return s;
}

static int parse_value(const struct key *k, char *v, struct dev_profile *out, const char *origin,
                       int line)
{
	void *field = (char *)out + k->offset;
	if (k->unit == U_TEXT) {
		if (!*v || strlen(v) >= 64)
			return sp_error(-EINVAL, "profile %s:%d: %s must be 1..63 characters",
			                origin, line, k->key);
		snprintf(field, 64, "%s", v);
		return 0;
	}
	if (k->unit == U_SIZE) {
		uint64_t b;
		if (sp_parse_size(v, &b) < 0 || b == 0)
			return sp_error(-EINVAL, "profile %s:%d: %s = '%s' is not a size", origin,
			                line, k->key, v);
		*(uint64_t *)field = b;
		return 0;
	}
	if (k->unit == U_LIST) { /* speed: "1, 0.5, ..." relative speeds > 0 */
		int n = 0;
		char *tok = v;
		while (*tok) {
			char *end;
			double x = strtod(tok, &end);
			if (end == tok || !(x > 0) || n == DEV_MAX)
				return sp_error(
				    -EINVAL,
				    "profile %s:%d: speed = '%s' must be up to %d numbers "
				    "> 0, comma-separated",
				    origin, line, v, DEV_MAX);
			out->speed[n++] = x;
			tok = trim(end);
			if (*tok == ',')
				tok = trim(tok + 1);
			else if (*tok)
				return sp_error(-EINVAL, "profile %s:%d: speed: unexpected '%s'",
				                origin, line, tok);
		}
		out->nspeed = n;
		return 0;
	}
	char *end;
	double x = strtod(v, &end);
	if (end == v || x < 0 || x != x)
		return sp_error(-EINVAL, "profile %s:%d: %s = '%s' is not a non-negative number",
		                origin, line, k->key, v);
	char *u = trim(end);
	if (k->unit == U_COUNT) {
		if (*u || x != (int)x || x < 1 || x > DEV_MAX)
			return sp_error(-EINVAL, "profile %s:%d: %s = '%s' must be 1..%d", origin,
			                line, k->key, v, DEV_MAX);
		*(int *)field = (int)x;
		return 0;
	}
	double scale = *u ? 0 : 1;
	for (size_t i = 0; i < SP_ARRAY_SIZE(units); i++)
		if (units[i].unit == k->unit && strcmp(u, units[i].suffix) == 0)
			scale = units[i].scale;
	if (scale == 0)
		return sp_error(-EINVAL, "profile %s:%d: %s: unknown unit '%s'", origin, line,
		                k->key, u);
	*(double *)field = x * scale;
	return 0;
}

int dev_profile_parse(const char *text, const char *origin, struct dev_profile *out)
{
	SP_CHECK_ARG(text && out, "dev_profile_parse: NULL argument");
	struct dev_profile p;
	memset(&p, 0, sizeof(p));
	unsigned seen = 0;
	int line = 0;
	const char *s = text;
	while (*s) {
		char buf[256];
		size_t n = strcspn(s, "\n");
		line++;
		if (n >= sizeof(buf))
			return sp_error(-EINVAL, "profile %s:%d: line too long", origin, line);
		memcpy(buf, s, n);
		buf[n] = 0;
		s += n + (s[n] == '\n');
		char *hash = strchr(buf, '#');
		if (hash)
			*hash = 0;
		char *l = trim(buf);
		if (!*l)
			continue;
		char *eq = strchr(l, '=');
		if (!eq)
			return sp_error(-EINVAL, "profile %s:%d: expected 'key = value', got '%s'",
			                origin, line, l);
		*eq = 0;
		char *k = trim(l), *v = trim(eq + 1);
		size_t i = 0;
		while (i < SP_ARRAY_SIZE(keys) && strcmp(keys[i].key, k) != 0)
			i++;
		if (i == SP_ARRAY_SIZE(keys))
			return sp_error(-EINVAL, "profile %s:%d: unknown key '%s'", origin, line,
			                k);
		SP_CHECK(parse_value(&keys[i], v, &p, origin, line));
		seen |= 1u << i;
	}
	for (size_t i = 0; i < SP_ARRAY_SIZE(keys); i++)
		if (!(seen & (1u << i)) && !keys[i].optional)
			return sp_error(-EINVAL, "profile %s: missing key '%s'", origin,
			                keys[i].key);
	if (!(p.cpu_flops > 0))
		p.cpu_flops = 0.5e12;
	if (!(p.cpu_mem_bw > 0))
		p.cpu_mem_bw = 20e9;
	if (!p.ndisks)
		p.ndisks = 1;
	if (!(p.net_bw > 0))
		p.net_bw = 25e9;
	if (!(p.net_lat > 0))
		p.net_lat = 5e-6;
	if (p.flops <= 0 || p.mem_bw <= 0 || p.h2d_bw <= 0 || p.d2h_bw <= 0 || p.host_bw <= 0)
		return sp_error(-EINVAL,
		                "profile %s: flops, mem_bw, h2d, d2h and host_link must be "
		                "> 0",
		                origin);
	*out = p;
	return 0;
}

static int read_file(const char *path, char **out)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return sp_error(-errno, "profile %s: cannot open: %s", path, strerror(errno));
	char *buf = malloc(65536);
	size_t n = buf ? fread(buf, 1, 65535, f) : 0;
	int err = ferror(f);
	int big = !feof(f);
	fclose(f);
	if (!buf)
		return sp_error(-ENOMEM, "profile %s: out of memory", path);
	if (err || big) {
		free(buf);
		return sp_error(-EINVAL, "profile %s: %s", path,
		                err ? "read error" : "over 64 KiB");
	}
	buf[n] = 0;
	*out = buf;
	return 0;
}

int dev_profile_load(const char *name, struct dev_profile *out)
{
	SP_CHECK_ARG(name && out, "dev_profile_load: NULL argument");
	size_t len = strlen(name);
	if (strchr(name, '/') || (len > 5 && strcmp(name + len - 5, ".prof") == 0)) {
		char *text = NULL;
		SP_CHECK(read_file(name, &text));
		int rc = dev_profile_parse(text, name, out);
		free(text);
		return rc;
	}
	for (size_t i = 0; i < SP_ARRAY_SIZE(builtin); i++)
		if (strcmp(builtin[i].name, name) == 0)
			return dev_profile_parse(builtin[i].text, name, out);
	char list[256] = "";
	for (size_t i = 0; i < SP_ARRAY_SIZE(builtin); i++)
		snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", i ? ", " : "",
		         builtin[i].name);
	return sp_error(-EINVAL,
	                "SPILL_PROFILE: unknown profile '%s' (built in: %s; or a path to "
	                "a .prof file)",
	                name, list);
}

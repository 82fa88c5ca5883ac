/* vmm/stats.c — accounting: the (link x kind) byte matrix, per-object counters,
 * the transfer trace ring and the stats table / JSON.
 *
 * Every transfer is accounted once, when it is retired successfully (so failed
 * disk writes move no bytes). The matrix is indexed by internal places (devices,
 * host, disk) for source and destination and by object kind. Called with
 * vmm->lock held, except the printers, which take it.
 */
#include "vmm/internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

SP_STATS_DEFINE(vmm_stats, VMM_STATS)

static const char *const xfer_names[VMM_XFER_KINDS] = {"h2d", "d2h", "p2p", "host2disk",
                                                       "disk2host"};
static const char *const kind_names[VMM_KINDS] = {"weight",       "grad",  "optim",    "stash",
                                                  "intermediate", "input", "workspace"};

const char *vmm_xfer_kind_name(enum vmm_xfer_kind kind)
{
	return (unsigned)kind < VMM_XFER_KINDS ? xfer_names[kind] : "?";
}

const char *vmm_kind_name(enum vmm_kind kind)
{
	return (unsigned)kind < VMM_KINDS ? kind_names[kind] : "?";
}

static uint64_t *link_at(struct vmm *v, int src, int dst, int kind)
{
	size_t np = (size_t)(v->ndev + 2);
	return &v->link[((size_t)src * np + (size_t)dst) * VMM_KINDS + (size_t)kind];
}

void vmm_acct_xfer(struct vmm *v, uint32_t idx, int kind, int src, int dst, uint64_t bytes,
                   double t0, double t1)
{
	struct vmm_obj *o = vmm_obj_at(v, idx);
	*link_at(v, src, dst, o->kind) += bytes;
	v->xfer_total[kind] += bytes;
	o->moved[kind] += bytes;
	o->nmoves[kind]++;
	if (v->trace) {
		struct vmm_trace_rec *r = &v->trace[v->ntrace % v->cfg.trace_cap];
		*r = (struct vmm_trace_rec){t0,
		                            t1,
		                            ((uint64_t)o->gen << 32) | (idx + 1),
		                            bytes,
		                            vmm_place_public(v, src),
		                            vmm_place_public(v, dst),
		                            kind,
		                            o->kind,
		                            {0}};
		memcpy(r->name, o->name, sizeof(r->name));
	}
	v->ntrace++;
}

uint64_t vmm_link_bytes(struct vmm *v, int src, int dst, int kind)
{
	int s = vmm_place_index(v, src), d = vmm_place_index(v, dst);
	uint64_t sum = 0;
	if (s < 0 || d < 0 || kind < 0 || kind > VMM_KINDS)
		return 0;
	pthread_mutex_lock(&v->lock);
	for (int k = 0; k < VMM_KINDS; k++)
		if (kind == VMM_KINDS || kind == k)
			sum += *link_at(v, s, d, k);
	pthread_mutex_unlock(&v->lock);
	return sum;
}

uint64_t vmm_xfer_bytes(struct vmm *v, enum vmm_xfer_kind kind)
{
	if ((unsigned)kind >= VMM_XFER_KINDS)
		return 0;
	pthread_mutex_lock(&v->lock);
	uint64_t b = v->xfer_total[kind];
	pthread_mutex_unlock(&v->lock);
	return b;
}

size_t vmm_trace_get(struct vmm *v, struct vmm_trace_rec *out, size_t max, uint64_t *total)
{
	pthread_mutex_lock(&v->lock);
	uint64_t n = v->ntrace;
	uint64_t have = v->trace ? (n < v->cfg.trace_cap ? n : v->cfg.trace_cap) : 0;
	uint64_t take = have < max ? have : max;
	for (uint64_t i = 0; i < take; i++)
		out[i] = v->trace[(n - take + i) % v->cfg.trace_cap];
	if (total)
		*total = n;
	pthread_mutex_unlock(&v->lock);
	return (size_t)take;
}

/* The lane of a transfer in the Chrome trace: one per link and direction. */
static int trace_lane(const struct vmm_trace_rec *r)
{
	int dev = r->xfer == VMM_XFER_D2H ? r->src : r->dst;
	if (r->xfer == VMM_XFER_H2DISK || r->xfer == VMM_XFER_DISK2H)
		dev = 0;
	return r->xfer * DEV_MAX + dev + 1;
}

static void trace_lane_name(const struct vmm_trace_rec *r, char *buf, size_t n)
{
	if (r->xfer == VMM_XFER_H2DISK || r->xfer == VMM_XFER_DISK2H)
		snprintf(buf, n, "%s", xfer_names[r->xfer]);
	else
		snprintf(buf, n, "gpu%d %s", r->xfer == VMM_XFER_D2H ? r->src : r->dst,
		         xfer_names[r->xfer]);
}

/* A JSON string body: quotes, backslashes and control characters escaped. */
static void json_str(FILE *f, const char *s)
{
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
}

static const char *trace_place(int place, char *buf, size_t n)
{
	if (place == VMM_HOST)
		return "host";
	if (place == VMM_DISK)
		return "disk";
	snprintf(buf, n, "gpu%d", place);
	return buf;
}

int vmm_trace_write(struct vmm *v, FILE *f)
{
	SP_CHECK_ARG(v && f, "vmm_trace_write: NULL argument");
	size_t cap = v->cfg.trace_cap;
	struct vmm_trace_rec *r = cap ? malloc(cap * sizeof(*r)) : NULL;
	if (cap && !r)
		return sp_error(-ENOMEM, "vmm: trace: out of memory");
	uint64_t total = 0;
	size_t n = vmm_trace_get(v, r, cap, &total);
	double t0 = 0;
	for (size_t i = 0; i < n; i++)
		if (i == 0 || r[i].t_start < t0)
			t0 = r[i].t_start;
	fprintf(f,
	        "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"transfers\": %" PRIu64
	        ", \"kept\": %zu},\n\"traceEvents\": [\n",
	        total, n);
	fprintf(f, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 1, \"args\": "
	           "{\"name\": \"spill vmm transfers\"}}");
	uint8_t named[VMM_XFER_KINDS * DEV_MAX + 1] = {0};
	for (size_t i = 0; i < n; i++) {
		int lane = trace_lane(&r[i]);
		if (named[lane])
			continue;
		char ln[32];
		trace_lane_name(&r[i], ln, sizeof(ln));
		fprintf(f,
		        ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": %d, "
		        "\"args\": {\"name\": \"%s\"}}",
		        lane, ln);
		named[lane] = 1;
	}
	for (size_t i = 0; i < n; i++) {
		char a[16], b[16];
		fprintf(f, ",\n{\"name\": \"");
		json_str(f, r[i].name);
		fprintf(
		    f,
		    "\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": 1, \"tid\": %d, \"ts\": %.3f, "
		    "\"dur\": %.3f, \"args\": {\"bytes\": %" PRIu64 ", \"kind\": \"%s\", "
		    "\"src\": \"%s\", \"dst\": \"%s\"}}",
		    xfer_names[r[i].xfer], trace_lane(&r[i]), (r[i].t_start - t0) * 1e6,
		    (r[i].t_end - r[i].t_start) * 1e6, r[i].bytes, kind_names[r[i].kind],
		    trace_place(r[i].src, a, sizeof(a)), trace_place(r[i].dst, b, sizeof(b)));
	}
	fprintf(f, "\n]}\n");
	free(r);
	if (ferror(f))
		return sp_error(-EIO, "vmm: writing the trace failed");
	return 0;
}

void vmm_stats_get(struct vmm *v, struct vmm_stats *out)
{
	pthread_mutex_lock(&v->lock);
	*out = v->st;
	pthread_mutex_unlock(&v->lock);
}

static void place_label(struct vmm *v, int p, char *buf, size_t n)
{
	if (p == P_HOST(v))
		snprintf(buf, n, "host");
	else if (p == P_DISK(v))
		snprintf(buf, n, "disk");
	else
		snprintf(buf, n, "gpu%d", p);
}

void vmm_stats_print(struct vmm *v, FILE *f, int json)
{
	struct vmm_stats st;
	vmm_stats_get(v, &st);
	pthread_mutex_lock(&v->lock);
	int np = v->ndev + 2;
	char a[16], b[16];
	if (json) {
		fprintf(f, "{\"stats\":");
		sp_stats_print_json(f, vmm_stats_desc, vmm_stats_desc_count, &st);
		fprintf(f, ",\"xfer_bytes\":{");
		for (int k = 0; k < VMM_XFER_KINDS; k++)
			fprintf(f, "%s\"%s\":%" PRIu64, k ? "," : "", xfer_names[k],
			        v->xfer_total[k]);
		fprintf(f, "},\"links\":[");
		int first = 1;
		for (int s = 0; s < np; s++)
			for (int d = 0; d < np; d++)
				for (int k = 0; k < VMM_KINDS; k++) {
					uint64_t n = *link_at(v, s, d, k);
					if (!n)
						continue;
					place_label(v, s, a, sizeof(a));
					place_label(v, d, b, sizeof(b));
					fprintf(f,
					        "%s{\"src\":\"%s\",\"dst\":\"%s\",\"kind\":\"%s\","
					        "\"bytes\":%" PRIu64 "}",
					        first ? "" : ",", a, b, kind_names[k], n);
					first = 0;
				}
		fprintf(f, "],\"transfers\":%" PRIu64 "}\n", v->ntrace);
		pthread_mutex_unlock(&v->lock);
		return;
	}
	sp_stats_print_table(f, "vmm", vmm_stats_desc, vmm_stats_desc_count, &st);
	fprintf(f, "== vmm swap volume (bytes, link x kind) ==\n%-14s", "link");
	for (int k = 0; k < VMM_KINDS; k++)
		fprintf(f, " %13s", kind_names[k]);
	fprintf(f, " %14s\n", "total");
	for (int s = 0; s < np; s++)
		for (int d = 0; d < np; d++) {
			uint64_t tot = 0;
			for (int k = 0; k < VMM_KINDS; k++)
				tot += *link_at(v, s, d, k);
			if (!tot)
				continue;
			char l[40];
			place_label(v, s, a, sizeof(a));
			place_label(v, d, b, sizeof(b));
			snprintf(l, sizeof(l), "%s->%s", a, b);
			fprintf(f, "%-14s", l);
			for (int k = 0; k < VMM_KINDS; k++)
				fprintf(f, " %13" PRIu64, *link_at(v, s, d, k));
			fprintf(f, " %14" PRIu64 "\n", tot);
		}
	for (int k = 0; k < VMM_XFER_KINDS; k++)
		fprintf(f, "%s%s=%" PRIu64, k ? " " : "", xfer_names[k], v->xfer_total[k]);
	fprintf(f, "\n");
	pthread_mutex_unlock(&v->lock);
}

void vmm_disk_stats_get(struct vmm *v, struct vmm_disk_stats_snapshot *out)
{
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&v->lock);
	if (v->disk)
		vmm_disk_stats(v->disk, out);
	pthread_mutex_unlock(&v->lock);
}

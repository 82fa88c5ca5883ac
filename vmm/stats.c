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
		                            o->kind};
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

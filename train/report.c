/* train/report.c — what a run measured, per step: where time went on each
 * device (computing, waiting for transfers, idle), and at the end the
 * swap-volume profile (bytes per link x object kind, measured, next to the
 * taskgraph's prediction for the plan and Harmony's closed form for the
 * schedule), printed and written as JSON (--stats-json); `spill report`
 * prints the same from the JSON (tr_report_file).
 */
#include "train/internal.h"

#include "common/json.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- per step ----------------------------------------------------------------------- */

void tr_account_step(struct run *r, double t0, double t1, int nsteps)
{
	double dt = t1 - t0;
	r->t_total += dt;
	for (int j = 0; j < nsteps; j++)
		r->recent[r->nrecent++ % 8] = dt / nsteps;
	const struct rt_prog *p = &r->run->prog;
	int nd = r->rt->ndev;
	double comp = 0, exposed = 0;
	/* per device, tasks in start order: a gap before a task is exposed transfer
	 * when its dependencies had ended by then (its inputs were still arriving),
	 * idle otherwise */
	for (int d = 0; d < nd; d++) {
		double last = t0, before = comp;
		for (;;) {
			int next = -1;
			for (int t = 0; t < p->ntask; t++) {
				int tg = p->task[t].tg_task; /* a step the block skipped: not run */
				if (p->ran_on[t] != d || (p->task[t].flags & RT_TASK_COLLECTIVE) ||
				    r->t_start[t] < last - 1e-12 || r->t_end[t] < t0 ||
				    (tg >= 0 && r->run->g.task[tg].step >= nsteps))
					continue;
				if (next < 0 || r->t_start[t] < r->t_start[next])
					next = t;
			}
			if (next < 0)
				break;
			double deps = t0;
			for (int k = 0; k < p->task[next].ndep; k++)
				if (r->t_end[p->task[next].dep[k]] > deps)
					deps = r->t_end[p->task[next].dep[k]];
			double s = r->t_start[next], e = r->t_end[next];
			double ready = deps > last ? deps : last;
			if (s > ready)
				exposed += s - ready;
			comp += e > s ? e - s : 0;
			last = e > last ? e : last + 1e-12;
		}
		if (d < TR_MAXDEV)
			r->busy[d] += comp - before;
	}
	r->compute += comp / nd;
	r->exposed += exposed / nd;
	r->last_exposed = exposed / nd;
	r->idle += dt - (comp + exposed) / nd;
}

/* ---- the profile ---------------------------------------------------------------------- */

static const char *const link_names[TR_LINKS] = {"H2D", "D2H", "P2P", "host->disk", "disk->host"};
static const char *const kind_names[TR_KINDS] = {"weight", "grad",  "optim",
                                                 "stash",  "bound", "input"};
static const char *const json_links[TR_LINKS] = {"h2d", "d2h", "p2p", "host2disk", "disk2host"};
static const char *const json_kinds[TR_KINDS] = {"weight", "grad",     "optim",
                                                 "stash",  "boundary", "input"};

/* Bytes moved so far per link and kind (the vmm's counters since the context
 * opened). */
static void link_bytes(struct run *r, double out[TR_LINKS][TR_KINDS])
{
	struct vmm *v = r->rt->vmm;
	int nd = r->rt->ndev;
	for (int k = 0; k < TR_KINDS; k++) {
		double b[TR_LINKS] = {0};
		for (int d = 0; d < nd; d++) {
			b[0] += (double)vmm_link_bytes(v, VMM_HOST, d, k);
			b[1] += (double)vmm_link_bytes(v, d, VMM_HOST, k);
			for (int e = 0; e < nd; e++)
				if (e != d)
					b[2] += (double)vmm_link_bytes(v, d, e, k);
		}
		b[3] = (double)vmm_link_bytes(v, VMM_HOST, VMM_DISK, k);
		b[4] = (double)vmm_link_bytes(v, VMM_DISK, VMM_HOST, k);
		for (int l = 0; l < TR_LINKS; l++)
			out[l][k] = b[l];
	}
}

void tr_account_cold(struct run *r, int nsteps)
{
	r->cold_steps = nsteps;
	link_bytes(r, r->cold);
	r->cold_collective = (double)r->rt->st.collective_p2p;
	r->cold_internode = (double)r->rt->st.internode;
	struct vmm_disk_stats_snapshot ds;
	vmm_disk_stats_get(r->rt->vmm, &ds);
	for (int k = 0; k < ds.ndrives && k < 16; k++)
		r->cold_drive[k] = (double)(ds.drive_written[k] + ds.drive_read[k]);
}

static void measure(struct run *r, struct tr_profile *pr)
{
	struct vmm *v = r->rt->vmm;
	int nd = r->rt->ndev;
	int steps = r->res.steps ? r->res.steps : 1;
	/* the steady state: the steps after the first (cold) program run (one step;
	 * 2bw's first block of steps), when there are */
	int cold = r->cold_steps > 0 ? r->cold_steps : 1;
	int warm = r->res.steps > cold;
	double now[TR_LINKS][TR_KINDS];
	link_bytes(r, now);
	for (int l = 0; l < TR_LINKS; l++)
		for (int k = 0; k < TR_KINDS; k++)
			pr->measured[l][k] =
			    warm ? (now[l][k] - r->cold[l][k]) / (steps - cold) : now[l][k] / steps;
	pr->collective =
	    warm ? ((double)r->rt->st.collective_p2p - r->cold_collective) / (steps - cold)
	         : (double)r->rt->st.collective_p2p / steps;
	pr->internode = warm ? ((double)r->rt->st.internode - r->cold_internode) / (steps - cold)
	                     : (double)r->rt->st.internode / steps;
	pr->nodes = tr_run_nodes(r);
	pr->warm_steps = warm ? steps - cold : steps;
	struct vmm_disk_stats_snapshot ds;
	vmm_disk_stats_get(v, &ds);
	pr->ndrives = ds.ndrives < 16 ? ds.ndrives : 16;
	for (int k = 0; k < pr->ndrives; k++)
		pr->drive_bytes[k] =
		    warm ? ((double)(ds.drive_written[k] + ds.drive_read[k]) - r->cold_drive[k]) /
		               (steps - cold)
		         : (double)(ds.drive_written[k] + ds.drive_read[k]) / steps;
	/* the taskgraph's steady-state prediction for this plan and budget */
	struct tg_hw hw;
	rt_plan_hw(r->rt, r->plan.ndev, &hw);
	struct tg_graph *g = &r->run->g;
	tg_graph_set_hw(g, &hw);
	struct tg_swap sw;
	pr->has_predicted = tg_sim_swap(g, hw.capacity, 0, &sw) == 0;
	_Static_assert(TR_LINKS == TG_NLINK, "the report's links are the taskgraph's");
	for (int l = 0; l < TR_LINKS && pr->has_predicted; l++)
		for (int k = 0; k < TR_KINDS; k++)
			pr->predicted[l][k] = (double)sw.bytes[l][k] / tg_graph_steps(g);
	if (pr->has_predicted) /* the ring's share is counted as collective traffic */
		pr->predicted[2][1] = 0;
	/* Harmony's closed forms count the weights' swaps only */
	double W = 0;
	for (int l = 0; l < r->m.nlayers; l++)
		W += (double)r->m.layers[l].param_bytes;
	int n = r->plan.ndev;
	double m = (double)r->batch / ((double)r->plan.microbatch * n);
	pr->closed_form = -1;
	if (r->plan.sched == TG_DP_SWAP)
		pr->closed_form = (4 * m + 2) * n * W;
	else if (r->plan.sched == TG_HARMONY_DP)
		pr->closed_form = 3.0 * n * W;
	else if (r->plan.sched == TG_HARMONY_PP)
		pr->closed_form = 3.0 * W;
	pr->steps = r->res.steps;
	pr->step_s = r->res.steps ? r->t_total / r->res.steps : 0;
	pr->compute = r->res.steps ? r->compute / r->res.steps : 0;
	pr->exposed = r->res.steps ? r->exposed / r->res.steps : 0;
	pr->idle = r->res.steps ? r->idle / r->res.steps : 0;
	for (int d = 0; d < nd && d < TR_MAXDEV; d++)
		pr->busy[d] = r->res.steps ? r->busy[d] / r->res.steps : 0;
	pr->tokens_per_s = r->t_total > 0 ? (double)r->res.steps * r->batch * r->T / r->t_total : 0;
	pr->first_loss = r->res.first_loss;
	pr->last_loss = r->res.last_loss;
	pr->last_eval = r->res.last_eval;
	snprintf(pr->plan, sizeof(pr->plan), "%s", r->plan_name);
	snprintf(pr->backend, sizeof(pr->backend), "%s", dev_backend_name(dev_backend(r->rt->dev)));
	pr->devices = r->rt->ndev;
	snprintf(pr->model, sizeof(pr->model),
	         "GPT-2 %s: %d layers, %d channels, %d heads, vocab %d, "
	         "seq %d, batch %d",
	         r->preset, r->kc.L, r->kc.C, r->kc.NH, r->kc.V, r->T, r->batch);
	snprintf(pr->tuner, sizeof(pr->tuner), "%s", r->tune_log);
	pr->losses = r->losses ? r->losses + r->start : NULL;
	pr->times = r->times ? r->times + r->start : NULL;
	pr->switch_step = r->switch_step;
	pr->nlosses = r->res.steps;
	pr->first_step = r->start + 1;
}

static void gb(FILE *f, double b)
{
	if (b < 0)
		fprintf(f, " %10s", "-");
	else if (b == 0)
		fprintf(f, " %10s", "0");
	else
		fprintf(f, " %10.3f", b / 1e9);
}

void tr_profile_print(const struct tr_profile *pr, FILE *f)
{
	fprintf(f, "\n== %s, %s backend, %d device(s) ==\n", pr->model, pr->backend, pr->devices);
	fprintf(f, "plan: %s\n", pr->plan);
	if (pr->tuner[0])
		fprintf(f, "tuner: %s\n", pr->tuner);
	fprintf(f, "%d steps, %.4f s/step, %.0f tokens/s", pr->steps, pr->step_s, pr->tokens_per_s);
	if (!strcmp(pr->backend, "model"))
		fprintf(f, "; no loss (the model backend moves no data)");
	else if (isnan(pr->last_loss))
		fprintf(f, "; loss %.4f -> nan: training diverged (lower --lr?)", pr->first_loss);
	else
		fprintf(f, "; loss %.4f -> %.4f", pr->first_loss, pr->last_loss);
	if (!isnan(pr->last_eval))
		fprintf(f, ", validation %.4f", pr->last_eval);
	fprintf(
	    f, "\ntime per step and device: compute %.4f s, exposed transfer %.4f s, idle %.4f s\n",
	    pr->compute, pr->exposed, pr->idle);
	if (pr->step_s > 0 && pr->devices > 0) {
		fprintf(f, "utilization (compute / step) per device:");
		for (int d = 0; d < pr->devices && d < TR_MAXDEV; d++)
			fprintf(f, " %d: %.0f%%", d, 100 * pr->busy[d] / pr->step_s);
		fprintf(f, "\n");
	}
	if (pr->step_s > 0 && pr->devices > 0 && pr->nodes > 1) {
		fprintf(f, "utilization per node (its devices' mean)%s:",
		        strcmp(pr->backend, "model")
		            ? ""
		            : ", simulated (every node runs the same plan)");
		for (int k = 0; k < pr->nodes && k < 64; k++)
			fprintf(f, " %d: %.0f%%", k, 100 * pr->node_util[k]);
		fprintf(f, "\n");
	}
	if (pr->warm_steps > 0 && pr->warm_steps < pr->steps)
		fprintf(f,
		        "\nswap volume per step, GB (measured over the %d steps after the first, "
		        "cold one; predicted by the taskgraph for this plan)\n",
		        pr->warm_steps);
	else
		fprintf(f,
		        "\nswap volume per step, GB (measured; predicted by the taskgraph for this "
		        "plan)\n");
	fprintf(f, "%-11s", "link");
	for (int k = 0; k < TR_KINDS; k++)
		fprintf(f, " %10s", kind_names[k]);
	fprintf(f, " %10s %10s\n", "total", "predicted");
	for (int l = 0; l < TR_LINKS; l++) {
		double tot = 0, pt = 0;
		int known = pr->has_predicted; /* a report saved before disk predictions: -1 */
		fprintf(f, "%-11s", link_names[l]);
		for (int k = 0; k < TR_KINDS; k++) {
			gb(f, pr->measured[l][k]);
			tot += pr->measured[l][k];
			pt += pr->predicted[l][k];
			known = known && pr->predicted[l][k] >= 0;
		}
		gb(f, tot);
		gb(f, known ? pt : -1);
		fprintf(f, "\n");
	}
	fprintf(f, "%-11s", "collective");
	gb(f, 0);
	gb(f, pr->collective);
	fprintf(f, "   (all-reduce ring traffic over the peer links)\n");
	if (pr->nodes > 1) {
		fprintf(f, "%-11s", "inter-node");
		gb(f, 0);
		gb(f, pr->internode);
		fprintf(f, "   (sent per node of %d: the gradients' chain%s)\n", pr->nodes,
		        strcmp(pr->backend, "model") ? ", node 0's"
		                                     : " as a node in its middle sends");
	}
	if (pr->ndrives > 0) {
		fprintf(f, "disk drives (written + read per step, GB):");
		for (int k = 0; k < pr->ndrives; k++)
			fprintf(f, " %d: %.3f", k, pr->drive_bytes[k] / 1e9);
		fprintf(f, "\n");
	}
	double w = 0;
	for (int l = 0; l < 2; l++)
		w += pr->measured[l][0];
	if (pr->closed_form >= 0)
		fprintf(
		    f,
		    "weights over the host link: %.3f GB measured, Harmony's closed form %.3f GB\n",
		    w / 1e9, pr->closed_form / 1e9);
	else
		fprintf(
		    f,
		    "weights over the host link: %.3f GB measured (Harmony gives no closed form "
		    "for this schedule)\n",
		    w / 1e9);
}

/* A loss in the JSON: NaN (no loss on the model backend, or a diverged run)
 * as null, which JSON has for it and json.load reads as None. */
static void loss_json(FILE *f, double x)
{
	if (isnan(x) || isinf(x))
		fprintf(f, "null");
	else
		fprintf(f, "%.9g", x);
}

int tr_profile_json(const struct tr_profile *pr, const char *path)
{
	char tmp[4096];
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	FILE *f = fopen(tmp, "w");
	if (!f)
		return sp_error(-errno, "stats %s: cannot write: %s", path, strerror(errno));
	fprintf(f, "{\n  \"model\": ");
	sp_json_write_str(f, pr->model);
	fprintf(f, ",\n  \"plan\": ");
	sp_json_write_str(f, pr->plan);
	fprintf(f, ",\n  \"tuner\": ");
	sp_json_write_str(f, pr->tuner);
	fprintf(f, ",\n  \"backend\": ");
	sp_json_write_str(f, pr->backend);
	fprintf(f,
	        ",\n  \"devices\": %d,\n  \"steps\": %d,\n  \"step_s\": %.9g,\n"
	        "  \"tokens_per_s\": %.9g,\n  \"first_loss\": ",
	        pr->devices, pr->steps, pr->step_s, pr->tokens_per_s);
	loss_json(f, pr->first_loss);
	fprintf(f, ",\n  \"last_loss\": ");
	loss_json(f, pr->last_loss);
	fprintf(f, ",\n  \"last_eval\": ");
	loss_json(f, pr->last_eval);
	fprintf(f,
	        ",\n  \"time\": {\"compute\": %.9g, \"exposed_transfer\": %.9g, \"idle\": "
	        "%.9g},\n  \"collective\": %.17g,\n  \"closed_form_weights\": %.17g,\n",
	        pr->compute, pr->exposed, pr->idle, pr->collective, pr->closed_form);
	fprintf(f, "  \"nodes\": %d,\n  \"internode\": %.17g,\n  \"node_utilization\": [",
	        pr->nodes > 1 ? pr->nodes : 1, pr->internode);
	for (int k = 0; k < pr->nodes && k < 64; k++)
		fprintf(f, "%s%.9g", k ? ", " : "", pr->node_util[k]);
	fprintf(f, "],\n");
	fprintf(f, "  \"first_step\": %d,\n  \"losses\": [", pr->first_step);
	for (int i = 0; i < pr->nlosses && pr->losses; i++) {
		fprintf(f, "%s", i ? ", " : "");
		loss_json(f, pr->losses[i]);
	}
	fprintf(f, "],\n  \"step_times\": [");
	for (int i = 0; i < pr->nlosses && pr->times; i++)
		fprintf(f, "%s%.9g", i ? ", " : "", pr->times[i]);
	fprintf(f, "],\n  \"warm_steps\": %d,\n  \"drive_bytes\": [", pr->warm_steps);
	for (int k = 0; k < pr->ndrives; k++)
		fprintf(f, "%s%.17g", k ? ", " : "", pr->drive_bytes[k]);
	fprintf(f, "],\n  \"switch_step\": %d,\n  \"compute_per_device\": [", pr->switch_step);
	for (int d = 0; d < pr->devices && d < TR_MAXDEV; d++)
		fprintf(f, "%s%.9g", d ? ", " : "", pr->busy[d]);
	fprintf(f, "],\n");
	for (int w = 0; w < 2; w++) {
		fprintf(f, "  \"%s\": {", w ? "predicted" : "measured");
		for (int l = 0; l < TR_LINKS; l++) {
			fprintf(f, "%s\"%s\": {", l ? ", " : "", json_links[l]);
			for (int k = 0; k < TR_KINDS; k++)
				fprintf(f, "%s\"%s\": %.17g", k ? ", " : "", json_kinds[k],
				        w ? (pr->has_predicted ? pr->predicted[l][k] : -1)
				          : pr->measured[l][k]);
			fprintf(f, "}");
		}
		fprintf(f, "}%s\n", w ? "" : ",");
	}
	fprintf(f, "}\n");
	int bad = ferror(f);
	if (fclose(f) != 0 || bad) {
		remove(tmp);
		return sp_error(-EIO, "stats %s: write failed", path);
	}
	if (rename(tmp, path) != 0) {
		int e = errno;
		remove(tmp);
		return sp_error(-e, "stats %s: %s", path, strerror(e));
	}
	return 0;
}

static double num(const struct sp_json *o, const char *key, double def)
{
	const struct sp_json *v = sp_json_get(o, key);
	return v && v->type == SP_JSON_NUMBER ? v->num : def;
}

static void str(const struct sp_json *o, const char *key, char *buf, size_t n)
{
	const struct sp_json *v = sp_json_get(o, key);
	snprintf(buf, n, "%s", v && v->type == SP_JSON_STRING ? v->str : "?");
}

int tr_profile_read(const char *path, struct tr_profile *pr)
{
	char *text = NULL;
	size_t len = 0;
	SP_CHECK(sp_json_read_file(path, 16u << 20, &text, &len));
	struct sp_json *root = NULL;
	int rc = sp_json_parse(text, len, &root);
	free(text);
	if (rc < 0)
		return sp_error(rc, "report %s: %s", path, sp_last_error());
	memset(pr, 0, sizeof(*pr));
	rc = -EINVAL;
	const struct sp_json *meas = sp_json_get(root, "measured"),
	                     *pred = sp_json_get(root, "predicted"),
	                     *time = sp_json_get(root, "time");
	if (root->type != SP_JSON_OBJECT || !meas || !pred || !time ||
	    !sp_json_get(root, "steps")) {
		rc = sp_error(-EINVAL, "report %s: not a spill train --stats-json file", path);
		goto out;
	}
	str(root, "model", pr->model, sizeof(pr->model));
	str(root, "plan", pr->plan, sizeof(pr->plan));
	str(root, "tuner", pr->tuner, sizeof(pr->tuner));
	str(root, "backend", pr->backend, sizeof(pr->backend));
	pr->devices = (int)num(root, "devices", 0);
	pr->steps = (int)num(root, "steps", 0);
	pr->step_s = num(root, "step_s", 0);
	pr->tokens_per_s = num(root, "tokens_per_s", 0);
	/* null (or a missing key): no loss. Files before null wrote NaN as -1. */
	pr->first_loss = num(root, "first_loss", NAN);
	pr->last_loss = num(root, "last_loss", NAN);
	pr->last_eval = num(root, "last_eval", NAN);
	if (pr->first_loss < 0)
		pr->first_loss = NAN;
	if (pr->last_loss < 0)
		pr->last_loss = NAN;
	if (pr->last_eval < 0)
		pr->last_eval = NAN;
	pr->compute = num(time, "compute", 0);
	pr->exposed = num(time, "exposed_transfer", 0);
	pr->idle = num(time, "idle", 0);
	const struct sp_json *busy = sp_json_get(root, "compute_per_device");
	for (int d = 0; busy && busy->type == SP_JSON_ARRAY && d < busy->n && d < TR_MAXDEV; d++)
		if (busy->items[d].type == SP_JSON_NUMBER)
			pr->busy[d] = busy->items[d].num;
	pr->collective = num(root, "collective", 0);
	pr->nodes = (int)num(root, "nodes", 1);
	pr->internode = num(root, "internode", 0);
	const struct sp_json *nu = sp_json_get(root, "node_utilization");
	for (int k = 0; nu && nu->type == SP_JSON_ARRAY && k < nu->n && k < 64; k++)
		if (nu->items[k].type == SP_JSON_NUMBER)
			pr->node_util[k] = nu->items[k].num;
	pr->warm_steps = (int)num(root, "warm_steps", 0);
	const struct sp_json *drv = sp_json_get(root, "drive_bytes");
	for (int k = 0; drv && drv->type == SP_JSON_ARRAY && k < drv->n && k < 16; k++)
		if (drv->items[k].type == SP_JSON_NUMBER)
			pr->drive_bytes[pr->ndrives++] = drv->items[k].num;
	pr->closed_form = num(root, "closed_form_weights", -1);
	pr->has_predicted = 1;
	for (int l = 0; l < TR_LINKS; l++) {
		const struct sp_json *ml = sp_json_get(meas, json_links[l]),
		                     *pl = sp_json_get(pred, json_links[l]);
		for (int k = 0; k < TR_KINDS; k++) {
			pr->measured[l][k] = ml ? num(ml, json_kinds[k], 0) : 0;
			pr->predicted[l][k] = pl ? num(pl, json_kinds[k], -1) : -1;
			if (l < 3 && pr->predicted[l][k] < 0)
				pr->has_predicted = 0;
		}
	}
	rc = 0;
out:
	sp_json_free(root);
	return rc;
}

int tr_report(struct run *r)
{
	struct tr_profile pr;
	memset(&pr, 0, sizeof(pr));
	measure(r, &pr);
	/* every node's utilization: its own slot, summed over the nodes (every
	 * node reports, at the same points of the run) */
	double u = 0;
	for (int d = 0; d < pr.devices && d < TR_MAXDEV && pr.step_s > 0; d++)
		u += pr.busy[d] / pr.step_s / pr.devices;
	int rank = tr_nodes_rank(r->c.nodes);
	for (int k = 0; k < pr.nodes && k < 64; k++)
		pr.node_util[k] = r->c.nodes ? (k == rank ? u : 0) : u;
	if (r->c.nodes && pr.nodes > 1)
		SP_CHECK(
		    tr_nodes_sum_doubles(r->c.nodes, pr.node_util, pr.nodes < 64 ? pr.nodes : 64));
	tr_profile_print(&pr, r->out);
	fflush(r->out);
	if (r->c.stats_json && tr_writer(r))
		SP_CHECK(tr_profile_json(&pr, r->c.stats_json));
	return 0;
}

/* train/tune.c — the online tuner (Harmony's profiler and tuner, inside the
 * run). After the first steps it corrects the figures the plan was made with:
 * the host links by a probe copy each way (the step's own transfer intervals
 * are no measure: a copy waits in stream order for its space before it
 * moves), and the devices' speed by fitting: the factor on the profile's
 * compute figures (on the host backend the CPU's too: the devices are this
 * machine's CPU) at which the executor's twin (virtual time,
 * rt_plan_simulate) takes the current plan's step as long as the last step
 * measured. With the corrected profile it re-runs auto's search (the twin
 * simulates its finalists) and, when another plan is predicted at least 5%
 * faster than the current one, moves the training state over
 * (rt_run_read_state / write_state) and goes on with it, logging why. Only
 * for schedule auto: a named schedule is the user's choice.
 */
#include "train/internal.h"

#include "common/log.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The profile text with key's value replaced (a rate in B/s or FLOP/s). */
static void set_key(char *text, size_t n, const char *key, double v, const char *unit)
{
	char out[2048] = "", line[256];
	const char *s = text;
	size_t klen = strlen(key);
	while (*s) {
		size_t l = strcspn(s, "\n");
		snprintf(line, sizeof(line), "%.*s",
		         (int)(l < sizeof(line) - 1 ? l : sizeof(line) - 1), s);
		if (!strncmp(line, key, klen) && (line[klen] == ' ' || line[klen] == '='))
			snprintf(line, sizeof(line), "%s = %.6g %s", key, v, unit);
		snprintf(out + strlen(out), sizeof(out) - strlen(out), "%s\n", line);
		s += l + (s[l] == '\n');
	}
	snprintf(text, n, "%s", out);
}

static double profile_value(const char *text, const char *key)
{
	const char *p = strstr(text, key);
	return p ? strtod(strchr(p, '=') + 1, NULL) : 0;
}

/* base with the devices' compute (and on the host backend the CPU's) times
 * speed and every link bandwidth times links, into text; the current plan's
 * simulated step on it. */
static int scaled_sim(struct run *r, const char *base, int host, double speed, double links,
                      char *text, size_t n, double *step_s)
{
	static const char *const keys[] = {"flops", "mem_bw", "cpu_flops", "cpu_mem_bw",
	                                   "h2d",   "d2h",    "host_link", "p2p"};
	static const char *const units[] = {"FLOP/s", "B/s", "FLOP/s", "B/s",
	                                    "B/s",    "B/s", "B/s",    "B/s"};
	snprintf(text, n, "%s", base);
	for (int k = 0; k < 8; k++) {
		if (k >= 2 && k < 4 && !host)
			continue;
		char key[32];
		snprintf(key, sizeof(key), "\n%s", keys[k]);
		double v = profile_value(base, key);
		if (v > 0)
			set_key(text, n, keys[k], v * (k < 4 ? speed : links), units[k]);
	}
	return rt_plan_simulate(r->rt, &r->m, &r->plan, text, step_s);
}

/* Bisection (in log space) for the factor on the compute speed (links 0: fit
 * the speed, the links at factor `links`) or on the links (links 0: at speed
 * `speed`) at which the twin's step takes target seconds; the simulated step
 * falls as either factor grows. */
static int fit(struct run *r, const char *base, int host, double speed, double links, double target,
               double *out, char *text, size_t n)
{
	double lo = 1e-5, hi = 1e3;
	for (int it = 0; it < 24; it++) {
		double mid = sqrt(lo * hi), s;
		SP_CHECK(links > 0 ? scaled_sim(r, base, host, mid, links, text, n, &s)
		                   : scaled_sim(r, base, host, speed, mid, text, n, &s));
		if (s > target)
			lo = mid;
		else
			hi = mid;
	}
	*out = sqrt(lo * hi);
	return 0;
}

/* The host links as they are: one copy each way between pinned host memory
 * and device 0 (8 MiB, or what device memory the vmm left, at least 1 MiB),
 * timed on the backend's clock. 0 where no memory is left for it. */
static void probe_links(struct run *r, double *h2d, double *d2h)
{
	struct dev_ctx *dev = r->rt->dev;
	struct dev_info in;
	*h2d = *d2h = 0;
	if (dev_info(dev, 0, &in) < 0)
		return;
	size_t n = 8u << 20, room = in.capacity > in.used ? (size_t)(in.capacity - in.used) / 2 : 0;
	if (n > room)
		n = room;
	void *h = NULL, *d = NULL;
	if (n < (1u << 20) || dev_host_alloc(dev, n, &h) < 0 || dev_mem_alloc(dev, 0, n, &d) < 0) {
		if (h && dev_host_free(dev, h) < 0)
			sp_error_clear();
		sp_error_clear();
		return;
	}
	struct dev_stream *s = r->rt->compute[0];
	for (int dir = 0; dir < 2; dir++) {
		if (dev_stream_sync(s) < 0)
			break;
		double t0 = dev_now(dev);
		int rc = dir ? dev_memcpy_async(s, h, DEV_HOST, d, 0, n)
		             : dev_memcpy_async(s, d, 0, h, DEV_HOST, n);
		if (rc < 0 || dev_stream_sync(s) < 0)
			break;
		double t = dev_now(dev) - t0;
		*(dir ? d2h : h2d) = t > 0 ? (double)n / t : 0;
	}
	if (dev_mem_free(dev, 0, d) < 0 || dev_host_free(dev, h) < 0)
		sp_error_clear();
}

/* Moves the training state of r->run into next and makes it the run's. */
static int switch_to(struct run *r, const struct tg_plan *plan)
{
	struct rt_run *next;
	int step = r->run->step;
	/* the timing arrays belong to the program: open_run re-attaches them */
	double *ts = r->t_start, *te = r->t_end;
	SP_CHECK(rt_run_open(r->rt, &r->m, plan, r->c.seed, &next));
	int rc = 0;
	for (int l = 0; l < r->m.nlayers && !rc; l++)
		for (int w = 0; w < 2 && !rc; w++) {
			enum rt_state which = w ? RT_OPTIM : RT_PARAMS;
			void *buf = malloc(rt_run_state_bytes(r->run, l, which) + 4);
			rc = buf ? rt_run_read_state(r->run, l, which, buf)
			         : sp_error(-ENOMEM, "tuner: out of memory");
			if (!rc)
				rc = rt_run_write_state(next, l, which, buf);
			free(buf);
		}
	if (rc < 0) {
		rt_run_close(next);
		return rc;
	}
	rt_run_set_step(next, step);
	rt_run_close(r->run);
	r->run = next;
	r->t_start = calloc((size_t)next->prog.ntask, sizeof(double));
	r->t_end = calloc((size_t)next->prog.ntask, sizeof(double));
	free(ts);
	free(te);
	if (!r->t_start || !r->t_end)
		return sp_error(-ENOMEM, "tuner: timing arrays");
	next->prog.t_start = r->t_start;
	next->prog.t_end = r->t_end;
	r->plan = *plan;
	rt_plan_describe(plan, r->plan_name, sizeof(r->plan_name));
	return 0;
}

int tr_tune(struct run *r)
{
	if (r->c.schedule && strcmp(r->c.schedule, "auto")) {
		snprintf(r->tune_log, sizeof(r->tune_log), "off (schedule %s was asked for)",
		         r->c.schedule);
		return 0;
	}
	if (!r->rt->cfg.plan_trials) {
		snprintf(r->tune_log, sizeof(r->tune_log), "off (SPILL_PLAN_TRIALS=0)");
		return 0;
	}
	/* what the last step measured */
	int last = (r->nrecent - 1) % 8;
	double step_s = r->recent[last];
	/* the figures the plan was made with */
	char base[2048], text[2048];
	if (r->c.plan_profile)
		SP_CHECK(rt_profile_text(r->c.plan_profile, base, sizeof(base)));
	else
		SP_CHECK(dev_profile_text(r->rt->dev, base, sizeof(base)));
	double a_h2d = profile_value(base, "\nh2d");
	/* the devices' speed: the factor at which the twin, on the measured links,
	 * takes the step as long as it took */
	int host = dev_backend(r->rt->dev) == DEV_BACKEND_HOST;
	double f = 1, scale = 1, cur = 0;
	/* the links, measured by a probe copy each way (the step's own transfers
	 * tell little where it hardly waits for them); scale the profile's link
	 * figures by the slower direction's ratio */
	double ph2d, pd2h;
	probe_links(r, &ph2d, &pd2h);
	double a_d2h = profile_value(base, "\nd2h");
	if (ph2d > 0 && pd2h > 0 && a_h2d > 0 && a_d2h > 0) {
		scale = ph2d / a_h2d < pd2h / a_d2h ? ph2d / a_h2d : pd2h / a_d2h;
		scale = scale > 1 ? 1 : scale; /* a lone copy beats the shared link */
	}
	int rc = fit(r, base, host, 1, scale, step_s, &f, text, sizeof(text));
	int unfit = f > 999 || f < 2e-5; /* the twin cannot take that long, or that short */
	if (unfit)
		f = 1;
	if (rc == 0)
		rc = scaled_sim(r, base, host, f, scale, text, sizeof(text), &cur);
	double best = 0;
	struct tg_plan cand;
	if (rc == 0)
		rc = tr_choose_plan(r, &cand, text);
	if (rc == 0)
		rc = rt_plan_simulate(r->rt, &r->m, &cand, text, &best);
	if (rc < 0) {
		snprintf(r->tune_log, sizeof(r->tune_log), "could not re-plan: %s",
		         sp_last_error());
		sp_error_clear();
		return 0;
	}
	char cd[160];
	rt_plan_describe(&cand, cd, sizeof(cd));
	int same = !strcmp(cd, r->plan_name);
	int go = !same && best < 0.95 * cur;
	snprintf(r->tune_log, sizeof(r->tune_log),
	         "a step took %.4f s: the links measure %.3gx the profile's (H2D %.2f GB/s), the "
	         "devices compute at %.3gx its speed%s; so the current plan takes %.4f s/step, %s "
	         "%.4f s/step: %s",
	         step_s, scale, a_h2d * scale / 1e9, f,
	         unfit ? " (no speed makes the twin match the step: the profile's kept)" : "", cur,
	         same ? "the best" : cd, best,
	         go     ? "switched"
	         : same ? "kept"
	                : "kept (less than 5% faster)");
	fprintf(r->out, "%stuner: %s\n", r->c.tty ? "\n" : "", r->tune_log);
	if (go) {
		SP_CHECK(switch_to(r, &cand));
		r->res.switches++;
		r->switch_step = r->run->step;
		fprintf(r->out, "plan: %s\n", r->plan_name);
	}
	return 0;
}

/* train/tune.c — the online tuner (Harmony's profiler and tuner, inside the
 * run). After the first steps it corrects the figures the plan was made with:
 * the links by probe copies (host to device 0 and back, device 0 to 1; the
 * profile's host and P2P figures each scaled by their own ratio; the step's
 * own transfer intervals are no measure: a copy waits in stream order for
 * its space before it moves), and the devices' speed by fitting: the factor on the profile's
 * compute figures (on the host backend the CPU's too: the devices are this
 * machine's CPU) at which the executor's twin (virtual time,
 * rt_plan_simulate) takes the current plan's step as long as the last step
 * measured. With the corrected profile it re-runs auto's search (the twin
 * simulates its finalists) and, when another plan is predicted at least 5%
 * faster than the current one, moves the training state over
 * (rt_run_read_state / write_state) and goes on with it, logging why. As
 * many steps later it compares the new plan's measured steps with the old
 * plan's and switches back when they are slower: the twin is a model. Only
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

/* The factors the measurements put on the profile's figures. */
struct scale {
	double speed; /* compute (on the host backend the CPU's too) */
	double host;  /* h2d, d2h, host_link */
	double p2p;   /* device to device */
};

/* base with each figure times its factor, into text; the current plan's
 * simulated step on it. */
static int scaled_sim(struct run *r, const char *base, int host, const struct scale *f, char *text,
                      size_t n, double *step_s)
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
			set_key(text, n, keys[k],
			        v * (k < 4   ? f->speed
			             : k < 7 ? f->host
			                     : f->p2p),
			        units[k]);
	}
	return rt_plan_simulate(r->rt, &r->m, &r->plan, text, step_s);
}

/* Bisection (in log space) for the factor on the compute speed at which the
 * twin's step, on the links f gives, takes target seconds; the simulated step
 * falls as the speed grows. */
static int fit_speed(struct run *r, const char *base, int host, struct scale f, double target,
                     double *out, char *text, size_t n)
{
	double lo = 1e-5, hi = 1e3;
	for (int it = 0; it < 24; it++) {
		double s;
		f.speed = sqrt(lo * hi);
		SP_CHECK(scaled_sim(r, base, host, &f, text, n, &s));
		if (s > target)
			lo = f.speed;
		else
			hi = f.speed;
	}
	*out = sqrt(lo * hi);
	return 0;
}

/* One timed copy of n bytes on stream s, after a first untimed one that
 * touches the pages; bytes per second on the backend's clock, 0 on failure. */
static double timed_copy(struct dev_ctx *dev, struct dev_stream *s, void *dst, int dst_dev,
                         const void *src, int src_dev, size_t n)
{
	double rate = 0;
	for (int k = 0; k < 2; k++) {
		if (dev_stream_sync(s) < 0)
			break;
		double t0 = dev_now(dev);
		if (dev_memcpy_async(s, dst, dst_dev, src, src_dev, n) < 0 ||
		    dev_stream_sync(s) < 0)
			break;
		double t = dev_now(dev) - t0;
		rate = t > 0 ? (double)n / t : 0;
	}
	if (!rate)
		sp_error_clear();
	return rate;
}

/* The links as they are: a copy each way between pinned host memory and
 * device 0, and one from device 0 to device 1 (8 MiB, or half of what device
 * memory the vmm left, at least 1 MiB), timed on the backend's clock. 0 for
 * a link not measured. */
static void probe_links(struct run *r, double *h2d, double *d2h, double *p2p)
{
	struct dev_ctx *dev = r->rt->dev;
	*h2d = *d2h = *p2p = 0;
	size_t n = 8u << 20;
	int ndev = r->rt->ndev > 1 ? 2 : 1;
	for (int d = 0; d < ndev; d++) {
		struct dev_info in;
		if (dev_info(dev, d, &in) < 0) {
			sp_error_clear();
			return;
		}
		size_t room = in.capacity > in.used ? (size_t)(in.capacity - in.used) / 2 : 0;
		if (n > room)
			n = room;
	}
	if (n < (1u << 20))
		return;
	void *h = NULL, *d[2] = {NULL, NULL};
	int ok = dev_host_alloc(dev, n, &h) == 0;
	for (int k = 0; k < ndev && ok; k++)
		ok = dev_mem_alloc(dev, k, n, &d[k]) == 0;
	struct dev_stream *s = r->rt->compute[0];
	if (ok) {
		*h2d = timed_copy(dev, s, d[0], 0, h, DEV_HOST, n);
		*d2h = timed_copy(dev, s, h, DEV_HOST, d[0], 0, n);
		if (ndev > 1)
			*p2p = timed_copy(dev, s, d[1], 1, d[0], 0, n);
	}
	for (int k = 0; k < ndev; k++)
		if (d[k] && dev_mem_free(dev, k, d[k]) < 0)
			sp_error_clear();
	if (h && dev_host_free(dev, h) < 0)
		sp_error_clear();
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

/* The mean time of the steps from `first` (an absolute step index) to the
 * last one done, leaving out the first of them where there are several: it
 * pays for the first touches of the plan's memory. */
static double mean_steps(const struct run *r, int first)
{
	int last = r->run->step - 1;
	if (last > first)
		first++;
	double sum = 0;
	for (int s = first; s <= last; s++)
		sum += r->times[s];
	return last >= first ? sum / (last - first + 1) : 0;
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
	double step_s = mean_steps(r, r->start);
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
	struct scale f = {1, 1, 1};
	double cur = 0;
	/* the links, measured by probe copies (the step's own transfers tell
	 * little where it hardly waits for them); each kind of link scaled by its
	 * own ratio, the host links by the slower direction's; a lone copy beats
	 * a shared link, so never above the profile */
	double ph2d, pd2h, pp2p;
	probe_links(r, &ph2d, &pd2h, &pp2p);
	double a_d2h = profile_value(base, "\nd2h"), a_p2p = profile_value(base, "\np2p");
	if (ph2d > 0 && pd2h > 0 && a_h2d > 0 && a_d2h > 0) {
		f.host = ph2d / a_h2d < pd2h / a_d2h ? ph2d / a_h2d : pd2h / a_d2h;
		f.host = f.host > 1 ? 1 : f.host;
	}
	if (pp2p > 0 && a_p2p > 0)
		f.p2p = pp2p / a_p2p > 1 ? 1 : pp2p / a_p2p;
	double speed;
	int rc = fit_speed(r, base, host, f, step_s, &speed, text, sizeof(text));
	int unfit = speed > 999 || speed < 2e-5; /* the twin cannot take that long, or that short */
	f.speed = unfit ? 1 : speed;
	if (rc == 0)
		rc = scaled_sim(r, base, host, &f, text, sizeof(text), &cur);
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
	         "a step took %.4f s: the host links measure %.3gx the profile's (H2D %.2f GB/s), "
	         "P2P %.3gx, the devices compute at %.3gx its speed%s; so the current plan takes "
	         "%.4f s/step, %s %.4f s/step: %s",
	         step_s, f.host, a_h2d * f.host / 1e9, f.p2p, f.speed,
	         unfit ? " (no speed makes the twin match the step: the profile's kept)" : "", cur,
	         same ? "the best" : cd, best,
	         go     ? "switched"
	         : same ? "kept"
	                : "kept (less than 5% faster)");
	fprintf(r->out, "%stuner: %s\n", r->c.tty ? "\n" : "", r->tune_log);
	if (go) {
		r->prev_plan = r->plan;
		r->before_s = step_s;
		SP_CHECK(switch_to(r, &cand));
		r->res.switches++;
		r->switch_step = r->run->step;
		fprintf(r->out, "plan: %s\n", r->plan_name);
	}
	return 0;
}

/* The twin is a model: where it misjudged (on the host backend the emulated
 * devices and their copies share the CPU's cores, which the twin does not
 * know), the measurement wins. */
int tr_tune_verify(struct run *r)
{
	r->verified = 1;
	double after = mean_steps(r, r->switch_step);
	int back = after > r->before_s;
	char line[200];
	snprintf(line, sizeof(line),
	         "after the switch a step took %.4f s against %.4f s before: %s", after,
	         r->before_s, back ? "switched back" : "kept");
	fprintf(r->out, "%stuner: %s\n", r->c.tty ? "\n" : "", line);
	size_t n = strlen(r->tune_log);
	snprintf(r->tune_log + n, sizeof(r->tune_log) - n, "; %s", line);
	if (back) {
		struct tg_plan prev = r->prev_plan;
		SP_CHECK(switch_to(r, &prev));
		r->res.switches++;
		r->switch_step = 0; /* the plan the run ends with is the first one */
		fprintf(r->out, "plan: %s\n", r->plan_name);
	}
	return 0;
}

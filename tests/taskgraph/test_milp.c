/* tests/taskgraph/test_milp.c — tg_mm_milp() against exact oracles: closed forms
 * (longest chain, total work on one device, 3 unit jobs on 2 devices, a fast
 * device) and a brute force over every device assignment and every interleaving
 * of the models' chains (each a topological order, scheduled as early as chains
 * and devices allow: every left-shifted schedule arises so, hence the minimum is
 * the optimum) on fixed and 100 random shapes, zero-length units and device
 * speeds included. Bad input gives -EINVAL naming the field, 65 units -E2BIG;
 * a tiny time limit gives a schedule or -ETIMEDOUT, nothing else. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "taskgraph/taskgraph.h"
#include "tests/test.h"

#define TLIM 4.0 /* seconds per solve; each instance here takes under 0.01 */

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Solves and checks optimality against want (within 1e-6 relative). */
static void expect_opt(const char *name, const struct tg_mm *in, double want)
{
	double mk = -1, b = -1;
	int opt = -1;
	double t0 = now_s();
	CHECK_OK(tg_mm_milp(in, TLIM, &mk, &b, &opt));
	double dt = now_s() - t0;
	printf("%-34s makespan %.6f bound %.6f optimal %d want %.6f (%.3f s)\n", name, mk, b, opt,
	       want, dt);
	CHECK_MSG(opt == 1, "%s: not proved optimal", name);
	CHECK_MSG(fabs(mk - want) <= 1e-6 * (1 + want), "%s: makespan %.9f, want %.9f", name, mk,
	          want);
	CHECK_MSG(b <= mk + 1e-9 && fabs(b - mk) <= 1e-6 * (1 + want), "%s: bound %.9f", name, b);
}

/* ---- brute force ---------------------------------------------------------------------- */

#define BF_MAXU 12

struct bf {
	const struct tg_mm *in;
	int nu, model[BF_MAXU], idx[BF_MAXU]; /* unit -> model, index in it */
	int seq[BF_MAXU], done[BF_MAXU];      /* the order being built, units placed per model */
	double best;
};

static double speed_of(const struct tg_mm *in, int d)
{
	return in->speed ? in->speed[d] : 1.0;
}

/* Every device assignment of the units in seq order, each unit as early as its
 * predecessor in the model and the previous unit on its device allow. */
static void bf_assign(struct bf *s)
{
	const struct tg_mm *in = s->in;
	long combos = 1;
	for (int i = 0; i < s->nu; i++)
		combos *= in->ndev;
	for (long c = 0; c < combos; c++) {
		double free_at[8] = {0}, ready[8] = {0}, end = 0;
		long code = c;
		for (int i = 0; i < s->nu; i++) {
			int d = (int)(code % in->ndev);
			code /= in->ndev;
			int m = s->model[s->seq[i]], j = s->idx[s->seq[i]];
			double st = free_at[d] > ready[m] ? free_at[d] : ready[m];
			double f = st + in->dur[m][j] / speed_of(in, d);
			free_at[d] = ready[m] = f;
			if (f > end)
				end = f;
		}
		if (end < s->best)
			s->best = end;
	}
}

/* Every interleaving of the chains (topological orders). */
static void bf_order(struct bf *s, int pos)
{
	if (pos == s->nu) {
		bf_assign(s);
		return;
	}
	for (int m = 0; m < s->in->nmodels; m++) {
		if (s->done[m] == s->in->nunits[m])
			continue;
		int u = 0;
		for (int k = 0; k < m; k++)
			u += s->in->nunits[k];
		s->seq[pos] = u + s->done[m]++;
		bf_order(s, pos + 1);
		s->done[m]--;
	}
}

static double brute_force(const struct tg_mm *in)
{
	struct bf s = {.in = in, .best = INFINITY};
	for (int m = 0; m < in->nmodels; m++)
		for (int j = 0; j < in->nunits[m]; j++, s.nu++) {
			s.model[s.nu] = m;
			s.idx[s.nu] = j;
		}
	CHECK(s.nu <= BF_MAXU && in->ndev <= 8 && in->nmodels <= 8);
	bf_order(&s, 0);
	return s.best;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double urand(void) /* (0, 1], xorshift64 */
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (double)((rng >> 11) + 1) / 9007199254740992.0;
}

#define EXPECT_ERR(call, code, substr)                                                        \
	do {                                                                                  \
		int rc_ = (call);                                                             \
		CHECK_MSG(rc_ == (code), "%s returned %d (%s)", #call, rc_, sp_last_error()); \
		CHECK_MSG(strstr(sp_last_error(), substr), "message '%s' lacks '%s'",         \
		          sp_last_error(), substr);                                           \
		printf("%-40.40s -> %s\n", #call, sp_last_error());                           \
	} while (0)

int main(void)
{
	double mk, b;
	int opt;
#if !SPILL_HAVE_GLPK
	{
		const double d0[] = {1};
		const double *dd[] = {d0};
		const int nu[] = {1};
		struct tg_mm in = {.nmodels = 1, .nunits = nu, .dur = dd, .ndev = 1};
		CHECK(tg_mm_milp(&in, 1, &mk, &b, &opt) == -ENOTSUP);
		TEST_SKIP("built without GLPK: tg_mm_milp returns -ENOTSUP (%s)", sp_last_error());
	}
#endif
	/* (1) 2 models x 2 units, 2 identical devices: each model on its own device */
	{
		const double d0[] = {3, 2}, d1[] = {1, 1.5};
		const double *dd[] = {d0, d1};
		const int nu[] = {2, 2};
		struct tg_mm in = {.nmodels = 2, .nunits = nu, .dur = dd, .ndev = 2};
		expect_opt("2x2 units, 2 devices: chain", &in, 5);
	}
	/* (2) 3 unit-time single-unit models on 2 devices: 2 */
	{
		const double d[] = {1};
		const double *dd[] = {d, d, d};
		const int nu[] = {1, 1, 1};
		struct tg_mm in = {.nmodels = 3, .nunits = nu, .dur = dd, .ndev = 2};
		expect_opt("3x1 unit jobs, 2 devices", &in, 2);
	}
	/* (3) one device: the total work (at its speed) */
	{
		const double d0[] = {1, 2, 0.5}, d1[] = {0.25, 3}, d2[] = {2};
		const double *dd[] = {d0, d1, d2};
		const int nu[] = {3, 2, 1};
		const double sp[] = {2};
		struct tg_mm in = {.nmodels = 3, .nunits = nu, .dur = dd, .ndev = 1};
		expect_opt("one device: total work", &in, 8.75);
		in.speed = sp;
		expect_opt("one device of speed 2", &in, 8.75 / 2);
	}
	/* (4) speeds: one 4 s unit, devices of speed 1 and 2 */
	{
		const double d[] = {4};
		const double *dd[] = {d};
		const int nu[] = {1};
		const double sp[] = {1, 2};
		struct tg_mm in = {.nmodels = 1, .nunits = nu, .dur = dd, .ndev = 2, .speed = sp};
		expect_opt("one unit, speeds 1 and 2", &in, 2);
		/* two such models: 4/2 + ... best is one on each: max(4, 2) = 4, or both
		 * on the fast one: 2 + 2 = 4 */
		const double *dd2[] = {d, d};
		const int nu2[] = {1, 1};
		struct tg_mm in2 = {
		    .nmodels = 2, .nunits = nu2, .dur = dd2, .ndev = 2, .speed = sp};
		expect_opt("two 4 s units, speeds 1 and 2", &in2, 4);
	}
	/* many devices: only the fastest few can matter */
	{
		const double d1[] = {1}, d2[] = {2}, d3[] = {3};
		const double *dd[] = {d1, d2, d3};
		const int nu[] = {1, 1, 1};
		double sp[50];
		for (int d = 0; d < 50; d++)
			sp[d] = d + 1;
		struct tg_mm in = {.nmodels = 3, .nunits = nu, .dur = dd, .ndev = 50};
		expect_opt("3 units, 50 identical devices", &in, 3);
		in.speed = sp;
		expect_opt("3 units, speeds 1..50", &in, 3.0 / 50);
	}
	/* (5) brute force on random instances */
	{
		struct {
			int nm, nu_each, ndev, speeds;
		} cases[] = {{3, 2, 2, 0}, {3, 2, 2, 1}, {2, 3, 3, 1}, {3, 3, 2, 0}, {4, 2, 2, 1},
		             {2, 4, 2, 0}, {3, 2, 3, 0}, {3, 3, 2, 1}, {4, 2, 3, 1}, {3, 2, 2, 2}};
		int above_lb = 0;
		for (size_t c = 0; c < SP_ARRAY_SIZE(cases); c++) {
			double dur[4][4], sp[3];
			const double *dd[4];
			int nu[4];
			for (int m = 0; m < cases[c].nm; m++) {
				nu[m] = cases[c].nu_each;
				for (int j = 0; j < nu[m]; j++) /* quarters, so ties happen */
					dur[m][j] = ceil(urand() * 16) / 4;
				if (cases[c].speeds == 2) /* zero-length units */
					dur[m][m % nu[m]] = 0;
				dd[m] = dur[m];
			}
			for (int d = 0; d < cases[c].ndev; d++)
				sp[d] = cases[c].speeds == 1 ? 0.5 + floor(urand() * 4) / 2 : 1;
			struct tg_mm in = {.nmodels = cases[c].nm,
			                   .nunits = nu,
			                   .dur = dd,
			                   .ndev = cases[c].ndev,
			                   .speed = sp};
			double want = brute_force(&in);
			char name[64];
			snprintf(name, sizeof(name), "brute %dx%d on %d dev%s", cases[c].nm,
			         cases[c].nu_each, cases[c].ndev,
			         cases[c].speeds == 1   ? " (speeds)"
			         : cases[c].speeds == 2 ? " (zeros)"
			                                : "");
			expect_opt(name, &in, want);
			/* the simple bound max(chain / fastest, work / total speed) */
			double chain = 0, work = 0, smax = 0, ssum = 0;
			for (int m = 0; m < in.nmodels; m++) {
				double w = 0;
				for (int j = 0; j < nu[m]; j++)
					w += dur[m][j];
				chain = w > chain ? w : chain;
				work += w;
			}
			for (int d = 0; d < in.ndev; d++) {
				smax = sp[d] > smax ? sp[d] : smax;
				ssum += sp[d];
			}
			double lb = fmax(chain / smax, work / ssum);
			above_lb += want > lb + 1e-9;
		}
		/* the oracle is not just the simple bound */
		printf("%d of %zu brute-force optima above the simple bound\n", above_lb,
		       SP_ARRAY_SIZE(cases));
		CHECK(above_lb >= 3);
	}
	/* (5b) 100 random shapes: up to 4 models, 7 units, 3 devices of speeds in
	 * {0.5, 1, 1.5, 2}, some zero-length units */
	{
		int n = 0;
		for (int it = 0; it < 100; it++) {
			double dur[4][3], sp[3];
			const double *dd[4];
			int nu[4], nm = 1 + (int)(urand() * 3.999), tot = 0;
			for (int m = 0; m < nm; m++) {
				nu[m] = 1 + (int)(urand() * 2.999);
				if (tot + nu[m] > 7)
					nu[m] = 7 - tot > 0 ? 7 - tot : 1;
				tot += nu[m];
				for (int j = 0; j < nu[m]; j++)
					dur[m][j] = urand() < 0.15 ? 0 : ceil(urand() * 12) / 4;
				dd[m] = dur[m];
			}
			int nd = 1 + (int)(urand() * 2.999);
			for (int d = 0; d < nd; d++)
				sp[d] = urand() < 0.5 ? 1 : 0.5 * ceil(urand() * 4);
			struct tg_mm in = {
			    .nmodels = nm, .nunits = nu, .dur = dd, .ndev = nd, .speed = sp};
			double want = brute_force(&in);
			CHECK_OK(tg_mm_milp(&in, TLIM, &mk, &b, &opt));
			CHECK_MSG(opt == 1, "random %d: not proved optimal", it);
			CHECK_MSG(fabs(mk - want) <= 1e-6 * (1 + want) && b <= mk,
			          "random %d (%d models, %d devices): makespan %.9f bound %.9f, "
			          "want %.9f",
			          it, nm, nd, mk, b, want);
			n++;
		}
		printf("%d random instances match the brute force\n", n);
	}
	/* (6) bad input */
	{
		double d0[] = {1, 2};
		const double *dd[] = {d0};
		int nu[] = {2};
		double sp[] = {1, 0};
		struct tg_mm in = {.nmodels = 1, .nunits = nu, .dur = dd, .ndev = 2};
		EXPECT_ERR(tg_mm_milp(NULL, 1, &mk, &b, &opt), -EINVAL, "NULL");
		EXPECT_ERR(tg_mm_milp(&in, 1, NULL, &b, &opt), -EINVAL, "makespan");
		in.nmodels = 0;
		EXPECT_ERR(tg_mm_milp(&in, 1, &mk, &b, &opt), -EINVAL, "nmodels = 0");
		in.nmodels = 1;
		in.ndev = 0;
		EXPECT_ERR(tg_mm_milp(&in, 1, &mk, &b, &opt), -EINVAL, "ndev = 0");
		in.ndev = 2;
		nu[0] = 0;
		EXPECT_ERR(tg_mm_milp(&in, 1, &mk, &b, &opt), -EINVAL, "nunits[0] = 0");
		nu[0] = 2;
		d0[1] = -1;
		EXPECT_ERR(tg_mm_milp(&in, 1, &mk, &b, &opt), -EINVAL, "dur[0][1] = -1");
		d0[1] = NAN;
		EXPECT_ERR(tg_mm_milp(&in, 1, &mk, &b, &opt), -EINVAL, "dur[0][1]");
		d0[1] = 2;
		in.speed = sp;
		EXPECT_ERR(tg_mm_milp(&in, 1, &mk, &b, &opt), -EINVAL, "speed[1] = 0");
		in.speed = NULL;
		EXPECT_ERR(tg_mm_milp(&in, 0, &mk, &b, &opt), -EINVAL, "time_limit_s");
		static double big[65];
		const double *bd[] = {big};
		int bn[] = {65};
		struct tg_mm in2 = {.nmodels = 1, .nunits = bn, .dur = bd, .ndev = 2};
		EXPECT_ERR(tg_mm_milp(&in2, 1, &mk, &b, &opt), -E2BIG, "65 units");
	}
	/* a hard instance with a tiny limit: a schedule no worse than its bound, or
	 * -ETIMEDOUT; never anything else */
	{
		double dur[8][8];
		const double *dd[8];
		int nu[8];
		for (int m = 0; m < 8; m++) {
			nu[m] = 8;
			for (int j = 0; j < 8; j++)
				dur[m][j] = 0.5 + urand();
			dd[m] = dur[m];
		}
		struct tg_mm in = {.nmodels = 8, .nunits = nu, .dur = dd, .ndev = 3};
		int rc = tg_mm_milp(&in, 0.01, &mk, &b, &opt);
		printf("8x8 on 3 devices, 10 ms: rc %d (%s)\n", rc,
		       rc ? sp_last_error() : "a schedule");
		CHECK_MSG(rc == 0 || rc == -ETIMEDOUT, "rc %d", rc);
		if (rc == 0)
			CHECK(b <= mk && b > 0);
	}
	TEST_PASS();
}

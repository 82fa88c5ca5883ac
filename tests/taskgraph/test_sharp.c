/* tests/taskgraph/test_sharp.c — SHARP's unit selection and its simulator.
 *  - the policies: lrtf takes the longest remaining time (ties: lower index),
 *    fifo the model eligible longest, random every model, seeded;
 *  - exact makespans: one device (the total), models <= devices (the longest
 *    model), a hand-computed schedule, speeds, late joins;
 *  - Hydra's Fig. 6 settings (homogeneous: equal models; heterogeneous:
 *    per-epoch times 0.5-4 h, 100-10,000 units): lrtf's makespan <= random's
 *    on average, and within a few percent of the lower bound;
 *  - dynamics: early stopping, a device failing mid-unit (the unit reruns,
 *    every unit still completes), every device failing (-EDEADLK);
 *  - scale: 10 million units scheduled in under 10 s (release builds). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/error.h"
#include "taskgraph/taskgraph.h"
#include "tests/test.h"

static uint64_t rs = 0x2545f4914f6cdd1dull;
static double urand(void) /* [0, 1) */
{
	rs ^= rs << 13;
	rs ^= rs >> 7;
	rs ^= rs << 17;
	return (double)(rs >> 11) / 9007199254740992.0;
}

struct inst {
	struct tg_mm mm;
	int *n;
	double **dur;
};

static void inst_alloc(struct inst *I, int nmodels, int ndev)
{
	memset(I, 0, sizeof(*I));
	I->n = calloc((size_t)nmodels, sizeof(int));
	I->dur = calloc((size_t)nmodels, sizeof(double *));
	CHECK(I->n && I->dur);
	I->mm = (struct tg_mm){
	    .nmodels = nmodels, .nunits = I->n, .dur = (const double *const *)I->dur, .ndev = ndev};
}

static void inst_model(struct inst *I, int m, int units, double epoch_s, int epochs, double jitter)
{
	I->n[m] = units * epochs;
	I->dur[m] = malloc((size_t)I->n[m] * sizeof(double));
	CHECK(I->dur[m]);
	for (int j = 0; j < I->n[m]; j++)
		I->dur[m][j] = epoch_s / units * (1 + jitter * (urand() - 0.5));
}

static void inst_free(struct inst *I)
{
	for (int m = 0; m < I->mm.nmodels; m++)
		free(I->dur[m]);
	free(I->dur);
	free(I->n);
}

static double run(const struct inst *I, enum tg_mm_policy p, uint64_t seed)
{
	struct tg_mm_result r;
	CHECK_OK(tg_mm_simulate(&I->mm, p, seed, &r));
	uint64_t total = 0;
	for (int m = 0; m < I->mm.nmodels; m++)
		total += (uint64_t)I->n[m];
	if (!I->mm.stop && !I->mm.fail)
		CHECK_MSG(r.units == total, "%llu of %llu units", (unsigned long long)r.units,
		          (unsigned long long)total);
	return r.makespan;
}

static void test_policies(void)
{
	struct tg_sharp *s;
	CHECK(tg_sharp_open(0, TG_MM_LRTF, 1, &s) == -EINVAL);
	CHECK_OK(tg_sharp_open(5, TG_MM_LRTF, 1, &s));
	CHECK(tg_sharp_pick(s) == -1);
	tg_sharp_ready(s, 0, 3);
	tg_sharp_ready(s, 1, 7);
	tg_sharp_ready(s, 2, 7);
	tg_sharp_ready(s, 3, 1);
	tg_sharp_ready(s, 3, 9); /* again: the new key */
	tg_sharp_remove(s, 2);
	CHECK(tg_sharp_eligible(s) == 3);
	CHECK(tg_sharp_pick(s) == 3);
	CHECK(tg_sharp_pick(s) == 1);
	tg_sharp_ready(s, 4, 7);
	tg_sharp_ready(s, 2, 7);
	CHECK(tg_sharp_pick(s) == 2); /* tie: the lower index */
	CHECK(tg_sharp_pick(s) == 4);
	CHECK(tg_sharp_pick(s) == 0);
	CHECK(tg_sharp_pick(s) == -1);
	tg_sharp_close(s);

	CHECK_OK(tg_sharp_open(4, TG_MM_FIFO, 1, &s));
	tg_sharp_ready(s, 2, 1);
	tg_sharp_ready(s, 0, 100);
	tg_sharp_ready(s, 3, 50);
	tg_sharp_ready(s, 2, 999); /* already eligible: keeps its place */
	CHECK(tg_sharp_pick(s) == 2);
	tg_sharp_ready(s, 2, 1);
	CHECK(tg_sharp_pick(s) == 0);
	CHECK(tg_sharp_pick(s) == 3);
	CHECK(tg_sharp_pick(s) == 2);
	tg_sharp_close(s);

	int hist[6] = {0};
	CHECK_OK(tg_sharp_open(6, TG_MM_RANDOM, 42, &s));
	for (int it = 0; it < 600; it++) {
		for (int m = 0; m < 6; m++)
			tg_sharp_ready(s, m, m);
		int m = tg_sharp_pick(s);
		CHECK(m >= 0 && m < 6);
		hist[m]++;
		for (int k = 0; k < 5; k++)
			CHECK(tg_sharp_pick(s) >= 0);
		CHECK(tg_sharp_pick(s) == -1);
	}
	for (int m = 0; m < 6; m++)
		CHECK_MSG(hist[m] > 50, "model %d picked first %d times of 600", m, hist[m]);
	tg_sharp_close(s);

	enum tg_mm_policy p;
	CHECK_OK(tg_mm_policy_parse("random", &p));
	CHECK(p == TG_MM_RANDOM);
	CHECK(tg_mm_policy_parse("lrtff", &p) == -EINVAL);
}

static void test_exact(void)
{
	struct inst I;
	/* one device: the total work */
	inst_alloc(&I, 3, 1);
	inst_model(&I, 0, 5, 10, 1, 0.5);
	inst_model(&I, 1, 2, 3, 1, 0.5);
	inst_model(&I, 2, 7, 1, 1, 0.5);
	double total = 0;
	for (int m = 0; m < 3; m++)
		for (int j = 0; j < I.n[m]; j++)
			total += I.dur[m][j];
	for (int p = 0; p < TG_MM_NPOLICY; p++)
		CHECK(fabs(run(&I, (enum tg_mm_policy)p, 3) - total) < 1e-9 * total);
	/* as many devices as models: each model alone, the longest decides */
	I.mm.ndev = 3;
	CHECK(fabs(run(&I, TG_MM_RANDOM, 3) - 10 * (1 + 0)) < 10 * 0.5);
	double longest = 0;
	for (int m = 0; m < 3; m++) {
		double c = 0;
		for (int j = 0; j < I.n[m]; j++)
			c += I.dur[m][j];
		longest = fmax(longest, c);
	}
	CHECK(fabs(run(&I, TG_MM_LRTF, 3) - longest) < 1e-9);
	CHECK(fabs(tg_mm_lower_bound(&I.mm) - longest) < 1e-9);
	inst_free(&I);

	/* by hand: A = 4,4 ; B = 2 ; C = 2 on two devices. lrtf: A on d0 (0-4),
	 * B on d1 (0-2), C on d1 (2-4), A's second unit (4-8): 8, the optimum.
	 * fifo takes B and C after A's first unit only by eligibility order:
	 * d0 A, d1 B (0-2), C (2-4), A (4-8) as well. */
	static double a[] = {4, 4}, b[] = {2}, c[] = {2};
	double *d3[] = {a, b, c};
	int n3[] = {2, 1, 1};
	struct tg_mm mm = {.nmodels = 3, .nunits = n3, .dur = (const double *const *)d3, .ndev = 2};
	struct tg_mm_result r;
	CHECK_OK(tg_mm_simulate(&mm, TG_MM_LRTF, 1, &r));
	CHECK(r.makespan == 8 && r.units == 4 && r.busy_s == 12);
	/* speeds: the fast device (2x) takes A first: A 2+2, B and C on d1 */
	static const double speed[] = {1, 2};
	mm.speed = speed;
	CHECK_OK(tg_mm_simulate(&mm, TG_MM_LRTF, 1, &r));
	CHECK_MSG(r.makespan == 4, "%g", r.makespan);
	/* a device joining at 3: until then one device does A, then A again
	 * (lrtf: A's remaining 4 > 2), B and C on the late one: 3-5, 5-7; A ends at 8 */
	static const double join[] = {0, 3};
	mm.speed = NULL;
	mm.join = join;
	CHECK_OK(tg_mm_simulate(&mm, TG_MM_LRTF, 1, &r));
	CHECK_MSG(r.makespan == 8, "%g", r.makespan);
	mm.join = NULL;

	/* a failure at 1 on device 0 (running A): A reruns on d1 after B; 1 s lost */
	static const double fail[] = {1, INFINITY};
	mm.fail = fail;
	CHECK_OK(tg_mm_simulate(&mm, TG_MM_LRTF, 1, &r));
	CHECK(r.units == 4 && r.reruns == 1 && r.lost_s == 1);
	CHECK_MSG(r.makespan == 2 + 8 + 2, "%g", r.makespan); /* B 0-2, A 2-10, C 10-12 */
	static const double fail2[] = {1, 5};
	mm.fail = fail2;
	CHECK(tg_mm_simulate(&mm, TG_MM_LRTF, 1, &r) == -EDEADLK);
	mm.fail = NULL;

	/* bad input */
	int bad_n[] = {1, -1, 1};
	mm.nunits = bad_n;
	CHECK(tg_mm_simulate(&mm, TG_MM_LRTF, 1, &r) == -EINVAL);
	mm.nunits = n3;
	static const double badspeed[] = {1, 0};
	mm.speed = badspeed;
	CHECK(tg_mm_simulate(&mm, TG_MM_LRTF, 1, &r) == -EINVAL);
	CHECK(strstr(sp_last_error(), "device 1"));
}

/* successive halving on the simulator: at every rung (a fraction of the
 * units) the models past it compete by a fixed score; the worse half stops */
struct halving {
	int nmodels, rung_units;
	double *score;
	int *at_rung, *alive;
};
static int halving_stop(void *arg, int m, int done, double now)
{
	struct halving *h = arg;
	if (done % h->rung_units)
		return 0;
	int better = 0, peers = 0;
	for (int k = 0; k < h->nmodels; k++)
		if (k != m && h->at_rung[k] >= done) {
			peers++;
			better += h->score[k] < h->score[m];
		}
	h->at_rung[m] = done;
	return peers && better * 2 >= peers + 1; /* in the worse half of those seen */
}

static void test_fig6(void)
{
	/* homogeneous: 12 equal models (2 h per epoch, 2000 units each), 8 devices */
	double ratio_h = 0, ratio_r = 0;
	for (int trial = 0; trial < 3; trial++) {
		struct inst I;
		inst_alloc(&I, 12, 8);
		for (int m = 0; m < 12; m++)
			inst_model(&I, m, 2000, 7200, 1, 0.2);
		double lb = tg_mm_lower_bound(&I.mm), l = run(&I, TG_MM_LRTF, trial);
		double r = run(&I, TG_MM_RANDOM, trial);
		ratio_h += l / lb / 3;
		ratio_r += r / lb / 3;
		inst_free(&I);
	}
	printf("homogeneous: lrtf/bound %.4f random/bound %.4f\n", ratio_h, ratio_r);
	CHECK(ratio_h <= ratio_r + 1e-9);
	CHECK(ratio_h < 1.02);
	/* heterogeneous: per-epoch 0.5-4 h, 100-10,000 units */
	double hl = 0, hr = 0, hf = 0;
	for (int trial = 0; trial < 5; trial++) {
		struct inst I;
		inst_alloc(&I, 12, 8);
		for (int m = 0; m < 12; m++)
			inst_model(&I, m, 100 + (int)(urand() * 9900), 1800 + urand() * 12600, 1,
			           0.2);
		double lb = tg_mm_lower_bound(&I.mm);
		hl += run(&I, TG_MM_LRTF, trial) / lb / 5;
		hr += run(&I, TG_MM_RANDOM, trial) / lb / 5;
		hf += run(&I, TG_MM_FIFO, trial) / lb / 5;
		inst_free(&I);
	}
	printf("heterogeneous: lrtf/bound %.4f random/bound %.4f fifo/bound %.4f\n", hl, hr, hf);
	CHECK(hl <= hr + 1e-9 && hl <= hf + 1e-9);
	CHECK(hl < 1.05);

	/* early stopping: successive halving over 16 models, 4 rungs */
	struct inst I;
	inst_alloc(&I, 16, 4);
	double score[16];
	int at[16] = {0};
	for (int m = 0; m < 16; m++) {
		inst_model(&I, m, 400, 3600, 1, 0.2);
		score[m] = urand();
	}
	struct halving h = {.nmodels = 16, .rung_units = 100, .score = score, .at_rung = at};
	double full = run(&I, TG_MM_LRTF, 1);
	I.mm.stop = halving_stop;
	I.mm.stop_arg = &h;
	struct tg_mm_result r;
	CHECK_OK(tg_mm_simulate(&I.mm, TG_MM_LRTF, 1, &r));
	printf("successive halving: %d of 16 stopped, makespan %.0f s (all: %.0f s)\n", r.stopped,
	       r.makespan, full);
	CHECK(r.stopped >= 8 && r.stopped < 16 && r.makespan < 0.6 * full);
	inst_free(&I);

	/* a device failing mid-run on a large instance: every unit completes */
	inst_alloc(&I, 12, 8);
	for (int m = 0; m < 12; m++)
		inst_model(&I, m, 500, 3600, 1, 0.5);
	double fail[8];
	for (int d = 0; d < 8; d++)
		fail[d] = d == 3 ? 1234.5 : INFINITY;
	double nofail = run(&I, TG_MM_LRTF, 1);
	I.mm.fail = fail;
	CHECK_OK(tg_mm_simulate(&I.mm, TG_MM_LRTF, 1, &r));
	CHECK(r.units == 12 * 500 && r.reruns == 1 && r.lost_s > 0);
	CHECK(r.makespan > nofail && r.makespan < nofail * 8 / 7 * 1.05);
	inst_free(&I);
}

static void test_scale(void)
{
	int big = !getenv("O") || !strstr(getenv("O"), "san");
	int models = big ? 1000 : 100, units = 10000;
	struct inst I;
	inst_alloc(&I, models, 8);
	for (int m = 0; m < models; m++)
		inst_model(&I, m, units, 3600, 1, 0.5);
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	double mk = run(&I, TG_MM_LRTF, 1);
	clock_gettime(CLOCK_MONOTONIC, &b);
	double s = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
	printf("scale: %d units scheduled in %.2f s (makespan/bound %.4f)\n", models * units, s,
	       mk / tg_mm_lower_bound(&I.mm));
	if (big)
		CHECK_MSG(s < 10, "%.2f s", s);
	inst_free(&I);
}

/* lrtf against the exact MILP (GLPK) on small instances: within 5% */
static void test_milp(void)
{
	double worst = 0, sum = 0;
	int n = 0;
	for (int k = 0; k < 8; k++) {
		struct inst I;
		inst_alloc(&I, 3 + k % 2, 2);
		for (int m = 0; m < I.mm.nmodels; m++)
			inst_model(&I, m, 2 + (int)(urand() * 2), 1 + 3 * urand(), 1, 0.4);
		double ms, bound;
		int opt;
		int rc = tg_mm_milp(&I.mm, 10, &ms, &bound, &opt);
		if (rc == -ENOTSUP) {
			printf("MILP: %s\n", sp_last_error());
			inst_free(&I);
			return;
		}
		CHECK_MSG(rc == 0, "%s", sp_last_error());
		double l = run(&I, TG_MM_LRTF, 1);
		CHECK(l >= ms - 1e-9 || !opt); /* nothing beats the optimum */
		if (opt) {
			worst = fmax(worst, l / ms);
			sum += l / ms;
			n++;
		}
		inst_free(&I);
	}
	printf("MILP: lrtf/optimum mean %.4f worst %.4f over %d instances\n", n ? sum / n : 0,
	       worst, n);
	CHECK(n >= 6 && sum / n <= 1.05);
}

int main(void)
{
	test_policies();
	test_exact();
	test_fig6();
	test_milp();
	test_scale();
	TEST_PASS();
}

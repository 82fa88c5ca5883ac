/* taskgraph/milp.c — Hydra's exact reference schedule (MLSys'22 §5.3.1) as a
 * disjunctive MILP solved with GLPK.
 *
 * Units u = (m, j), model m's j-th unit; p[u][d] = dur[m][j] / speed[d].
 * Columns: the makespan C; start times 0 <= x_u <= H; binaries a_{u,d} (u on d);
 * one binary y_{u,v} per pair of units of different models (1: u before v).
 *   sum_d a_{u,d} = 1                                         (one device each)
 *   x_{m,j} >= x_{m,j-1} + sum_d p[(m,j-1)][d] a_{(m,j-1),d}  (a model's chain)
 *   C >= x_{m,last} + sum_d p[(m,last)][d] a_{(m,last),d}      (makespan)
 *   C >= sum_u p[u][d] a_{u,d}                 for each d     (device load cut)
 *   x_v >= x_u + p[u][d] - M(1-y_uv) - M(2-a_ud-a_vd)   for each d, and
 *   x_u >= x_v + p[v][d] - M y_uv    - M(2-a_ud-a_vd)   (one unit at a time)
 * H is a list schedule's makespan (an upper bound on the optimum, not given to
 * GLPK as an incumbent), LB <= C <= H with LB = max(longest chain on the fastest
 * device, total work / total speed), M = H + max p. Devices of equal speed are
 * interchangeable: within such a group device g_i may hold unit k only if
 * g_{i-1} holds an earlier unit (so unit 0 goes to the group's first device).
 * GLPK: the LP relaxation by glp_simplex, then glp_intopt without presolve,
 * best-bound search after a dive to the first schedule, branching on the longest
 * unit's device first (milp_callback); the whole run within time_limit_s. Times
 * are scaled by LB for GLPK's tolerances; the returned makespan is recomputed
 * exactly from the solver's device assignment and order (left-shifted). */
#include "taskgraph/taskgraph.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if SPILL_HAVE_GLPK
#include <glpk.h>
#endif

#define MILP_MAX_UNITS 64

/* Validates the instance; *nu gets the number of units. */
static int milp_check(const struct tg_mm *in, double time_limit_s, int *nu)
{
	if (!in)
		return sp_error(-EINVAL, "tg_mm_milp: instance is NULL");
	if (in->nmodels < 1)
		return sp_error(-EINVAL, "tg_mm_milp: nmodels = %d, need at least 1", in->nmodels);
	if (in->ndev < 1)
		return sp_error(-EINVAL, "tg_mm_milp: ndev = %d, need at least 1 device", in->ndev);
	if (!in->nunits || !in->dur)
		return sp_error(-EINVAL, "tg_mm_milp: %s is NULL", in->nunits ? "dur" : "nunits");
	if (!(time_limit_s > 0))
		return sp_error(-EINVAL, "tg_mm_milp: time_limit_s = %g, must be > 0",
		                time_limit_s);
	long total = 0;
	for (int m = 0; m < in->nmodels; m++) {
		if (in->nunits[m] < 1)
			return sp_error(-EINVAL, "tg_mm_milp: nunits[%d] = %d, need at least 1", m,
			                in->nunits[m]);
		if (!in->dur[m])
			return sp_error(-EINVAL, "tg_mm_milp: dur[%d] is NULL", m);
		for (int j = 0; j < in->nunits[m]; j++)
			if (!isfinite(in->dur[m][j]) || in->dur[m][j] < 0)
				return sp_error(
				    -EINVAL,
				    "tg_mm_milp: dur[%d][%d] = %g, must be finite and >= 0", m, j,
				    in->dur[m][j]);
		total += in->nunits[m];
	}
	for (int d = 0; in->speed && d < in->ndev; d++)
		if (!isfinite(in->speed[d]) || !(in->speed[d] > 0))
			return sp_error(-EINVAL,
			                "tg_mm_milp: speed[%d] = %g, must be finite and > 0", d,
			                in->speed[d]);
	if (total > MILP_MAX_UNITS)
		return sp_error(-E2BIG, "tg_mm_milp: %ld units, the MILP takes at most %d", total,
		                MILP_MAX_UNITS);
	*nu = (int)total;
	return 0;
}

#if SPILL_HAVE_GLPK

/* The instance flattened: units in model order, devices by decreasing speed
 * (only the ones that can matter, see milp_devices). */
struct milp {
	int nu, nd, nm;
	int model[MILP_MAX_UNITS];     /* unit -> model */
	int first[MILP_MAX_UNITS + 1]; /* model -> its first unit; first[nm] = nu */
	double dur[MILP_MAX_UNITS];    /* at speed 1 */
	double *speed;                 /* [nd], decreasing */
	double lb, ub;                 /* lower bound, list-schedule makespan */
};

static int cmp_desc(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x < y) - (x > y);
}

/* Keeps the fastest devices that can matter: a schedule's busy devices can be
 * swapped for the fastest ones without slowing a unit, so min(ndev, units)
 * suffice; with equal speeds no more than nmodels units ever overlap, so an
 * interval colouring needs at most nmodels devices. */
static int milp_devices(struct milp *P, const struct tg_mm *in)
{
	int n = in->ndev;
	double *s = malloc((size_t)n * sizeof(double));
	if (!s)
		return sp_error(-ENOMEM, "tg_mm_milp: %d device speeds", n);
	for (int d = 0; d < n; d++)
		s[d] = in->speed ? in->speed[d] : 1.0;
	qsort(s, (size_t)n, sizeof(double), cmp_desc);
	int keep = n < P->nu ? n : P->nu;
	if (s[0] == s[n - 1] && keep > P->nm)
		keep = P->nm;
	P->nd = keep;
	P->speed = s;
	return 0;
}

/* max(longest chain on the fastest device, total work / total speed). */
static double milp_lower(const struct milp *P)
{
	double tot = 0, chain = 0, ssum = 0;
	for (int m = 0; m < P->nm; m++) {
		double c = 0;
		for (int u = P->first[m]; u < P->first[m + 1]; u++)
			c += P->dur[u];
		tot += c;
		if (c > chain)
			chain = c;
	}
	for (int d = 0; d < P->nd; d++)
		ssum += P->speed[d];
	double a = chain / P->speed[0], b = tot / ssum;
	return a > b ? a : b;
}

/* A list schedule (each step starts the unit, of any model, and the device that
 * finish first; ties: the longest remaining model): a feasible makespan. */
static double milp_upper(const struct milp *P)
{
	double ready[MILP_MAX_UNITS], rem[MILP_MAX_UNITS], free_at[MILP_MAX_UNITS];
	int next[MILP_MAX_UNITS];
	double end = 0;
	for (int m = 0; m < P->nm; m++) {
		ready[m] = 0;
		next[m] = P->first[m];
		rem[m] = 0;
		for (int u = P->first[m]; u < P->first[m + 1]; u++)
			rem[m] += P->dur[u];
	}
	for (int d = 0; d < P->nd; d++)
		free_at[d] = 0;
	for (int step = 0; step < P->nu; step++) {
		int bm = -1, bd = -1;
		double bf = 0;
		for (int m = 0; m < P->nm; m++) {
			if (next[m] == P->first[m + 1])
				continue;
			for (int d = 0; d < P->nd; d++) {
				double st = ready[m] > free_at[d] ? ready[m] : free_at[d];
				double f = st + P->dur[next[m]] / P->speed[d];
				if (bm < 0 || f < bf || (f == bf && rem[m] > rem[bm])) {
					bm = m;
					bd = d;
					bf = f;
				}
			}
		}
		rem[bm] -= P->dur[next[bm]];
		next[bm]++;
		ready[bm] = free_at[bd] = bf;
		if (bf > end)
			end = bf;
	}
	return end;
}

/* Whether unit a comes before unit b in the solver's schedule (x: start times,
 * in units of LB). Starts within GLPK's tolerance count as equal; then a
 * zero-length unit comes first (on one device it must: the other one ends
 * later than it starts), then the lower index (a model's chain order). */
static int milp_before(const struct milp *P, const double *x, int a, int b)
{
	const double tol = 1e-6;
	if (fabs(x[a] - x[b]) > tol)
		return x[a] < x[b];
	int za = P->dur[a] == 0, zb = P->dur[b] == 0;
	if (za != zb)
		return za;
	return x[a] < x[b] || (x[a] == x[b] && a < b);
}

/* The exact makespan of the solver's schedule: each unit on the device its a
 * column picks, units taken in the solver's order (milp_before), each as early
 * as its chain and device allow: a left shift, never later than the solver's. */
static double milp_replay(const struct milp *P, const double *x, const int *dev)
{
	int ord[MILP_MAX_UNITS];
	double fin[MILP_MAX_UNITS], free_at[MILP_MAX_UNITS], end = 0;
	for (int u = 0; u < P->nu; u++)
		ord[u] = u;
	for (int i = 1; i < P->nu; i++) /* insertion sort */
		for (int k = i; k > 0 && milp_before(P, x, ord[k], ord[k - 1]); k--) {
			int t = ord[k - 1];
			ord[k - 1] = ord[k];
			ord[k] = t;
		}
	for (int d = 0; d < P->nd; d++)
		free_at[d] = 0;
	/* a model's units may sit out of chain order only within GLPK's tolerance;
	 * take each model's units in chain order regardless */
	int next[MILP_MAX_UNITS];
	for (int m = 0; m < P->nm; m++)
		next[m] = P->first[m];
	for (int i = 0; i < P->nu; i++) {
		int u = next[P->model[ord[i]]]++;
		int d = dev[u];
		double st = free_at[d];
		if (u > P->first[P->model[u]] && fin[u - 1] > st)
			st = fin[u - 1];
		fin[u] = st + P->dur[u] / P->speed[d];
		free_at[d] = fin[u];
		if (fin[u] > end)
			end = fin[u];
	}
	return end;
}

/* The search callback: records the best bound, dives (newest active node) until
 * the first integer schedule, and branches on the assignment of the longest
 * unit still fractional, then on the most fractional order (GLPK's pseudo-cost
 * branching probes every candidate at the root with no regard for tm_lim:
 * seconds past the limit at 64 units). Presolve is off, so the tree's columns
 * are the problem's. */
struct milp_cb {
	const struct milp *P;
	int colA, colY, ncols;
	int found;    /* an integer schedule was found */
	double bound; /* best global bound seen (scaled), -DBL_MAX if none */
};

static double frac(double v)
{
	return v < 0.5 ? v : 1 - v;
}

static void milp_branch(glp_tree *T, const struct milp_cb *cb)
{
	glp_prob *lp = glp_ios_get_prob(T);
	int best = 0;
	double bd = -1, bf = -1;
	for (int c = cb->colA; c < cb->colY; c++) {
		if (!glp_ios_can_branch(T, c))
			continue;
		double d = cb->P->dur[(c - cb->colA) / cb->P->nd];
		double f = frac(glp_get_col_prim(lp, c));
		if (d > bd || (d == bd && f > bf)) {
			bd = d;
			bf = f;
			best = c;
		}
	}
	for (int c = cb->colY; !best && c <= cb->ncols; c++) {
		if (!glp_ios_can_branch(T, c))
			continue;
		double f = frac(glp_get_col_prim(lp, c));
		if (f > bf) {
			bf = f;
			best = c;
		}
	}
	if (best) /* else GLPK's own rule */
		glp_ios_branch_upon(T, best, GLP_NO_BRNCH);
}

static void milp_callback(glp_tree *T, void *info)
{
	struct milp_cb *cb = info;
	int p = glp_ios_best_node(T);
	if (p) {
		double b = glp_ios_node_bound(T, p);
		if (b > cb->bound)
			cb->bound = b;
	}
	switch (glp_ios_reason(T)) {
	case GLP_IBINGO: cb->found = 1; break;
	case GLP_IBRANCH: milp_branch(T, cb); break;
	case GLP_ISELECT:
		if (!cb->found && (p = glp_ios_prev_node(T, 0)) != 0)
			glp_ios_select_node(T, p);
		break;
	default: break;
	}
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int ms_left(double t_end)
{
	double ms = (t_end - now_s()) * 1000.0;
	return ms >= INT_MAX ? INT_MAX : (ms < 1 ? 1 : (int)ms);
}

/* Builds and solves; columns: 1 = C, 2.. = x, then a[u][d], then y pairs. */
static int milp_solve(struct milp *P, double time_limit_s, double *makespan, double *bound,
                      int *optimal)
{
	const int nu = P->nu, nd = P->nd;
	const double sc = P->lb > 0 ? P->lb : (P->ub > 0 ? P->ub : 1.0);
	const double H = P->ub / sc * (1 + 1e-9) + 1e-9;
	double pmax = 0;
	for (int u = 0; u < nu; u++)
		if (P->dur[u] / P->speed[nd - 1] / sc > pmax)
			pmax = P->dur[u] / P->speed[nd - 1] / sc;
	const double M = H + pmax + 1e-6;
#define P_UD(u, d) (P->dur[u] / P->speed[d] / sc)

	int npairs = 0;
	for (int u = 0; u < nu; u++)
		for (int v = u + 1; v < nu; v++)
			npairs += P->model[u] != P->model[v];
	const int colC = 1, colX = 2, colA = colX + nu, colY = colA + nu * nd;
	const int ncols = colY + npairs - 1;
	int rc = 0;
	double relax = -DBL_MAX;
	const double t_end = now_s() + (time_limit_s < 1e9 ? time_limit_s : 1e9);
	glp_prob *lp = NULL;
	int *ind = malloc((size_t)(ncols + 1) * sizeof(int));
	double *val = malloc((size_t)(ncols + 1) * sizeof(double));
	int *dev = malloc((size_t)nu * sizeof(int));
	double *x = malloc((size_t)nu * sizeof(double));
	if (!ind || !val || !dev || !x) {
		rc = sp_error(-ENOMEM, "tg_mm_milp: %d columns", ncols);
		goto out_free;
	}

	lp = glp_create_prob();
	glp_set_obj_dir(lp, GLP_MIN);
	glp_add_cols(lp, ncols);
	glp_set_col_bnds(lp, colC, GLP_DB, P->lb / sc, H);
	glp_set_obj_coef(lp, colC, 1.0);
	for (int u = 0; u < nu; u++)
		glp_set_col_bnds(lp, colX + u, GLP_DB, 0.0, H);
	for (int c = colA; c <= ncols; c++) {
		glp_set_col_kind(lp, c, GLP_BV);
		if (c < colY && nd == 1)
			glp_set_col_bnds(lp, c, GLP_FX, 1.0, 1.0);
	}
#define A(u, d) (colA + (u)*nd + (d))
	int row = 0;
#define ADD_ROW(n, type, lo, hi)                         \
	do {                                             \
		row = glp_add_rows(lp, 1);               \
		glp_set_row_bnds(lp, row, type, lo, hi); \
		glp_set_mat_row(lp, row, n, ind, val);   \
	} while (0)
	/* one device per unit */
	for (int u = 0; u < nu; u++) {
		for (int d = 0; d < nd; d++) {
			ind[1 + d] = A(u, d);
			val[1 + d] = 1.0;
		}
		ADD_ROW(nd, GLP_FX, 1.0, 1.0);
	}
	/* chains and makespan */
	for (int m = 0; m < P->nm; m++)
		for (int u = P->first[m]; u < P->first[m + 1]; u++) {
			int last = u + 1 == P->first[m + 1];
			ind[1] = last ? colC : colX + u + 1;
			val[1] = 1.0;
			ind[2] = colX + u;
			val[2] = -1.0;
			for (int d = 0; d < nd; d++) {
				ind[3 + d] = A(u, d);
				val[3 + d] = -P_UD(u, d);
			}
			ADD_ROW(nd + 2, GLP_LO, 0.0, 0.0);
		}
	/* device load */
	for (int d = 0; d < nd && nd > 1; d++) {
		ind[1] = colC;
		val[1] = 1.0;
		for (int u = 0; u < nu; u++) {
			ind[2 + u] = A(u, d);
			val[2 + u] = -P_UD(u, d);
		}
		ADD_ROW(nu + 1, GLP_LO, 0.0, 0.0);
	}
	/* one unit at a time per device, for units of different models */
	int y = colY;
	for (int u = 0; u < nu; u++)
		for (int v = u + 1; v < nu; v++) {
			if (P->model[u] == P->model[v])
				continue;
			for (int d = 0; d < nd; d++) {
				int n = 0;
				/* x_v - x_u - M y - M a_ud - M a_vd >= p_ud - 3M */
				ind[++n] = colX + v, val[n] = 1.0;
				ind[++n] = colX + u, val[n] = -1.0;
				ind[++n] = y, val[n] = -M;
				if (nd > 1) {
					ind[++n] = A(u, d), val[n] = -M;
					ind[++n] = A(v, d), val[n] = -M;
				}
				ADD_ROW(n, GLP_LO, P_UD(u, d) - (nd > 1 ? 3 : 1) * M, 0.0);
				/* x_u - x_v + M y - M a_ud - M a_vd >= p_vd - 2M */
				n = 0;
				ind[++n] = colX + u, val[n] = 1.0;
				ind[++n] = colX + v, val[n] = -1.0;
				ind[++n] = y, val[n] = M;
				if (nd > 1) {
					ind[++n] = A(u, d), val[n] = -M;
					ind[++n] = A(v, d), val[n] = -M;
				}
				ADD_ROW(n, GLP_LO, P_UD(v, d) - (nd > 1 ? 2 : 0) * M, 0.0);
			}
			y++;
		}
	/* interchangeable devices: a_{k,g_i} <= sum_{k' < k} a_{k',g_{i-1}} */
	for (int d = 1; d < nd; d++) {
		if (P->speed[d] != P->speed[d - 1])
			continue;
		for (int k = 0; k < nu; k++) {
			ind[1] = A(k, d);
			val[1] = 1.0;
			for (int k2 = 0; k2 < k; k2++) {
				ind[2 + k2] = A(k2, d - 1);
				val[2 + k2] = -1.0;
			}
			ADD_ROW(k + 1, GLP_UP, 0.0, 0.0);
		}
	}
#undef ADD_ROW

	/* the LP relaxation first (an optimal basis for glp_intopt without presolve) */
	int term = glp_term_out(GLP_OFF);
	glp_smcp sparm;
	glp_init_smcp(&sparm);
	sparm.msg_lev = GLP_MSG_OFF;
	sparm.tm_lim = ms_left(t_end);
	int ret = glp_simplex(lp, &sparm);
	if (ret == 0 && glp_get_status(lp) == GLP_OPT) {
		struct milp_cb cb = {
		    .P = P, .colA = colA, .colY = colY, .ncols = ncols, .bound = -DBL_MAX};
		glp_iocp parm;
		glp_init_iocp(&parm);
		parm.msg_lev = GLP_MSG_OFF;
		parm.presolve = GLP_OFF;
		parm.bt_tech = GLP_BT_BLB;
		parm.tm_lim = ms_left(t_end);
		parm.cb_func = milp_callback;
		parm.cb_info = &cb;
		ret = glp_intopt(lp, &parm);
		relax = cb.bound;
	} else if (ret == 0) {
		ret = GLP_EFAIL; /* the relaxation of a feasible, bounded problem */
	}
	glp_term_out(term);
	int status = glp_mip_status(lp);

	if (ret != 0 && ret != GLP_ETMLIM) {
		rc = sp_error(-EIO, "tg_mm_milp: GLPK failed (code %d)", ret);
		goto out_free;
	}
	if (status != GLP_OPT && status != GLP_FEAS) {
		if (ret == GLP_ETMLIM)
			rc =
			    sp_error(-ETIMEDOUT,
			             "tg_mm_milp: no integer schedule found within %g s (%d units, "
			             "%d devices)",
			             time_limit_s, nu, nd);
		else
			rc = sp_error(-EIO, "tg_mm_milp: GLPK found no schedule (status %d)",
			              status);
		goto out_free;
	}
	for (int u = 0; u < nu; u++) {
		x[u] = glp_mip_col_val(lp, colX + u);
		dev[u] = 0;
		for (int d = 1; d < nd; d++)
			if (glp_mip_col_val(lp, A(u, d)) > glp_mip_col_val(lp, A(u, dev[u])))
				dev[u] = d;
	}
	/* the replay is exact and ends no later than glp_mip_obj_val() but for
	 * GLPK's tolerances; should an order within them mislead it, keep GLPK's */
	double mk = milp_replay(P, x, dev), obj = glp_mip_obj_val(lp) * sc;
	if (mk > obj * (1 + 1e-6))
		mk = obj;
	int opt = ret == 0 && status == GLP_OPT;
	double b = relax > -DBL_MAX ? relax * sc : -DBL_MAX;
	if (b < P->lb)
		b = P->lb;
	if (opt || b > mk)
		b = mk;
	*makespan = mk;
	*bound = b;
	*optimal = opt;
#undef A
#undef P_UD
out_free:
	if (lp)
		glp_delete_prob(lp);
	free(ind);
	free(val);
	free(dev);
	free(x);
	return rc;
}

#endif /* SPILL_HAVE_GLPK */

/* *bound is the best local bound over GLPK's active branch-and-bound nodes, read
 * in the search callback (the highest seen), never below LB nor above the
 * makespan, which it equals when optimal. Allocates and frees its own GLPK
 * problem (glp_free_env() is left to the program); runs with GLPK's terminal
 * output off, restored after. Thread-safe as far as GLPK is (its environment is
 * thread-local in GLPK 5 built with TLS). */
int tg_mm_milp(const struct tg_mm *in, double time_limit_s, double *makespan, double *bound,
               int *optimal)
{
	int nu = 0;
	SP_CHECK(milp_check(in, time_limit_s, &nu));
	if (!makespan || !bound || !optimal)
		return sp_error(-EINVAL, "tg_mm_milp: %s is NULL",
		                !makespan ? "makespan"
		                : !bound  ? "bound"
		                          : "optimal");
#if SPILL_HAVE_GLPK
	struct milp P = {.nu = nu, .nm = in->nmodels};
	int u = 0;
	for (int m = 0; m < in->nmodels; m++) {
		P.first[m] = u;
		for (int j = 0; j < in->nunits[m]; j++, u++) {
			P.model[u] = m;
			P.dur[u] = in->dur[m][j];
		}
	}
	P.first[in->nmodels] = u;
	SP_CHECK(milp_devices(&P, in));
	P.lb = milp_lower(&P);
	P.ub = milp_upper(&P);
	int rc = milp_solve(&P, time_limit_s, makespan, bound, optimal);
	free(P.speed);
	return rc;
#else
	return sp_error(-ENOTSUP, "tg_mm_milp: spill was built without GLPK (apt-get install "
	                          "libglpk-dev)");
#endif
}

/* tests/taskgraph/test_sim_rules.c — tg_sim_swap follows the executor's rules,
 * each on a small graph built by hand whose steady-state (middle) iteration is
 * worked out below: dead objects are dropped, not written back; inputs are
 * reloaded every iteration; a copy on another GPU is preferred over the host;
 * Belady ties go to the least recently used (acquisition order: resident objects
 * first), then to the lower index. */
#include <stdio.h>
#include <string.h>

#include "taskgraph/taskgraph.h"
#include "tests/test.h"

struct mini {
	struct tg_graph g;
	struct tg_task t[16];
	struct tg_obj o[16];
	int order[16];
	int pool[256], npool;
};

static void mini_init(struct mini *m, int ndev)
{
	memset(m, 0, sizeof(*m));
	m->g.ndev = ndev;
	m->g.task = m->t;
	m->g.obj = m->o;
	m->g.order = m->order;
}

static int obj(struct mini *m, int kind, uint64_t bytes)
{
	m->o[m->g.nobj] = (struct tg_obj){.kind = kind, .bytes = bytes};
	return m->g.nobj++;
}

/* a task in sequence (the order is the ids'); lists end at -1 */
static void task(struct mini *m, int kind, int dev, const int *r, const int *w)
{
	struct tg_task *t = &m->t[m->g.ntask];
	*t = (struct tg_task){.id = m->g.ntask, .kind = kind, .dev = dev, .work = -1};
	t->read = m->pool + m->npool;
	for (; *r >= 0; r++, t->nread++)
		m->pool[m->npool++] = *r;
	t->write = m->pool + m->npool;
	for (; *w >= 0; w++, t->nwrite++)
		m->pool[m->npool++] = *w;
	t->dep = m->pool + m->npool;
	m->order[m->g.ntask] = m->g.ntask;
	m->g.ntask++;
}

static uint64_t link_total(const struct tg_swap *sw, int link)
{
	uint64_t s = 0;
	for (int k = 0; k < TG_NOKIND; k++)
		s += sw->bytes[link][k];
	return s;
}

#define NONE   ((const int[]){-1})
#define L(...) ((const int[]){__VA_ARGS__, -1})

int main(void)
{
	struct mini m;
	struct tg_swap sw;

	/* (a) dead objects: one GPU of 200 bytes, W weight, A stash, G grad, 100 each.
	 *   T0 FWD reads W, writes A         W (dirty since the last T2), A resident
	 *   T1 BWD reads A, writes G         room for G: W goes, written back (D2H
	 *                                    100: its only valid copy); after T1 A is
	 *                                    dead (next use: T0 writes it): dropped
	 *   T2 UPD reads W, G, writes W      W comes back (H2D 100); after it G is
	 *                                    dead (next use: T1 writes it): dropped
	 * Per iteration H2D 100 and D2H 100, both W's. Keeping A and G until evicted
	 * would also write both back (D2H 300). */
	mini_init(&m, 1);
	int W = obj(&m, TG_O_WEIGHT, 100), A = obj(&m, TG_O_STASH, 100),
	    G = obj(&m, TG_O_GRAD, 100);
	task(&m, TG_FWD, 0, L(W), L(A));
	task(&m, TG_BWD, 0, L(A), L(G));
	task(&m, TG_UPD, 0, L(W, G), L(W));
	for (int wbclean = 0; wbclean < 2; wbclean++) {
		/* the dp-swap baseline writes back every eviction, but a dead object is
		 * not evicted: the same figures */
		CHECK_OK(tg_sim_swap(&m.g, 200, wbclean, &sw));
		printf("dead objects:    H2D %llu (weight %llu), D2H %llu (weight %llu)\n",
		       (unsigned long long)link_total(&sw, TG_L_H2D),
		       (unsigned long long)sw.bytes[TG_L_H2D][TG_O_WEIGHT],
		       (unsigned long long)link_total(&sw, TG_L_D2H),
		       (unsigned long long)sw.bytes[TG_L_D2H][TG_O_WEIGHT]);
		CHECK(sw.bytes[TG_L_D2H][TG_O_WEIGHT] == 100 && link_total(&sw, TG_L_D2H) == 100);
		CHECK(sw.bytes[TG_L_H2D][TG_O_WEIGHT] == 100 && link_total(&sw, TG_L_H2D) == 100);
	}

	/* (b) inputs are new data each iteration, even with memory to spare: X (10)
	 * is read by T0 and T1 and comes once per iteration (H2D 10); W (100) stays.
	 *   T0 FWD reads W, X, writes B;  T1 BWD reads W, B, X, writes G;
	 *   T2 UPD reads W, G, writes W */
	mini_init(&m, 1);
	W = obj(&m, TG_O_WEIGHT, 100);
	int X = obj(&m, TG_O_INPUT, 10), B = obj(&m, TG_O_BOUNDARY, 5);
	G = obj(&m, TG_O_GRAD, 100);
	task(&m, TG_FWD, 0, L(W, X), L(B));
	task(&m, TG_BWD, 0, L(W, B, X), L(G));
	task(&m, TG_UPD, 0, L(W, G), L(W));
	CHECK_OK(tg_sim_swap(&m.g, 1000, 0, &sw));
	printf("inputs:          H2D input %llu, weight %llu\n",
	       (unsigned long long)sw.bytes[TG_L_H2D][TG_O_INPUT],
	       (unsigned long long)sw.bytes[TG_L_H2D][TG_O_WEIGHT]);
	CHECK(sw.bytes[TG_L_H2D][TG_O_INPUT] == 10 && link_total(&sw, TG_L_H2D) == 10);
	CHECK(link_total(&sw, TG_L_D2H) == 0 && link_total(&sw, TG_L_P2P) == 0);

	/* (c) P2P preferred: W (100) is valid on the host and, after T0, on GPU 0.
	 *   T0 FWD GPU 0 reads W, writes B0     W missing: H2D 100 (only the host has it)
	 *   T1 FWD GPU 1 reads W, writes B1     W on GPU 0 and host: P2P 100
	 *   T2 UPD host reads W, writes W       W valid on the host: nothing; the
	 *                                       device copies are stale: dropped
	 * also B1 (50) is only written by T1 though GPU 0... never holds it: no move. */
	mini_init(&m, 2);
	W = obj(&m, TG_O_WEIGHT, 100);
	int B0 = obj(&m, TG_O_BOUNDARY, 50), B1 = obj(&m, TG_O_BOUNDARY, 50);
	task(&m, TG_FWD, 0, L(W), L(B0));
	task(&m, TG_FWD, 1, L(W), L(B1));
	task(&m, TG_UPD, -1, L(W), L(W));
	CHECK_OK(tg_sim_swap(&m.g, 1000, 0, &sw));
	printf("p2p preferred:   H2D %llu, P2P %llu, D2H %llu\n",
	       (unsigned long long)link_total(&sw, TG_L_H2D),
	       (unsigned long long)link_total(&sw, TG_L_P2P),
	       (unsigned long long)link_total(&sw, TG_L_D2H));
	CHECK(sw.bytes[TG_L_H2D][TG_O_WEIGHT] == 100 && sw.bytes[TG_L_P2P][TG_O_WEIGHT] == 100);
	CHECK(link_total(&sw, TG_L_H2D) == 100 && link_total(&sw, TG_L_P2P) == 100 &&
	      link_total(&sw, TG_L_D2H) == 0);
	/* a pure write of an object valid elsewhere moves nothing: T1 overwrites B0 */
	mini_init(&m, 2);
	B0 = obj(&m, TG_O_BOUNDARY, 50);
	task(&m, TG_FWD, 0, NONE, L(B0));
	task(&m, TG_FWD, 1, NONE, L(B0));
	task(&m, TG_BWD, 1, L(B0), NONE);
	CHECK_OK(tg_sim_swap(&m.g, 1000, 0, &sw));
	CHECK(link_total(&sw, TG_L_P2P) == 0 && link_total(&sw, TG_L_H2D) == 0);

	/* (d1) Belady ties go to the least recently used, before the index. One GPU of
	 * 200; weights Bw (index 0) and C (2), optimizer state Ao (index 1), 100 each,
	 * read only (clean: evictions move nothing).
	 *   T0 reads Ao, Bw   both resident from the last iteration: stamps Ao, Bw
	 *   T1 reads C        room: Ao and Bw are next used by T2 (a tie); Ao is
	 *                     the least recently used: it goes (C: H2D 100, weight)
	 *   T2 reads Ao, Bw   Ao back, C goes (H2D 100, opt)
	 * LRU: H2D weight 100, opt 100. The lower index alone would evict Bw instead:
	 * weight 200, opt 0. */
	mini_init(&m, 1);
	int Bw = obj(&m, TG_O_WEIGHT, 100), Ao = obj(&m, TG_O_OPT, 100),
	    C = obj(&m, TG_O_WEIGHT, 100);
	task(&m, TG_FWD, 0, L(Ao, Bw), NONE);
	task(&m, TG_FWD, 0, L(C), NONE);
	task(&m, TG_FWD, 0, L(Ao, Bw), NONE);
	CHECK_OK(tg_sim_swap(&m.g, 200, 0, &sw));
	printf("LRU tie-break:   H2D weight %llu, opt %llu\n",
	       (unsigned long long)sw.bytes[TG_L_H2D][TG_O_WEIGHT],
	       (unsigned long long)sw.bytes[TG_L_H2D][TG_O_OPT]);
	CHECK(sw.bytes[TG_L_H2D][TG_O_WEIGHT] == 100 && sw.bytes[TG_L_H2D][TG_O_OPT] == 100);

	/* (d2) acquisition order: resident objects are acquired (stamped) first. One
	 * GPU of 200; Ao (opt, index 0), Bw, C, D (weights), 100 each.
	 *   T0 reads Bw, D    Ao and Bw resident from T3: D evicts Ao (H2D 100 weight)
	 *   T1 reads Ao, Bw   Bw resident: stamped first; Ao comes back second,
	 *                     evicting D (H2D 100 opt)
	 *   T2 reads C        Ao and Bw both next used by T3; Bw is the least
	 *                     recently used (stamped before Ao at T1): it goes (H2D
	 *                     100 weight)
	 *   T3 reads Ao, Bw   Bw back, C goes (H2D 100 weight)
	 * weight 300, opt 100. In plain read order (Ao, then Bw), or by the lower index,
	 * Ao would go at T2 and come back at T3: weight 200, opt 200. */
	mini_init(&m, 1);
	Ao = obj(&m, TG_O_OPT, 100);
	Bw = obj(&m, TG_O_WEIGHT, 100);
	C = obj(&m, TG_O_WEIGHT, 100);
	int D = obj(&m, TG_O_WEIGHT, 100);
	task(&m, TG_FWD, 0, L(Bw, D), NONE);
	task(&m, TG_FWD, 0, L(Ao, Bw), NONE);
	task(&m, TG_FWD, 0, L(C), NONE);
	task(&m, TG_FWD, 0, L(Ao, Bw), NONE);
	CHECK_OK(tg_sim_swap(&m.g, 200, 0, &sw));
	printf("resident first:  H2D weight %llu, opt %llu\n",
	       (unsigned long long)sw.bytes[TG_L_H2D][TG_O_WEIGHT],
	       (unsigned long long)sw.bytes[TG_L_H2D][TG_O_OPT]);
	CHECK(sw.bytes[TG_L_H2D][TG_O_WEIGHT] == 300 && sw.bytes[TG_L_H2D][TG_O_OPT] == 100);
	TEST_PASS();
}

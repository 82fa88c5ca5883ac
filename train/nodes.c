/* train/nodes.c — several processes, one per node (mpirun, srun): MPI starts
 * them, checks they were launched alike, and carries the runtime's messages
 * (struct rt_nodes: the chain all-reduce of runtime/collective.c).
 *
 * The runtime's messages go on a communicator of their own (a dup of the
 * world), so they never meet the trainer's few collectives here. A receive
 * polls (MPI_Irecv + MPI_Test) instead of blocking: a node that died leaves
 * the others waiting, mpirun then sends them SIGTERM, and a waiting receive
 * sees it and ends the process with one line instead of hanging in MPI. A
 * signal that only asks the run to stop (Ctrl-C) reaches every node; each one
 * finishes its step (the messages keep coming), so the wait gives up only
 * after NODES_GRACE_S with nothing arriving. */
#include "train/internal.h"

#include "common/log.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if SPILL_HAVE_MPI
#include <mpi.h>
#endif

#define NODES_GRACE_S 0.5 /* under mpirun's SIGKILL after its SIGTERM (1 s) */

/* What launched us: the launcher's rank and size variables, -1 when none. */
static int env_int(const char *const *names)
{
	for (; *names; names++) {
		const char *v = getenv(*names);
		if (v && *v)
			return atoi(v);
	}
	return -1;
}

static const char *const size_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE",
                                        "SLURM_NTASKS", NULL};
static const char *const rank_vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK",
                                        "SLURM_PROCID", NULL};

int tr_nodes_launched(void)
{
	/* srun sets SLURM_NTASKS in an allocation too: only a task it started
	 * (SLURM_PROCID) counts */
	if (!getenv("OMPI_COMM_WORLD_SIZE") && !getenv("PMI_SIZE") && !getenv("PMIX_RANK") &&
	    !getenv("SLURM_PROCID"))
		return 0;
	int n = env_int(size_vars);
	return n >= 1 ? n : 0; /* mpirun -np 1 too: the path to MPI and NCCL, on one node */
}

int tr_nodes_env_rank(void)
{
	int r = env_int(rank_vars);
	return r > 0 ? r : 0;
}

#if SPILL_HAVE_MPI

struct tr_nodes {
	struct rt_nodes rt;
	MPI_Comm comm;      /* the runtime's messages */
	MPI_Comm fail_comm; /* tr_nodes_all_failed's agreement, apart from the rest */
	const volatile sig_atomic_t *stop;
	const char *last_ckpt; /* the trainer's newest checkpoint ("": none), for the last line */
	int agreed_first;      /* tr_nodes_failed's last answer */
};

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* The one line a node prints when it cannot go on without a peer. */
static void give_up(const struct tr_nodes *n, const char *what, int peer, const char *why)
{
	const char *ck = n->last_ckpt ? n->last_ckpt : "";
	char who[32] = "the other nodes";
	if (peer >= 0)
		snprintf(who, sizeof(who), "node %d", peer);
	fprintf(stderr, "spill: node %d: %s while %s %s; exiting: %s%s\n", n->rt.rank, why, what,
	        who, *ck ? "the last checkpoint is " : "no checkpoint was written", ck);
	fflush(stderr);
	_exit(1);
}

/* Waits for req, polling; gives up (ending the process) once a stop signal
 * has been pending NODES_GRACE_S with nothing arriving. */
static int wait_req(struct tr_nodes *n, MPI_Request *req, const char *what, int peer)
{
	double stop_since = 0;
	for (long spins = 0;; spins++) {
		int done = 0;
		if (MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
			give_up(n, what, peer, "its connection failed");
		if (done)
			return 0;
		/* SIGTERM: mpirun ends the job (a node died; SIGKILL follows in 1 s).
		 * SIGINT reaches every node (Ctrl-C): each finishes its step and
		 * they stop together, however slow one of them is */
		if (n->stop && *n->stop == SIGTERM) {
			double t = now_s();
			if (!stop_since)
				stop_since = t;
			else if (t - stop_since > NODES_GRACE_S)
				give_up(n, what, peer,
				        "stopped (a node died, or the run was stopped)");
		}
		if (spins > 1000) { /* a long wait: yield the core */
			struct timespec ts = {0, 50000};
			nanosleep(&ts, NULL);
		}
	}
}

static int mpi_send(void *arg, int to, int tag, const void *buf, size_t bytes)
{
	struct tr_nodes *n = arg;
	if (bytes > (size_t)1 << 30)
		return -EMSGSIZE; /* the chain sends chunks */
	MPI_Request req;
	if (MPI_Isend(buf, (int)bytes, MPI_BYTE, to, tag, n->comm, &req) != MPI_SUCCESS)
		return -EIO;
	return wait_req(n, &req, "sending to", to);
}

static int mpi_recv(void *arg, int from, int tag, void *buf, size_t bytes)
{
	struct tr_nodes *n = arg;
	if (bytes > (size_t)1 << 30)
		return -EMSGSIZE;
	MPI_Request req;
	if (MPI_Irecv(buf, (int)bytes, MPI_BYTE, from, tag, n->comm, &req) != MPI_SUCCESS)
		return -EIO;
	return wait_req(n, &req, "waiting for", from);
}

int tr_nodes_init(int *argc, char ***argv, const volatile sig_atomic_t *stop, struct tr_nodes **out)
{
	*out = NULL;
	int provided = 0;
	if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
		return sp_error(-EIO, "MPI_Init_thread failed (was spill started by mpirun?)");
	if (provided < MPI_THREAD_MULTIPLE) {
		MPI_Finalize();
		return sp_error(-ENOTSUP,
		                "this MPI gives no MPI_THREAD_MULTIPLE (level %d): the "
		                "all-reduce sends from several threads",
		                provided);
	}
	struct tr_nodes *n = calloc(1, sizeof(*n));
	if (!n)
		return sp_error(-ENOMEM, "nodes: out of memory");
	MPI_Comm_rank(MPI_COMM_WORLD, &n->rt.rank);
	MPI_Comm_size(MPI_COMM_WORLD, &n->rt.size);
	MPI_Comm_dup(MPI_COMM_WORLD, &n->comm);
	MPI_Comm_dup(MPI_COMM_WORLD, &n->fail_comm);
	/* a dead peer is an error to report (wait_req), not MPI's abort banner */
	MPI_Comm_set_errhandler(n->comm, MPI_ERRORS_RETURN);
	n->rt.send = mpi_send;
	n->rt.recv = mpi_recv;
	n->rt.arg = n;
	n->stop = stop;
	n->agreed_first = -1;
	*out = n;
	return 0;
}

void tr_nodes_finish(struct tr_nodes *n, int failed)
{
	if (!n)
		return;
	if (failed) { /* the others may wait for this node: end the job */
		fflush(NULL);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	MPI_Comm_free(&n->comm);
	MPI_Comm_free(&n->fail_comm);
	free(n);
	MPI_Finalize();
}

int tr_nodes_any(struct tr_nodes *n, int flag)
{
	if (!n)
		return flag;
	int any = 0;
	MPI_Request req;
	if (MPI_Iallreduce(&flag, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &req) != MPI_SUCCESS)
		give_up(n, "agreeing with", -1, "the MPI call failed");
	wait_req(n, &req, "agreeing with", -1);
	return any;
}

int tr_nodes_all_failed(struct tr_nodes *n, double timeout_s)
{
	if (!n)
		return 1;
	int one = 1, all = 0;
	MPI_Request req;
	if (MPI_Iallreduce(&one, &all, 1, MPI_INT, MPI_SUM, n->fail_comm, &req) != MPI_SUCCESS)
		return 0;
	double t0 = now_s();
	for (;;) {
		int done = 0;
		if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
			return 0;
		if (done)
			return all == n->rt.size;
		if (now_s() - t0 > timeout_s)
			return 0; /* the others go on: the caller ends the job */
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
}

int tr_nodes_sum_doubles(struct tr_nodes *n, double *x, int count)
{
	if (!n)
		return 0;
	MPI_Request req;
	if (MPI_Iallreduce(MPI_IN_PLACE, x, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &req) !=
	    MPI_SUCCESS)
		return sp_error(-EIO, "nodes: MPI_Iallreduce of %d doubles failed", count);
	wait_req(n, &req, "gathering results from", -1);
	return 0;
}

/* MPI counts are ints: a large buffer goes in pieces of at most 1 GiB. */
#define PIECE ((size_t)1 << 30)

int tr_nodes_send(struct tr_nodes *n, int to, int tag, const void *buf, size_t bytes)
{
	for (size_t off = 0; off < bytes || !bytes; off += PIECE) {
		size_t len = bytes - off < PIECE ? bytes - off : PIECE;
		if (MPI_Send((const char *)buf + off, (int)len, MPI_BYTE, to, tag,
		             MPI_COMM_WORLD) != MPI_SUCCESS)
			return sp_error(-EIO, "nodes: sending %zu bytes to node %d failed", bytes,
			                to);
		if (!bytes)
			break;
	}
	return 0;
}

int tr_nodes_recv(struct tr_nodes *n, int from, int tag, void *buf, size_t bytes)
{
	for (size_t off = 0; off < bytes || !bytes; off += PIECE) {
		size_t len = bytes - off < PIECE ? bytes - off : PIECE;
		if (MPI_Recv((char *)buf + off, (int)len, MPI_BYTE, from, tag, MPI_COMM_WORLD,
		             MPI_STATUS_IGNORE) != MPI_SUCCESS)
			return sp_error(-EIO, "nodes: receiving %zu bytes from node %d failed",
			                bytes, from);
		if (!bytes)
			break;
	}
	return 0;
}

int tr_nodes_failed(struct tr_nodes *n, int failed, int *first)
{
	*first = failed ? 0 : -1;
	if (!n)
		return 0;
	int *all = calloc((size_t)n->rt.size, sizeof(*all));
	if (!all)
		return sp_error(-ENOMEM, "nodes: out of memory");
	MPI_Request req;
	if (MPI_Iallgather(&failed, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD, &req) !=
	    MPI_SUCCESS) {
		free(all);
		return sp_error(-EIO, "nodes: MPI_Iallgather failed");
	}
	wait_req(n, &req, "starting with", -1);
	*first = -1;
	for (int r = 0; r < n->rt.size && *first < 0; r++)
		if (all[r])
			*first = r;
	free(all);
	n->agreed_first = *first;
	return 0;
}

int tr_nodes_gather_hash(struct tr_nodes *n, uint64_t h, int *first_bad)
{
	*first_bad = -1;
	if (!n)
		return 0;
	uint64_t *all = calloc((size_t)n->rt.size, sizeof(*all));
	if (!all)
		return sp_error(-ENOMEM, "nodes: out of memory");
	MPI_Request req;
	if (MPI_Iallgather(&h, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD, &req) !=
	    MPI_SUCCESS) {
		free(all);
		return sp_error(-EIO, "nodes: MPI_Iallgather failed");
	}
	wait_req(n, &req, "comparing the launch with", -1);
	for (int r = 1; r < n->rt.size && *first_bad < 0; r++)
		if (all[r] != all[0])
			*first_bad = r;
	free(all);
	return 0;
}

#else /* no MPI: one process */

struct tr_nodes {
	struct rt_nodes rt;
};

int tr_nodes_init(int *argc, char ***argv, const volatile sig_atomic_t *stop, struct tr_nodes **out)
{
	*out = NULL;
	return sp_error(-ENOTSUP,
	                "spill was built without MPI and cannot run as %d processes "
	                "(apt-get install libopenmpi-dev openmpi-bin, then rebuild)",
	                tr_nodes_launched());
}

void tr_nodes_finish(struct tr_nodes *n, int failed)
{
}

int tr_nodes_any(struct tr_nodes *n, int flag)
{
	return flag;
}

int tr_nodes_gather_hash(struct tr_nodes *n, uint64_t h, int *first_bad)
{
	*first_bad = -1;
	return 0;
}

int tr_nodes_failed(struct tr_nodes *n, int failed, int *first)
{
	*first = failed ? 0 : -1;
	return 0;
}

int tr_nodes_sum_doubles(struct tr_nodes *n, double *x, int count)
{
	return 0;
}

int tr_nodes_all_failed(struct tr_nodes *n, double timeout_s)
{
	return 1;
}

int tr_nodes_send(struct tr_nodes *n, int to, int tag, const void *buf, size_t bytes)
{
	return sp_error(-ENOTSUP, "nodes: built without MPI");
}

int tr_nodes_recv(struct tr_nodes *n, int from, int tag, void *buf, size_t bytes)
{
	return sp_error(-ENOTSUP, "nodes: built without MPI");
}

#endif

int tr_nodes_agreed_failure(const struct tr_nodes *n)
{
#if SPILL_HAVE_MPI
	return n ? n->agreed_first : -1;
#else
	return -1;
#endif
}

void tr_nodes_set_checkpoint(struct tr_nodes *n, const char *path)
{
#if SPILL_HAVE_MPI
	if (n)
		n->last_ckpt = path;
#endif
}

const struct rt_nodes *tr_nodes_rt(const struct tr_nodes *n)
{
	return n ? &n->rt : NULL;
}

int tr_nodes_rank(const struct tr_nodes *n)
{
	return n ? n->rt.rank : 0;
}

int tr_nodes_size(const struct tr_nodes *n)
{
	return n ? n->rt.size : 1;
}

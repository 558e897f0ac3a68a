/* A two-rank NCCL job whose rank 1 joins some all-reduces late, against fake_libnccl.c (whose
 * kernels wait on the GPU for every rank's, through a board the ranks share): STEPS (300) steps
 * of 3 ms of "compute" and an all-reduce of 4 MiB; in every 20th step from step STEPS/2 + 10, in
 * the job's second half (7 late steps of 300), rank 1 is late by 30 ms: its host sleeps before the call (`nccl_straggler
 * host`, the default) or its GPU is busy with other work before the all-reduce while its host
 * calls on time (`nccl_straggler gpu`: only the GPU's times show it). Each step ends when its
 * all-reduce completed on the GPU. Prints the late steps' sequence numbers. */
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* fake_libnccl.c */
void fake_nccl_wait_idle(void);
void fake_nccl_gpu_busy(uint64_t ns);

static int on_gpu, steps = 300;

static void sleep_ms(long ms)
{
	struct timespec t = {ms / 1000, (ms % 1000) * 1000000};
	nanosleep(&t, NULL);
}

static int rank_main(int rank, ncclUniqueId id)
{
	static char buf[4 << 20];
	ncclComm_t comm = NULL;
	if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess)
		return 1;
	int first = steps / 2 + 10;
	for (int step = 0; step < steps; ++step) {
		sleep_ms(3);
		if (rank == 1 && step >= first && (step - first) % 20 == 0) {
			if (on_gpu)
				fake_nccl_gpu_busy(30000000);
			else
				sleep_ms(30);
		}
		ncclAllReduce(buf, buf, 1 << 20, ncclFloat32, ncclSum, comm, NULL);
		fake_nccl_wait_idle(); /* the step's synchronisation (loss.item()) */
	}
	ncclCommDestroy(comm);
	return 0;
}

int main(int argc, char **argv)
{
	on_gpu = argc > 1 && !strcmp(argv[1], "gpu");
	if (argc > 2)
		steps = atoi(argv[2]);
	if ((argc > 1 && !on_gpu && strcmp(argv[1], "host")) || steps < 20 || steps > 4000) {
		fprintf(stderr, "usage: nccl_straggler [host|gpu] [STEPS: 20 to 4000]\n");
		return 2;
	}
	char board[64];
	snprintf(board, sizeof(board), "/tmp/eacgm_nccl_board.%d", (int)getpid());
	unlink(board);
	setenv("FAKE_NCCL_BOARD", board, 1);
	ncclUniqueId id;
	for (size_t i = 0; i < sizeof(id.internal); ++i)
		id.internal[i] = (char)(11 + 3 * i);
	pid_t ranks[2];
	for (int r = 0; r < 2; ++r)
		if ((ranks[r] = fork()) == 0)
			_exit(rank_main(r, id));
	int failed = 0;
	for (int r = 0; r < 2; ++r) {
		int status = 0;
		waitpid(ranks[r], &status, 0);
		failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
	}
	unlink(board);
	printf("late steps:");
	for (int step = steps / 2 + 10; step < steps; step += 20)
		printf(" %d", step);
	printf("\n");
	return failed;
}

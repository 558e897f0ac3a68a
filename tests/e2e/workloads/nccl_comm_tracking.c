/* Creates communicators (rank 1 of 4, then a split) and runs collectives on them and on a
 * communicator created before tracing could see it. Runs against fake_libnccl.c. The unique id
 * is byte i = SEED + 7 i (SEED: the first argument, default 1), as a root rank's
 * ncclGetUniqueId would have sent every rank one. */
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	static char buf[1 << 20];
	ncclUniqueId id;
	int seed = argc > 1 ? atoi(argv[1]) : 1;
	for (size_t i = 0; i < sizeof(id.internal); ++i)
		id.internal[i] = (char)(seed + 7 * i);
	ncclComm_t world = NULL, half = NULL;
	if (ncclCommInitRank(&world, 4, id, 1) != ncclSuccess)
		return 1;
	for (int i = 0; i < 2; ++i)
		ncclAllReduce(buf, buf, 262144, ncclFloat32, ncclSum, world, NULL); /* 1 MiB */
	ncclAllGather(buf, buf, 65536, ncclFloat32, world, NULL);               /* 256 KiB each */
	if (ncclCommSplit(world, 0, 1, &half, NULL) != ncclSuccess)
		return 1;
	ncclAllReduce(buf, buf, 1024, ncclInt8, ncclMax, half, NULL);
	ncclAllReduce(buf, buf, 1024, ncclInt8, ncclMax, (ncclComm_t)(uintptr_t)0x999000, NULL);
	printf("nccl_comm_tracking: done\n");
	return 0;
}

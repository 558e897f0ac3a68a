/* NCCL operations for the gputime layer's NCCL half, against fake_libnccl.c (which drives the
 * profiler plugin NCCL_PROFILER_PLUGIN names, as NCCL would): rank 1 of 4 runs 40 all-reduces
 * of 1 MiB (float32), 1 all-gather of 256 KiB per rank, 3 sends of 4 KiB (float16) to rank 2,
 * then destroys its communicator. */
#include <nccl.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
	static char buf[1 << 20];
	ncclUniqueId id;
	for (size_t i = 0; i < sizeof(id.internal); ++i)
		id.internal[i] = (char)(3 + 5 * i);
	ncclComm_t world = NULL;
	if (ncclCommInitRank(&world, 4, id, 1) != ncclSuccess)
		return 1;
	for (int i = 0; i < 40; ++i)
		ncclAllReduce(buf, buf, 262144, ncclFloat32, ncclSum, world, NULL);
	ncclAllGather(buf, buf, 65536, ncclFloat32, world, NULL);
	for (int i = 0; i < 3; ++i)
		ncclSend(buf, 2048, ncclFloat16, 2, world, NULL);
	ncclCommDestroy(world);
	printf("nccl_gpu_collectives: done\n");
	return 0;
}

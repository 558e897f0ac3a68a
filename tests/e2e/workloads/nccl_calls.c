/* Calls each traced NCCL function a known number of times with known counts and datatypes,
 * against the real libnccl.so.2 (no GPU here: every call fails, the functions still run). The
 * communicator is NULL so that NCCL refuses the calls without touching one. */
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
	static char buf[1 << 16];
	cudaStream_t stream = (cudaStream_t)(uintptr_t)0x77;
	ncclComm_t comm = NULL;

	for (int i = 0; i < 3; ++i)
		ncclAllReduce(buf, buf, 1000, ncclFloat32, ncclSum, NULL, stream);
	ncclReduce(buf, buf, 500, ncclFloat64, ncclMax, 1, NULL, stream);
	for (int i = 0; i < 2; ++i)
		ncclBroadcast(buf, buf, 256, ncclInt8, 0, NULL, stream);
	ncclAllGather(buf, buf, 100, ncclBfloat16, NULL, stream);
	ncclReduceScatter(buf, buf, 64, ncclInt64, ncclAvg, NULL, stream);
	ncclGroupStart();
	ncclSend(buf, 10, ncclUint32, 3, NULL, stream);
	ncclRecv(buf, 20, ncclFloat16, 2, NULL, stream);
	ncclGroupEnd();
	ncclUniqueId id;
	memset(&id, 0, sizeof(id));
	ncclResult_t r = ncclCommInitRank(&comm, 4, id, 2);
	printf("nccl_calls: done, init returned %d\n", (int)r);
	return 0;
}

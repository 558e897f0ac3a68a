/* A stand-in libnccl.so.2 for the communicator test: without a GPU the real NCCL cannot create
 * a communicator, so it cannot show collectives being tied to their rank and size. This one
 * hands out communicators and accepts collectives, taking a known time for them. */
#include <nccl.h>
#include <stdint.h>
#include <time.h>

static uintptr_t next_comm = 0x5000;

static void take(long ns)
{
	struct timespec t = {0, ns};
	nanosleep(&t, NULL);
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
	(void)id, (void)nranks, (void)rank;
	*comm = (ncclComm_t)next_comm;
	next_comm += 0x100;
	return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
			   ncclConfig_t *config)
{
	(void)comm, (void)color, (void)key, (void)config;
	*newcomm = (ncclComm_t)next_comm;
	next_comm += 0x100;
	return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
			   ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
			   cudaStream_t stream)
{
	(void)sendbuff, (void)recvbuff, (void)count, (void)datatype, (void)op, (void)comm;
	(void)stream;
	take(2000000);
	return ncclSuccess;
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
			   ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
	(void)sendbuff, (void)recvbuff, (void)sendcount, (void)datatype, (void)comm, (void)stream;
	take(2000000);
	return ncclSuccess;
}

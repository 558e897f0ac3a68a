/* An LD_PRELOAD shim that makes a fraction of CUDA runtime calls slow, for the fault-injection
 * evaluation (eval/run cuda_latency) and its end-to-end test: latency injected into the real
 * libcudart's calls, as contention inside the runtime or driver would add it.
 *
 * The application's calls to the chosen functions bind to this library's wrappers, which pass
 * them on to libcudart (dlsym RTLD_NEXT). A delayed call is marked before it is passed on, and
 * the delay is slept *inside* libcudart's function: every runtime API call goes through
 * pthread_once (its lazy initialisation) through the PLT, which this library also defines. So a
 * tracer probing libcudart's own function sees the slow call, not one slow before it started.
 * A delay that found no pthread_once inside the call (another libcudart build) is not slept,
 * only counted, and said at exit.
 *
 * Environment:
 *   EACGM_DELAY_CALLS     functions to delay (comma-separated; default
 *                         cudaMemcpy,cudaLaunchKernel; also cudaMemcpyAsync,
 *                         cudaStreamSynchronize, cudaMalloc, cudaFree)
 *   EACGM_DELAY_MS        delay of a slow call, in milliseconds (default 10)
 *   EACGM_DELAY_FRACTION  share of the chosen calls made slow (default 0.01)
 *   EACGM_DELAY_FROM_S, EACGM_DELAY_TO_S
 *                         seconds after the process loaded this library between which calls
 *                         are delayed (default: from 0, never ending)
 *   EACGM_DELAY_SEED      seed of the choice (default 1)
 *   EACGM_DELAY_TRUTH     where to write, at exit, the ground truth: the slept intervals
 *                         (CLOCK_MONOTONIC ns) as {"fault", "layer", "intervals", "calls"} */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_DELAYS 100000

static struct {
	char calls[512];
	uint64_t delay_ns, from_ns, to_ns;
	double fraction;
	uint64_t seed;
	const char *truth;
} cfg;

static uint64_t loaded_ns;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t intervals[MAX_DELAYS][2];
static const char *interval_call[MAX_DELAYS];
static size_t delays;
static atomic_size_t missed;
static __thread uint64_t pending_ns; /* a delay due inside the call now running */
static __thread const char *pending_call;

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static double env_double(const char *name, double dflt)
{
	const char *v = getenv(name);
	return v && *v ? strtod(v, NULL) : dflt;
}

__attribute__((constructor)) static void init(void)
{
	loaded_ns = now_ns();
	const char *calls = getenv("EACGM_DELAY_CALLS");
	snprintf(cfg.calls, sizeof(cfg.calls), ",%s,", calls && *calls ? calls : "cudaMemcpy,cudaLaunchKernel");
	cfg.delay_ns = (uint64_t)(env_double("EACGM_DELAY_MS", 10) * 1e6);
	cfg.fraction = env_double("EACGM_DELAY_FRACTION", 0.01);
	cfg.from_ns = loaded_ns + (uint64_t)(env_double("EACGM_DELAY_FROM_S", 0) * 1e9);
	double to = env_double("EACGM_DELAY_TO_S", -1);
	cfg.to_ns = to < 0 ? UINT64_MAX : loaded_ns + (uint64_t)(to * 1e9);
	cfg.seed = (uint64_t)env_double("EACGM_DELAY_SEED", 1);
	cfg.truth = getenv("EACGM_DELAY_TRUTH");
}

/* Whether this call of `name` is to be slow: a chosen function, in the window, and drawn. */
static int chosen(const char *name)
{
	char key[64];
	snprintf(key, sizeof(key), ",%s,", name);
	if (!strstr(cfg.calls, key))
		return 0;
	uint64_t t = now_ns();
	if (t < cfg.from_ns || t >= cfg.to_ns)
		return 0;
	pthread_mutex_lock(&lock);
	cfg.seed = cfg.seed * 6364136223846793005ull + 1442695040888963407ull;
	double u = (double)(cfg.seed >> 11) / 9007199254740992.0;
	pthread_mutex_unlock(&lock);
	return u < cfg.fraction;
}

static void *next(const char *name)
{
	void *f = dlsym(RTLD_NEXT, name);
	if (!f) {
		fprintf(stderr, "cuda_delay: no %s after this library (is libcudart loaded?)\n", name);
		abort();
	}
	return f;
}

/* Runs inside libcudart's call: sleeps a pending delay there. */
int pthread_once(pthread_once_t *once, void (*routine)(void))
{
	static int (*real)(pthread_once_t *, void (*)(void));
	if (!real)
		real = (int (*)(pthread_once_t *, void (*)(void)))next("pthread_once");
	if (pending_ns) {
		uint64_t start = now_ns(), ns = pending_ns;
		pending_ns = 0;
		struct timespec d = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
		while (nanosleep(&d, &d) != 0) {
		}
		pthread_mutex_lock(&lock);
		if (delays < MAX_DELAYS) {
			intervals[delays][0] = start;
			intervals[delays][1] = now_ns();
			interval_call[delays] = pending_call;
			++delays;
		}
		pthread_mutex_unlock(&lock);
	}
	return real(once, routine);
}

#define BEGIN(name)                    \
	int slow = chosen(#name);          \
	if (slow) {                        \
		pending_ns = cfg.delay_ns;     \
		pending_call = #name;          \
	}
#define END()                          \
	if (slow && pending_ns) {          \
		pending_ns = 0;                \
		atomic_fetch_add(&missed, 1);  \
	}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	static cudaError_t (*real)(void *, const void *, size_t, enum cudaMemcpyKind);
	if (!real)
		real = (cudaError_t(*)(void *, const void *, size_t, enum cudaMemcpyKind))next("cudaMemcpy");
	BEGIN(cudaMemcpy)
	cudaError_t r = real(dst, src, count, kind);
	END()
	return r;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
			    cudaStream_t stream)
{
	static cudaError_t (*real)(void *, const void *, size_t, enum cudaMemcpyKind, cudaStream_t);
	if (!real)
		real = (cudaError_t(*)(void *, const void *, size_t, enum cudaMemcpyKind,
				       cudaStream_t))next("cudaMemcpyAsync");
	BEGIN(cudaMemcpyAsync)
	cudaError_t r = real(dst, src, count, kind, stream);
	END()
	return r;
}

cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shared,
			     cudaStream_t stream)
{
	static cudaError_t (*real)(const void *, dim3, dim3, void **, size_t, cudaStream_t);
	if (!real)
		real = (cudaError_t(*)(const void *, dim3, dim3, void **, size_t,
				       cudaStream_t))next("cudaLaunchKernel");
	BEGIN(cudaLaunchKernel)
	cudaError_t r = real(func, grid, block, args, shared, stream);
	END()
	return r;
}

/* What nvcc's <<<...>>> stubs call since CUDA 13: libcudart passes it on to cudaLaunchKernel,
 * so it is delayed as cudaLaunchKernel. */
cudaError_t __cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args,
			       size_t shared, cudaStream_t stream)
{
	static cudaError_t (*real)(const void *, dim3, dim3, void **, size_t, cudaStream_t);
	if (!real)
		real = (cudaError_t(*)(const void *, dim3, dim3, void **, size_t,
				       cudaStream_t))next("__cudaLaunchKernel");
	BEGIN(cudaLaunchKernel)
	cudaError_t r = real(func, grid, block, args, shared, stream);
	END()
	return r;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
	static cudaError_t (*real)(cudaStream_t);
	if (!real)
		real = (cudaError_t(*)(cudaStream_t))next("cudaStreamSynchronize");
	BEGIN(cudaStreamSynchronize)
	cudaError_t r = real(stream);
	END()
	return r;
}

cudaError_t cudaMalloc(void **ptr, size_t size)
{
	static cudaError_t (*real)(void **, size_t);
	if (!real)
		real = (cudaError_t(*)(void **, size_t))next("cudaMalloc");
	BEGIN(cudaMalloc)
	cudaError_t r = real(ptr, size);
	END()
	return r;
}

cudaError_t cudaFree(void *ptr)
{
	static cudaError_t (*real)(void *);
	if (!real)
		real = (cudaError_t(*)(void *))next("cudaFree");
	BEGIN(cudaFree)
	cudaError_t r = real(ptr);
	END()
	return r;
}

__attribute__((destructor)) static void done(void)
{
	size_t m = atomic_load(&missed);
	if (m)
		fprintf(stderr,
			"cuda_delay: %zu delays not injected: libcudart called no pthread_once inside "
			"the call\n",
			m);
	if (!cfg.truth)
		return;
	FILE *f = fopen(cfg.truth, "w");
	if (!f) {
		fprintf(stderr, "cuda_delay: cannot write %s\n", cfg.truth);
		return;
	}
	fprintf(f, "{\"fault\": \"cuda_latency\", \"layer\": \"cuda\", \"delay_ms\": %.3f, "
		   "\"missed\": %zu, \"intervals\": [",
		(double)cfg.delay_ns / 1e6, m);
	for (size_t i = 0; i < delays; ++i)
		fprintf(f, "%s[%llu, %llu]", i ? ", " : "", (unsigned long long)intervals[i][0],
			(unsigned long long)intervals[i][1]);
	fprintf(f, "], \"calls\": [");
	for (size_t i = 0; i < delays; ++i)
		fprintf(f, "%s\"%s\"", i ? ", " : "", interval_call[i]);
	fprintf(f, "]}\n");
	fclose(f);
}

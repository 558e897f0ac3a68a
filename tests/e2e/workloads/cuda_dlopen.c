/* Loads libcudart only after a delay, as PyTorch does, then calls it a known number of times:
 * the recorder must pick up a library that was not mapped when tracing started. A third
 * argument waits that many seconds between the dlopen and the calls. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef int (*malloc_fn)(void **, size_t);
typedef int (*free_fn)(void *);

int main(int argc, char **argv)
{
	int mallocs = argc > 1 ? atoi(argv[1]) : 50;
	int frees = argc > 2 ? atoi(argv[2]) : 20;
	int pause = argc > 3 ? atoi(argv[3]) : 0;
	sleep(1);
	void *lib = dlopen("libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "cuda_dlopen: %s\n", dlerror());
		return 3;
	}
	malloc_fn cuda_malloc = (malloc_fn)dlsym(lib, "cudaMalloc");
	free_fn cuda_free = (free_fn)dlsym(lib, "cudaFree");
	if (!cuda_malloc || !cuda_free)
		return 4;
	sleep(pause);
	void *p;
	for (int i = 0; i < mallocs; ++i)
		cuda_malloc(&p, 4096);
	for (int i = 0; i < frees; ++i)
		cuda_free(NULL);
	printf("cuda_dlopen: done\n");
	return 0;
}

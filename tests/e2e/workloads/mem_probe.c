/* Memory behaviour with known counts, for the host layer's memory metrics.
 *   mem_probe touch PAGES [MS]      touches PAGES fresh 4 KiB pages (no huge pages): one fault each;
 *                                   with MS, evenly over MS milliseconds without a system call
 *                                   (it spins between pages: it stays on its CPU)
 *   mem_probe read FILE [PROCS]     reads FILE through the page cache; with PROCS (a cgroup's
 *                                   cgroup.procs file) it first moves itself into that cgroup
 * Prints what it did. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t); /* the vDSO: no system call */
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int touch(long pages, long ms)
{
	size_t len = (size_t)pages * 4096;
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	/* base pages only: a huge page would take 512 pages in one fault */
	madvise(p, len, MADV_NOHUGEPAGE);
	double start = now_ms();
	for (long i = 0; i < pages; ++i) {
		while (ms > 0 && now_ms() - start < (double)ms * i / pages)
			;
		p[i * 4096] = 1;
	}
	printf("mem_probe: touched %ld pages\n", pages);
	return 0;
}

static int read_file(const char *path, const char *procs)
{
	if (procs) {
		FILE *f = fopen(procs, "w");
		if (!f || fprintf(f, "%d\n", getpid()) < 0 || fclose(f) != 0) {
			perror(procs);
			return 1;
		}
	}
	int fd = open(path, O_RDONLY);
	if (fd < 0) {
		perror(path);
		return 1;
	}
	static char buf[1 << 16];
	long long total = 0;
	ssize_t n;
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		total += n;
	close(fd);
	printf("mem_probe: read %lld bytes\n", total);
	return n < 0;
}

int main(int argc, char **argv)
{
	if ((argc == 3 || argc == 4) && !strcmp(argv[1], "touch"))
		return touch(atol(argv[2]), argc == 4 ? atol(argv[3]) : 0);
	if ((argc == 3 || argc == 4) && !strcmp(argv[1], "read"))
		return read_file(argv[2], argc == 4 ? argv[3] : NULL);
	fprintf(stderr, "usage: mem_probe touch PAGES [MS] | mem_probe read FILE [CGROUP_PROCS]\n");
	return 2;
}

/* Writes MIB mebibytes to PATH with O_DIRECT (straight to the block layer), then removes it.
 * Usage: direct_write PATH MIB */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: direct_write PATH MIB\n");
		return 2;
	}
	int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0600);
	void *buf = NULL;
	if (fd < 0 || posix_memalign(&buf, 4096, 1 << 20) != 0) {
		perror(argv[1]);
		return 1;
	}
	memset(buf, 0xab, 1 << 20);
	for (int i = 0; i < atoi(argv[2]); ++i)
		if (write(fd, buf, 1 << 20) != 1 << 20) {
			perror("write");
			return 1;
		}
	fsync(fd);
	close(fd);
	unlink(argv[1]);
	printf("direct_write: done\n");
	return 0;
}

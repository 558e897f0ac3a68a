/* Sends COUNT UDP datagrams of SIZE payload bytes to ADDR:PORT, paced so no socket buffer
 * overflows. Usage: udp_sender ADDR PORT COUNT SIZE */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: udp_sender ADDR PORT COUNT SIZE\n");
		return 2;
	}
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
	if (fd < 0 || inet_pton(AF_INET, argv[1], &to.sin_addr) != 1) {
		perror("socket");
		return 1;
	}
	int count = atoi(argv[3]), size = atoi(argv[4]), sent = 0;
	char *buf = calloc(1, size);
	for (int i = 0; i < count; ++i) {
		if (sendto(fd, buf, size, 0, (struct sockaddr *)&to, sizeof(to)) == size)
			sent++;
		if (i % 100 == 99)
			usleep(1000);
	}
	printf("udp_sender: sent %d\n", sent);
	return sent == count ? 0 : 1;
}

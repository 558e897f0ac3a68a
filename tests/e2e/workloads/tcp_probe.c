/* TCP with a known number of retransmits, for the host layer.
 *   tcp_probe recv PORT             accepts one connection and reads it to the end
 *   tcp_probe send ADDR PORT BYTES  sends BYTES, waits until the peer has them all, and prints
 *                                   the kernel's count of retransmitted segments (TCP_INFO) */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <linux/sockios.h>

static int receive(int port)
{
	int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	if (bind(ls, (struct sockaddr *)&a, sizeof(a)) || listen(ls, 1)) {
		perror("bind");
		return 1;
	}
	printf("tcp_probe: listening\n");
	fflush(stdout);
	int s = accept(ls, NULL, NULL);
	static char buf[1 << 16];
	long long total = 0;
	ssize_t n;
	while ((n = read(s, buf, sizeof(buf))) > 0)
		total += n;
	printf("tcp_probe: received %lld\n", total);
	return 0;
}

static int send_all(const char *addr, int port, long long bytes)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	inet_pton(AF_INET, addr, &a.sin_addr);
	for (int tries = 0; connect(s, (struct sockaddr *)&a, sizeof(a)) != 0; ++tries) {
		if (tries == 50) {
			perror("connect");
			return 1;
		}
		close(s);
		s = socket(AF_INET, SOCK_STREAM, 0);
		usleep(100000);
	}
	static char buf[1 << 16];
	for (long long left = bytes; left > 0;) {
		ssize_t n = write(s, buf, left < (long long)sizeof(buf) ? left : sizeof(buf));
		if (n <= 0) {
			perror("write");
			return 1;
		}
		left -= n;
	}
	/* Everything, the FIN included, sent and acknowledged, so no retransmit can come after
	 * the count below. No unacknowledged packets is not enough: after a loss the rest of the
	 * data may still wait in the send queue, unsent. The peer closes once it read to the end. */
	shutdown(s, SHUT_WR);
	while (read(s, buf, sizeof(buf)) > 0)
		;
	struct tcp_info info;
	socklen_t len = sizeof(info);
	for (int i = 0; i < 3000; ++i) {
		int queued = 0;
		len = sizeof(info);
		getsockopt(s, IPPROTO_TCP, TCP_INFO, &info, &len);
		if (ioctl(s, SIOCOUTQ, &queued) == 0 && queued == 0 && !info.tcpi_unacked)
			break;
		usleep(10000);
	}
	printf("tcp_probe: sent %lld retransmitted segments %u\n", bytes, info.tcpi_total_retrans);
	close(s);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "recv"))
		return receive(atoi(argv[2]));
	if (argc == 5 && !strcmp(argv[1], "send"))
		return send_all(argv[2], atoi(argv[3]), atoll(argv[4]));
	fprintf(stderr, "usage: tcp_probe recv PORT | tcp_probe send ADDR PORT BYTES\n");
	return 2;
}

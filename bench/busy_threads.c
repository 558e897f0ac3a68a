/* A busy 2-thread workload for the sampling benchmark: each thread computes for 1 ms and then
 * sleeps 100 us, so the scheduler switches it about 1,800 times a second, and sends a small UDP
 * datagram to a closed local port every 10 ms. Usage: busy_threads SECONDS */
#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double seconds;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *work(void *arg)
{
	(void)arg;
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(9)};
	inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
	char payload[512] = {0};
	volatile unsigned long sink = 0;
	double end = now() + seconds, next_send = now();
	while (now() < end) {
		double burst = now() + 0.001;
		while (now() < burst)
			sink++;
		usleep(100);
		if (now() >= next_send) {
			sendto(fd, payload, sizeof(payload), 0, (struct sockaddr *)&to, sizeof(to));
			next_send += 0.01;
		}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: busy_threads SECONDS\n");
		return 2;
	}
	seconds = atof(argv[1]);
	pthread_t t[2];
	for (int i = 0; i < 2; ++i)
		pthread_create(&t[i], NULL, work, NULL);
	for (int i = 0; i < 2; ++i)
		pthread_join(t[i], NULL);
	return 0;
}
